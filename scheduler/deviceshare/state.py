"""Per-node device totals and per-minor usage from assigned pods' device-allocated annotations, kept incrementally."""

from __future__ import annotations

import contextlib
import copy
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from json.encoder import encode_basestring_ascii  # what json.dumps writes a string as
from operator import itemgetter
from typing import Any

from apis.core.errors import InvalidInput
from apis.core.objects import JSON
from apis.extension.device_allocated import (
    ANNOTATION_DEVICE_ALLOCATED,
    DeviceAllocation,
    VirtualFunction,
    decode_device_allocations,
    encode_device_allocations,
)
from apis.extension.device_allocated import Allocations as DecodedAllocations
from apis.extension.pod import device_allocations
from apis.scheduling.device import DEVICE_TYPE_GPU
from scheduler.cluster import NodeInfo, holds_resources, quantity_value, renamed_deprecated
from scheduler.podview import pod_view

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VF:
    minor: int
    bus_id: str


@dataclass(frozen=True)
class VFGroup:
    labels: dict[str, str]
    vfs: tuple[VF, ...]


@dataclass
class DeviceInfo:
    """One device as the allocator reads it; shared by the nodes of one DeviceLayout (read only). Its `id` is the
    node's own: NodeDeviceState.ids."""

    dtype: str
    minor: int
    total: dict[str, int]  # empty when unhealthy: such a device never fits and is dropped from totals
    labels: dict[str, str] = field(default_factory=dict)
    numa: int = 0
    pcie: str = ""
    has_topology: bool = False
    vf_groups: tuple[VFGroup, ...] = ()


@dataclass
class Allocation:
    minor: int
    resources: dict[str, int]
    vfs: list[VF] = field(default_factory=list)
    template: str = ""


Allocations = dict[str, list[Allocation]]


def read_allocations(raw: str) -> Allocations:
    """A `device-allocated` value as the working allocations the accounting adds and subtracts: quantities as
    integers (cpu in milli-cores), deprecated resource names renamed; AnnotationError when it is malformed."""
    return allocations_from(decode_device_allocations(raw))


def allocations_from(decoded: DecodedAllocations) -> Allocations:
    """The decoded annotation's allocations as the working ones (a `null` device list holds nothing)."""
    return {dtype: [Allocation(a.minor, {r: quantity_value(r, format(q)) for r, q in renamed_deprecated(
        dict(a.resources)).items()}, [VF(v.minor, v.bus_id) for v in a.vfs], a.gpu_shared_resource_template)
        for a in items] for dtype, items in decoded.items() if items}


def encode_allocations(allocs: Allocations, ids: dict[tuple[str, int], str]) -> str:
    """The `device-allocated` annotation koord-scheduler writes for these allocations, each device's `id` from `ids`
    (by type and minor). Encoded once per distinct allocation (minors, amounts, VFs, template, which ids are set)
    with a placeholder for each id, which is then filled in: nodes have their own ids, and pods repeat the rest."""
    order = [(dtype, a) for dtype, items in allocs.items() for a in items]
    named = [ids.get((dtype, a.minor), "") for dtype, a in order]
    key = tuple((dtype, a.minor, tuple(a.resources.items()), tuple((v.minor, v.bus_id) for v in a.vfs), a.template,
                 bool(n)) for (dtype, a), n in zip(order, named, strict=True))
    parts = _ENCODED.get(key)
    if parts is None:
        text = _encode(allocs, {(dtype, a.minor): f"{_MARK}{k}{_MARK}" for k, (dtype, a) in enumerate(order)}, ids)
        pieces = _PLACEHOLDER.split(text)  # text, the k of an id, text, ...
        if "\\u0000" in "".join(pieces[0::2]) or len(pieces) // 2 != sum(1 for n in named if n):
            return _encode(allocs, ids, ids)  # a value holding the mark itself: never remembered
        if len(_ENCODED) >= _ENCODED_SIZE:
            _ENCODED.clear()
        parts = _ENCODED[key] = (tuple(pieces[0::2]), tuple(int(k) for k in pieces[1::2]))
    texts, which = parts
    out = [texts[0]]
    for k, text in zip(which, texts[1:], strict=True):
        out.append(encode_basestring_ascii(named[k]))
        out.append(text)
    return "".join(out)


