"""CPU burst configuration: the pod's `koordinator.sh/cpuBurst` over NodeSLO `cpuBurstStrategy`, eligibility."""

# Upstream: pkg/koordlet/qosmanager/plugins/cpuburst/cpu_burst.go (genPodBurstConfig, calcStaticCPUBurstVal, the
# policy helpers), apis/slo/v1alpha1/{nodeslo_types.go,pod.go} (CPUBurstConfig, GetPodCPUBurstConfig),
# pkg/util/pod_qos_utils.go IsPodCPUBurstable, pkg/util/pod.go IsPodInactive, pkg/koordlet/util/container.go
# GetContainerBaseCFSQuota. Defaults: pkg/util/sloconfig DefaultCPUBurstStrategy (apis/slo/defaults.py).

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from dataclasses import replace
from decimal import Decimal
from typing import NoReturn

from apis.core.errors import InvalidInput, PlanError
from apis.core.objects import JSON, as_object
from apis.core.quantity import parse_quantity
from apis.extension.cpu_burst import ANNOTATION_POD_CPU_BURST
from apis.extension.qos import QOS_BE, QOS_LSE, QOS_LSR, koord_qos_class
from apis.slo.types import CPUBurstConfig
from koordlet.host.resources import CFS_BASE_PERIOD_US
from koordlet.qos.batchspec import milli_cpu_to_quota
from koordlet.states.model import PodMeta

_INT64 = (-(2**63), 2**63 - 1)
_RANGES = {  # the NodeSLO CRD's bounds for the same fields (apis/slo/v1alpha1/nodeslo_types.go)
    "cpu_burst_percent": (0, 10000), "cfs_quota_burst_percent": (0, _INT64[1]),
    "cfs_quota_burst_period_seconds": (-1, _INT64[1]),
}
_FIELDS = {  # Go matches JSON keys to struct fields case-insensitively
    "policy": "policy", "cpuburstpercent": "cpu_burst_percent", "cfsquotaburstpercent": "cfs_quota_burst_percent",
    "cfsquotaburstperiodseconds": "cfs_quota_burst_period_seconds",
}


def pod_config(pod: PodMeta, node: CPUBurstConfig) -> tuple[CPUBurstConfig, PlanError | None]:
    """genPodBurstConfig: the annotation's fields over the node's; a malformed annotation is an error (Event) and the
    node's config is used, as upstream does."""
    text = as_object(as_object(pod.raw.get("metadata")).get("annotations")).get(ANNOTATION_POD_CPU_BURST)
    if text is None:
        return node, None
    try:
        if not isinstance(text, str):
            raise ValueError("expected a string")
        return _merge(node, text), None
    except ValueError as e:
        return node, PlanError("Pod", f"{pod.namespace}/{pod.name}", f"annotations[{ANNOTATION_POD_CPU_BURST}]",
                               str(e), uid=pod.uid)


class _Pairs(list[tuple[str, object]]):
    """A JSON object as its (key, value) pairs in document order."""


def _merge(node: CPUBurstConfig, text: str) -> CPUBurstConfig:
    """json.Unmarshal into CPUCPUBurstConfig, then the set fields over a copy of the node's (a null or "" policy, like
    an absent field, keeps the node's: upstream marshals the pod config with omitempty first)."""
    try:
        doc = json.loads(text, object_pairs_hook=_Pairs, parse_float=Decimal, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as e:
        raise ValueError(f"invalid JSON: {e}") from None
    if doc is None:
        return node
    if not isinstance(doc, _Pairs):
        raise ValueError("expected a JSON object")
    changes: JSON = {}
    for key, value in doc:
        name = _FIELDS.get(key.lower())
        if name is None:
            continue  # unknown fields are ignored
        if value is None or (name == "policy" and value == ""):  # the last duplicate key wins, also unsetting
            changes.pop(name, None)
            continue
        if name == "policy":
            if not isinstance(value, str):
                raise ValueError(f"policy: expected a string, got {value!r}")
            changes[name] = value
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not _INT64[0] <= value <= _INT64[1]:
            raise ValueError(f"{key}: expected a 64-bit integer, got {value!r}")
        low, high = _RANGES[name]
        if not low <= value <= high:
            # [quirk] upstream takes any integer here and writes what follows (a negative burst, which the kernel
            # refuses); we hold the annotation to the NodeSLO field's bounds and fall back to the node's config.
            raise ValueError(f"{key}: {value} is not in [{low}, {high}]")
        changes[name] = value
    return replace(node, **changes)


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


# ---- which pods and containers ---------------------------------------------------------------------------------


def burstable(pod: PodMeta) -> bool:
    """IsPodCPUBurstable (not LSR, LSE or BE by the raw label) and not IsPodInactive (phase Pending or Running)."""
    return koord_qos_class(pod.raw) not in (QOS_LSR, QOS_LSE, QOS_BE) and pod.phase in ("Pending", "Running")


def container_specs(pod: PodMeta) -> dict[str, Mapping[str, object]]:
    """The pod spec's containers by name (the status entries are matched to these)."""
    containers = as_object(pod.raw.get("spec")).get("containers")
    out: dict[str, Mapping[str, object]] = {}
    for c in containers if isinstance(containers, list) else []:
        if isinstance(c, dict):
            out[str(c.get("name", ""))] = c
    return out


def cpu_limit_milli(container: Mapping[str, object]) -> int:
    """GetContainerMilliCPULimit: the CPU limit in milli-cores (rounded up); -1 without one or when unreadable."""
    value = as_object(as_object(container.get("resources")).get("limits")).get("cpu")
    if value is None or isinstance(value, bool) or not isinstance(value, str | int):
        return -1
    return _milli(value)


@functools.lru_cache(maxsize=1024)
def _milli(value: str | int) -> int:
    """A CPU quantity in milli-cores rounded up, -1 when unreadable: pods share a handful of limits, and this is
    asked for every container on every pass."""
    try:
        return math.ceil(parse_quantity(value) * 1000)
    except InvalidInput:
        return -1


def base_quota(container: Mapping[str, object]) -> int:
    """GetContainerBaseCFSQuota: the limit as a quota per 100 ms period (-1 without a limit)."""
    return milli_cpu_to_quota(cpu_limit_milli(container))


def ceiling_quota(base: int, cfg: CPUBurstConfig) -> int:
    """The largest scaled quota: base × cfsQuotaBurstPercent / 100 when the percent is > 100, else the base."""
    if cfg.cfs_quota_burst_percent > 100:
        return int(float(base) * float(cfg.cfs_quota_burst_percent) / 100)
    return base


def static_burst_us(container: Mapping[str, object], cfg: CPUBurstConfig) -> int:
    """calcStaticCPUBurstVal: limit cores × cpuBurstPercent / 100 × 100000 µs; 0 when the policy has no static
    burst or the container has no limit (upstream's value; the plan caps it, see koordlet/qos/cpuburst.py)."""
    if not cfg.cpu_burst:
        return 0
    milli = cpu_limit_milli(container)
    if milli <= 0:
        return 0
    cores = (float(milli) / 1000) * (float(cfg.cpu_burst_percent) / 100)
    return int(cores * float(CFS_BASE_PERIOD_US))
