"""Placement throughput of the slim scheduler: 1 000 and 5 000 nodes × 8 GPUs with NodeMetrics and 5 running pods
per node.

Prints pods/s and p50/p99 per-pod latency per pod kind (CPU-only, whole GPU, shared GPU, GPU+RDMA joint) for the
default profile, median of a few runs each on a fresh cluster, after `Scheduler.prepare()` has built the plugins'
per-node state (reported as "prepare ms", like a scheduler's cache sync; "cold pods/s" counts it in: a cold start
placing the pods, index and caches built in the timed span; prepare itself pauses the cyclic GC and freezes the
loaded heap, nothing happens untimed between prepare and the first pod; the pods are placed under the GC thresholds
`koord-sched run` sets, scheduler.gcpolicy). RSS is the process's resident memory
with the cluster loaded. Goals (issue #15): CPU pods ahead of koord-scheduler's ~650 pods/s; GPU pods >= 1 300
pods/s (twice that) at 1 000 and 5 000 nodes; p99 < 10 ms; cold >= 650 pods/s at 1 000 nodes. The machine is
shared: compare the kinds and sizes of one run, and the load average printed before and after.

Then gang planning: `plan_jobs` for a 256-pod PodGroup of 8-GPU (whole-node) pods with MustGather at the spine layer,
on 1 024 nodes labelled 4 spines × 16 blocks × 16 nodes (ClusterNetworkTopology "default"). One node in every 16 of
spines 0, 1 and 3 already runs an 8-GPU pod, so only spine-2 can hold the whole job. Median of a few runs, each on a
freshly built cluster (prepare excluded, as above).
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import resource
import statistics
import sys
import time
from typing import Any

from benchmarks import calibration
from benchmarks.gpucluster import KINDS, bench_pod, node_objects
from scheduler.cli import profile
from scheduler.cluster import build_cluster
from scheduler.framework import Scheduler
from scheduler.gang.planner import plan_jobs
from scheduler.gcpolicy import scheduling_thresholds

SPINE, BLOCK = "network.topology.nvidia.com/spine", "network.topology.nvidia.com/block"
SPINES, BLOCKS_PER_SPINE = 4, 16
BUSY_SPINE_STRIDE = 16  # every 16th node of the other spines runs an 8-GPU pod


def _gang_objects(nodes: int, members: int) -> list[dict[str, Any]]:
    per_spine = max(1, nodes // SPINES)
    per_block = max(1, per_spine // BLOCKS_PER_SPINE)
    objects: list[dict[str, Any]] = [
        {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "ClusterNetworkTopology",
         "metadata": {"name": "default"},
         "spec": {"networkTopologySpec": [
             {"labelKey": [SPINE], "topologyLayer": "SpineLayer"},
             {"labelKey": [BLOCK], "parentTopologyLayer": "SpineLayer", "topologyLayer": "BlockLayer"},
             {"parentTopologyLayer": "BlockLayer", "topologyLayer": "NodeTopologyLayer"}]}},
        {"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "PodGroup",
         "metadata": {"name": "train", "namespace": "bench", "annotations": {
             "gang.scheduling.koordinator.sh/network-topology-spec": json.dumps(
                 {"gatherStrategy": [{"layer": "SpineLayer", "strategy": "MustGather"}]})}},
         "spec": {"minMember": members, "scheduleTimeoutSeconds": 300}}]
    for i in range(nodes):
        node, device, metric = node_objects(i)
        spine = min(i // per_spine, SPINES - 1)
        node["metadata"]["labels"] = {SPINE: f"spine-{spine}", BLOCK: f"block-{i // per_block}"}
        objects += [node, device, metric]
        if spine != 2 and i % BUSY_SPINE_STRIDE == 0:
            objects.append(_gang_pod(f"busy-{i}", None, node["metadata"]["name"]))
    return objects


def _gang_pod(name: str, index: int | None, node: str | None = None) -> dict[str, Any]:
    pod = bench_pod(name, "whole-gpu", node)
    pod["spec"]["containers"][0]["resources"]["requests"]["koordinator.sh/gpu"] = "800"
    pod["spec"]["containers"][0]["resources"]["limits"]["koordinator.sh/gpu"] = "800"
    if index is not None:
        pod["metadata"]["labels"] = {"pod-group.scheduling.sigs.k8s.io": "train"}
        pod["metadata"]["annotations"] = {"gang.scheduling.koordinator.sh/network-topology-index": str(index)}
    return pod


def gang_bench(nodes: int, members: int, runs: int) -> None:
    objects = _gang_objects(nodes, members)
    times: list[float] = []
    placed: list[str | None] = []
    for _ in range(runs):
        # fresh plugins too: DeviceShare carries in-flight reservations over to a new cluster of the same nodes;
        # topology-aware as `simulate` is (a live scheduler needs CoschedulingArgs.awareNetworkTopology: true)
        cluster = build_cluster(copy.deepcopy(objects))
        sched = Scheduler(cluster, profile(None, simulate=True))
        sched.prepare()
        pods = [_gang_pod(f"train-{k}", k) for k in range(members)]
        gc.collect()
        t = time.perf_counter()
        placements, _ = plan_jobs(sched, pods, enable_preemption=False)
        times.append((time.perf_counter() - t) * 1000)
        placed = [p.node for p in placements]
    spines = sorted({cluster.nodes[n].labels.get(SPINE, "?") for n in placed if n is not None})
    hosts = {n for n in placed if n is not None}
    outcome = (f"{len(hosts)} nodes on {', '.join(spines)}" if all(placed)
               else f"NOT placed ({sum(n is None for n in placed)}/{members} pending)")
    # only spine-2 has no busy nodes: MustGather must put the whole job there
    outcome += "  ok" if all(placed) and spines == ["spine-2"] else "  WRONG (expected spine-2 only)"
    print(f"\ngang: {members}-pod MustGather(SpineLayer) job of 8-GPU pods, {nodes} nodes in {SPINES} spines x "
          f"{BLOCKS_PER_SPINE} blocks")
    print(f"{'plan_jobs ms':>12} {'min ms':>8} {'runs':>5}  placement")
    print(f"{statistics.median(times):>12.0f} {min(times):>8.0f} {runs:>5}  {outcome}")


GOAL_RATE, GOAL_GPU_RATE, GOAL_COLD, GOAL_P99 = 650, 1300, 650, 10.0


def _rss_mib() -> float:
    """Resident set size now (MiB), from /proc/self/statm."""
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            pages = int(fh.read().split()[1])
    except (OSError, ValueError, IndexError):
        return float("nan")
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _one_run(objects: list[dict[str, Any]], kind: str, pods: int) -> tuple[int, float, float, list[float], float]:
    """(placed, wall s, prepare s, per-pod latencies ms, RSS MiB with the cluster loaded) on a fresh cluster and
    fresh plugins (DeviceShare reservations belong to one cluster)."""
    cluster = build_cluster(copy.deepcopy(objects))
    sched = Scheduler(cluster, profile(None))
    t = time.perf_counter()
    sched.prepare()  # pauses the cyclic GC and freezes the loaded heap (see Scheduler.prepare)
    prepare = time.perf_counter() - t
    lat, placed = [], 0
    start = time.perf_counter()
    with scheduling_thresholds():  # the cyclic GC's thresholds as `koord-sched run` sets them
        for k in range(pods):
            t = time.perf_counter()
            placed += sched.schedule(bench_pod(f"{kind}-{k}", kind)).node is not None
            lat.append((time.perf_counter() - t) * 1000)
    wall = time.perf_counter() - start
    rss = _rss_mib()
    del sched, cluster
    gc.unfreeze()
    gc.collect()  # between runs, untimed: the previous cluster's cycles go before the next one is built
    return placed, wall, prepare, lat, rss


def placement_table(nodes: int, running: int, pods: int, repeat: int) -> None:
    objects: list[dict[str, Any]] = [o for i in range(nodes) for o in node_objects(i)]
    objects += [bench_pod(f"running-{j}", "cpu", f"node-{j % nodes:04d}") for j in range(running)]
    names = [p.name for p in profile(None).plugins]
    rows = []
    for kind in KINDS:
        runs = [_one_run(objects, kind, pods) for _ in range(repeat)]
        rates = sorted(pods / r[1] for r in runs)
        colds = sorted(pods / (r[1] + r[2]) for r in runs)
        lat = sorted(x for r in runs for x in r[3])
        p99 = lat[int(len(lat) * 0.99) - 1]
        rows.append((kind, min(r[0] for r in runs), statistics.median(rates), rates[0], rates[-1],
                     statistics.median(colds), statistics.median(r[2] for r in runs) * 1000,
                     statistics.median(lat), p99, max(r[4] for r in runs)))
    print(f"\n{nodes} nodes x 8 GPUs, {running} running pods, {pods} pods per kind, median of {repeat} runs "
          f"(min-max); plugins: {', '.join(names)}")
    print(f"{'pod kind':<11} {'placed':>6} {'pods/s':>7} {'(min-max)':>11} {'goal':>6} {'p50 ms':>7} {'p99 ms':>7} "
          f"{'goal':>5} {'prepare ms':>10} {'cold pods/s':>11} {'goal':>5} {'RSS MiB':>8}")
    for kind, placed, rate, lo, hi, cold, prepare, p50, p99, rss in rows:
        goal = GOAL_GPU_RATE if kind != "cpu" else GOAL_RATE
        ok = "ok" if rate >= goal else "MISS"
        cold_goal = f">={GOAL_COLD}" if nodes <= 1000 else "-"
        cold_ok = "" if nodes > 1000 else (" ok" if cold >= GOAL_COLD else " MISS")
        print(f"{kind:<11} {placed:>6} {rate:>7.0f} {f'{lo:.0f}-{hi:.0f}':>11} {f'>={goal}':>6} {p50:>7.2f} "
              f"{p99:>7.2f} {'<10':>5} {prepare:>10.0f} {cold:>11.0f} {cold_goal:>5}{cold_ok} {rss:>8.0f}  "
              f"{ok}{'' if p99 < GOAL_P99 else ' p99 MISS'}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nodes", default="1000,5000", help="comma-separated cluster sizes (8 GPUs per node)")
    ap.add_argument("--running", type=int, default=5, help="running CPU pods per node")
    ap.add_argument("--pods", type=int, default=200, help="pods placed per kind")
    ap.add_argument("--repeat", type=int, default=3, help="runs per kind and size (median shown)")
    ap.add_argument("--gang-nodes", type=int, default=1024)
    ap.add_argument("--gang-pods", type=int, default=256, help="members of the MustGather job")
    ap.add_argument("--gang-runs", type=int, default=3, help="0 leaves the gang planning out")
    args = ap.parse_args()
    if min(args.running, args.pods, args.repeat, args.gang_nodes, args.gang_pods, args.gang_runs) < 0 or (
            args.pods < 1 or args.repeat < 1):
        ap.error("--pods and --repeat take a positive count; the others a count of 0 or more")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    print(calibration.line())
    for nodes in (int(n) for n in args.nodes.split(",") if n):
        placement_table(nodes, args.running * nodes, args.pods, args.repeat)
    if args.gang_runs > 0:
        gang_bench(args.gang_nodes, args.gang_pods, args.gang_runs)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
