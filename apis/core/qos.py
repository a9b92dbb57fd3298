"""Kubernetes' pod QoS classes (core/v1 PodQOSClass) and the class kubelet computes for a raw pod."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any

from apis.core.errors import InvalidInput
from apis.core.objects import as_object
from apis.core.quantity import parse_quantity

K8S_GUARANTEED = "Guaranteed"
K8S_BURSTABLE = "Burstable"
K8S_BEST_EFFORT = "BestEffort"
K8S_QOS_CLASSES = (K8S_GUARANTEED, K8S_BURSTABLE, K8S_BEST_EFFORT)

_QOS_COMPUTE_RESOURCES = ("cpu", "memory")
_ZERO = Decimal(0)


def k8s_qos_class(pod: Mapping[str, Any]) -> str:
    """`status.qosClass` when it holds a valid class, else the class kubelet computes from the spec."""
    declared = as_object(as_object(pod).get("status")).get("qosClass")
    if isinstance(declared, str) and declared in K8S_QOS_CLASSES:
        return declared
    return computed_k8s_qos_class(pod)


def computed_k8s_qos_class(pod: Mapping[str, Any]) -> str:
    """kubernetes pkg/apis/core/v1/helper/qos ComputePodQOS: per container (init and regular), then combined.

    Pod-level `spec.resources` (PodLevelResources) decides alone when present. Requests missing for a resource
    that has a limit default to the limit, as the API server's defaulting would have done.
    """
    spec = as_object(as_object(pod).get("spec"))
    pod_resources = spec.get("resources")
    if isinstance(pod_resources, dict):
        return _resources_qos(pod_resources)
    pod_qos: str | None = None
    for container in _containers(spec):
        qos = _resources_qos(as_object(container.get("resources")))
        if qos == K8S_BURSTABLE:
            return qos
        if pod_qos is None:
            pod_qos = qos
        elif pod_qos != qos:
            return K8S_BURSTABLE  # one Guaranteed and one BestEffort container
    return pod_qos or K8S_BEST_EFFORT


def _resources_qos(resources: Mapping[str, Any]) -> str:
    """QoS of one set of resource requirements (qos.go resourceQOS), only cpu and memory count."""
    requests = as_object(resources.get("requests"))
    limits = as_object(resources.get("limits"))
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
