"""koord-descheduler cost: one LowNodeLoad round at 5 000 nodes × 30 pods with NodeMetrics, beside reading the same
objects from disk (JSON, as `simulate --cluster` reads them), CPU time and peak RSS.

Every tenth node is hot (30 pods using 1 core each on 32 cores: 94% against a 70% high threshold), the others low
(0.3 core each: 28% against a 40% low threshold), so a round classifies every node, confirms 500 sources, checks
every candidate against the targets' room and evicts until each source is back under 70%. CPU time: the round is
single-threaded; wall time would count the machine's other work.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from apis.core.metatime import parse_time
from scheduler.cluster import load_objects
from scheduler.descheduler.config.decode import parse_config
from scheduler.descheduler.runner import simulate

NOW = "2024-05-01T00:00:00Z"
GI = 1 << 30


def _objects(nodes: int, pods: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(nodes):
        name = f"node-{i}"
        alloc = {"cpu": "32", "memory": str(64 * GI), "pods": "110"}
        out.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {}},
                    "status": {"allocatable": alloc, "capacity": dict(alloc),
                               "conditions": [{"type": "Ready", "status": "True"}]}})
        hot = i % 10 == 0
        metrics = []
        for j in range(pods):
            pod = f"p-{i}-{j}"
            out.append({"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": pod, "namespace": "default", "uid": pod,
                                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                                          "name": f"rs-{j}", "uid": f"rs-{j}", "controller": True}]},
                        "spec": {"nodeName": name, "containers": [{"name": "c", "resources": {
                            "requests": {"cpu": "500m", "memory": str(GI // 2)}}}]},
                        "status": {"phase": "Running"}})
            metrics.append({"namespace": "default", "name": pod, "podUsage": {"resources": {
                "cpu": "1000m" if hot else "300m", "memory": str(GI // 2)}}})
        out.append({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": name},
                    "status": {"updateTime": NOW, "nodeMetric": {"nodeUsage": {"resources": {}}},
                               "podsMetric": metrics}})
    return out


CONFIG = {
    "apiVersion": "descheduler/v1alpha2", "kind": "DeschedulerConfiguration",
    "profiles": [{"name": "koord-descheduler", "plugins": {
        "balance": {"enabled": [{"name": "LowNodeLoad"}]},
        "evict": {"disabled": [{"name": "*"}], "enabled": [{"name": "DefaultEvictor"}]},
        "filter": {"disabled": [{"name": "*"}], "enabled": [{"name": "DefaultEvictor"}]}},
        "pluginConfig": [{"name": "LowNodeLoad", "args": {
            "lowThresholds": {"cpu": 40, "memory": 40}, "highThresholds": {"cpu": 70, "memory": 70},
            "anomalyCondition": {"consecutiveAbnormalities": 1}}}]}],
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pods", type=int, default=30)
    ns = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cluster.json"
        path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": _objects(ns.nodes, ns.pods)}))
        t = time.process_time()
        objects = load_objects(str(path))
        read_s = time.process_time() - t
    config = parse_config(CONFIG)
    t = time.process_time()
    result = simulate(objects, config, rounds=1, now=parse_time(NOW) or 0.0)
    round_s = time.process_time() - t
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"koord-descheduler, one LowNodeLoad round: {ns.nodes} nodes x {ns.pods} pods, NodeMetrics")
    print(f"{'read objects (CPU ms)':<34}{read_s * 1000:>10.0f}")
    print(f"{'one round (CPU ms)':<34}{round_s * 1000:>10.0f}")
    print(f"{'evictions':<34}{len(result['evictions']):>10}")
    print(f"{'peak RSS (MiB)':<34}{rss_mib:>10.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
