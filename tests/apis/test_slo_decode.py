"""The NodeSLO decoder (apis.slo.decode): defaults, the upstream merge over them, validation, and agreement with the
published CRD schema."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apis.slo.config import DEFAULT_SPEC, spec_from_merged
from apis.slo.decode import decode_nodeslo, merge_nodeslo_spec, nodeslo_config, validate_nodeslo
from apis.slo.defaults import default_nodeslo_spec
from apis.slo.types import (
    CgroupPath,
    CPUBurstConfig,
    HostApplication,
    IOCfg,
    NodeSLOSpec,
    ResctrlQOS,
    ResourceThresholdStrategy,
)

from conftest import crd_schema

CRD_FILE = "slo.koordinator.sh_nodeslos.yaml"
Validate = Callable[[str, dict[str, Any]], None]

NONE_CPU = {"groupIdentity": 0, "schedIdle": 0, "coreExpeller": False}
NONE_RESCTRL = {"catRangeStartPercent": 0, "catRangeEndPercent": 100, "mbaPercent": 100}
NONE_MEMORY = {"minLimitPercent": 0, "lowLimitPercent": 0, "throttlingPercent": 0, "wmarkRatio": 0,
               "wmarkScalePermill": 50, "wmarkMinAdj": 0, "priorityEnable": 0, "priority": 0, "oomKillGroup": 0}
NONE_NETWORK = {"ingressRequest": 0, "ingressLimit": 0, "egressRequest": 0, "egressLimit": 0}


def memory(ratio: int, permill: int, min_adj: int) -> dict[str, int]:
    return {**NONE_MEMORY, "wmarkRatio": ratio, "wmarkScalePermill": permill, "wmarkMinAdj": min_adj}


def nodeslo(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "metadata": {"name": "node-1"},
            "spec": spec}


def none_class() -> dict[str, Any]:
    """sloconfig.NoneResourceQOS for a pod class: every block disabled with its "None" values."""
    return {
        "cpuQOS": {"enable": False, **NONE_CPU},
        "memoryQOS": {"enable": False, **NONE_MEMORY},
        "blkioQOS": {"enable": False},
        "resctrlQOS": {"enable": False, **NONE_RESCTRL},
        "networkQOS": {"enable": False, **NONE_NETWORK},
    }


# ---- defaults (pkg/util/sloconfig/nodeslo_config.go) --------------------------------------------------------


def test_default_spec_values() -> None:
    spec = default_nodeslo_spec()
    assert spec["resourceUsedThresholdWithBE"] == {
        "enable": False, "cpuSuppressThresholdPercent": 65, "cpuSuppressPolicy": "cpuset",
        "memoryEvictThresholdPercent": 70, "cpuEvictPolicy": "evictByRealLimit",
    }
    assert spec["cpuBurstStrategy"] == {
        "policy": "none", "cpuBurstPercent": 1000, "cfsQuotaBurstPercent": 300, "cfsQuotaBurstPeriodSeconds": -1,
        "sharePoolThresholdPercent": 50,
    }
    assert spec["systemStrategy"] == {"minFreeKbytesFactor": 100, "watermarkScaleFactor": 150,
                                      "memcgReapBackGround": 0, "totalNetworkBandwidth": "0"}
    assert spec["extensions"] == {}
    assert "hostApplications" not in spec


@pytest.mark.parametrize(("class_key", "cpu", "resctrl", "mem"), [
    ("lsrClass", {"groupIdentity": 2, "schedIdle": 0, "coreExpeller": True}, (0, 100, 100), memory(95, 20, -25)),
    ("lsClass", {"groupIdentity": 2, "schedIdle": 0, "coreExpeller": True}, (0, 100, 100), memory(95, 20, -25)),
    ("beClass", {"groupIdentity": -1, "schedIdle": 0, "coreExpeller": False}, (0, 30, 100), memory(95, 20, 50)),
    ("systemClass", {"groupIdentity": 0, "schedIdle": 0, "coreExpeller": False}, (0, 100, 100), memory(0, 50, 0)),
])
def test_default_class_qos(class_key: str, cpu: dict[str, Any], resctrl: tuple[int, int, int],
                           mem: dict[str, int]) -> None:
    qos = default_nodeslo_spec()["resourceQOSStrategy"][class_key]
    assert qos == {
        "cpuQOS": {"enable": False, **cpu},
        "memoryQOS": {"enable": False, **mem},
        "blkioQOS": {"enable": False},
        "resctrlQOS": {"enable": False, "catRangeStartPercent": resctrl[0], "catRangeEndPercent": resctrl[1],
                       "mbaPercent": resctrl[2]},
        "networkQOS": {"enable": False, **NONE_NETWORK},
    }


def test_default_policies_and_cgroup_root() -> None:
    strategy = default_nodeslo_spec()["resourceQOSStrategy"]
    assert strategy["policies"] == {"cpuPolicy": "groupIdentity", "netQOSPolicy": "tc"}
    assert strategy["cgroupRoot"] == {"blkioQOS": {"enable": False}}


def test_default_spec_is_a_fresh_copy() -> None:
    spec = default_nodeslo_spec()
    spec["resourceQOSStrategy"]["beClass"]["cpuQOS"]["groupIdentity"] = 99
    spec["extensions"]["x"] = 1
    again = default_nodeslo_spec()
    assert again["resourceQOSStrategy"]["beClass"]["cpuQOS"]["groupIdentity"] == -1
    assert again["extensions"] == {}


# ---- merge (pkg/koordlet/statesinformer/impl/states_nodeslo.go and its tests) ---------------------------------


def expected_merged_default() -> dict[str, Any]:
    """Defaults after the merge: LSR/LS/BE blocks are all disabled, so they carry the None values."""
    spec = default_nodeslo_spec()
    strategy = spec["resourceQOSStrategy"]
    for key in ("lsrClass", "lsClass", "beClass"):
        strategy[key] = none_class()
    return spec


@pytest.mark.parametrize("received", [None, {}, {"resourceQOSStrategy": None}, "garbage", []])
def test_merge_of_nothing_is_the_defaults_with_none_values(received: Any) -> None:
    assert merge_nodeslo_spec(received) == expected_merged_default()


def test_merge_keeps_system_class_defaults_even_when_disabled() -> None:
    merged = merge_nodeslo_spec({})
    system = merged["resourceQOSStrategy"]["systemClass"]
    assert system == default_nodeslo_spec()["resourceQOSStrategy"]["systemClass"]
    merged = merge_nodeslo_spec({"resourceQOSStrategy": {"systemClass": {"cpuQOS": {"groupIdentity": 1}}}})
    assert merged["resourceQOSStrategy"]["systemClass"]["cpuQOS"] == {
        "enable": False, "groupIdentity": 1, "schedIdle": 0, "coreExpeller": False}


@pytest.mark.parametrize(("received", "expected"), [
    # Test_mergeSLOSpecResourceUsedThresholdWithBE "partially use new, merging with the default"
    ({"enable": True, "cpuSuppressThresholdPercent": 80},
     {"enable": True, "cpuSuppressThresholdPercent": 80, "memoryEvictThresholdPercent": 70,
      "cpuSuppressPolicy": "cpuset", "cpuEvictPolicy": "evictByRealLimit"}),
    # "totally use new 1"
    ({"enable": True, "cpuSuppressThresholdPercent": 80, "memoryEvictThresholdPercent": 75},
     {"enable": True, "cpuSuppressThresholdPercent": 80, "memoryEvictThresholdPercent": 75,
      "cpuSuppressPolicy": "cpuset", "cpuEvictPolicy": "evictByRealLimit"}),
    # "new overwrite a nil"
    (None, {"enable": False, "cpuSuppressThresholdPercent": 65, "memoryEvictThresholdPercent": 70,
            "cpuSuppressPolicy": "cpuset", "cpuEvictPolicy": "evictByRealLimit"}),
    # omitempty: an empty non-pointer string and nulls leave the defaults alone
    ({"cpuSuppressPolicy": "", "cpuEvictPolicy": "evictByAllocatable", "memoryEvictThresholdPercent": None},
     {"enable": False, "cpuSuppressThresholdPercent": 65, "memoryEvictThresholdPercent": 70,
      "cpuSuppressPolicy": "cpuset", "cpuEvictPolicy": "evictByAllocatable"}),
])
def test_merge_threshold_strategy(received: Any, expected: dict[str, Any]) -> None:
    assert merge_nodeslo_spec({"resourceUsedThresholdWithBE": received})["resourceUsedThresholdWithBE"] == expected


def test_merge_enabled_memory_qos_overlays_field_by_field() -> None:
    # Test_mergeSLOSpecResourceQOSStrategy "partially use new, merging with the default"
    merged = merge_nodeslo_spec({"resourceQOSStrategy": {"beClass": {"memoryQOS": {"enable": True,
                                                                                   "wmarkRatio": 90}}}})
    expected = expected_merged_default()
    expected["resourceQOSStrategy"]["beClass"]["memoryQOS"] = {"enable": True, **memory(90, 20, 50)}
    assert merged == expected


def test_merge_update_node_slo_spec_upstream_case() -> None:
    # Test_updateNodeSLOSpec
    merged = merge_nodeslo_spec({
        "resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 80},
        "resourceQOSStrategy": {"beClass": {"resctrlQOS": {"enable": True, "catRangeStartPercent": 0,
                                                           "catRangeEndPercent": 20}}},
    })
    expected = expected_merged_default()
    expected["resourceUsedThresholdWithBE"].update(enable=True, cpuSuppressThresholdPercent=80)
    expected["resourceQOSStrategy"]["beClass"]["resctrlQOS"] = {
        "enable": True, "catRangeStartPercent": 0, "catRangeEndPercent": 20, "mbaPercent": 100}
    assert merged == expected


def test_merge_create_node_slo_upstream_case() -> None:
    # Test_createNodeSLO: a full default spec with the threshold and the BE class replaced
    received = default_nodeslo_spec()
    received["resourceUsedThresholdWithBE"] = {"enable": True, "cpuSuppressThresholdPercent": 80}
    received["resourceQOSStrategy"]["beClass"] = {
        "resctrlQOS": {"enable": True, "catRangeStartPercent": 0, "catRangeEndPercent": 20}}
    merged = merge_nodeslo_spec(received)
    assert merged["resourceUsedThresholdWithBE"] == {
        "enable": True, "cpuSuppressThresholdPercent": 80, "cpuSuppressPolicy": "cpuset",
        "memoryEvictThresholdPercent": 70, "cpuEvictPolicy": "evictByRealLimit"}
    strategy = merged["resourceQOSStrategy"]
    assert strategy["lsrClass"] == none_class()
    assert strategy["lsClass"] == none_class()
    be = none_class()
    be["resctrlQOS"] = {"enable": True, "catRangeStartPercent": 0, "catRangeEndPercent": 20, "mbaPercent": 100}
    assert strategy["beClass"] == be


def test_disabled_block_is_replaced_wholesale_by_none_values() -> None:
    merged = merge_nodeslo_spec({"resourceQOSStrategy": {"lsClass": {
        "memoryQOS": {"enable": False, "wmarkRatio": 80, "pageCacheEnable": True, "pageCacheLimitPercent": 60},
        "cpuQOS": {"enable": False, "groupIdentity": 1},
        "resctrlQOS": {"enable": False, "mbaPercent": 10},
    }}})
    ls = merged["resourceQOSStrategy"]["lsClass"]
    assert ls["memoryQOS"] == {"enable": False, **NONE_MEMORY}
    assert ls["cpuQOS"] == {"enable": False, **NONE_CPU}
    assert ls["resctrlQOS"] == {"enable": False, **NONE_RESCTRL}


def test_enabled_block_keeps_received_and_defaults() -> None:
    merged = merge_nodeslo_spec({"resourceQOSStrategy": {"lsrClass": {
        "cpuQOS": {"enable": True},
        "memoryQOS": {"enable": True, "pageCacheEnable": True, "pageCacheLimitPercent": 60},
    }}})
    lsr = merged["resourceQOSStrategy"]["lsrClass"]
    assert lsr["cpuQOS"] == {"enable": True, "groupIdentity": 2, "schedIdle": 0, "coreExpeller": True}
    assert lsr["memoryQOS"] == {"enable": True, **memory(95, 20, -25), "pageCacheEnable": True,
                                "pageCacheLimitPercent": 60}
    assert lsr["resctrlQOS"] == {"enable": False, **NONE_RESCTRL}


def test_merge_cpu_burst_and_system_strategy() -> None:
    merged = merge_nodeslo_spec({
        "cpuBurstStrategy": {"policy": "auto", "cpuBurstPercent": 500},
        "systemStrategy": {"minFreeKbytesFactor": 100, "totalNetworkBandwidth": "1000M",
                           "schedFeatures": {"ID_ABSOLUTE_EXPEL": True}},
    })
    assert merged["cpuBurstStrategy"] == {"policy": "auto", "cpuBurstPercent": 500, "cfsQuotaBurstPercent": 300,
                                          "cfsQuotaBurstPeriodSeconds": -1, "sharePoolThresholdPercent": 50}
    assert merged["systemStrategy"] == {"minFreeKbytesFactor": 100, "watermarkScaleFactor": 150,
                                        "memcgReapBackGround": 0, "totalNetworkBandwidth": "1G",
                                        "schedFeatures": {"ID_ABSOLUTE_EXPEL": True}}


def test_merge_go_json_overlay_details() -> None:
    merged = merge_nodeslo_spec({
        "cpuBurstStrategy": {"policy": ""},  # omitempty string: default stays
        "systemStrategy": {"schedFeatures": {}},  # omitempty map: not set
        "resourceQOSStrategy": {
            "policies": {"cpuPolicy": "coreSched"},
            "cgroupRoot": {"cpuQOS": {}, "blkioQOS": {"blocks": [
                {"name": "/dev/sda", "type": "device", "ioCfg": {"readIOPS": 100}, "unknown": 1}]}},
            "beClass": {"blkioQOS": {"blocks": []}, "networkQOS": {"enable": True, "ingressLimit": "50M"}},
            "madeUp": {"x": 1},
        },
        "unknownTopLevel": True,
    })
    assert merged["cpuBurstStrategy"]["policy"] == "none"
    assert "schedFeatures" not in merged["systemStrategy"]
    strategy = merged["resourceQOSStrategy"]
    assert strategy["policies"] == {"cpuPolicy": "coreSched", "netQOSPolicy": "tc"}
    assert strategy["cgroupRoot"] == {  # a received empty object is allocated; lists replace; unknown dropped
        "cpuQOS": {},
        "blkioQOS": {"enable": False, "blocks": [{"name": "/dev/sda", "type": "device", "ioCfg": {"readIOPS": 100}}]},
    }
    assert strategy["beClass"]["blkioQOS"] == {"enable": False}
    assert strategy["beClass"]["networkQOS"] == {"enable": True, **NONE_NETWORK, "ingressLimit": "50M"}
    assert "madeUp" not in strategy
    assert "unknownTopLevel" not in merged


def test_merge_ignores_wrongly_typed_fields() -> None:
    merged = merge_nodeslo_spec({
        "resourceUsedThresholdWithBE": {"cpuSuppressThresholdPercent": "80", "enable": "yes"},
        "cpuBurstStrategy": {"cpuBurstPercent": 1.5, "sharePoolThresholdPercent": True},
        "systemStrategy": {"totalNetworkBandwidth": "lots"},
        "resourceQOSStrategy": {"beClass": "x", "lsClass": {"cpuQOS": []}},
        "hostApplications": "x",
    })
    assert merged == expected_merged_default()


def test_merge_extensions() -> None:
    received = {"extensions": {"containerCgroupOverrides": {"items": [{"name": "a"}]}}}
    assert merge_nodeslo_spec(received)["extensions"] == received["extensions"]
    assert merge_nodeslo_spec({"extensions": "x"})["extensions"] == {}
    assert merge_nodeslo_spec({})["extensions"] == {}


def test_merge_takes_host_applications_from_received() -> None:
    apps = [{"name": "nginx", "priority": "koord-prod", "qos": "LS",
             "cgroupPath": {"base": "CgroupRoot", "parentDir": "host-latency-sensitive/", "relativePath": "nginx/"},
             "strategy": {}, "unknown": "dropped"}]
    merged = merge_nodeslo_spec({"hostApplications": apps})
    expected = copy.deepcopy(apps)
    del expected[0]["unknown"]
    assert merged["hostApplications"] == expected
    assert "hostApplications" not in merge_nodeslo_spec({"hostApplications": []})


def test_merge_does_not_alias_or_mutate_received() -> None:
    received = {"resourceQOSStrategy": {"lsClass": {"cpuQOS": {"enable": False, "groupIdentity": 1}}},
                "extensions": {"k": {"v": [1]}}, "hostApplications": [{"name": "a"}]}
    before = copy.deepcopy(received)
    merged = merge_nodeslo_spec(received)
    assert received == before
    merged["extensions"]["k"]["v"].append(2)
    merged["hostApplications"][0]["name"] = "b"
    assert received == before


# ---- the typed spec (apis/slo) ----------------------------------------------------------------------------------


def test_the_typed_defaults_are_the_merged_defaults() -> None:
    """A spec built from dataclass defaults is what merging nothing over upstream's defaults gives."""
    assert nodeslo_config(None) == NodeSLOSpec()


