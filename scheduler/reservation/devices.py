"""The devices a reservation still holds: what it reserved (its `device-allocated`) less what its owners took.

Upstream pkg/scheduler/plugins/deviceshare/reservation.go (RestoreReservation): `remained` = the reserve pod's
devices − the assigned owners' devices on the same minors (appendAllocatedByHints); the Reservation object's
`device-allocated` annotation is never rewritten (it stays what was reserved), so neither is ours.
"""

from __future__ import annotations

import logging

from apis.core.errors import InvalidInput
from apis.core.objects import JSON
from apis.extension.device_allocated import ANNOTATION_DEVICE_ALLOCATED, decode_device_allocations
from apis.extension.pod import device_allocations
from scheduler.deviceshare.state import (
    Allocation,
    Allocations,
    allocations_from,
    device_ids,
    encode_allocations,
)
from scheduler.podview import pod_view

log = logging.getLogger(__name__)


def pod_devices(pod: JSON) -> Allocations:
    """A pod's `device-allocated`, empty when absent or unreadable."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_DEVICE_ALLOCATED)
    if not raw:
        return {}
    try:
        return allocations_from(device_allocations(pod_view(pod)) or {})
    except InvalidInput:
        return {}


def remaining(reserved: str, taken: list[Allocations]) -> tuple[str, Allocations]:
    """(encoded, decoded) devices left of `reserved` once every allocation in `taken` is subtracted per minor
    (amounts clipped at 0; VFs taken by bus ID); a device with nothing left is dropped. An unreadable
    `reserved` is kept as it is (and holds nothing for owners)."""
    try:
        decoded = decode_device_allocations(reserved)
    except InvalidInput as e:
        log.warning("reservation device-allocated %r unreadable: %s", reserved, e)
        return reserved, {}
    have, ids = allocations_from(decoded), device_ids(decoded)
    if not any(taken):
        return reserved, have
    out: Allocations = {}
    for dtype, items in have.items():
        used: dict[int, dict[str, int]] = {}
        used_vfs: set[str] = set()
        for t in taken:
            for a in t.get(dtype, []):
                u = used.setdefault(a.minor, {})
                for r, v in a.resources.items():
                    u[r] = u.get(r, 0) + v
                used_vfs.update(vf.bus_id for vf in a.vfs)
        kept: list[Allocation] = []
        for a in items:
            u = used.get(a.minor, {})
            left = {r: max(0, v - u.get(r, 0)) for r, v in a.resources.items()}
            vfs = [vf for vf in a.vfs if vf.bus_id not in used_vfs]
            if not any(left.values()) or (a.vfs and not vfs):
                continue
            kept.append(Allocation(a.minor, {r: v for r, v in left.items() if v}, vfs, a.template))
        if kept:
            out[dtype] = kept
    return encode_allocations(out, ids), out