_MARK = "\x00"  # placeholders: a string no annotation the scheduler writes holds
_PLACEHOLDER = re.compile(r'"\\u0000(\d+)\\u0000"')  # a placeholder as JSON writes it (with its quotes)
_ENCODED: dict[tuple[object, ...], tuple[tuple[str, ...], tuple[int, ...]]] = {}  # see encode_allocations
_ENCODED_SIZE = 1024


def _encode(allocs: Allocations, named: dict[tuple[str, int], str], ids: dict[tuple[str, int], str]) -> str:
    """encode_device_allocations of the working allocations, an `id` written where `ids` has one (from `named`)."""
    return encode_device_allocations({dtype: [DeviceAllocation(a.minor, {r: Decimal(v) for r, v in a.resources.items()},
                                                               named[(dtype, a.minor)] if ids.get((dtype, a.minor))
                                                               else "",
                                                               tuple(VirtualFunction(v.minor, v.bus_id) for v in a.vfs),
                                                               a.template) for a in items]
                                      for dtype, items in allocs.items()})


def device_ids(decoded: DecodedAllocations) -> dict[tuple[str, int], str]:
    """Each allocated device's `id` by (type, minor), for writing the allocations back."""
    return {(dtype, a.minor): a.id for dtype, items in decoded.items() for a in items if a.id}


def parse_devices(device: JSON | None) -> dict[str, dict[int, DeviceInfo]]:
    """The Device CR's devices by type and minor (a later entry of a type and minor replaces an earlier one); an
    entry whose resources do not parse is logged and left out."""
    return _parse(device)[0]


_Listed = list[tuple[str, int, bool, dict[str, int]]]  # (type, minor, health, healthy amounts) per device entry


def _parse(device: JSON | None) -> tuple[dict[str, dict[int, DeviceInfo]], dict[tuple[str, int], str], bool,
                                         _Listed]:
    """(parse_devices, each device's id by type and minor, whether no entry was left out, the entries read as
    unused_totals lists them)."""
    out: dict[str, dict[int, DeviceInfo]] = {}
    ids: dict[tuple[str, int], str] = {}
    listed: _Listed = []
    clean = True
    for d in ((device or {}).get("spec") or {}).get("devices") or []:
        if not isinstance(d, dict) or not d.get("type"):
            continue
        try:
            healthy = _device_totals(d.get("resources") or {})[1]
        except InvalidInput as e:
            log.warning("Device %s: ignoring %s minor %s: %s", (device or {}).get("metadata", {}).get("name"),
                        d.get("type"), d.get("minor"), e)
            clean = False
            continue
        topo = d.get("topology")
        vf_groups = d.get("vfGroups")  # most devices have none: no generator set up for them
        groups = tuple(VFGroup(dict(g.get("labels") or {}),
                               tuple(VF(int(v.get("minor", 0)), str(v.get("busID", ""))) for v in g.get("vfs") or []))
                       for g in vf_groups) if vf_groups else ()
        labels = d.get("labels")
        place: JSON = topo if isinstance(topo, dict) else {}
        health = bool(d.get("health"))
        info = DeviceInfo(str(d["type"]), int(d.get("minor") or 0), healthy if health else {},  # shared: read only
                          dict(labels) if labels else {}, int(place.get("nodeID") or 0),
                          str(place.get("pcieID") or ""), isinstance(topo, dict), groups)
        out.setdefault(info.dtype, {})[info.minor] = info
        ids[(info.dtype, info.minor)] = str(d.get("id") or "")
        listed.append((info.dtype, info.minor, health, healthy))
    for dtype, minors in out.items():
        if any(a > b for a, b in zip(minors, list(minors)[1:], strict=False)):  # listed out of order
            out[dtype] = dict(sorted(minors.items()))
    return out, ids, clean, listed