def test_typed_spec_holds_the_received_values() -> None:
    spec = nodeslo_config({
        "resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressMinPercent": 20,
                                        "cpuEvictBESatisfactionLowerPercent": 40},
        "resourceQOSStrategy": {"policies": {"cpuPolicy": "coreSched"},
                                "beClass": {"resctrlQOS": {"enable": True, "catRangeEndPercent": 50},
                                            "memoryQOS": {"enable": True, "wmarkRatio": 90}},
                                "cgroupRoot": {"blkioQOS": {"enable": True, "blocks": [
                                    {"name": "vg0", "type": "volumegroup", "ioCfg": {"ioWeightPercent": 60}}]}}},
        "cpuBurstStrategy": {"policy": "auto", "sharePoolThresholdPercent": 40},
        "systemStrategy": {"totalNetworkBandwidth": "1000M", "schedFeatures": {"B": True, "A": False}},
        "hostApplications": [{"name": "nginx", "qos": "LS", "cgroupPath": {"base": "CgroupRoot"}}],
    })
    threshold = spec.resource_used_threshold_with_be
    assert (threshold.enable, threshold.cpu_suppress_threshold_percent, threshold.cpu_suppress_min_percent) == (
        True, 65, 20)
    assert threshold.cpu_evict_be_satisfaction_lower_percent == 40
    assert threshold.cpu_evict_be_satisfaction_upper_percent is None
    strategy = spec.resource_qos_strategy
    assert strategy.policies.cpu_policy == "coreSched"
    assert strategy.be_class.resctrl_qos == ResctrlQOS(True, 0, 50, 100)
    assert strategy.ls_class.resctrl_qos == ResctrlQOS(False, 0, 100, 100)  # disabled: the None values
    assert strategy.be_class.memory_qos.knobs()["wmarkRatio"] == 90
    assert strategy.for_class("LSE") is strategy.lsr_class and strategy.for_class("NONE") is None
    [block] = strategy.cgroup_root.blkio_qos.blocks
    assert (block.name, block.type, block.io_cfg) == ("vg0", "volumegroup", IOCfg((("ioWeightPercent", 60),)))
    assert spec.cpu_burst_strategy.config == CPUBurstConfig("auto", 1000, 300, -1)
    assert spec.cpu_burst_strategy.share_pool_threshold_percent == 40
    assert spec.system_strategy.total_network_bandwidth == "1G"
    assert spec.system_strategy.sched_features == (("A", False), ("B", True))
    assert spec.host_applications == (HostApplication("nginx", qos="LS", cgroup_path=CgroupPath("CgroupRoot")),)


