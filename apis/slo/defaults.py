"""Upstream's NodeSLO defaults as JSON (pkg/util/sloconfig nodeslo_config.go): what a received spec merges over."""

from __future__ import annotations

import copy
from collections.abc import Mapping

JSONObject = dict[str, object]

# pkg/util/sloconfig/nodeslo_config.go: Default*QOS / None*QOS per QoS class.
_DEFAULT_CPU_QOS: Mapping[str, JSONObject] = {
    "LSR": {"groupIdentity": 2, "schedIdle": 0, "coreExpeller": True},
    "LS": {"groupIdentity": 2, "schedIdle": 0, "coreExpeller": True},
    "BE": {"groupIdentity": -1, "schedIdle": 0, "coreExpeller": False},
    "SYSTEM": {"groupIdentity": 0, "schedIdle": 0, "coreExpeller": False},
}
_DEFAULT_RESCTRL_QOS: Mapping[str, JSONObject] = {
    "LSR": {"catRangeStartPercent": 0, "catRangeEndPercent": 100, "mbaPercent": 100},
    "LS": {"catRangeStartPercent": 0, "catRangeEndPercent": 100, "mbaPercent": 100},
    "BE": {"catRangeStartPercent": 0, "catRangeEndPercent": 30, "mbaPercent": 100},
    "SYSTEM": {"catRangeStartPercent": 0, "catRangeEndPercent": 100, "mbaPercent": 100},
}


def _memory_qos(wmark_ratio: int, wmark_scale_permill: int, wmark_min_adj: int) -> JSONObject:
    return {
        "minLimitPercent": 0, "lowLimitPercent": 0, "throttlingPercent": 0,
        "wmarkRatio": wmark_ratio, "wmarkScalePermill": wmark_scale_permill, "wmarkMinAdj": wmark_min_adj,
        "priorityEnable": 0, "priority": 0, "oomKillGroup": 0,
    }


_DEFAULT_MEMORY_QOS: Mapping[str, JSONObject] = {
    "LSR": _memory_qos(95, 20, -25),
    "LS": _memory_qos(95, 20, -25),
    "BE": _memory_qos(95, 20, 50),
    "SYSTEM": _memory_qos(0, 50, 0),
}
NONE_CPU_QOS: Mapping[str, object] = {"groupIdentity": 0, "schedIdle": 0, "coreExpeller": False}
NONE_RESCTRL_QOS: Mapping[str, object] = {"catRangeStartPercent": 0, "catRangeEndPercent": 100, "mbaPercent": 100}
NONE_MEMORY_QOS: Mapping[str, object] = _memory_qos(0, 50, 0)
_NONE_NETWORK_QOS: Mapping[str, object] = {"ingressRequest": 0, "ingressLimit": 0, "egressRequest": 0,
                                           "egressLimit": 0}
_CLASS_KEYS = {"lsrClass": "LSR", "lsClass": "LS", "beClass": "BE", "systemClass": "SYSTEM"}


def default_nodeslo_spec() -> JSONObject:
    """DefaultNodeSLOSpecConfig as JSON: a fresh dict each call."""
    return {
        "resourceUsedThresholdWithBE": {
            "enable": False,
            "cpuSuppressThresholdPercent": 65,
            "cpuSuppressPolicy": "cpuset",
            "memoryEvictThresholdPercent": 70,
            "cpuEvictPolicy": "evictByRealLimit",
        },
        "resourceQOSStrategy": _default_resource_qos_strategy(),
        "cpuBurstStrategy": {
            "policy": "none",
            "cpuBurstPercent": 1000,
            "cfsQuotaBurstPercent": 300,
            "cfsQuotaBurstPeriodSeconds": -1,
            "sharePoolThresholdPercent": 50,
        },
        # Upstream commit a7a1b76 (the one shared/crds and the spec are pinned to): DefaultSystemStrategy.
        "systemStrategy": {"minFreeKbytesFactor": 100, "watermarkScaleFactor": 150, "memcgReapBackGround": 0,
                           "totalNetworkBandwidth": "0"},
        "extensions": {},
    }


def _default_resource_qos_strategy() -> JSONObject:
    strategy: JSONObject = {"policies": {"cpuPolicy": "groupIdentity", "netQOSPolicy": "tc"}}
    for key, qos in _CLASS_KEYS.items():
        strategy[key] = {
            "cpuQOS": {"enable": False, **copy.deepcopy(_DEFAULT_CPU_QOS[qos])},
            "memoryQOS": {"enable": False, **copy.deepcopy(_DEFAULT_MEMORY_QOS[qos])},
            "blkioQOS": {"enable": False},
            "resctrlQOS": {"enable": False, **copy.deepcopy(_DEFAULT_RESCTRL_QOS[qos])},
            "networkQOS": {"enable": False, **_NONE_NETWORK_QOS},
        }
    strategy["cgroupRoot"] = {"blkioQOS": {"enable": False}}  # the root cgroup only takes blkio settings
    return strategy
