"""Bounded in-memory time series with upstream's aggregations (avg, p50..p99, last, count) for NodeMetric.

Replaces upstream's embedded Prometheus TSDB (pkg/koordlet/metriccache): series are two flat arrays
(timestamps in ms, values) per (kind, label values), or, for the series a collection tick writes together, columns
of one frame (metricframe) while they are written (then arrays again, so a gone pod costs only its samples);
trimmed to a per-kind retention, so memory is bounded by live series × retention / interval no matter how long the
agent runs or how many pods come and go.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from koordlet.metricframe import Floats, Frame, Int64s
from koordlet.metricframe import SeriesKey as SeriesKey  # re-exported: the key type every caller uses

# Sample kinds and their label (property) names, upstream pkg/koordlet/metriccache/metric_resources.go.
KIND_PROPERTIES: dict[str, tuple[str, ...]] = {
    "node_cpu_usage": (),
    "node_memory_usage": (),
    "node_memory_usage_with_page_cache": (),
    "node_gpu_core_usage": ("gpu_minor", "gpu_device_uuid"),
    "node_gpu_memory_usage": ("gpu_minor", "gpu_device_uuid"),
    "node_gpu_memory_total": ("gpu_minor", "gpu_device_uuid"),
    "node_numa_cpu_usage": ("numa_node_id",),
    "node_numa_memory_usage": ("numa_node_id",),
    "sys_cpu_usage": (),
    "sys_memory_usage": (),
    "sys_numa_cpu_usage": ("numa_node_id",),
    "sys_numa_memory_usage": ("numa_node_id",),
    "pod_cpu_usage": ("pod_uid",),
    "pod_memory_usage": ("pod_uid",),
    "pod_memory_usage_with_page_cache": ("pod_uid",),
    "pod_cpu_throttled": ("pod_uid",),
    "pod_gpu_core_usage": ("pod_uid", "gpu_minor", "gpu_device_uuid"),
    "pod_gpu_memory_usage": ("pod_uid", "gpu_minor", "gpu_device_uuid"),
    "container_cpu_usage": ("container_id",),
    "container_memory_usage": ("container_id",),
    "container_memory_usage_with_page_cache": ("container_id",),
    "container_cpu_throttled": ("container_id",),
    "container_gpu_core_usage": ("container_id", "gpu_minor", "gpu_device_uuid"),
    "container_gpu_memory_usage": ("container_id", "gpu_minor", "gpu_device_uuid"),
    "host_application_cpu_usage": ("host_app_name",),
    "host_application_memory_usage": ("host_app_name",),
    "host_application_memory_usage_with_page_cache": ("host_app_name",),
    "pod_psi": ("pod_uid", "psi_resource", "psi_precision", "psi_degree"),
    "container_psi": ("pod_uid", "container_id", "psi_resource", "psi_precision", "psi_degree"),
    # ours (gate CPUSchedLatency, koordlet/schedlat): per collection tick, run-queue wait seconds, waits, tick p99
    "pod_cpu_schedule_latency_sum": ("pod_uid",),
    "pod_cpu_schedule_latency_count": ("pod_uid",),
    "pod_cpu_schedule_latency_p99": ("pod_uid",),
    # upstream NodeBEMetric (be_resource=cpu; be_allocation usage/request/realLimit), milli-cores
    # (koordlet/collectors/beresource.py)
    "be_cpu_usage": (),
    "be_cpu_request": (),
    "be_cpu_real_limit": (),
}

AGGREGATIONS = ("avg", "p50", "p90", "p95", "p99")
_PERCENTILES = {"p50": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99}


def _f32(x: float) -> float:
    return float(struct.unpack("f", struct.pack("f", x))[0])


def percentile_index(n: int, p: float) -> int:
    """Upstream's rule (metriccache/util.go): int(float32(n) * float32(p)) - 1, clamped at 0, in float32."""
    return max(int(_f32(_f32(float(n)) * _f32(p))) - 1, 0)


@dataclass(frozen=True, slots=True)
class Aggregate:
    """Aggregations of one series over a window; `duration_ms` = last - first sample time (cold-start rule)."""

    count: int
    avg: float
    p50: float
    p90: float
    p95: float
    p99: float
    last: float
    duration_ms: int

    def get(self, name: str) -> float:
        return float(getattr(self, name))