def test_memory_qos_auto_takes_the_unmerged_defaults() -> None:
    """`policy: auto` reads a class's default knobs before the merge turns a disabled block into "None" values."""
    assert DEFAULT_SPEC.resource_qos_strategy.ls_class.memory_qos.knobs() == memory(95, 20, -25)
    assert nodeslo_config(None).resource_qos_strategy.ls_class.memory_qos.knobs() == NONE_MEMORY


def test_decode_refuses_what_validation_refuses() -> None:
    bad = nodeslo({"resourceUsedThresholdWithBE": {"cpuSuppressThresholdPercent": 170}})
    decoded = decode_nodeslo(bad)
    assert decoded.spec is None and list(decoded.problems) == validate_nodeslo(bad) != []
    good = nodeslo({"cpuBurstStrategy": {"policy": "auto"}})
    assert decode_nodeslo(good).spec == nodeslo_config(good["spec"])
    assert decode_nodeslo([]).spec is None


def test_spec_from_a_wrongly_typed_object_reads_as_defaults() -> None:
    """The typed form is total: a field of the wrong type (only an unmerged spec has one) is the default."""
    assert spec_from_merged({"resourceQOSStrategy": "x", "cpuBurstStrategy": {"policy": 3},
                             "hostApplications": [1, {"name": 2}]}) == NodeSLOSpec(
        resource_used_threshold_with_be=ResourceThresholdStrategy(memory_evict_threshold_percent=None),
        host_applications=(HostApplication(),))


