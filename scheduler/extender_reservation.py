"""The extender's Reservations: the book kept in step with watched objects, owner cycles, status written back."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from apis.client.kubeapi import KubeClient
from apis.core.errors import InvalidInput, KoordletError
from apis.core.objects import JSON
from apis.scheduling.reservation import ANNOTATION_RESERVATION_ALLOCATED, decode_reservation_allocated
from scheduler.cluster import NodeInfo, is_reserve_pod, key
from scheduler.framework import Placement, Scheduler
from scheduler.reservation.model import AVAILABLE, place, release
from scheduler.reservation.model import load as load_book

log = logging.getLogger(__name__)

RESERVATION = "/apis/scheduling.koordinator.sh/v1alpha1/reservations/{name}"
__all__ = ["cycle", "idle_weight", "is_reserve_pod", "load", "on_node", "owner_gone", "status_patch", "write"]


def _plugin(sched: Scheduler) -> Any | None:
    return sched.plugin("Reservation")


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


@contextmanager
def cycle(sched: Scheduler, pod: JSON) -> Iterator[list[Placement]]:
    """One scheduling cycle's begin/end around an extender verb, as Scheduler.schedule does: an owner sees its
    matched reservations' resources free meanwhile. Append the Placement when the pod was reserved on a node
    (the reservation then accounts it); otherwise everything goes back as it was."""
    hooks = [p for p in sched.plugins() if hasattr(p, "begin_cycle")]
    outcome: list[Placement] = []
    for h in hooks:
        h.begin_cycle(pod, sched.cluster)
    try:
        yield outcome
    finally:
        for h in hooks:
            h.end_cycle(pod, outcome[0] if outcome else None)


def idle_weight(sched: Scheduler, pod: JSON, nodes: list[NodeInfo]) -> int:
    """The Reservation score's weight when it scores every node 0 (no reservation serves the pod), else 0.

    **[decision]** its default weight is 5000: counted while idle, it would squash every other plugin's score
    to 0 on kube-scheduler's 0..10 scale; a constant 0 changes no ranking, so it is left out of the scale then."""
    resv = _plugin(sched)
    if resv is None or resv not in sched.scorers or any(resv.score(pod, n, sched.cluster) for n in nodes):
        return 0
    return int(resv.weight)


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
    have = (r.obj.get("metadata") or {}).get("annotations") or {}
    extra = {k: v for k, v in r.annotations.items() if have.get(k) != v}
    r.dirty = False
    return r.name, extra, r.status()


def write(client: KubeClient, name: str, extra: dict[str, str], status: JSON) -> None:
    """A merge patch of the object's annotations (when any differ), then of its status subresource, as `run`."""
    path = RESERVATION.format(name=name)
    try:
        if extra:
            client.patch(path, {"metadata": {"annotations": extra}})
        client.patch(f"{path}/status", {"status": status})
    except KoordletError as e:
        log.warning("updating Reservation %s: %s", name, e)
