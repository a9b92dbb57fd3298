"""The scheduler's pods/s with a full KubeSchedulerConfiguration loaded, beside today's defaults in the same run.

Cluster: benchmarks.scheduler's 1 000 nodes × 8 GPUs with NodeMetrics and 5 000 running pods. The full profile is
examples/scheduler/koord-sched-config.yaml: every plugin koord-sched ships, with args (DeviceShare MostAllocated,
NodeResourcesFit's score, NodeResourcesFitPlus, ScarceResourceAvoidance, BalancedAllocation, Coscheduling …). The
extra score plugins have no vector form, so they run per feasible node: the ratio to the defaults is the price of
configuring them. Each (profile, pod kind) is run twice on a freshly built cluster, alternating, best run kept; the
loaded cluster is gc.freeze()d as in benchmarks.scheduler. Also printed: the time to read and check the file.
"""

from __future__ import annotations

import argparse
import copy
import gc
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import calibration
from benchmarks.gpucluster import bench_pod, node_objects
from scheduler.cli import profile
from scheduler.cluster import build_cluster
from scheduler.config import SchedulerConfig, load_config
from scheduler.framework import Scheduler

FULL = str(Path(__file__).resolve().parents[1] / "examples" / "scheduler" / "koord-sched-config.yaml")
KINDS = ("cpu", "whole-gpu", "gpu-rdma")


def run(objects: list[dict[str, Any]], cfg: SchedulerConfig, kind: str, pods: int) -> tuple[int, float, float, float]:
    cluster = build_cluster(copy.deepcopy(objects))
    sched = Scheduler(cluster, profile(cfg))
    sched.prepare()
    gc.collect()
    gc.freeze()
    lat, placed = [], 0
    start = time.perf_counter()
    for k in range(pods):
        t = time.perf_counter()
        placed += sched.schedule(bench_pod(f"{kind}-{k}", kind)).node is not None
        lat.append((time.perf_counter() - t) * 1000)
    wall = time.perf_counter() - start
    gc.unfreeze()
    return placed, pods / wall, statistics.median(lat), sorted(lat)[int(len(lat) * 0.99) - 1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--running", type=int, default=5000)
    ap.add_argument("--pods", type=int, default=200, help="pods placed per kind and profile")
    ap.add_argument("--config", default=FULL)
    args = ap.parse_args()
    t = time.perf_counter()
    for _ in range(20):
        full = load_config(args.config)
    load_ms = (time.perf_counter() - t) / 20 * 1000
    defaults = SchedulerConfig()
    objects: list[dict[str, Any]] = [o for i in range(args.nodes) for o in node_objects(i)]
    objects += [bench_pod(f"running-{j}", "cpu", f"node-{j % args.nodes:04d}") for j in range(args.running)]
    best: dict[tuple[str, str], tuple[int, float, float, float]] = {}
    for _ in range(2):
        for kind in KINDS:
            for label, cfg in (("defaults", defaults), ("full config", full)):
                r = run(objects, cfg, kind, args.pods)
                if (label, kind) not in best or r[1] > best[label, kind][1]:
                    best[label, kind] = r
    print(calibration.line())
    print(f"{args.nodes} nodes x 8 GPUs, {args.running} running pods; full config: {args.config}")
    print(f"  score plugins (weight): {', '.join(f'{n} ({full.weight(n)})' for n in full.points['score'])}")
    print(f"  reading and checking the file: {load_ms:.2f} ms")
    print(f"{'pod kind':<10} {'profile':<12} {'placed':>7} {'pods/s':>8} {'p50 ms':>8} {'p99 ms':>8}  "
          f"{'vs defaults (same run)':<24} goal: >650 pods/s (koord-scheduler)")
    for kind in KINDS:
        base = best["defaults", kind][1]
        for label in ("defaults", "full config"):
            placed, rate, p50, p99 = best[label, kind]
            ratio = "" if label == "defaults" else f"{rate / base:.0%} of the defaults"
            verdict = "met" if rate > 650 else "MISSED"
            print(f"{kind:<10} {label:<12} {placed:>7} {rate:>8.0f} {p50:>8.2f} {p99:>8.2f}  {ratio:<24} {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
