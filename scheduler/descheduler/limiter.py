"""The per-round eviction caps (upstream pkg/descheduler/evictions/eviction_limiter.go).

maxNoOfPodsToEvictPerNode counts pods that have a node, PerNamespace and Total every pod; None is unlimited. The
framework resets the counts at the start of each round.
"""

from __future__ import annotations

from apis.core.objects import JSON

PER_NODE_REACHED = "maximum number of pods per node reached"
PER_NAMESPACE_REACHED = "maximum number of pods per namespace reached"
TOTAL_REACHED = "maximum number of evicted pods total reached"


class Limiter:
    """Implements interfaces.EvictionLimiter."""

    def __init__(self, per_node: int | None = None, per_namespace: int | None = None,
                 total: int | None = None) -> None:
        self.per_node = per_node
        self.per_namespace = per_namespace
        self.max_total = total
        self.by_node: dict[str, int] = {}
        self.by_namespace: dict[str, int] = {}
        self.count = 0

    def allowed(self, pod: JSON) -> str | None:
        node, namespace = _node(pod), _namespace(pod)
        if node and self.per_node is not None and self.by_node.get(node, 0) + 1 > self.per_node:
            return PER_NODE_REACHED
        if self.per_namespace is not None and self.by_namespace.get(namespace, 0) + 1 > self.per_namespace:
            return PER_NAMESPACE_REACHED
        if self.max_total is not None and self.count + 1 > self.max_total:
            return TOTAL_REACHED
        return None

    def done(self, pod: JSON) -> None:
        node, namespace = _node(pod), _namespace(pod)
        if node:
            self.by_node[node] = self.by_node.get(node, 0) + 1
        self.by_namespace[namespace] = self.by_namespace.get(namespace, 0) + 1
        self.count += 1

    def total(self) -> int:
        return self.count

    def node_limit_exceeded(self, node: str) -> bool:
        """NodeLimitExceeded: the node's count has reached the cap (upstream compares for equality)."""
        return self.per_node is not None and self.by_node.get(node, 0) == self.per_node

    def namespace_limit_exceeded(self, namespace: str) -> bool:
        return self.per_namespace is not None and self.by_namespace.get(namespace, 0) == self.per_namespace

    def node_count(self, node: str) -> int:
        return self.by_node.get(node, 0)

    def namespace_count(self, namespace: str) -> int:
        return self.by_namespace.get(namespace, 0)

    def reset(self) -> None:
        self.by_node.clear()
        self.by_namespace.clear()
        self.count = 0


def _node(pod: JSON) -> str:
    spec = pod.get("spec")
    node = spec.get("nodeName") if isinstance(spec, dict) else None
    return node if isinstance(node, str) else ""


def _namespace(pod: JSON) -> str:
    meta = pod.get("metadata")
    ns = meta.get("namespace") if isinstance(meta, dict) else None
    return ns if isinstance(ns, str) else ""
