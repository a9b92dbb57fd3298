"""A BE pod's batch resources and the cgroup values upstream's BatchResource hook derives from them."""

# Upstream: apis/extension/resource.go (resource names, the `node.koordinator.sh/extended-resource-spec`
# annotation), pkg/util/{pod.go,container.go,extended_resource.go} (GetPodExtendedResources: containers of the pod
# spec that name a batch resource; GetBatch*FromResourceList: Quantity.Value(), -1 when absent),
# runtimehooks/protocol/{pod,container}_context.go FromReconciler (the pod spec first, else the annotation),
# hooks/batchresource/batch_resource.go (the values), util/system/cgroup.go (MilliCPUToShares, MilliCPUToQuota).

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, NoReturn

from apis.core.errors import InvalidInput
from apis.core.objects import JSON, as_object, as_objects
from apis.core.quantity import parse_quantity
from apis.extension.qos import QOS_BE, koord_qos_class, koord_qos_class_of_labels
from apis.extension.resources import ANNOTATION_EXTENDED_RESOURCE_SPEC, BATCH_CPU, BATCH_MEMORY
from koordlet.host.resources import CFS_BASE_PERIOD_US, CFS_QUOTA_MIN_US, CPU_SHARES_MAX, CPU_SHARES_MIN
from koordlet.states.model import PodMeta

UNLIMITED = -1


@dataclass(frozen=True)
class ContainerBatch:
    """One container's batch requests and limits; None where the list lacks the name or the value is <= 0 (upstream
    treats both alike)."""

    cpu_request: int | None = None  # milli-cores
    cpu_limit: int | None = None
    memory_request: int | None = None  # bytes
    memory_limit: int | None = None


@dataclass(frozen=True)
class PodBatch:
    """What the pod declares: per container name, from the pod spec and from the annotation."""

    spec: Mapping[str, ContainerBatch]  # containers of the pod spec that name a batch resource
    annotation: Mapping[str, ContainerBatch]  # the annotation's containers ({} when absent or unreadable)
    annotation_error: BatchSpecError | None = None  # the annotation was present but unreadable

    @property
    def pod_containers(self) -> Mapping[str, ContainerBatch]:
        """PodContext.FromReconciler: the pod spec's containers when any declares batch resources, else the
        annotation's."""
        return self.spec or self.annotation

    def container(self, name: str) -> ContainerBatch | None:
        """ContainerContext.FromReconciler: the container's own spec first, else the annotation's entry."""
        own = self.spec.get(name)
        return own if own is not None else self.annotation.get(name)


class BatchSpecError(InvalidInput):
    """The pod's batch resources cannot be read; `field` names where (for the Event)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def is_batch_pod(pod: PodMeta) -> bool:
    """BatchResource acts on pods labelled `koordinator.sh/qosClass: BE` only (GetPodQoSClassRaw)."""
    return koord_qos_class(pod.raw) == QOS_BE


def is_batch_labels(labels: Mapping[str, str]) -> bool:
    """is_batch_pod from the pod's labels alone (the runtime hooks' GetQoSClassByAttrs)."""
    return koord_qos_class_of_labels(labels) == QOS_BE


def spec_containers(pod: PodMeta) -> dict[str, ContainerBatch]:
    """The pod spec's containers that name a batch resource (GetContainerBatchMemoryByte*: the spec only); raises
    BatchSpecError for a malformed quantity."""
    out: dict[str, ContainerBatch] = {}
    for i, c in enumerate(as_objects(as_object(pod.raw.get("spec")).get("containers"))):
        got = _container_from_resources(as_object(c.get("resources")), f"spec.containers[{i}].resources")
        if got is not None:
            out[str(c.get("name", ""))] = got
    return out


def pod_batch(pod: PodMeta) -> PodBatch | None:
    """The pod's batch resources, or None when it declares none.

    Raises BatchSpecError for a malformed quantity in the pod spec, or for a malformed annotation when the spec
    declares nothing (upstream logs it and leaves the cgroups alone, which is what skipping the pod does). A malformed
    annotation next to a spec that declares batch resources is returned in `annotation_error` (upstream logs it)."""
    from_spec = spec_containers(pod)
    try:
        from_annotation, error = _from_annotation(pod), None
    except BatchSpecError as e:
        if not from_spec:
            raise
        from_annotation, error = {}, e
    # [quirk] upstream takes an annotation whose `containers` is present but empty as a spec, and then writes a pod
    # memory limit of 0 (the sum over no containers); an empty spec is no spec here.
    if not from_spec and not from_annotation:
        return None
    return PodBatch(from_spec, from_annotation, error)


# ---- values (hooks/batchresource/batch_resource.go) ----------------------------------------------------------


def milli_cpu_to_shares(milli: int) -> int:
    """util/system MilliCPUToShares: milli×1024/1000, at least 2, at most 262144; 2 for nothing requested."""
    if milli <= 0:
        return CPU_SHARES_MIN
    return max(CPU_SHARES_MIN, min(CPU_SHARES_MAX, milli * 1024 // 1000))


def milli_cpu_to_quota(milli: int) -> int:
    """util/system MilliCPUToQuota: milli×100 µs per 100 ms period, at least 1000; -1 (unlimited) for <= 0."""
    quota = milli * CFS_BASE_PERIOD_US // 1000
    if quota <= 0:
        return UNLIMITED
    return max(quota, CFS_QUOTA_MIN_US)


def scale_quota(quota: int, ratio: float | None) -> int:
    """A limited quota divided by the CPU normalization ratio when that is > 1, rounded up.

    [quirk] upstream does not apply the 1000 µs floor again after dividing, so a small quota on a fast node becomes a
    value the kernel rejects; we keep the floor."""
    if quota <= 0 or ratio is None or ratio <= 1.0:
        return quota
    return max(math.ceil(quota / ratio), CFS_QUOTA_MIN_US)


def pod_shares(batch: PodBatch) -> int:
    """SetPodCPUShares: from the sum of the containers' batch-cpu requests."""
    return milli_cpu_to_shares(sum(c.cpu_request or 0 for c in batch.pod_containers.values()))


