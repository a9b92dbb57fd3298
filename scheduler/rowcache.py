"""Whole-cluster vector results kept per request shape and refreshed only for the node rows that changed: a
placement touches one node, so the next pod of the same shape recomputes one row, not every node."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from scheduler.nodeindex import IntArray

MAX_SHAPES = 64


def by_rows(cache: dict[tuple[Any, ...], tuple[IntArray, Any]], versions: IntArray, key: tuple[Any, ...],
            compute: Callable[[Any], Any]) -> Any:
    """`compute(rows)` for every node, kept in `cache` under `key` with the row `versions` it was computed at; rows
    whose version moved since are recomputed. The array returned is the cache's own: callers do not modify it."""
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
        result[rows] = compute(rows)
        seen[rows] = versions[rows]
    return result