class DeviceLayout:
    """What nodes whose Device CRs list the same devices (ids aside: type, minor, health, resources, topology,
    VF groups, labels) share, read only: the parsed devices, their free amounts and sums while no pod holds any, and
    the allocations DeviceShare made on such an unused node (`allocations`, kept by the plugin: on an unused node
    the allocation is a function of the layout, the pod's plan and the labels the allocator reads)."""

    def __init__(self, devices: dict[str, dict[int, DeviceInfo]], listed: _Listed) -> None:
        self.devices = devices
        # the very maps unused_totals gives for such a node (its sums, each device's amounts), so DeviceShare's
        # arrays see unchanged objects where the node's state, once built, has not changed them
        self.free = {t: {m: d.total for m, d in ds.items()} for t, ds in devices.items()}
        self.unused = _shared_sums(listed)  # unused_totals' (types, sums, GPUs) of such a node
        self.total_sum = self.unused[1]
        gpus = devices.get(DEVICE_TYPE_GPU, {})
        # what NodeDeviceState.totals reads of the devices themselves: the types present, each GPU's minor and health
        self.types = frozenset(t for t, ds in devices.items() if ds)
        self.gpu_minors, self.gpu_health = tuple(gpus), tuple(bool(d.total) for d in gpus.values())
        self.allocations: dict[tuple[object, ...], tuple[object, Allocations, Any, Any]] = {}


_LAYOUTS: dict[tuple[object, ...], DeviceLayout] = {}  # see device_layout
_LAYOUTS_SIZE = 256  # distinct device lists remembered; the nodes of one machine type repeat one


Layout = tuple[DeviceLayout, dict[tuple[str, int], str]]  # what device_layout gives


def device_layout(device: JSON | None) -> Layout:
    """(the node's DeviceLayout, each device's id by type and minor): parsed once per distinct device list (a
    node's first Filter parsed its 8 GPUs and 2 NICs every time, ~40 µs). A list is remembered only when every
    value the parse reads has its JSON type (so equal keys parse alike) and no entry was left out (whose warning
    each node logs); one equal to a remembered reference list (`matched_layout`) is not read further."""
    matched = matched_layout(device)
    if matched is not None:
        return matched[0], listed_ids(device, matched[1])
    key = _layout_key(device)
    if key is not None:
        layout = _LAYOUTS.get(key)
        if layout is not None:
            _refer(device, layout)
            return layout, listed_ids(device, _slots(device))
    layout, ids, clean = _parse_layout(device)
    if key is not None and clean:
        if len(_LAYOUTS) >= _LAYOUTS_SIZE:
            _LAYOUTS.clear()
        _LAYOUTS[key] = layout
        _refer(device, layout)
    return layout, ids


def _layout_key(device: JSON | None) -> tuple[object, ...] | None:
    """The key a device list is remembered under; None when it is not remembered."""
    key: list[object] = []
    for d in ((device or {}).get("spec") or {}).get("devices") or []:
        if not isinstance(d, dict) or not d.get("type"):
            continue
        got = _entry_key(d)
        if got is None:
            return None
        key.append(got)
    return tuple(key)


def _slots(device: JSON | None) -> _Slots:
    """Each parsed entry's (type, minor) in order, of a list `_layout_key` accepts."""
    return tuple((d["type"], int(d.get("minor") or 0)) for d in ((device or {}).get("spec") or {}).get("devices") or []
                 if isinstance(d, dict) and d.get("type"))


# Reference lists: a remembered layout's entries as first read (a copy), each entry as (its length, whether it has
# an id, a getter of every field but the id, their values), and each entry's (type, minor). A node's list equal to
# one of them entry by entry (the same fields, C-level == of every one but the id) is that layout; see _referable
# for why == is enough.
_Slots = tuple[tuple[str, int], ...]
_Reference = tuple[DeviceLayout, tuple[tuple[int, bool, Any, object], ...], _Slots]
_REFERENCES: list[_Reference] = []
_REFERENCES_SIZE = 16


def matched_layout(device: JSON | None) -> tuple[DeviceLayout, _Slots] | None:
    """(the layout, each entry's type and minor) of the reference list this CR's list equals, ids aside; None when
    none does. ~6 µs for 8 GPUs and 2 NICs where building the remembered key took ~20: nothing is built."""
    devices = ((device or {}).get("spec") or {}).get("devices")
    if type(devices) is not list:
        return None
    for layout, entries, slots in _REFERENCES:
        if len(devices) != len(entries):
            continue
        for d, (size, has_id, fields, values) in zip(devices, entries, strict=True):
            if type(d) is not dict or len(d) != size or type(d.get("minor")) is not int or (has_id and "id" not in d):
                break  # a minor of another type (1.0, true) is parsed on its own, as the key does
            try:
                if fields(d) != values:
                    break
            except KeyError:
                break
        else:
            return layout, slots
    return None


