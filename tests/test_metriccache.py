"""Metric cache: upstream's percentile rule, windows, cold-start span, bounded memory."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from koordlet.metriccache import MetricCache, aggregate, percentile_index


@pytest.mark.parametrize(("n", "p", "index"), [
    (1, 0.5, 0), (2, 0.5, 0), (3, 0.5, 0), (4, 0.5, 1), (10, 0.9, 8), (10, 0.95, 8), (10, 0.99, 8),
    (100, 0.95, 94), (100, 0.99, 98), (101, 0.9, 89), (199, 0.99, 196), (1, 0.99, 0),
])
def test_percentile_index_follows_upstream_float32_rule(n: int, p: float, index: int) -> None:
    assert percentile_index(n, p) == index


def test_aggregate_values() -> None:
    agg = aggregate([3000, 1000, 2000, 4000], [3.0, 1.0, 2.0, 10.0])
    assert agg is not None
    assert agg.count == 4 and agg.avg == 4.0 and agg.last == 10.0
    assert agg.p50 == 2.0 and agg.p90 == 3.0 and agg.p99 == 3.0  # idx int(3.6)-1=2, int(3.96)-1=2
    assert agg.duration_ms == 3000
    assert aggregate([], []) is None


@given(st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=1, max_size=300))
def test_percentiles_are_ordered_sample_values(values: list[float]) -> None:
    agg = aggregate(range(len(values)), values)
    assert agg is not None
    assert min(values) <= agg.p50 <= agg.p90 <= agg.p95 <= agg.p99 <= max(values)
    assert all(getattr(agg, k) in values for k in ("p50", "p90", "p95", "p99", "last"))


def test_window_bounds_are_inclusive_and_out_of_order_dropped() -> None:
    cache = MetricCache(lambda kind: 100)
    key = cache.key("pod_cpu_usage", pod_uid="u")
    for t in range(10):
        cache.append(key, t * 1000, float(t))
    cache.append(key, 5500, 99.0)  # older than the newest sample: dropped
    ts, vals = cache.window(key, 2000, 5000)
    assert list(ts) == [2000, 3000, 4000, 5000] and list(vals) == [2.0, 3.0, 4.0, 5.0]


def test_labels_must_match_the_kind_schema() -> None:
    with pytest.raises(ValueError):
        MetricCache.key("pod_cpu_usage")
    with pytest.raises(KeyError):
        MetricCache.key("no_such_kind")


def test_memory_is_bounded_as_pods_come_and_go() -> None:
    cache = MetricCache(lambda kind: 300 if kind.startswith("pod") else 1800)
    now = 0
    for minute in range(60):  # an hour of churn: 50 new pods every minute, 1 s samples
        for second in range(60):
            now = (minute * 60 + second) * 1000
            for p in range(50):
                cache.append(cache.key("pod_cpu_usage", pod_uid=f"{minute}-{p}"), now, 1.0)
            cache.append(cache.key("node_cpu_usage"), now, 1.0)
        cache.gc(now)
    # live: pods of the last 5 minutes (+ the one being gc'd) and one node series of ≤ 1800 samples
    assert cache.series_count() <= 50 * 6 + 1
    assert cache.sample_count() <= 50 * 6 * 60 + 1801


def _keys(n: int) -> list[tuple[str, ...]]:
    return [MetricCache.key("pod_cpu_usage" if i % 2 else "container_memory_usage",
                            **({"pod_uid": f"p{i}"} if i % 2 else {"container_id": f"c{i}"})) for i in range(n)]


def _retention(kind: str) -> float:
    return 7 if kind.startswith("pod") else 12  # two kinds kept for different times in one frame


@settings(max_examples=200, deadline=None)
@given(ticks=st.lists(st.tuples(st.integers(0, 3000), st.lists(st.one_of(st.none(), st.floats(0, 1e9)),
                                                                min_size=6, max_size=6), st.booleans()),
                      max_size=60),
       window=st.tuples(st.integers(0, 90_000), st.integers(0, 90_000)))
def test_columns_hold_what_appends_would(ticks: list[tuple[int, list[float | None], bool]],
                                         window: tuple[int, int]) -> None:
    """A tick written as one row of columns reads back as the same samples appended one by one would."""
    columns, appended = MetricCache(_retention), MetricCache(_retention)
    keys = _keys(6)
    writer = columns.columns(keys)
    now = 0
    for step, values, gc in ticks:
        now += step
        writer.add(now, np.array([np.nan if v is None else v for v in values]))
        for key, v in zip(keys, values, strict=True):
            if v is not None:
                appended.append(key, now, v)
        if gc:
            columns.gc(now)
            appended.gc(now)
            if columns.generation != 0:
                writer = columns.columns(keys)
    start, end = sorted(window)
    for key in keys:
        assert columns.window(key, start, end) == appended.window(key, start, end)
        assert columns.aggregate(key, 0, now) == appended.aggregate(key, 0, now)
        assert columns.last(key) == appended.last(key)
    # every key's newest sample in one call, as each alone, a key never seen included (a QoS pass's lookups)
    asked = [*keys, MetricCache.key("pod_cpu_usage", pod_uid="never")]
    assert columns.last_many(asked) == [appended.last(k) for k in asked] == appended.last_many(asked)
    assert columns.sample_count() == appended.sample_count()
    assert set(columns.keys("pod_cpu_usage")) == set(keys[1::2])


def test_columns_drop_a_tick_older_than_the_last_and_keep_their_series_while_written() -> None:
    cache = MetricCache(lambda kind: 10)
    keys = _keys(2)
    writer = cache.columns(keys)
    writer.add(5000, np.array([1.0, np.nan]))
    writer.add(4000, np.array([2.0, 2.0]))  # older than the newest row: dropped whole
    assert list(cache.window(keys[0], 0, 10_000)[1]) == [1.0] and cache.last(keys[1]) is None
    assert cache.series_count() == 2  # the second series has no sample yet, but its writer is live
    cache.gc(100_000)
    assert cache.series_count() == 2 and cache.sample_count() == 0 and cache.generation == 0
    cache.columns(keys[:1])  # a new writer without the second series: gc may now drop it
    assert cache.gc(100_000) == 1 and cache.series_count() == 1 and cache.generation == 1


def test_a_series_both_appended_and_written_reads_in_time_order() -> None:
    cache = MetricCache(lambda kind: 100)
    key = _keys(1)[0]
    cache.append(key, 1000, 1.0)
    cache.columns([key]).add(2000, np.array([2.0]))
    cache.append(key, 3000, 3.0)
    ts, values = cache.window(key, 0, 5000)
    assert list(ts) == [1000, 2000, 3000] and list(values) == [1.0, 2.0, 3.0]
    assert cache.last(key) == (3000, 3.0) and cache.series_count() == 1 and cache.sample_count() == 3
    assert cache.last_many([key]) == [(3000, 3.0)]


def test_frame_buffers_settle_under_churn() -> None:
    """A day of ticks with a gc a minute: the rows kept stay near retention / interval, the buffers near 1.5×."""
    cache = MetricCache(lambda kind: 360)
    writer = cache.columns(_keys(4))
    for t in range(86_400):
        writer.add(t * 1000, np.ones(4))
        if t % 60 == 0:
            cache.gc(t * 1000)
    live, held = cache.frame().rows()
    assert live <= 361 + 60 and held <= 1.5 * (361 + 60) + 1


def test_a_series_no_longer_written_leaves_the_frame_and_keeps_its_samples() -> None:
    """Pods gone: at gc their columns leave the frame (which would hold a cell per row for each of them for as long
    as retention keeps a sample) and their samples read back the same from plain arrays until retention drops
    them; the frame's buffer is reused, not made anew, while the columns come and go."""
    cache = MetricCache(lambda kind: 100)
    keys = _keys(4)
    writer = cache.columns(keys)
    for t in range(10):
        writer.add(t * 1000, np.arange(4, dtype=float) + t)
    cache.append(keys[3], 10_500, 99.0)  # appended as well: merged in time order
    before = {k: (cache.window(k, 0, 20_000), cache.last(k)) for k in keys}
    cache.columns(keys[:2])  # two pods gone
    assert cache.gc(20_000) == 0 and cache.generation == 1
    assert cache.frame().series() == keys[:2] and cache.series_count() == 4
    assert {k: (cache.window(k, 0, 20_000), cache.last(k)) for k in keys} == before
    assert list(cache.window(keys[3], 9000, 11_000)[1]) == [12.0, 99.0]
    held = cache.frame().held()
    writer = cache.columns(keys[:2] + _keys(6)[4:])  # two new pods take the spare columns
    assert cache.frame().held() == held
    assert cache.gc(200_000) == 2 and cache.series_count() == 4  # the gone pods' samples aged out


