"""Metric cache: upstream's percentile rule, windows, cold-start span, bounded memory."""

from __future__ import annotations

import pytest
from hypothesis import given
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