def listed_ids(device: JSON | None, slots: _Slots) -> dict[tuple[str, int], str]:
    """Each device's id by type and minor (`slots`: `_slots` of the list, or a matched reference's)."""
    devices = ((device or {}).get("spec") or {}).get("devices") or []
    if len(devices) != len(slots):  # entries the parse passes over (a matched list has none)
        devices = [d for d in devices if isinstance(d, dict) and d.get("type")]
    return {slot: str(d.get("id") or "") for slot, d in zip(slots, devices, strict=True)}


def _refer(device: JSON | None, layout: DeviceLayout) -> None:
    devices = ((device or {}).get("spec") or {}).get("devices")
    if type(devices) is not list or not _referable(devices):
        return
    if any(ref[0] is layout for ref in _REFERENCES):
        return
    if len(_REFERENCES) >= _REFERENCES_SIZE:
        del _REFERENCES[0]
    _UNMATCHED.clear()  # lists of sums given up on may match this one
    kept: list[JSON] = copy.deepcopy(devices)  # the node's objects may be replaced, ours are never changed
    entries = []
    for d in kept:
        fields = [k for k in d if k != "id"]
        getter = itemgetter(*fields)
        entries.append((len(d), "id" in d, getter, getter(d)))
    _REFERENCES.append((layout, tuple(entries), tuple((str(d["type"]), int(d["minor"])) for d in kept)))


def _strings(m: object) -> bool:
    return type(m) is dict and all(type(k) is str and type(v) is str for k, v in m.items())


def _referable(devices: list[Any]) -> bool:
    """Whether a list equal (==) to this one, entry by entry, is parsed alike. == takes 1, 1.0 and true for one
    another (and a map's keys so), so every value the parse reads through str() or keeps as it is must be a string
    here (a value equal to a string is that string): the type, pcieID and resources (strings already in a list the
    key remembers, the only ones referred to), a VF's busID, the labels; values read through int() or bool()
    (nodeID, a VF's minor, health) parse alike when equal. The minor is also checked to be an int on both sides,
    as the key does. Cluster objects are JSON: maps are dicts, lists are lists."""
    for d in devices:
        if type(d) is not dict or type(d.get("type")) is not str or not d["type"] or type(d.get("minor")) is not int:
            return False
        labels, groups = d.get("labels"), d.get("vfGroups")
        if labels and not _strings(labels):
            return False
        if groups:
            if type(groups) is not list:
                return False
            for g in groups:
                if type(g) is not dict or (g.get("labels") and not _strings(g["labels"])):
                    return False
                vfs = g.get("vfs") or []
                if type(vfs) is not list or not all(type(v) is dict and type(v.get("busID", "")) is str
                                                    for v in vfs):
                    return False
    return True


def parse_layout(device: JSON | None) -> tuple[DeviceLayout, dict[tuple[str, int], str]]:
    """`device_layout` parsed afresh, nothing remembered."""
    layout, ids, _ = _parse_layout(device)
    return layout, ids


def _parse_layout(device: JSON | None) -> tuple[DeviceLayout, dict[tuple[str, int], str], bool]:
    devices, ids, clean, listed = _parse(device)
    return DeviceLayout(devices, listed), ids, clean


def _entry_key(d: JSON) -> tuple[object, ...] | None:
    """What `_parse` reads of one device entry but its id, or None when a value is not of its JSON type (then two
    equal keys might parse differently, e.g. minor 1 and 1.0)."""
    t, minor, res = d.get("type"), d.get("minor"), d.get("resources")
    if type(t) is not str or not (minor is None or type(minor) is int):
        return None
    amounts: tuple[object, ...] = ()
    if res:
        if type(res) is not dict:
            return None
        amounts = tuple(res.items())
        if amounts not in _TOTALS:  # remembered there only as maps of strings (the parse puts it there)
            return None
    topo = d.get("topology")
    place: tuple[object, ...] | None = None
    if isinstance(topo, dict):
        numa, pcie = topo.get("nodeID"), topo.get("pcieID")
        if not ((numa is None or type(numa) is int) and (pcie is None or type(pcie) is str)):
            return None
        place = (numa, pcie)
    vfs, labels = d.get("vfGroups"), d.get("labels")
    return (t, int(minor or 0), bool(d.get("health")), amounts, place, repr(vfs) if vfs else None,
            repr(labels) if labels else None)


