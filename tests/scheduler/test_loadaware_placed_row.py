"""LoadAwareScheduling's row of the node a pod was just placed on, grown by that pod's estimate alone
(`LoadAware._grow_row`), equals the row read again from the node's load: twin schedulers, one with the shortcut
off, place the same pods (prod and batch, a DaemonSet's, a reservation's reserve pod) while NodeMetrics are replaced,
report pods before and after they land, move their updateTime in place, pods are deleted or bound by another
scheduler, the per-node Filter looks at a node between two placements and the clock expires metrics."""

from __future__ import annotations

import copy
import random
from typing import Any

import numpy as np
import pytest
from test_loadaware import NOW, node, nodemetric, pod, pod_metric, ts

from scheduler.cli import profile
from scheduler.cluster import build_cluster
from scheduler.framework import Scheduler
from scheduler.nodeindex import node_index
from scheduler.plugins.loadaware import LoadAware

PROD = {"koordinator.sh/priority-class": "koord-prod"}
FIELDS = ("has_metric", "capacity", "update_time", "node_usage", "node_delta", "node_estimated", "prod_usage",
          "prod_delta", "thresholds")


def _metric(name: str, rng: random.Random, age: float, future: list[str]) -> dict[str, Any]:
    """A NodeMetric reporting some batch pods, sometimes a prod one, and sometimes pods not placed yet."""
    reported = [pod_metric(f"x{k}", "300m", "1Gi", "koord-batch") for k in range(rng.randint(0, 2))]
    if rng.random() < 0.3:
        reported.append(pod_metric("x-prod", "500m", "1Gi", "koord-prod"))
    reported += [pod_metric(p, "200m", "1Gi", "koord-batch") for p in future]
    m = nodemetric(name, cpu=f"{rng.randint(1, 20)}", memory=f"{rng.randint(8, 60)}Gi", age=age,
                   pods=reported, system={"cpu": "300m", "memory": "1Gi"})
    m["status"]["updateTime"] = ts(NOW - age)
    m["metadata"]["name"] = name
    for p in m["status"].get("podsMetric") or []:
        p["namespace"] = "t"
    return m


def _objects(rng: random.Random) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(10):
        name = f"n{i}"
        annotations = {"scheduling.koordinator.sh/usage-thresholds": '{"usageThresholds":{"cpu":70}}'} \
            if i == 3 else {}
        out.append(node(name, cpu="32", memory="128Gi", annotations=annotations))
        if i != 7:  # n7 has no NodeMetric
            out.append(_metric(name, rng, rng.uniform(0, 150), [f"p{k}" for k in range(i, 60, 9)]))
        for j in range(rng.randint(0, 3)):
            out.append(pod(f"r{i}-{j}", "1", "2Gi", node_name=name, labels=PROD if j % 2 else {},
                           scheduled_at=NOW - rng.choice([5, 400])))
    for o in out:
        if o["kind"] == "Pod":
            o["metadata"]["namespace"] = "t"
    return out


def _incoming(rng: random.Random, i: int) -> dict[str, Any]:
    p = pod(f"p{i}", rng.choice(["1", "2", "4"]), rng.choice(["2Gi", "8Gi"]), labels=PROD if rng.random() < 0.4
            else {}, owner="DaemonSet" if rng.random() < 0.05 else None)
    p["metadata"]["namespace"] = "t"
    if rng.random() < 0.05:
        p["metadata"]["annotations"]["scheduling.koordinator.sh/reserve-pod"] = "true"
    return p


def _twins(objects: list[dict[str, Any]], clock: list[float], prod_args: bool) -> tuple[Scheduler, Scheduler]:
    pair = []
    for shortcut in (True, False):
        sched = Scheduler(build_cluster(copy.deepcopy(objects)), profile(None))
        la = sched.plugin("LoadAwareScheduling", LoadAware)
        assert la is not None
        la.now = lambda: clock[0]
        if prod_args:  # prod pods judged and scored by the prod usage row
            la.args.prod_usage_thresholds = {"cpu": 55, "memory": 90}
            la.args.score_according_prod_usage = True
        la.grow_placed_rows = shortcut
        pair.append(sched)
    return pair[0], pair[1]


