"""Memory QoS config of a pod: its class's NodeSLO `memoryQOS`, the `koordinator.sh/memoryQOS` annotation on top,
and which fields koordlet writes for it; plus the memory requests and limits the values derive from."""

# Upstream: pkg/koordlet/qosmanager/plugins/cgreconcile/cgroup_reconcile.go (getMergedPodResourceQoS,
# mergePodResourceQoSForMemoryQoS), qosmanager/helpers (GetPodResourceQoSByQoSClass, GetKubeQoSResourceQoSByQoSClass),
# apis/slo/v1alpha1 GetPodMemoryQoSConfig (the annotation), pkg/util (GetPodRequest, GetPodBEMemoryByteRequest-
# IgnoreUnlimited, GetContainerMemoryByteLimit, GetContainerBatchMemoryByte{Request,Limit}).
#
# [quirk] upstream writes every memoryQOS field for every pod, whether its class's memoryQOS is enabled or not: a
# disabled class carries the "None" values (min/low 0, memory.high max, wmark 0/50/0, priority 0, oom.group 0), which
# then overwrite what kubelet set (memory.oom.group=1 on cgroup v2 since Kubernetes 1.28; min/high under kubelet's
# MemoryQoS gate). Here a pod's fields are written only when memory QoS is asked for (docs/decisions.md): all of them
# when its class's memoryQOS has `enable: true` or its annotation says `policy: auto`; only the fields its annotation
# names when the class is disabled; none for `policy: none`.

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass

from apis.core.errors import InvalidInput, PlanError
from apis.core.objects import JSON, as_object, as_objects
from apis.core.quantity import parse_quantity
from apis.core.resources import MEMORY, pod_requests
from apis.extension.memory_qos import ANNOTATION_POD_MEMORY_QOS
from apis.extension.qos import QOS_BE, QOS_LS, QOS_LSR, koord_qos_class, koord_qos_class_with_default
from apis.slo.config import DEFAULT_SPEC
from koordlet.qos.batchspec import BatchSpecError, spec_containers
from koordlet.qos.state import QoSState
from koordlet.states.model import PodMeta

POLICY_DEFAULT, POLICY_NONE, POLICY_AUTO = "default", "none", "auto"
# memoryQOS field -> its bounds (CRD and Go API validation)
FIELDS: dict[str, tuple[int, int]] = {
    "minLimitPercent": (0, 100), "lowLimitPercent": (0, 100), "throttlingPercent": (0, 100),
    "wmarkRatio": (0, 100), "wmarkScalePermill": (1, 1000), "wmarkMinAdj": (-25, 50),
    "priorityEnable": (0, 1), "priority": (0, 12), "oomKillGroup": (0, 1),
}
KUBE_QOS_CLASSES = {"Guaranteed": QOS_LSR, "Burstable": QOS_LS, "BestEffort": QOS_BE}  # the classes' NodeSLO blocks


@dataclass(frozen=True)
class MemoryConfig:
    """A pod's (or kube-QoS dir's) merged memoryQOS fields, and the fields koordlet writes for it."""

    values: Mapping[str, int]
    asked: frozenset[str]


def class_config(state: QoSState, koord_qos: str) -> tuple[dict[str, int], bool]:
    """(the class's memoryQOS knobs, whether it is enabled) from the merged NodeSLO; none for a class without one."""
    block = state.nodeslo.resource_qos_strategy.for_class(koord_qos)
    if block is None:
        return {}, False
    return block.memory_qos.knobs(), block.memory_qos.enable


def kube_qos_config(state: QoSState, k8s_qos: str) -> MemoryConfig:
    """GetKubeQoSResourceQoSByQoSClass: Guaranteed (the kubepods root) -> lsrClass, Burstable -> lsClass,
    BestEffort -> beClass."""
    values, enabled = class_config(state, KUBE_QOS_CLASSES[k8s_qos])
    return MemoryConfig(values, frozenset(values) if enabled else frozenset())


