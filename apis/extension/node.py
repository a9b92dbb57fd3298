"""Node annotations and labels Koordinator's components exchange: reserved resources, raw allocatable, resource
amplification, CPU normalization and the per-node colocation strategy."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from apis.core.errors import InvalidInput
from apis.core.objects import JSON
from apis.core.quantity import canonical_quantity, parse_quantity
from apis.core.resources import CPU
from apis.extension.errors import AnnotationError
from apis.extension.resource_status import CPUSetError, parse_cpuset

# Upstream: apis/extension/node_reservation.go, apis/extension/system_qos.go,
# apis/extension/node_resource_amplification.go, apis/extension/node_colocation.go.

# resources kept out of the pods' reach: {"resources": {...}, "reservedCPUs": "0-1", "applyPolicy": ...}
ANNOTATION_NODE_RESERVATION = "node.koordinator.sh/reservation"
# CPUs for SYSTEM QoS pods: {"cpuset": "0-1", "cpusetExclusive": true}
ANNOTATION_SYSTEM_QOS_RESOURCE = "node.koordinator.sh/system-qos-resource"
# the allocatable before resource amplification, as a ResourceList (koord-manager's node webhook writes it)
ANNOTATION_NODE_RAW_ALLOCATABLE = "node.koordinator.sh/raw-allocatable"
# per-resource amplification ratios, a JSON object of numbers: {"cpu": 1.5, "memory": 1.2}
ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO = "node.koordinator.sh/resource-amplification-ratio"
ANNOTATION_CPU_NORMALIZATION_RATIO = "node.koordinator.sh/cpu-normalization-ratio"

# the node's own colocation strategy (a JSON ColocationStrategy) and the labels overriding single thresholds
ANNOTATION_COLOCATION_STRATEGY = "node.koordinator.sh/colocation-strategy"
LABEL_CPU_RECLAIM_RATIO = "node.koordinator.sh/cpu-reclaim-ratio"
LABEL_MEMORY_RECLAIM_RATIO = "node.koordinator.sh/memory-reclaim-ratio"
LABEL_MID_STATIC_CPU_RESERVED_RATIO = "node.koordinator.sh/mid-static-cpu-reserved-ratio"
LABEL_MID_STATIC_MEMORY_RESERVED_RATIO = "node.koordinator.sh/mid-static-memory-reserved-ratio"

# NodeReservationApplyPolicy values
APPLY_POLICY_DEFAULT = "Default"
APPLY_POLICY_RESERVED_CPUS_ONLY = "ReservedCPUsOnly"


@dataclass(frozen=True)
class NodeReservation:
    """The node.koordinator.sh/reservation annotation (NodeReservation {resources, reservedCPUs, applyPolicy})."""

    resources: Mapping[str, str] = field(default_factory=dict)  # name -> quantity as written (a checked quantity)
    reserved_cpus: str = ""  # a Linux CPU list, "" = none listed; not checked here (see reserved_cpu_list)
    apply_policy: str = ""

    def to_json(self) -> JSON:
        """As json.Marshal writes it: omitempty fields dropped, quantities canonical, resource names sorted."""
        out: JSON = {}
        if self.resources:
            out["resources"] = {name: canonical_quantity(q) for name, q in sorted(self.resources.items())}
        if self.reserved_cpus:
            out["reservedCPUs"] = self.reserved_cpus
        if self.apply_policy:
            out["applyPolicy"] = self.apply_policy
        return out


class _Number(str):
    """A JSON number kept as its text: Go reads a number where a Quantity is expected as that text."""

    def __repr__(self) -> str:
        return str(self)


def decode_node_reservation(text: str) -> NodeReservation:
    """GetNodeReservation: the annotation as Go's json.Unmarshal reads it (field names matched case-insensitively,
    `null` the zero value, a quantity a string or a number); "" is no reservation. AnnotationError names the bad
    field; an unparsable reservedCPUs list is not an error here (upstream parses it where it is used)."""
    if text == "":
        return NodeReservation()
    doc = _load(text)
    if doc is None:
        return NodeReservation()
    if not isinstance(doc, dict):
        raise AnnotationError("", "must be a JSON object")
    fields = {k.lower(): v for k, v in doc.items()}  # a later spelling overwrites an earlier one, as in Go
    return NodeReservation(_resources(fields.get("resources"), "resources"),
                           _string(fields, "reservedcpus", "reservedCPUs"),
                           _string(fields, "applypolicy", "applyPolicy"))


def reserved_cpu_list(reservation: NodeReservation) -> list[int]:
    """The listed reserved CPUs, [] when the list does not parse (upstream logs and ignores cpuset.Parse's error)."""
    try:
        return parse_cpuset(reservation.reserved_cpus)
    except CPUSetError:
        return []


def reserved_cpu_count(reservation: NodeReservation) -> int:
    """GetReservedCPUs' count: ceil(resources.cpu) whole CPUs to take by topology, 0 when a list is given."""
    cpu = reservation.resources.get(CPU)
    if reservation.reserved_cpus or cpu is None:
        return 0
    return max(math.ceil(parse_quantity(cpu)), 0)


def decode_node_raw_allocatable(text: str) -> dict[str, str] | None:
    """GetNodeRawAllocatable: the ResourceList (name -> quantity as written, each checked) as json.Unmarshal reads
    it; None for `null` (a nil list); AnnotationError names the bad entry."""
    doc = _load(text)
    return None if doc is None else _resources(doc, "")


def decode_amplification_ratios(text: str) -> dict[str, float]:
    """GetNodeResourceAmplificationRatios: the annotation as json.Unmarshal reads a map of float64 ratios (`null`
    is no ratios, a `null` ratio is 0, a later duplicate key wins); AnnotationError names the bad entry."""
    try:
        doc = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:
        raise AnnotationError("", f"invalid JSON: {e}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise AnnotationError("", "must be a JSON object of ratios")
    out: dict[str, float] = {}
    for name, ratio in doc.items():
        if ratio is None:
            ratio = 0.0
        if isinstance(ratio, bool) or not isinstance(ratio, int | float):
            raise AnnotationError(name, f"must be a number, not {ratio!r}")
        value = float(ratio)
        if not math.isfinite(value):  # Go: a number out of float64's range does not unmarshal
            raise AnnotationError(name, f"{ratio!r} is out of range")
        out[name] = value
    return out


_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")  # strconv.ParseFloat's decimal form


def cpu_normalization_ratio(node: JSON | None) -> tuple[float | None, str | None]:
    """GetCPUNormalizationRatio: (the annotation as a float, None) when valid; (None, None) without a node or the
    annotation; (None, why) when it does not parse or is <= 0."""
    if node is None:
        return None, None
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    text = annotations.get(ANNOTATION_CPU_NORMALIZATION_RATIO) if isinstance(annotations, dict) else None
    if text is None:
        return None, None
    if not isinstance(text, str) or not _FLOAT.fullmatch(text):
        return None, f"{text!r} is not a number"
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        return None, f"illegal cpu normalization ratio: {text}"
    return value, None


def _load(text: str) -> Any:
    try:
        return json.loads(text, parse_int=_Number, parse_float=_Number, parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:
        raise AnnotationError("", f"invalid JSON: {e}") from None


def _resources(value: Any, path: str) -> dict[str, str]:
    """A ResourceList; `path` names it in errors ("" = the whole annotation)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise AnnotationError(path, "must be an object")
    out: dict[str, str] = {}
    for name, q in value.items():
        where = f"{path}.{name}" if path else name
        if q is None:
            q = "0"  # Quantity.UnmarshalJSON: null is zero
        if not isinstance(q, str):
            raise AnnotationError(where, f"must be a quantity, not {q!r}")
        try:
            parse_quantity(q)
        except InvalidInput as e:
            raise AnnotationError(where, str(e)) from None
        out[name] = str(q)
    return out


def _string(fields: Mapping[str, Any], key: str, name: str) -> str:
    value = fields.get(key)
    if value is None:
        return ""
    if not isinstance(value, str) or isinstance(value, _Number):
        raise AnnotationError(name, f"must be a string, not {value!r}")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")