# ---- validation against the CRD schema -------------------------------------------------------------------------

MERGE_EXAMPLES: list[dict[str, Any]] = [
    {},
    default_nodeslo_spec(),
    {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 80,
                                     "cpuEvictPolicy": "evictByAllocatable",
                                     "allocatableEvictPriorityThreshold": 5999}},
    {"resourceQOSStrategy": {"beClass": {"memoryQOS": {"enable": True, "wmarkRatio": 90},
                                         "cpuQOS": {"enable": True, "groupIdentity": -1},
                                         "networkQOS": {"enable": True, "ingressLimit": "100M"}},
                             "cgroupRoot": {"blkioQOS": {"enable": True, "blocks": [
                                 {"name": "vg0", "type": "volumegroup", "ioCfg": {"ioWeightPercent": 60}}]}}}},
    {"cpuBurstStrategy": {"policy": "auto"}, "systemStrategy": {"totalNetworkBandwidth": 10000,
                                                                "schedFeatures": {"A": False}}},
    {"extensions": {"Object": {"anything": {"goes": [1, "x"]}}},
     "hostApplications": [{"name": "n", "qos": "LS", "cgroupPath": {"base": "KubepodsBesteffort"}}]},
]


def test_default_spec_validates_against_crd(validate_crd: Validate) -> None:
    validate_crd(CRD_FILE, nodeslo(default_nodeslo_spec()))
    assert validate_nodeslo(nodeslo(default_nodeslo_spec())) == []