def test_two_frames_keep_their_own_rows_and_writers() -> None:
    """The collection tick's usage and the run-queue wait collector write whole instants to frames of their own: a
    row of one holds none of the other's columns, reads find a series in whichever frame writes it, and a new writer
    of one frame leaves the other frame's series alone at gc."""
    cache = MetricCache(lambda kind: 100)
    usage, waits = _keys(4)[:2], _keys(4)[2:]
    u, w = cache.columns(usage), cache.columns(waits, frame="schedlat")
    for t in range(3):
        u.add(t * 1000, np.array([1.0 + t, 2.0 + t]))
        w.add(t * 1000 + 500, np.array([10.0 + t, np.nan]))
    assert cache.frame().series() == usage and cache.frame("schedlat").series() == waits
    assert cache.frame().rows()[0] == 3 and cache.frame("schedlat").rows()[0] == 3
    assert list(cache.window(waits[0], 0, 10_000)[1]) == [10.0, 11.0, 12.0]
    assert cache.last(waits[1]) is None and cache.last(usage[1]) == (2000, 4.0)
    assert cache.last_many([usage[0], waits[0], waits[1]]) == [(2000, 3.0), (2500, 12.0), None]
    cache.columns(usage[:1])  # a pod gone from the usage writer only
    cache.gc(3000)
    assert cache.frame().series() == usage[:1] and cache.frame("schedlat").series() == waits
    assert list(cache.window(usage[1], 0, 10_000)[1]) == [2.0, 3.0, 4.0]  # kept as appended samples
