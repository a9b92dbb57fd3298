"""Fine-grained CPU reservations (v1.6 release text: "fine-grained CPU and GPU resource reservations"): a Reservation
whose template binds CPUs holds its cpuset on the node; other pods never get those CPUs, owners get them first, and
what owners took leaves the reservation (upstream nodenumaresource/reservation.go RestoreReservation)."""

from __future__ import annotations

import json
from typing import Any

from test_numa import LSR, node, nrt, pod

from apis.extension.resource_status import resource_status
from scheduler.cli import simulate
from scheduler.cluster import build_cluster

SPEC = {"scheduling.koordinator.sh/resource-spec": '{"preferredCPUBindPolicy":"FullPCPUs"}'}
OWNER = {"app": "train"}
ALLOCATED = "scheduling.koordinator.sh/reservation-allocated"


def reservation(name: str, cpu: int, allocate_once: bool = False) -> dict[str, Any]:
    req = {"cpu": str(cpu), "memory": "4Gi"}
    return {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
            "metadata": {"name": name, "uid": f"uid-{name}"},
            "spec": {"template": {"metadata": {"labels": dict(LSR), "annotations": dict(SPEC)}, "spec": {
                "containers": [{"name": "c", "resources": {"requests": req, "limits": req}}]}},
                "owners": [{"labelSelector": {"matchLabels": OWNER}}], "allocateOnce": allocate_once}}


def lsr(name: str, cpu: int, owner: bool = False) -> dict[str, Any]:
    return pod(name, {"cpu": str(cpu), "memory": "1Gi"}, SPEC, {**LSR, **(OWNER if owner else {})})


def cpus(placement: dict[str, Any]) -> set[int]:
    return set(resource_status(placement["annotations"]).cpus())


def placed_reservation(name: str, cpuset: str, numa: int) -> dict[str, Any]:
    """An Available reservation koord-scheduler placed earlier, holding `cpuset` (its resource-status annotation)."""
    r = reservation(name, 4)
    r["metadata"]["annotations"] = {"scheduling.koordinator.sh/resource-status": json.dumps(
        {"cpuset": cpuset, "numaNodeResources": [{"node": numa, "resources": {"cpu": "4", "memory": "4Gi"}}]})}
    r["status"] = {"phase": "Available", "nodeName": "n1", "allocatable": {"cpu": "4", "memory": "4Gi"}}
    return r


def test_reserved_cpus_are_kept_from_others_and_given_to_owners(validate_crd: Any) -> None:
    # cores 4 and 5 (CPUs 4-5 and their siblings 12-13, NUMA node 1) are reserved; first-fit would start at core 0
    r = placed_reservation("r-cpus", "4-5,12-13", 1)
    validate_crd("scheduling.koordinator.sh_reservations.yaml", r)
    reserved = {4, 5, 12, 13}
    cluster = build_cluster([node("n1", 16, "128Gi"), nrt("n1"), r])
    out = simulate(cluster, [lsr("other", 4), lsr("owner-1", 2, owner=True), lsr("owner-2", 2, owner=True),
                             lsr("after", 8)])
    placed = {p["pod"]: p for p in out["placements"]}
    [resv] = out["reservations"]
    assert resv["owners"] == ["default/owner-1", "default/owner-2"]
    assert not cpus(placed["default/other"]) & reserved  # reserved CPUs are not another pod's
    assert cpus(placed["default/owner-1"]) | cpus(placed["default/owner-2"]) == reserved  # owners get them first
    for k in ("default/owner-1", "default/owner-2"):
        assert json.loads(placed[k]["annotations"][ALLOCATED])["name"] == "r-cpus"
    # every CPU is given once: other 4 + owners 4 (the reserved ones) + after 8 = 16
    every = [cpus(placed[k]) for k in ("default/other", "default/owner-1", "default/owner-2", "default/after")]
    assert sorted(c for s in every for c in s) == list(range(16))


