"""apis.extension.qos and priority: the pod labels' decoders and the priority bands."""

from __future__ import annotations

from typing import Any

import pytest

from apis.core.qos import K8S_BEST_EFFORT, K8S_BURSTABLE, K8S_GUARANTEED
from apis.extension.priority import (
    PRIORITY_BATCH,
    PRIORITY_CLASSES,
    PRIORITY_FREE,
    PRIORITY_MID,
    PRIORITY_NONE,
    PRIORITY_PROD,
    PRIORITY_RANGES,
    priority_class,
    priority_class_by_value,
    priority_class_for_qos,
)
from apis.extension.qos import QOS_BE, QOS_LS, QOS_LSR, QOS_NONE, QOS_SYSTEM, koord_qos_class, koord_qos_for_k8s_qos


def pod(labels: dict[str, Any] | None = None, priority: Any = None) -> dict[str, Any]:
    return {"metadata": {"labels": labels or {}}, "spec": {} if priority is None else {"priority": priority}}


def test_qos_label_names_a_known_class_or_none() -> None:
    assert koord_qos_class(pod({"koordinator.sh/qosClass": "BE"})) == QOS_BE
    assert koord_qos_class(pod({"koordinator.sh/qosClass": "be"})) == QOS_NONE  # case matters
    assert koord_qos_class({"metadata": {"labels": ["BE"]}}) == QOS_NONE
    assert koord_qos_class({}) == QOS_NONE
    assert [koord_qos_for_k8s_qos(q) for q in (K8S_GUARANTEED, K8S_BURSTABLE, K8S_BEST_EFFORT, "x")] == [
        QOS_LSR, QOS_LS, QOS_BE, QOS_NONE]


@pytest.mark.parametrize("name", PRIORITY_CLASSES)
def test_each_band_holds_its_ends_and_not_beyond(name: str) -> None:
    low, high = PRIORITY_RANGES[name]
    assert priority_class_by_value(low) == priority_class_by_value(high) == name
    assert priority_class_by_value(low - 1) != name and priority_class_by_value(high + 1) != name


def test_the_label_decides_alone_else_spec_priority() -> None:
    assert priority_class(pod({"koordinator.sh/priority-class": "koord-mid"}, priority=9500)) == PRIORITY_MID
    assert priority_class(pod({"koordinator.sh/priority-class": "gold"}, priority=9500)) == PRIORITY_NONE
    assert priority_class(pod(priority=3500)) == PRIORITY_FREE
    assert priority_class(pod(priority=True)) == PRIORITY_NONE  # a JSON boolean is no priority
    assert priority_class(pod(priority=100)) == PRIORITY_NONE
    assert priority_class_for_qos(QOS_SYSTEM) == PRIORITY_PROD and priority_class_for_qos(QOS_BE) == PRIORITY_BATCH