def pod_quota(batch: PodBatch) -> int:
    """SetPodCFSQuota before scaling: from the sum of the batch-cpu limits; unlimited once a container has none."""
    limits = [c.cpu_limit for c in batch.pod_containers.values()]
    if any(v is None for v in limits):
        return UNLIMITED
    return milli_cpu_to_quota(sum(v for v in limits if v is not None))


def pod_memory_limit(batch: PodBatch) -> int:
    """SetPodMemoryLimit: the sum of the batch-memory limits; unlimited once a container has none."""
    limits = [c.memory_limit for c in batch.pod_containers.values()]
    if any(v is None for v in limits):
        return UNLIMITED
    return sum(v for v in limits if v is not None)


def container_shares(c: ContainerBatch) -> int:
    return milli_cpu_to_shares(c.cpu_request or 0)


def container_quota(c: ContainerBatch) -> int:
    return milli_cpu_to_quota(c.cpu_limit or 0)


def container_memory_limit(c: ContainerBatch) -> int:
    return c.memory_limit if c.memory_limit is not None else UNLIMITED


@dataclass(frozen=True)
class BatchValues:
    """The three values BatchResource sets on one cgroup (the pod's or a container's), before unit conversion."""

    shares: int  # cpu.shares
    quota: int  # cpu.cfs_quota_us over the 100 ms base period; -1 unlimited
    memory_limit: int  # bytes; -1 unlimited


def pod_values(batch: PodBatch, *, cfs_quota: bool, ratio: float | None) -> BatchValues:
    """The pod cgroup's values: `cfs_quota` False (the cfsQuota suppress policy) leaves the quota unlimited, else it
    is divided by the CPU normalization `ratio`. The one rule for the reconciler and the runtime hook."""
    quota = scale_quota(pod_quota(batch), ratio) if cfs_quota else UNLIMITED
    return BatchValues(pod_shares(batch), quota, pod_memory_limit(batch))


def container_values(c: ContainerBatch, *, cfs_quota: bool, ratio: float | None) -> BatchValues:
    """A container cgroup's values, as pod_values."""
    quota = scale_quota(container_quota(c), ratio) if cfs_quota else UNLIMITED
    return BatchValues(container_shares(c), quota, container_memory_limit(c))


def batch_pod_shares(pod: PodMeta) -> int | None:
    """The pod-level cpu.shares BatchResource gives this pod, or None when it gives none (not BE, no batch
    resources, unreadable spec): what CPU QoS restores after taking the pod out of cpu.idle."""
    if not is_batch_pod(pod):
        return None
    try:
        batch = pod_batch(pod)
    except BatchSpecError:
        return None
    return pod_shares(batch) if batch is not None else None