def _mutate(sched: Scheduler, rng: random.Random, step: int, last: str | None) -> None:
    """One change outside a cycle, the same on both twins (rng seeded alike for each); half of them on the node
    the last pod went to, before the next cycle looks at it."""
    nodes = sched.cluster.nodes
    name = last if last is not None and rng.random() < 0.5 else sorted(nodes)[rng.randrange(len(nodes))]
    n = nodes[name]
    what = rng.randrange(7)
    if what == 0 and n.nodemetric is not None:  # a new NodeMetric, reporting some placed pods
        n.nodemetric = _metric(n.name, rng, rng.uniform(0, 60), [k.split("/")[1] for k in list(n.pods)[-2:]])
    elif what == 1 and n.nodemetric is not None:  # updateTime moved in place (not a new object)
        n.nodemetric["status"]["updateTime"] = ts(NOW - rng.uniform(0, 60) + step)
    elif what == 2 and n.pods:  # a pod deleted
        n.remove_pod(sorted(n.pods)[rng.randrange(len(n.pods))])
    elif what == 3:  # a pod bound by another scheduler
        other = pod(f"o{step}", "3", "4Gi", node_name=n.name, labels=PROD if rng.random() < 0.5 else {})
        other["metadata"]["namespace"] = "t"
        n.add_pod(other)
    elif what == 4:  # the per-node Filter reads the node's load between two placements
        la = sched.plugin("LoadAwareScheduling", LoadAware)
        assert la is not None
        la.filter(_incoming(rng, 10_000 + step), n, sched.cluster)
    elif what == 5:  # allocatable recomputed
        n.allocatable = {**n.allocatable, "cpu": n.allocatable["cpu"] - 4000}


PROBES = [pod("probe", "3", "12Gi"), pod("probe-prod", "5", "20Gi", labels=PROD)]


def _rows(sched: Scheduler) -> list[Any]:
    """What the plugin's kept rows answer for two probe pods: every row at once (numpy) and each row alone."""
    la = sched.plugin("LoadAwareScheduling", LoadAware)
    assert la is not None
    index = node_index(sched.cluster)
    out: list[Any] = []
    for p in PROBES:
        la.prefilter_shape(p, index), la.score_shape(p, index)
        out.append((la.prefilter_rows(p, index, slice(None)).tolist(), la.score_rows(p, index, slice(None)).tolist()))
        out.append([(la.prefilter_rows(p, index, np.array([i])).tolist(),
                     la.score_rows(p, index, np.array([i])).tolist()) for i in range(len(index))])
    return out


@pytest.mark.parametrize("seed", range(4))
def test_placed_rows_equal_rows_read_again(seed: int) -> None:
    rng = random.Random(seed)
    clock = [NOW]
    fast, slow = _twins(_objects(rng), clock, prod_args=seed % 2 == 1)
    la_fast, la_slow = fast.plugin("LoadAwareScheduling", LoadAware), slow.plugin("LoadAwareScheduling", LoadAware)
    assert la_fast is not None and la_slow is not None
    reads = {id(la_fast): 0, id(la_slow): 0}  # how often each read a node's load
    for la in (la_fast, la_slow):
        get = la.loads.get

        def counting(n: Any, get: Any = get, who: int = id(la)) -> Any:
            reads[who] += 1
            return get(n)

        setattr(la.loads, "get", counting)  # noqa: B010 (a counting wrapper on this instance only)
    for i in range(90):
        p = _incoming(rng, i)
        a, b = fast.schedule(copy.deepcopy(p)), slow.schedule(copy.deepcopy(p))
        assert (a.node, a.annotations, a.reason) == (b.node, b.annotations, b.reason), (seed, i)
        assert dict(a.scores) == dict(b.scores), (seed, i)
        if rng.random() < 0.3:  # a change before the next cycle looks at the node
            state = rng.getstate()
            for s in (fast, slow):
                rng.setstate(state)
                _mutate(s, rng, i, a.node)
        clock[0] += rng.choice([1, 1, 40])  # metrics expire as the clock moves
        assert _rows(fast) == _rows(slow), (seed, i)
    # the shortcut was taken (and fell back where it must: the rows agreed every time)
    assert reads[id(la_fast)] <= reads[id(la_slow)] - 5
    for name in fast.cluster.nodes:  # the loads left behind catch up when asked
        got, want = la_fast.loads.get(fast.cluster.nodes[name]), la_slow.loads.get(slow.cluster.nodes[name])
        assert (got is None) == (want is None)
        if got is not None and want is not None:
            assert {f: getattr(got, f) for f in FIELDS} == {f: getattr(want, f) for f in FIELDS}



