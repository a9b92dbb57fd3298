"""ScarceResourceAvoidance: prefer nodes whose scarce resources (e.g. GPUs) the pod would not strand."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from apis.core.errors import InvalidInput
from apis.core.objects import JSON
from apis.core.resources import PODS
from scheduler.cluster import Cluster, NodeInfo, pod_requests
from scheduler.nodeindex import IntArray, NodeIndex, Tracker

NAME = "ScarceResourceAvoidance"


@dataclass
class ScarceArgs:
    resources: list[str] = field(default_factory=list)

    @classmethod
    def from_dict(cls, raw: Mapping[str, object] | None) -> ScarceArgs:
        raw = dict(raw or {})
        unknown = sorted(set(raw) - {"resources", "apiVersion", "kind"})
        if unknown:
            raise InvalidInput(f"{NAME}: unknown args {unknown}")
        res = raw.get("resources") or []
        if not isinstance(res, list):
            raise InvalidInput(f"{NAME}: resources must be a list of resource names")
        return cls([str(r) for r in res])


class ScarceResourceAvoidance:
    """Score-only plugin (pkg/scheduler/plugins/scarceresourceavoidance); raw 0..100, no normalisation."""

    name = NAME

    def __init__(self, args: ScarceArgs | None = None, weight: int = 1) -> None:
        self.args = args or ScarceArgs()
        self.weight = weight
        self._scarce = frozenset(self.args.resources)
        self._pod: tuple[JSON | None, frozenset[str]] = (None, frozenset())  # last pod: names it requests
        self._tracker = Tracker()
        self._names: list[set[str]] = []  # per NodeIndex row: resources with allocatable > 0 (pods aside)
        self._cache: dict[frozenset[str], IntArray] = {}  # the pod's resource names → scores per row

    def score_vector(self, pod: JSON, index: NodeIndex) -> IntArray:
        """Exactly `score` for every node: counts of the node's resources the pod does not ask for."""
        changed = self._tracker.changes(index)
        if changed is None:
            self._names = [{r for r, v in n.allocatable.items() if v > 0 and r != PODS} for n in index.nodes]
            self._cache = {}
        else:
            for i in changed:
                n = index.nodes[i]
                names = {r for r, v in n.allocatable.items() if v > 0 and r != PODS}
                if names != self._names[i]:
                    self._names[i] = names
                    self._cache = {}  # scores depend on the nodes' resource names only
        if self._pod[0] is not pod:
            self._pod = (pod, frozenset(r for r, v in pod_requests(pod).items() if v > 0))
        pod_res = self._pod[1]
        cached = self._cache.get(pod_res)
        if cached is not None:
            return cached
        out = np.empty(len(index), dtype=np.int64)
        for i, names in enumerate(self._names):
            diff = names - pod_res
            scarce = len(diff & self._scarce)
            out[i] = 100 if not diff or not scarce else (len(diff) - scarce) * 100 // len(diff)
        self._cache[pod_res] = out
        return out

    def score(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> int:
        # nodeRes: allocatable > 0 among cpu, memory, ephemeral-storage and scalar resources — `pods` is not one
        node_res = {r for r, v in node.allocatable.items() if v > 0 and r != PODS}
        if self._pod[0] is not pod:
            self._pod = (pod, frozenset(r for r, v in pod_requests(pod).items() if v > 0))
        pod_res = self._pod[1]
        diff = node_res - pod_res
        scarce = diff & self._scarce
        if not diff or not scarce:
            return 100
        return (len(diff) - len(scarce)) * 100 // len(diff)
