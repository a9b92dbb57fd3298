"""Each pod's resource-status is decoded once across the plugins and cycles that read it (NUMA usage, reservation
owners), not once per reader per placement."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from test_numa import LSR, node, nrt, pod

from apis.extension import resource_status as rs
from scheduler.cli import simulate
from scheduler.cluster import build_cluster

SPEC = {"scheduling.koordinator.sh/resource-spec": '{"preferredCPUBindPolicy":"FullPCPUs"}'}


def counting(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    seen: Counter[str] = Counter()
    real: Callable[[str], rs.ResourceStatus] = rs.decode_resource_status

    def decode(text: str) -> rs.ResourceStatus:
        seen[text] += 1
        return real(text)

    monkeypatch.setattr(rs, "decode_resource_status", decode)
    return seen


def bound(name: str, cpuset: str, numa: int) -> dict[str, Any]:
    status = json.dumps({"cpuset": cpuset, "numaNodeResources": [{"node": numa, "resources": {"cpu": "2"}}]})
    return pod(name, {"cpu": "2"}, {**SPEC, "scheduling.koordinator.sh/resource-status": status}, LSR, node_name="n1")


def test_a_bound_pods_resource_status_is_decoded_once_over_many_placements(monkeypatch: pytest.MonkeyPatch) -> None:
    running = [bound("r0", "0,8", 0), bound("r1", "4,12", 1)]
    cluster = build_cluster([node("n1", 16, "128Gi"), nrt("n1"), *running])
    seen = counting(monkeypatch)
    out = simulate(cluster, [pod(f"p{i}", {"cpu": "2"}, SPEC, LSR) for i in range(4)])
    placed = [p for p in out["placements"] if p["node"] == "n1"]
    assert len(placed) == 4
    for r in running:  # read by NUMA usage after every placement on n1
        text = r["metadata"]["annotations"]["scheduling.koordinator.sh/resource-status"]
        assert seen[text] == 1, seen
    # and the CPUs they hold stay theirs
    given = [set(rs.resource_status(p["annotations"]).cpus()) for p in placed]
    assert not set().union(*given) & {0, 8, 4, 12}
