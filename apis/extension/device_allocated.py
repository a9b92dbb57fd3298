"""`scheduling.koordinator.sh/device-allocated`: the devices koord-scheduler gave a pod, one typed decoder for both
programs and the encoder koord-scheduler writes it with.

Upstream: apis/extension/device_share.go (DeviceAllocations, GetDeviceAllocations, SetDeviceAllocations). Read by
koordlet's runtime hooks and PodResources proxy, and by koord-scheduler's device accounting, reservations and metrics.

Decoding follows Go's encoding/json into those types: the map's device-type keys and a `resources` map's names are
case-sensitive; struct field names (`minor`, `resources`, `id`, `extension`, `vfs`, `busID`,
`gpuSharedResourceTemplate`) match case-insensitively; `null` leaves a field at its zero value; unknown fields are
ignored; an integer field refuses fractions, exponents and out-of-range values; every quantity must parse. Where Go
would dereference a `null` allocation and crash the hook, this decoder reports the field.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import ROUND_UP, Decimal
from typing import Any

from apis.core.errors import InvalidInput
from apis.core.quantity import canonical_quantity, format_bytes, parse_quantity
from apis.extension.errors import AnnotationError
from apis.extension.resources import RESOURCE_GPU_MEMORY

ANNOTATION_DEVICE_ALLOCATED = "scheduling.koordinator.sh/device-allocated"

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)


@dataclass(frozen=True)
class VirtualFunction:
    minor: int
    bus_id: str  # the VF's PCI address, e.g. 0000:01:00.2


@dataclass(frozen=True)
class DeviceAllocation:
    minor: int
    resources: Mapping[str, Decimal] = field(default_factory=dict)  # exact quantity values
    id: str = ""  # GPU UUID, or the PCI address of an RDMA PF
    vfs: tuple[VirtualFunction, ...] = ()
    gpu_shared_resource_template: str = ""

    def value(self, resource: str) -> int | None:
        """Quantity.Value() of a resource (rounded away from zero to an integer); None when absent."""
        q = self.resources.get(resource)
        return None if q is None else int(q.to_integral_value(rounding=ROUND_UP))


Allocations = Mapping[str, tuple[DeviceAllocation, ...]]


def pod_device_allocations(annotations: Mapping[str, str]) -> Allocations | None:
    """The pod's allocations, None when it has no such annotation; AnnotationError when it is malformed."""
    text = annotations.get(ANNOTATION_DEVICE_ALLOCATED)
    return None if text is None else decode_device_allocations(text)


class _Pairs(list[tuple[str, Any]]):
    """A JSON object as its members in document order (struct fields match case-insensitively, so no dict)."""


