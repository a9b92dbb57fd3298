"""Gang members placed as a whole job are served from matching reservations; a rejected job gives them back."""

from __future__ import annotations

import json
from typing import Any

from test_reservation import ALLOCATED, by_pod, by_resv, node, pod, resv

from scheduler.cli import simulate
from scheduler.cluster import build_cluster

GANG = "gang.scheduling.koordinator.sh"


def member(name: str, cpu: int, gang: str, min_member: int) -> dict[str, Any]:
    return pod(name, cpu, {"app": "a"}, {f"{GANG}/name": gang, f"{GANG}/min-available": str(min_member)})


def test_gang_members_use_the_reservation(validate_crd: Any) -> None:
    r = resv("r1", 6, allocateOnce=False)
    validate_crd("scheduling.koordinator.sh_reservations.yaml", r)
    cluster = build_cluster([node("n1"), node("n2"), r])
    out = simulate(cluster, [member("m1", 3, "job", 2), member("m2", 3, "job", 2)])
    p, rs = by_pod(out), by_resv(out)
    assert p["default/m1"]["node"] == p["default/m2"]["node"] == rs["r1"]["node"]
    for m in ("default/m1", "default/m2"):
        assert json.loads(p[m]["annotations"][ALLOCATED]) == {"name": "r1", "uid": "uid-r1"}
    assert rs["r1"]["owners"] == ["default/m1", "default/m2"] and rs["r1"]["allocated"] == {"cpu": "6"}


def test_rejected_gang_gives_the_reservation_back() -> None:
    # two members fit (one in the reservation, one beside it); the third cannot: the job is rejected whole
    cluster = build_cluster([node("n1"), resv("r1", 4)])
    out = simulate(cluster, [member("m1", 4, "job", 3), member("m2", 4, "job", 3), member("m3", 4, "job", 3)])
    p, rs = by_pod(out), by_resv(out)
    assert all(p[f"default/m{i}"]["node"] is None for i in (1, 2, 3))
    assert rs["r1"] == {"name": "r1", "node": "n1", "phase": "Available", "allocated": {}, "owners": []}
    # the reservation is intact for a later owner
    out2 = simulate(cluster, [pod("later", 4, {"app": "a"})])
    assert json.loads(by_pod(out2)["default/later"]["annotations"][ALLOCATED])["name"] == "r1"
