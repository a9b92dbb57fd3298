"""`run`'s scheduling queue: a pod that failed waits (kube-scheduler's unschedulablePods) until a cluster event its
rejecting plugins registered arrives (scheduler.queue.hints), the pod itself is updated, its gang is activated, or it
has waited podMaxInUnschedulablePodsDuration; the queue timestamps and GangGroup times the queue sort reads.

Events are told apart by comparing each cycle's snapshot with the last one (object versions per store), so a
re-listing `run` and a watching one see the same events. kube-scheduler's backoff (1–10 s) is not kept: a pod
moved by an event is tried in the next cycle.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from apis.core.objects import JSON
from apis.core.podaffinity import has_pod_affinity
from scheduler.cluster import key
from scheduler.gang.model import gang_id_of
from scheduler.gang.queuesort import QueueState
from scheduler.interfaces import Placement
from scheduler.queue.hints import ADD, DELETE, UPDATE, ClusterEvent, requeues

MAX_IN_UNSCHEDULABLE_SECONDS = 300.0  # kube-scheduler's podMaxInUnschedulablePodsDuration default (5 min)


@dataclass
class Waiting:
    """An unschedulable pod: the plugins that rejected it, since when (monotonic), and whether an event moved it."""

    plugins: frozenset[str]
    since: float
    moved: bool = False


def _version(obj: JSON) -> str:
    meta = obj.get("metadata") or {}
    rv = meta.get("resourceVersion")
    return str(rv) if rv else json.dumps(obj, sort_keys=True, default=str)


def _pod_fingerprint(pod: JSON) -> str:
    """What kube-scheduler's isPodUpdated compares: the pod without its status, resourceVersion, generation and
    managedFields (so the PodScheduled condition we write is no update)."""
    meta = {k: v for k, v in (pod.get("metadata") or {}).items()
            if k not in ("resourceVersion", "generation", "managedFields")}
    return json.dumps({"metadata": meta, "spec": pod.get("spec")}, sort_keys=True, default=str)


def _utc(now: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))


class SchedulingQueue:
    """Across `run`'s cycles: which pending pods wait, the events seen, the queue's memory for the sort."""

    def __init__(self, hints: Mapping[str, frozenset[ClusterEvent]], kinds: Mapping[str, str], pending_store: str,
                 assigned_store: str, *, max_unschedulable: float = MAX_IN_UNSCHEDULABLE_SECONDS,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.hints = dict(hints)
        self.kinds = dict(kinds)  # store name → kind
        self.pending_store, self.assigned_store = pending_store, assigned_store
        self.max_unschedulable = max_unschedulable
        self.clock, self.wall = clock, wall
        self.state = QueueState()
        self.waiting: dict[str, Waiting] = {}
        self._seen: dict[str, dict[str, str]] | None = None  # store → object key → version, of the last cycle
        self._pending: dict[str, str] = {}  # pending pod key → fingerprint
        self._gangs: dict[str, str | None] = {}  # pending pod key → gang id
        self._affinity: dict[str, bool] = {}  # pending pod key → has pod (anti-)affinity terms
        self._placed_reservations: set[str] = set()  # keys of the Reservations with a node, of the last cycle

    # -- events ---------------------------------------------------------------------------------------------------
    def observe(self, by_store: Mapping[str, list[JSON]]) -> list[ClusterEvent]:
        """Compare the cycle's snapshot with the last one; move the waiting pods the changes can help. Returns the
        cluster events seen (none on the first call: nothing waits yet)."""
        seen = {store: {key(o): _version(o) for o in objects} for store, objects in by_store.items()
                if store != self.pending_store}
        before, self._seen = self._seen, seen
        placed_before, self._placed_reservations = self._placed_reservations, {
            key(r) for store, objects in by_store.items() if self.kinds.get(store) == "Reservation"
            for r in objects if (r.get("status") or {}).get("nodeName")}
        self._observe_pending(by_store.get(self.pending_store, []), first=before is None)
        if before is None:
            return []
        events: dict[ClusterEvent, None] = {}  # each kind of change once, in the order first seen
        for store, now in seen.items():
            kind = self.kinds.get(store, store)
            old = before.get(store, {})
            for k, version in now.items():
                if k not in old or old[k] != version:
                    events[ClusterEvent(kind, ADD if k not in old else UPDATE)] = None
                    if kind == "PodGroup":
                        self._activate(k)  # the gang cache's onPodGroupAdd/Update
            for k in old.keys() - now.keys():
                events[ClusterEvent(kind, DELETE)] = None
                if kind == "Reservation" and k in placed_before:
                    # its reserve pod leaves the scheduler's cache: an assigned pod deleted for every plugin
                    # (frameworkext/eventhandlers/reservation_handler.go deleteReservationFromSchedulerCache)
                    events[ClusterEvent("Pod", DELETE)] = None
        for event in events:
            self._move(event)
        return list(events)

    def _move(self, event: ClusterEvent) -> None:
        affinity_only = event.resource == "Pod" and event.action in (ADD, UPDATE)  # AssignedPodAdded/-Updated
        for k, w in self.waiting.items():
            if w.moved or (affinity_only and not self._affinity.get(k, False)):
                continue
            if requeues(w.plugins, event, self.hints):
                w.moved = True

    def _observe_pending(self, pods: list[JSON], first: bool) -> None:
        now = {key(p): _pod_fingerprint(p) for p in pods}
        self._affinity = {key(p): has_pod_affinity(p) for p in pods}
        self._gangs = {key(p): gang_id_of(p) for p in pods}
        for p in pods:
            k = key(p)
            if first or k not in self._pending:
                gid = gang_id_of(p)
                if gid is not None and not first:
                    self._activate(gid)  # a member created: the gang cache activates its gang
            elif self._pending[k] != now[k] and k in self.waiting:
                self.waiting[k].moved = True  # the pod itself was updated
        for k in self._pending.keys() - now.keys():  # bound elsewhere or deleted: no longer ours to wait
            self.waiting.pop(k, None)
            self.state.timestamps.pop(k, None)
            self.state.child_cycles.pop(k, None)
        self._pending = now

    def _activate(self, gang_id: str) -> None:
        for k, w in self.waiting.items():
            if self._gangs.get(k) == gang_id:
                w.moved = True

    # -- a cycle ------------------------------------------------------------------------------------------------
    def due(self, pods: list[JSON], unit: Callable[[JSON], str]) -> list[JSON]:
        """The pending pods this cycle tries: never tried, moved by an event, or waiting longer than
        podMaxInUnschedulablePodsDuration (the periodic flush); a unit's (GangGroup's) members all together when
        one of them is due (v1.7's NextPod hands out every pending member after the first)."""
        now = self.clock()
        chosen: set[str] = set()
        for p in pods:
            w = self.waiting.get(key(p))
            if w is None or w.moved or now - w.since >= self.max_unschedulable:
                chosen.add(unit(p))
        return [p for p in pods if unit(p) in chosen]

    def record(self, placements: Iterable[Placement], errors: set[str], unit: Callable[[JSON], str],
               pods: Mapping[str, JSON]) -> None:
        """After a cycle: a placed pod leaves the queue; one not placed waits (a bind error is retried next cycle)
        with a new queue timestamp, and its GangGroup's LastScheduleTime moves to now (all its members were tried)."""
        now, stamp = self.clock(), _utc(self.wall())
        for p in placements:
            if p.node is not None:
                self.waiting.pop(p.pod, None)
                self.state.timestamps.pop(p.pod, None)
                self.state.child_cycles.pop(p.pod, None)
                continue
            self.state.timestamps[p.pod] = stamp
            pod = pods.get(p.pod)
            if pod is not None and gang_id_of(pod) is not None:
                self.state.group_times[unit(pod)] = stamp
                self.state.child_cycles[p.pod] = self.state.child_cycles.get(p.pod, 0) + 1
            if p.pod in errors:
                self.waiting.pop(p.pod, None)
            else:
                self.waiting[p.pod] = Waiting(p.plugins, now)
