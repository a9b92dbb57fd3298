"""NUMA-aligned placement throughput: 1 000 nodes × 2 NUMA nodes × 8 GPUs, pods asking `SingleNUMANode`, with 10 % of
the nodes holding an Available Reservation beside the same cluster without them (issue #16).

Every node has a NodeResourceTopology (2 zones of 48 CPUs / 384Gi, a 96-CPU hyper-threaded cpu-topology), a Device
with GPUs 0-3 on NUMA 0 and 4-7 on NUMA 1 (benchmarks.scheduler's node) and 5 running pods. The Reservations hold
8 cpu / 32Gi each for pods labelled `app: reserved`; "non-owner" pods see them as used, "owner" pods (the label
set) are served from them ("served": placements carrying `reservation-allocated` of the reservation on their
node; every owner and no non-owner, or the row fails). Pods per kind are placed with the default profile
(NodeNUMAResource filtering and scoring) after `Scheduler.prepare()`; median of a few runs, each on a fresh
cluster. Goal: with reservations
>= 0.7x the pods/s of the same kind without them, measured in the same run (compare ratios: the machine is shared).
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import statistics
import sys
import time
from typing import Any

from benchmarks.gpucluster import node_objects
from scheduler.cli import profile
from scheduler.cluster import build_cluster
from scheduler.framework import Scheduler
from scheduler.reservation.plugin import ReservationPlugin

GOAL_RATIO = 0.7
SPEC = "scheduling.koordinator.sh/numa-topology-spec"
ALLOCATED = "scheduling.koordinator.sh/reservation-allocated"
KINDS = ("cpu", "whole-gpu", "gpu-lsr")


def nrt(name: str) -> dict[str, Any]:
    """2 NUMA nodes × 24 cores × 2 threads; CPU i and i+48 are siblings."""
    detail = [{"id": c, "core": c % 48, "socket": (c % 48) // 24, "node": (c % 48) // 24} for c in range(96)]
    zones = [{"name": f"node-{z}", "type": "Node", "resources": [
        {"name": "cpu", "capacity": "48", "allocatable": "48", "available": "48"},
        {"name": "memory", "capacity": "384Gi", "allocatable": "384Gi", "available": "384Gi"}]} for z in (0, 1)]
    return {"apiVersion": "topology.node.k8s.io/v1alpha1", "kind": "NodeResourceTopology",
            "metadata": {"name": name, "annotations": {
                "node.koordinator.sh/cpu-topology": json.dumps({"detail": detail}),
                "kubelet.koordinator.sh/cpu-manager-policy": json.dumps({"policy": "none"})}},
            "topologyPolicies": ["None"], "zones": zones}


def reservation(i: int, node: str) -> dict[str, Any]:
    requests = {"cpu": "8", "memory": "32Gi"}
    return {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
            "metadata": {"name": f"resv-{i:04d}", "uid": f"uid-resv-{i:04d}"},
            "spec": {"template": {"metadata": {"namespace": "bench"}, "spec": {"containers": [
                {"name": "c", "resources": {"requests": requests, "limits": requests}}]}},
                "owners": [{"labelSelector": {"matchLabels": {"app": "reserved"}}}], "allocateOnce": False},
            "status": {"phase": "Available", "nodeName": node, "allocatable": requests}}


def objects(nodes: int, running: int, reservations: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(nodes):
        node, device, metric = node_objects(i)
        name = node["metadata"]["name"]
        out += [node, device, metric, nrt(name)]
        for j in range(running):
            out.append(pod(f"running-{i}-{j}", "cpu", node=name, numa=False))
        if reservations and i % 10 == 0:
            out.append(reservation(i, name))
    return out


def pod(name: str, kind: str, node: str | None = None, numa: bool = True, owner: bool = False) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": "2", "memory": "8Gi"}
    labels: dict[str, str] = {"app": "reserved"} if owner else {}
    if kind in ("whole-gpu", "gpu-lsr"):
        requests["koordinator.sh/gpu"] = "100"
    if kind == "gpu-lsr":
        labels["koordinator.sh/qosClass"] = "LSR"  # a cpuset is chosen (FullPCPUs) on the GPUs' NUMA node
    p: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "bench", "labels": labels,
                     "annotations": {SPEC: '{"numaTopologyPolicy":"SingleNUMANode"}'} if numa else {}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": requests, "limits": requests}}]},
        "status": {"phase": "Running" if node else "Pending"}}
    if node:
        p["spec"]["nodeName"] = node
    return p


def one_run(objs: list[dict[str, Any]], kind: str, pods: int, owner: bool) -> tuple[int, float, int, float]:
    """(placed, wall s, placed pods served from a reservation: `reservation-allocated` naming the one on their node,
    wall s of the last three quarters of the pods) on a fresh cluster and fresh plugins."""
    cluster = build_cluster(copy.deepcopy(objs))
    sched = Scheduler(cluster, profile(None))
    resv = sched.plugin("Reservation", ReservationPlugin)
    if resv is not None:
        resv.bind(cluster)
    sched.prepare()
    placements = []
    start = time.perf_counter()
    warm = start
    for k in range(pods):
        if k == pods // 4:
            warm = time.perf_counter()
        placements.append(sched.schedule(pod(f"{kind}-{k}", kind, owner=owner)))
    end = time.perf_counter()
    wall = end - start
    on = {r["status"]["nodeName"]: r["metadata"]["name"] for r in objs if r.get("kind") == "Reservation"}
    served = sum(1 for p in placements if p.node is not None and p.node in on and json.loads(
        p.annotations.get(ALLOCATED, "{}")).get("name") == on[p.node])
    del sched, cluster
    gc.unfreeze()
    gc.collect()
    return sum(p.node is not None for p in placements), wall, served, end - warm


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--running", type=int, default=5, help="running pods per node")
    ap.add_argument("--pods", type=int, default=200, help="pods placed per kind and run")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    plain = objects(args.nodes, args.running, False)
    held = objects(args.nodes, args.running, True)
    print(f"\n{args.nodes} nodes x 2 NUMA x 8 GPUs, SingleNUMANode pods, {args.pods} pods per kind, median of "
          f"{args.repeat} runs; 'reserved': {args.nodes // 10} nodes hold an Available Reservation")
    print(f"{'pod kind':<10} {'pods':<10} {'placed':>7} {'served':>6} {'plain pods/s':>12} {'reserved':>9} "
          f"{'ratio':>6} {'goal':>6}      {'steady ratio':>12}")
    missed = False
    for kind in KINDS:
        for owner in (False, True):
            base = [one_run(plain, kind, args.pods, owner) for _ in range(args.repeat)]
            with_r = [one_run(held, kind, args.pods, owner) for _ in range(args.repeat)]
            rate = statistics.median(args.pods / w for _, w, _, _ in base)
            rate_r = statistics.median(args.pods / w for _, w, _, _ in with_r)
            ratio = rate_r / rate if rate else 0.0
            tail = args.pods - args.pods // 4
            steady = statistics.median(tail / w for *_, w in with_r) / statistics.median(tail / w for *_, w in base)
            ok = ratio >= GOAL_RATIO
            missed |= not ok
            placed = f"{min(p for p, *_ in base)}/{min(p for p, *_ in with_r)}"
            served = min(s for _, _, s, _ in with_r)
            honest = served == (args.pods if owner else 0)  # every owner from a reservation, no non-owner
            missed |= not honest
            print(f"{kind:<10} {'owners' if owner else 'non-owner':<10} {placed:>7} {served:>6} {rate:>12.0f} "
                  f"{rate_r:>9.0f} {ratio:>6.2f} {f'>={GOAL_RATIO}':>6} {'ok' if ok else 'MISS':<4} {steady:>12.2f}"
                  f"{'' if honest else ' (served from reservations: expected ' + str(args.pods if owner else 0) + ')'}")
    print("steady ratio: the same runs without their first quarter of pods (the first pods of a shape decide every "
          "node once), for information")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
