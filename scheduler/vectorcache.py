"""The vector stage's combined results kept between cycles per pod shape, refreshed only for the node rows that
changed: a placement changes one node, so the next pod of the same shape recomputes that row, not every node.

Only the plugins that opt in (scheduler.interfaces' IncrementalFilterPlugin / IncrementalScorePlugin, not
normalizing) are kept; the framework combines the others' vectors fresh on top, every cycle.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence

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


class VectorCache:
    """A profile's kept vectors, one `Kept` per combination of the opted-in plugins' shapes."""

    def __init__(self, filters: Sequence[FilterPlugin], scorers: Sequence[ScorePlugin],
                 normalizers: Sequence[NormalizeScorePlugin | None]) -> None:
        self.filters = tuple(f if isinstance(f, IncrementalFilterPlugin) else None for f in filters)
        self.scorers = tuple(s if isinstance(s, IncrementalScorePlugin) and norm is None else None
                             for s, norm in zip(scorers, normalizers, strict=True))
        self.weights = tuple(s.weight for s in scorers)
        self._kept: OrderedDict[Hashable, Kept] = OrderedDict()

    def kept(self, pod: JSON, index: NodeIndex) -> Kept | None:
        """The pod's kept vectors brought up to date (None: no plugin keeps anything for this pod)."""
        fshapes = tuple(None if f is None else f.prefilter_shape(pod, index) for f in self.filters)
        sshapes = tuple(None if s is None else s.score_shape(pod, index) for s in self.scorers)
        if all(x is None for x in fshapes) and all(x is None for x in sshapes):
            return None
        shape = (fshapes, sshapes)
        kept = self._kept.get(shape)
        if kept is None:
            if len(self._kept) >= MAX_SHAPES:
                self._kept.popitem(last=False)
            kept = self._kept[shape] = Kept(tuple(x is not None for x in fshapes),
                                            tuple(x is not None for x in sshapes))
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

    def _refresh(self, kept: Kept, pod: JSON, index: NodeIndex, rows: Rows) -> None:
        if isinstance(rows, np.ndarray) and rows.size <= FEW_ROWS:
            self._refresh_few(kept, pod, index, rows)
            return
        mask: BoolArray | None = None
        for f, on in zip(self.filters, kept.filters, strict=True):
            if f is not None and on:
                m = f.prefilter_rows(pod, index, rows)
                mask = m.copy() if mask is None else mask & m
        total: IntArray | None = None
        for s, w, on in zip(self.scorers, self.weights, kept.scorers, strict=True):
            if s is not None and on:
                v = np.minimum(s.score_rows(pod, index, rows), 100)
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
        mask = [bool(kept.mask[i]) for i in picked]
        filtered = False
        for f, on in zip(self.filters, kept.filters, strict=True):
            if f is not None and on:
                got = f.prefilter_rows(pod, index, rows).tolist()
                mask = [a and bool(b) for a, b in zip(mask if filtered else [True] * len(picked), got, strict=True)]
                filtered = True
        total = [int(kept.total[i]) for i in picked]
        scored = False
        for s, w, on in zip(self.scorers, self.weights, kept.scorers, strict=True):
            if s is not None and on:
                got = s.score_rows(pod, index, rows).tolist()
                add = [w * max(0, min(100, v)) for v in got]
                total = [a + b for a, b in zip(total if scored else [0] * len(picked), add, strict=True)]
                scored = True
        n = len(index)
        for i, m, t in zip(picked, mask, total, strict=True):
            kept.mask[i] = m
            kept.total[i] = t
            kept.rank[i] = t * max(n, 1) + (n - 1 - int(index.name_rank[i])) if m else -1
