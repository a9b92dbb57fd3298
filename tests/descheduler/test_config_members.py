"""Nested objects of the descheduler's args: absent is the default, present is read strictly and every refusal
names the whole field path (common.member, shared by the args decoders)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.descheduler.config.common import ConfigError
from scheduler.descheduler.config.defaultevictor_args import decode_defaultevictor_args
from scheduler.descheduler.config.lownodeload_args import decode_lownodeload_args
from scheduler.descheduler.config.migration_args import decode_migration_args


def test_pods_with_pvc_protected_storage_classes_read() -> None:
    args = decode_defaultevictor_args({"podProtections": {"extraEnabled": ["PodsWithPVC"], "config": {
        "PodsWithPVC": {"protectedStorageClasses": [{"name": "fast"}, {"name": "slow"}]}}}}, "a")
    assert args.protected_storage_classes == ["fast", "slow"]
    assert decode_defaultevictor_args({"podProtections": {"config": {}}}, "a").protected_storage_classes == []


def test_migration_nested_objects_read() -> None:
    args = decode_migration_args({"defaultDeleteOptions": {"gracePeriodSeconds": 5},
                                  "arbitrationArgs": {"enabled": False, "interval": "2s"}}, "a")
    assert args.default_delete_options == {"gracePeriodSeconds": 5}
    assert (args.arbitration.enabled, args.arbitration.interval) == (False, 2.0)
    assert decode_migration_args({}, "a").default_delete_options is None


@pytest.mark.parametrize(("decode", "raw", "path"), [
    (decode_defaultevictor_args, {"podProtections": {"bogus": 1}}, "a.podProtections.bogus"),
    (decode_defaultevictor_args, {"podProtections": {"config": {"Other": {}}}}, "a.podProtections.config.Other"),
    (decode_defaultevictor_args, {"podProtections": {"config": {"PodsWithPVC": {"classes": []}}}},
     "a.podProtections.config.PodsWithPVC.classes"),
    (decode_defaultevictor_args, {"podProtections": {"config": {"PodsWithPVC": []}}},
     "a.podProtections.config.PodsWithPVC"),
    (decode_defaultevictor_args, {"priorityThreshold": {"valu": 1}}, "a.priorityThreshold.valu"),
    (decode_migration_args, {"defaultDeleteOptions": {"grace": 1}}, "a.defaultDeleteOptions.grace"),
    (decode_migration_args, {"arbitrationArgs": {"enable": True}}, "a.arbitrationArgs.enable"),
    (decode_migration_args, {"arbitrationArgs": "on"}, "a.arbitrationArgs"),
    (decode_migration_args, {"namespaces": {"includes": []}}, "a.namespaces.includes"),
    (decode_lownodeload_args, {"highThresholds": {"cpu": "high"}}, "a.highThresholds.cpu"),
    (decode_lownodeload_args, {"resourceWeights": {"cpu": "x"}}, "a.resourceWeights.cpu"),
])
def test_refusal_names_the_path(decode: Any, raw: dict[str, Any], path: str) -> None:
    with pytest.raises(ConfigError) as e:
        decode(raw, "a")
    assert str(e.value).startswith(f"{path}:") and "\n" not in str(e.value)


@pytest.mark.parametrize(("thresholds", "path", "message"), [
    ({"highThresholds": {"cpu": -1}}, "highThresholds[cpu]", "percentage must be greater than or equal to 0"),
    ({"highThresholds": {"cpu": 50}, "lowThresholds": {"cpu": 60}}, "lowThresholds[cpu]",
     "low percentage must be less than or equal to highThresholds"),
    ({"highThresholds": {"cpu": 50}, "prodHighThresholds": {"cpu": 60}}, "ProdHighThresholds[cpu]",
     "node percentage must be greater than or equal to prodHighThresholds"),
    ({"prodHighThresholds": {"cpu": 50}, "prodLowThresholds": {"cpu": -1}}, "ProdLowThresholds[cpu]",
     "percentage must be greater than or equal to 0"),
    ({"prodHighThresholds": {"cpu": 50}, "prodLowThresholds": {"cpu": 60}}, "ProdLowThresholds[cpu]",
     "low percentage must be less than or equal to prodHighThresholds"),
])
def test_pool_threshold_refusals_name_the_threshold(thresholds: dict[str, Any], path: str, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        decode_lownodeload_args({"nodePools": [{"name": "p", **thresholds}]}, "a")
    assert str(e.value).startswith(f"a.nodePools[1].{path}: Invalid value:")
    assert str(e.value).endswith(message)
