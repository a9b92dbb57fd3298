"""Whole-cluster vector results kept per request shape and refreshed only for the node rows that changed: a
placement touches one node, so the next pod of the same shape recomputes one row, not every node."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from scheduler.nodeindex import IntArray

MAX_SHAPES = 64
FEW_ROWS = 4  # up to this many changed rows, a plugin's per-node function beats numpy's per-call overhead


def by_rows(cache: dict[tuple[object, ...], tuple[IntArray, Any]], versions: IntArray, key: tuple[object, ...],
            compute: Callable[[Any], Any], one: Callable[[int], Any] | None = None) -> Any:
    """`compute(rows)` for every node, kept in `cache` under `key` with the row `versions` it was computed at; rows
    whose version moved since are recomputed — by `one(row)` when they are few and the plugin has an exact per-node
    equivalent. The array returned is the cache's own: callers do not modify it."""
    hit = cache.get(key)
    if hit is None:
        if len(cache) >= MAX_SHAPES:
            cache.clear()
        result = compute(slice(None))
        cache[key] = (versions.copy(), result)
        return result
    seen, result = hit
    rows = np.flatnonzero(versions != seen)
    if rows.size:
        if one is not None and rows.size <= FEW_ROWS:
            for i in rows.tolist():
                result[i] = one(i)
        else:
            result[rows] = compute(rows)
        seen[rows] = versions[rows]
    return result