@functools.lru_cache(maxsize=1024)
def decode_device_allocations(text: str) -> Allocations:
    """The annotation's value decoded; AnnotationError names the malformed field (e.g. `gpu[0].minor`).

    Cached: every hook of a stage, every container of a pod and every scheduling cycle read the same few texts (the
    records are frozen, so sharing them is safe; a malformed text raises each time, nothing is kept)."""

    def _no_constant(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    try:
        doc = json.loads(text, object_pairs_hook=_Pairs, parse_float=Decimal, parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:
        raise AnnotationError("", f"invalid JSON: {e}") from None
    if doc is None:
        return {}  # Go: null into a map leaves it nil
    if not isinstance(doc, _Pairs):
        raise AnnotationError("", f"must be a JSON object, not {_kind(doc)}")
    out: dict[str, tuple[DeviceAllocation, ...]] = {}
    for dtype, items in doc:  # map keys: case-sensitive, a repeated key replaces the earlier one
        if items is None:
            out[dtype] = ()
            continue
        if not isinstance(items, list) or isinstance(items, _Pairs):
            raise AnnotationError(dtype, f"must be an array, not {_kind(items)}")
        out[dtype] = tuple(_allocation(item, f"{dtype}[{i}]") for i, item in enumerate(items))
    return out


def _allocation(item: Any, path: str) -> DeviceAllocation:
    if item is None:
        raise AnnotationError(path, "is null")
    if not isinstance(item, _Pairs):
        raise AnnotationError(path, f"must be an object, not {_kind(item)}")
    minor, resources, dev_id = 0, {}, ""
    vfs: tuple[VirtualFunction, ...] = ()
    template = ""
    for key, value in item:
        name = _fold(key)
        if name == "minor":
            minor = minor if value is None else _int(value, f"{path}.minor", _INT32)
        elif name == "resources":
            resources = {} if value is None else _resources(value, f"{path}.resources")
        elif name == "id":
            dev_id = dev_id if value is None else _str(value, f"{path}.id")
        elif name == "extension":
            if value is None:
                vfs, template = (), ""  # a nil *DeviceAllocationExtension
            else:
                vfs, template = _extension(value, f"{path}.extension", vfs, template)
    return DeviceAllocation(minor, resources, dev_id, vfs, template)


def _extension(value: Any, path: str, vfs: tuple[VirtualFunction, ...],
               template: str) -> tuple[tuple[VirtualFunction, ...], str]:
    if not isinstance(value, _Pairs):
        raise AnnotationError(path, f"must be an object, not {_kind(value)}")
    for key, v in value:
        name = _fold(key)
        if name == "vfs":
            if v is None:
                vfs = ()
            elif not isinstance(v, list) or isinstance(v, _Pairs):
                raise AnnotationError(f"{path}.vfs", f"must be an array, not {_kind(v)}")
            else:
                vfs = tuple(_vf(x, f"{path}.vfs[{i}]") for i, x in enumerate(v))
        elif name == _fold("gpuSharedResourceTemplate"):
            template = template if v is None else _str(v, f"{path}.gpuSharedResourceTemplate")
    return vfs, template


def _vf(value: Any, path: str) -> VirtualFunction:
    if value is None:
        return VirtualFunction(0, "")  # a struct element: null is its zero value
    if not isinstance(value, _Pairs):
        raise AnnotationError(path, f"must be an object, not {_kind(value)}")
    minor, bus_id = 0, ""
    for key, v in value:
        name = _fold(key)
        if name == "minor" and v is not None:
            minor = _int(v, f"{path}.minor", _INT64)
        elif name == _fold("busID") and v is not None:
            bus_id = _str(v, f"{path}.busID")
    return VirtualFunction(minor, bus_id)


def _resources(value: Any, path: str) -> dict[str, Decimal]:
    if not isinstance(value, _Pairs):
        raise AnnotationError(path, f"must be an object, not {_kind(value)}")
    out: dict[str, Decimal] = {}
    for name, q in value:
        at = f"{path}[{name}]"
        if q is None:
            out[name] = Decimal(0)  # Quantity.UnmarshalJSON: null is the zero quantity
            continue
        if isinstance(q, bool) or not isinstance(q, str | int | Decimal):
            raise AnnotationError(at, f"must be a quantity (string or number), not {_kind(q)}")
        try:
            out[name] = parse_quantity(q if isinstance(q, str) else format(q))
        except InvalidInput as e:
            raise AnnotationError(at, str(e)) from None
    return out


def _int(value: Any, path: str, bounds: tuple[int, int]) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise AnnotationError(path, f"must be an integer, not {_kind(value)}")
    if not bounds[0] <= value <= bounds[1]:
        raise AnnotationError(path, f"{value} is out of range")
    return value


def _str(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise AnnotationError(path, f"must be a string, not {_kind(value)}")
    return value


def _fold(name: str) -> str:
    """Go's encoding/json key folding, near enough: simple case folding per character (ſ is s, K is k)."""
    return "".join(c.upper().lower() if len(c.upper()) == 1 else c.lower() for c in name)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, _Pairs):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    return f"the number {value}"


def encode_device_allocations(allocations: Mapping[str, tuple[DeviceAllocation, ...] | list[DeviceAllocation]]) -> str:
    """The annotation value exactly as Go marshals DeviceAllocations: map keys sorted, struct fields in declaration
    order (minor, resources, id, extension{vfs, gpuSharedResourceTemplate}), `id`, `extension` and a VF's `minor`
    and `busID` omitted when empty; gpu-memory in binary units as fillGPUTotalMem writes it, every other quantity
    in canonical decimal form (resource.NewQuantity)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for dtype in sorted(allocations):
        items = []
        for a in allocations[dtype]:
            item: dict[str, Any] = {"minor": a.minor,
                                    "resources": {r: _quantity(r, a.resources[r]) for r in sorted(a.resources)}}
            if a.id:
                item["id"] = a.id
            ext: dict[str, Any] = {}
            if a.vfs:
                ext["vfs"] = [({"minor": v.minor} if v.minor else {}) | ({"busID": v.bus_id} if v.bus_id else {})
                              for v in a.vfs]
            if a.gpu_shared_resource_template:
                ext["gpuSharedResourceTemplate"] = a.gpu_shared_resource_template
            if ext:
                item["extension"] = ext
            items.append(item)
        out[dtype] = items
    return json.dumps(out, separators=(",", ":"))


@functools.lru_cache(maxsize=1024)  # a cluster writes the same few amounts again and again
def _quantity(resource: str, value: Decimal) -> str:
    if resource == RESOURCE_GPU_MEMORY and value == value.to_integral_value():
        return format_bytes(int(value))
    return canonical_quantity(format(value))

