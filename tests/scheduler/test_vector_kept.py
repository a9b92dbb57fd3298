"""The vectors the framework keeps between cycles (scheduler.vectorcache) follow every change: placements, node
updates (labels, taints, allocatable, Device CR, NodeMetric), pod deletions and metrics expiring by the clock alone —
the kept path places every pod where the per-node cycle does, with the same scores, and recomputes only the rows of
the nodes that changed."""

from __future__ import annotations

import copy
import random
import time
from typing import Any

import numpy as np

from scheduler.cli import profile
from scheduler.cluster import build_cluster
from scheduler.deviceshare.plugin import DeviceShare
from scheduler.framework import Scheduler
from scheduler.interfaces import Placement
from scheduler.nodeindex import node_index
from scheduler.plugins.loadaware import LoadAware

T0 = 1_800_000_000.0  # the fake clock's start (NodeMetric update times are set relative to it)


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _device(name: str, gpus: int, healthy: float, rng: random.Random) -> dict[str, Any]:
    return {"kind": "Device", "metadata": {"name": name}, "spec": {"devices": [
        {"type": "gpu", "id": f"{name}-{m}", "minor": m, "health": rng.random() < healthy,
         "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "80Gi",
                       "koordinator.sh/gpu-memory-ratio": "100"},
         "topology": {"socketID": -1, "nodeID": m // 4, "pcieID": f"p{m // 2}", "busID": f"b{m}"}}
        for m in range(gpus)]}}


def _metric(name: str, age: float, cpu: int) -> dict[str, Any]:
    return {"kind": "NodeMetric", "metadata": {"name": name}, "status": {
        "updateTime": _stamp(T0 - age),
        "nodeMetric": {"nodeUsage": {"resources": {"cpu": str(cpu), "memory": "8Gi"}}}}}


def _objects(rng: random.Random, nodes: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(nodes):
        name = f"n{i:02d}"
        gpus = rng.choice([2, 4, 8])
        out.append({"kind": "Node", "metadata": {"name": name, "labels": {"zone": rng.choice("ab")}},
                    "spec": {}, "status": {"allocatable": {"cpu": "32", "memory": "128Gi", "pods": "20",
                                                           "koordinator.sh/gpu": str(100 * gpus)}}})
        out.append(_device(name, gpus, 0.9, rng))
        # metrics of every age: the 180 s expiry passes some of them while the pods are placed
        out.append(_metric(name, rng.uniform(0, 400), rng.randint(0, 28)))
    return out


SHAPES: list[dict[str, str]] = [
    {"cpu": "2", "memory": "4Gi", "koordinator.sh/gpu": "100"},
    {"cpu": "4", "memory": "8Gi", "koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"},
    {"cpu": "1", "memory": "2Gi"},
    {"cpu": "8", "memory": "16Gi", "koordinator.sh/gpu": "200"},
]


def _pod(i: int, shape: int) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": f"p{i}", "namespace": "t"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": dict(SHAPES[shape])}}]}}


def _each(sched: Scheduler, pod: dict[str, Any]) -> Placement:
    with sched.cycle(pod) as cycle:
        return cycle.run_each()


def _twins(objects: list[dict[str, Any]], clock: list[float]) -> tuple[Scheduler, Scheduler]:
    pair = []
    for _ in range(2):
        sched = Scheduler(build_cluster(copy.deepcopy(objects)), profile(None))
        la = sched.plugin("LoadAwareScheduling", LoadAware)
        assert la is not None
        la.now = lambda: clock[0]
        pair.append(sched)
    return pair[0], pair[1]


