"""Reservation options upstream honours (pkg/scheduler/plugins/reservation, apis/extension/reservation.go):
reservation-order, reservation-restricted-options, and one allocate policy per node for Default-policy ones."""

from __future__ import annotations

import json
from typing import Any

import pytest

from apis.core.errors import InvalidInput
from apis.scheduling.reservation import (
    ANNOTATION_RESERVATION_ALLOCATED,
    ANNOTATION_RESERVATION_RESTRICTED_OPTIONS,
    LABEL_RESERVATION_ORDER,
    decode_reservation_order,
    decode_restricted_resources,
)
from scheduler.cli import simulate
from scheduler.cluster import build_cluster

CRD = "scheduling.koordinator.sh_reservations.yaml"
OWNER = {"app": "a"}


def node(name: str, cpu: int = 8) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"allocatable": {"cpu": str(cpu), "memory": "64Gi", "pods": "110"}}}


def owner(name: str, cpu: int, memory: str | None = None) -> dict[str, Any]:
    req = {"cpu": str(cpu), **({"memory": memory} if memory else {})}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": dict(OWNER)},
            "spec": {"containers": [{"name": "c", "resources": {"requests": req}}]}}


def reservation(name: str, cpu: int, node_name: str | None = None, *, memory: str | None = None,
                order: str | None = None, policy: str | None = None,
                annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """Available on `node_name` (Pending without one), allocateOnce false."""
    req = {"cpu": str(cpu), **({"memory": memory} if memory else {})}
    spec: dict[str, Any] = {"template": {"spec": {"containers": [{"name": "c", "resources": {"requests": req}}]}},
                            "owners": [{"labelSelector": {"matchLabels": OWNER}}], "allocateOnce": False}
    if policy:
        spec["allocatePolicy"] = policy
    meta: dict[str, Any] = {"name": name, "uid": f"uid-{name}"}
    if order is not None:
        meta["labels"] = {LABEL_RESERVATION_ORDER: order}
    if annotations:
        meta["annotations"] = annotations
    obj: dict[str, Any] = {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
                           "metadata": meta, "spec": spec}
    if node_name:
        obj["status"] = {"phase": "Available", "nodeName": node_name, "allocatable": req}
    return obj


def served_from(placement: dict[str, Any]) -> str | None:
    raw = placement["annotations"].get(ANNOTATION_RESERVATION_ALLOCATED)
    return json.loads(raw)["name"] if raw else None


def place(objects: list[dict[str, Any]], pods: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = simulate(build_cluster(objects), pods)
    return {p["pod"]: p for p in out["placements"]} | {f"resv/{r['name']}": r for r in out["reservations"]}


# ---- reservation-order (scoring.go findMostPreferredReservationByOrder, nominator.go) ----------------------------

def test_order_label_decoded_as_parseint() -> None:
    assert [decode_reservation_order(t) for t in ("3", "+3", "-2", "0", "", None, "1.5", "x", "9" * 30, "3 ")] == \
        [3, 3, -2, 0, 0, 0, 0, 0, 0, 0]


def test_the_smallest_order_on_a_node_serves_the_owner(validate_crd: Any) -> None:
    objs = [reservation("r-a", 4, "n1", order="5"), reservation("r-b", 4, "n1", order="2"),
            reservation("r-c", 4, "n1")]
    for o in objs:
        validate_crd(CRD, o)
    placed = place([node("n1", 16), *objs], [owner("p", 2)])
    assert served_from(placed["default/p"]) == "r-b"  # by name it would be r-a
    # order 0 or unreadable is no preference: the first by name, as without the label
    placed = place([node("n1", 16), reservation("r-a", 4, "n1", order="0"), reservation("r-b", 4, "n1", order="x")],
                   [owner("p", 2)])
    assert served_from(placed["default/p"]) == "r-a"


def test_the_node_holding_the_smallest_order_is_preferred_while_it_fits() -> None:
    objs = [node("n1", 16), node("n2", 16), node("n3", 16), reservation("r1", 4, "n1"),
            reservation("r2", 4, "n2", order="7"), reservation("r3", 4, "n3", order="3")]
    placed = place(objs, [owner("p", 2)])
    assert placed["default/p"]["node"] == "n3" and served_from(placed["default/p"]) == "r3"
    # n3 (5 cpu) cannot take an owner of 6: the next order, n2, not n1 by name
    objs[2] = node("n3", 5)
    placed = place(objs, [owner("p", 6)])
    assert placed["default/p"]["node"] == "n2" and served_from(placed["default/p"]) == "r2"


# ---- reservation-restricted-options (reservation_info.go NewReservationInfo, GetReservationRestrictedResources) -----

def test_restricted_options_decoded_as_json_unmarshal() -> None:
    assert decode_restricted_resources('{"resources":["cpu","memory"]}') == ("cpu", "memory")
    assert decode_restricted_resources('{"Resources":["cpu"],"other":1}') == ("cpu",)
    assert decode_restricted_resources("null") == decode_restricted_resources("{}") == ()
    for bad in ('{"resources":"cpu"}', '{"resources":[1]}', "[]", "{"):
        with pytest.raises(InvalidInput):
            decode_restricted_resources(bad)


def restricted(options: str | None) -> dict[str, Any]:
    return reservation("r", 4, "n1", memory="4Gi", policy="Restricted",
                       annotations={ANNOTATION_RESERVATION_RESTRICTED_OPTIONS: options} if options else None)


def test_restricted_options_restrict_only_the_listed_resources(validate_crd: Any) -> None:
    validate_crd(CRD, restricted('{"resources":["memory"]}'))
    pods = [owner("more-cpu", 6, "2Gi"), owner("more-memory", 1, "6Gi")]
    # memory listed: an owner may take cpu beyond the reservation's from the node, not memory
    placed = place([node("n1", 16), restricted('{"resources":["memory"]}')], pods)
    assert served_from(placed["default/more-cpu"]) == "r"
    assert placed["default/more-memory"]["node"] is None
    assert "Reservation(s) Insufficient memory" in placed["default/more-memory"]["reason"]
    # no options, or none naming a reserved resource: every reserved resource is restricted
    for options in (None, '{"resources":["nvidia.com/gpu"]}'):
        placed = place([node("n1", 16), restricted(options)], pods)
        assert placed["default/more-cpu"]["node"] is None
        assert "Reservation(s) Insufficient cpu" in placed["default/more-cpu"]["reason"]


def test_unreadable_restricted_options_leave_the_reservation_unmatchable() -> None:
    placed = place([node("n1", 16), restricted('{"resources":"cpu"}')], [owner("p", 1, "1Gi")])
    assert placed["default/p"]["node"] == "n1" and served_from(placed["default/p"]) is None
    # read only for Restricted ones (upstream NewReservationInfo): an Aligned one still serves
    aligned = reservation("r", 4, "n1", policy="Aligned",
                          annotations={ANNOTATION_RESERVATION_RESTRICTED_OPTIONS: '{"resources":"cpu"}'})
    placed = place([node("n1", 16), aligned], [owner("p", 1)])
    assert served_from(placed["default/p"]) == "r"


# ---- allocate policies (plugin.go Filter: ErrReasonReservationAllocatePolicyConflict) -------------------------------

@pytest.mark.parametrize(("placed_policy", "new_policy", "conflict"), [
    ("Aligned", None, True), (None, "Restricted", True), ("Restricted", None, True),
    (None, None, False), ("Aligned", "Restricted", False), ("Restricted", "Restricted", False),
])
def test_a_default_policy_reservation_shares_no_node_with_another_policy(
        placed_policy: str | None, new_policy: str | None, conflict: bool, validate_crd: Any) -> None:
    there, new = reservation("there", 2, "n1", policy=placed_policy), reservation("new", 2, policy=new_policy)
    validate_crd(CRD, there)
    validate_crd(CRD, new)
    placed = place([node("n1"), node("n2", 2), there, new], [])  # n1 is the freer: preferred unless it conflicts
    assert placed["resv/new"]["node"] == ("n2" if conflict else "n1")
    placed = place([node("n1"), there, new], [])
    if conflict:
        assert placed["resv/new"]["phase"] == "Pending"
        assert "node(s) reservation allocate policy conflict" in placed["resv/new"]["reason"]
    else:
        assert placed["resv/new"]["node"] == "n1"


def test_a_used_allocate_once_reservation_does_not_conflict() -> None:
    used = reservation("used", 2, "n1", policy="Aligned")
    used["spec"]["allocateOnce"] = True
    used["status"]["phase"] = "Succeeded"
    placed = place([node("n1"), node("n2"), used, reservation("new", 2)], [])
    assert placed["resv/new"]["node"] == "n1"


# ---- spec.preAllocation (transformer.go listPreAllocatableCandidates, plugin.go filterWithPreAllocatablePod) --------

def running(name: str, cpu: int, node_name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    p = owner(name, cpu)
    p["metadata"]["labels"] = dict(OWNER if labels is None else labels)
    p["spec"]["nodeName"] = node_name
    p["status"] = {"phase": "Running"}
    return p


def pre_allocating(name: str, cpu: int, policy: str | None = "Restricted", required: bool = False) -> dict[str, Any]:
    r = reservation(name, cpu, policy=policy)
    r["spec"]["preAllocation"] = True
    if required:
        r["spec"]["template"]["metadata"] = {"labels": {"scheduling.koordinator.sh/pre-allocation-required": "true"}}
    return r


def test_pre_allocation_takes_over_a_running_owner_on_a_full_node(validate_crd: Any) -> None:
    r = pre_allocating("r", 6)
    validate_crd(CRD, r)
    # n1: 2 cpu free beside the running owner (6); n2: 4 free. Only taking the owner over makes room for 6.
    objs = [node("n1"), node("n2"), running("p", 6, "n1"), running("other", 4, "n2", labels={}), r]
    placed = place(objs, [owner("after", 2)])
    assert placed["resv/r"]["node"] == "n1"
    assert placed["resv/r"]["owners"] == ["default/p"] and placed["resv/r"]["allocated"] == {"cpu": "6"}
    assert placed["resv/r"]["phase"] == "Available"  # allocateOnce false: it stays for more owners
    # the 6 reserved are the running owner's: n1 still has its 2 free cpu for another pod
    assert placed["default/after"]["node"] in ("n1", "n2")
    cluster = build_cluster(objs)
    simulate(cluster, [])
    pod = cluster.nodes["n1"].pods["default/p"]
    assert json.loads(pod["metadata"]["annotations"][ANNOTATION_RESERVATION_ALLOCATED]) == {"name": "r", "uid": "uid-r"}
    assert cluster.nodes["n1"].requested["cpu"] == 6000  # the owner, and nothing left reserved beside it


def test_pre_allocation_picks_the_owner_filling_it_most_and_skips_served_ones() -> None:
    served = running("a-served", 4, "n1")  # first by key: taken on the tie were it not served already
    served["metadata"]["annotations"] = {ANNOTATION_RESERVATION_ALLOCATED: '{"name":"elsewhere"}'}
    objs = [node("n1", 12), running("small", 2, "n1"), running("big", 4, "n1"), served, pre_allocating("r", 4)]
    placed = place(objs, [])
    assert placed["resv/r"]["node"] == "n1" and placed["resv/r"]["owners"] == ["default/big"]


def test_pre_allocation_is_refused_unless_restricted_and_honours_pre_allocation_required() -> None:
    for policy in (None, "Aligned"):
        placed = place([node("n1"), running("p", 2, "n1"), pre_allocating("r", 2, policy)], [])
        assert placed["resv/r"]["phase"] == "Pending"
        assert "reservation pre allocation is unsupported with current attributes" in placed["resv/r"]["reason"]
    # no owner to take over: placed from free resources unless pre-allocation is required
    placed = place([node("n1"), pre_allocating("r", 2)], [])
    assert placed["resv/r"]["node"] == "n1" and placed["resv/r"]["owners"] == []
    placed = place([node("n1"), pre_allocating("r", 2, required=True)], [])
    assert "no pod match reservation with pre allocation required" in placed["resv/r"]["reason"]
    # required: only the node whose owner qualifies (an owner bigger than the reservation does not)
    objs = [node("n1"), node("n2"), node("n3"), running("a", 2, "n1"), running("b", 4, "n2"),
            pre_allocating("r", 3, required=True)]
    placed = place(objs, [])
    assert placed["resv/r"]["node"] == "n1" and placed["resv/r"]["owners"] == ["default/a"]