def aggregate(timestamps: Iterable[int], values: Iterable[float]) -> Aggregate | None:
    ts = list(timestamps)
    vals = list(values)
    if not vals:
        return None
    ordered = sorted(vals)
    n = len(ordered)
    pct = {name: ordered[percentile_index(n, p)] for name, p in _PERCENTILES.items()}
    last_i = max(range(n), key=ts.__getitem__)
    return Aggregate(
        count=n,
        avg=sum(vals) / n,
        last=vals[last_i],
        duration_ms=max(ts) - min(ts),
        **pct,
    )


class Series:
    """One series' samples, appended one at a time (MetricCache.append)."""

    __slots__ = ("ts", "values")

    def __init__(self) -> None:
        self.ts = array("q")
        self.values = array("d")


class ColumnWriter:
    """Appends the values of fixed series at one instant in one call (see MetricCache.columns)."""

    __slots__ = ("_columns", "_frame")

    def __init__(self, frame: Frame, keys: Sequence[SeriesKey]) -> None:
        self._frame, self._columns = frame, frame.columns(keys)

    def add(self, ts_ms: int, values: Floats) -> None:
        """`values[i]` is the sample of the i-th key, NaN for none; dropped whole if older than the last add."""
        self._frame.add(ts_ms, self._columns, values)


def _arrays(ts: Int64s, values: Floats) -> tuple[array[int], array[float]]:
    out_ts, out_values = array("q"), array("d")
    out_ts.frombytes(ts.astype(np.int64).tobytes())
    out_values.frombytes(values.astype(np.float64).tobytes())
    return out_ts, out_values