def _mutate(sched: Scheduler, step: int, rng: random.Random) -> None:
    """One change outside a cycle, the same on both twins (rng is seeded alike for each)."""
    nodes = sched.cluster.nodes
    name = sorted(nodes)[rng.randrange(len(nodes))]
    node = nodes[name]
    what = step % 6
    if what == 0 and node.pods:  # a pod is deleted
        node.remove_pod(sorted(node.pods)[0])
    elif what == 5:  # a pod terminated: DeviceShare frees its devices, the node does not report a change
        ds = sched.profile.by_name["DeviceShare"]
        held = sorted((n, k) for n, info in nodes.items() for k, p in info.pods.items() if "device-allocated" in str(p))
        if held:
            ds.pod_removed(*held[rng.randrange(len(held))])  # type: ignore[attr-defined]
    elif what == 1:  # relabelled and tainted
        obj = copy.deepcopy(node.obj)
        obj["metadata"]["labels"]["zone"] = "c"
        obj["spec"]["taints"] = [{"key": "spot", "effect": rng.choice(["NoSchedule", "PreferNoSchedule"])}]
        node.obj = obj
    elif what == 2:  # allocatable shrinks
        node.allocatable = {**node.allocatable, "cpu": node.allocatable["cpu"] // 2}
    elif what == 3:  # the Device CR is replaced: fewer healthy GPUs
        node.device = _device(name, 8, 0.5, rng)
    else:  # a fresh, busy NodeMetric
        node.nodemetric = _metric(name, 0, 30)


def test_kept_vectors_follow_every_change() -> None:
    for seed in range(3):
        rng = random.Random(seed)
        objects = _objects(rng, 24)
        clock = [T0]
        fast, slow = _twins(objects, clock)
        placed = unplaced = 0
        for i in range(140):
            pod = _pod(i, rng.choice([0, 0, 1, 2, 3]))  # shapes recur after other shapes changed nodes
            a, b = fast.schedule(copy.deepcopy(pod)), _each(slow, copy.deepcopy(pod))
            assert (a.node, a.annotations, a.reason) == (b.node, b.annotations, b.reason), (seed, i)
            assert dict(a.scores) == dict(b.scores), (seed, i)
            placed += a.node is not None
            unplaced += a.node is None
            if i % 7 == 6:
                state = rng.getstate()
                for s in (fast, slow):
                    rng.setstate(state)
                    _mutate(s, i // 7, rng)
            clock[0] += 3  # metrics expire as the clock moves
        assert placed and unplaced


def test_only_changed_rows_are_recomputed() -> None:
    objects = _objects(random.Random(5), 24)
    clock = [T0]
    sched, _ = _twins(objects, clock)
    ds = sched.profile.by_name["DeviceShare"]
    asked: list[Any] = []
    rows_of = ds.prefilter_rows  # type: ignore[attr-defined]

    def spy(pod: Any, index: Any, rows: Any) -> Any:
        asked.append(rows if isinstance(rows, slice) else rows.tolist())
        return rows_of(pod, index, rows)

    ds.prefilter_rows = spy  # type: ignore[attr-defined]
    first = sched.schedule(_pod(0, 0))
    second = sched.schedule(_pod(1, 0))
    sched.cluster.nodes["n03"].nodemetric = _metric("n03", 0, 1)
    sched.schedule(_pod(2, 0))
    pos = {name: i for i, name in enumerate(sched.cluster.nodes)}
    assert first.node is not None and second.node is not None
    assert asked[0] == slice(None)  # a new shape: every row
    assert asked[1] == [pos[first.node]]  # the next pod of that shape: the node the first one took
    assert asked[2] == sorted({pos[second.node], pos["n03"]})
    ds.pod_removed(first.node, "t/p0")  # type: ignore[attr-defined]  # devices freed, the node not told
    third = sched.schedule(_pod(3, 0))
    assert third.node is not None
    assert pos[first.node] in asked[3]
    kept = sched.vectors.kept(_pod(4, 0), sched.cluster.__dict__["_node_index"])
    assert kept is not None and bool(np.all(kept.rank[~kept.mask] == -1))


def _mixed_device(name: str, gpus: int, rdma: bool, rng: random.Random) -> dict[str, Any]:
    device = _device(name, gpus, 0.8, rng)
    if rdma:
        device["spec"]["devices"].append({"type": "rdma", "id": f"{name}-nic", "minor": 0, "health": True,
                                          "resources": {"koordinator.sh/rdma": "100"},
                                          "topology": {"socketID": -1, "nodeID": 0, "pcieID": "p0"}})
    return device


def test_device_rows_refilled_in_place_equal_a_fresh_fill() -> None:
    """DeviceShare's per-node arrays, refilled row by row as Device CRs gain and lose types and GPUs and pods take
    devices, answer every request shape as a DeviceShare filling them all at once from the same cluster — shapes
    asked before (their changed rows recomputed) and a new one each step (every row read from the arrays)."""
    rng = random.Random(11)
    objects = _objects(rng, 16)
    sched = Scheduler(build_cluster(copy.deepcopy(objects)), profile(None))
    ds = sched.profile.by_name["DeviceShare"]
    asks = [_pod(900 + k, s) for k, s in enumerate((0, 1, 3))]
    joint = _pod(999, 0)
    joint["spec"]["containers"][0]["resources"]["requests"]["koordinator.sh/rdma"] = "1"
    asks.append(joint)
    for step in range(40):
        if step % 2:
            name = sorted(sched.cluster.nodes)[rng.randrange(16)]
            sched.cluster.nodes[name].device = _mixed_device(name, rng.choice([0, 1, 2, 8]), rng.random() < 0.5, rng)
        else:
            sched.schedule(_pod(step, rng.choice([0, 1, 3])))
        index = node_index(sched.cluster)
        fresh = DeviceShare()
        new = _pod(800 + step, 1)  # a shape not asked before: answered from the arrays over every row
        new["spec"]["containers"][0]["resources"]["requests"]["koordinator.sh/gpu-memory-ratio"] = str(10 + step)
        for pod in [*asks, new]:
            kept = ds.prefilter_vector(pod, index), ds.score_vector(pod, index)  # type: ignore[attr-defined]
            whole = fresh.prefilter_vector(pod, index), fresh.score_vector(pod, index)
            assert kept[0] is not None and whole[0] is not None
            assert np.array_equal(kept[0], whole[0]) and np.array_equal(kept[1], whole[1]), step
