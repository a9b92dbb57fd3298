"""Per-node device allocation: GPU partitions, topology scopes, default scored walk, joint GPU+RDMA with VFs."""

from __future__ import annotations

import functools
import json
import logging
from dataclasses import dataclass, field

import numpy as np

from apis.core.errors import InvalidInput
from apis.core.labelselector import LabelSelector
from apis.core.quantity import parse_quantity
from apis.extension.device_share import (
    ANNOTATION_GPU_PARTITIONS,
    LABEL_GPU_MODEL,
    LABEL_GPU_PARTITION_POLICY,
    LABEL_GPU_VENDOR,
)
from apis.extension.resources import RESOURCE_FPGA, RESOURCE_GPU_MEMORY, RESOURCE_GPU_MEMORY_RATIO, RESOURCE_RDMA
from apis.scheduling.device import DEVICE_TYPE_GPU
from scheduler.deviceshare.requests import (
    APPLY_FOR_ALL,
    SCOPE_LEVELS,
    DeviceHint,
    GPURequirement,
    PartitionSpec,
    PodPlan,
    instances,
)
from scheduler.deviceshare.state import VF, Allocation, Allocations, NodeDeviceState
from scheduler.deviceshare.templates import ERR_NO_TEMPLATE, describe, gpu_model_key
from scheduler.deviceshare.vendors import gpu_model
from scheduler.interfaces import Unschedulable
from scheduler.nodeindex import IntArray

log = logging.getLogger(__name__)

MOST_ALLOCATED = "MostAllocated"
LEAST_ALLOCATED = "LeastAllocated"
DEFAULT_WEIGHTS = {RESOURCE_GPU_MEMORY_RATIO: 1, RESOURCE_GPU_MEMORY: 1, RESOURCE_RDMA: 1, RESOURCE_FPGA: 1}

HONOR = "Honor"

ERR_PARTITION_TABLE = "node(s) missing GPU Partition Table"
ERR_PARTITION_COUNT = "node(s) Unsupported number of GPU requests"
ERR_PARTITIONED = "Insufficient Partitioned GPU Devices"
ERR_TOPOLOGY_TREE = "node(s) missing GPU Device Topology Tree"
ERR_MULTI_SHARED = "node(s) Unsupported Multi-Shared GPU"
ERR_TOPOLOGY_SCOPED = "Insufficient Topology Scoped GPU Devices"
ERR_GPU = "Insufficient GPU Devices"
ERR_JOINT = "node(s) Device Joint-Allocate rules violation"


