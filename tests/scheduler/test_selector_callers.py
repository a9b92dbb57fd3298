"""The label selectors koord-sched matches with (colocation nodeConfigs, Reservation owners) follow
metav1.LabelSelectorAsSelector through apis/core/labelselector: a nil selector selects nothing, `{}` everything,
and a term whose selector does not convert is skipped as upstream skips it on the conversion error."""

from __future__ import annotations

import json
from typing import Any

from scheduler.noderesource.strategy import parse_config_map
from scheduler.reservation.matching import owner_of, selected_by_owner_selector
from scheduler.reservation.model import Reservation

NOT_IN_NOTHING = {"matchExpressions": [{"key": "pool", "operator": "NotIn", "values": []}]}


def colocation(node_configs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"data": {"colocation-config": json.dumps({"enable": True, "nodeConfigs": node_configs})}}


def node(**labels: str) -> dict[str, Any]:
    return {"metadata": {"name": "n", "labels": labels}}


def test_colocation_node_config_selectors() -> None:
    cfg = parse_config_map(colocation([
        {"name": "nil", "cpuReclaimThresholdPercent": 10},
        {"name": "broken", "nodeSelector": NOT_IN_NOTHING, "cpuReclaimThresholdPercent": 20},
        {"name": "gpu", "nodeSelector": {"matchLabels": {"pool": "gpu"}, "unknownField": 1},
         "cpuReclaimThresholdPercent": 30},
        {"name": "all", "nodeSelector": {}, "cpuReclaimThresholdPercent": 40}]))
    assert cfg.for_node(node(pool="gpu"))["cpuReclaimThresholdPercent"] == 30
    assert cfg.for_node(node(pool="cpu"))["cpuReclaimThresholdPercent"] == 40


def reservation(*owners: object) -> Reservation:
    return Reservation({"spec": {"owners": list(owners)}}, "r", "uid-r", "Available", "n")


def pod(**labels: str) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "default", "uid": "uid-p", "labels": labels}}


def test_reservation_owner_selectors() -> None:
    web = pod(app="web")
    assert owner_of(reservation({"labelSelector": {"matchLabels": {"app": "web"}}}), web)
    assert not owner_of(reservation({"labelSelector": {"matchLabels": {"app": "db"}}}), web)
    assert owner_of(reservation({"labelSelector": {}}), web)
    broken = reservation({"labelSelector": NOT_IN_NOTHING})
    assert not owner_of(broken, web) and not selected_by_owner_selector(broken, web)
    either = reservation({"labelSelector": NOT_IN_NOTHING}, {"labelSelector": {"matchExpressions": [
        {"key": "app", "operator": "In", "values": ["web", "api"]}]}})
    assert owner_of(either, web) and selected_by_owner_selector(either, web)
    by_object = reservation({"object": {"name": "p", "namespace": "default"}})
    assert owner_of(by_object, web) and not selected_by_owner_selector(by_object, web)
