"""An owner's cycle lends its reservations' resources to their nodes and takes them back: a node left as it was gets
its version back (NodeIndex.revert), so per-node caches are reused — and anything that changed between two owner
cycles (a reservation consumed, added or expired, a node's pods) is still seen by the next cycle."""

from __future__ import annotations

import copy
import json
from typing import Any

import numpy as np

from scheduler import rowcache
from scheduler.cli import profile
from scheduler.cluster import Cluster, build_cluster
from scheduler.framework import Scheduler
from scheduler.interfaces import Placement
from scheduler.nodeindex import Tracker, node_index
from scheduler.reservation.model import FAILED
from scheduler.reservation.plugin import ReservationPlugin

ALLOCATED = "scheduling.koordinator.sh/reservation-allocated"
SPEC = "scheduling.koordinator.sh/numa-topology-spec"


def _node(name: str) -> list[dict[str, Any]]:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"}}}
    detail = [{"id": c, "core": c % 8, "socket": (c % 8) // 4, "node": (c % 8) // 4} for c in range(16)]
    zones = [{"name": f"node-{z}", "type": "Node", "resources": [
        {"name": "cpu", "capacity": "8", "allocatable": "8", "available": "8"},
        {"name": "memory", "capacity": "32Gi", "allocatable": "32Gi", "available": "32Gi"}]} for z in (0, 1)]
    nrt = {"apiVersion": "topology.node.k8s.io/v1alpha1", "kind": "NodeResourceTopology",
           "metadata": {"name": name, "annotations": {
               "node.koordinator.sh/cpu-topology": json.dumps({"detail": detail})}},
           "topologyPolicies": ["None"], "zones": zones}
    return [node, nrt]


def _resv(name: str, node: str, cpu: int, app: str, once: bool) -> dict[str, Any]:
    req = {"cpu": str(cpu), "memory": "4Gi"}
    return {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
            "metadata": {"name": name, "uid": f"uid-{name}"},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "resources": {"requests": req}}]}},
                     "owners": [{"labelSelector": {"matchLabels": {"app": app}}}], "allocateOnce": once},
            "status": {"phase": "Available", "nodeName": node, "allocatable": req}}


def _pod(name: str, cpu: int, app: str | None = None, numa: bool = False) -> dict[str, Any]:
    ann = {SPEC: '{"numaTopologyPolicy":"SingleNUMANode"}'} if numa else {}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": {"app": app} if app else {},
                         "annotations": ann},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": str(cpu), "memory": "1Gi"}}}]}}


def _objects() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(5):
        out += _node(f"n{i}")
    return [*out, _resv("ra", "n0", 4, "a", False), _resv("rb", "n1", 2, "b", True), _resv("rc", "n2", 4, "a", False)]


def _scheduler(cluster: Cluster) -> Scheduler:
    sched = Scheduler(cluster, profile(None))
    sched.plugin("Reservation", ReservationPlugin).bind(cluster)
    sched.prepare(freeze=False)
    return sched


def _fresh(cluster: Cluster, book: dict[str, Any]) -> Scheduler:
    """Plugins and a node index with no memory of earlier cycles, on the reservations as they are now."""
    cluster.__dict__.pop("_node_index", None)
    sched = _scheduler(cluster)  # binding loads the objects again (placing nothing new): their state is replaced
    sched.plugin("Reservation", ReservationPlugin).book = book
    return sched


def _state(cluster: Cluster) -> dict[str, Any]:
    return {n.name: (dict(n.requested), sorted(n.pods)) for n in cluster.nodes.values()}


def _outcome(p: Placement) -> tuple[Any, ...]:
    return p.node, p.reason, dict(p.annotations)