@pytest.mark.parametrize("received", MERGE_EXAMPLES)
def test_merged_examples_validate_against_crd(received: dict[str, Any], validate_crd: Validate) -> None:
    assert validate_nodeslo(nodeslo(received)) == []
    validate_crd(CRD_FILE, nodeslo(received))
    merged = merge_nodeslo_spec(received)
    validate_crd(CRD_FILE, nodeslo(merged))
    assert validate_nodeslo(nodeslo(merged)) == []
    assert json.loads(json.dumps(merged)) == merged  # plain JSON data


@pytest.mark.parametrize(("spec", "problem"), [
    ({"resourceQOSStrategy": {"beClass": {"cpuQOS": {"groupIdentity": 5}}}},
     "spec.resourceQOSStrategy.beClass.cpuQOS.groupIdentity: 5 is above maximum 2"),
    ({"resourceQOSStrategy": {"lsClass": {"memoryQOS": {"wmarkScalePermill": 0}}}},
     "spec.resourceQOSStrategy.lsClass.memoryQOS.wmarkScalePermill: 0 is below minimum 1"),
    ({"resourceQOSStrategy": {"lsrClass": {"resctrlQOS": {"mbaPercent": 101}}}},
     "spec.resourceQOSStrategy.lsrClass.resctrlQOS.mbaPercent: 101 is above maximum 100"),
    ({"resourceQOSStrategy": {"policies": {"cpuPolicy": "fastest"}}},
     "spec.resourceQOSStrategy.policies.cpuPolicy: 'fastest' is not one of 'groupIdentity', 'coreSched'"),
    ({"resourceUsedThresholdWithBE": {"enable": "true"}},
     "spec.resourceUsedThresholdWithBE.enable: expected boolean, got string 'true'"),
    ({"resourceUsedThresholdWithBE": {"cpuSuppressThresholdPercent": 65.0}},
     "spec.resourceUsedThresholdWithBE.cpuSuppressThresholdPercent: expected integer, got number 65.0"),
    ({"cpuBurstStrategy": {"cpuBurstPercent": 10001}},
     "spec.cpuBurstStrategy.cpuBurstPercent: 10001 is above maximum 10000"),
    ({"systemStrategy": {"totalNetworkBandwidth": " 10G"}},
     "spec.systemStrategy.totalNetworkBandwidth: ' 10G' is not a quantity (surrounding whitespace)"),
    ({"systemStrategy": {"schedFeatures": {"A": "on"}}},
     "spec.systemStrategy.schedFeatures: values must be booleans (not for A)"),
    ({"hostApplications": [{"name": "x", "cgroupPath": {"base": "Root"}}]},
     "spec.hostApplications[0].cgroupPath.base: 'Root' is not one of 'CgroupRoot', 'Kubepods', "
     "'KubepodsBurstable', 'KubepodsBesteffort'"),
    ({"hostApplications": {"name": "x"}}, "spec.hostApplications: expected array, got object"),
    ({"resourceQOSStrategy": {"beClass": {"blkioQOS": {"blocks": [{"ioCfg": {"ioWeightPercent": 0}}]}}}},
     "spec.resourceQOSStrategy.beClass.blkioQOS.blocks[0].ioCfg.ioWeightPercent: 0 is below minimum 1"),
    ({"extensions": ["x"]}, "spec.extensions: expected object, got array"),
])
def test_validation_problems(spec: dict[str, Any], problem: str) -> None:
    assert validate_nodeslo(nodeslo(spec)) == [problem]


