"""Per-node allocatable, requested and non-zero cpu/memory requests as numpy columns over NodeIndex rows, refreshed for
changed nodes only: the vector form of the resource score plugins (FitPlus, NodeResourcesFit, BalancedAllocation,
ScarceResourceAvoidance)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from apis.core.resources import CPU, MEMORY
from scheduler.cluster import NodeInfo
from scheduler.nodeindex import IntArray, NodeIndex, Tracker


class NodeColumns:
    """`alloc[r]`, `req[r]` (Σ pod requests) and `nonzero[cpu|memory]` (Σ non-zero requests) per node row."""

    def __init__(self, nonzero: Callable[[NodeInfo], dict[str, int]]) -> None:
        self._nonzero_of = nonzero
        self._tracker = Tracker()
        self.alloc: dict[str, IntArray] = {}
        self.req: dict[str, IntArray] = {}
        self.nonzero: dict[str, IntArray] = {}

    def sync(self, index: NodeIndex, resources: Iterable[str], with_nonzero: bool) -> None:
        changed = self._tracker.changes(index)
        nodes = index.nodes
        if changed is None:
            self.alloc, self.req, self.nonzero = {}, {}, {}
        else:
            for i in changed:
                n = nodes[i]
                for r, col in self.alloc.items():
                    col[i] = n.allocatable.get(r, 0)
                for r, col in self.req.items():
                    col[i] = n.requested.get(r, 0)
                if self.nonzero:
                    nz = self._nonzero_of(n)
                    self.nonzero[CPU][i], self.nonzero[MEMORY][i] = nz[CPU], nz[MEMORY]
        for r in resources:
            if r not in self.alloc:
                self.alloc[r] = np.array([n.allocatable.get(r, 0) for n in nodes], dtype=np.int64)
                self.req[r] = np.array([n.requested.get(r, 0) for n in nodes], dtype=np.int64)
        if with_nonzero and not self.nonzero:
            rows = [self._nonzero_of(n) for n in nodes]
            self.nonzero = {CPU: np.array([x[CPU] for x in rows], dtype=np.int64),
                            MEMORY: np.array([x[MEMORY] for x in rows], dtype=np.int64)}


def allocation_score(requested: IntArray, capacity: IntArray, most: bool) -> IntArray:
    """kube's leastRequestedScore / mostRequestedScore per node (0 where capacity is 0)."""
    safe = np.maximum(capacity, 1)
    if most:
        s = np.minimum(requested, capacity) * 100 // safe
    else:
        s = np.where(requested > capacity, 0, (capacity - requested) * 100 // safe)
    return np.where(capacity > 0, s, 0).astype(np.int64)