def test_owner_cycles_reuse_node_versions_and_see_every_change_in_between() -> None:
    kept_cluster, ref_cluster = build_cluster(copy.deepcopy(_objects())), build_cluster(copy.deepcopy(_objects()))
    kept = _scheduler(kept_cluster)
    ref_book = _scheduler(ref_cluster).plugin("Reservation", ReservationPlugin).book

    def both(event: Any) -> None:
        event(kept_cluster, kept.plugin("Reservation", ReservationPlugin).book)
        event(ref_cluster, ref_book)

    def step(p: dict[str, Any]) -> Placement:
        index = node_index(kept_cluster)
        before = {n.name: index.version(n) for n in kept_cluster.nodes.values()}
        got = kept.schedule(copy.deepcopy(p))
        want = _fresh(ref_cluster, ref_book).schedule(copy.deepcopy(p))
        assert _outcome(got) == _outcome(want)
        assert _state(kept_cluster) == _state(ref_cluster)
        fresh = _fresh(ref_cluster, ref_book)
        assert kept.plugin("Reservation", ReservationPlugin).report() == fresh.plugin("Reservation",
                                                                                      ReservationPlugin).report()
        after = {n.name: index.version(n) for n in kept_cluster.nodes.values()}
        # a node the cycle left as it was (every one but the chosen) has the version it had before
        assert {n for n in after if after[n] != before[n]} <= {got.node}
        return got

    def served_by(p: Placement) -> str | None:
        raw = p.annotations.get(ALLOCATED)
        return json.loads(raw)["name"] if raw else None

    assert served_by(step(_pod("a1", 1, "a"))) in ("ra", "rc")
    assert served_by(step(_pod("a2", 1, "a"))) in ("ra", "rc")
    assert served_by(step(_pod("x1", 1))) is None  # a non-owner sees reserved resources as used
    assert served_by(step(_pod("a3", 1, "a", numa=True))) in ("ra", "rc")

    # between two owner cycles: a foreign pod fills n2's free cpu — rc's reserved 4 cpu remain the owner's
    both(lambda c, _b: c.assume(_pod("big", 16 - 4 - 1), "n2"))
    assert served_by(step(_pod("a4", 1, "a"))) in ("ra", "rc")

    # a reservation added (already placed on n3) is offered to the next owner
    obj = _resv("rd", "n3", 4, "a", False)
    both(lambda c, b: b.update(_load_one(c, obj)))
    got = step(_pod("a5", 4, "a"))
    assert served_by(got) == "rd"  # the only one with 4 cpu left

    # expired between two owner cycles: never served from again
    def expire(c: Cluster, b: dict[str, Any]) -> None:
        r = b["rd"]
        r.phase = FAILED
        c.nodes["n3"].remove_pod(r.pod_key)

    both(expire)
    assert served_by(step(_pod("a6", 1, "a"))) in ("ra", "rc")

    # allocateOnce: consumed by its first owner, the next one is not served from it
    assert served_by(step(_pod("b1", 1, "b"))) == "rb"
    assert served_by(step(_pod("b2", 1, "b"))) is None
    for k in range(6):  # owners until the reservations are used up, then from the nodes' own resources
        step(_pod(f"a-more-{k}", 1, "a", numa=bool(k % 2)))


def _load_one(cluster: Cluster, obj: dict[str, Any]) -> dict[str, Any]:
    from scheduler.reservation.model import load

    return load(cluster, [copy.deepcopy(obj)])


def test_revert_gives_a_node_its_earlier_version_and_trackers_and_row_caches_follow() -> None:
    cluster = build_cluster(_node("n0")[:1] + _node("n1")[:1])
    index = node_index(cluster)
    n1 = cluster.nodes["n1"]
    t = Tracker()
    assert t.changes(index) is None
    v0 = index.version(n1)
    cluster.assume(_pod("p", 1), "n1")
    v1 = index.version(n1)
    assert v1 != v0 and t.changes(index) == [1]
    cache: dict[Any, Any] = {}
    computed: list[Any] = []

    def compute(rows: Any) -> Any:
        computed.append(rows)
        return np.array([cluster.nodes[n].requested.get("cpu", 0) for n in np.array(index.names)[rows]])

    assert rowcache.by_rows(cache, index.versions, ("k",), compute).tolist() == [0, 1000]

    n1.remove_pod("default/p")  # undone exactly: the state of v0
    index.revert(n1, v0)
    assert index.version(n1) == v0
    assert t.changes(index) == [1]  # it saw v1: a change
    pod = _pod("p", 1)
    cluster.assume(pod, "n1")
    index.revert(n1, v1)
    n1.remove_pod("default/p")
    index.revert(n1, v0)
    n1.add_pod(pod)
    index.revert(n1, v1)
    computed.clear()
    assert t.changes(index) == [1]  # from v0 to v1
    assert rowcache.by_rows(cache, index.versions, ("k",), compute).tolist() == [0, 1000] and not computed
    n1.remove_pod("default/p")
    index.revert(n1, v0)
    n1.add_pod(pod)
    index.revert(n1, v1)
    assert t.changes(index) == []  # back at the version it saw: nothing to recompute
    n1.changed()  # a real change: a number never given out before
    assert index.version(n1) not in (v0, v1) and t.changes(index) == [1]
