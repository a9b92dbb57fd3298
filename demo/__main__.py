"""`make demo`: the stack of demo/stack.py until Ctrl-C, with the URLs to open and a few queries to paste."""

from __future__ import annotations

import signal
import sys
import tempfile
import time
from pathlib import Path

from demo.stack import NODE_NAME, running


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with tempfile.TemporaryDirectory(prefix="koordlet-demo-") as tmp, running(Path(tmp), interval="5s") as s:
        print(f"""
koordlet demo: the agent on the simulated node {NODE_NAME} (8 GPUs, 4 RDMA NICs) plus this host's cgroups,
scraped by Prometheus with deploy/prometheus/scrape-config.yaml and rules.yaml (work dir {tmp}).

  agent metrics   {s.agent_url}/metrics
  Device CR       {s.agent_url}/apis/scheduling.koordinator.sh/v1alpha1/devices/{NODE_NAME}
  NodeMetric      {s.agent_url}/apis/slo.koordinator.sh/v1alpha1/nodemetrics/{NODE_NAME}
  Prometheus      {s.prometheus_url}/graph
  targets         {s.prometheus_url}/targets

Try in Prometheus (the first samples arrive within 10 s):
  koordlet_device_healthy
  koordlet_pod_gpu_core_usage_percent
  gpu:koordlet_gpu_memory_used:ratio
  namespace:koordlet_pod_cpu_usage_seconds:sum_rate
  koordlet_agent_loop_last_success_timestamp_seconds

Ctrl-C stops everything and removes the example pods' cgroups.""", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