class Scorer:
    """resourceAllocationScorer (scoring.go): LeastAllocated spreads, MostAllocated bin-packs."""

    def __init__(self, strategy: str = LEAST_ALLOCATED, weights: dict[str, int] | None = None) -> None:
        if strategy not in (MOST_ALLOCATED, LEAST_ALLOCATED):
            raise ValueError(f"unknown scoring strategy {strategy!r} (MostAllocated or LeastAllocated)")
        self.most = strategy == MOST_ALLOCATED
        self.weights = dict(weights or DEFAULT_WEIGHTS)

    def score(self, request: dict[str, int], total: dict[str, int], free: dict[str, int]) -> int:
        acc = wsum = 0
        for r, w in self.weights.items():
            t = total.get(r, 0)
            if t <= 0:
                continue
            f = free.get(r, 0)
            requested = request.get(r, 0) + (t - f if f <= t else 0)
            least = 0 if requested > t else (t - requested) * 100 // t
            s = min(requested, t) * 100 // t if self.most else least
            acc += s * w
            wsum += w
        return acc // wsum if wsum else 0

    def score_vector(self, request: dict[str, int], total: IntArray, free: IntArray) -> IntArray:
        """`score` for many nodes: `total` and `free` have one row per node, one column per `weights` key."""
        weights = np.array(list(self.weights.values()), dtype=np.int64)
        asked = np.array([request.get(r, 0) for r in self.weights], dtype=np.int64)
        valid = total > 0
        safe = np.where(valid, total, 1)
        requested = asked + np.where(free <= total, total - free, 0)
        if self.most:
            s = np.minimum(requested, total) * 100 // safe
        else:
            s = np.where(requested > total, 0, (total - requested) * 100 // safe)
        acc = (np.where(valid, s, 0) * weights).sum(axis=1)
        wsum = (valid * weights).sum(axis=1)
        return np.where(wsum > 0, acc // np.maximum(wsum, 1), 0).astype(np.int64)


def fits(request: dict[str, int], free: dict[str, int]) -> bool:
    return all(v <= free.get(r, 0) for r, v in request.items())


@dataclass(frozen=True)
class Partition:
    minors: tuple[int, ...]
    mask: int
    bandwidth: int | None
    score: int


# count → [(allocationScore, partitions)], groups in ascending allocationScore order.
PartitionTable = dict[int, list[tuple[int, list[Partition]]]]


def _partition(minors: list[int], bandwidth: int | None, score: int) -> Partition:
    mask = 0
    for m in minors:
        mask |= 1 << m
    return Partition(tuple(minors), mask, bandwidth, score)


def _index(entries: dict[int, list[Partition]]) -> PartitionTable:
    table: PartitionTable = {}
    for count, parts in entries.items():
        groups: dict[int, list[Partition]] = {}
        for p in parts:
            groups.setdefault(p.score, []).append(p)
        table[count] = sorted(groups.items())
    return table


def _hopper_table() -> PartitionTable:
    return _index({n: [_partition(list(range(i, i + n)), None, 1) for i in range(0, 8, n)] for n in (1, 2, 4, 8)})


HOPPER_MODELS = ("H100", "H800", "H20")


def parse_partition_table(raw: str) -> PartitionTable:
    """The Device CR's gpu-partitions annotation; raises ValueError (allocationScore must be an integer; a quoted
    one is accepted)."""
    doc = json.loads(raw)
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    entries: dict[int, list[Partition]] = {}
    for k, parts in doc.items():
        out = []
        for p in parts or []:
            score = p.get("allocationScore", 0)
            if isinstance(score, str) and score.strip().lstrip("-").isdigit():
                # **[decision]** the v1.7 release text quotes it ("1"); Go's int field would refuse the whole table.
                log.info("gpu-partitions: allocationScore %r read as the integer %d", score, int(score))
                score = int(score)
            if not isinstance(score, int) or isinstance(score, bool):
                raise ValueError(f"allocationScore {score!r} is not an integer")
            bw = p.get("ringBusBandwidth")
            try:
                bandwidth = int(parse_quantity(str(bw))) if bw else None
            except InvalidInput as e:
                raise ValueError(str(e)) from e
            out.append(_partition([int(m) for m in p.get("minors") or []], bandwidth, score))
        entries[int(k)] = out
    return _index(entries)


def partition_table(st: NodeDeviceState, node_labels: dict[str, str]) -> tuple[PartitionTable | None, bool]:
    """(table, node honours partitions) — cached on the node state."""
    if st.partition_cache is not None:
        cached: tuple[PartitionTable | None, bool] = st.partition_cache
        return cached
    table: PartitionTable | None = None
    raw = st.annotations.get(ANNOTATION_GPU_PARTITIONS)
    if raw:
        try:
            table = parse_partition_table(raw)
        except (ValueError, TypeError, AttributeError) as e:
            log.warning("Device %s: ignoring malformed %s: %s", st.name, ANNOTATION_GPU_PARTITIONS, e)
    policy = st.labels.get(LABEL_GPU_PARTITION_POLICY, "")
    if table is None:
        # Built-in Hopper table; vendor/model/policy read from the Node, falling back to the Device CR labels.
        vendor = node_labels.get(LABEL_GPU_VENDOR, st.labels.get(LABEL_GPU_VENDOR, ""))
        model = node_labels.get(LABEL_GPU_MODEL, st.labels.get(LABEL_GPU_MODEL, ""))
        if vendor in ("nvidia", "") and model in HOPPER_MODELS:
            table = _hopper_table()
            policy = node_labels.get(LABEL_GPU_PARTITION_POLICY, policy)
    st.partition_cache = (table, policy == HONOR)
    return st.partition_cache  # type: ignore[no-any-return]


@dataclass
class _Scope:
    level: int
    minors: list[int]
    children: list[_Scope] = field(default_factory=list)


def _topology_tree(st: NodeDeviceState) -> _Scope | None:
    gpus = st.devices.get(DEVICE_TYPE_GPU, {})
    if not gpus or not all(d.has_topology for d in gpus.values()):
        return None
    # nodes of one machine type share one (read-only) tree
    return _tree_of(tuple((m, d.numa, d.pcie) for m, d in gpus.items()))


@functools.lru_cache(maxsize=256)
def _tree_of(layout: tuple[tuple[int, int, str], ...]) -> _Scope:
    numas: dict[int, dict[str, list[int]]] = {}
    for m, numa, pcie in layout:
        numas.setdefault(numa, {}).setdefault(pcie, []).append(m)
    children = []
    for numa in sorted(numas):
        pcies = [_Scope(3, sorted(ms)) for _, ms in sorted(numas[numa].items())]
        children.append(_Scope(2, sorted(m for p in pcies for m in p.minors), pcies))
    return _Scope(1, sorted(m for m, _, _ in layout), children)


@dataclass
class _Result:
    minors: list[int]
    depth: int
    not_empty: int
    score: int


class Allocator:
    """Allocates one pod's devices on one node (device_allocator.go + allocator_gpu.go), without side effects."""

    def __init__(self, scorer: Scorer) -> None:
        self.scorer = scorer
        self._numa: frozenset[int] | None = None  # NUMA nodes the current allocation is confined to
        self._preferred: Allocations = {}  # a reservation's devices the current allocation prefers
        self._only_preferred = False  # first pass: the preferred minors alone (types they cover)

    def allocate_within(self, st: NodeDeviceState, plan: PodPlan, node_labels: dict[str, str],
                        types: list[str] | None, numa: frozenset[int] | None,
                        preferred: Allocations | None = None, only_preferred: bool = False) -> Allocations:
        """`allocate` with every device taken from the NUMA nodes `numa` (None: anywhere), for NodeNUMAResource.

        `preferred` (an owner's reservation devices, upstream deviceshare/reservation.go tryAllocateFromReusable
        with the Default/Aligned policy): **[decision]** first the allocation is tried on the preferred minors
        alone (and their VFs first), so an owner that fits in its reservation gets exactly its devices; failing
        that, on every device with the preferred minors and VFs ordered first by the default walk. With
        `only_preferred` (a Restricted reservation) there is no second try: the types it reserved come from it."""
        self._numa, self._preferred = numa, preferred or {}
        try:
            if self._preferred:
                self._only_preferred = True
                try:
                    return self.allocate(st, plan, node_labels, types)
                except Unschedulable:
                    if only_preferred:
                        raise
                finally:
                    self._only_preferred = False
            return self.allocate(st, plan, node_labels, types)
        finally:
            self._numa, self._preferred = None, {}

    def allocate(self, st: NodeDeviceState, plan: PodPlan, node_labels: dict[str, str],
                 types: list[str] | None = None) -> Allocations:
        """Allocations for `types` (default every requested type); raises Unschedulable with upstream's reasons."""
        wanted = [t for t in (types if types is not None else list(plan.requests)) if t in plan.requests]
        for t in wanted:
            if not st.devices.get(t):
                raise Unschedulable(f"Insufficient {t} devices")
        out: Allocations = {}
        taken_vfs: set[str] = set()
        joint = [t for t in plan.joint_types if t in wanted]
        if len(joint) >= 2:
            primary = joint[0]
            out[primary] = self._allocate_type(st, plan, node_labels, primary, set(), taken_vfs)
            pcies = {st.devices[primary][a.minor].pcie for a in out[primary]}
            for t in joint[1:]:
                out[t] = self._allocate_type(st, plan, node_labels, t, pcies, taken_vfs)
                if plan.joint_same_pcie and {st.devices[t][a.minor].pcie for a in out[t]} != pcies:
                    raise Unschedulable(ERR_JOINT)
        for t in wanted:
            if t not in out:
                out[t] = self._allocate_type(st, plan, node_labels, t, set(), taken_vfs)
        return out

    def _candidates(self, st: NodeDeviceState, dtype: str, hint: DeviceHint | None) -> set[int]:
        devices = st.devices.get(dtype, {})
        numa = self._numa
        if numa is not None:
            devices = {m: d for m, d in devices.items() if d.numa in numa}
        if self._only_preferred and self._preferred.get(dtype):
            mine = {a.minor for a in self._preferred[dtype]}
            devices = {m: d for m, d in devices.items() if m in mine}
        if hint is None or hint.selector is None:
            return set(devices)
        sel = hint.selector
        return {m for m, d in devices.items() if sel.matches(d.labels)}

    def _allocate_type(self, st: NodeDeviceState, plan: PodPlan, node_labels: dict[str, str], dtype: str,
                       preferred_pcies: set[str], taken_vfs: set[str]) -> list[Allocation]:
        hint = plan.hints.get(dtype)
        candidates = self._candidates(st, dtype, hint)
        vf_selector = hint.vf_selector if hint is not None else None
        if vf_selector is not None and not any(d.vf_groups for d in st.devices.get(dtype, {}).values()):
            raise Unschedulable(f"Insufficient {dtype} devices")
        if dtype == DEVICE_TYPE_GPU and plan.gpu is not None:
            allocs = self._allocate_gpu(st, plan, plan.gpu, node_labels, candidates, preferred_pcies)
            self._fill_gpu_memory(st, allocs)
            return allocs
        healthy = sum(1 for m in candidates if st.devices[dtype][m].total)
        per, count = instances(plan.requests[dtype], hint, healthy)
        if hint is not None and hint.strategy == APPLY_FOR_ALL and count == 0:
            raise Unschedulable(f"Insufficient {dtype} devices")
        if preferred_pcies and plan.joint_same_pcie:
            count = max(count, len(preferred_pcies))
        return self._default(st, dtype, per, count, max(count, len(preferred_pcies)), candidates, preferred_pcies,
                             vf_selector, taken_vfs)

    def _default(self, st: NodeDeviceState, dtype: str, per: dict[str, int], count: int, max_count: int,
                 candidates: set[int], preferred_pcies: set[str], vf_selector: LabelSelector | None,
                 taken_vfs: set[str]) -> list[Allocation]:
        devices, free = st.devices[dtype], st.free[dtype]
        scored = sorted(((-self.scorer.score(per, devices[m].total, free[m]), m) for m in candidates
                         if devices[m].total), key=lambda t: t)
        mine = {a.minor for a in self._preferred.get(dtype, [])}
        if mine:  # a reservation's minors first (stable: the score order stays within each group)
            scored.sort(key=lambda t: t[1] not in mine)
        order: list[int] = []
        if preferred_pcies:
            groups = [[m for _, m in scored if devices[m].pcie == p] for p in sorted(preferred_pcies)]
            for i in range(max((len(g) for g in groups), default=0)):
                order.extend(g[i] for g in groups if i < len(g))
            order.extend(m for _, m in scored if devices[m].pcie not in preferred_pcies)
        else:
            order = [m for _, m in scored]
        out: list[Allocation] = []
        for m in order:
            if len(out) >= max_count:
                break
            if not fits(per, free[m]):
                continue
            vfs: list[VF] = []
            if vf_selector is not None:
                vf = self._pick_vf(st, dtype, m, vf_selector, taken_vfs)
                if vf is None:
                    continue
                taken_vfs.add(vf.bus_id)
                vfs = [vf]
            out.append(Allocation(m, dict(per), vfs))
        if len(out) < count:
            raise Unschedulable(f"Insufficient {dtype} devices")
        return out

    def _pick_vf(self, st: NodeDeviceState, dtype: str, minor: int, selector: LabelSelector,
                 taken: set[str]) -> VF | None:
        used = st.used_vfs.get(dtype, set())
        free = [vf for g in st.devices[dtype][minor].vf_groups if selector.matches(g.labels) for vf in g.vfs
                if vf.bus_id not in used and vf.bus_id not in taken]
        mine = {vf.bus_id for a in self._preferred.get(dtype, []) if a.minor == minor for vf in a.vfs}
        return min(free, key=lambda v: (v.bus_id not in mine, v.bus_id)) if free else None

    def _allocate_gpu(self, st: NodeDeviceState, plan: PodPlan, req: GPURequirement, node_labels: dict[str, str],
                      candidates: set[int], preferred_pcies: set[str]) -> list[Allocation]:
        if plan.templates is not None:  # allocateByTemplate
            model = gpu_model_key(*gpu_model(node_labels, st.labels))
            names = plan.templates.get(model, [])
            if not names:
                raise Unschedulable(f"{ERR_NO_TEMPLATE}: GPU model {model} has "
                                    f"{describe(plan.template_catalog or {}, [model])}")
            if len(names) == 1:  # exactly one: partitions are skipped (generalAllocate), the allocation tagged
                allocs = self._general(st, plan, req, candidates, preferred_pcies)
                for a in allocs:
                    a.template = names[0]
                return allocs
            # several equal templates: upstream leaves the choice open ("volcano style" TODO) and goes on untagged
        table, node_honor = partition_table(st, node_labels)
        honor = node_honor or plan.partition is not None
        if not req.shared:
            try:
                minors = self._by_partition(st, req, table, plan.partition, candidates)
                return [Allocation(m, dict(req.per_gpu)) for m in minors]
            except Unschedulable:
                if honor:
                    raise
        return self._general(st, plan, req, candidates, preferred_pcies)

    def _general(self, st: NodeDeviceState, plan: PodPlan, req: GPURequirement, candidates: set[int],
                 preferred_pcies: set[str]) -> list[Allocation]:
        """generalAllocate: the topology scopes, then the default scored walk."""
        hint = plan.hints.get(DEVICE_TYPE_GPU)
        scope = hint.scope if hint is not None else ""
        try:
            minors = self._by_topology(st, req, scope, candidates)
            if minors:
                return [Allocation(m, dict(req.per_gpu)) for m in minors]
        except Unschedulable:
            if scope:
                raise
        return self._default(st, DEVICE_TYPE_GPU, req.per_gpu, req.count, max(req.count, len(preferred_pcies)),
                             candidates, preferred_pcies, None, set())

    @staticmethod
    def _by_partition(st: NodeDeviceState, req: GPURequirement, table: PartitionTable | None,
                      spec: PartitionSpec | None, candidates: set[int]) -> list[int]:
        if table is None:
            raise Unschedulable(ERR_PARTITION_TABLE)
        groups = table.get(req.count)
        if not groups:
            raise Unschedulable(ERR_PARTITION_COUNT)
        used_mask = total_mask = 0
        for m in st.used.get(DEVICE_TYPE_GPU, {}):
            used_mask |= 1 << m
        gpus, free = st.devices[DEVICE_TYPE_GPU], st.free[DEVICE_TYPE_GPU]
        for m in candidates:
            # Beyond upstream: a partition minor must also fit the per-GPU request (upstream only checks that it is
            # unused and healthy, which lets the count-1 "gpu-core: 200" [quirk] request land on one 100-core GPU).
            if gpus[m].total and fits(req.per_gpu, free[m]):
                total_mask |= 1 << m
        feasible: list[Partition] = []
        for _, parts in groups:
            for p in parts:
                if p.mask & used_mask or total_mask & p.mask != p.mask:
                    continue
                if spec is not None and spec.ring_bus_bandwidth is not None and (
                        p.bandwidth is None or p.bandwidth < spec.ring_bus_bandwidth):
                    continue
                feasible.append(p)
            # **[quirk]** mirrored: groups are tried in ascending allocationScore order although the API comment says
            # the highest score is preferred; Restricted stops after the first group even when it has no fit.
            if feasible or (spec is not None and spec.restricted):
                break
        if not feasible:
            raise Unschedulable(ERR_PARTITIONED)
        if len(feasible) == 1:
            return list(feasible[0].minors)
        best, best_score = feasible[0], -1
        for p in feasible:  # fragmentation score (selectPartitionByBinPack); ties keep table order
            allocated = used_mask | p.mask
            score = 0
            for size, weight in ((8, 10000), (4, 100), (2, 1)):
                if size < req.count or not table.get(size):
                    continue
                score += sum(weight * q.score for q in table[size][0][1] if not q.mask & allocated)
            if score > best_score:
                best, best_score = p, score
        return list(best.minors)

    def _by_topology(self, st: NodeDeviceState, req: GPURequirement, scope: str, candidates: set[int]) -> list[int]:
        if st.topology_cache is None:
            st.topology_cache = (_topology_tree(st),)
        tree: _Scope | None = st.topology_cache[0]
        if tree is None:
            raise Unschedulable(ERR_TOPOLOGY_TREE)
        if req.shared and req.count > 1:
            raise Unschedulable(ERR_MULTI_SHARED)
        # **[quirk]** mirrored: "Device" (level 4) is deeper than any scope built (PCIe, level 3), so it never fits.
        required = SCOPE_LEVELS.get(scope, 0)
        used, gpus, free = st.used.get(DEVICE_TYPE_GPU, {}), st.devices[DEVICE_TYPE_GPU], st.free[DEVICE_TYPE_GPU]
        per, count = req.per_gpu, req.count
        fit: dict[int, bool] = {}
        scores: dict[int, int] = {}

        def ok(m: int) -> bool:
            if m not in fit:
                fit[m] = m in candidates and bool(gpus[m].total) and fits(per, free[m])
            return fit[m]

        def score(m: int) -> int:
            if m not in scores:
                scores[m] = self.scorer.score(per, gpus[m].total, free[m])
            return scores[m]

        def search(s: _Scope, depth: int, not_empty: int) -> _Result | None:
            if len(s.minors) < count:
                return None
            depth += 1
            if any(m in used for m in s.minors):
                not_empty += 1
            best: _Result | None = None
            for child in s.children:
                r = search(child, depth, not_empty)
                if r is None:
                    continue
                if best is None or (best.depth, best.not_empty) < (r.depth, r.not_empty) or (
                        req.shared and (best.depth, best.not_empty) == (r.depth, r.not_empty) and best.score < r.score):
                    best = r
            if best is not None:
                return best
            if required > s.level:
                return None
            ms = [m for m in s.minors if ok(m)]
            if not req.shared:
                return _Result(ms[:count], depth, not_empty, 0) if len(ms) >= count else None
            if not ms:
                return None
            top = max(ms, key=lambda m: (score(m), -m))
            return _Result([top], depth, not_empty, score(top))

        result = search(tree, 0, 0)
        if result is None:
            raise Unschedulable(ERR_TOPOLOGY_SCOPED if scope else ERR_GPU)
        return result.minors

    @staticmethod
    def _fill_gpu_memory(st: NodeDeviceState, allocs: list[Allocation]) -> None:
        """fillGPUTotalMem: complete each GPU allocation with both gpu-memory and gpu-memory-ratio."""
        for a in allocs:
            total = st.devices[DEVICE_TYPE_GPU][a.minor].total.get(RESOURCE_GPU_MEMORY, 0)
            if total <= 0:
                continue
            r = a.resources
            if RESOURCE_GPU_MEMORY_RATIO in r and RESOURCE_GPU_MEMORY not in r:
                r[RESOURCE_GPU_MEMORY] = r[RESOURCE_GPU_MEMORY_RATIO] * total // 100
            elif RESOURCE_GPU_MEMORY in r and RESOURCE_GPU_MEMORY_RATIO not in r:
                r[RESOURCE_GPU_MEMORY_RATIO] = int(r[RESOURCE_GPU_MEMORY] / total * 100)