_TOTALS: dict[tuple[tuple[object, object], ...], tuple[dict[str, int], dict[str, int]]] = {}  # see _device_totals
_TOTALS_SIZE = 1024  # distinct device resource maps remembered; the devices of one model repeat one


def _device_totals(resources: object) -> tuple[dict[str, int], dict[str, int]]:
    """A device's `resources` as amounts (deprecated names renamed) and their positive part (what a healthy device
    offers), parsed once per distinct map of strings: every GPU of a model declares the same one; InvalidInput when
    a quantity cannot be read. Both dicts are shared: read them, never change them."""
    if not isinstance(resources, dict):
        return {}, {}
    shape: tuple[tuple[object, object], ...] | None = tuple(resources.items())
    try:
        known = _TOTALS.get(shape)  # type: ignore[arg-type]
    except TypeError:  # a value that is a list or an object
        shape, known = None, None
    if known is not None:  # only maps of strings are remembered, and no other map equals one of them
        return known
    total = {str(k): quantity_value(str(k), v) for k, v in renamed_deprecated(resources).items()}
    out = total, {k: v for k, v in total.items() if v > 0}
    if shape is not None and all(type(k) is str and type(v) is str for k, v in shape):
        if len(_TOTALS) >= _TOTALS_SIZE:
            _TOTALS.clear()
        _TOTALS[shape] = out
    return out


@dataclass(frozen=True)
class DeviceTotals:
    """What the vector stage reads of one node's devices (DeviceShare's per-node arrays): the types present, the
    summed totals and free per type, each GPU's health and free in minor order, the Device CR's labels and
    annotations. A NodeDeviceState gives it (`totals()`), and so does `unused_totals` straight from the Device CR
    when no pod on the node holds devices — without the per-device records, built only for nodes a pod is tried on."""

    types: frozenset[str]  # every type with a device, healthy or not
    total_sum: dict[str, dict[str, int]]
    free_sum: dict[str, dict[str, int]]
    gpus: tuple[tuple[bool, dict[str, int]], ...]  # (healthy, free) per GPU, by minor
    labels: dict[str, str]
    annotations: dict[str, str]


_Sums = tuple[frozenset[str], dict[str, dict[str, int]], tuple[tuple[bool, dict[str, int]], ...]]
_SUMS: dict[tuple[tuple[str, int, bool, int], ...], tuple[_Sums, list[dict[str, int]]]] = {}  # see unused_totals
_SUMS_SIZE = 256  # distinct device lists remembered; the nodes of one machine type repeat one


def unused_totals(device: JSON | None) -> DeviceTotals:
    """`NodeDeviceState(node).totals()` of a node none of whose pods holds devices, read from its Device CR in one
    pass and shared by every node whose devices declare the same types, minors, health and resources (a cold start
    over 1 000 nodes × 10 devices built 10 000 DeviceInfo records). Raises whatever reading a device entry raises
    (InvalidInput for a quantity among them): the caller then builds the node's full state, which reports or
    raises as it always did. The dicts are shared: read them, never change them."""
    listed: _Listed = []
    for d in ((device or {}).get("spec") or {}).get("devices") or []:
        if not isinstance(d, dict) or not d.get("type"):
            continue
        healthy = _device_totals(d.get("resources") or {})[1]
        listed.append((str(d["type"]), int(d.get("minor") or 0), bool(d.get("health")), healthy))
    types, sums, gpus = _shared_sums(listed)
    meta = (device or {}).get("metadata") or {}
    return DeviceTotals(types, sums, sums, gpus, dict(meta.get("labels") or {}),
                        dict(meta.get("annotations") or {}))


# the sums (unused_totals, shared by lists of the same devices and amounts) of remembered lists that matched no
# reference even after being parsed: prepare() does not try their like again until a reference is added (a cost guard
# only: such a node's first Filter reads its key as before)
_UNMATCHED: set[int] = set()


