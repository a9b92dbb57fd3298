"""The CPUs and NUMA resources a reservation still holds: what NodeNUMAResource gave its reserve pod when it was
placed (its `resource-status`) less what its owners took.

Upstream pkg/scheduler/plugins/nodenumaresource/reservation.go (RestoreReservation): the remaining CPUs are the
reserved cpuset less every assigned owner's cpuset, the remaining NUMA resources the reserved ones less the owners'.
**[decision]** a remaining amount is clipped at 0 (upstream subtracts without clipping there), since what a
reservation holds on a NUMA node cannot be negative; the Reservation object's own `resource-status` stays what was
reserved, as upstream never rewrites it.
"""

from __future__ import annotations

import logging

from apis.core.errors import InvalidInput
from apis.core.objects import JSON
from apis.core.resources import CPU, MEMORY
from apis.extension.pod import pod_resource_status
from apis.extension.resource_status import (
    ANNOTATION_RESOURCE_STATUS,
    ResourceStatus,
    encode_resource_status,
    resource_status,
)
from scheduler.podview import pod_view

log = logging.getLogger(__name__)

# A pod's CPUs and, per NUMA node, its cpu (millicores) and memory (bytes), as its resource-status says.
Held = tuple[frozenset[int], dict[int, dict[str, int]]]


def _held(annotations: dict[str, str]) -> Held | None:
    try:
        return _held_of(resource_status(annotations))
    except InvalidInput as e:
        log.warning("%s unreadable: %s", ANNOTATION_RESOURCE_STATUS, e)
        return None


def _held_of(st: ResourceStatus) -> Held | None:
    numa: dict[int, dict[str, int]] = {}
    for n in st.numa_node_resources:
        acc = numa.setdefault(n.node, {})
        for r, v in n.resources.items():
            if r in (CPU, MEMORY):
                acc[r] = acc.get(r, 0) + int(v * 1000 if r == CPU else v)
    cpus = frozenset(st.cpus())
    return (cpus, numa) if cpus or numa else None


def pod_held(pod: JSON) -> Held | None:
    """What a pod's resource-status gives it; None when it has none (or it does not parse)."""
    view = pod_view(pod)
    if ANNOTATION_RESOURCE_STATUS not in view.annotations:
        return None
    try:
        return _held_of(pod_resource_status(view))
    except InvalidInput as e:
        log.warning("%s unreadable: %s", ANNOTATION_RESOURCE_STATUS, e)
        return None


def remaining(reserved: str, taken: list[Held]) -> tuple[str, frozenset[int]]:
    """(the resource-status of what is left of `reserved` once every owner's share is subtracted, the CPUs left).
    An unreadable `reserved` is kept as it is and holds no CPUs for owners."""
    have = _held({ANNOTATION_RESOURCE_STATUS: reserved})
    if have is None:
        return reserved, frozenset()
    if not taken:
        return reserved, have[0]
    cpus = have[0].difference(*(t[0] for t in taken))
    left = {i: {r: max(0, v - sum(t[1].get(i, {}).get(r, 0) for t in taken)) for r, v in held.items()}
            for i, held in have[1].items()}
    return encode_resource_status(cpus, left), frozenset(cpus)