def test_an_owner_takes_only_what_it_needs_and_the_rest_stays_reserved() -> None:
    cluster = build_cluster([node("n1", 16, "128Gi"), nrt("n1"), reservation("r-cpus", 4)])
    out = simulate(cluster, [lsr("owner", 2, owner=True), lsr("big", 12)])
    placed = {p["pod"]: p for p in out["placements"]}
    owner = cpus(placed["default/owner"])
    assert len(owner) == 2 and owner <= {0, 1, 8, 9}
    # 16 CPUs: the owner's 2, the 2 still reserved, 12 for `big` — which must not get the reserved two
    assert len(cpus(placed["default/big"])) == 12
    assert not cpus(placed["default/big"]) & {0, 1, 8, 9}
    reserve_pod = cluster.nodes["n1"].pods["default/reservation/r-cpus"]
    assert set(resource_status(reserve_pod["metadata"]["annotations"]).cpus()) == {0, 1, 8, 9} - owner


# ---- spec.allocatePolicy: Restricted (upstream reservation/plugin.go fitsReservation) -------------------------------

def cpu_reservation(name: str, cpu: int, policy: str | None, node_name: str = "n1") -> dict[str, Any]:
    req = {"cpu": str(cpu)}
    spec: dict[str, Any] = {"template": {"spec": {"containers": [{"name": "c", "resources": {"requests": req}}]}},
                            "owners": [{"labelSelector": {"matchLabels": OWNER}}], "allocateOnce": False}
    if policy:
        spec["allocatePolicy"] = policy
    return {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
            "metadata": {"name": name, "uid": f"uid-{name}"}, "spec": spec,
            "status": {"phase": "Available", "nodeName": node_name, "allocatable": req}}


def plain(name: str, cpu: int) -> dict[str, Any]:
    return pod(name, {"cpu": str(cpu)}, labels=dict(OWNER))


def test_restricted_owner_must_fit_what_the_reservation_has_left(validate_crd: Any) -> None:
    for policy in ("Restricted", "Aligned"):
        validate_crd("scheduling.koordinator.sh_reservations.yaml", cpu_reservation("r", 4, policy))
    # Aligned: an owner may take the reservation's 4 cpu and 2 more of the node's
    cluster = build_cluster([node("n1", 16, "64Gi"), cpu_reservation("r", 4, "Aligned")])
    [p] = simulate(cluster, [plain("owner", 6)])["placements"]
    assert p["node"] == "n1" and json.loads(p["annotations"][ALLOCATED])["name"] == "r"
    # Restricted: 6 > 4 left in it — the node fails with upstream's reservation reason, though it has room
    cluster = build_cluster([node("n1", 16, "64Gi"), cpu_reservation("r", 4, "Restricted")])
    out = simulate(cluster, [plain("big", 6), plain("fits", 3), plain("rest", 2)])
    placed = {p["pod"]: p for p in out["placements"]}
    assert placed["default/big"]["node"] is None
    assert placed["default/big"]["reason"] == "0/1 nodes are available: 1 Reservation(s) Insufficient cpu."
    assert json.loads(placed["default/fits"]["annotations"][ALLOCATED])["name"] == "r"
    assert placed["default/rest"]["node"] is None  # 3 of 4 taken: 2 no longer fit in it
    [resv] = out["reservations"]
    assert resv["allocated"] == {"cpu": "3"}


def test_restricted_owner_gets_only_the_reserved_cpus() -> None:
    """Reserved cores 4 and 5; a first owner takes one thread of each (SpreadByPCPUs), so what is left (12, 13) holds
    no whole core: a FullPCPUs owner of an Aligned reservation falls back to the node's free cores, a Restricted
    one is refused there."""
    spread = {"scheduling.koordinator.sh/resource-spec": '{"preferredCPUBindPolicy":"SpreadByPCPUs"}'}
    for policy, expect_placed in (("Aligned", True), ("Restricted", False)):
        r = placed_reservation("r-cpus", "4-5,12-13", 1)
        r["spec"]["allocatePolicy"] = policy
        cluster = build_cluster([node("n1", 16, "128Gi"), nrt("n1"), r])
        first = pod("first", {"cpu": "2", "memory": "1Gi"}, spread, {**LSR, **OWNER})
        out = simulate(cluster, [first, lsr("second", 2, owner=True)])
        placed = {p["pod"]: p for p in out["placements"]}
        assert cpus(placed["default/first"]) == {4, 5}
        if expect_placed:
            assert placed["default/second"]["node"] == "n1"
            assert not cpus(placed["default/second"]) & {4, 5, 12, 13}
        else:
            assert placed["default/second"]["node"] is None, placed["default/second"]
