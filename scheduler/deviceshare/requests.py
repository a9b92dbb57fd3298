"""DeviceShare request normalisation: pod resource requests → canonical per-device-type requests (upstream utils.go)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from apis.core.errors import InvalidInput
from apis.core.objects import JSON
from apis.core.quantity import parse_quantity

GPU, RDMA, FPGA = "gpu", "rdma", "fpga"
DEVICE_TYPES = (GPU, RDMA, FPGA)

NVIDIA_GPU = "nvidia.com/gpu"
AMD_GPU = "amd.com/gpu"
HYGON_DCU = "dcu.com/gpu"
KOORD_GPU = "koordinator.sh/gpu"
GPU_SHARED = "koordinator.sh/gpu.shared"
GPU_CORE = "koordinator.sh/gpu-core"
GPU_MEMORY = "koordinator.sh/gpu-memory"
GPU_MEMORY_RATIO = "koordinator.sh/gpu-memory-ratio"
NPU_CORE = "huawei.com/npu-core"
NPU_CPU = "huawei.com/npu-cpu"
NPU_DVPP = "huawei.com/npu-dvpp"
RDMA_RESOURCE = "koordinator.sh/rdma"
FPGA_RESOURCE = "koordinator.sh/fpga"

RESOURCE_NAMES: dict[str, tuple[str, ...]] = {
    GPU: (NVIDIA_GPU, AMD_GPU, HYGON_DCU, KOORD_GPU, GPU_SHARED, GPU_CORE, GPU_MEMORY, GPU_MEMORY_RATIO,
          NPU_CORE, NPU_CPU, NPU_DVPP),
    RDMA: (RDMA_RESOURCE,),
    FPGA: (FPGA_RESOURCE,),
}
ALL_DEVICE_RESOURCES = frozenset(r for names in RESOURCE_NAMES.values() for r in names)

ANNOTATION_ALLOCATED = "scheduling.koordinator.sh/device-allocated"
ANNOTATION_HINT = "scheduling.koordinator.sh/device-allocate-hint"
ANNOTATION_JOINT = "scheduling.koordinator.sh/device-joint-allocate"
ANNOTATION_PARTITION_SPEC = "scheduling.koordinator.sh/gpu-partition-spec"

APPLY_FOR_ALL = "ApplyForAll"
REQUESTS_AS_COUNT = "RequestsAsCount"
DEVICE_LEVEL = "DeviceLevel"
PCIE_LEVEL = "PCIeLevel"
SAME_PCIE = "SamePCIe"
RESTRICTED = "Restricted"
BEST_EFFORT = "BestEffort"
# apis/extension/device_share.go: Device > PCIe > NUMANode > Node; unknown scopes have level 0.
SCOPE_LEVELS = {"Device": 4, "PCIe": 3, "NUMANode": 2, "Node": 1}


class InvalidDeviceRequest(Exception):
    """The pod's device requests or DeviceShare annotations cannot be satisfied by any node."""


def _percentage(v: int) -> bool:
    return v <= 100 or v % 100 == 0


def _v_percentage(r: dict[str, int]) -> bool:
    return all(_percentage(r[n]) for n in (GPU_CORE, GPU_MEMORY_RATIO) if n in r)


