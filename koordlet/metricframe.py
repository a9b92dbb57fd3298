"""Series sampled at the same instants (a collection tick's per-target series): a row per tick, a column per series."""

from __future__ import annotations

import threading
from collections.abc import Callable, Container, Sequence

import numpy as np
import numpy.typing as npt

SeriesKey = tuple[str, ...]  # (kind, *label values in KIND_PROPERTIES order)
Columns = npt.NDArray[np.intp]
Int64s = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]
_MIN_ROWS = 64
_MIN_COLUMNS = 64


class Frame:
    """Timestamps in ms, one per row, and a float64 value per row and column, NaN where a series has no sample at
    that row (a cgroup not read, a rate not known yet). A row is one append: the tick's values of every series in
    one array, instead of an append per series. Live rows are [_start, _n) of the buffers; rows before were
    trimmed and are reclaimed when the buffers are full; columns past the last series are spare (NaN). Read by the
    NodeMetric report's thread while the collection tick writes: every method holds the frame's lock, and reads
    return copies."""

    __slots__ = ("_index", "_keys", "_lock", "_n", "_start", "_ts", "_values")

    def __init__(self) -> None:
        self._keys: list[SeriesKey] = []  # the column of each series, and back
        self._index: dict[SeriesKey, int] = {}
        self._ts: Int64s = np.zeros(0, dtype=np.int64)
        self._values: Floats = np.zeros((0, 0))
        self._start = self._n = 0
        self._lock = threading.Lock()

    def columns(self, keys: Sequence[SeriesKey]) -> Columns:
        """The columns of `keys`, added (without samples) where missing; existing columns never move on adding."""
        with self._lock:
            new = [k for k in dict.fromkeys(keys) if k not in self._index]
            if new:
                width = len(self._keys) + len(new)
                if width > self._values.shape[1]:  # spare columns, so pods coming one by one do not copy it all
                    values = np.full((len(self._ts), width + width // 2), np.nan)
                    values[:, :len(self._keys)] = self._values[:, :len(self._keys)]
                    self._values = values
                for k in new:
                    self._index[k] = len(self._keys)
                    self._keys.append(k)
            return np.array([self._index[k] for k in keys], dtype=np.intp)

    def add(self, ts_ms: int, columns: Columns, values: Floats) -> bool:
        """One row: `values[i]` for column `columns[i]`, NaN for every other column. A row older than the last
        one is dropped (False), as a TSDB outside its out-of-order window would."""
        with self._lock:
            if self._n > self._start and ts_ms < self._ts[self._n - 1]:
                return False
            if self._n == len(self._ts):
                self._grow()
            row = self._values[self._n]
            row.fill(np.nan)
            row[columns] = values
            self._ts[self._n] = ts_ms
            self._n += 1
            return True

    def _grow(self) -> None:
        """Move the live rows to the front: in place while they fill at most 3/4 of the buffers (trimmed rows
        are reused: the buffers settle at 1.5× the rows retention keeps), else into buffers 1.5× their count (at
        least _MIN_ROWS)."""
        live = self._n - self._start
        if self._start and 4 * live <= 3 * len(self._ts):
            ts, values = self._ts, self._values
        else:
            rows = max(3 * live // 2, _MIN_ROWS)
            ts, values = np.zeros(rows, dtype=np.int64), np.empty((rows, self._values.shape[1]))
        ts[:live], values[:live] = self._ts[self._start:self._n], self._values[self._start:self._n]
        self._ts, self._values, self._start, self._n = ts, values, 0, live

    def window(self, key: SeriesKey, start_ms: int, end_ms: int) -> tuple[Int64s, Floats] | None:
        """Samples of one series with start_ms ≤ ts ≤ end_ms, oldest first (copies); None: not a column."""
        with self._lock:
            column = self._index.get(key)
            if column is None:
                return None
            ts = self._ts[self._start:self._n]
            lo, hi = int(np.searchsorted(ts, start_ms, "left")), int(np.searchsorted(ts, end_ms, "right"))
            values = self._values[self._start + lo:self._start + hi, column]
            have = values == values  # not NaN
            return ts[lo:hi][have], values[have]

    def last(self, key: SeriesKey) -> tuple[int, float] | None:
        with self._lock:
            column = self._index.get(key)
            if column is None:
                return None
            if self._n == self._start:
                return None
            newest = float(self._values[self._n - 1, column])
            if newest == newest:  # the usual case: the series has a value in the newest row (not NaN)
                return int(self._ts[self._n - 1]), newest
            return self._last_before(column)

    def last_many(self, keys: Sequence[SeriesKey]) -> list[tuple[int, float] | None]:
        """`last` of each key under one hold of the lock: the newest row read once for all of them."""
        with self._lock:
            if self._n == self._start:
                return [None] * len(keys)
            index, newest_ts = self._index, int(self._ts[self._n - 1])
            columns = [index.get(key, -1) for key in keys]
            newest = self._values[self._n - 1].take(columns).tolist() if columns else []
            out: list[tuple[int, float] | None] = []
            for column, value in zip(columns, newest, strict=True):
                if column < 0:
                    out.append(None)
                else:
                    out.append((newest_ts, value) if value == value else self._last_before(column))
            return out

    def _last_before(self, column: int) -> tuple[int, float] | None:
        """The newest sample of a column whose newest row has none (the lock held)."""
        values = self._values[self._start:self._n, column]
        have = np.flatnonzero(values == values)
        if not len(have):
            return None
        i = int(have[-1])
        return int(self._ts[self._start + i]), float(values[i])

    def series(self) -> list[SeriesKey]:
        with self._lock:
            return list(self._keys)

    def rows(self) -> tuple[int, int]:
        """Rows live, and rows the buffers hold."""
        with self._lock:
            return self._n - self._start, len(self._ts)

    def held(self) -> tuple[int, int]:
        """Rows and columns the value buffer holds (the memory it takes: 8 bytes each)."""
        with self._lock:
            rows, columns = self._values.shape
            return int(rows), int(columns)

    def sample_count(self) -> int:
        with self._lock:
            live = self._values[self._start:self._n]
            return int(np.count_nonzero(live == live))

    def gc(self, cutoff_ms: Callable[[str], int],
           keep: Container[SeriesKey]) -> tuple[int, list[tuple[SeriesKey, Int64s, Floats]]]:
        """Drop each column's samples older than its kind's cutoff, then every column not in `keep` (the series a
        writer feeds): a series no longer written (a pod gone) would otherwise hold a value per row for as long as
        retention keeps its samples, however few they are, so the frame's size grew with churn × retention².
        Returns how many columns went without samples and the samples of the others (key, timestamps, values),
        for the caller to keep sparsely; the columns kept may have moved."""
        with self._lock:
            return self._gc(cutoff_ms, keep)

    def _gc(self, cutoff_ms: Callable[[str], int],
            keep: Container[SeriesKey]) -> tuple[int, list[tuple[SeriesKey, Int64s, Floats]]]:
        if not self._keys:
            return 0, []
        ts = self._ts[self._start:self._n]
        cut_of_kind: dict[str, int] = {}
        kinds = [k[0] for k in self._keys]
        for kind in dict.fromkeys(kinds):
            cut_of_kind[kind] = self._start + int(np.searchsorted(ts, cutoff_ms(kind), "left"))
        first = min(cut_of_kind.values())
        for kind, cut in cut_of_kind.items():
            if cut > first:  # a kind kept for less time than another in the frame: blank its older samples
                cols = [c for c, k in enumerate(kinds) if k == kind]
                self._values[first:cut, cols] = np.nan
        self._start = first
        live = self._values[self._start:self._n]
        ts = self._ts[self._start:self._n]
        alive, moved, emptied = [], [], 0
        for c, k in enumerate(self._keys):
            if k in keep:
                alive.append(c)
                continue
            values = live[:, c]
            have = values == values  # not NaN
            if have.any():
                moved.append((k, ts[have], values[have]))
            else:
                emptied += 1
        if len(alive) < len(self._keys):
            self._compact(alive)
            self._keys = [self._keys[c] for c in alive]
            self._index = {k: c for c, k in enumerate(self._keys)}
        return emptied, moved

    def _compact(self, alive: list[int]) -> None:
        """Keep only the `alive` columns, in order, in the same buffers (the columns left over become spare, NaN),
        unless they would be mostly spare: under churn the buffers then keep their size instead of being made
        anew each time, which leaves the allocator's heap in pieces."""
        values = self._values
        if values.shape[1] > 2 * len(alive) + _MIN_COLUMNS:
            self._values = np.ascontiguousarray(values[:, alive])
            return
        for to, c in enumerate(alive):
            if to != c:
                values[:, to] = values[:, c]
        values[:, len(alive):] = np.nan