def unused_layout(device: JSON | None) -> tuple[DeviceTotals, tuple[DeviceLayout, _Slots] | None]:
    """(unused_totals(device), the matched reference's layout and slots, None when none matched): a CR whose list
    matches is read by comparison only, and its node's state, built on its first Filter, takes the layout without
    reading the CR again. A list matching none is read by unused_totals and, when the key remembers it, parsed once
    to become a reference for the nodes that follow. Raises as unused_totals does."""
    matched = matched_layout(device)
    if matched is None:
        totals = unused_totals(device)  # raises for an entry the parse would leave out (and log)
        if id(totals.total_sum) in _UNMATCHED:
            return totals, None
        if _layout_key(device) is None:  # not remembered: the node's first Filter parses it, as before
            return totals, None
        with contextlib.suppress(InvalidInput, ValueError, TypeError, AttributeError):
            device_layout(device)  # parsed once, then matched (the node's full state raises it as it always did)
        matched = matched_layout(device)
        if matched is None:  # remembered but not one to refer to: its like are read as before
            if len(_UNMATCHED) >= _SUMS_SIZE:
                _UNMATCHED.clear()
            _UNMATCHED.add(id(totals.total_sum))
        return totals, matched
    types, sums, gpus = matched[0].unused
    meta = (device or {}).get("metadata") or {}
    return DeviceTotals(types, sums, sums, gpus, dict(meta.get("labels") or {}),
                        dict(meta.get("annotations") or {})), matched


def _shared_sums(listed: _Listed) -> _Sums:
    """`_sums(listed)`, one object for every list of the same types, minors, health and (shared) amounts."""
    shape = tuple((t, m, ok, id(healthy)) for t, m, ok, healthy in listed)
    known = _SUMS.get(shape)
    if known is None:
        if len(_SUMS) >= _SUMS_SIZE:
            _SUMS.clear()
        known = _SUMS[shape] = (_sums(listed), [healthy for _, _, _, healthy in listed])  # the ids stay taken
    return known[0]


def _sums(listed: _Listed) -> _Sums:
    """(types, summed totals per type, (healthy, free) per GPU by minor) of unused devices; a later entry of the
    same type and minor replaces an earlier one, as parse_devices does."""
    by_type: dict[str, dict[int, dict[str, int]]] = {}
    for t, minor, ok, healthy in listed:
        by_type.setdefault(t, {})[minor] = healthy if ok else {}
    sums: dict[str, dict[str, int]] = {}
    for t, minors in by_type.items():
        into = sums[t] = {}
        for amounts in minors.values():
            for r, v in amounts.items():
                into[r] = into.get(r, 0) + v
    gpus = by_type.get(DEVICE_TYPE_GPU) or {}
    return frozenset(by_type), sums, tuple((bool(f), f) for _, f in sorted(gpus.items()))