def test_validation_reports_every_problem_and_checks_the_envelope() -> None:
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": "x",
           "spec": {"cpuBurstStrategy": {"policy": "sometimes", "cfsQuotaBurstPercent": 50}}}
    assert validate_nodeslo(obj) == [
        "apiVersion: 'v1' is not one of 'slo.koordinator.sh/v1alpha1'",
        "kind: 'Pod' is not one of 'NodeSLO'",
        "metadata: expected object, got string 'x'",
        "spec.cpuBurstStrategy.policy: 'sometimes' is not one of 'none', 'cpuBurstOnly', 'cfsQuotaBurstOnly', 'auto'",
        "spec.cpuBurstStrategy.cfsQuotaBurstPercent: 50 is below minimum 100",
    ]


def test_validation_ignores_unknown_fields_and_nulls() -> None:
    assert validate_nodeslo(nodeslo({"newUpstreamField": {"x": 1}, "cpuBurstStrategy": None,
                                     "resourceQOSStrategy": {"lsClass": {"cpuQOS": {"groupIdentity": None}}}})) == []


@pytest.mark.parametrize("obj", [
    None, [], "NodeSLO", 3, {"spec": []}, {"spec": {"resourceQOSStrategy": "x"}},
    {"spec": {"resourceQOSStrategy": {"lsClass": {"cpuQOS": {"groupIdentity": [1]}}}}},
    {"spec": {"hostApplications": [None, 1, {"cgroupPath": []}]}},
    {"spec": {"systemStrategy": {"totalNetworkBandwidth": True}}},
    {"spec": {"systemStrategy": {"schedFeatures": [True]}}},
    {"spec": {"cpuBurstStrategy": {"cpuBurstPercent": 2**70}}},
])
def test_malformed_objects_produce_problems_not_exceptions(obj: Any) -> None:
    problems = validate_nodeslo(obj)
    assert problems
    assert all(isinstance(p, str) for p in problems)
    spec = obj.get("spec") if isinstance(obj, dict) else obj
    merge_nodeslo_spec(spec)  # never raises either


