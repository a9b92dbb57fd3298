"""NodeResourcesFitPlus: per-resource MostAllocated/LeastAllocated scoring with per-resource weights."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from apis.core import resources as core_resources
from apis.core.errors import InvalidInput
from apis.core.objects import JSON
from apis.core.resources import CPU, MEMORY
from scheduler.cluster import Cluster, NodeInfo, pod_requests, renamed_deprecated
from scheduler.nodeindex import IntArray, NodeIndex
from scheduler.plugins.columns import NodeColumns, allocation_score

NAME = "NodeResourcesFitPlus"
MOST, LEAST = "MostAllocated", "LeastAllocated"
DEFAULT_MILLI_CPU = 100  # k8s.io/kubernetes pkg/scheduler/util DefaultMilliCPURequest
DEFAULT_MEMORY = 200 * 1024 * 1024
_NON_MISSING = {CPU: DEFAULT_MILLI_CPU, MEMORY: DEFAULT_MEMORY}


@dataclass
class ResourceStrategy:
    type: str = LEAST
    weight: int = 1


@dataclass
class FitPlusArgs:
    resources: dict[str, ResourceStrategy] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, raw: Mapping[str, object] | None) -> FitPlusArgs:
        raw = dict(raw or {})
        unknown = sorted(set(raw) - {"resources", "apiVersion", "kind"})
        if unknown:
            raise InvalidInput(f"{NAME}: unknown args {unknown}")
        res = raw.get("resources") or {}
        if not isinstance(res, Mapping):
            raise InvalidInput(f"{NAME}: resources must be a map of resource → {{type, weight}}")
        out: dict[str, ResourceStrategy] = {}
        for name, spec in res.items():
            spec = spec or {}
            t = str(spec.get("type") or LEAST)
            if t not in (MOST, LEAST):
                raise InvalidInput(f"{NAME}: resources[{name}].type must be {MOST} or {LEAST}, got {t!r}")
            w = spec.get("weight", 1)
            if isinstance(w, bool) or not isinstance(w, int) or w < 0:
                raise InvalidInput(f"{NAME}: resources[{name}].weight must be a non-negative integer")
            out[str(name)] = ResourceStrategy(t, w)
        return cls(out)


def nonzero_requests(pod: JSON) -> dict[str, int]:
    """cpu/memory requests with each container's missing request counted as 100m / 200Mi (kube-scheduler's
    NonMissingContainerRequests over resource.PodRequests: sidecars, init maxima and overhead as for requests)."""
    requests = core_resources.pod_requests(pod, non_missing=_NON_MISSING, rename=renamed_deprecated)
    return {CPU: requests.get(CPU, 0), MEMORY: requests.get(MEMORY, 0)}


@dataclass(frozen=True)
class NodeNonZero:
    """A node's Σ non-zero cpu/memory requests, and each pod's share kept to rebuild the sum when it changes."""

    total: dict[str, int]
    by_pod: dict[str, tuple[JSON, dict[str, int]]]  # pod key → (the pod, its non-zero requests)


def node_nonzero(node: NodeInfo, last: NodeNonZero | None) -> NodeNonZero:
    """NodeInfo.NonZeroRequested of kube-scheduler; a pod the last sum saw (the same object) is not parsed again."""
    seen = last.by_pod if last is not None else {}
    by_pod: dict[str, tuple[JSON, dict[str, int]]] = {}
    cpu = memory = 0
    for k, p in node.pods.items():
        hit = seen.get(k)
        if hit is None or hit[0] is not p:
            hit = (p, nonzero_requests(p))
        by_pod[k] = hit
        cpu += hit[1][CPU]
        memory += hit[1][MEMORY]
    return NodeNonZero({CPU: cpu, MEMORY: memory}, by_pod)


_NONZERO = "nonzero-requests"  # the NodeInfo.derived name NodeResourcesFit and FitPlus share


class NodeResourcesFitPlus:
    """Score-only plugin (pkg/scheduler/plugins/noderesourcefitplus); raw 0..100, no normalisation."""

    name = NAME

    def __init__(self, args: FitPlusArgs | None = None, weight: int = 1) -> None:
        self.args = args or FitPlusArgs()
        self.weight = weight
        self._pod: tuple[JSON | None, dict[str, int], dict[str, int]] = (None, {}, {})  # last pod: requests, nz
        self.columns = NodeColumns(self._node_nonzero)  # the same per node row, for score_vector

    def _node_nonzero(self, node: NodeInfo) -> dict[str, int]:
        return node.derived(_NONZERO, node_nonzero).total

    def score_vector(self, pod: JSON, index: NodeIndex) -> IntArray:
        """Exactly `score` for every node."""
        if self._pod[0] is not pod:
            self._pod = (pod, pod_requests(pod), nonzero_requests(pod))
        _, requests, nz = self._pod
        wanted = [r for r, v in requests.items() if v > 0 and r in self.args.resources]
        n = len(index)
        if not wanted:
            return np.full(n, 100, dtype=np.int64)
        pod_nz = nz if CPU in wanted or MEMORY in wanted else {}
        self.columns.sync(index, wanted, bool(pod_nz))
        total, weights = np.zeros(n, dtype=np.int64), 0
        for r in wanted:
            strategy = self.args.resources[r]
            c = self.columns
            req = c.nonzero[r] + pod_nz[r] if r in (CPU, MEMORY) else c.req[r] + requests[r]
            total += allocation_score(req, c.alloc[r], strategy.type == MOST) * strategy.weight
            weights += strategy.weight
        return total // weights if weights else np.zeros(n, dtype=np.int64)

    def score(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> int:
        if self._pod[0] is not pod:  # the incoming pod is scored against every node: parse it once
            self._pod = (pod, pod_requests(pod), nonzero_requests(pod))
        _, requests, nz = self._pod
        wanted = [r for r, v in requests.items() if v > 0 and r in self.args.resources]
        if not wanted:
            return 100
        pod_nz = nz if CPU in wanted or MEMORY in wanted else {}
        node_nz = self._node_nonzero(node) if pod_nz else {}
        total = weights = 0
        for r in wanted:
            strategy = self.args.resources[r]
            req = node_nz[r] + pod_nz[r] if r in (CPU, MEMORY) else node.requested.get(r, 0) + requests[r]
            cap = node.allocatable.get(r, 0)
            if cap == 0:
                s = 0
            elif strategy.type == MOST:
                s = min(req, cap) * 100 // cap
            else:
                s = 0 if req > cap else (cap - req) * 100 // cap
            total += s * strategy.weight
            weights += strategy.weight
        return total // weights if weights else 0
