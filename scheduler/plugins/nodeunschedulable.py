"""kube-scheduler's NodeUnschedulable: a cordoned node (spec.unschedulable) takes only pods tolerating its taint."""

from __future__ import annotations

import numpy as np

from apis.core.objects import JSON
from apis.core.taints import NO_SCHEDULE, TAINT_NODE_UNSCHEDULABLE, node_unschedulable, pod_tolerations, tolerated
from scheduler.cluster import Cluster, NodeInfo
from scheduler.nodeindex import BoolArray, NodeIndex
from scheduler.plugins.nodefacts import NodeFacts

REASON = "node(s) were unschedulable"
_TAINT = {"key": TAINT_NODE_UNSCHEDULABLE, "effect": NO_SCHEDULE}


def _cordoned(node: NodeInfo) -> bool:
    return node_unschedulable(node.obj)


class NodeUnschedulable:
    name = "NodeUnschedulable"

    def __init__(self) -> None:
        self._facts = NodeFacts(_cordoned, objects_only=True)
        self._mask: tuple[int, BoolArray | None] = (-1, None)

    def sync(self, index: NodeIndex) -> None:
        self._facts.get(index)

    def quiet(self, pod: JSON, index: NodeIndex) -> int | None:
        """No node cordoned: every node passes (scheduler.interfaces' QuietPlugin)."""
        self._facts.get(index)
        return None if self._facts.truthy else 0

    def filter(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> str | None:
        if node_unschedulable(node.obj) and not tolerated(pod_tolerations(pod), _TAINT):
            return REASON
        return None

    def prefilter_vector(self, pod: JSON, index: NodeIndex) -> BoolArray | None:
        cordoned = self._facts.get(index)
        version, mask = self._mask
        if version != self._facts.version:
            mask = ~np.array(cordoned, dtype=np.bool_) if self._facts.truthy else None
            self._mask = (self._facts.version, mask)
        if mask is None or tolerated(pod_tolerations(pod), _TAINT):
            return None
        return mask
