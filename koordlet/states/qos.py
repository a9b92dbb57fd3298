"""Kubernetes QoS, Koordinator QoS and priority classes of a pod, derived exactly as upstream so both agree."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any

from apis.core.errors import InvalidInput
from apis.core.quantity import parse_quantity

K8S_GUARANTEED = "Guaranteed"
K8S_BURSTABLE = "Burstable"
K8S_BEST_EFFORT = "BestEffort"
K8S_QOS_CLASSES = (K8S_GUARANTEED, K8S_BURSTABLE, K8S_BEST_EFFORT)

LABEL_POD_QOS = "koordinator.sh/qosClass"
LABEL_POD_PRIORITY_CLASS = "koordinator.sh/priority-class"

QOS_LSE = "LSE"
QOS_LSR = "LSR"
QOS_LS = "LS"
QOS_BE = "BE"
QOS_SYSTEM = "SYSTEM"
QOS_NONE = ""
KOORD_QOS_CLASSES = (QOS_LSE, QOS_LSR, QOS_LS, QOS_BE, QOS_SYSTEM)

PRIORITY_PROD = "koord-prod"
PRIORITY_MID = "koord-mid"
PRIORITY_BATCH = "koord-batch"
PRIORITY_FREE = "koord-free"
PRIORITY_NONE = ""
PRIORITY_CLASSES = (PRIORITY_PROD, PRIORITY_MID, PRIORITY_BATCH, PRIORITY_FREE)

# apis/extension/priority.go: inclusive spec.priority ranges of each class.
PRIORITY_RANGES: dict[str, tuple[int, int]] = {
    PRIORITY_PROD: (9000, 9999),
    PRIORITY_MID: (7000, 7999),
    PRIORITY_BATCH: (5000, 5999),
    PRIORITY_FREE: (3000, 3999),
}

_QOS_COMPUTE_RESOURCES = ("cpu", "memory")
_ZERO = Decimal(0)


def k8s_qos_class(pod: Mapping[str, Any]) -> str:
    """`status.qosClass` when it holds a valid class, else the class kubelet computes from the spec."""
    declared = _dict(_dict(pod).get("status")).get("qosClass")
    if isinstance(declared, str) and declared in K8S_QOS_CLASSES:
        return declared
    return computed_k8s_qos_class(pod)


def computed_k8s_qos_class(pod: Mapping[str, Any]) -> str:
    """kubernetes pkg/apis/core/v1/helper/qos ComputePodQOS: per container (init and regular), then combined.

    Pod-level `spec.resources` (PodLevelResources) decides alone when present. Requests missing for a resource
    that has a limit default to the limit, as the API server's defaulting would have done.
    """
    spec = _dict(_dict(pod).get("spec"))
    pod_resources = spec.get("resources")
    if isinstance(pod_resources, dict):
        return _resources_qos(pod_resources)
    pod_qos: str | None = None
    for container in _containers(spec):
        qos = _resources_qos(_dict(container.get("resources")))
        if qos == K8S_BURSTABLE:
            return qos
        if pod_qos is None:
            pod_qos = qos
        elif pod_qos != qos:
            return K8S_BURSTABLE  # one Guaranteed and one BestEffort container
    return pod_qos or K8S_BEST_EFFORT


def koord_qos_class(pod: Mapping[str, Any]) -> str:
    """The `koordinator.sh/qosClass` label when it names a known class, else QoSNone ("")."""
    return koord_qos_class_of_labels(_labels(pod))


def koord_qos_class_of_labels(labels: Mapping[str, object]) -> str:
    """koord_qos_class from the pod's labels alone (a runtime hook's request has no Pod: upstream's
    GetQoSClassByAttrs)."""
    value = labels.get(LABEL_POD_QOS)
    if isinstance(value, str) and value in KOORD_QOS_CLASSES:
        return value
    return QOS_NONE


def koord_qos_class_with_default(pod: Mapping[str, Any]) -> str:
    """apis/extension/qos_utils.go GetPodQoSClassWithDefault: the label, else derived from the k8s QoS class."""
    qos = koord_qos_class(pod)
    if qos != QOS_NONE:
        return qos
    return koord_qos_for_k8s_qos(k8s_qos_class(pod))


def koord_qos_for_k8s_qos(k8s_qos: str) -> str:
    """Guaranteed -> LSR, Burstable -> LS, BestEffort -> BE (qos_utils.go GetPodQoSClassWithKubeQoS)."""
    return {K8S_GUARANTEED: QOS_LSR, K8S_BURSTABLE: QOS_LS, K8S_BEST_EFFORT: QOS_BE}.get(k8s_qos, QOS_NONE)


def priority_class(pod: Mapping[str, Any]) -> str:
    """apis/extension/priority.go GetPodPriorityClassRaw.

    A present `koordinator.sh/priority-class` label decides alone (an unknown value is "none", with no fallback
    to `spec.priority`); otherwise the class whose range holds `spec.priority`.
    """
    labels = _labels(pod)
    if LABEL_POD_PRIORITY_CLASS in labels:
        value = labels[LABEL_POD_PRIORITY_CLASS]
        return value if isinstance(value, str) and value in PRIORITY_CLASSES else PRIORITY_NONE
    priority = _dict(_dict(pod).get("spec")).get("priority")
    if isinstance(priority, bool) or not isinstance(priority, int):
        return PRIORITY_NONE
    return priority_class_by_value(priority)


def priority_class_by_value(priority: int) -> str:
    """The class whose range holds this `spec.priority` value, else "none"."""
    for name, (low, high) in PRIORITY_RANGES.items():
        if low <= priority <= high:
            return name
    return PRIORITY_NONE


def priority_class_with_default(pod: Mapping[str, Any]) -> str:
    """apis/extension/priority_utils.go GetPodPriorityClassWithDefault: raw class, else derived from QoS."""
    raw = priority_class(pod)
    if raw != PRIORITY_NONE:
        return raw
    return priority_class_for_qos(koord_qos_class_with_default(pod))


def priority_class_for_qos(qos: str) -> str:
    """SYSTEM/LSE/LSR/LS -> koord-prod, BE -> koord-batch, anything else -> none (GetPodPriorityClassWithQoS)."""
    if qos in (QOS_SYSTEM, QOS_LSE, QOS_LSR, QOS_LS):
        return PRIORITY_PROD
    if qos == QOS_BE:
        return PRIORITY_BATCH
    return PRIORITY_NONE


def _resources_qos(resources: Mapping[str, Any]) -> str:
    """QoS of one set of resource requirements (qos.go resourceQOS), only cpu and memory count."""
    requests = _dict(resources.get("requests"))
    limits = _dict(resources.get("limits"))
    if not requests and not limits:
        return K8S_BEST_EFFORT
    qos: str | None = None
    for name in _QOS_COMPUTE_RESOURCES:
        limit = _quantity(limits.get(name))
        request = _quantity(requests[name]) if name in requests else limit
        if request != limit:
            return K8S_BURSTABLE
        best_effort = request == _ZERO
        if qos is None:
            qos = K8S_BEST_EFFORT if best_effort else K8S_GUARANTEED
        elif best_effort != (qos == K8S_BEST_EFFORT):
            return K8S_BURSTABLE
    return qos or K8S_BEST_EFFORT


def _containers(spec: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    # Ephemeral containers cannot declare resources, so kubelet ignores them too.
    for key in ("initContainers", "containers"):
        items = spec.get(key)
        if isinstance(items, list):
            yield from (c for c in items if isinstance(c, dict))


def _quantity(value: object) -> Decimal:
    """A request or limit; a missing or unparsable one counts as zero, like an absent entry."""
    if not isinstance(value, str | int | float):
        return _ZERO
    return _parsed(value)


@functools.lru_cache(maxsize=1024)  # a node's pods repeat the same few quantities
def _parsed(value: str | int | float) -> Decimal:
    try:
        return parse_quantity(value)
    except InvalidInput:
        return _ZERO


def _labels(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return _dict(_dict(_dict(pod).get("metadata")).get("labels"))


def _dict(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}