@pytest.mark.parametrize("case", ["another pod added", "another pod removed", "a copy of the pod added instead",
                                  "a reserve pod placed"])
def test_a_change_that_is_not_the_reserved_pod_added(case: str) -> None:
    """Reserve for a pod, then one change to its node that is not that pod added last: the row is read again.
    "another pod added"/"another pod removed": the reserved pod is on the node already (its add changed nothing);
    "a copy ... instead": the node holds another object under the pod's key (e.g. the bound copy); "a reserve
    pod": a reservation's pod placed is not counted in the node's load."""
    objects = [node("n0", cpu="32", memory="128Gi"), nodemetric("n0", cpu="4", memory="16Gi", age=5),
               pod("r0", "1", "2Gi", node_name="n0", scheduled_at=NOW - 300)]
    clock = [NOW]
    rows = []
    for sched in _twins(objects, clock, prod_args=False):
        la = sched.plugin("LoadAwareScheduling", LoadAware)
        assert la is not None
        n = sched.cluster.nodes["n0"]
        mine = pod("p1", "2", "4Gi")
        if case == "a reserve pod placed":
            mine["metadata"]["annotations"]["scheduling.koordinator.sh/reserve-pod"] = "true"
            assert sched.schedule(mine).node == "n0"
            rows.append(_rows(sched))
            continue
        if case != "a copy of the pod added instead":
            assert sched.schedule(mine).node == "n0"
        la.prefilter_shape(pod("q", "1", "1Gi"), node_index(sched.cluster))  # the row as of now
        la.reserve(mine, n, sched.cluster)
        if case == "another pod added":
            n.add_pod(pod("o1", "6", "20Gi", node_name="n0"))
        elif case == "another pod removed":
            n.remove_pod("default/r0")
            assert next(reversed(n.pods)) == "default/p1"
        else:
            n.add_pod(pod("p1", "7", "30Gi", node_name="n0"))  # the same key, another object
        rows.append(_rows(sched))
    assert rows[0] == rows[1]


def test_a_pod_counted_without_its_entry_is_first_seen_alike() -> None:
    """NodeLoads counts a pod that is not reported by `PodEstimates.counted`, without making its entry: the same
    estimate and prod as the entry, and the same first-seen time when the entry is made later (a pod without
    PodScheduled is assumed when first counted)."""
    rng = random.Random(5)
    clock = [NOW]
    plain, lean = (LoadAware(now=lambda: clock[0]) for _ in range(2))
    pods = []
    for i in range(40):
        p = pod(f"c{i}", rng.choice(["1", "2"]), rng.choice(["1Gi", "4Gi"]), labels=PROD if rng.random() < 0.5 else {},
                scheduled_at=NOW - 30 if rng.random() < 0.5 else None,
                annotations={"scheduling.koordinator.sh/load-estimated-seconds-after-pod-scheduled": "60"})
        pods.append(p)
        if rng.random() < 0.2:
            plain.pods.incoming(p), lean.pods.incoming(p)  # the cycle's pod
        e = plain.pods.entry(p, f"default/c{i}")
        assert lean.pods.counted(p, f"default/c{i}") == (e.estimated, e.prod)
        clock[0] += 7
    for i, p in enumerate(pods):  # entries made later see the pods as first seen when counted
        assert lean.pods.entry(p, f"default/c{i}") == plain.pods.entry(p, f"default/c{i}")
