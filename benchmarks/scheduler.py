"""Placement throughput of the slim scheduler: 1 000 nodes × 8 GPUs with NodeMetrics and 5 000 running pods.

Prints pods/s and p50/p99 per-pod latency per pod kind (CPU-only, whole GPU, shared GPU) for the default profile, after
`Scheduler.prepare()` has built the plugins' per-node state (reported as "prepare ms", like a scheduler's cache sync;
"pods/s cold" counts it in). The loaded cluster is then gc.freeze()d, as a long-running scheduler would after
loading its cache, so cyclic GC does not rescan it during the measurement.
Goal (issue): ahead of koord-scheduler's ~650 pods/s at 1 000 nodes, p99 < 10 ms, on one core.

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
import statistics
import sys
import time
from typing import Any

from scheduler.cli import profile
from scheduler.cluster import build_cluster
from scheduler.framework import Scheduler
from scheduler.gang import plan_jobs

NOW = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _node(i: int) -> list[dict[str, Any]]:
    name = f"node-{i:04d}"
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {}},
            "status": {"allocatable": {"cpu": "96", "memory": "768Gi", "pods": "110",
                                       "koordinator.sh/gpu": "800", "koordinator.sh/gpu-core": "800",
                                       "koordinator.sh/gpu-memory-ratio": "800",
                                       "koordinator.sh/gpu-memory": "640Gi", "koordinator.sh/rdma": "200"}}}
    device = {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Device", "metadata": {"name": name},
              "spec": {"devices": [
                  {"type": "gpu", "id": f"GPU-{i:04d}-{m}", "minor": m, "health": True,
                   "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "80Gi",
                                 "koordinator.sh/gpu-memory-ratio": "100"},
                   "topology": {"socketID": -1, "nodeID": m // 4, "pcieID": f"pci0000:{m:02x}",
                                "busID": f"0000:{m:02x}:00.0"}} for m in range(8)] + [
                  # two ConnectX NICs with 4 VFs each, on the PCIe roots of GPUs 0 and 4
                  {"type": "rdma", "id": f"0000:{0x40 + m:02x}:00.0", "minor": k, "health": True,
                   "resources": {"koordinator.sh/rdma": "100"},
                   "topology": {"socketID": -1, "nodeID": m // 4, "pcieID": f"pci0000:{m:02x}",
                                "busID": f"0000:{0x40 + m:02x}:00.0"},
                   "vfGroups": [{"vfs": [{"minor": -1, "busID": f"0000:{0x40 + m:02x}:00.{v + 2}"}
                                         for v in range(4)]}]} for k, m in enumerate((0, 4))]}}
    metric = {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": name},
              "status": {"updateTime": NOW, "nodeMetric": {"nodeUsage": {"resources": {
                  "cpu": f"{(i % 40) + 5}", "memory": f"{(i % 300) + 50}Gi"}}}}}
    return [node, device, metric]


def _pod(name: str, kind: str, node: str | None = None) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": "2", "memory": "8Gi"}
    if kind == "whole-gpu":
        requests["koordinator.sh/gpu"] = "100"
    elif kind == "shared-gpu":
        requests.update({"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"})
    elif kind == "gpu-rdma":
        requests.update({"koordinator.sh/gpu": "100", "koordinator.sh/rdma": "1"})
    annotations = ({"scheduling.koordinator.sh/device-joint-allocate": '{"deviceTypes":["gpu","rdma"]}'}
                   if kind == "gpu-rdma" else {})
    pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": name, "namespace": "bench", "annotations": annotations},
                           "spec": {"containers": [{"name": "c", "resources": {"requests": requests,
                                                                               "limits": requests}}]},
                           "status": {"phase": "Running" if node else "Pending"}}
    if node:
        pod["spec"]["nodeName"] = node
    return pod


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
        node, device, metric = _node(i)
        spine = min(i // per_spine, SPINES - 1)
        node["metadata"]["labels"] = {SPINE: f"spine-{spine}", BLOCK: f"block-{i // per_block}"}
        objects += [node, device, metric]
        if spine != 2 and i % BUSY_SPINE_STRIDE == 0:
            objects.append(_gang_pod(f"busy-{i}", None, node["metadata"]["name"]))
    return objects


def _gang_pod(name: str, index: int | None, node: str | None = None) -> dict[str, Any]:
    pod = _pod(name, "whole-gpu", node)
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
        # fresh plugins too: DeviceShare carries in-flight reservations over to a new cluster of the same nodes
        filters, scorers, reservers = profile(None)
        cluster = build_cluster(copy.deepcopy(objects))
        sched = Scheduler(cluster, filters, scorers, reservers)
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
    print(f"\ngang: {members}-pod MustGather(SpineLayer) job of 8-GPU pods, {nodes} nodes in {SPINES} spines x "
          f"{BLOCKS_PER_SPINE} blocks")
    print(f"{'plan_jobs ms':>12} {'min ms':>8} {'runs':>5}  placement")
    print(f"{statistics.median(times):>12.0f} {min(times):>8.0f} {runs:>5}  {outcome}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--running", type=int, default=5000)
    ap.add_argument("--pods", type=int, default=200, help="pods placed per kind")
    ap.add_argument("--gang-nodes", type=int, default=1024)
    ap.add_argument("--gang-pods", type=int, default=256, help="members of the MustGather job")
    ap.add_argument("--gang-runs", type=int, default=3)
    args = ap.parse_args()
    objects: list[dict[str, Any]] = [o for i in range(args.nodes) for o in _node(i)]
    objects += [_pod(f"running-{j}", "cpu", f"node-{j % args.nodes:04d}") for j in range(args.running)]
    filters, scorers, reservers = profile(None)  # for the header; each kind gets fresh plugins below
    rows = []
    for kind in ("cpu", "whole-gpu", "shared-gpu", "gpu-rdma"):
        # fresh plugins per run: plugin state (DeviceShare reservations) belongs to one cluster
        filters, scorers, reservers = profile(None)
        cluster = build_cluster(copy.deepcopy(objects))
        sched = Scheduler(cluster, filters, scorers, reservers)
        t = time.perf_counter()
        sched.prepare()
        prepare = time.perf_counter() - t
        gc.collect()
        gc.freeze()
        lat, placed = [], 0
        start = time.perf_counter()
        for k in range(args.pods):
            t = time.perf_counter()
            placed += sched.schedule(_pod(f"{kind}-{k}", kind)).node is not None
            lat.append((time.perf_counter() - t) * 1000)
        wall = time.perf_counter() - start
        p99 = sorted(lat)[int(len(lat) * 0.99) - 1]
        gc.unfreeze()
        rows.append((kind, placed, args.pods / wall, args.pods / (wall + prepare), prepare * 1000,
                     statistics.median(lat), p99))
    names = dict.fromkeys([f.name for f in filters] + [s.name for s in scorers] + [r.name for r in reservers])
    print(f"{args.nodes} nodes x 8 GPUs, {args.running} running pods; plugins: {', '.join(names)}")
    print(f"{'pod kind':<12} {'placed':>7} {'pods/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'prepare ms':>11} "
          f"{'pods/s cold':>12}  goal: >650 pods/s, p99 <10 ms")
    for kind, placed, rate, cold, prepare, p50, p99 in rows:
        print(f"{kind:<12} {placed:>7} {rate:>8.0f} {p50:>8.2f} {p99:>8.2f} {prepare:>11.0f} {cold:>12.0f}")
    gang_bench(args.gang_nodes, args.gang_pods, args.gang_runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
