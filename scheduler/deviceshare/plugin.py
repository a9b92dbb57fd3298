"""The DeviceShare scheduler plugin: filter, score, reserve and unreserve on top of the incremental device state."""

from __future__ import annotations

from scheduler.cluster import JSON, Cluster, NodeInfo, key, pod_requests
from scheduler.deviceshare.allocator import LABEL_WELL_PLANNED, LEAST_ALLOCATED, Allocator, Scorer
from scheduler.deviceshare.requests import (
    ANNOTATION_ALLOCATED,
    ANNOTATION_HINT,
    ANNOTATION_JOINT,
    ANNOTATION_PARTITION_SPEC,
    GPU,
    InvalidDeviceRequest,
    PodPlan,
    plan_pod,
)
from scheduler.deviceshare.state import Allocations, DeviceState, NodeDeviceState, encode_allocations
from scheduler.framework import Unschedulable


class DeviceShare:
    """Koordinator's DeviceShare (pkg/scheduler/plugins/deviceshare) for the slim framework.

    Args mirror DeviceShareArgs: `scoring_strategy` is "LeastAllocated" (spread, default) or "MostAllocated"
    (bin-pack); `resource_weights` overrides the per-resource weights. Used amounts come from `state`, which is
    built from assigned pods' device-allocated annotations and updated by reserve/unreserve.
    """

    name = "DeviceShare"

    def __init__(self, scoring_strategy: str = LEAST_ALLOCATED, weight: int = 1,
                 resource_weights: dict[str, int] | None = None, state: DeviceState | None = None) -> None:
        self.weight = weight
        self.scorer = Scorer(scoring_strategy, resource_weights)
        self.allocator = Allocator(self.scorer)
        self.state = state if state is not None else DeviceState()
        self._pod: JSON | None = None
        self._fingerprint: tuple[str | None, ...] = ()
        self._plan: PodPlan | InvalidDeviceRequest | None = None
        self._fits: dict[str, tuple[int, bool, Allocations]] = {}  # node → (state version, complete, result)

    def plan(self, pod: JSON) -> PodPlan:
        """The pod's normalised device requests (cached for the current pod); raises InvalidDeviceRequest."""
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        fp = tuple(annotations.get(a) for a in (ANNOTATION_HINT, ANNOTATION_JOINT, ANNOTATION_PARTITION_SPEC))
        if pod is not self._pod or fp != self._fingerprint or self._plan is None:
            try:
                self._plan = plan_pod(pod, pod_requests(pod))
            except InvalidDeviceRequest as e:
                self._plan = e
            self._pod, self._fingerprint, self._fits = pod, fp, {}
        if isinstance(self._plan, InvalidDeviceRequest):
            raise self._plan
        return self._plan

    def _filter_types(self, st: NodeDeviceState, plan: PodPlan) -> list[str]:
        # device_allocator.go: on well-planned nodes secondary devices are only allocated in Reserve.
        if (GPU in plan.requests and st.labels.get(LABEL_WELL_PLANNED) == "true" and plan.gpu is not None
                and not plan.gpu.shared):
            return [GPU]
        return list(plan.requests)

    def _try(self, pod: JSON, node: NodeInfo, complete: bool) -> Allocations:
        plan = self.plan(pod)
        st = self.state.node(node)
        types = list(plan.requests) if complete else self._filter_types(st, plan)
        cached = self._fits.get(node.name)
        if cached is not None and cached[0] == st.version and (cached[1] or not complete):
            return cached[2]
        allocs = self.allocator.allocate(st, plan, node.labels, types)
        self._fits[node.name] = (st.version, len(types) == len(plan.requests), allocs)
        return allocs

    def filter(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> str | None:
        try:
            if self.plan(pod).empty:
                return None
            self._try(pod, node, complete=False)
        except (InvalidDeviceRequest, Unschedulable) as e:
            return str(e)
        return None

    def score(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> int:
        """Node-level score (1.6): each requested type scored on the node's summed totals/free, averaged over types."""
        try:
            plan = self.plan(pod)
        except InvalidDeviceRequest:
            return 0
        if plan.empty:
            return 0
        st = self.state.node(node)
        scores = []
        for t in self._filter_types(st, plan):
            if t == GPU and plan.gpu is not None:
                request = {r: v * plan.gpu.count for r, v in plan.gpu.per_gpu.items()}
            else:
                request = plan.requests[t]
            scores.append(self.scorer.score(request, st.total_sum.get(t, {}), st.free_sum.get(t, {})))
        return sum(scores) // len(scores) if scores else 0

    def reserve(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> dict[str, str]:
        try:
            plan = self.plan(pod)
        except InvalidDeviceRequest as e:
            raise Unschedulable(str(e)) from e
        if plan.empty:
            return {}
        allocs = self._try(pod, node, complete=True)
        st = self.state.node(node)
        self.state.reserve(node, key(pod), allocs)
        self._fits.pop(node.name, None)
        return {ANNOTATION_ALLOCATED: encode_allocations(allocs, st.ids)}

    def unreserve(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> None:
        self.state.pod_removed(node.name, key(pod))

    def pod_removed(self, node_name: str, pod_key: str) -> None:
        """Forget a deleted or terminated pod's devices (a pod leaving node.pods is noticed on its own)."""
        self.state.pod_removed(node_name, pod_key)
