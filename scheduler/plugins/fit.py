"""kube-scheduler's NodeResourcesFit filter: every requested resource fits in allocatable − requested."""

from __future__ import annotations

import numpy as np

from apis.core.objects import JSON
from apis.core.resources import PODS
from scheduler.cluster import Cluster, NodeInfo, pod_requests
from scheduler.nodeindex import BoolArray, IntArray, NodeIndex, Rows, Tracker
from scheduler.rowcache import FEW_ROWS


class NodeResourcesFit:
    """The Filter (its Score is scheduler.plugins.fit_score.NodeResourcesFitScore)."""

    name = "NodeResourcesFit"
    exact_rows = True  # prefilter_rows is exactly filter's verdict (scheduler.interfaces)

    def __init__(self) -> None:
        self._pod: JSON | None = None  # the pod of the current cycle: its requests are parsed once, not per node
        self._requests: dict[str, int] = {}
        self._tracker = Tracker()
        self._free: dict[str, IntArray] = {}  # resource → allocatable − requested per node
        self._full: BoolArray = np.zeros(0, dtype=np.bool_)  # no room for another pod

    def prefilter_vector(self, pod: JSON, index: NodeIndex) -> BoolArray:
        if pod is not self._pod:
            self._pod, self._requests = pod, pod_requests(pod)
        self.sync(index)
        ok = ~self._full
        for r, amount in self._requests.items():
            if amount > 0:
                free = self._free.get(r)
                if free is None:
                    free = self._free[r] = np.array([n.free(r) for n in index.nodes], dtype=np.int64)
                ok &= free >= amount
        return ok

    def prefilter_shape(self, pod: JSON, index: NodeIndex) -> tuple[tuple[str, int], ...]:
        """The requests are all the mask depends on besides each node's own free resources."""
        if pod is not self._pod:
            self._pod, self._requests = pod, pod_requests(pod)
        self.sync(index)
        return tuple((r, a) for r, a in self._requests.items() if a > 0)

    def prefilter_rows(self, pod: JSON, index: NodeIndex, rows: Rows) -> BoolArray:
        if pod is not self._pod:
            self._pod, self._requests = pod, pod_requests(pod)
        if isinstance(rows, np.ndarray) and rows.size <= FEW_ROWS:  # numpy's per-call cost is most of it here
            return np.array([self.filter(pod, index.nodes[i], index.cluster) is None for i in rows.tolist()],
                            dtype=np.bool_)
        ok: BoolArray = ~self._full[rows]
        for r, amount in self._requests.items():
            if amount > 0:
                free = self._free.get(r)
                if free is None:
                    free = self._free[r] = np.array([n.free(r) for n in index.nodes], dtype=np.int64)
                ok &= free[rows] >= amount
        return ok

    def sync(self, index: NodeIndex) -> None:
        changed = self._tracker.changes(index)
        if changed is None:
            self._free = {}
            self._full = np.array([n.free(PODS) < 1 and PODS in n.allocatable for n in index.nodes], dtype=np.bool_)
        else:
            for i in changed:
                n = index.nodes[i]
                self._full[i] = n.free(PODS) < 1 and PODS in n.allocatable
                for r, free in self._free.items():
                    free[i] = n.free(r)

    def filter(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> str | None:
        if node.free(PODS) < 1 and PODS in node.allocatable:
            return "Too many pods"
        if pod is not self._pod:
            self._pod, self._requests = pod, pod_requests(pod)
        for resource, amount in self._requests.items():
            if amount > 0 and amount > node.free(resource):
                return f"Insufficient {resource}"
        return None
