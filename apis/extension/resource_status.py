"""`scheduling.koordinator.sh/resource-status`: the CPUs and NUMA resources koord-scheduler gave a pod, and the
Linux CPU list text (`0-3,8`) it and the NodeResourceTopology annotations carry.

Upstream: apis/extension/numa_aware.go (ResourceStatus, AnnotationResourceStatus), pkg/util/cpuset/cpuset.go (Parse,
String)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from apis.core.errors import InvalidInput
from apis.core.quantity import format_bytes, format_milli, parse_quantity
from apis.extension.errors import AnnotationError
from apis.extension.resources import BATCH_CPU

ANNOTATION_RESOURCE_STATUS = "scheduling.koordinator.sh/resource-status"

_MAX_CPU_ID = 4096  # pkg/util/cpuset maxAvailableCPUCount: the end of a range may not exceed it
_INT32_MAX = 2**31 - 1
_DIGITS = re.compile(r"[+-]?[0-9]+")


class CPUSetError(InvalidInput):
    """A Linux CPU list (`0-3,8`) that does not parse."""


def parse_cpuset(text: str) -> list[int]:
    """A Linux CPU list → sorted distinct CPU ids, as upstream cpuset.Parse accepts it ("" is the empty set).

    Surrounding whitespace (the newline of a sysfs/cgroup file) is ignored; anything else malformed raises
    CPUSetError, as upstream's error: an empty element (`0,,1`), a reversed range is simply empty as upstream.
    """
    s = text.strip()
    if not s:
        return []
    cpus: set[int] = set()
    for part in s.split(","):
        bounds = part.split("-")
        if len(bounds) == 1:
            cpus.add(_cpu_id(bounds[0], text))
        elif len(bounds) == 2:
            lo, hi = _cpu_id(bounds[0], text), _cpu_id(bounds[1], text)
            if hi > _MAX_CPU_ID:
                raise CPUSetError(f"cpuset {text!r}: end {hi} exceeds the maximum CPU count {_MAX_CPU_ID}")
            cpus.update(range(lo, hi + 1))
        else:
            raise CPUSetError(f"cpuset {text!r}: invalid element {part!r}")
    return sorted(cpus)


def _cpu_id(token: str, text: str) -> int:
    if not _DIGITS.fullmatch(token):
        raise CPUSetError(f"cpuset {text!r}: {token!r} is not a CPU id")
    value = int(token)
    if not -_INT32_MAX - 1 <= value <= _INT32_MAX:
        raise CPUSetError(f"cpuset {text!r}: {token!r} is out of range")
    if value < 0:
        raise CPUSetError(f"cpuset {text!r}: {token!r} is negative")
    return value


def format_cpuset(cpus: Iterable[int]) -> str:
    """CPU ids → the canonical list upstream's CPUSet.String() prints: sorted, ranges merged (`0-3,8`)."""
    ids = sorted(set(cpus))
    if not ids:
        return ""
    parts: list[str] = []
    start = prev = ids[0]
    for c in ids[1:]:
        if c == prev + 1:
            prev = c
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = c
    parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(parts)


def same_cpuset(a: str, b: str) -> bool:
    """Whether two CPU lists name the same CPUs (upstream cpuset.IsEqualStrCpus: unparsable is never equal)."""
    try:
        return parse_cpuset(a) == parse_cpuset(b)
    except CPUSetError:
        return False


@dataclass(frozen=True)
class NUMANodeResource:
    node: int
    resources: Mapping[str, Decimal]

    def allocates_cpu(self) -> bool:
        """cpuset rule's NUMA-aware test: a non-zero `cpu` or a positive batch-cpu on this node."""
        return self.resources.get("cpu", Decimal(0)) != 0 or self.resources.get(BATCH_CPU, Decimal(0)) > 0


@dataclass(frozen=True)
class ResourceStatus:
    """`scheduling.koordinator.sh/resource-status`: what koord-scheduler allocated to the pod."""

    cpuset: str = ""
    numa_node_resources: tuple[NUMANodeResource, ...] = ()

    def cpus(self) -> list[int]:
        return parse_cpuset(self.cpuset)

    def numa_aware(self) -> bool:
        return any(n.allocates_cpu() for n in self.numa_node_resources)