# ---- the hand-written validator is never laxer than the CRD --------------------------------------------------

_WRONG_TYPE: dict[str, Any] = {"integer": "1", "boolean": "true", "string": 1, "object": [], "array": {}}


def _crd_leaves(schema: dict[str, Any], path: tuple[str | int, ...] = ()) -> Iterator[
        tuple[tuple[str | int, ...], dict[str, Any]]]:
    """Every field of the CRD schema (objects too), with its path; arrays are entered at index 0."""
    yield path, schema
    for key, sub in (schema.get("properties") or {}).items():
        yield from _crd_leaves(sub, (*path, key))
    if "items" in schema:
        yield from _crd_leaves(schema["items"], (*path, 0))


def _nest(path: tuple[str | int, ...], value: Any) -> Any:
    for step in reversed(path):
        value = [value] if isinstance(step, int) else {step: value}
    return value


def _dotted(path: tuple[str | int, ...]) -> str:
    return "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step in path).lstrip(".")


def _crd_violations() -> list[tuple[str, Any]]:
    """(path, NodeSLO) pairs, each breaking exactly one CRD rule: a bound or a JSON type."""
    spec_schema = crd_schema(CRD_FILE)["properties"]["spec"]
    cases: list[tuple[str, Any]] = []
    for path, schema in _crd_leaves(spec_schema, ("spec",)):
        if len(path) == 1:
            continue
        bad_values = []
        if "minimum" in schema:
            bad_values.append(schema["minimum"] - 1)
        if "maximum" in schema:
            bad_values.append(schema["maximum"] + 1)
        if schema.get("x-kubernetes-int-or-string"):
            bad_values.append(True)
        elif schema.get("type") in _WRONG_TYPE:
            bad_values.append(_WRONG_TYPE[schema["type"]])
        if "pattern" in schema:
            bad_values.append("1 G")
        cases += [(_dotted(path), {**nodeslo({}), **_nest(path, bad)}) for bad in bad_values]
    return cases