class NodeDeviceState:
    """One node's devices with free/used per minor; add/remove adjust only the minors an allocation touches."""

    def __init__(self, node: NodeInfo, on_change: Callable[[str], None] | None = None,
                 layout: Layout | None = None) -> None:
        """`layout`: device_layout(node.device), when the caller has it."""
        self.name = node.name
        self.on_change = on_change  # called with the node name whenever used/free change
        self.device_obj = node.device
        self.layout, self.ids = device_layout(node.device) if layout is None else layout
        self.devices = self.layout.devices  # shared: read only
        self.used: dict[str, dict[int, dict[str, int]]] = {t: {} for t in self.devices}
        # a minor's free map is replaced, never changed in place: they start as the layout's
        self.free: dict[str, dict[int, dict[str, int]]] = {t: dict(f) for t, f in self.layout.free.items()}
        self.total_sum = self.layout.total_sum  # shared: read only
        self.free_sum = {t: dict(s) for t, s in self.total_sum.items()}
        self.used_vfs: dict[str, set[str]] = {}
        # every accounted pod key → its allocations (may be empty): the pods with a device-allocated annotation,
        # those we reserved, and those that had one before being replaced under their key
        self.pods: dict[str, Allocations] = {}
        self.inflight: set[str] = set()  # reserved by us, not yet among node.pods
        self.malformed: dict[str, str] = {}  # pod key → why its device-allocated annotation was ignored
        self.version = 0
        self.synced_pods: tuple[int, int] = (-1, -1)  # (pod count, NodeInfo.generation) last reconciled
        self.objs: dict[str, JSON] = {}  # pod key → the pod object its allocations were read from
        self.labels = dict(((node.device or {}).get("metadata") or {}).get("labels") or {})
        self.annotations = dict(((node.device or {}).get("metadata") or {}).get("annotations") or {})
        self.partition_cache: Any = None  # filled lazily by the allocator
        self.topology_cache: Any = None

    def totals(self) -> DeviceTotals:
        """The vector stage's view of this node (shares this state's dicts: read it at once)."""
        layout, free = self.layout, self.free.get(DEVICE_TYPE_GPU, {})  # every GPU has its free map
        return DeviceTotals(layout.types, self.total_sum, self.free_sum,
                            tuple(zip(layout.gpu_health, map(free.__getitem__, layout.gpu_minors), strict=True)),
                            self.labels, self.annotations)

    def unused(self) -> bool:
        """No device of the node is held (in part): every free amount is its layout's."""
        return not any(self.used.values()) and not any(self.used_vfs.values())

    def is_used(self, dtype: str, minor: int) -> bool:
        return any(v > 0 for v in self.used.get(dtype, {}).get(minor, {}).values())

    def add(self, pod_key: str, allocs: Allocations) -> None:
        if pod_key in self.pods:
            self.remove(pod_key)
        self.pods[pod_key] = allocs
        if allocs:  # a pod holding no device changes nothing (most pods: a node's first Filter counts them all)
            self._apply(allocs, 1)

    def remove(self, pod_key: str) -> None:
        allocs = self.pods.pop(pod_key, None)
        self.objs.pop(pod_key, None)
        self.inflight.discard(pod_key)
        self.malformed.pop(pod_key, None)
        if allocs:
            self._apply(allocs, -1)

    def _apply(self, allocs: Allocations, sign: int) -> None:
        self.version += 1
        if self.on_change is not None:
            self.on_change(self.name)
        for dtype, items in allocs.items():
            used = self.used.setdefault(dtype, {})
            vfs = self.used_vfs.setdefault(dtype, set())
            for a in items:
                u = used.setdefault(a.minor, {})
                for r, v in a.resources.items():
                    u[r] = u.get(r, 0) + sign * v
                if not any(u.values()):
                    used.pop(a.minor, None)
                for vf in a.vfs:
                    (vfs.add if sign > 0 else vfs.discard)(vf.bus_id)
                self._refresh_free(dtype, a.minor)

    def _refresh_free(self, dtype: str, minor: int) -> None:
        info = self.devices.get(dtype, {}).get(minor)
        if info is None:
            return
        used = self.used.get(dtype, {}).get(minor, {})
        old = self.free[dtype][minor]
        new = {r: max(0, t - used.get(r, 0)) for r, t in info.total.items()}
        sums = self.free_sum[dtype]
        for r in new:
            sums[r] += new[r] - old.get(r, 0)
        self.free[dtype][minor] = new


