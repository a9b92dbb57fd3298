"""`make demo`: the stack of demo/stack.py until Ctrl-C, with the URLs to open and a few queries to paste."""

from __future__ import annotations

import signal
import sys
import tempfile
import time
from pathlib import Path

from demo.stack import NODES, running


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with tempfile.TemporaryDirectory(prefix="koordlet-demo-") as tmp, running(Path(tmp), interval="5s") as s:
        agents = "\n".join(
            f"  {n.name:<15} {s.agent_urls[n.name]}/metrics (pods: {', '.join(n.pods)})\n"
            f"  {'':<15} {s.agent_urls[n.name]}/apis/scheduling.koordinator.sh/v1alpha1/devices/{n.name}"
            for n in NODES)
        print(f"""
koordlet demo: one agent per simulated GPU node ({", ".join(n.name for n in NODES)}: 4 RDMA NICs on l20-pcie,
the others' GPU telemetry from real nvidia-smi outputs) plus this host's cgroups for their pods (notebook-a and
notebook-b share one GPU on rtx4090x8), scraped by Prometheus with deploy/prometheus/scrape-config.yaml, rules.yaml
and dcgm-rules.yaml (work dir {tmp}).

{agents}
  Prometheus      {s.prometheus_url}/graph
  targets         {s.prometheus_url}/targets

Try in Prometheus (the first samples arrive within 10 s):
  koordlet_device_healthy
  koordlet_pod_gpu_core_usage_percent
  count by (node, gpu) (koordlet_pod_gpu_memory_used_bytes)
  koordlet_gpu_power_usage_watts
  koordlet_pod_rdma_port_data_received_bytes_total
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
