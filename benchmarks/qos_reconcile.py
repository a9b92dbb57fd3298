"""QoS reconcile cost with N pods × M containers as real cgroups (v1): first pass and steady state.

Steady state must write nothing (every file already holds its value) and cost ≤ 20 ms per pass. NodeSLO enables
CPU QoS for every class and the BE class resctrl/blkio blocks, so every feature plans for every pod.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from benchmarks.collection import SUBSYSTEMS, bench_node, have_real_cgroups, print_table
from koordlet.agent import Agent
from koordlet.config import Config, parse_feature_gates

NODESLO = {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "metadata": {"name": "bench"},
           "spec": {"resourceQOSStrategy": {
               "lsrClass": {"cpuQOS": {"enable": True}}, "lsClass": {"cpuQOS": {"enable": True}},
               "beClass": {"cpuQOS": {"enable": True}, "resctrlQOS": {"enable": True}}}}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pods", type=int, default=250)
    ap.add_argument("--containers", type=int, default=3)
    ap.add_argument("--passes", type=int, default=20)
    args = ap.parse_args()
    if not have_real_cgroups():
        return 2
    with bench_node(args.pods, args.containers, be_every=2) as (paths, pods_dir, tmp):
        for qos_dir in ("besteffort", "burstable"):  # the QoS dirs the planners address
            for sub in SUBSYSTEMS:
                (Path(paths.cgroup_root) / sub / "kubepods" / qos_dir).mkdir(parents=True, exist_ok=True)
        agent = Agent(Config(node_name="bench", paths=paths, pods_dir=str(pods_dir), state_dir=str(tmp / "s"),
                             feature_gates=parse_feature_gates("BlkIOReconcile=true")))
        agent.sync_pods()
        agent.set_nodeslo(NODESLO)
        qos = agent.qos_manager()
        t = time.perf_counter()
        first = qos.reconcile(agent.qos_state())
        first_ms = (time.perf_counter() - t) * 1000
        steady, writes = [], 0
        for _ in range(args.passes):
            t = time.perf_counter()
            results = qos.reconcile(agent.qos_state())
            steady.append((time.perf_counter() - t) * 1000)
            writes += sum(r.result == "written" for r in results)
    p50 = statistics.median(steady)
    rows = [
        ("pods × containers", f"{args.pods} × {args.containers}", "", ""),
        ("first pass: planned / written", f"{len(first)} / {sum(r.result == 'written' for r in first)}", "", ""),
        ("first pass (ms)", f"{first_ms:.1f}", "", ""),
        ("steady pass p50 (ms)", f"{p50:.1f}", "≤ 20", "ok" if p50 <= 20 else "MISS"),
        ("steady passes: files written", str(writes), "0", "ok" if writes == 0 else "MISS"),
    ]
    print_table(rows, value_width=12)
    return 0


if __name__ == "__main__":
    sys.exit(main())
