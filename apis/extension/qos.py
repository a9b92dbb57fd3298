"""Koordinator's QoS classes: the `koordinator.sh/qosClass` pod label, its decoder, the default from Kubernetes QoS."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from apis.core.qos import K8S_BEST_EFFORT, K8S_BURSTABLE, K8S_GUARANTEED, k8s_qos_class

# Upstream: apis/extension/qos.go, apis/extension/qos_utils.go.

LABEL_POD_QOS = "koordinator.sh/qosClass"

QOS_LSE = "LSE"
QOS_LSR = "LSR"
QOS_LS = "LS"
QOS_BE = "BE"
QOS_SYSTEM = "SYSTEM"
QOS_NONE = ""
KOORD_QOS_CLASSES = (QOS_LSE, QOS_LSR, QOS_LS, QOS_BE, QOS_SYSTEM)

_FOR_K8S_QOS = {K8S_GUARANTEED: QOS_LSR, K8S_BURSTABLE: QOS_LS, K8S_BEST_EFFORT: QOS_BE}


def koord_qos_class(pod: Mapping[str, Any]) -> str:
    """The `koordinator.sh/qosClass` label when it names a known class, else QoSNone ("") (GetPodQoSClassRaw)."""
    return koord_qos_class_of_labels(pod_labels(pod))


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
    return _FOR_K8S_QOS.get(k8s_qos, QOS_NONE)


def pod_labels(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """A raw pod's `metadata.labels`, {} where the pod has none or they are not an object."""
    meta = pod.get("metadata") if isinstance(pod, dict) else None
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return labels if isinstance(labels, dict) else {}
