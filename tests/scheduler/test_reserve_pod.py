"""The reserve pod a Reservation is scheduled as carries what upstream's NewReservePod gives it (upstream
pkg/util/reservation reservation_test.go TestReservePod, restated), and plugins that select on it see it so."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from scheduler.cli import profile, simulate
from scheduler.cluster import build_cluster
from scheduler.framework import Scheduler
from scheduler.gang.model import pod_priority
from scheduler.reservation import preallocation
from scheduler.reservation.model import parse, reserve_pod
from scheduler.reservation.plugin import NAME, ReservationPlugin

RESV_CRD = "scheduling.koordinator.sh_reservations.yaml"
S = "scheduling.koordinator.sh"
MARK, NAME_OF, NODE_OF, PRE = f"{S}/reserve-pod", f"{S}/reservation-name", f"{S}/reservation-node", \
    f"{S}/is-pre-allocation"


def upstream_reservation() -> dict[str, Any]:
    """TestReservePod's Reservation: labels and annotations on both the object and its template, a template
    naming a node, a namespace and a scheduler."""
    return {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
            "metadata": {"name": "reserve-pod-0", "uid": "uid-0", "labels": {"test-label": "666"},
                         "annotations": {"test-annotation": "888"}},
            "spec": {"template": {
                "metadata": {"name": "reserve-pod-0", "namespace": "test",
                             "labels": {"test-label": "111", "other-label": "1"},
                             "annotations": {"test-annotation": "222", "other-annotation": "2"}},
                "spec": {"nodeName": "test-node", "schedulerName": "koord-scheduler",
                         "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}},
                "owners": [{"labelSelector": {"matchLabels": {"app": "x"}}}]}}


def test_reserve_pod_as_upstream(validate_crd: Callable[[str, dict[str, Any]], None]) -> None:
    r = upstream_reservation()
    validate_crd(RESV_CRD, r)
    pod = reserve_pod(r)
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["namespace"] == "test" and meta["uid"] == "uid-0"
    assert meta["labels"] == {"test-label": "666", "other-label": "1"}  # the object's over the template's
    assert meta["annotations"] == {"test-annotation": "888", "other-annotation": "2", MARK: "true",
                                   NAME_OF: "reserve-pod-0", NODE_OF: "test-node"}
    assert "nodeName" not in spec  # moved to reservation-node: no plugin takes it as bound before it is placed
    assert spec["schedulerName"] == "koord-scheduler" and spec["priority"] == 2**31 - 1
    # "custom priority": the Reservation's koordinator.sh/priority label when the template sets none
    r["metadata"]["labels"]["koordinator.sh/priority"] = "1000"
    assert reserve_pod(r)["spec"]["priority"] == 1000
    r["spec"]["template"]["spec"]["priority"] = 7
    assert reserve_pod(r)["spec"]["priority"] == 7


def test_defaults_and_pre_allocation_marker() -> None:
    r = upstream_reservation()
    tmpl = r["spec"]["template"]
    del tmpl["metadata"]["namespace"], tmpl["spec"]["nodeName"], tmpl["spec"]["schedulerName"]
    r["metadata"]["labels"]["koordinator.sh/priority"] = "not-a-number"
    pod = reserve_pod(r)
    assert pod["metadata"]["namespace"] == "default" and pod["spec"]["schedulerName"] == "default-scheduler"
    assert pod["spec"]["priority"] == 2**31 - 1 and NODE_OF not in pod["metadata"]["annotations"]
    assert PRE not in pod["metadata"]["annotations"]
    r["spec"]["preAllocation"] = True
    assert reserve_pod(r)["metadata"]["annotations"][PRE] == "true"


def node(name: str, cpu: int = 8, zone: str = "z") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "zone": zone}},
            "status": {"allocatable": {"cpu": str(cpu), "memory": "32Gi", "pods": "110"}}}


def reservation(name: str, labels: dict[str, str] | None = None, namespace: str | None = None,
                node_name: str | None = None, cpu: str = "2") -> dict[str, Any]:
    r = upstream_reservation()
    r["metadata"] = {"name": name, "uid": f"uid-{name}", "labels": dict(labels or {})}
    tmpl = r["spec"]["template"]
    tmpl["metadata"] = {"namespace": namespace} if namespace else {}
    tmpl["spec"] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
                    **({"nodeName": node_name} if node_name else {})}
    return r


def pod(name: str, anti: dict[str, str] | None = None, namespace: str = "default") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}
    if anti:
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": anti}, "topologyKey": "kubernetes.io/hostname"}]}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": {}},
            "spec": spec, "status": {"phase": "Pending"}}


@pytest.mark.parametrize(("namespace", "avoided"), [(None, True), ("team", False)])
def test_inter_pod_affinity_sees_the_reservations_labels_and_namespace(namespace: str | None,
                                                                       avoided: bool) -> None:
    """Required anti-affinity against `role: cache` keeps a pod of namespace default off the node of a
    Reservation whose object (not template) carries that label — when the reserve pod is in default too.
    n1 is the only node with room, for the reservation and for the pod."""
    cluster = build_cluster([node("n1"), node("n2", cpu=0)])
    sched = Scheduler(cluster, profile(None))
    resv = sched.plugin(NAME, ReservationPlugin)
    assert resv is not None
    resv.bind(cluster)
    placed = resv.schedule_reservation(sched, resv.add(reservation("cache", {"role": "cache"}, namespace)))
    assert placed is not None and placed.node == "n1"
    got = sched.schedule(pod("web", anti={"role": "cache"}))
    assert got.node == (None if avoided else "n1")


def test_template_node_name_pins_the_reservation() -> None:
    """A template naming a node: placed there though another node scores better, refused where it cannot fit
    there with upstream's reason."""
    cluster = build_cluster([node("big", 16), node("small", 4)])
    out = simulate(cluster, [reservation("pinned", node_name="small"),
                             reservation("toobig", node_name="small", cpu="8")])
    got = {r["name"]: r for r in out["reservations"]}
    assert got["pinned"]["node"] == "small"
    assert got["toobig"]["node"] is None
    assert "didn't match the nodeName specified by reservation" in got["toobig"]["reason"]


