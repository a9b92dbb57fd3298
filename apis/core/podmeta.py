"""Facts of a raw Pod that Kubernetes components read from its metadata and spec: mirror and static pods, priority,
the deletion cost, volumes, owners (k8s.io/kubernetes pkg/kubelet/types, pkg/apis/core/helper; descheduler
pkg/utils/pod.go)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from apis.core.objects import JSONMapping, as_object, as_objects

DEFAULT_SCHEDULER_NAME = "default-scheduler"  # spec.schedulerName as the API server defaults it
ANNOTATION_MIRROR_POD = "kubernetes.io/config.mirror"
ANNOTATION_CONFIG_SOURCE = "kubernetes.io/config.source"
ANNOTATION_POD_DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
SYSTEM_CRITICAL_PRIORITY = 2_000_000_000  # scheduling.SystemCriticalPriority


def go_int32(text: object) -> int | None:
    """A decimal int32 as upstream's validFirstDigit + strconv.ParseInt(.., 10, 32) read it: no `+`, no leading
    zeros (except "0"); None when it is not one."""
    if not isinstance(text, str) or not text:
        return None
    first = text[0]
    if not (first == "-" or text == "0" or "1" <= first <= "9"):
        return None
    body = text[1:] if first == "-" else text
    if not body.isdigit() or not body.isascii():
        return None
    value = int(text)
    return value if -(2**31) <= value < 2**31 else None


def pod_annotations(pod: Mapping[str, Any]) -> JSONMapping:
    return as_object(as_object(pod.get("metadata")).get("annotations"))


def owner_references(pod: Mapping[str, Any]) -> list[JSONMapping]:
    return as_objects(as_object(pod.get("metadata")).get("ownerReferences"))


def controller_ref(pod: Mapping[str, Any]) -> JSONMapping | None:
    """The ownerReference with `controller: true`, if any."""
    return next((r for r in owner_references(pod) if r.get("controller") is True), None)


def is_mirror_pod(pod: Mapping[str, Any]) -> bool:
    return ANNOTATION_MIRROR_POD in pod_annotations(pod)


def is_static_pod(pod: Mapping[str, Any]) -> bool:
    """A config.source annotation other than "api" (kubelet's file or http sources)."""
    source = pod_annotations(pod).get(ANNOTATION_CONFIG_SOURCE)
    return source is not None and source != "api"


def is_terminating(pod: Mapping[str, Any]) -> bool:
    return as_object(pod.get("metadata")).get("deletionTimestamp") is not None


def is_daemonset_pod(pod: Mapping[str, Any]) -> bool:
    return any(r.get("kind") == "DaemonSet" for r in owner_references(pod))


def priority(pod: Mapping[str, Any]) -> int | None:
    """spec.priority, None when unset."""
    value = as_object(pod.get("spec")).get("priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def is_critical_priority(pod: Mapping[str, Any]) -> bool:
    p = priority(pod)
    return p is not None and p >= SYSTEM_CRITICAL_PRIORITY


def deletion_cost(pod: Mapping[str, Any]) -> int:
    """GetDeletionCostFromPodAnnotations: the int32, 0 when absent or invalid."""
    return go_int32(pod_annotations(pod).get(ANNOTATION_POD_DELETION_COST)) or 0


def volumes(pod: Mapping[str, Any]) -> list[JSONMapping]:
    return as_objects(as_object(pod.get("spec")).get("volumes"))


def has_local_storage(pod: Mapping[str, Any]) -> bool:
    return any(v.get("hostPath") is not None or v.get("emptyDir") is not None for v in volumes(pod))


def has_pvc(pod: Mapping[str, Any]) -> bool:
    return any(v.get("persistentVolumeClaim") is not None for v in volumes(pod))


def has_resource_claims(pod: Mapping[str, Any]) -> bool:
    return bool(as_object(pod.get("spec")).get("resourceClaims"))
