"""The DeviceShare scheduler plugin: filter, score, reserve and unreserve on top of the incremental device state."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from scheduler.cluster import JSON, Cluster, NodeInfo, key, pod_requests
from scheduler.deviceshare.allocator import (
    ANNOTATION_PARTITIONS,
    LABEL_WELL_PLANNED,
    LEAST_ALLOCATED,
    Allocator,
    Scorer,
)
from scheduler.deviceshare.requests import (
    ANNOTATION_ALLOCATED,
    ANNOTATION_HINT,
    ANNOTATION_JOINT,
    ANNOTATION_PARTITION_SPEC,
    DEVICE_TYPES,
    GPU,
    RESOURCE_NAMES,
    InvalidDeviceRequest,
    PodPlan,
    instances,
    plan_pod,
)
from scheduler.deviceshare.state import Allocations, DeviceState, NodeDeviceState, encode_allocations
from scheduler.framework import Unschedulable
from scheduler.nodeindex import BoolArray, IntArray, NodeIndex, Tracker

if TYPE_CHECKING:
    from scheduler.config.args import DeviceShareArgs

_GPU_COLUMNS = {r: c for c, r in enumerate(RESOURCE_NAMES[GPU])}


def _per_device(plan: PodPlan, dtype: str) -> dict[str, int]:
    """The request of one device of the type: what upstream's scoreNode adds to the node's used (`scoring.go`,
    requestsPerInstance), not the pod's total — 2 whole GPUs score as 1 GPU's worth on the summed totals."""
    if dtype == GPU and plan.gpu is not None:
        return plan.gpu.per_gpu
    return instances(plan.requests[dtype], plan.hints.get(dtype), 0)[0]


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
        self.args: DeviceShareArgs | None = None  # set by from_args
        self.scorer = Scorer(scoring_strategy, resource_weights)
        self.allocator = Allocator(self.scorer)
        self.state = state if state is not None else DeviceState()
        self._pod: JSON | None = None
        self._fingerprint: tuple[str | None, ...] = ()
        self._plan: PodPlan | InvalidDeviceRequest | None = None
        self._fits: dict[str, tuple[int, bool, Allocations]] = {}  # node → (state version, complete, result)
        # Per-node counters over NodeIndex rows for the vector stage, refreshed for changed nodes only.
        self._tracker = Tracker()
        self._dirty: set[str] = set()  # nodes whose device state changed (DeviceState listener)
        self.state.listeners.append(self._dirty.add)
        self._weighted = list(self.scorer.weights)  # columns of _total/_free
        self._has: dict[str, BoolArray] = {}  # type → node has devices of it
        self._total: dict[str, IntArray] = {}  # type → Σ totals per weighted resource
        self._free: dict[str, IntArray] = {}  # type → Σ free per weighted resource
        self._planned: BoolArray = np.zeros(0, dtype=np.bool_)  # secondary-device-well-planned
        self._table: BoolArray = np.zeros(0, dtype=np.bool_)  # own gpu-partitions table (any minors per partition)
        self._gpu_ok: BoolArray = np.zeros((0, 0), dtype=np.bool_)  # [node, k-th GPU] healthy
        self._gpu_free: IntArray = np.zeros((0, 0, len(_GPU_COLUMNS)), dtype=np.int64)  # [node, k-th GPU, resource]

    @classmethod
    def from_args(cls, args: DeviceShareArgs, weight: int = 1) -> DeviceShare:
        """The plugin as a KubeSchedulerConfiguration configures it (DeviceShareArgs.scoringStrategy)."""
        plugin = cls(args.scoring_strategy.type, weight, args.scoring_strategy.weights)
        plugin.args = args
        return plugin

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
            scores.append(self.scorer.score(_per_device(plan, t), st.total_sum.get(t, {}), st.free_sum.get(t, {})))
        return sum(scores) // len(scores) if scores else 0

    # ---- the same over every node at once (scheduler.framework's vector stage) ----

    def sync(self, index: NodeIndex) -> None:
        """Bring the per-node arrays up to date (the framework's prepare and every vector call)."""
        changed = self._tracker.changes(index)
        if changed is None:
            n, w = len(index), len(self._weighted)
            self._has = {t: np.zeros(n, dtype=np.bool_) for t in DEVICE_TYPES}
            self._total = {t: np.zeros((n, w), dtype=np.int64) for t in DEVICE_TYPES}
            self._free = {t: np.zeros((n, w), dtype=np.int64) for t in DEVICE_TYPES}
            self._planned, self._table = np.zeros(n, dtype=np.bool_), np.zeros(n, dtype=np.bool_)
            self._gpu_ok = np.zeros((n, 0), dtype=np.bool_)
            self._gpu_free = np.zeros((n, 0, len(_GPU_COLUMNS)), dtype=np.int64)
            rows: set[int] | range = range(n)
        else:
            rows = set(changed)
            rows.update(index.pos[name] for name in self._dirty if name in index.pos)
        for i in rows:
            self._fill(i, self.state.node(index.nodes[i]))
        self._dirty.clear()

    def _fill(self, i: int, st: NodeDeviceState) -> None:
        for t in DEVICE_TYPES:
            self._has[t][i] = bool(st.devices.get(t))
            totals, free = st.total_sum.get(t, {}), st.free_sum.get(t, {})
            for j, r in enumerate(self._weighted):
                self._total[t][i, j], self._free[t][i, j] = totals.get(r, 0), free.get(r, 0)
        self._planned[i] = st.labels.get(LABEL_WELL_PLANNED) == "true"
        self._table[i] = bool(st.annotations.get(ANNOTATION_PARTITIONS))
        gpus = st.devices.get(GPU, {})
        if len(gpus) > self._gpu_ok.shape[1]:
            grow = len(gpus) - self._gpu_ok.shape[1]
            self._gpu_ok = np.pad(self._gpu_ok, ((0, 0), (0, grow)))
            self._gpu_free = np.pad(self._gpu_free, ((0, 0), (0, grow), (0, 0)))
        self._gpu_ok[i], self._gpu_free[i] = False, 0
        free_gpu = st.free.get(GPU, {})
        for k, (m, d) in enumerate(gpus.items()):
            self._gpu_ok[i, k] = bool(d.total)
            for r, v in free_gpu.get(m, {}).items():
                c = _GPU_COLUMNS.get(r)
                if c is not None:
                    self._gpu_free[i, k, c] = v

    def _gpu_only(self, plan: PodPlan) -> bool:
        """Whether well-planned nodes filter and score the GPU alone (see _filter_types)."""
        return GPU in plan.requests and plan.gpu is not None and not plan.gpu.shared

    def prefilter_vector(self, pod: JSON, index: NodeIndex) -> BoolArray | None:
        """False where `filter` surely fails: a requested device type missing, or fewer GPUs that each fit the
        per-GPU request than the GPU count — every allocation path (partition, topology, default) takes whole
        fitting GPUs, except a node's own partition table, which may list any minors and is left to `filter`."""
        self.sync(index)
        n = len(index)
        try:
            plan = self.plan(pod)
        except InvalidDeviceRequest:
            return np.zeros(n, dtype=np.bool_)
        if plan.empty:
            return None
        gpu_only = self._gpu_only(plan)
        ok = np.ones(n, dtype=np.bool_)
        for t in plan.requests:
            cond = self._has[t].copy() if t in self._has else np.zeros(n, dtype=np.bool_)
            if t == GPU and plan.gpu is not None:
                fit = self._gpu_ok.copy()
                for r, v in plan.gpu.per_gpu.items():
                    c = _GPU_COLUMNS.get(r)
                    if c is not None:
                        fit &= self._gpu_free[:, :, c] >= v
                    elif v > 0:
                        fit[:] = False
                cond &= self._table | (fit.sum(axis=1) >= plan.gpu.count)
            ok &= (cond | self._planned) if gpu_only and t != GPU else cond
        return ok

    def score_vector(self, pod: JSON, index: NodeIndex) -> IntArray:
        """Exactly `score` for every node."""
        self.sync(index)
        n = len(index)
        try:
            plan = self.plan(pod)
        except InvalidDeviceRequest:
            return np.zeros(n, dtype=np.int64)
        if plan.empty:
            return np.zeros(n, dtype=np.int64)
        zeros = np.zeros((n, len(self._weighted)), dtype=np.int64)
        scores: dict[str, IntArray] = {}
        for t in plan.requests:
            scores[t] = self.scorer.score_vector(_per_device(plan, t), self._total.get(t, zeros),
                                                 self._free.get(t, zeros))
        every = sum(scores.values(), np.zeros(n, dtype=np.int64)) // len(scores)
        return np.where(self._planned, scores[GPU], every) if self._gpu_only(plan) else every

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
