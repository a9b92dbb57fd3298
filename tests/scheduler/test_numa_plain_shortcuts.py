"""NodeNUMAResource's shortcuts for a plain pod (no NUMA policy, no CPU binding, nothing invalid) — its kept shapes
reduced to what its rows read while no node carries a NUMA policy label, its Filter passing it at once on a node
with neither that label nor an amplification — place every pod as the whole path does: twin schedulers, one with
the shortcuts off, and the per-node cycle, while nodes gain and lose the policy label and the amplification ratio,
and plain, NUMA-aligned, CPU-binding and invalid pods come and go."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import pytest
from test_numa import LSR, nrt, pod

from scheduler.cli import profile
from scheduler.cluster import build_cluster
from scheduler.framework import Scheduler
from scheduler.interfaces import Placement
from scheduler.nodeindex import node_index
from scheduler.numa.plugin import NodeNUMAResource

POLICY = "node.koordinator.sh/numa-topology-policy"
RATIO = "node.koordinator.sh/resource-amplification-ratio"
NUMA_SPEC = "scheduling.koordinator.sh/numa-topology-spec"
PROD = {"koordinator.sh/priority-class": "koord-prod"}


def _node(name: str, rng: random.Random) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Node",
                           "metadata": {"name": name, "labels": {}, "annotations": {}},
                           "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}}}
    if rng.random() < 0.5:
        obj["metadata"]["annotations"][RATIO] = json.dumps({"cpu": rng.choice([1.5, 2.0])})
    return obj


def _objects(rng: random.Random) -> list[dict[str, Any]]:
    """Small nodes that fill up: two NUMA nodes of 4 CPUs and 8Gi each, most of them reporting it."""
    out: list[dict[str, Any]] = []
    for i in range(8):
        out.append(_node(f"n{i}", rng))
        if i != 7:
            out.append(nrt(f"n{i}", cores_per_numa=2, mem="8Gi"))
    return out


def _incoming(rng: random.Random, i: int) -> dict[str, Any]:
    kind = rng.random()
    requests = {"cpu": rng.choice(["1", "2", "500m"]), "memory": rng.choice(["1Gi", "3Gi", "6Gi"])}
    if kind < 0.65:
        return pod(f"p{i}", requests)  # plain
    if kind < 0.75:
        return pod(f"a{i}", requests, {NUMA_SPEC: json.dumps({"numaTopologyPolicy": "SingleNUMANode"})})
    if kind < 0.9:
        return pod(f"b{i}", {"cpu": "2", "memory": "1Gi"}, labels={**LSR, **PROD})  # binds CPUs
    return pod(f"x{i}", requests, {NUMA_SPEC: "not json"})  # invalid


def _mutate(sched: Scheduler, rng: random.Random) -> None:
    nodes = sched.cluster.nodes
    labelled = sorted(k for k, v in nodes.items() if POLICY in v.labels)
    what = rng.random()
    # phases with and without any policy label: a label put on, or one taken off again more often
    name = labelled[rng.randrange(len(labelled))] if labelled and what < 0.35 else \
        sorted(nodes)[rng.randrange(len(nodes))]
    n = nodes[name]
    obj = copy.deepcopy(n.obj)
    if what < 0.5:  # the NUMA policy label on or off
        if POLICY in obj["metadata"]["labels"]:
            del obj["metadata"]["labels"][POLICY]
        else:
            obj["metadata"]["labels"][POLICY] = rng.choice(["SingleNUMANode", "BestEffort"])
    elif what < 0.8:  # the amplification on or off
        if RATIO in obj["metadata"]["annotations"]:
            del obj["metadata"]["annotations"][RATIO]
        else:
            obj["metadata"]["annotations"][RATIO] = json.dumps({"cpu": 2.0})
    elif n.pods:  # a pod leaves
        n.remove_pod(sorted(n.pods)[0])
        return
    n.obj = obj


PROBES = [pod(f"probe-{k}", r) for k, r in enumerate(
    [{"cpu": c, "memory": m} for c in ("500m", "2", "3") for m in ("1Gi", "6Gi")]
    + [{"memory": "3Gi"}, {"memory": "6Gi"}, {}, {"example.com/widget": "1"}])]


def _keys_decide_rows(sched: Scheduler) -> None:
    """The kept hooks' contract (scheduler.interfaces): pods of equal shapes get equal rows on every node, and the
    rows are the whole vectors."""
    numa = sched.plugin("NodeNUMAResource", NodeNUMAResource)
    assert numa is not None
    index = node_index(sched.cluster)
    by_filter: dict[Any, list[bool]] = {}
    by_score: dict[Any, list[int]] = {}
    for p in PROBES:
        fshape, sshape = numa.prefilter_shape(p, index), numa.score_shape(p, index)
        mask = numa.prefilter_rows(p, index, slice(None)).tolist()
        scores = numa.score_rows(p, index, slice(None)).tolist()
        whole = numa.prefilter_vector(p, index)
        assert mask == ([True] * len(index) if whole is None else whole.tolist())
        assert scores == numa.score_vector(p, index).tolist()
        assert by_filter.setdefault(fshape, mask) == mask, fshape
        assert by_score.setdefault(sshape, scores) == scores, sshape


def _each(sched: Scheduler, p: dict[str, Any]) -> Placement:
    with sched.cycle(p) as cycle:
        return cycle.run_each()


@pytest.mark.parametrize("seed", range(4))
def test_plain_shortcuts_place_as_the_whole_path(seed: int) -> None:
    rng = random.Random(seed)
    objects = _objects(rng)
    scheds = [Scheduler(build_cluster(copy.deepcopy(objects)), profile(None)) for _ in range(3)]
    numa = [s.plugin("NodeNUMAResource", NodeNUMAResource) for s in scheds]
    for x in numa:
        assert x is not None
        if seed % 2:  # scored over memory alone: a pod's cpu is not among the resources scored
            x.resources = (("memory", 1),)
    numa[1].plain_shortcuts = False  # type: ignore[union-attr]
    shapes: list[Any] = []
    shape = NodeNUMAResource.prefilter_shape

    def recording(self: NodeNUMAResource, p: dict[str, Any], index: Any) -> Any:
        out = shape(self, p, index)
        if self is numa[0]:
            shapes.append(out)
        return out

    placed = 0
    with pytest.MonkeyPatch.context() as m:
        m.setattr(NodeNUMAResource, "prefilter_shape", recording)
        for i in range(110):
            p = _incoming(rng, i)
            a = scheds[0].schedule(copy.deepcopy(p))
            b = scheds[1].schedule(copy.deepcopy(p))
            c = _each(scheds[2], copy.deepcopy(p))
            for other in (b, c):
                assert (a.node, a.annotations, a.reason) == (other.node, other.annotations, other.reason), (seed, i)
                assert dict(a.scores) == dict(other.scores), (seed, i)
            placed += a.node is not None
            _keys_decide_rows(scheds[0])
            if rng.random() < 0.4:
                state = rng.getstate()
                for s in scheds:
                    rng.setstate(state)
                    _mutate(s, rng)
    assert placed >= 40
    assert sum(1 for x in shapes if isinstance(x, tuple) and x and x[0] == "plain") >= 10  # the shortcut was taken