def resource_status(annotations: Mapping[str, Any]) -> ResourceStatus:
    """The pod's ResourceStatus (empty when absent), decoded as Go's json.Unmarshal into the struct would: field
    names match case-insensitively, unknown fields are ignored, `null` is the zero value. AnnotationError when the
    JSON or a field is malformed; the cpuset is checked to be a CPU list (upstream parses it where it uses it)."""
    text = annotations.get(ANNOTATION_RESOURCE_STATUS)
    if text is None:
        return ResourceStatus()
    if not isinstance(text, str):
        raise AnnotationError("", "must be a string")
    return decode_resource_status(text)


def decode_resource_status(text: str) -> ResourceStatus:
    """The annotation's value decoded; AnnotationError names the malformed field."""
    try:
        doc = json.loads(text, parse_float=Decimal)
    except (ValueError, RecursionError) as e:
        raise AnnotationError("", f"invalid JSON: {e}") from None
    if doc is None:
        return ResourceStatus()
    if not isinstance(doc, dict):
        raise AnnotationError("", "must be a JSON object")
    fields = _fold_fields(doc)
    cpuset = _or(fields.get("cpuset"), "")
    if not isinstance(cpuset, str):
        raise AnnotationError("cpuset", f"must be a string, not {cpuset!r}")
    try:
        parse_cpuset(cpuset)
    except CPUSetError as e:
        raise AnnotationError("cpuset", str(e)) from None
    numa = _or(fields.get("numanoderesources"), [])
    if not isinstance(numa, list):
        raise AnnotationError("numaNodeResources", "must be an array")
    nodes: list[NUMANodeResource] = []
    for i, item in enumerate(numa):
        at = f"numaNodeResources[{i}]"
        if item is None:
            nodes.append(NUMANodeResource(0, {}))
            continue
        if not isinstance(item, dict):
            raise AnnotationError(at, "must be an object")
        f = _fold_fields(item)
        node = _or(f.get("node"), 0)
        if isinstance(node, bool) or not isinstance(node, int) or not -_INT32_MAX - 1 <= node <= _INT32_MAX:
            raise AnnotationError(f"{at}.node", f"must be an int32, not {node!r}")
        resources: dict[str, Decimal] = {}
        res = _or(f.get("resources"), {})
        if not isinstance(res, dict):
            raise AnnotationError(f"{at}.resources", "must be an object")
        for name, q in res.items():
            if q is None:
                resources[name] = Decimal(0)
                continue
            if isinstance(q, bool) or not isinstance(q, str | int | Decimal):
                raise AnnotationError(f"{at}.resources[{name}]", "must be a quantity")
            try:
                resources[name] = parse_quantity(q if isinstance(q, str) else format(q))
            except InvalidInput as e:
                raise AnnotationError(f"{at}.resources[{name}]", str(e)) from None
        nodes.append(NUMANodeResource(node, resources))
    return ResourceStatus(cpuset, tuple(nodes))


def encode_resource_status(cpus: Iterable[int], numa: Mapping[int, Mapping[str, int]]) -> str:
    """The annotation value koord-scheduler writes: `cpuset` as a CPU list, `numaNodeResources` node by node
    ascending with `cpu` in milli-cores and every other resource in bytes; zero values, nodes left with nothing, an
    empty cpuset and an empty list are omitted (omitempty), so nothing at all is `{}`."""
    out: dict[str, Any] = {}
    cpuset = format_cpuset(cpus)
    if cpuset:
        out["cpuset"] = cpuset
    nodes = []
    for node in sorted(numa):
        res = {r: format_milli(v) if r == "cpu" else format_bytes(v) for r, v in sorted(numa[node].items()) if v}
        if res:
            nodes.append({"node": node, "resources": res})
    if nodes:
        out["numaNodeResources"] = nodes
    return json.dumps(out, separators=(",", ":"))


def _or(value: Any, zero: Any) -> Any:
    """Go's json: an absent field or `null` leaves the zero value."""
    return zero if value is None else value


def _fold_fields(obj: Mapping[str, Any]) -> dict[str, Any]:
    """Struct fields by lower-cased name; of keys folding alike, the later in the document wins (Go overwrites)."""
    return {k.lower(): v for k, v in obj.items()}
