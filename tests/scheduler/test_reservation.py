"""Reservation: upstream-derived cases (plugin_test.go, reservation.go) and the v0.7/v1.6 release snippets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.cli import main, simulate
from scheduler.cluster import build_cluster
from scheduler.config import parse_config
from scheduler.config.repair import load_text
from scheduler.reservation.matching import exact_match

from chartconfig import in_chart

SEEDS = Path(__file__).resolve().parents[3] / "shared" / "seeds"
if not SEEDS.exists():
    SEEDS = Path("/work/shared/seeds")
CFG_SEED = Path(__file__).resolve().parent / "seeds" / "v16-reservation.yaml"
ALLOCATED = "scheduling.koordinator.sh/reservation-allocated"


def node(name: str, cpu: int = 8) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"allocatable": {"cpu": str(cpu), "memory": "64Gi", "pods": "110"}}}


def pod(name: str, cpu: int, labels: dict[str, str] | None = None, ann: dict[str, str] | None = None,
        priority: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": str(cpu)}}}]}
    if priority is not None:
        spec["priority"] = priority
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": labels or {}, "annotations": ann or {}},
            "spec": spec}


def resv(name: str, cpu: int, owners: list[dict[str, Any]] | None = None, pods: int | None = None,
         **spec: Any) -> dict[str, Any]:
    req: dict[str, Any] = {"cpu": str(cpu)}
    if pods is not None:
        req["pods"] = str(pods)
    return {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
            "metadata": {"name": name, "uid": f"uid-{name}"},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "resources": {"requests": req}}]}},
                     "owners": owners or [{"labelSelector": {"matchLabels": {"app": "a"}}}], **spec}}


OWNER = {"app": "a"}


def by_pod(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["pod"]: p for p in result["placements"]}


def by_resv(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in result["reservations"]}


def test_reserved_resources_used_for_others_served_to_owner_allocate_once(validate_crd: Any) -> None:
    r = resv("r1", 6)
    validate_crd("scheduling.koordinator.sh_reservations.yaml", r)
    cluster = build_cluster([node("n1"), node("n2"), r])
    out = simulate(cluster, [pod("other", 4), pod("owner", 4, OWNER), pod("other2", 4), pod("owner2", 4, OWNER)])
    p, rs = by_pod(out), by_resv(out)
    assert rs["r1"]["node"] == "n1"
    assert p["default/other"]["node"] == "n2"  # n1 has 2 cpu left beside the reservation
    assert p["default/owner"]["node"] == "n1"
    assert json.loads(p["default/owner"]["annotations"][ALLOCATED]) == {"name": "r1", "uid": "uid-r1"}
    assert rs["r1"] == {"name": "r1", "node": "n1", "phase": "Succeeded", "allocated": {"cpu": "4"},
                        "owners": ["default/owner"]}
    # allocateOnce: the 2 cpu left are returned to the node; the second owner is not served from it
    assert p["default/other2"]["node"] == "n1"
    assert ALLOCATED not in p["default/owner2"]["annotations"]


def test_not_allocate_once_tracks_owners_and_pod_limit() -> None:
    cluster = build_cluster([node("n1"), node("n2", 4), resv("r1", 6, pods=2, allocateOnce=False)])
    out = simulate(cluster, [pod("o1", 2, OWNER), pod("o2", 2, OWNER), pod("o3", 2, OWNER)])
    p, r = by_pod(out), by_resv(out)["r1"]
    assert ALLOCATED in p["default/o1"]["annotations"] and ALLOCATED in p["default/o2"]["annotations"]
    assert ALLOCATED not in p["default/o3"]["annotations"]  # pod-count limit 2
    assert r["phase"] == "Available" and r["owners"] == ["default/o1", "default/o2"]
    assert r["allocated"] == {"cpu": "4"}


def test_reservation_unschedulable_has_reason() -> None:
    out = simulate(build_cluster([node("n1", 4), resv("big", 6)]), [])
    r = by_resv(out)["big"]
    assert r["phase"] == "Pending" and r["node"] is None and "Insufficient cpu" in r["reason"]


def test_reservations_in_pods_are_placed_in_order(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "c.yaml").write_text(yaml.safe_dump_all([node("n1")]))
    (tmp_path / "p.yaml").write_text(yaml.safe_dump_all([pod("first", 4), resv("r1", 4), pod("other", 2),
                                                         pod("owner", 4, OWNER)]))
    assert main(["simulate", "--cluster", str(tmp_path / "c.yaml"), "--pods", str(tmp_path / "p.yaml"),
                 "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    p = by_pod(out)
    assert p["default/first"]["node"] == "n1" and by_resv(out)["r1"]["node"] == "n1"
    assert p["default/other"]["node"] is None  # 4 + 4 reserved of 8
    assert p["default/owner"]["node"] == "n1" and ALLOCATED in p["default/owner"]["annotations"]


def test_owner_kinds_object_and_controller() -> None:
    owned = pod("x", 1)
    owned["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                                             "uid": "rs-uid", "controller": True}]
    cluster = build_cluster([node("n1"), resv("by-obj", 1, [{"object": {"name": "y", "namespace": "default"}}]),
                             resv("by-ctl", 1, [{"controller": {"name": "rs", "uid": "rs-uid",
                                                                "kind": "ReplicaSet"}}])])
    out = simulate(cluster, [owned, pod("y", 1), pod("z", 1)])
    p = by_pod(out)
    assert json.loads(p["default/x"]["annotations"][ALLOCATED])["name"] == "by-ctl"
    assert json.loads(p["default/y"]["annotations"][ALLOCATED])["name"] == "by-obj"
    assert ALLOCATED not in p["default/z"]["annotations"]


def test_exact_match_upstream_cases() -> None:
    # apis/extension/reservation_test.go TestExactMatchReservation
    assert exact_match({"cpu": 1000}, {"cpu": 1000}, ["cpu"])
    assert not exact_match({"cpu": 1000}, {"cpu": 2000}, ["cpu"])
    assert not exact_match({"cpu": 1000}, {}, ["cpu"])
    assert exact_match({"cpu": 1000}, {"cpu": 2000}, [])
    assert exact_match({}, {}, ["nvidia.com/gpu", "cpu"])  # both absent: upstream returns true at once


def test_v16_exact_match_snippet_as_written() -> None:
    ann = {"scheduling.koordinator.sh/exact-match-reservation":
           '{"resourceNames":{"cpu","memory","nvidia.com/gpu"}}'}  # the release text's (set-like) spelling
    cluster = build_cluster([node("n1"), node("n2"), resv("r4", 4), resv("r2", 2)])
    out = simulate(cluster, [pod("exact", 2, OWNER, ann)])
    assert json.loads(by_pod(out)["default/exact"]["annotations"][ALLOCATED])["name"] == "r2"


def test_v16_reservation_ignored_label() -> None:
    cluster = build_cluster([node("n1", 8), resv("r1", 6)])
    ignored = pod("ign", 6, {**OWNER, "scheduling.koordinator.sh/reservation-ignored": "true"})
    out = simulate(cluster, [pod("plain", 4), ignored])
    p, r = by_pod(out), by_resv(out)["r1"]
    assert p["default/plain"]["node"] is None  # only 2 cpu outside the reservation
    assert p["default/ign"]["node"] == "n1" and ALLOCATED not in p["default/ign"]["annotations"]
    assert r["owners"] == [] and r["phase"] == "Available"


def test_v16_affinity_by_name_and_taints() -> None:
    text = (SEEDS / "002_4a14ea02774b3492.txt").read_text()
    start = text.index("apiVersion: scheduling.koordinator.sh/v1alpha1\nkind: Reservation")
    docs = list(yaml.safe_load_all(text[start:text.index("- Enable Reservation Preemption", start)]))
    tainted, tolerating = docs[0], docs[1]
    assert tainted["spec"]["taints"][0]["key"] == "test-taint-key"
    r = resv("test-reservation", 2)
    r["spec"]["taints"] = tainted["spec"]["taints"]
    r2 = resv("other-reservation", 2, [{"object": {"name": "nobody", "namespace": "default"}}])
    cluster = build_cluster([node("n1", 2), node("n2", 2), r, r2])
    by_name = pod("named", 2, OWNER, {"scheduling.koordinator.sh/reservation-affinity":
                                      '{"name":"test-reservation"}'})
    tol = pod("tol", 2, OWNER, tolerating["metadata"]["annotations"])
    out = simulate(cluster, [by_name, tol])
    p = by_pod(out)
    # the name alone does not tolerate the reservation's NoSchedule taint
    assert p["default/named"]["node"] is None
    assert p["default/named"]["reason"].startswith("0/2 nodes are available")
    assert json.loads(p["default/tol"]["annotations"][ALLOCATED])["name"] == "test-reservation"


def test_affinity_without_a_match_names_the_reason() -> None:
    cluster = build_cluster([node("n1", 8), resv("a", 2)])
    out = simulate(cluster, [pod("p", 1, OWNER, {"scheduling.koordinator.sh/reservation-affinity": '{"name":"zz"}'})])
    assert "1 node(s) no reservations match reservation affinity" in by_pod(out)["default/p"]["reason"]


def test_affinity_name_served() -> None:
    cluster = build_cluster([node("n1", 4), node("n2", 4), resv("a", 2), resv("b", 2)])
    out = simulate(cluster, [pod("p", 2, OWNER, {"scheduling.koordinator.sh/reservation-affinity": '{"name":"b"}'})])
    assert json.loads(by_pod(out)["default/p"]["annotations"][ALLOCATED])["name"] == "b"


def test_v16_preemption_inside_reservation() -> None:
    # the release text's snippet in the chart's configuration (alone it names Reservation at postFilter only)
    cfg = parse_config(in_chart(load_text(CFG_SEED.read_text(), str(CFG_SEED)), "1.6.0"))
    cluster = build_cluster([node("n1", 4), resv("r1", 4, allocateOnce=False)])
    out = simulate(cluster, [pod("low", 4, OWNER, priority=1), pod("high", 4, OWNER, priority=100)], cfg)
    p, r = by_pod(out), by_resv(out)["r1"]
    assert p["default/high"]["node"] == "n1" and ALLOCATED in p["default/high"]["annotations"]
    assert {"preemptor": "default/high", "reservation": "r1", "node": "n1", "victims": ["default/low"]} in \
        out["preemptions"]
    assert r["owners"] == ["default/high"]
    # without enablePreemption the high-priority owner waits
    out = simulate(build_cluster([node("n1", 4), resv("r1", 4, allocateOnce=False)]),
                   [pod("low", 4, OWNER, priority=1), pod("high", 4, OWNER, priority=100)])
    assert by_pod(out)["default/high"]["node"] is None


def test_v17_running_pod_bound_to_reservation_is_accounted() -> None:
    r = resv("r1", 6, allocateOnce=False)
    r["status"] = {"phase": "Available", "nodeName": "n1"}
    running = pod("running", 2, OWNER, {ALLOCATED: '{"name":"r1","uid":"uid-r1"}'})
    running["spec"]["nodeName"] = "n1"
    cluster = build_cluster([node("n1", 8), r, running])
    out = simulate(cluster, [pod("other", 2), pod("owner", 4, OWNER)])
    p, rs = by_pod(out), by_resv(out)["r1"]
    assert p["default/other"]["node"] == "n1"  # 8 − 2 running − 4 still reserved = 2 free
    assert p["default/owner"]["node"] == "n1" and ALLOCATED in p["default/owner"]["annotations"]
    assert rs["owners"] == ["default/owner", "default/running"] and rs["allocated"] == {"cpu": "6"}


def test_expired_reservation_is_failed() -> None:
    r = resv("old", 2, expires="2000-01-01T00:00:00Z")
    out = simulate(build_cluster([node("n1"), r]), [pod("o", 2, OWNER)])
    assert by_resv(out)["old"]["phase"] == "Failed"
    assert ALLOCATED not in by_pod(out)["default/o"]["annotations"]


def test_v07_allocate_once_statement() -> None:
    assert "Reservation objects support AllocateOnce semantics" in (SEEDS / "004_1fc6b0f939de439b.txt").read_text()
    out = simulate(build_cluster([node("n1"), resv("once", 2)]), [pod("a", 1, OWNER), pod("b", 1, OWNER)])
    p = by_pod(out)
    assert ALLOCATED in p["default/a"]["annotations"] and ALLOCATED not in p["default/b"]["annotations"]


def test_load_aware_does_not_count_a_reserve_pod_as_running() -> None:
    """upstream pod_assign_cache.go assign skips reserve pods: a reservation holds resources, it uses no CPU. With
    10 of 20 cores reserved and 2 in use, a 4-core pod passes LoadAware's 65 % cpu threshold (2 + 3.4 estimated);
    counted as a running pod, the reservation's estimate (8.5 cores) would refuse it (69.5 %)."""
    now = "2099-01-01T00:00:00Z"  # a NodeMetric updated "now" for any clock before then
    metric = {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": "n1"},
              "status": {"updateTime": now, "nodeMetric": {"nodeUsage": {"resources": {"cpu": "2", "memory": "4Gi"}}}}}
    cluster = build_cluster([node("n1", 20), metric, resv("r1", 10)])
    out = simulate(cluster, [pod("other", 4)])
    assert by_resv(out)["r1"]["node"] == "n1"
    assert by_pod(out)["default/other"]["node"] == "n1", by_pod(out)["default/other"]
