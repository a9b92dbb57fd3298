"""What each node's extended resources should be: devices from its Device CR, batch and mid from its NodeMetric.

Pure functions over Kubernetes JSON. CPU amounts are millicores and memory bytes throughout; batch-cpu and
mid-cpu are written as those millicores (an extended resource is an integer). Upstream:
pkg/slo-controller/noderesource/plugins/{batchresource,midresource,gpudeviceresource,rdmadevicereource} and
plugins/util/util.go.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from apis.core.errors import InvalidInput
from apis.core.objects import JSON, JSONMapping
from apis.core.resources import CPU, MEMORY
from apis.extension.device_share import GPU_LABELS, LABEL_GPU_VENDOR
from apis.extension.node import ANNOTATION_NODE_RESERVATION, decode_node_reservation
from apis.extension.priority import (
    PRIORITY_BATCH,
    PRIORITY_FREE,
    PRIORITY_MID,
    PRIORITY_PROD,
    priority_class_with_default,
)
from apis.extension.qos import QOS_LSE, koord_qos_class_with_default
from apis.extension.resource_status import parse_cpuset
from apis.extension.resources import (
    BATCH_CPU,
    BATCH_MEMORY,
    BATCH_RESOURCES,
    MID_CPU,
    MID_MEMORY,
    MID_RESOURCES,
    RESOURCE_GPU,
    RESOURCE_GPU_CORE,
    RESOURCE_GPU_MEMORY,
    RESOURCE_GPU_MEMORY_RATIO,
    RESOURCE_GPU_SHARED,
    RESOURCE_NPU_CORE,
    RESOURCE_NPU_CPU,
    RESOURCE_NPU_DVPP,
    RESOURCE_RDMA,
)
from scheduler.cluster import pod_requests, quantity_value

RL = dict[str, int]  # {"cpu": millicores, "memory": bytes}

# gpudeviceresource/utils.go ResourceNames: only these reach the node (a vendor's own resources on a GPU device,
# e.g. cambricon.com/*, stay its device plugin's)
GPU_RESOURCES = (RESOURCE_GPU, RESOURCE_GPU_CORE, RESOURCE_NPU_CORE, RESOURCE_NPU_CPU, RESOURCE_NPU_DVPP,
                 RESOURCE_GPU_MEMORY, RESOURCE_GPU_MEMORY_RATIO, RESOURCE_GPU_SHARED)
RDMA_RESOURCES = (RESOURCE_RDMA,)
_LIVE_PHASES = ("Running", "Pending")
_LOW_PRIORITY = (PRIORITY_BATCH, PRIORITY_FREE)
# priority_utils.go GetDefaultPriorityByPriorityClass
_DEFAULT_PRIORITY = {PRIORITY_PROD: 9500, PRIORITY_MID: 7500, PRIORITY_BATCH: 5500, PRIORITY_FREE: 3500}


@dataclass
class NodeResource:
    """framework.NodeResource: computed quantities, resources to remove, node labels, and why (for logs)."""

    resources: dict[str, int] = field(default_factory=dict)
    resets: set[str] = field(default_factory=set)
    labels: dict[str, str] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)

    def set(self, name: str, value: int, message: str = "") -> None:
        self.resources[name] = value
        self.resets.discard(name)
        if message:
            self.messages[name] = message

    def reset(self, names: Iterable[str], message: str) -> None:
        for name in names:
            self.resources.pop(name, None)
            self.resets.add(name)
            self.messages[name] = message


# -- resource lists ----------------------------------------------------------------------------------------------
def cpu_memory(obj: object) -> RL:
    """The cpu (millicores) and memory (bytes) of a ResourceList; entries missing or unparsable are left out."""
    out: RL = {}
    if isinstance(obj, Mapping):
        for name in (CPU, MEMORY):
            if name in obj:
                with contextlib.suppress(InvalidInput):
                    out[name] = quantity_value(name, obj[name])
    return out


def _add(a: RL, b: Mapping[str, int]) -> RL:
    return {k: a.get(k, 0) + b.get(k, 0) for k in a.keys() | b.keys()}


def _sub(a: RL, b: Mapping[str, int]) -> RL:
    """quotav1.Subtract: the keys of `a`, less `b` where it has them."""
    return {k: v - b.get(k, 0) for k, v in a.items()}


def _max(a: Mapping[str, int], b: Mapping[str, int]) -> RL:
    """quotav1.Max: every key of either, the larger value (a missing key counts as absent, not zero)."""
    return {k: max(a[k], b[k]) if k in a and k in b else a.get(k, b.get(k, 0)) for k in a.keys() | b.keys()}


def _zero_floor(a: RL) -> RL:
    return _max(a, {CPU: 0, MEMORY: 0})


def _scaled(value: int, ratio: float) -> int:
    """util.MultiplyQuant / MultiplyMilliQuant: int64(float64(v) × ratio), truncated toward zero."""
    return int(value * ratio)


# -- node facts --------------------------------------------------------------------------------------------------
def _status(node: JSONMapping) -> JSON:
    return dict(node.get("status") or {})


def node_capacity(node: JSONMapping) -> RL:
    return cpu_memory(_status(node).get("capacity"))


def node_reserved(node: JSONMapping) -> RL:
    """max(kubelet's reservation (capacity − allocatable), the node.koordinator.sh/reservation annotation)."""
    status = _status(node)
    cap, alloc = cpu_memory(status.get("capacity")), cpu_memory(status.get("allocatable"))
    kubelet = {k: cap[k] - alloc[k] for k in cap.keys() & alloc.keys()}
    return _max(kubelet, annotation_reservation(node))


def annotation_reservation(node: JSONMapping) -> RL:
    """util.GetNodeReservationFromAnnotation: `resources`, with `reservedCPUs` (a cpuset) counting as whole CPUs."""
    text = ((node.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_NODE_RESERVATION)
    if not text or not isinstance(text, str):
        return {}
    try:
        reservation = decode_node_reservation(text)
        out = cpu_memory(reservation.resources)
        if reservation.reserved_cpus:
            out[CPU] = 1000 * len(parse_cpuset(reservation.reserved_cpus))  # cpuset.Parse(...).Size(): each CPU once
        return out
    except InvalidInput:  # upstream logs it and ignores the whole annotation
        return {}


def rfc3339_seconds(text: object) -> float | None:
    """Seconds since the epoch of an RFC 3339 time (NodeMetric status.updateTime); None when it does not read."""
    try:
        return dt.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def degraded(strategy: JSONMapping, nodemetric: JSONMapping | None, now: float) -> str | None:
    """Why batch and mid resources are reset (isDegradeNeeded): no NodeMetric, no updateTime, or older than
    degradeTimeMinutes."""
    if not nodemetric:
        return "no NodeMetric"
    updated = rfc3339_seconds((nodemetric.get("status") or {}).get("updateTime"))
    if updated is None:
        return "NodeMetric has no status.updateTime"
    if now > updated + 60 * int(strategy["degradeTimeMinutes"]):
        return f"NodeMetric not updated for over {strategy['degradeTimeMinutes']} minutes"
    return None


def _metric_usage(entry: JSONMapping, key: str) -> RL:
    return cpu_memory((entry.get(key) or {}).get("resources"))


def _host_apps_above(nodemetric: JSONMapping, priority: str) -> RL:
    """GetHostAppHPUsed: usage of the host applications of a higher priority than `priority`."""
    out: RL = {CPU: 0, MEMORY: 0}
    mine = _DEFAULT_PRIORITY.get(priority, 0)
    for app in (nodemetric.get("status") or {}).get("hostApplicationMetric") or []:
        if isinstance(app, dict) and _DEFAULT_PRIORITY.get(str(app.get("priority") or ""), 0) > mine:
            out = _add(out, _metric_usage(app, "usage"))
    return out


def _system_used(nodemetric: JSONMapping) -> RL:
    return _metric_usage(((nodemetric.get("status") or {}).get("nodeMetric") or {}), "systemUsage")


def _pod_key(pod: JSONMapping) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def _cpu_memory_requests(pod: JSONMapping) -> RL:
    try:
        req = pod_requests(dict(pod))
    except InvalidInput:
        return {CPU: 0, MEMORY: 0}
    return {CPU: req.get(CPU, 0), MEMORY: req.get(MEMORY, 0)}


def _live(pods: Iterable[JSONMapping]) -> list[JSONMapping]:
    return [p for p in pods if (p.get("status") or {}).get("phase") in _LIVE_PHASES]


# -- batch -------------------------------------------------------------------------------------------------------
def batch(strategy: JSONMapping, node: JSONMapping, pods: Iterable[JSONMapping],
          nodemetric: JSONMapping | None, now: float, nr: NodeResource) -> None:
    """kubernetes.io/batch-cpu and batch-memory (batchresource calculateOnNode + CalculateBatchResourceByPolicy)."""
    why = degraded(strategy, nodemetric, now)
    if why or nodemetric is None:
        nr.reset(BATCH_RESOURCES, f"degrade node resource because of abnormal nodeMetric ({why})")
        return
    metrics: dict[str, JSONMapping] = {}
    for pm in (nodemetric.get("status") or {}).get("podsMetric") or []:
        if isinstance(pm, dict):
            metrics[f"{pm.get('namespace')}/{pm.get('name')}"] = pm
    dangling = dict(metrics)
    hp_request: RL = {CPU: 0, MEMORY: 0}
    hp_used: RL = {CPU: 0, MEMORY: 0}
    hp_max_used_req: RL = {CPU: 0, MEMORY: 0}
    for pod in _live(pods):
        key = _pod_key(pod)
        metric = metrics.get(key)
        dangling.pop(key, None)
        if priority_class_with_default(pod) in _LOW_PRIORITY:
            continue
        request = _cpu_memory_requests(pod)
        hp_request = _add(hp_request, request)
        if metric is None:
            # upstream adds the request to the used sum only, not to max(usage, request)
            hp_used = _add(hp_used, request)
            continue
        used = _metric_usage(metric, "podUsage")
        if koord_qos_class_with_default(pod) == QOS_LSE:  # LSE pods do not lend their CPU
            hp_used = _add(hp_used, {CPU: request.get(CPU, 0), MEMORY: used.get(MEMORY, 0)})
        else:
            hp_used = _add(hp_used, used)
        hp_max_used_req = _add(hp_max_used_req, _max(request, used))
    for pm in dangling.values():
        if pm.get("priority") in _LOW_PRIORITY:
            continue
        used = _metric_usage(pm, "podUsage")
        hp_used, hp_max_used_req = _add(hp_used, used), _add(hp_max_used_req, used)

    capacity = node_capacity(node)
    margin = {CPU: _scaled(capacity.get(CPU, 0), (100 - strategy["cpuReclaimThresholdPercent"]) / 100),
              MEMORY: _scaled(capacity.get(MEMORY, 0), (100 - strategy["memoryReclaimThresholdPercent"]) / 100)}
    system_used = _add(_system_used(nodemetric), _host_apps_above(nodemetric, PRIORITY_BATCH))
    reserved = node_reserved(node)
    cpu, mem, cpu_msg, mem_msg = batch_by_policy(strategy, capacity, margin, reserved, system_used, hp_request,
                                                 hp_used, hp_max_used_req)
    nr.set(BATCH_CPU, cpu, cpu_msg)
    nr.set(BATCH_MEMORY, mem, mem_msg)


def batch_by_policy(strategy: JSONMapping, capacity: RL, margin: RL, reserved: RL, system_used: RL,
                    hp_request: RL, hp_used: RL, hp_max_used_req: RL) -> tuple[int, int, str, str]:
    """util.CalculateBatchResourceByPolicy: batch allocatable by the cpu/memory calculate policies, capped by the
    batch threshold percentages of the capacity when they are set."""
    system_used = _max(system_used, reserved)
    base = _sub(_sub(capacity, margin), system_used)
    by_usage = _zero_floor(_sub(base, hp_used))
    by_request = _zero_floor(_sub(_sub(_sub(capacity, margin), reserved), hp_request))
    by_max = _zero_floor(_sub(base, hp_max_used_req))
    cap_cpu, cap_mem = capacity.get(CPU, 0), capacity.get(MEMORY, 0)

    cpu_policy, cpu_threshold = strategy.get("cpuCalculatePolicy"), strategy.get("batchCPUThresholdPercent")
    cpu_source, cpu_term = (by_max, "podHPMaxUsedRequest") if cpu_policy == "maxUsageRequest" else (
        by_usage, "podHPUsed")
    cpu = cpu_source.get(CPU, 0)
    cpu_formula = (f"nodeCapacity:{cap_cpu} - nodeSafetyMargin:{margin.get(CPU, 0)} - systemUsageOrNodeReserved:"
                   f"{system_used.get(CPU, 0)} - {cpu_term}:"
                   f"{(hp_max_used_req if cpu_term == 'podHPMaxUsedRequest' else hp_used).get(CPU, 0)}")
    if cpu_threshold is not None:
        cpu = min(cpu, _scaled(cap_cpu, cpu_threshold / 100))
        cpu_formula = f"min(nodeCapacity:{cap_cpu} * thresholdRatio:{cpu_threshold / 100}, {cpu_formula})"

    mem_policy, mem_threshold = strategy.get("memoryCalculatePolicy"), strategy.get("batchMemoryThresholdPercent")
    if mem_policy == "request":
        mem_source, mem_terms = by_request, ("nodeReserved", reserved, "podHPRequest", hp_request)
    elif mem_policy == "maxUsageRequest":
        mem_source, mem_terms = by_max, ("systemUsage", system_used, "podHPMaxUsedRequest", hp_max_used_req)
    else:
        mem_source, mem_terms = by_usage, ("systemUsage", system_used, "podHPUsed", hp_used)
    mem = mem_source.get(MEMORY, 0)
    mem_formula = (f"nodeCapacity:{cap_mem} - nodeSafetyMargin:{margin.get(MEMORY, 0)} - {mem_terms[0]}:"
                   f"{mem_terms[1].get(MEMORY, 0)} - {mem_terms[2]}:{mem_terms[3].get(MEMORY, 0)}")
    if mem_threshold is not None:
        mem = min(mem, _scaled(cap_mem, mem_threshold / 100))
        mem_formula = f"min(nodeCapacity:{cap_mem} * thresholdRatio:{mem_threshold / 100}, {mem_formula})"
    return (cpu, mem, f"batchAllocatable[CPU(milli-core)]:{cpu} = {cpu_formula}",
            f"batchAllocatable[Mem(byte)]:{mem} = {mem_formula}")


# -- mid ---------------------------------------------------------------------------------------------------------
def mid(strategy: JSONMapping, node: JSONMapping, pods: Iterable[JSONMapping],
        nodemetric: JSONMapping | None, now: float, nr: NodeResource) -> None:
    """kubernetes.io/mid-cpu and mid-memory (midresource calculate + CalculateMidResourceByPolicy):
    min(min(ProdReclaimable, NodeUnused) + ProdUnallocated × midUnallocatedPercent, NodeCapacity × midThreshold),
    or under midReclaimMode `static`, min(NodeCapacity × staticReservedPercent, NodeCapacity × midThreshold)."""
    why = degraded(strategy, nodemetric, now)
    if why or nodemetric is None:
        nr.reset(MID_RESOURCES, f"degrade node Mid resource because of abnormal nodeMetric ({why})")
        return
    capacity = node_capacity(node)
    cap_cpu, cap_mem = capacity.get(CPU, 0), capacity.get(MEMORY, 0)
    cpu_ratio, mem_ratio = strategy["midCPUThresholdPercent"] / 100, strategy["midMemoryThresholdPercent"] / 100
    if strategy.get("midReclaimMode") == "static":
        cpu_static = strategy["midStaticCPUReservedPercent"] / 100
        mem_static = strategy["midStaticMemoryReservedPercent"] / 100
        cpu = min(_scaled(cap_cpu, cpu_static), int(cap_cpu * cpu_ratio))
        mem = min(_scaled(cap_mem, mem_static), int(cap_mem * mem_ratio))
        nr.set(MID_CPU, cpu, f"midAllocatable[CPU(milli-core)]:{cpu} = min(nodeCapacity:{cap_cpu} * "
                             f"staticReservedPercent:{cpu_static}, nodeCapacity:{cap_cpu} * thresholdRatio:"
                             f"{cpu_ratio})")
        nr.set(MID_MEMORY, mem, f"midAllocatable[Memory(byte)]:{mem} = min(nodeCapacity:{cap_mem} * "
                                f"staticReservedPercent:{mem_static}, nodeCapacity:{cap_mem} * thresholdRatio:"
                                f"{mem_ratio})")
        return
    status = nodemetric.get("status") or {}
    reclaimable = cpu_memory(((status.get("prodReclaimableMetric") or {}).get("resource") or {}).get("resources"))
    system_used = _add(_system_used(nodemetric), _host_apps_above(nodemetric, PRIORITY_MID))
    reserved = _max(system_used, node_reserved(node))
    prod_allocated: RL = {CPU: 0, MEMORY: 0}
    for pod in _live(pods):
        if priority_class_with_default(pod) not in (PRIORITY_MID, PRIORITY_BATCH, PRIORITY_FREE):
            prod_allocated = _add(prod_allocated, _cpu_memory_requests(pod))
    unallocated = _zero_floor(_sub(_sub(capacity, reserved), prod_allocated))
    usage = _metric_usage(status.get("nodeMetric") or {}, "nodeUsage")
    # no valid node usage: nothing counts as unused, so mid stays strict
    unused = _sub(capacity, usage) if CPU in usage and MEMORY in usage else {}
    unallocated_ratio = strategy["midUnallocatedPercent"] / 100

    def one(name: str, ratio: float, cap: int) -> tuple[int, str]:
        base = max(min(reclaimable.get(name, 0), unused.get(name, 0)), 0)
        value = min(base + int(unallocated.get(name, 0) * unallocated_ratio), int(cap * ratio))
        return value, (f"min(min(ProdReclaimable:{reclaimable.get(name, 0)}, NodeUnused:{unused.get(name, 0)}) + "
                       f"Unallocated:{unallocated.get(name, 0)} * midUnallocatedRatio:{unallocated_ratio}, "
                       f"NodeCapacity:{cap} * thresholdRatio:{ratio})")

    cpu, cpu_msg = one(CPU, cpu_ratio, cap_cpu)
    mem, mem_msg = one(MEMORY, mem_ratio, cap_mem)
    nr.set(MID_CPU, cpu, f"midAllocatable[CPU(milli-core)]:{cpu} = {cpu_msg}")
    nr.set(MID_MEMORY, mem, f"midAllocatable[Memory(byte)]:{mem} = {mem_msg}")


# -- devices -----------------------------------------------------------------------------------------------------
def _healthy(device: JSONMapping | None, dtype: str) -> list[JSONMapping]:
    devices = ((device or {}).get("spec") or {}).get("devices") or []
    return [d for d in devices if isinstance(d, dict) and d.get("type") == dtype and d.get("health") is True]


def gpu(device: JSONMapping | None, nr: NodeResource, sync_gpu_shared: bool = False) -> None:
    """gpudeviceresource: the sum of the healthy GPUs' resources, `koordinator.sh/gpu` (= Σ gpu-core) for NVIDIA or
    an unnamed vendor, `gpu.shared` (100 per GPU) behind EnableSyncGPUSharedResource, and the vendor, model and
    driver labels of the Device; without a Device or a healthy GPU, the GPU resources are removed."""
    gpus = _healthy(device, "gpu")
    if not gpus:
        nr.reset(GPU_RESOURCES, "reset node gpu resources")
        return
    total: dict[str, int] = {}
    for d in gpus:
        for name, value in (d.get("resources") or {}).items():
            try:
                total[name] = total.get(name, 0) + quantity_value(str(name), value)
            except InvalidInput:
                continue
    labels = ((device or {}).get("metadata") or {}).get("labels") or {}
    if labels.get(LABEL_GPU_VENDOR, "") in ("", "nvidia"):
        total[RESOURCE_GPU] = total.get(RESOURCE_GPU_CORE, 0)
    if sync_gpu_shared:
        total[RESOURCE_GPU_SHARED] = 100 * len(gpus)
    for name, value in total.items():
        if name in GPU_RESOURCES:
            nr.set(name, value, "node gpu resources from device")
    nr.labels.update({k: str(labels[k]) for k in GPU_LABELS if k in labels})


def rdma(device: JSONMapping | None, nr: NodeResource) -> None:
    """rdmadevicereource: 100 per healthy RDMA device (a PF), removed when there is none."""
    pfs = _healthy(device, "rdma")
    if not pfs:
        nr.reset(RDMA_RESOURCES, "reset node rdma resources")
        return
    nr.set(RESOURCE_RDMA, 100 * len(pfs), "node rdma resources from device")


def calculate(strategy: JSONMapping, colocation: bool, node: JSONMapping,
              pods: Iterable[JSONMapping], nodemetric: JSONMapping | None,
              device: JSONMapping | None, now: float, *, sync_gpu_shared: bool = False) -> NodeResource:
    """Every resource of one node (mid, batch, GPU, RDMA in upstream's plugin order); colocation off resets mid
    and batch (upstream's disabled path), devices are synced either way (docs/scheduler.md, noderesource)."""
    nr = NodeResource()
    pods = list(pods)
    if colocation:
        mid(strategy, node, pods, nodemetric, now, nr)
        batch(strategy, node, pods, nodemetric, now, nr)
    else:
        message = "node colocation is disabled in Config, reason: DisableInConfig"
        nr.reset(MID_RESOURCES, message)
        nr.reset(BATCH_RESOURCES, message)
    gpu(device, nr, sync_gpu_shared)
    rdma(device, nr)
    return nr