@cache
def _crd_validator() -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(crd_schema(CRD_FILE))


def test_every_crd_rule_is_enforced() -> None:
    cases = _crd_violations()
    assert len(cases) > 300  # the whole schema was walked
    for path, obj in cases:
        assert not _crd_validator().is_valid(obj), path  # the case really breaks the CRD
        problems = validate_nodeslo(obj)
        assert problems and problems[0].startswith(f"{path}:"), (path, problems)
        merge_nodeslo_spec(obj["spec"])  # and merging it does not raise


_WRONG = st.one_of(st.booleans(), st.floats(allow_nan=False), st.text(max_size=3), st.lists(st.integers(), max_size=1))
_STRINGS = st.sampled_from(["", "none", "auto", "cpuset", "groupIdentity", "tc", "LS", "koord-prod", "CgroupRoot",
                            "device", "x", "100M", "1Gi", "abc", " 1", "1e1.5"])


def _sometimes_wrong(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.integers(0, 40).flatmap(lambda roll: _WRONG if roll == 0 else good)


def _from_crd(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """JSON values shaped like `schema`: mostly well typed, some out of bounds, rarely of the wrong type."""
    good: st.SearchStrategy[Any]
    if schema.get("x-kubernetes-int-or-string"):
        good = st.one_of(st.integers(-5, 200), _STRINGS)
    elif schema.get("type") == "integer":
        low, high = schema.get("minimum", -10), schema.get("maximum", 20000)
        good = st.integers(low - 1, high + 1)
    elif schema.get("type") == "boolean":
        good = st.booleans()
    elif schema.get("type") == "string":
        good = _STRINGS
    elif schema.get("type") == "array":
        good = st.lists(_from_crd(schema["items"]), max_size=2)
    elif isinstance(schema.get("additionalProperties"), dict):
        good = st.dictionaries(st.text(max_size=3), _from_crd(schema["additionalProperties"]), max_size=2)
    elif schema.get("properties"):
        good = st.fixed_dictionaries({}, optional={k: _from_crd(v) for k, v in schema["properties"].items()})
    else:
        good = st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)
    return _sometimes_wrong(good)


@cache
def _spec_strategy() -> st.SearchStrategy[Any]:
    return _from_crd(crd_schema(CRD_FILE)["properties"]["spec"])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_random_nodeslos_validator_and_merge_agree_with_crd(data: st.DataObject) -> None:
    obj = nodeslo(data.draw(_spec_strategy()))
    problems = validate_nodeslo(obj)
    if not _crd_validator().is_valid(obj):
        assert problems, "the CRD rejects this NodeSLO but validate_nodeslo found nothing"
    merged = merge_nodeslo_spec(obj["spec"])
    if not problems:
        assert _crd_validator().is_valid(nodeslo(merged)), "a valid NodeSLO merged into an invalid spec"
