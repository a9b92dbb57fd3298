"""The extender's Reservations: the book kept in step with watched objects, status written back."""

from __future__ import annotations

import logging

from apis.client.kubeapi import KubeClient
from apis.core.errors import InvalidInput, KoordletError
from apis.core.objects import JSON
from apis.scheduling.reservation import ANNOTATION_RESERVATION_ALLOCATED, decode_reservation_allocated
from scheduler.cluster import key
from scheduler.framework import Scheduler
from scheduler.reservation.model import AVAILABLE, Reservation, place, release
from scheduler.reservation.model import load as load_book
from scheduler.reservation.plugin import NAME, ReservationPlugin

log = logging.getLogger(__name__)

RESERVATION = "/apis/scheduling.koordinator.sh/v1alpha1/reservations/{name}"


def _plugin(sched: Scheduler) -> ReservationPlugin | None:
    return sched.plugin(NAME, ReservationPlugin)


def load(sched: Scheduler) -> None:
    """(Re)build the book from `cluster.reservations` and the assigned pods (owners via `reservation-allocated`):
    the old reserve pods leave their nodes, each available reservation's goes back with what is unallocated."""
    resv = _plugin(sched)
    if resv is None:
        return
    cluster = sched.cluster
    old = resv.book
    for r in old.values():
        node = cluster.nodes.get(str(r.node)) if r.node else None
        if node is not None and r.pod_key in node.pods:
            node.remove_pod(r.pod_key)
    resv.bind(cluster)  # loads when the cluster is new to the plugin
    if resv.book is old:
        resv.book = load_book(cluster, list(cluster.reservations))


def on_node(sched: Scheduler, node: str) -> bool:
    """Whether a listed reservation is (said to be) placed on the node."""
    return _plugin(sched) is not None and any(
        ((o.get("status") or {}).get("nodeName")) == node for o in sched.cluster.reservations)


def owner_gone(sched: Scheduler, pod: JSON) -> None:
    """A deleted or finished owner: its share returns to an Available reservation (status.allocated and
    currentOwners shrink); a Succeeded one (allocateOnce) stays Succeeded, as upstream's is final."""
    resv = _plugin(sched)
    if resv is None:
        return
    k, cluster = key(pod), sched.cluster
    for r in resv.book.values():
        if k not in r.owners:
            continue
        release(r, pod)
        r.dirty = True
        node = cluster.nodes.get(str(r.node)) if r.node else None
        if r.phase == AVAILABLE and node is not None:
            node.remove_pod(r.pod_key)
            place(r, cluster)


def status_patch(sched: Scheduler, annotations: dict[str, str]) -> tuple[str, dict[str, str], JSON] | None:
    """(name, annotations to add, status) of the reservation a just-bound pod was served from, or None."""
    resv = _plugin(sched)
    raw = annotations.get(ANNOTATION_RESERVATION_ALLOCATED)
    if resv is None or not raw:
        return None
    try:
        ref = decode_reservation_allocated(raw)
    except InvalidInput:
        return None
    r = resv.book.get(ref.name)
    if r is None:
        return None
    r.dirty = False
    return r.name, changed_annotations(r), r.status()


def changed_annotations(r: Reservation) -> dict[str, str]:
    """The annotations (devices and CPUs held) the object does not show yet."""
    have = (r.obj.get("metadata") or {}).get("annotations") or {}
    return {k: v for k, v in r.annotations.items() if have.get(k) != v}


def write(client: KubeClient, name: str, extra: dict[str, str], status: JSON) -> bool:
    """A merge patch of the object's annotations (when any differ), then of its status subresource (the CRD
    declares one); False when the API refused (logged)."""
    path = RESERVATION.format(name=name)
    try:
        if extra:
            client.patch(path, {"metadata": {"annotations": extra}})
        client.patch(f"{path}/status", {"status": status})
    except KoordletError as e:
        log.warning("updating Reservation %s: %s", name, e)
        return False
    return True