def pod_config(state: QoSState, pod: PodMeta) -> tuple[MemoryConfig, PlanError | None]:
    """The pod's merged config; a malformed annotation is reported and ignored (as upstream: node config only)."""
    qos = koord_qos_class_with_default(pod.raw)
    values, enabled = class_config(state, qos)
    error = None
    try:
        policy, own = _annotation(pod)
    except InvalidInput as e:
        error = PlanError("Pod", f"{pod.namespace}/{pod.name}", f"annotations[{ANNOTATION_POD_MEMORY_QOS}]", str(e),
                          uid=pod.uid)
        policy, own = POLICY_DEFAULT, {}
    if policy == POLICY_NONE:
        return MemoryConfig(values, frozenset()), error
    asked = frozenset(FIELDS) if enabled else frozenset()
    if policy == POLICY_AUTO:  # the default strategy's values for the pod's class
        block = DEFAULT_SPEC.resource_qos_strategy.for_class(qos)
        values = block.memory_qos.knobs() if block is not None else {}
        asked = frozenset(FIELDS)
    merged = {**values, **own}
    return MemoryConfig(merged, asked | frozenset(own)), error


def _annotation(pod: PodMeta) -> tuple[str, dict[str, int]]:
    """PodMemoryQOSConfig: `policy` plus MemoryQOS fields (null is absent); InvalidInput when malformed."""
    annotations = (pod.raw.get("metadata") or {}).get("annotations") or {}
    text = annotations.get(ANNOTATION_POD_MEMORY_QOS) if isinstance(annotations, dict) else None
    if text is None:
        return POLICY_DEFAULT, {}
    try:
        doc = json.loads(text) if isinstance(text, str) else None
    except ValueError as e:
        raise InvalidInput(f"invalid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise InvalidInput("expected a JSON object")
    policy = doc.get("policy") or POLICY_DEFAULT
    if not isinstance(policy, str):
        raise InvalidInput(f"policy: expected a string, got {policy!r}")
    own: dict[str, int] = {}
    for key, (lo, hi) in FIELDS.items():
        value = doc.get(key)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
            raise InvalidInput(f"{key}: {value!r} is not an integer in [{lo}, {hi}]")
        own[key] = value
    return policy, own


# ---- requests and limits --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ContainerMemory:
    request: int  # bytes; 0 when not set
    limit: int  # bytes; -1 when not set


def is_be(pod: PodMeta) -> bool:
    """GetPodQoSClassRaw == BE: the label alone decides whether batch-memory counts."""
    return koord_qos_class(pod.raw) == QOS_BE


def pod_request(pod: PodMeta) -> int:
    """The pod's memory request in bytes: batch-memory requests for BE pods (absent ones ignored), else
    apis.core.resources.pod_requests (Kubernetes' rules: sidecars, init maxima, overhead, pod-level resources).
    Raises InvalidInput for a malformed quantity."""
    if is_be(pod):
        return sum(c.memory_request or 0 for c in _batch(pod).values())
    return pod_requests(pod.raw).get(MEMORY, 0)


def container_memory(pod: PodMeta, container: Mapping[str, object]) -> ContainerMemory:
    """A container's request and limit (batch-memory for BE pods); InvalidInput for a malformed quantity."""
    if is_be(pod):
        batch = _batch(pod).get(str(container.get("name", "")))
        if batch is None:
            return ContainerMemory(0, -1)
        return ContainerMemory(batch.memory_request or 0,
                               batch.memory_limit if batch.memory_limit is not None else -1)
    resources = as_object(container.get("resources"))
    limit = as_object(resources.get("limits")).get("memory")
    return ContainerMemory(_request(resources), _bytes(limit) if limit is not None else -1)


def spec_container(pod: PodMeta, name: str) -> Mapping[str, object] | None:
    for c in as_objects(as_object(pod.raw.get("spec")).get("containers")):
        if c.get("name") == name:
            return c
    return None


def _batch(pod: PodMeta) -> JSON:
    try:
        return spec_containers(pod)
    except BatchSpecError as e:
        raise InvalidInput(str(e)) from None


def _request(resources: Mapping[str, object]) -> int:
    """requests.memory, else limits.memory (the API server's defaulting), else 0."""
    request = as_object(resources.get("requests")).get("memory")
    return _bytes(request if request is not None else as_object(resources.get("limits")).get("memory"))


def _bytes(value: object) -> int:
    """Quantity.Value() (rounded up); absent is 0."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InvalidInput(f"expected a quantity, got {value!r}")
    return math.ceil(parse_quantity(value))


def node_allocatable_memory(node: Mapping[str, object] | None) -> int | None:
    """status.allocatable.memory of the Node in bytes; None without a Node or a readable value."""
    alloc = as_object(as_object(node).get("status")).get("allocatable")
    try:
        value = as_object(alloc).get("memory")
        return _bytes(value) if value is not None else None
    except InvalidInput:
        return None
