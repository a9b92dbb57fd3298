"""The DeviceShare scheduler plugin: filter, score, reserve and unreserve on top of the incremental device state."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from apis.core.objects import JSON
from apis.extension.device_allocated import ANNOTATION_DEVICE_ALLOCATED
from apis.extension.device_share import (
    ANNOTATION_DEVICE_ALLOCATE_HINT,
    ANNOTATION_DEVICE_JOINT_ALLOCATE,
    ANNOTATION_GPU_PARTITION_SPEC,
    ANNOTATION_GPU_PARTITIONS,
    LABEL_GPU_ISOLATION_PROVIDER,
    LABEL_GPU_MODEL,
    LABEL_GPU_PARTITION_POLICY,
    LABEL_GPU_VENDOR,
    LABEL_SECONDARY_DEVICE_WELL_PLANNED,
)
from apis.scheduling.device import DEVICE_TYPE_GPU, DEVICE_TYPES
from scheduler.cluster import Cluster, NodeInfo, cycle_of, key, pod_requests
from scheduler.config.args import DeviceShareArgs
from scheduler.deviceshare.allocator import (
    LEAST_ALLOCATED,
    Allocator,
    Scorer,
)
from scheduler.deviceshare.requests import RESOURCE_NAMES, InvalidDeviceRequest, PodPlan, instances, plan_pod
from scheduler.deviceshare.state import (
    Allocation,
    Allocations,
    DeviceState,
    DeviceTotals,
    NodeDeviceState,
    encode_allocations,
)
from scheduler.deviceshare.templates import (
    ERR_NO_TEMPLATE,
    Catalog,
    TemplatesConfig,
    describe,
    describe_resources,
    enforced,
    match,
    parse_catalog,
)
from scheduler.deviceshare.vendors import (
    HAMI_CORE,
    LOCK_KEYS,
    VENDOR_CAMBRICON,
    VENDOR_HUAWEI,
    VENDOR_METAX,
    Adapted,
    adapt,
    check,
    gpu_model,
    isolation_provider,
    lock_held,
    provider_mismatch,
)
from scheduler.interfaces import ReservationLender, Unschedulable
from scheduler.nodeindex import BoolArray, IntArray, NodeIndex, Rows, Tracker
from scheduler.numa.hints import generate
from scheduler.rowcache import FEW_ROWS, by_rows

log = logging.getLogger(__name__)
_GPU_COLUMNS = {r: c for c, r in enumerate(RESOURCE_NAMES[DEVICE_TYPE_GPU])}
# whose device plugins need the adapter's annotations
_ADAPTED_VENDORS = (VENDOR_HUAWEI, VENDOR_CAMBRICON, VENDOR_METAX)
_PLANS_SIZE = 256  # distinct pod shapes whose plans are kept; a cluster's pods repeat a few
_ALLOCATIONS_SIZE = 64  # allocations kept per device layout (see DeviceShare._unused_allocation)
_ALLOCATOR_LABELS = (LABEL_GPU_VENDOR, LABEL_GPU_MODEL, LABEL_GPU_PARTITION_POLICY)  # what the allocator reads


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _gpu_row(free: dict[str, int]) -> list[int]:
    """One GPU's free amounts in the columns of DeviceShare's GPU array (other resources left out)."""
    row = [0] * len(_GPU_COLUMNS)
    for r, v in free.items():
        c = _GPU_COLUMNS.get(r)
        if c is not None:
            row[c] = v
    return row


def _copied(allocs: Allocations) -> Allocations:
    """A copy its holder may change without changing `allocs`."""
    return {t: [Allocation(a.minor, dict(a.resources), list(a.vfs), a.template) for a in items]
            for t, items in allocs.items()}


def _per_device(plan: PodPlan, dtype: str) -> dict[str, int]:
    """The request of one device of the type: what upstream's scoreNode adds to the node's used (`scoring.go`,
    requestsPerInstance), not the pod's total — 2 whole GPUs score as 1 GPU's worth on the summed totals."""
    if dtype == DEVICE_TYPE_GPU and plan.gpu is not None:
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
                 resource_weights: dict[str, int] | None = None, state: DeviceState | None = None, *,
                 templates: TemplatesConfig | None = None,
                 gpu_share_unsupported_models: Iterable[tuple[str, str]] = (),
                 device_plugin_adaption: bool | None = None,
                 clock: Callable[[], dt.datetime] = _utcnow) -> None:
        """`templates` is DeviceShareArgs.gpuSharedResourceTemplatesConfig, `gpu_share_unsupported_models` its
        gpuShareUnsupportedModels as (vendor, model) pairs; `device_plugin_adaption` is upstream's feature gate
        DevicePluginAdaption: True adapts every device pod, False none, None (default) the pods on Huawei and
        Cambricon nodes and HAMi-core pods, whose device plugins cannot work without it."""
        self.weight = weight
        self.args: DeviceShareArgs | None = None  # set by from_args
        self.templates = templates or TemplatesConfig()
        self.unsupported_models = frozenset(gpu_share_unsupported_models)
        self.adaption = device_plugin_adaption
        self.clock = clock
        self._catalog: Catalog = {}
        self._catalog_source: Any = None  # the ConfigMap object the catalog was parsed from
        self._catalog_version = 0
        self._prebind: dict[str, Adapted] = {}  # pod key → pod labels / node annotations to write before binding
        self._locks: dict[str, tuple[Any, str]] = {}  # node → (its Node object when we locked it, lock value)
        self.scorer = Scorer(scoring_strategy, resource_weights)
        self.allocator = Allocator(self.scorer)
        self.state = state if state is not None else DeviceState()
        self._pod: JSON | None = None
        self._fingerprint: tuple[object, ...] = ()
        self._plan: PodPlan | InvalidDeviceRequest | None = None
        self._plan_cycle: object | None = None  # the cycle (cluster.cycle_of) `_plan` was last checked in
        self._plans: dict[tuple[object, ...], PodPlan] = {}  # see plan: pods of one shape share one (read only)
        self._fits: dict[str, tuple[Any, bool, Allocations]] = {}  # node → ((state version, NUMA), complete, result)
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
        self._row_version: IntArray = np.zeros(0, dtype=np.int64)  # bumped whenever a row is refilled
        self._filled: list[DeviceTotals | None] = []  # what each row was last filled from (see _fill)
        # Each row's totals as of the last sync; the arrays are filled from them only when an array is read
        # (`_flush`): a placement's row is answered in Python from them (`_prefilter_row`, `_score_row`).
        self._current: list[DeviceTotals] = []
        self._pending: set[int] = set()  # rows whose arrays are behind `_current`
        self._row_cache: dict[tuple[object, ...], tuple[IntArray, Any]] = {}  # see _by_rows
        self._shaped: tuple[Any, PodPlan | None, tuple[object, ...]] = (None, None, ())  # the last prefilter_shape

    def sync_templates(self, cluster: Cluster | None) -> None:
        """Re-read the GPU shared resource templates when their ConfigMap object changed."""
        cm = cluster.configmaps.get(self.templates.key) if cluster is not None else None
        if cm is self._catalog_source:
            return
        self._catalog_source, self._catalog_version = cm, self._catalog_version + 1
        try:
            self._catalog = parse_catalog(cm)
        except ValueError as e:
            log.warning("ConfigMap %s: GPU shared resource templates ignored: %s", self.templates.key, e)
            self._catalog = {}

    def _plan_templates(self, plan: PodPlan) -> None:
        """parseGPURequirements: a shared request naming a matched resource must equal some template exactly."""
        if plan.gpu is None or not enforced(self.templates, plan.gpu.per_gpu, plan.gpu.shared):
            return
        found = match(self._catalog, plan.gpu.per_gpu)
        if not found:
            where = ("" if self._catalog_source is not None else
                     f" (ConfigMap {self.templates.key} not found)")
            raise InvalidDeviceRequest(f"{ERR_NO_TEMPLATE} for {{{describe_resources(plan.gpu.per_gpu)}}}; "
                                       f"templates: {describe(self._catalog)}{where}")
        plan.templates, plan.template_catalog = found, self._catalog

    @classmethod
    def from_args(cls, args: DeviceShareArgs, weight: int = 1) -> DeviceShare:
        """The plugin as a KubeSchedulerConfiguration configures it (DeviceShareArgs: scoringStrategy, the GPU
        shared resource templates' ConfigMap and matched resources, gpuShareUnsupportedModels)."""
        t = args.gpu_shared_resource_templates_config
        plugin = cls(args.scoring_strategy.type, weight, args.scoring_strategy.weights,
                     templates=TemplatesConfig(t.config_map_namespace, t.config_map_name, tuple(t.matched_resources)),
                     gpu_share_unsupported_models=args.gpu_share_unsupported_models)
        plugin.args = args
        return plugin

    def plan(self, pod: JSON) -> PodPlan:
        """The pod's normalised device requests (cached for the current pod, and shared by the pods of one shape:
        the same requests, device annotations and templates); raises InvalidDeviceRequest."""
        cycle = cycle_of(pod)
        if (cycle is not None and cycle is self._plan_cycle and pod is self._pod and self._plan is not None
                and self._fingerprint[-1] == self._catalog_version):
            if isinstance(self._plan, InvalidDeviceRequest):  # asked again in the pod's own cycle: unchanged
                raise self._plan
            return self._plan
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        fp = (*(annotations.get(a) for a in (ANNOTATION_DEVICE_ALLOCATE_HINT, ANNOTATION_DEVICE_JOINT_ALLOCATE,
                                             ANNOTATION_GPU_PARTITION_SPEC)),
              self._catalog_version)
        if pod is not self._pod or fp != self._fingerprint or self._plan is None:
            requests = pod_requests(pod)
            shape = (fp, frozenset(requests.items()))  # all a plan is made of (plan_pod reads nothing else)
            plan = self._plans.get(shape)
            if plan is not None:
                self._plan = plan
            else:
                try:
                    plan = plan_pod(pod, requests)
                    self._plan_templates(plan)
                except InvalidDeviceRequest as e:
                    self._plan = e  # not kept: each pod raises its own
                else:
                    if len(self._plans) >= _PLANS_SIZE:
                        self._plans.clear()
                    self._plan = self._plans[shape] = plan
            self._pod, self._fingerprint, self._fits = pod, fp, {}
        self._plan_cycle = cycle
        if isinstance(self._plan, InvalidDeviceRequest):
            raise self._plan
        return self._plan

    def _filter_types(self, st: NodeDeviceState, plan: PodPlan) -> list[str]:
        # device_allocator.go: on well-planned nodes secondary devices are only allocated in Reserve.
        if (DEVICE_TYPE_GPU in plan.requests and st.labels.get(LABEL_SECONDARY_DEVICE_WELL_PLANNED) == "true"
                and plan.gpu is not None
                and not plan.gpu.shared):
            return [DEVICE_TYPE_GPU]
        return list(plan.requests)

    def _try(self, pod: JSON, plan: PodPlan, node: NodeInfo, st: NodeDeviceState, labels: dict[str, str],
             complete: bool) -> Allocations:
        """The pod's allocation on the node (`st` its state, `labels` its labels), the one Filter found kept for
        Reserve while nothing it depends on moved."""
        types = list(plan.requests) if complete else self._filter_types(st, plan)
        numa = self.numa_affinity(pod, node) if self.numa_affinity is not None else None
        preferred = self.reserved_devices(pod, node) if self.reserved_devices is not None else None
        only = bool(preferred) and self.restricted_reservation is not None and self.restricted_reservation(pod, node)
        stamp = (st.version, numa, id(preferred) if preferred else None, only)
        cached = self._fits.get(node.name)
        if cached is not None and cached[0] == stamp and (cached[1] or not complete):
            return cached[2]
        if not preferred and st.unused():  # no device held on the node: its layout's allocation
            allocs = self._unused_allocation(st, plan, labels, types, numa)
        else:
            allocs = self.allocator.allocate_within(st, plan, labels, types, numa, preferred, only)
        self._fits[node.name] = (stamp, len(types) == len(plan.requests), allocs)
        return allocs

    def _unused_allocation(self, st: NodeDeviceState, plan: PodPlan, labels: dict[str, str], types: list[str],
                           numa: frozenset[int] | None) -> Allocations:
        """The allocator's answer on a node none of whose devices is held, kept per layout: there it depends
        only on the layout, the plan, the types, the NUMA nodes and the labels the allocator reads (vendor, model,
        partition policy of the Node and the Device CR, the CR's partition table). Each caller gets its own copy.
        A node whose partition table was read before (possibly under other labels) is allocated afresh."""
        if st.partition_cache is not None:
            return self.allocator.allocate_within(st, plan, labels, types, numa)
        memo = st.layout.allocations
        at = (id(plan), tuple(types), numa, *(labels.get(k) for k in _ALLOCATOR_LABELS),
              *(st.labels.get(k) for k in _ALLOCATOR_LABELS), st.annotations.get(ANNOTATION_GPU_PARTITIONS))
        kept = memo.get(at)
        if kept is not None and kept[0] is plan:
            _, allocs, st.partition_cache, st.topology_cache = kept
            return _copied(allocs)
        allocs = self.allocator.allocate_within(st, plan, labels, types, numa)  # raises Unschedulable: not kept
        if len(memo) >= _ALLOCATIONS_SIZE:
            memo.clear()
        memo[at] = (plan, _copied(allocs), st.partition_cache, st.topology_cache)  # the plan held: its id stays
        return allocs

    def numa_hints(self, pod: JSON, node: NodeInfo, numa_nodes: list[int]) -> tuple[str, list[Any]] | None:
        """NodeNUMAResource's hint provider (upstream deviceshare/topology_hint.go): (the requested device types,
        the NUMA sets the devices can be allocated in now); None when the pod asks no devices. **[decision]** a set
        is preferred when it has as few NUMA nodes as the narrowest set holding enough devices of each type at all
        (counted by the devices an unconfined allocation on this node takes)."""
        try:
            plan = self.plan(pod)
        except InvalidDeviceRequest:
            return None
        if plan.empty:
            return None
        st = self.state.node(node)
        types = list(plan.requests)

        def fits(m: frozenset[int] | None) -> Allocations | None:
            try:
                return self.allocator.allocate_within(st, plan, node.labels, types, m)
            except Unschedulable:
                return None

        anywhere = fits(None)
        if anywhere is None:
            return "+".join(types), []
        needed = {t: len({a.minor for a in anywhere.get(t, [])}) for t in types}

        def ever(m: frozenset[int]) -> bool:
            return all(sum(1 for d in st.devices.get(t, {}).values() if d.numa in m and d.total) >= n
                       for t, n in needed.items())

        return "+".join(types), generate(numa_nodes, lambda m: fits(m) is not None, ever)

    numa_affinity: Callable[[JSON, NodeInfo], frozenset[int] | None] | None = None  # NodeNUMAResource.affinity
    # Reservation.reserved_devices: an owner's reservation devices on the node, preferred by the allocator
    reserved_devices: Callable[[JSON, NodeInfo], Allocations | None] | None = None
    # Reservation.restricted_on: the owner's reservation is Restricted, so its devices are the only ones it gets
    restricted_reservation: Callable[[JSON, NodeInfo], bool] | None = None

    def align_numa(self, affinity: Callable[[JSON, NodeInfo], frozenset[int] | None]) -> None:
        """Allocate within the NUMA nodes NodeNUMAResource chose for the pod (device NUMA alignment)."""
        self.numa_affinity = affinity

    def serve_reservations(self, lender: ReservationLender) -> None:
        """Prefer an owner's reserved devices (and only those when its reservation is Restricted)."""
        self.reserved_devices, self.restricted_reservation = lender.reserved_devices, lender.restricted_on

    def filter(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> str | None:
        self.sync_templates(cluster)
        try:
            plan = self.plan(pod)
            if plan.empty:
                return None
            st, labels = self.state.node(node), node.labels
            vendor, model = gpu_model(labels, st.labels)
            why = self._vendor_filter(pod, plan, node, cluster, vendor, model)
            if why is None:
                why = self._vendor_check(vendor, self._try(pod, plan, node, st, labels, complete=False))
        except (InvalidDeviceRequest, Unschedulable) as e:
            return str(e)
        return why

    # ---- vendors: HAMi-core, unsupported models, device plugin locks and adapters ----

    def _adapts(self, pod: JSON, vendor: str) -> bool:
        if self.adaption is not None:
            return self.adaption
        labels = (pod.get("metadata") or {}).get("labels") or {}
        provider = labels.get(LABEL_GPU_ISOLATION_PROVIDER, "")
        return vendor in _ADAPTED_VENDORS or isolation_provider(provider) == HAMI_CORE

    def _vendor_filter(self, pod: JSON, plan: PodPlan, node: NodeInfo, cluster: Cluster, vendor: str,
                       model: str) -> str | None:
        if plan.gpu is None:
            return None
        if plan.gpu.shared:
            why = provider_mismatch((pod.get("metadata") or {}).get("labels") or {}, node.labels)
            if why is not None:
                return why
            if (vendor, model) in self.unsupported_models:
                return f"model {model!r} of vendor {vendor!r} does not support GPU Share".replace("'", '"')
        lock = LOCK_KEYS.get(vendor)
        if lock is None or not self._adapts(pod, vendor):
            return None
        mine = self._locks.get(node.name)
        value = mine[1] if mine is not None and mine[0] is node.obj else (
            ((node.obj.get("metadata") or {}).get("annotations") or {}).get(lock))
        return lock_held(value, self.clock(), lambda k: k in node.pods or any(
            k in n.pods for n in cluster.nodes.values()))

    def _vendor_check(self, vendor: str, allocs: Allocations) -> str | None:
        return check(vendor, allocs) if vendor in _ADAPTED_VENDORS and self.adaption is not False else None

    def prebind_patches(self, pod_key: str) -> Adapted | None:
        """What must be written before the pod's Binding besides its annotations (pod labels, node locks);
        handed out once."""
        return self._prebind.pop(pod_key, None)

    def score(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> int:
        """Node-level score (1.6): each requested type scored on the node's summed totals/free, averaged over types."""
        self.sync_templates(cluster)
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
            self._current = [self.state.totals(node) for node in index.nodes]
            self._fill_all(self._current)
            self._pending.clear()
            self._row_version = np.ones(len(index), dtype=np.int64)
            self._row_cache.clear()
        else:
            rows = set(changed)
            if self._dirty:
                unreported = {index.pos[name] for name in self._dirty if name in index.pos} - rows
                for i in unreported:  # device state the node did not report: rows kept by the framework are stale
                    index.touch(i)
                rows |= unreported
            current, versions = self._current, self._row_version
            for i in rows:
                current[i] = self.state.totals(index.nodes[i])
                versions[i] += 1
            self._pending |= rows
        self._dirty.clear()

    def _flush(self) -> None:
        """Fill the arrays' rows that are behind the last sync (before any array is read)."""
        if self._pending:
            for i in self._pending:
                self._fill(i, self._current[i])
            self._pending.clear()

    def _fill_all(self, nodes: list[DeviceTotals]) -> None:
        """Every row as `_fill` would write it, built as lists and handed to numpy once per array (a cold start
        filled row by row made ~20 numpy calls a node); nodes sharing their sums (unused_totals) share rows."""
        n, w, cols = len(nodes), len(self._weighted), len(_GPU_COLUMNS)
        rows: dict[int, list[int]] = {}  # id of a sums map → its row (no map changes during this call)

        def row(amounts: dict[str, int], order: list[str]) -> list[int]:
            got = rows.get(id(amounts))
            if got is None:
                got = rows[id(amounts)] = [amounts.get(r, 0) for r in order]
            return got

        empty: dict[str, int] = {}
        self._has, self._total, self._free = {}, {}, {}
        for t in DEVICE_TYPES:
            self._has[t] = np.array([t in d.types for d in nodes], dtype=np.bool_).reshape(n)
            self._total[t] = np.array([row(d.total_sum.get(t, empty), self._weighted) for d in nodes],
                                      dtype=np.int64).reshape(n, w)
            self._free[t] = np.array([row(d.free_sum.get(t, empty), self._weighted) for d in nodes],
                                     dtype=np.int64).reshape(n, w)
        self._planned = np.array([d.labels.get(LABEL_SECONDARY_DEVICE_WELL_PLANNED) == "true" for d in nodes],
                                 dtype=np.bool_).reshape(n)
        self._table = np.array([bool(d.annotations.get(ANNOTATION_GPU_PARTITIONS)) for d in nodes],
                               dtype=np.bool_).reshape(n)
        width = max((len(d.gpus) for d in nodes), default=0)
        gpu_rows: dict[int, tuple[list[bool], list[list[int]]]] = {}  # id of a node's GPU tuple → its two rows
        ok, free = [], []
        for d in nodes:
            got = gpu_rows.get(id(d.gpus))
            if got is None:
                pad = width - len(d.gpus)
                got = gpu_rows[id(d.gpus)] = ([healthy for healthy, _ in d.gpus] + [False] * pad,
                                              [_gpu_row(f) for _, f in d.gpus] + [[0] * cols] * pad)
            ok.append(got[0])
            free.append(got[1])
        self._gpu_ok = np.array(ok, dtype=np.bool_).reshape(n, width)
        self._gpu_free = np.array(free, dtype=np.int64).reshape(n, width, cols)
        self._filled = list(nodes)

    def _by_rows(self, key: tuple[object, ...], compute: Callable[[Any], Any],
                 one: Callable[[int], Any] | None = None) -> Any:
        """`compute(rows)` over every node, cached per key; only rows whose version moved since are recomputed."""
        return by_rows(self._row_cache, self._row_version, key, compute, one)

    @staticmethod
    def _shape(plan: PodPlan) -> tuple[object, ...]:
        gpu = plan.gpu
        return (tuple((t, tuple(sorted(r.items()))) for t, r in plan.requests.items()),
                None if gpu is None else (tuple(sorted(gpu.per_gpu.items())), gpu.count, gpu.shared))

    def _fill(self, i: int, d: DeviceTotals) -> None:
        # rows are assigned from lists: one numpy call per row rather than one per element; a type the node had
        # no device of before nor has now keeps its zero rows (a type outside `types` has empty sums). What the
        # row was filled from last is held, so what is the same object now is not written again: the summed
        # totals are shared and never changed (a layout's, unused_totals'), a GPU's free map is replaced when it
        # changes (NodeDeviceState._refresh_free) — a placement rewrites one GPU, not eight.
        was, self._filled[i] = self._filled[i], d
        same_totals = was is not None and d.total_sum is was.total_sum
        for t in DEVICE_TYPES:
            has = t in d.types
            if not has and not self._has[t][i]:
                continue
            if not (same_totals and self._has[t][i] == has):
                self._total[t][i] = [d.total_sum.get(t, {}).get(r, 0) for r in self._weighted]
            self._has[t][i] = has
            free = d.free_sum.get(t, {})
            self._free[t][i] = [free.get(r, 0) for r in self._weighted]
        self._planned[i] = d.labels.get(LABEL_SECONDARY_DEVICE_WELL_PLANNED) == "true"
        self._table[i] = bool(d.annotations.get(ANNOTATION_GPU_PARTITIONS))
        if len(d.gpus) > self._gpu_ok.shape[1]:
            grow = len(d.gpus) - self._gpu_ok.shape[1]
            self._gpu_ok = np.pad(self._gpu_ok, ((0, 0), (0, grow)))
            self._gpu_free = np.pad(self._gpu_free, ((0, 0), (0, grow), (0, 0)))
        if was is not None and len(was.gpus) == len(d.gpus):
            for k, ((healthy, free), (was_healthy, was_free)) in enumerate(zip(d.gpus, was.gpus, strict=True)):
                if free is not was_free:
                    self._gpu_free[i, k] = _gpu_row(free)
                if healthy != was_healthy:
                    self._gpu_ok[i, k] = healthy
            return
        pad = self._gpu_ok.shape[1] - len(d.gpus)  # whole rows, padded: two numpy calls for the GPUs
        self._gpu_ok[i] = [healthy for healthy, _ in d.gpus] + [False] * pad
        self._gpu_free[i] = [_gpu_row(free) for _, free in d.gpus] + [[0] * len(_GPU_COLUMNS)] * pad

    def _gpu_only(self, plan: PodPlan) -> bool:
        """Whether well-planned nodes filter and score the GPU alone (see _filter_types)."""
        return DEVICE_TYPE_GPU in plan.requests and plan.gpu is not None and not plan.gpu.shared

    def prefilter_vector(self, pod: JSON, index: NodeIndex) -> BoolArray | None:
        """False where `filter` surely fails: a requested device type missing, or fewer GPUs that each fit the
        per-GPU request than the GPU count — every allocation path (partition, topology, default) takes whole
        fitting GPUs, except a node's own partition table, which may list any minors and is left to `filter`.
        The arrays are brought up to date only for a pod that asks devices."""
        self.sync_templates(index.cluster)
        n = len(index)
        try:
            plan = self.plan(pod)
        except InvalidDeviceRequest:
            return np.zeros(n, dtype=np.bool_)
        if plan.empty:
            return None
        self.sync(index)
        ok: BoolArray = self._by_rows(("prefilter", *self._shape(plan)), lambda rows: self._prefilter_rows(plan, rows))
        return ok

    def _vector_plan(self, pod: JSON, index: NodeIndex) -> PodPlan | None:
        """The pod's plan (None: its device request is invalid), the arrays brought up to date for a pod that asks
        devices (a pod asking none is answered without them, as `prefilter_vector` does)."""
        self.sync_templates(index.cluster)
        try:
            plan = self.plan(pod)
        except InvalidDeviceRequest:
            return None
        if not plan.empty:
            self.sync(index)
        return plan

    def prefilter_shape(self, pod: JSON, index: NodeIndex) -> tuple[object, ...]:
        """The normalised device requests: the mask depends on nothing else but each node's device counters."""
        plan = self._vector_plan(pod, index)
        shaped = self._shaped
        if shaped[0] is pod and shaped[1] is plan:  # the same plan object: asked already this cycle
            return shaped[2]
        if shaped[1] is plan and plan is not None:  # pods of one shape share their plan: so does their shape
            shape = shaped[2]
        else:
            shape = ("invalid",) if plan is None else ("empty",) if plan.empty else self._shape(plan)
        self._shaped = (pod, plan, shape)
        return shape

    score_shape = prefilter_shape

    def _rows_plan(self, pod: JSON, index: NodeIndex) -> PodPlan | None:
        """The plan of the pod whose shape was just asked (the rows hooks follow the shape hooks in a cycle)."""
        shaped = self._shaped
        return shaped[1] if shaped[0] is pod else self._vector_plan(pod, index)

    def prefilter_rows(self, pod: JSON, index: NodeIndex, rows: Rows) -> BoolArray:
        plan = self._rows_plan(pod, index)
        if plan is None or plan.empty:  # the arrays may not be synced for such a pod: counted from the index
            return np.full(len(index) if isinstance(rows, slice) else len(rows), plan is not None, dtype=np.bool_)
        if isinstance(rows, np.ndarray) and rows.size <= FEW_ROWS:
            current = self._current
            return np.array([self._prefilter_row(plan, current[i]) for i in rows.tolist()], dtype=np.bool_)
        return self._prefilter_rows(plan, rows)

    def _prefilter_row(self, plan: PodPlan, d: DeviceTotals) -> bool:
        """`_prefilter_rows` of one row, in Python from the totals its arrays are filled from (the GPUs counted
        until enough of them fit)."""
        gpu_only = self._gpu_only(plan)
        planned = d.labels.get(LABEL_SECONDARY_DEVICE_WELL_PLANNED) == "true"
        ok = True
        for t in plan.requests:
            cond = t in DEVICE_TYPES and t in d.types
            if (cond and t == DEVICE_TYPE_GPU and plan.gpu is not None
                    and not d.annotations.get(ANNOTATION_GPU_PARTITIONS)):
                need = plan.gpu.count
                fitting = 0
                # a resource outside the GPU columns reads 0 there: asked for, no GPU fits
                if all(r in _GPU_COLUMNS or v <= 0 for r, v in plan.gpu.per_gpu.items()):
                    asked = [(r, v) for r, v in plan.gpu.per_gpu.items() if r in _GPU_COLUMNS]
                    for healthy, free in d.gpus:
                        if healthy and all(free.get(r, 0) >= v for r, v in asked):
                            fitting += 1
                            if fitting >= need:
                                break
                cond = fitting >= need
            ok = ok and ((cond or planned) if gpu_only and t != DEVICE_TYPE_GPU else cond)
        return ok

    def _score_row(self, plan: PodPlan, d: DeviceTotals) -> int:
        """`_score_rows` of one row, in Python from the totals its arrays are filled from."""
        scores = {t: self.scorer.score(_per_device(plan, t), d.total_sum.get(t, {}), d.free_sum.get(t, {}))
                  for t in plan.requests}
        if self._gpu_only(plan) and d.labels.get(LABEL_SECONDARY_DEVICE_WELL_PLANNED) == "true":
            return scores[DEVICE_TYPE_GPU]
        return sum(scores.values()) // len(scores)

    def score_rows(self, pod: JSON, index: NodeIndex, rows: Rows) -> IntArray:
        plan = self._rows_plan(pod, index)
        if plan is None or plan.empty:
            return np.zeros(len(index) if isinstance(rows, slice) else len(rows), dtype=np.int64)
        if isinstance(rows, np.ndarray) and rows.size <= FEW_ROWS:
            current = self._current
            return np.array([self._score_row(plan, current[i]) for i in rows.tolist()], dtype=np.int64)
        return self._score_rows(plan, rows)

    def _prefilter_rows(self, plan: PodPlan, rows: Any) -> BoolArray:
        self._flush()
        gpu_only = self._gpu_only(plan)
        n = len(self._row_version[rows])
        ok = np.ones(n, dtype=np.bool_)
        planned = self._planned[rows]
        for t in plan.requests:
            cond = self._has[t][rows].copy() if t in self._has else np.zeros(n, dtype=np.bool_)
            if t == DEVICE_TYPE_GPU and plan.gpu is not None:
                fit = self._gpu_ok[rows].copy()
                free = self._gpu_free[rows]
                for r, v in plan.gpu.per_gpu.items():
                    c = _GPU_COLUMNS.get(r)
                    if c is not None:
                        fit &= free[:, :, c] >= v
                    elif v > 0:
                        fit[:] = False
                cond &= self._table[rows] | (fit.sum(axis=1) >= plan.gpu.count)
            ok &= (cond | planned) if gpu_only and t != DEVICE_TYPE_GPU else cond
        return ok

    def score_vector(self, pod: JSON, index: NodeIndex) -> IntArray:
        """Exactly `score` for every node."""
        self.sync_templates(index.cluster)
        n = len(index)
        try:
            plan = self.plan(pod)
        except InvalidDeviceRequest:
            return np.zeros(n, dtype=np.int64)
        if plan.empty:
            return np.zeros(n, dtype=np.int64)
        self.sync(index)
        result: IntArray = self._by_rows(("score", *self._shape(plan)), lambda rows: self._score_rows(plan, rows),
                                         lambda i: self._score_row(plan, self._current[i]))
        return result

    def _score_rows(self, plan: PodPlan, rows: Any) -> IntArray:
        self._flush()
        n = len(self._row_version[rows])
        zeros = np.zeros((n, len(self._weighted)), dtype=np.int64)
        scores: dict[str, IntArray] = {}
        for t in plan.requests:
            total, free = self._total.get(t), self._free.get(t)
            scores[t] = self.scorer.score_vector(_per_device(plan, t), zeros if total is None else total[rows],
                                                 zeros if free is None else free[rows])
        every = sum(scores.values(), np.zeros(n, dtype=np.int64)) // len(scores)
        return np.where(self._planned[rows], scores[DEVICE_TYPE_GPU], every) if self._gpu_only(plan) else every

    def reserve(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> dict[str, str]:
        self.sync_templates(cluster)
        try:
            plan = self.plan(pod)
        except InvalidDeviceRequest as e:
            raise Unschedulable(str(e)) from e
        if plan.empty:
            return {}
        st, labels = self.state.node(node), node.labels
        vendor, model = gpu_model(labels, st.labels)
        allocs = self._try(pod, plan, node, st, labels, complete=True)
        why = self._vendor_check(vendor, allocs)
        if why is not None:
            raise Unschedulable(why)
        pod_key = key(pod)
        self.state.reserve(node, pod_key, allocs)
        self._fits.pop(node.name, None)
        annotations = {ANNOTATION_DEVICE_ALLOCATED: encode_allocations(allocs, st.ids)}
        if self._adapts(pod, vendor):
            adapted = adapt(pod, node.name, allocs, vendor, model, self.clock(), st.ids)
            annotations.update(adapted.annotations)
            if adapted.labels or adapted.node_annotations:
                self._prebind[pod_key] = adapted
            for value in adapted.node_annotations.values():
                self._locks[node.name] = (node.obj, value)
        return annotations

    def unreserve(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> None:
        self.state.pod_removed(node.name, key(pod))
        if self._prebind.pop(key(pod), None) is not None:
            mine = self._locks.get(node.name)
            if mine is not None and mine[1].endswith(f",{key(pod).replace('/', ',', 1)}"):
                del self._locks[node.name]

    def pod_removed(self, node_name: str, pod_key: str) -> None:
        """Forget a deleted or terminated pod's devices (a pod leaving node.pods is noticed on its own)."""
        self.state.pod_removed(node_name, pod_key)
