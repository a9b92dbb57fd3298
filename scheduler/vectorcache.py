"""The vector stage's combined results kept between cycles per pod shape, refreshed only for the node rows that
changed: a placement changes one node, so the next pod of the same shape recomputes that row, not every node.

Only the plugins that opt in (scheduler.interfaces' IncrementalFilterPlugin / IncrementalScorePlugin, not
normalizing) are kept; the framework combines the others' vectors fresh on top, every cycle.
"""

from __future__ import annotations

import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Protocol

import numpy as np

from apis.core.objects import JSON
from scheduler.interfaces import (
    FilterPlugin,
    IncrementalFilterPlugin,
    IncrementalScorePlugin,
    NormalizeScorePlugin,
    ScorePlugin,
)
from scheduler.nodeindex import BoolArray, IntArray, NodeIndex, Rows, Tracker
from scheduler.rowcache import FEW_ROWS

MAX_SHAPES = 32  # entries kept (least recently used dropped): 3 arrays per node each
QUIET = object()  # a quiet scorer's place in a shape key (scheduler.quiet): not kept, not asked


class Reader(Protocol):
    """Something reading a Kept's arrays after its cycle (scheduler.framework.LazyScores)."""

    def settle(self) -> None: ...


class Kept:
    """One pod shape's combined vectors over the kept plugins: `mask` (every kept filter passes), `total` (Σ weight
    × clipped score of the kept scorers), `rank` (total × n + the name tie-break where `mask`, else −1), and which
    plugins they cover (`filters[j]` / `scorers[j]` true: the j-th of the profile's list is in)."""

    def __init__(self, filters: tuple[bool, ...], scorers: tuple[bool, ...]) -> None:
        self.filters, self.scorers = filters, scorers
        self.tracker = Tracker()
        self.mask: BoolArray = np.zeros(0, dtype=np.bool_)
        self.total: IntArray = np.zeros(0, dtype=np.int64)
        self.rank: IntArray = np.zeros(0, dtype=np.int64)
        # the profile's filters but the kept exact ones (set by VectorCache): what a row kept at its node's
        # version still needs run on that node
        self.unsettled: tuple[FilterPlugin, ...] = ()
        # the kept plugins with their names (set by VectorCache), in profile order
        self.row_filters: tuple[tuple[IncrementalFilterPlugin, str], ...] = ()
        self.row_scorers: tuple[tuple[IncrementalScorePlugin, str, int], ...] = ()
        self._readers: list[weakref.ref[Reader]] = []

    def lend(self, reader: Reader) -> None:
        """`reader` reads `mask` and `total` later (a Placement's scores): it is told before they change in place."""
        self._readers.append(weakref.ref(reader))

    def settle(self) -> None:
        """Every reader still alive reads now: `mask` and `total` are about to change in place."""
        for ref in self._readers:
            reader = ref()
            if reader is not None:
                reader.settle()
        self._readers.clear()

    def filters_for(self, index: NodeIndex, i: int) -> tuple[FilterPlugin, ...] | None:
        """The filters node i still needs (None: every one), given this shape's kept rows."""
        if self.mask.item(i) and self.tracker.current(index, i):
            return self.unsettled
        return None


Timings = dict[tuple[str, str], float]  # (plugin, extension point) → seconds spent in its kept hooks this cycle


