"""kube-scheduler's helper.DefaultNormalizeScore: raw scores of the nodes being scored rescaled to 0..100 together."""

from __future__ import annotations

import numpy as np

from scheduler.nodeindex import IntArray

MAX_NODE_SCORE = 100


def default_normalize(scores: IntArray, top: int, reverse: bool) -> IntArray:
    """score × 100 / top (integer division; `top`: the largest score of the nodes being scored); `reverse`: 100 −
    that. A top of 0: every score 0, or 100 reversed."""
    if top <= 0:
        return np.full(len(scores), MAX_NODE_SCORE if reverse else 0, dtype=np.int64)
    out = scores * MAX_NODE_SCORE // top
    return MAX_NODE_SCORE - out if reverse else out