class DeviceState:
    """Cluster-wide DeviceShare bookkeeping: one NodeDeviceState per node, synchronised lazily with NodeInfo.

    A node's state is (re)built from its pods' annotations the first time it is seen and whenever its Device CR
    object is replaced; afterwards pods are reconciled only when the node's pod count changed, so scheduling a pod
    costs work on the chosen node only. Callers that replace a pod in place (same count) use pod_removed().
    """

    def __init__(self) -> None:
        self.nodes: dict[str, NodeDeviceState] = {}
        self.listeners: list[Callable[[str], None]] = []  # told the name of every node whose state changed
        # node → (its Device CR, unused_totals of it, the matched reference's layout and slots): the node's state,
        # built on its first Filter, takes the layout rather than reading the CR again
        self._unused: dict[str, tuple[JSON | None, DeviceTotals, tuple[DeviceLayout, _Slots] | None]] = {}

    def _changed(self, node_name: str) -> None:
        for listener in self.listeners:
            listener(node_name)

    def node(self, node: NodeInfo) -> NodeDeviceState:
        st = self.nodes.get(node.name)
        if st is None or st.device_obj is not node.device:
            old = st
            last = self._unused.get(node.name)
            matched = last[2] if last is not None and last[0] is node.device else None
            st = NodeDeviceState(node, self._changed, None if matched is None else (
                matched[0], listed_ids(node.device, matched[1])))
            self.nodes[node.name] = st
            self._changed(node.name)
            if old is not None:  # keep our in-flight reservations across a Device CR update
                for k in old.inflight:
                    st.add(k, old.pods[k])
                    st.inflight.add(k)
        if st.synced_pods != (len(node.pods), node.generation):
            self._reconcile(st, node)
        return st

    def totals(self, node: NodeInfo) -> DeviceTotals:
        """`self.node(node).totals()`, without building the node's state while none of its pods holds devices
        (a cold start: the state is built on the node's first Filter or Reserve, equal to an eager one)."""
        if node.name not in self.nodes and not any(_holds_devices(p) for p in node.pods.values()):
            last = self._unused.get(node.name)
            if last is not None and last[0] is node.device:  # a CPU pod placed on it changes no device
                return last[1]
            try:
                totals, matched = unused_layout(node.device)
            except (InvalidInput, ValueError, TypeError, AttributeError):
                pass  # the full state reports it (or raises) as it always did
            else:
                self._unused[node.name] = (node.device, totals, matched)
                return totals
        got = self.node(node).totals()
        self._unused.pop(node.name, None)
        return got

    def _reconcile(self, st: NodeDeviceState, node: NodeInfo) -> None:
        count, generation = len(node.pods), node.generation
        if (st.inflight and count == st.synced_pods[0] + 1 and generation == st.synced_pods[1] + 1
                and self._bound(st, node)):
            st.synced_pods = (count, generation)
            return
        for k in [k for k in st.pods if k not in node.pods and k not in st.inflight]:
            st.remove(k)
        for k, pod in node.pods.items():
            if k in st.inflight:
                st.inflight.discard(k)
                st.objs[k] = pod
            elif k in st.pods:
                if st.objs.get(k) is not pod:  # replaced under its key
                    st.add(k, self._pod_allocations(st, k, pod))
                    st.objs[k] = pod
            elif _holds_devices(pod):  # a pod with no device-allocated annotation holds nothing: not accounted
                st.add(k, self._pod_allocations(st, k, pod))
                st.objs[k] = pod
        st.synced_pods = (count, generation)

    @staticmethod
    def _bound(st: NodeDeviceState, node: NodeInfo) -> bool:
        """The one change since the last reconcile (one pod more, one NodeInfo.generation step: an add_pod) was
        one of our reserved pods arriving: it is taken as held since Reserve, nothing else to read. A key still in
        flight is never among node.pods when reconciled or reserved, so one found there now is the pod added."""
        for k in st.inflight:
            pod = node.pods.get(k)
            if pod is not None:
                st.inflight.discard(k)
                st.objs[k] = pod
                return True
        return False

    @staticmethod
    def _pod_allocations(st: NodeDeviceState, pod_key: str, pod: JSON) -> Allocations:
        raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_DEVICE_ALLOCATED)
        if not raw or not holds_resources(pod):
            return {}
        try:
            return allocations_from(device_allocations(pod_view(pod)) or {})
        except InvalidInput as e:
            st.malformed[pod_key] = str(e)
            log.warning("node %s: ignoring malformed %s on pod %s: %s", st.name, ANNOTATION_DEVICE_ALLOCATED,
                        pod_key, e)
            return {}

    def reserve(self, node: NodeInfo, pod_key: str, allocs: Allocations) -> None:
        st = self.node(node)
        st.add(pod_key, allocs)
        if pod_key not in node.pods:
            st.inflight.add(pod_key)
        else:
            st.objs[pod_key] = node.pods[pod_key]

    def pod_removed(self, node_name: str, pod_key: str) -> None:
        """Forget a pod's allocations (deleted, terminated or unreserved)."""
        st = self.nodes.get(node_name)
        if st is not None:
            st.remove(pod_key)


def _holds_devices(pod: JSON) -> bool:
    """The pod carries a device-allocated annotation (whether it still holds resources is the state's to judge)."""
    return bool(((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_DEVICE_ALLOCATED))
