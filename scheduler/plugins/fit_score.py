"""kube-scheduler's NodeResourcesFit score (one strategy for all resources) and NodeResourcesBalancedAllocation.

Upstream: kubernetes `pkg/scheduler/framework/plugins/noderesources/{least_allocated,most_allocated,
balanced_allocation,resource_allocation}.go`. Resources the node does not have are skipped; an extended resource
the pod does not request is skipped; cpu/memory use the non-zero requests (100m / 200Mi for unset containers) in
NodeResourcesFit and the plain requests in BalancedAllocation.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from apis.core.objects import JSON
from scheduler.cluster import CPU, MEMORY, Cluster, NodeInfo, pod_requests
from scheduler.nodeindex import IntArray, NodeIndex
from scheduler.plugins.columns import NodeColumns, allocation_score
from scheduler.plugins.fitplus import LEAST, MOST, FitPlusArgs, NodeResourcesFitPlus, nonzero_requests


class NodeResourcesFitScore(NodeResourcesFitPlus):
    """NodeResourcesFit's Score: LeastAllocated or MostAllocated over `resources` with their weights."""

    name = "NodeResourcesFit"

    def __init__(self, scoring_type: str = LEAST, resources: tuple[tuple[str, int], ...] = ((CPU, 1), (MEMORY, 1)),
                 weight: int = 1) -> None:
        super().__init__(FitPlusArgs(), weight)
        self.most = scoring_type == MOST
        self.resources = resources

    def score_vector(self, pod: JSON, index: NodeIndex) -> IntArray:
        """Exactly `score` for every node."""
        if self._pod[0] is not pod:
            self._pod = (pod, pod_requests(pod), nonzero_requests(pod))
        _, requests, nz = self._pod
        used = [(r, w) for r, w in self.resources if r in (CPU, MEMORY) or requests.get(r, 0) > 0]
        self.columns.sync(index, [r for r, _ in used], True)
        c, n = self.columns, len(index)
        acc, wsum = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        for r, w in used:
            req = c.nonzero[r] + nz[r] if r in (CPU, MEMORY) else c.req[r] + requests[r]
            has = c.alloc[r] > 0
            acc += allocation_score(req, c.alloc[r], self.most) * w
            wsum += has * w
        return np.where(wsum > 0, acc // np.maximum(wsum, 1), 0).astype(np.int64)

    def score(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> int:
        if self._pod[0] is not pod:
            self._pod = (pod, pod_requests(pod), nonzero_requests(pod))
        _, requests, nz = self._pod
        node_nz = self._node_nonzero(node)
        acc = wsum = 0
        for r, w in self.resources:
            if r in (CPU, MEMORY):
                req = node_nz[r] + nz[r]
            elif requests.get(r, 0) > 0:
                req = node.requested.get(r, 0) + requests[r]
            else:
                continue
            cap = node.allocatable.get(r, 0)
            if cap <= 0:
                continue
            s = min(req, cap) * 100 // cap if self.most else (0 if req > cap else (cap - req) * 100 // cap)
            acc += s * w
            wsum += w
        return acc // wsum if wsum else 0


class NodeResourcesBalancedAllocation:
    """100 × (1 − standard deviation of the requested fractions) over `resources` (cpu and memory by default)."""

    name = "NodeResourcesBalancedAllocation"

    def __init__(self, resources: tuple[tuple[str, int], ...] = ((CPU, 1), (MEMORY, 1)), weight: int = 1) -> None:
        self.resources = resources
        self.weight = weight
        self._pod: tuple[Any, dict[str, int]] = (None, {})
        self.columns = NodeColumns(lambda n: {})

    def score_vector(self, pod: JSON, index: NodeIndex) -> IntArray:
        """Exactly `score` for every node (the same float arithmetic, element-wise)."""
        if self._pod[0] is not pod:
            self._pod = (pod, pod_requests(pod))
        requests = self._pod[1]
        used = [r for r, _ in self.resources if r in (CPU, MEMORY) or requests.get(r, 0) > 0]
        self.columns.sync(index, used, False)
        n = len(index)
        fractions, present = [], []
        for r in used:
            cap = self.columns.alloc[r]
            fractions.append(np.minimum(1.0, (self.columns.req[r] + requests.get(r, 0)) / np.maximum(cap, 1)))
            present.append(cap > 0)
        if not used:
            return np.zeros(n, dtype=np.int64)
        frac, has = np.array(fractions), np.array(present)
        k = has.sum(axis=0)
        # two resources (the usual cpu + memory): |a − b| / 2 as the scalar path computes it, bit for bit
        two = (np.max(np.where(has, frac, -np.inf), axis=0) - np.min(np.where(has, frac, np.inf), axis=0)) / 2
        safe_k = np.maximum(k, 1)
        mean = np.where(has, frac, 0.0).sum(axis=0) / safe_k
        other = np.sqrt(np.where(has, (frac - mean) ** 2, 0.0).sum(axis=0) / safe_k)
        std = np.where(k == 2, two, other)
        return np.where(k > 0, ((1 - std) * 100).astype(np.int64), 0).astype(np.int64)

    def score(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> int:
        if self._pod[0] is not pod:
            self._pod = (pod, pod_requests(pod))
        requests = self._pod[1]
        fractions = []
        for r, _ in self.resources:
            if r not in (CPU, MEMORY) and requests.get(r, 0) == 0:
                continue
            cap = node.allocatable.get(r, 0)
            if cap <= 0:
                continue
            fractions.append(min(1.0, (node.requested.get(r, 0) + requests.get(r, 0)) / cap))
        return _balanced(fractions)


def _balanced(fractions: list[float]) -> int:
    if not fractions:
        return 0
    if len(fractions) == 2:
        std = abs(fractions[0] - fractions[1]) / 2
    else:
        mean = sum(fractions) / len(fractions)
        std = math.sqrt(sum((f - mean) ** 2 for f in fractions) / len(fractions))
    return int((1 - std) * 100)
