"""The change bookkeeping every vector plugin relies on: a Tracker reports exactly the rows that changed since it last
asked (from the index's change log, or by comparing versions once it fell behind the log), and a row cache
recomputes exactly those rows, per node or all at once, to the same result as computing everything afresh."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler import nodeindex, rowcache
from scheduler.cluster import build_cluster
from scheduler.nodeindex import Tracker, node_index


def _cluster(n: int):  # type: ignore[no-untyped-def]
    return build_cluster([{"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i:02d}"},
                           "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "10"}}}
                          for i in range(n)])


def _pod(name: str, node: str) -> dict:  # type: ignore[type-arg]
    return {"metadata": {"name": name, "namespace": "t"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}


def test_tracker_reports_each_changed_row_once_to_every_tracker() -> None:
    cluster = _cluster(6)
    index = node_index(cluster)
    a, b = Tracker(), Tracker()
    assert a.changes(index) is None and b.changes(index) is None  # first sight: every row
    assert a.changes(index) == []
    cluster.assume(_pod("p1", "n04"), "n04")
    cluster.assume(_pod("p2", "n01"), "n01")
    cluster.assume(_pod("p3", "n04"), "n04")
    assert a.changes(index) == [1, 4]
    assert a.changes(index) == []
    cluster.nodes["n02"].changed()
    assert a.changes(index) == [2]
    assert b.changes(index) == [1, 2, 4]  # b asked nothing in between: everything since its last call


def test_tracker_behind_the_log_compares_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nodeindex, "LOG_LIMIT", 3)
    cluster = _cluster(8)
    index = node_index(cluster)
    t = Tracker()
    assert t.changes(index) is None
    for k, node in enumerate(("n07", "n03", "n07", "n05", "n00")):
        cluster.nodes[node].changed()
        assert k < 3 or index.log_start > 0
    assert index.log_start > 0  # the log was restarted: the tracker's place in it is gone
    assert t.changes(index) == [0, 3, 5, 7]
    cluster.nodes["n06"].changed()
    assert t.changes(index) == [6]


def test_row_cache_recomputes_changed_rows_per_node_or_vectorised() -> None:
    versions = np.zeros(10, dtype=np.int64)
    base = np.arange(10, dtype=np.int64)
    cache: dict = {}  # type: ignore[type-arg]
    calls: list[str] = []

    def compute(rows: object) -> np.ndarray:  # type: ignore[type-arg]
        calls.append("vector")
        return base[rows] * 10  # type: ignore[no-any-return]

    def one(i: int) -> int:
        calls.append("one")
        return int(base[i]) * 10

    first = rowcache.by_rows(cache, versions, ("k",), compute, one)
    assert first.tolist() == [i * 10 for i in range(10)] and calls == ["vector"]
    base[[2, 7]] = [100, 200]
    versions[[2, 7]] += 1
    calls.clear()
    got = rowcache.by_rows(cache, versions, ("k",), compute, one)
    assert calls == ["one", "one"]
    base[:] += 1
    versions[:] += 1
    calls.clear()
    got = rowcache.by_rows(cache, versions, ("k",), compute, one)
    assert calls == ["vector"]  # many rows: one numpy pass
    assert got.tolist() == (base * 10).tolist()


def test_trackers_reading_the_same_span_share_it_and_still_see_a_revert_as_their_own() -> None:
    cluster = _cluster(6)
    index = node_index(cluster)
    a, b, c = Tracker(), Tracker(), Tracker()
    for t in (a, b, c):
        assert t.changes(index) is None
    node = cluster.nodes["n03"]
    before = index.version(node)
    assert before is not None
    node.changed()
    cluster.nodes["n05"].changed()
    assert a.changes(index) == [3, 5]  # a saw n03's new version
    index.revert(node, before)  # n03 is as it was: only a, which saw it otherwise, must look at it again
    assert b.changes(index) == [5]
    assert c.changes(index) == [5]  # the same span as b, answered from what b's read worked out
    assert a.changes(index) == [3]
    assert b.changes(index) == [] and c.changes(index) == []
    cluster.nodes["n00"].changed()
    assert [t.changes(index) for t in (a, b, c)] == [[0], [0], [0]]
