"""A Placement's scores read from the vector cache's own arrays (no copy per cycle) stay those of its cycle, however
late they are read: the cache has them settle before a later cycle changes the arrays in place."""

from __future__ import annotations

import copy
import random
import time
from typing import Any

import pytest

from scheduler.cli import profile
from scheduler.cluster import build_cluster
from scheduler.framework import Scheduler
from scheduler.interfaces import Placement
from scheduler.vectorcache import Kept


def _pod(name: str, cpu: str, node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}
    if node:
        spec["nodeName"] = node
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "t"}, "spec": spec}


def _objects() -> list[dict[str, Any]]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())  # at use: a stamp taken at import expires in a long run
    objects: list[dict[str, Any]] = []
    for i in range(12):
        objects.append({"kind": "Node", "metadata": {"name": f"n{i:02d}"},
                        "status": {"allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"}}})
        objects.append({"kind": "NodeMetric", "metadata": {"name": f"n{i:02d}"}, "status": {
            "updateTime": now, "nodeMetric": {"nodeUsage": {"resources": {"cpu": str(i % 5), "memory": "4Gi"}}}}})
    return objects + [_pod(f"running-{j}", "1", f"n{j % 12:02d}") for j in range(30)]


def _run(kinds: list[str], read_now: bool) -> list[tuple[str | None, dict[str, int]]]:
    sched = Scheduler(build_cluster(copy.deepcopy(_objects())), profile(None))
    placed: list[Placement] = []
    now: list[dict[str, int]] = []
    for k, kind in enumerate(kinds):
        p = sched.schedule(_pod(f"p{k}", kind))
        placed.append(p)
        if read_now:
            now.append(dict(p.scores))
    later = now if read_now else [dict(p.scores) for p in placed]
    return [(p.node, s) for p, s in zip(placed, later, strict=True)]


def test_scores_read_late_are_those_of_their_cycle() -> None:
    rng = random.Random(4)
    kinds = [rng.choice(["1", "1", "2", "500m"]) for _ in range(40)]
    early, late = _run(kinds, True), _run(kinds, False)
    assert early == late
    assert len({tuple(sorted(s.items())) for _, s in early}) > 5  # the totals moved from cycle to cycle


def test_without_settling_late_scores_would_drift(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison above can fail: with the readers not told, late reads see later cycles' totals."""
    monkeypatch.setattr(Kept, "settle", lambda self: None)
    kinds = ["1"] * 20
    assert _run(kinds, True) != _run(kinds, False)