def test_reserve_pod_is_never_a_cheaper_victim() -> None:
    """Priority MaxInt32 (no template priority, no label): a placed reserve pod outranks any pod."""
    r = upstream_reservation()
    cluster = build_cluster([node("n1")])
    assert pod_priority(copy.deepcopy(reserve_pod(r)), cluster) == 2**31 - 1


@pytest.mark.parametrize(("template", "obj", "want"), [
    ("true", None, True), (None, "true", True), ("true", "false", False), (None, None, False)])
def test_pre_allocation_required_is_read_from_the_reserve_pod(template: str | None, obj: str | None,
                                                              want: bool) -> None:
    """pre-allocation-required as upstream reads it: the reserve pod's labels, the object's over the template's."""
    label = "scheduling.koordinator.sh/pre-allocation-required"
    r = reservation("pre")
    r["spec"]["preAllocation"] = True
    if template is not None:
        r["spec"]["template"]["metadata"]["labels"] = {label: template}
    if obj is not None:
        r["metadata"]["labels"][label] = obj
    assert preallocation.required(parse(r)) is want


def test_pod_topology_spread_counts_the_reserve_pod_by_the_reservations_labels() -> None:
    """maxSkew 1 over hostnames for `role: cache` pods: the reserve pod on the roomier n1 counts (its Reservation
    object carries the label), so the pod goes to n2 though n1 would score higher."""
    cluster = build_cluster([node("n1", cpu=64), node("n2")])
    sched = Scheduler(cluster, profile(None))
    resv = sched.plugin(NAME, ReservationPlugin)
    assert resv is not None
    resv.bind(cluster)
    placed = resv.schedule_reservation(sched, resv.add(reservation("cache", {"role": "cache"})))
    assert placed is not None and placed.node == "n1"
    spread = pod("replica")
    spread["metadata"]["labels"] = {"role": "cache"}
    spread["spec"]["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                                   "whenUnsatisfiable": "DoNotSchedule",
                                                   "labelSelector": {"matchLabels": {"role": "cache"}}}]
    assert sched.schedule(spread).node == "n2"
    assert sched.schedule(pod("plain")).node == "n1"  # what n1's room alone would choose
