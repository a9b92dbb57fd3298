"""The exact kept filters (scheduler.interfaces, `exact_rows`: NodeResourcesFit, LoadAware) are not run again on a
node whose kept row is as of its current version: their rows equal their Filter's verdict on every node, the skip
happens only on such a node, and any change to the node since (placement, update, touch) brings the full Filter
back. Placements equal to the per-node cycle under changes: tests/scheduler/test_vector_kept.py."""

from __future__ import annotations

import copy
import random
import time
from typing import Any

import numpy as np

from scheduler.cli import profile
from scheduler.cluster import build_cluster
from scheduler.framework import Scheduler
from scheduler.interfaces import QuietPlugin
from scheduler.nodeindex import node_index
from scheduler.plugins.fit import NodeResourcesFit
from scheduler.plugins.loadaware import LoadAware

T0 = 1_800_000_000.0
CUSTOM = "scheduling.koordinator.sh/usage-thresholds"


def _objects(rng: random.Random, nodes: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(nodes):
        name = f"n{i:02d}"
        annotations = ({CUSTOM: '{"usageThresholds": {"cpu": 50}}'} if rng.random() < 0.2 else {})
        out.append({"kind": "Node", "metadata": {"name": name, "labels": {}, "annotations": annotations},
                    "spec": {}, "status": {"allocatable": {"cpu": str(rng.choice([8, 16, 32])), "memory": "64Gi",
                                                           "pods": str(rng.choice([3, 20]))}}})
        if rng.random() < 0.9:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(T0 - rng.uniform(0, 400)))
            out.append({"kind": "NodeMetric", "metadata": {"name": name}, "status": {
                "updateTime": stamp, "nodeMetric": {"nodeUsage": {"resources": {
                    "cpu": str(rng.randint(0, 30)), "memory": f"{rng.randint(1, 60)}Gi"}}}}})
    return out


def _pod(i: int, rng: random.Random) -> dict[str, Any]:
    prod = rng.random() < 0.3
    return {"kind": "Pod", "metadata": {"name": f"p{i}", "namespace": "t",
                                        "labels": {"koordinator.sh/priority-class": "koord-prod"} if prod else {}},
            "spec": {"priority": 9000 if prod else 0, "containers": [{"name": "c", "resources": {"requests": {
                "cpu": str(rng.choice([1, 2, 6])), "memory": f"{rng.choice([1, 8])}Gi"}}}]}}


def _sched(objects: list[dict[str, Any]], clock: list[float]) -> Scheduler:
    sched = Scheduler(build_cluster(copy.deepcopy(objects)), profile(None))
    la = sched.plugin("LoadAwareScheduling", LoadAware)
    assert la is not None
    la.now = lambda: clock[0]
    return sched


def test_exact_rows_equal_the_filter_on_every_node() -> None:
    for seed in range(4):
        rng = random.Random(seed)
        clock = [T0]
        sched = _sched(_objects(rng, 30), clock)
        index = node_index(sched.cluster)
        for i in range(40):
            pod = _pod(i, rng)
            for p in sched.profile.filters:
                if getattr(p, "exact_rows", False) is not True:
                    continue
                assert isinstance(p, NodeResourcesFit | LoadAware)
                if p.prefilter_shape(pod, index) is None:
                    continue
                rows = p.prefilter_rows(pod, index, slice(None)).tolist()
                few = [bool(p.prefilter_rows(pod, index, np.array([k], dtype=np.int64))[0]) for k in range(len(index))]
                verdicts = [p.filter(pod, n, sched.cluster) is None for n in index.nodes]
                assert rows == verdicts == few, (seed, i, p.name)
            sched.schedule(pod)
            clock[0] += 7  # metrics expire on the way


def test_the_chosen_node_skips_only_while_its_row_is_current() -> None:
    rng = random.Random(3)
    clock = [T0]
    sched = _sched(_objects(rng, 12), clock)
    ran: list[tuple[str, list[str]]] = []  # (node, the filters run on it) per filter_by call
    original = sched.filter_by

    def spied(pod: Any, node: Any, filters: Any = None) -> tuple[str, str] | None:
        ran.append((node.name, [f.name for f in (sched.profile.filters if filters is None else filters)]))
        return original(pod, node, filters)

    sched.filter_by = spied  # type: ignore[method-assign]
    exact = {"NodeResourcesFit", "LoadAwareScheduling"}
    pod = {"kind": "Pod", "metadata": {"name": "a", "namespace": "t"},
           "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}
    first = sched.schedule(copy.deepcopy(pod))  # a new shape: rows computed whole, at every node's version
    assert first.node is not None and ran[-1][0] == first.node and not exact & set(ran[-1][1])
    for k in range(4):  # the next pods of the shape: the chosen node's row is current too (refreshed if it moved)
        ran.clear()
        nxt = copy.deepcopy(pod)
        nxt["metadata"]["name"] = f"b{k}"
        placed = sched.schedule(nxt)
        assert placed.node is not None and ran[-1][0] == placed.node
        assert not exact & set(ran[-1][1])
        # the others still run, but those quiet about the pod (scheduler.quiet: no taints, affinity, ports here)
        index = node_index(sched.cluster)
        quiet = {f.name for f in sched.profile.filters
                 if isinstance(f, QuietPlugin) and f.quiet(nxt, index) is not None}
        assert {"DeviceShare", "NodeNUMAResource"} <= set(ran[-1][1])
        assert set(ran[-1][1]) == {f.name for f in sched.profile.filters} - exact - quiet
    index = node_index(sched.cluster)
    kept = sched.vectors.kept(pod, index)
    assert kept is not None
    i = int(np.argmax(kept.rank))
    assert [f.name for f in kept.filters_for(index, i) or ()] == [
        f.name for f in sched.profile.filters if f.name not in exact]
    index.touch(i)  # the node changed after its row was kept: every filter runs on it
    assert kept.filters_for(index, i) is None
    sched.cluster.nodes[index.names[i]].allocatable = {"cpu": 0}  # a reported change: the same
    kept = sched.vectors.kept(pod, index)  # refreshed: current again, and now failing
    assert kept is not None and kept.filters_for(index, i) is None  # masked out: never skipped