# ---- parsing ----------------------------------------------------------------------------------------------------


def _container_from_resources(resources: Mapping[str, object], where: str) -> ContainerBatch | None:
    """GetContainerExtendedResources: None unless the requests or limits name a batch resource."""
    requests, limits = as_object(resources.get("requests")), as_object(resources.get("limits"))
    if not any(name in lst for lst in (requests, limits) for name in (BATCH_CPU, BATCH_MEMORY)):
        return None
    return ContainerBatch(
        cpu_request=_value(requests.get(BATCH_CPU), f"{where}.requests[{BATCH_CPU}]"),
        cpu_limit=_value(limits.get(BATCH_CPU), f"{where}.limits[{BATCH_CPU}]"),
        memory_request=_value(requests.get(BATCH_MEMORY), f"{where}.requests[{BATCH_MEMORY}]"),
        memory_limit=_value(limits.get(BATCH_MEMORY), f"{where}.limits[{BATCH_MEMORY}]"),
    )


def _value(quantity: object, where: str) -> int | None:
    """Quantity.Value() (rounded up, away from zero); None when absent or not positive."""
    if quantity is None:
        return None
    if isinstance(quantity, bool) or not isinstance(quantity, str | int | Decimal):
        raise BatchSpecError(where, f"expected a quantity, got {quantity!r}")
    try:
        amount = parse_quantity(str(quantity))
    except InvalidInput as e:
        raise BatchSpecError(where, str(e)) from None
    value = math.ceil(amount) if amount > 0 else math.floor(amount)
    return value if value > 0 else None


class _Pairs(list[tuple[str, object]]):
    """A JSON object as its (key, value) pairs in document order."""


def _from_annotation(pod: PodMeta) -> dict[str, ContainerBatch]:
    return annotation_containers(as_object(as_object(pod.raw.get("metadata")).get("annotations")))


def annotation_containers(annotations: Mapping[str, object]) -> dict[str, ContainerBatch]:
    """GetExtendedResourceSpec: the annotation decoded as Go decodes ExtendedResourceSpec (struct fields matched
    case-insensitively, the last duplicate wins, null is absent; ResourceList keys are exact); {} without it.
    BatchSpecError names the field when it is malformed. What the runtime hooks read (NRI carries no pod spec)."""
    text = annotations.get(ANNOTATION_EXTENDED_RESOURCE_SPEC)
    where = f"annotations[{ANNOTATION_EXTENDED_RESOURCE_SPEC}]"
    if text is None:
        return {}
    if not isinstance(text, str):
        raise BatchSpecError(where, "expected a string")
    try:
        doc = json.loads(text, object_pairs_hook=_Pairs, parse_float=Decimal, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as e:
        raise BatchSpecError(where, f"invalid JSON: {e}") from None
    if doc is None:
        return {}
    containers = _field(doc, "containers", where)
    if containers is None:
        return {}
    out: dict[str, ContainerBatch] = {}
    for name, entry in _object(containers, f"{where}.containers"):
        at = f"{where}.containers[{name}]"
        if entry is None:
            out[name] = ContainerBatch()
            continue
        lists = {key: _resource_list(_field(entry, key, at), f"{at}.{key}") for key in ("requests", "limits")}
        out[name] = ContainerBatch(
            cpu_request=_value(lists["requests"].get(BATCH_CPU), f"{at}.requests[{BATCH_CPU}]"),
            cpu_limit=_value(lists["limits"].get(BATCH_CPU), f"{at}.limits[{BATCH_CPU}]"),
            memory_request=_value(lists["requests"].get(BATCH_MEMORY), f"{at}.requests[{BATCH_MEMORY}]"),
            memory_limit=_value(lists["limits"].get(BATCH_MEMORY), f"{at}.limits[{BATCH_MEMORY}]"),
        )
    return out


def _object(value: object, where: str) -> _Pairs:
    if not isinstance(value, _Pairs):
        raise BatchSpecError(where, "expected a JSON object")
    return value


def _field(obj: object, name: str, where: str) -> Any:
    """A struct field of a decoded object (case-insensitive key, the last one wins); None when absent or null."""
    found = None
    for key, value in _object(obj, where):
        if key.lower() == name:
            found = value
    return found


def _resource_list(value: object, where: str) -> JSON:
    if value is None:
        return {}
    return {k: v for k, v in _object(value, where) if v is not None}


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")
