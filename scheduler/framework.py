"""The scheduling cycle: filter every node, score the feasible ones, reserve on the best, explain the rest.

Plugins follow kube-scheduler's extension points in the small: `filter` returns None when the pod fits or a reason,
`score` returns 0..100 (weighted by the profile), `reserve` returns annotations to add to the pod (DeviceShare's
`device-allocated`) or raises Unschedulable, `unreserve` undoes it.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from scheduler.cluster import JSON, PODS, Cluster, NodeInfo, key, pod_requests

log = logging.getLogger(__name__)


class Unschedulable(Exception):
    """A plugin cannot place the pod on this node (the message is the reason shown to users)."""


@runtime_checkable
class FilterPlugin(Protocol):
    name: str

    def filter(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> str | None: ...


@runtime_checkable
class ScorePlugin(Protocol):
    name: str
    weight: int

    def score(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> int: ...


@runtime_checkable
class ReservePlugin(Protocol):
    name: str

    def reserve(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> dict[str, str]: ...

    def unreserve(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> None: ...


class NodeResourcesFit:
    """kube-scheduler's NodeResourcesFit filter: every requested resource fits in allocatable − requested."""

    name = "NodeResourcesFit"

    def __init__(self) -> None:
        self._pod: JSON | None = None  # the pod of the current cycle: its requests are parsed once, not per node
        self._requests: dict[str, int] = {}

    def filter(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> str | None:
        if node.free(PODS) < 1 and PODS in node.allocatable:
            return "Too many pods"
        if pod is not self._pod:
            self._pod, self._requests = pod, pod_requests(pod)
        for resource, amount in self._requests.items():
            if amount > 0 and amount > node.free(resource):
                return f"Insufficient {resource}"
        return None


@dataclass
class Placement:
    pod: str
    node: str | None
    annotations: dict[str, str] = field(default_factory=dict)
    reason: str = ""
    scores: dict[str, int] = field(default_factory=dict)  # node → total, for explanations

    def as_json(self) -> dict[str, Any]:
        return {"pod": self.pod, "node": self.node, "annotations": self.annotations,
                **({"reason": self.reason} if self.node is None else {})}


@dataclass
class Scheduler:
    cluster: Cluster
    filters: list[FilterPlugin]
    scorers: list[ScorePlugin]
    reservers: list[ReservePlugin]

    # -- the extension points as a public API (the extender and the gang planner use these) ---------------------
    def feasible(self, pod: JSON, node_names: list[str] | None = None) -> tuple[list[NodeInfo], dict[str, str]]:
        """Nodes (all, or the named ones) the pod fits, and the reason for every other node."""
        nodes = (self.cluster.nodes.values() if node_names is None else
                 [self.cluster.nodes[n] for n in node_names if n in self.cluster.nodes])
        fits: list[NodeInfo] = []
        failed: dict[str, str] = {}
        for node in nodes:
            why = self._filter(pod, node)
            if why is None:
                fits.append(node)
            else:
                failed[node.name] = why
        return fits, failed

    def scores(self, pod: JSON, nodes: list[NodeInfo]) -> dict[str, int]:
        """Weighted score per node (higher is better)."""
        return {n.name: self._score(pod, n) for n in nodes}

    def reserve_on(self, pod: JSON, node_name: str) -> dict[str, str]:
        """Reserve (may raise Unschedulable) and assume the pod on the node; returns the annotations added."""
        node = self.cluster.nodes[node_name]
        annotations = self._reserve(pod, node)
        pod.setdefault("metadata", {}).setdefault("annotations", {}).update(annotations)
        self.cluster.assume(pod, node_name)
        return annotations

    def schedule(self, pod: JSON) -> Placement:
        """One cycle; on success the pod is assumed on the node (its annotations included)."""
        fits, failed = self.feasible(pod)
        reasons: Counter[str] = Counter(failed.values())
        feasible = fits
        ranked = sorted(((self._score(pod, n), n.name) for n in feasible), key=lambda t: (-t[0], t[1]))
        for _total, name in ranked:
            node = self.cluster.nodes[name]
            try:
                annotations = self._reserve(pod, node)
            except Unschedulable as e:
                reasons[str(e)] += 1
                continue
            meta = pod.setdefault("metadata", {})
            meta.setdefault("annotations", {}).update(annotations)
            self.cluster.assume(pod, name)
            return Placement(key(pod), name, annotations, scores={n: s for s, n in ranked})
        summary = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))
        return Placement(key(pod), None, reason=f"0/{len(self.cluster.nodes)} nodes are available: {summary}."
                         if summary else f"0/{len(self.cluster.nodes)} nodes are available.")

    def _filter(self, pod: JSON, node: NodeInfo) -> str | None:
        for f in self.filters:
            try:
                why = f.filter(pod, node, self.cluster)
            except Unschedulable as e:
                why = str(e)
            if why is not None:
                return why
        return None

    def _score(self, pod: JSON, node: NodeInfo) -> int:
        return sum(s.weight * max(0, min(100, s.score(pod, node, self.cluster))) for s in self.scorers)

    def _reserve(self, pod: JSON, node: NodeInfo) -> dict[str, str]:
        done: list[ReservePlugin] = []
        annotations: dict[str, str] = {}
        try:
            for r in self.reservers:
                annotations.update(r.reserve(pod, node, self.cluster))
                done.append(r)
        except Unschedulable:
            for r in reversed(done):
                r.unreserve(pod, node, self.cluster)
            raise
        return annotations
