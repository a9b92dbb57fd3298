"""Koordinator's priority classes: the `koordinator.sh/priority-class` pod label, the priority bands, the decoder."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from apis.extension.qos import QOS_BE, QOS_LS, QOS_LSE, QOS_LSR, QOS_SYSTEM, koord_qos_class_with_default, pod_labels

# Upstream: apis/extension/priority.go, apis/extension/priority_utils.go.

LABEL_POD_PRIORITY_CLASS = "koordinator.sh/priority-class"
LABEL_POD_SUB_PRIORITY = "koordinator.sh/priority"  # GetPodSubPriority: an integer; absent or invalid reads 0

PRIORITY_PROD = "koord-prod"
PRIORITY_MID = "koord-mid"
PRIORITY_BATCH = "koord-batch"
PRIORITY_FREE = "koord-free"
PRIORITY_NONE = ""
PRIORITY_CLASSES = (PRIORITY_PROD, PRIORITY_MID, PRIORITY_BATCH, PRIORITY_FREE)

# the inclusive spec.priority band of each class
PRIORITY_RANGES: Mapping[str, tuple[int, int]] = {
    PRIORITY_PROD: (9000, 9999),
    PRIORITY_MID: (7000, 7999),
    PRIORITY_BATCH: (5000, 5999),
    PRIORITY_FREE: (3000, 3999),
}


def priority_class(pod: Mapping[str, Any]) -> str:
    """GetPodPriorityClassRaw: a present `koordinator.sh/priority-class` label decides alone (an unknown value is
    "none", with no fallback to `spec.priority`); otherwise the class whose band holds `spec.priority`."""
    labels = pod_labels(pod)
    if LABEL_POD_PRIORITY_CLASS in labels:
        value = labels[LABEL_POD_PRIORITY_CLASS]
        return value if isinstance(value, str) and value in PRIORITY_CLASSES else PRIORITY_NONE
    spec = pod.get("spec") if isinstance(pod, dict) else None
    priority = spec.get("priority") if isinstance(spec, dict) else None
    if isinstance(priority, bool) or not isinstance(priority, int):
        return PRIORITY_NONE
    return priority_class_by_value(priority)


def priority_class_by_value(priority: int) -> str:
    """The class whose band holds this `spec.priority` value, else "none"."""
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