def _v_shared(r: dict[str, int]) -> bool:
    shared = r[GPU_SHARED]
    return all(r[n] % shared == 0 and r[n] // shared <= 100 for n in (GPU_CORE, GPU_MEMORY_RATIO) if n in r)


def _v_npu_shared(r: dict[str, int]) -> bool:
    return r[GPU_SHARED] <= 1 and r.get(NPU_DVPP, 0) <= 100


def _v_true(r: dict[str, int]) -> bool:
    return True


# The allow-list of exact resource-name combinations and their validators (utils.go ValidDeviceResourceCombinations).
_COMBINATIONS: dict[frozenset[str], Any] = {
    frozenset({NVIDIA_GPU}): _v_true,
    frozenset({AMD_GPU}): _v_true,
    frozenset({HYGON_DCU}): _v_true,
    frozenset({KOORD_GPU}): _v_true,
    frozenset({GPU_MEMORY}): _v_percentage,
    frozenset({GPU_MEMORY_RATIO}): _v_percentage,
    frozenset({GPU_CORE, GPU_MEMORY}): _v_percentage,
    frozenset({GPU_CORE, GPU_MEMORY_RATIO}): _v_percentage,
    frozenset({NPU_CORE, GPU_MEMORY_RATIO}): _v_percentage,
    frozenset({GPU_SHARED, GPU_MEMORY}): _v_shared,
    frozenset({GPU_SHARED, GPU_MEMORY_RATIO}): _v_shared,
    frozenset({GPU_SHARED, GPU_CORE, GPU_MEMORY}): _v_shared,
    frozenset({GPU_SHARED, GPU_CORE, GPU_MEMORY_RATIO}): _v_shared,
    frozenset({GPU_SHARED, NPU_CORE, NPU_CPU, GPU_MEMORY}): _v_npu_shared,
    frozenset({GPU_SHARED, NPU_CORE, NPU_CPU, NPU_DVPP, GPU_MEMORY}): _v_npu_shared,
    frozenset({FPGA_RESOURCE}): _v_true,
    frozenset({RDMA_RESOURCE}): _v_true,
}
_PERCENTAGE_VALIDATED = (KOORD_GPU, FPGA_RESOURCE, RDMA_RESOURCE)


def canonical_requests(requests: dict[str, int]) -> dict[str, dict[str, int]]:
    """Per device type, the canonical request (1.2 steps 2-4); raises InvalidDeviceRequest on refused combinations."""
    out: dict[str, dict[str, int]] = {}
    for dtype, names in RESOURCE_NAMES.items():
        masked = {n: requests[n] for n in names if requests.get(n, 0) > 0}
        if not masked:
            continue
        for n in _PERCENTAGE_VALIDATED:
            if n in masked and not _percentage(masked[n]):
                raise InvalidDeviceRequest(f"invalid resource unit {n}: {masked[n]}")
        validator = _COMBINATIONS.get(frozenset(masked))
        if validator is None or not validator(masked):
            raise InvalidDeviceRequest(f"invalid resource device requests: [{' '.join(sorted(masked))}]")
        whole = masked.get(NVIDIA_GPU) or masked.get(AMD_GPU) or masked.get(HYGON_DCU)
        if whole:
            out[dtype] = {GPU_CORE: whole * 100, GPU_MEMORY_RATIO: whole * 100}
        elif KOORD_GPU in masked:
            out[dtype] = {GPU_CORE: masked[KOORD_GPU], GPU_MEMORY_RATIO: masked[KOORD_GPU]}
        else:
            out[dtype] = masked
    return out


@dataclass(frozen=True)
class GPURequirement:
    """Per-GPU request and GPU count (devicehandler_gpu.go)."""

    per_gpu: dict[str, int]
    count: int
    shared: bool


def gpu_requirement(canonical: dict[str, int]) -> GPURequirement:
    ratio = canonical.get(GPU_MEMORY_RATIO, 0)
    count = 1
    if canonical.get(GPU_SHARED, 0) > 0:
        count = canonical[GPU_SHARED]
    elif ratio > 100 and ratio % 100 == 0:
        count = ratio // 100
    # **[quirk]** kept for parity: gpu-core > 100 with gpu-memory (no ratio) stays count 1 with per-GPU core > 100,
    # so it never fits a 100-core GPU; only memory-ratio or gpu.shared create multi-GPU counts.
    per = {n: v // count for n, v in canonical.items() if n != GPU_SHARED}
    shared = (GPU_MEMORY_RATIO in per and per[GPU_MEMORY_RATIO] < 100) or (
        GPU_MEMORY in per and GPU_MEMORY_RATIO not in per)
    return GPURequirement(per, count, shared)


@dataclass(frozen=True)
class LabelSelector:
    match_labels: dict[str, str] = field(default_factory=dict)
    expressions: tuple[tuple[str, str, frozenset[str]], ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        if any(labels.get(k) != v for k, v in self.match_labels.items()):
            return False
        for k, op, values in self.expressions:
            present = k in labels
            if (op == "In" and (not present or labels[k] not in values)) or (
                    op == "NotIn" and present and labels[k] in values) or (
                    op == "Exists" and not present) or (op == "DoesNotExist" and present):
                return False
        return True


def parse_selector(obj: Any) -> LabelSelector:
    if not isinstance(obj, dict):
        raise InvalidDeviceRequest(f"invalid label selector {obj!r}")
    exprs = []
    for e in obj.get("matchExpressions") or []:
        op = e.get("operator")
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise InvalidDeviceRequest(f"invalid label selector operator {op!r}")
        exprs.append((str(e.get("key")), str(op), frozenset(str(v) for v in e.get("values") or [])))
    return LabelSelector({str(k): str(v) for k, v in (obj.get("matchLabels") or {}).items()}, tuple(exprs))


@dataclass(frozen=True)
class DeviceHint:
    selector: LabelSelector | None = None
    vf_selector: LabelSelector | None = None
    strategy: str = ""
    scope: str = ""
    exclusive: str = ""


@dataclass(frozen=True)
class PartitionSpec:
    restricted: bool
    ring_bus_bandwidth: int | None


@dataclass
class PodPlan:
    """Everything DeviceShare derives from one pod, computed once per scheduling cycle."""

    requests: dict[str, dict[str, int]]
    gpu: GPURequirement | None
    hints: dict[str, DeviceHint]
    joint_types: list[str]
    joint_same_pcie: bool
    partition: PartitionSpec | None
    # GPU model key → the one or more templates the per-GPU request equals, when templates are enforced (vNPU)
    templates: dict[str, list[str]] | None = None
    template_catalog: Any = None  # templates.Catalog the match was made against (for reasons)

    @property
    def empty(self) -> bool:
        return not self.requests


def _annotation_json(annotations: dict[str, str], name: str) -> Any:
    raw = annotations.get(name)
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError as e:
        raise InvalidDeviceRequest(f"invalid annotation {name}: {e}") from e


def plan_pod(pod: JSON, requests: dict[str, int]) -> PodPlan:
    """Normalise requests and read the DeviceShare annotations (1.2, 1.3); raises InvalidDeviceRequest."""
    canonical = canonical_requests(requests)
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    hints: dict[str, DeviceHint] = {}
    raw_hints = _annotation_json(annotations, ANNOTATION_HINT) or {}
    if not isinstance(raw_hints, dict):
        raise InvalidDeviceRequest(f"invalid annotation {ANNOTATION_HINT}: not an object")
    for dtype, h in raw_hints.items():
        if not isinstance(h, dict):
            raise InvalidDeviceRequest(f"invalid annotation {ANNOTATION_HINT}: {dtype} is not an object")
        hints[str(dtype)] = DeviceHint(
            parse_selector(h["selector"]) if h.get("selector") is not None else None,
            parse_selector(h["vfSelector"]) if h.get("vfSelector") is not None else None,
            str(h.get("allocateStrategy") or ""), str(h.get("requiredTopologyScope") or ""),
            str(h.get("exclusivePolicy") or ""))
    joint = _annotation_json(annotations, ANNOTATION_JOINT) or {}
    if not isinstance(joint, dict):
        raise InvalidDeviceRequest(f"invalid annotation {ANNOTATION_JOINT}: not an object")
    joint_types = [str(t) for t in joint.get("deviceTypes") or []
                   if t in canonical and hints.get(str(t), DeviceHint()).strategy != APPLY_FOR_ALL]
    spec = _annotation_json(annotations, ANNOTATION_PARTITION_SPEC)
    partition = None
    if spec is not None:
        if not isinstance(spec, dict):
            raise InvalidDeviceRequest(f"invalid annotation {ANNOTATION_PARTITION_SPEC}: not an object")
        bw = spec.get("ringBusBandwidth")
        try:
            bandwidth = int(parse_quantity(str(bw))) if bw else None
        except InvalidInput as e:
            raise InvalidDeviceRequest(f"invalid annotation {ANNOTATION_PARTITION_SPEC}: {e}") from e
        partition = PartitionSpec(spec.get("allocatePolicy") == RESTRICTED, bandwidth)
    return PodPlan(canonical, gpu_requirement(canonical[GPU]) if GPU in canonical else None, hints,
                   joint_types if len(joint_types) >= 2 else [], joint.get("requiredScope") == SAME_PCIE, partition)


def instances(request: dict[str, int], hint: DeviceHint | None, candidates: int) -> tuple[dict[str, int], int]:
    """Per-device request and count for non-GPU types (devicehandler_default.go); candidates = matching devices."""
    name, value = next(iter(request.items()))
    if hint is not None and hint.strategy == APPLY_FOR_ALL:
        return dict(request), candidates
    if hint is not None and hint.strategy == REQUESTS_AS_COUNT:
        return {name: 100 if hint.exclusive == DEVICE_LEVEL else 1}, value
    if value > 100 and value % 100 == 0:
        return {name: 100}, value // 100
    return dict(request), 1
