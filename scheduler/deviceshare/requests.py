"""DeviceShare request normalisation: pod resource requests → canonical per-device-type requests (upstream utils.go)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from apis.core.errors import InvalidInput
from apis.core.labelselector import LabelSelector, SelectorError, decoded_label_selector
from apis.core.objects import JSON
from apis.core.quantity import parse_quantity
from apis.extension.device_share import (
    ANNOTATION_DEVICE_ALLOCATE_HINT,
    ANNOTATION_DEVICE_JOINT_ALLOCATE,
    ANNOTATION_GPU_PARTITION_SPEC,
)
from apis.extension.resources import (
    RESOURCE_AMD_GPU,
    RESOURCE_FPGA,
    RESOURCE_GPU,
    RESOURCE_GPU_CORE,
    RESOURCE_GPU_MEMORY,
    RESOURCE_GPU_MEMORY_RATIO,
    RESOURCE_GPU_SHARED,
    RESOURCE_HYGON_DCU,
    RESOURCE_NPU_CORE,
    RESOURCE_NPU_CPU,
    RESOURCE_NPU_DVPP,
    RESOURCE_NVIDIA_GPU,
    RESOURCE_RDMA,
)
from apis.scheduling.device import DEVICE_TYPE_FPGA, DEVICE_TYPE_GPU, DEVICE_TYPE_RDMA

RESOURCE_NAMES: dict[str, tuple[str, ...]] = {
    DEVICE_TYPE_GPU: (RESOURCE_NVIDIA_GPU, RESOURCE_AMD_GPU, RESOURCE_HYGON_DCU, RESOURCE_GPU, RESOURCE_GPU_SHARED,
          RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY, RESOURCE_GPU_MEMORY_RATIO, RESOURCE_NPU_CORE, RESOURCE_NPU_CPU,
          RESOURCE_NPU_DVPP),
    DEVICE_TYPE_RDMA: (RESOURCE_RDMA,),
    DEVICE_TYPE_FPGA: (RESOURCE_FPGA,),
}
ALL_DEVICE_RESOURCES = frozenset(r for names in RESOURCE_NAMES.values() for r in names)


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
    return all(_percentage(r[n]) for n in (RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY_RATIO) if n in r)


def _v_shared(r: dict[str, int]) -> bool:
    shared = r[RESOURCE_GPU_SHARED]
    return all(r[n] % shared == 0 and r[n] // shared <= 100
               for n in (RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY_RATIO) if n in r)


def _v_npu_shared(r: dict[str, int]) -> bool:
    return r[RESOURCE_GPU_SHARED] <= 1 and r.get(RESOURCE_NPU_DVPP, 0) <= 100


def _v_true(r: dict[str, int]) -> bool:
    return True


# The allow-list of exact resource-name combinations and their validators (utils.go ValidDeviceResourceCombinations).
_COMBINATIONS: dict[frozenset[str], Any] = {
    frozenset({RESOURCE_NVIDIA_GPU}): _v_true,
    frozenset({RESOURCE_AMD_GPU}): _v_true,
    frozenset({RESOURCE_HYGON_DCU}): _v_true,
    frozenset({RESOURCE_GPU}): _v_true,
    frozenset({RESOURCE_GPU_MEMORY}): _v_percentage,
    frozenset({RESOURCE_GPU_MEMORY_RATIO}): _v_percentage,
    frozenset({RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY}): _v_percentage,
    frozenset({RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY_RATIO}): _v_percentage,
    frozenset({RESOURCE_NPU_CORE, RESOURCE_GPU_MEMORY_RATIO}): _v_percentage,
    frozenset({RESOURCE_GPU_SHARED, RESOURCE_GPU_MEMORY}): _v_shared,
    frozenset({RESOURCE_GPU_SHARED, RESOURCE_GPU_MEMORY_RATIO}): _v_shared,
    frozenset({RESOURCE_GPU_SHARED, RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY}): _v_shared,
    frozenset({RESOURCE_GPU_SHARED, RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY_RATIO}): _v_shared,
    frozenset({RESOURCE_GPU_SHARED, RESOURCE_NPU_CORE, RESOURCE_NPU_CPU, RESOURCE_GPU_MEMORY}): _v_npu_shared,
    frozenset({RESOURCE_GPU_SHARED, RESOURCE_NPU_CORE, RESOURCE_NPU_CPU, RESOURCE_NPU_DVPP,
               RESOURCE_GPU_MEMORY}): _v_npu_shared,
    frozenset({RESOURCE_FPGA}): _v_true,
    frozenset({RESOURCE_RDMA}): _v_true,
}
_PERCENTAGE_VALIDATED = (RESOURCE_GPU, RESOURCE_FPGA, RESOURCE_RDMA)


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
        whole = masked.get(RESOURCE_NVIDIA_GPU) or masked.get(RESOURCE_AMD_GPU) or masked.get(RESOURCE_HYGON_DCU)
        if whole:
            out[dtype] = {RESOURCE_GPU_CORE: whole * 100, RESOURCE_GPU_MEMORY_RATIO: whole * 100}
        elif RESOURCE_GPU in masked:
            out[dtype] = {RESOURCE_GPU_CORE: masked[RESOURCE_GPU], RESOURCE_GPU_MEMORY_RATIO: masked[RESOURCE_GPU]}
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
    ratio = canonical.get(RESOURCE_GPU_MEMORY_RATIO, 0)
    count = 1
    if canonical.get(RESOURCE_GPU_SHARED, 0) > 0:
        count = canonical[RESOURCE_GPU_SHARED]
    elif ratio > 100 and ratio % 100 == 0:
        count = ratio // 100
    # **[quirk]** kept for parity: gpu-core > 100 with gpu-memory (no ratio) stays count 1 with per-GPU core > 100,
    # so it never fits a 100-core GPU; only memory-ratio or gpu.shared create multi-GPU counts.
    per = {n: v // count for n, v in canonical.items() if n != RESOURCE_GPU_SHARED}
    shared = (RESOURCE_GPU_MEMORY_RATIO in per and per[RESOURCE_GPU_MEMORY_RATIO] < 100) or (
        RESOURCE_GPU_MEMORY in per and RESOURCE_GPU_MEMORY_RATIO not in per)
    return GPURequirement(per, count, shared)


def parse_selector(obj: object, where: str = "selector") -> LabelSelector:
    """A DeviceHint's selector (metav1.LabelSelector in the annotation's JSON); one that does not convert refuses
    the pod."""
    try:
        return decoded_label_selector(obj, where)
    except SelectorError as e:
        raise InvalidDeviceRequest(f"invalid label selector: {e}") from None


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
    raw_hints = _annotation_json(annotations, ANNOTATION_DEVICE_ALLOCATE_HINT) or {}
    if not isinstance(raw_hints, dict):
        raise InvalidDeviceRequest(f"invalid annotation {ANNOTATION_DEVICE_ALLOCATE_HINT}: not an object")
    for dtype, h in raw_hints.items():
        if not isinstance(h, dict):
            raise InvalidDeviceRequest(f"invalid annotation {ANNOTATION_DEVICE_ALLOCATE_HINT}: {dtype} "
                                       "is not an object")
        hints[str(dtype)] = DeviceHint(
            parse_selector(h["selector"], f"{dtype}.selector") if h.get("selector") is not None else None,
            parse_selector(h["vfSelector"], f"{dtype}.vfSelector") if h.get("vfSelector") is not None else None,
            str(h.get("allocateStrategy") or ""), str(h.get("requiredTopologyScope") or ""),
            str(h.get("exclusivePolicy") or ""))
    joint = _annotation_json(annotations, ANNOTATION_DEVICE_JOINT_ALLOCATE) or {}
    if not isinstance(joint, dict):
        raise InvalidDeviceRequest(f"invalid annotation {ANNOTATION_DEVICE_JOINT_ALLOCATE}: not an object")
    joint_types = [str(t) for t in joint.get("deviceTypes") or []
                   if t in canonical and hints.get(str(t), DeviceHint()).strategy != APPLY_FOR_ALL]
    spec = _annotation_json(annotations, ANNOTATION_GPU_PARTITION_SPEC)
    partition = None
    if spec is not None:
        if not isinstance(spec, dict):
            raise InvalidDeviceRequest(f"invalid annotation {ANNOTATION_GPU_PARTITION_SPEC}: not an object")
        bw = spec.get("ringBusBandwidth")
        try:
            bandwidth = int(parse_quantity(str(bw))) if bw else None
        except InvalidInput as e:
            raise InvalidDeviceRequest(f"invalid annotation {ANNOTATION_GPU_PARTITION_SPEC}: {e}") from e
        partition = PartitionSpec(spec.get("allocatePolicy") == RESTRICTED, bandwidth)
    gpu = gpu_requirement(canonical[DEVICE_TYPE_GPU]) if DEVICE_TYPE_GPU in canonical else None
    return PodPlan(canonical, gpu, hints,
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
