"""A received NodeSLO decoded: validation, upstream's merge of its spec over the defaults, the frozen typed spec."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from apis.core.errors import InvalidInput
from apis.core.objects import JSON
from apis.core.quantity import canonical_quantity, parse_quantity
from apis.slo.config import spec_from_merged
from apis.slo.defaults import NONE_CPU_QOS, NONE_MEMORY_QOS, NONE_RESCTRL_QOS, default_nodeslo_spec
from apis.slo.types import NodeSLOSpec

API_VERSION = "slo.koordinator.sh/v1alpha1"
KIND = "NodeSLO"

_NONE_IF_DISABLED: dict[str, Mapping[str, object]] = {
    "cpuQOS": NONE_CPU_QOS, "memoryQOS": NONE_MEMORY_QOS, "resctrlQOS": NONE_RESCTRL_QOS,
}
_DISABLE_CLASSES = ("lsrClass", "lsClass", "beClass")
_MERGED_STRATEGIES = ("resourceUsedThresholdWithBE", "resourceQOSStrategy", "cpuBurstStrategy", "systemStrategy")


@dataclass(frozen=True)
class DecodedNodeSLO:
    """What the agent adopts from a received NodeSLO object: the merged, typed spec, or why it is refused."""

    spec: NodeSLOSpec | None  # None: refused (see problems)
    problems: tuple[str, ...] = ()


def decode_nodeslo(obj: object) -> DecodedNodeSLO:
    """The one validating decoder, run once per NodeSLO change: validate the object, merge its spec over upstream's
    defaults, and freeze the result into the typed spec the planners take (apis.slo.types)."""
    problems = validate_nodeslo(obj)
    if problems or not isinstance(obj, dict):
        return DecodedNodeSLO(None, tuple(problems))
    spec = obj.get("spec")
    return DecodedNodeSLO(nodeslo_config(spec if isinstance(spec, dict) else None))


def nodeslo_config(received: JSON | None) -> NodeSLOSpec:
    """`received` merged over the defaults, typed (not validated: for a spec known to be valid)."""
    return spec_from_merged(merge_nodeslo_spec(received))


def merge_nodeslo_spec(received: JSON | None) -> JSON:
    """The spec the agent acts on: `received` merged over the defaults.

    Follows pkg/koordlet/statesinformer/impl/states_nodeslo.go mergeNodeSLOSpec. Upstream decodes the received
    spec into Go structs, marshals each strategy back to JSON and unmarshals that over a deep copy of the default;
    this reproduces what that round trip does to a JSON object:

    * unknown fields are dropped (typed decoding); JSON null is the same as absent (nil pointer, `omitempty`);
    * an empty string in a non-pointer enum (`cpuSuppressPolicy`, `cpuEvictPolicy`, `policy`, block `type`, host
      application fields), an empty list and an empty map are omitted by `omitempty`, so the default stays;
    * objects merge field by field, recursively (unmarshal reuses a non-nil pointer target);
    * lists replace the default (the defaults hold no list, so Go's reuse of existing elements never applies);
    * maps (`schedFeatures`) merge key by key into the default map;
    * quantities (`totalNetworkBandwidth`) come back in canonical form ("1000M" -> "1G");
    * a field of the wrong JSON type is ignored and the default kept (upstream would reject the whole object;
      `validate_nodeslo` reports it first).

    `extensions` is kept as the raw JSON object and merged key by key over the default extensions (upstream registers
    none, so it is the received object; absent means empty). Note that upstream's Go client writes the entries under
    an "Object" key (encoding/json ignores `,inline` on the named map field of ExtensionsMap).
    Other spec fields (`hostApplications`) are taken from the received spec. Finally, for the LSR, LS and BE classes,
    each of cpuQOS, memoryQOS and resctrlQOS whose `enable` is false gets the "None" values (SYSTEM is left alone).
    """
    spec: Mapping[str, Any] = received if isinstance(received, dict) else {}
    defaults = default_nodeslo_spec()
    merged: JSON = _overlay({}, spec, _SPEC)
    for key in _MERGED_STRATEGIES:
        merged[key] = _overlay(defaults[key], spec.get(key), _SPEC.props[key])
    merged["extensions"] = _merge_extensions(defaults["extensions"], spec.get("extensions"))
    _none_if_disabled(merged["resourceQOSStrategy"])
    return merged


def _merge_extensions(default: object, received: object) -> JSON:
    if not isinstance(received, dict):
        return {}  # upstream: a nil map unmarshals as null and clears the default map
    merged: JSON = copy.deepcopy(default) if isinstance(default, dict) else {}
    merged.update(copy.deepcopy(received))
    return merged


def _none_if_disabled(strategy: JSON) -> None:
    """states_nodeslo.go mergeNoneResourceQOSIfDisabled: a disabled block's knobs are replaced wholesale."""
    for class_key in _DISABLE_CLASSES:
        resource_qos = strategy.get(class_key)
        if not isinstance(resource_qos, dict):
            continue
        for block, none_values in _NONE_IF_DISABLED.items():
            cfg = resource_qos.get(block)
            if isinstance(cfg, dict) and cfg.get("enable") is False:
                resource_qos[block] = {"enable": False, **copy.deepcopy(none_values)}


# ---- the schema: CRD types and bounds, plus the bounds and enums of the Go API types -------------------------


@dataclass(frozen=True)
class _Field:
    kind: str  # int | bool | str | intstr | quantity | object | list | boolmap | free (any JSON object)
    minimum: int | None = None
    maximum: int | None = None
    enum: tuple[str, ...] = ()
    props: Mapping[str, _Field] = field(default_factory=dict)
    items: _Field | None = None
    omit_empty: bool = False  # a Go non-pointer string: "" means unset


_INT64 = (-(2**63), 2**63 - 1)
_INT32 = (-(2**31), 2**31 - 1)


def _int(minimum: int | None = None, maximum: int | None = None, bits: int = 64) -> _Field:
    low, high = _INT32 if bits == 32 else _INT64
    return _Field("int", low if minimum is None else minimum, high if maximum is None else maximum)


def _enum(*values: str, omit_empty: bool = False) -> _Field:
    return _Field("str", enum=values, omit_empty=omit_empty)


def _obj(**props: _Field) -> _Field:
    return _Field("object", props=props)


_BOOL = _Field("bool")
_STR = _Field("str", omit_empty=True)
_INTSTR = _Field("intstr")
_FREE = _Field("free")
_PERCENT = _int(0, 100)
_NON_NEGATIVE = _int(0)

# Bounds: the CRD's minimum/maximum; where the CRD has none, the `validate:` tags of apis/slo/v1alpha1
# nodeslo_types.go (what the kernel accepts, e.g. groupIdentity -1..2). Enums: the Go constants (the CRD has none).
_CPU_QOS = _obj(enable=_BOOL, groupIdentity=_int(-1, 2), schedIdle=_int(0, 1), coreExpeller=_BOOL)
_MEMORY_QOS = _obj(
    enable=_BOOL, minLimitPercent=_PERCENT, lowLimitPercent=_PERCENT, throttlingPercent=_PERCENT,
    wmarkRatio=_PERCENT, wmarkScalePermill=_int(1, 1000), wmarkMinAdj=_int(-25, 50),
    priorityEnable=_int(0, 1), priority=_int(0, 12), oomKillGroup=_int(0, 1),
    pageCacheEnable=_BOOL, pageCacheLimitPercent=_PERCENT, pageCacheLimitSize=_int(), pageCacheReclaimSync=_BOOL,
)
_IO_CFG = _obj(
    readIOPS=_NON_NEGATIVE, writeIOPS=_NON_NEGATIVE, readBPS=_NON_NEGATIVE, writeBPS=_NON_NEGATIVE,
    ioWeightPercent=_int(1, 100), readLatency=_int(), writeLatency=_int(),
    readLatencyPercent=_PERCENT, writeLatencyPercent=_PERCENT, enableUserModel=_BOOL,
    modelReadBPS=_int(1), modelWriteBPS=_int(1), modelReadSeqIOPS=_int(1), modelWriteSeqIOPS=_int(1),
    modelReadRandIOPS=_int(1), modelWriteRandIOPS=_int(1),
)
_BLOCK = _obj(name=_STR, type=_enum("device", "volumegroup", "podvolume", omit_empty=True), ioCfg=_IO_CFG)
_BLKIO_QOS = _obj(enable=_BOOL, blocks=_Field("list", items=_BLOCK))
_RESCTRL_QOS = _obj(enable=_BOOL, catRangeStartPercent=_PERCENT, catRangeEndPercent=_PERCENT, mbaPercent=_PERCENT)
_NETWORK_QOS = _obj(
    enable=_BOOL, ingressRequest=_INTSTR, ingressLimit=_INTSTR, egressRequest=_INTSTR, egressLimit=_INTSTR,
)
_RESOURCE_QOS = _obj(
    cpuQOS=_CPU_QOS, memoryQOS=_MEMORY_QOS, blkioQOS=_BLKIO_QOS, resctrlQOS=_RESCTRL_QOS, networkQOS=_NETWORK_QOS,
)
_RESOURCE_QOS_STRATEGY = _obj(
    policies=_obj(cpuPolicy=_enum("groupIdentity", "coreSched"), netQOSPolicy=_enum("tc", "terway-qos")),
    lsrClass=_RESOURCE_QOS, lsClass=_RESOURCE_QOS, beClass=_RESOURCE_QOS, systemClass=_RESOURCE_QOS,
    cgroupRoot=_RESOURCE_QOS,
)
_THRESHOLD_STRATEGY = _obj(
    enable=_BOOL,
    cpuSuppressThresholdPercent=_PERCENT,
    cpuSuppressMinPercent=_PERCENT,
    cpuSuppressPolicy=_enum("cpuset", "cfsQuota", omit_empty=True),
    memoryEvictThresholdPercent=_PERCENT,
    memoryEvictLowerPercent=_PERCENT,
    memoryAllocatableEvictThresholdPercent=_NON_NEGATIVE,
    memoryAllocatableEvictLowerPercent=_NON_NEGATIVE,
    cpuEvictBESatisfactionUpperPercent=_PERCENT,
    cpuEvictBESatisfactionLowerPercent=_PERCENT,
    cpuEvictBEUsageThresholdPercent=_PERCENT,
    cpuEvictTimeWindowSeconds=_int(1),
    cpuEvictThresholdPercent=_PERCENT,
    cpuEvictLowerPercent=_PERCENT,
    cpuAllocatableEvictThresholdPercent=_NON_NEGATIVE,
    cpuAllocatableEvictLowerPercent=_NON_NEGATIVE,
    cpuEvictPolicy=_enum("evictByRealLimit", "evictByAllocatable", omit_empty=True),
    evictEnabledPriorityThreshold=_int(bits=32),
    allocatableEvictPriorityThreshold=_int(bits=32),
)
_CPU_BURST_STRATEGY = _obj(
    policy=_enum("none", "cpuBurstOnly", "cfsQuotaBurstOnly", "auto", omit_empty=True),
    cpuBurstPercent=_int(0, 10000),
    cfsQuotaBurstPercent=_int(100),
    cfsQuotaBurstPeriodSeconds=_int(-1),
    sharePoolThresholdPercent=_PERCENT,
)
_SYSTEM_STRATEGY = _obj(
    minFreeKbytesFactor=_int(1),
    watermarkScaleFactor=_int(1, 400),
    memcgReapBackGround=_int(0, 1),
    schedGroupIdentityEnabled=_int(),
    schedIdleSaverWmark=_int(),
    schedFeatures=_Field("boolmap"),
    pageCacheLimitEnabled=_int(),
    totalNetworkBandwidth=_Field("quantity"),
)
_HOST_APPLICATION = _obj(
    name=_STR,
    priority=_enum("koord-prod", "koord-mid", "koord-batch", "koord-free", omit_empty=True),
    qos=_enum("LSE", "LSR", "LS", "BE", "SYSTEM", omit_empty=True),
    cgroupPath=_obj(
        base=_enum("CgroupRoot", "Kubepods", "KubepodsBurstable", "KubepodsBesteffort", omit_empty=True),
        parentDir=_STR,
        relativePath=_STR,
    ),
    strategy=_FREE,
)
_SPEC = _obj(
    resourceUsedThresholdWithBE=_THRESHOLD_STRATEGY,
    resourceQOSStrategy=_RESOURCE_QOS_STRATEGY,
    cpuBurstStrategy=_CPU_BURST_STRATEGY,
    systemStrategy=_SYSTEM_STRATEGY,
    extensions=_FREE,
    hostApplications=_Field("list", items=_HOST_APPLICATION),
)
_NODESLO = _obj(
    apiVersion=_enum(API_VERSION), kind=_enum(KIND), metadata=_FREE, spec=_SPEC, status=_FREE,
)


# ---- overlay (merge) ------------------------------------------------------------------------------------------


def _overlay(base: Any, received: Any, f: _Field) -> Any:
    """What Go's json.Unmarshal of the (typed, re-marshalled) `received` does to a copy of `base`."""
    if f.kind == "object":
        return _overlay_object(base, received, f)
    if f.kind == "list":
        assert f.items is not None
        return [_overlay({}, item, f.items) for item in received if isinstance(item, dict)]
    if f.kind == "boolmap":
        merged = dict(base) if isinstance(base, dict) else {}
        merged.update({k: v for k, v in received.items() if isinstance(v, bool)})
        return merged
    if f.kind == "quantity":
        return canonical_quantity(received)
    return copy.deepcopy(received)


def _overlay_object(base: Any, received: Any, f: _Field) -> JSON:
    out: JSON = copy.deepcopy(base) if isinstance(base, dict) else {}
    if not isinstance(received, dict):
        return out
    for key, sub in f.props.items():
        value = received.get(key)
        if _omitted(value, sub) or _type_problem(value, sub) is not None:
            continue
        if sub.kind == "quantity" and _quantity_problem(value) is not None:
            continue
        out[key] = _overlay(out.get(key), value, sub)
    return out


def _omitted(value: Any, f: _Field) -> bool:
    """True when Go's `omitempty` marshalling would drop the field, leaving the default in place."""
    if value is None:
        return True
    if f.kind in ("list", "boolmap"):
        return not value
    return f.omit_empty and value == ""


# ---- validation -------------------------------------------------------------------------------------------


def validate_nodeslo(obj: object) -> list[str]:
    """Problems that make a NodeSLO object unusable, as readable strings; empty when it is fine.

    Checks JSON types, the CRD's bounds and the upstream Go types' bounds and enum values for every field the
    agent reads. Unknown fields are ignored (the API server prunes them; a newer CRD may add some).
    """
    if not isinstance(obj, dict):
        return [f"NodeSLO: expected object, got {json_type_name(obj)}"]
    problems: list[str] = []
    _check(obj, _NODESLO, "", problems)
    return problems


def _check(value: Any, f: _Field, path: str, problems: list[str]) -> None:
    if value is None:
        return  # null on an optional field is the same as absent
    type_problem = _type_problem(value, f)
    if type_problem is not None:
        problems.append(f"{path or 'NodeSLO'}: {type_problem}")
        return
    if f.kind == "object":
        for key, sub in f.props.items():
            if key in value:
                _check(value[key], sub, f"{path}.{key}" if path else key, problems)
    elif f.kind == "list":
        assert f.items is not None
        for i, item in enumerate(value):
            if item is None:
                problems.append(f"{path}[{i}]: expected object, got null")
            else:
                _check(item, f.items, f"{path}[{i}]", problems)
    else:
        problem = _value_problem(value, f)
        if problem is not None:
            problems.append(f"{path}: {problem}")


def _type_problem(value: Any, f: _Field) -> str | None:
    """Why `value` has the wrong JSON type for `f`, or None."""
    ok = {
        "int": _is_int(value),
        "bool": isinstance(value, bool),
        "str": isinstance(value, str),
        "intstr": _is_int(value) or isinstance(value, str),
        "quantity": _is_int(value) or isinstance(value, str),
        "object": isinstance(value, dict),
        "free": isinstance(value, dict),
        "boolmap": isinstance(value, dict),
        "list": isinstance(value, list),
    }[f.kind]
    if ok:
        return None
    expected = {"int": "integer", "bool": "boolean", "str": "string", "list": "array"}.get(f.kind)
    if f.kind in ("intstr", "quantity"):
        expected = "integer or string"
    return f"expected {expected or 'object'}, got {json_type_name(value)}"


def _value_problem(value: Any, f: _Field) -> str | None:
    """Why a correctly typed scalar (or map) is still out of bounds, or None."""
    if f.kind == "int":
        if f.minimum is not None and value < f.minimum:
            return f"{value} is below minimum {f.minimum}"
        if f.maximum is not None and value > f.maximum:
            return f"{value} is above maximum {f.maximum}"
    elif f.kind == "str" and f.enum and value not in f.enum and not (f.omit_empty and value == ""):
        return f"{_short(repr(value))} is not one of {', '.join(map(repr, f.enum))}"
    elif f.kind == "quantity":
        return _quantity_problem(value)
    elif f.kind == "boolmap":
        bad = sorted(str(k) for k, v in value.items() if not isinstance(v, bool))
        if bad:
            return f"values must be booleans (not for {', '.join(bad)})"
    return None


def _quantity_problem(value: object) -> str | None:
    if not isinstance(value, str | int) or isinstance(value, bool):
        return f"expected integer or string, got {json_type_name(value)}"
    if isinstance(value, str) and value != value.strip():
        return f"{value!r} is not a quantity (surrounding whitespace)"
    try:
        parse_quantity(value)
    except InvalidInput as e:
        return str(e)
    return None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def json_type_name(value: object) -> str:
    """A JSON value as error messages name it ("string 'x'", "array", "null")."""
    if value is None:
        return "null"
    for kind, name in ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"),
                       (list, "array"), (dict, "object")):
        if isinstance(value, kind):
            return f"{name} {_short(repr(value))}" if kind in (bool, int, float, str) else name
    return type(value).__name__


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