class VectorCache:
    """A profile's kept vectors, one `Kept` per combination of the opted-in plugins' shapes."""

    def __init__(self, filters: Sequence[FilterPlugin], scorers: Sequence[ScorePlugin],
                 normalizers: Sequence[NormalizeScorePlugin | None]) -> None:
        self.filters = tuple(f if isinstance(f, IncrementalFilterPlugin) else None for f in filters)
        self.scorers = tuple(s if isinstance(s, IncrementalScorePlugin) and norm is None else None
                             for s, norm in zip(scorers, normalizers, strict=True))
        self.names = tuple(f.name for f in filters), tuple(s.name for s in scorers)
        # the opted-in ones with their positions: the shape key holds their shapes, in this order
        self._fkeep = tuple((j, f, self.names[0][j]) for j, f in enumerate(self.filters) if f is not None)
        self._skeep = tuple((j, s, self.names[1][j]) for j, s in enumerate(self.scorers) if s is not None)
        # exact_rows (scheduler.interfaces): on a row kept at its node's version, their filter need not run
        self.exact = tuple(f is not None and getattr(f, "exact_rows", False) is True for f in self.filters)
        self.all_filters = tuple(filters)
        self.weights = tuple(s.weight for s in scorers)
        self._kept: OrderedDict[Hashable, Kept] = OrderedDict()
        self._timed: Timings | None = None

    def _call(self, name: str, point: str, hook: Callable[..., Any], *args: Any) -> Any:
        timed = self._timed
        if timed is None:
            return hook(*args)
        start = time.perf_counter()
        try:
            return hook(*args)
        finally:
            timed[name, point] = timed.get((name, point), 0.0) + time.perf_counter() - start

    def kept(self, pod: JSON, index: NodeIndex, timed: Timings | None = None,
             quiet: Sequence[bool] = ()) -> Kept | None:
        """The pod's kept vectors brought up to date (None: no plugin keeps anything for this pod). `timed`
        gathers the time of each kept plugin's hooks (for the metrics); `quiet[j]`: the j-th scorer is quiet
        about the pod (scheduler.quiet), neither asked nor kept."""
        self._timed = timed
        try:
            return self._bring(pod, index, quiet)
        finally:
            self._timed = None

    def _bring(self, pod: JSON, index: NodeIndex, quiet: Sequence[bool]) -> Kept | None:
        if self._timed is None:  # the usual cycle, without metrics: the hooks called directly
            fshapes = tuple([f.prefilter_shape(pod, index) for _, f, _ in self._fkeep])
            sshapes = tuple([QUIET if quiet and quiet[j] else s.score_shape(pod, index) for j, s, _ in self._skeep])
        else:
            fshapes = tuple([self._call(name, "Filter", f.prefilter_shape, pod, index) for _, f, name in self._fkeep])
            sshapes = tuple([QUIET if quiet and quiet[j] else self._call(name, "Score", s.score_shape, pod, index)
                             for j, s, name in self._skeep])
        if all(x is None for x in fshapes) and all(x is None or x is QUIET for x in sshapes):
            return None
        shape = (fshapes, sshapes)
        kept = self._kept.get(shape)
        if kept is None:
            if len(self._kept) >= MAX_SHAPES:
                self._kept.popitem(last=False)
            on_f, on_s = [False] * len(self.filters), [False] * len(self.scorers)
            for (j, _, _), x in zip(self._fkeep, fshapes, strict=True):
                on_f[j] = x is not None
            for (j, _, _), x in zip(self._skeep, sshapes, strict=True):
                on_s[j] = x is not None and x is not QUIET
            on = tuple(on_f)
            kept = self._kept[shape] = Kept(on, tuple(on_s))
            kept.unsettled = tuple(f for f, k, exact in zip(self.all_filters, on, self.exact, strict=True)
                                   if not (k and exact))
            kept.row_filters = tuple((f, name) for f, name, k in zip(self.filters, self.names[0], on, strict=True)
                                     if f is not None and k)
            kept.row_scorers = tuple((s, name, w) for s, name, w, k in zip(self.scorers, self.names[1], self.weights,
                                                                          kept.scorers, strict=True)
                                     if s is not None and k)
        else:
            self._kept.move_to_end(shape)
        changed = kept.tracker.changes(index)  # after every shape call: they may have touched rows
        if changed is None:
            n = len(index)
            kept.mask, kept.total = np.ones(n, dtype=np.bool_), np.zeros(n, dtype=np.int64)
            kept.rank = np.zeros(n, dtype=np.int64)
            self._refresh(kept, pod, index, slice(None))
        elif changed:
            self._refresh(kept, pod, index, np.array(changed, dtype=np.int64))
        return kept

    def _filter_rows(self, kept: Kept, pod: JSON, index: NodeIndex, rows: Rows) -> list[BoolArray]:
        if self._timed is None:
            return [f.prefilter_rows(pod, index, rows) for f, _ in kept.row_filters]
        return [self._call(name, "Filter", f.prefilter_rows, pod, index, rows) for f, name in kept.row_filters]

    def _score_rows(self, kept: Kept, pod: JSON, index: NodeIndex, rows: Rows) -> list[tuple[IntArray, int]]:
        if self._timed is None:
            return [(s.score_rows(pod, index, rows), w) for s, _, w in kept.row_scorers]
        return [(self._call(name, "Score", s.score_rows, pod, index, rows), w) for s, name, w in kept.row_scorers]

    def _refresh(self, kept: Kept, pod: JSON, index: NodeIndex, rows: Rows) -> None:
        kept.settle()
        if isinstance(rows, np.ndarray) and rows.size <= FEW_ROWS:
            self._refresh_few(kept, pod, index, rows)
            return
        mask: BoolArray | None = None
        for m in self._filter_rows(kept, pod, index, rows):
            mask = m.copy() if mask is None else mask & m
        total: IntArray | None = None
        for raw, w in self._score_rows(kept, pod, index, rows):
            v = np.minimum(raw, 100)
            np.maximum(v, 0, out=v)
            if w != 1:
                v *= w
            total = v if total is None else total + v
        n = len(index)
        if mask is None:
            mask = kept.mask[rows]
        else:
            kept.mask[rows] = mask
        if total is None:
            total = kept.total[rows]
        else:
            kept.total[rows] = total
        kept.rank[rows] = np.where(mask, total * max(n, 1) + (n - 1 - index.name_rank[rows]), -1)

    def _refresh_few(self, kept: Kept, pod: JSON, index: NodeIndex, rows: IntArray) -> None:
        """`_refresh` of a cycle's usual one or two rows, in Python: numpy's per-call cost is most of it here."""
        picked: list[int] = rows.tolist()
        masks = self._filter_rows(kept, pod, index, rows)
        if masks:
            mask = [True] * len(picked)
            for one in masks:
                for k, ok in enumerate(one.tolist()):
                    if not ok:
                        mask[k] = False
        else:
            mask = [bool(kept.mask.item(i)) for i in picked]
        scores = self._score_rows(kept, pod, index, rows)
        if scores:
            total = [0] * len(picked)
            for raw, w in scores:
                for k, v in enumerate(raw.tolist()):
                    total[k] += w * (0 if v < 0 else 100 if v > 100 else v)
        else:
            total = [int(kept.total.item(i)) for i in picked]
        n = len(index)
        for i, m, t in zip(picked, mask, total, strict=True):
            kept.mask[i] = m
            kept.total[i] = t
            kept.rank[i] = t * max(n, 1) + (n - 1 - index.name_rank.item(i)) if m else -1