class MetricCache:
    """Series keyed by (kind, label values); append is O(1), window queries bisect the time array."""

    def __init__(self, retention_seconds: Callable[[str], float]) -> None:
        self._retention = retention_seconds
        self._series: dict[SeriesKey, Series] = {}
        # one frame per writer of whole instants (the collection tick's usage, the run-queue wait collector's): a
        # row of one never carries the other's columns, so neither pays for the other's width
        self._frames: dict[str, Frame] = {}
        self._written: dict[str, frozenset[SeriesKey]] = {}  # frame → the keys of its newest ColumnWriter: kept by gc
        self.generation = 0  # bumped when gc drops columns: ColumnWriters made before are then stale

    @staticmethod
    def key(kind: str, **labels: str) -> SeriesKey:
        props = KIND_PROPERTIES[kind]
        if set(labels) != set(props):
            raise ValueError(f"{kind} takes labels {props}, got {sorted(labels)}")
        return (kind, *(labels[p] for p in props))

    def columns(self, keys: Sequence[SeriesKey], frame: str = "usage") -> ColumnWriter:
        """A writer of these series' samples a whole instant at a time (a collection tick's per-target series),
        valid until `generation` changes. The series stay, empty or not, while they are the newest writer's of
        that frame. A series is written to one frame only."""
        self._written[frame] = frozenset(keys)
        target = self._frames.get(frame)
        if target is None:
            target = self._frames[frame] = Frame()
        return ColumnWriter(target, keys)

    def frame(self, name: str = "usage") -> Frame:
        """One writer's frame (its rows, held buffers and columns: tests and benchmarks look at its size)."""
        found = self._frames.get(name)
        return found if found is not None else Frame()

    def _frame_window(self, key: SeriesKey, start_ms: int, end_ms: int) -> tuple[Int64s, Floats] | None:
        for frame in self._frames.values():
            written = frame.window(key, start_ms, end_ms)
            if written is not None:
                return written
        return None

    def _frame_last(self, key: SeriesKey) -> tuple[int, float] | None:
        for frame in self._frames.values():
            written = frame.last(key)
            if written is not None:
                return written
        return None

    def append(self, key: SeriesKey, ts_ms: int, value: float) -> None:
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = Series()
        elif series.ts and ts_ms < series.ts[-1]:
            return  # out of order: dropped, as a TSDB outside its out-of-order window would
        series.ts.append(ts_ms)
        series.values.append(value)

    def window(self, key: SeriesKey, start_ms: int, end_ms: int) -> tuple[array[int], array[float]]:
        series = self._series.get(key)
        written = self._frame_window(key, start_ms, end_ms)
        if series is None:
            if written is None:
                return array("q"), array("d")
            return _arrays(*written)
        lo = bisect_left(series.ts, start_ms)
        hi = bisect_right(series.ts, end_ms)
        if written is None:
            return series.ts[lo:hi], series.values[lo:hi]
        # appended and written as a column too: both, in time order
        f_ts, f_values = written
        ts = np.concatenate((np.asarray(series.ts[lo:hi], dtype=np.int64), f_ts))
        order = np.argsort(ts, kind="stable")
        return _arrays(ts[order], np.concatenate((np.asarray(series.values[lo:hi]), f_values))[order])

    def aggregate(self, key: SeriesKey, start_ms: int, end_ms: int) -> Aggregate | None:
        ts, vals = self.window(key, start_ms, end_ms)
        return aggregate(ts, vals)

    def last(self, key: SeriesKey) -> tuple[int, float] | None:
        series = self._series.get(key)
        appended = (series.ts[-1], series.values[-1]) if series is not None and series.ts else None
        written = self._frame_last(key)
        if appended is None or written is None:
            return appended or written
        return written if written[0] > appended[0] else appended

    def last_many(self, keys: Sequence[SeriesKey]) -> list[tuple[int, float] | None]:
        """`last` of each key, the written columns read in one go (a QoS pass's per-pod lookups)."""
        frames = iter(self._frames.values())
        first = next(frames, None)
        out: list[tuple[int, float] | None] = [None] * len(keys) if first is None else first.last_many(keys)
        for frame in frames:
            for i, written in enumerate(frame.last_many(keys)):
                if written is not None and (out[i] is None or written[0] > out[i][0]):  # type: ignore[index]
                    out[i] = written
        series_of = self._series
        for i, key in enumerate(keys):
            series = series_of.get(key)
            if series is not None and series.ts:
                written = out[i]
                if written is None or series.ts[-1] >= written[0]:
                    out[i] = (series.ts[-1], series.values[-1])
        return out

    def gc(self, now_ms: int) -> int:
        """Trim samples older than each kind's retention; drop empty series. Returns series dropped."""
        dropped = 0
        cutoff_by_kind: dict[str, int] = {}
        for key in list(self._series):
            kind = key[0]
            cutoff = cutoff_by_kind.get(kind)
            if cutoff is None:
                cutoff = cutoff_by_kind[kind] = now_ms - int(self._retention(kind) * 1000)
            series = self._series[key]
            cut = bisect_left(series.ts, cutoff)
            if cut >= len(series.ts):
                del self._series[key]
                dropped += 1
            elif cut:
                del series.ts[:cut]
                del series.values[:cut]
        in_frame, columns_left = 0, False
        for name, frame in self._frames.items():
            emptied, moved = frame.gc(lambda kind: now_ms - int(self._retention(kind) * 1000),
                                      self._written.get(name, frozenset()))
            in_frame += emptied
            columns_left = columns_left or bool(emptied or moved)
            for key, ts, values in moved:  # no longer written (pods gone): kept as appended ones until retention
                self._adopt(key, ts, values)
        if columns_left:
            self.generation += 1
        return dropped + in_frame

    def _adopt(self, key: SeriesKey, ts: Int64s, values: Floats) -> None:
        """Take a frame column's samples as an appended series (merged in time order with one already there)."""
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = Series()
        elif series.ts:
            merged = np.concatenate((np.asarray(series.ts, dtype=np.int64), ts))
            order = np.argsort(merged, kind="stable")
            ts, values = merged[order], np.concatenate((np.asarray(series.values), values))[order]
            series.ts, series.values = array("q"), array("d")
        series.ts.frombytes(ts.astype(np.int64).tobytes())
        series.values.frombytes(values.astype(np.float64).tobytes())

    def keys(self, kind: str) -> list[SeriesKey]:
        """Keys of the live series of one kind (e.g. every GPU that has a `node_gpu_memory_total` series)."""
        return [k for k in dict.fromkeys([*self._series, *self._frame_series()]) if k[0] == kind]

    def series_count(self) -> int:
        return len(self._series.keys() | set(self._frame_series()))

    def sample_count(self) -> int:
        return sum(len(s.ts) for s in self._series.values()) + sum(f.sample_count() for f in self._frames.values())

    def _frame_series(self) -> list[SeriesKey]:
        return [k for frame in self._frames.values() for k in frame.series()]
