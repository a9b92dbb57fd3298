"""`koord-descheduler run`'s MigrationController loop: pending PodMigrationJobs arbitrated on their own interval,
the others reconciled when they change or when their requeue falls due, and the scavenger.

Upstream: arbitrator/arbitrator.go (Start: doOnceArbitrate every arbitrationArgs.interval over the jobs waiting;
a job that passes is annotated passed-arbitration by an Update, one that fails non-retryably is Failed
ForbiddenMigratePod with a Warning Event; a retryable refusal leaves it waiting), arbitrator/handler.go (a created
job waits for arbitration; an update enqueues a reconcile), controller.go (the workqueue's RequeueAfter, the
scavenger every minute). Here the jobs are listed through the API: when a round has created one, when the live
view's watch saw a job change (`heard`, upstream's event handlers), when jobs wait for arbitration or a requeue is
due, and every RESYNC seconds otherwise. A job deleted takes its Reservation with it (the delete predicate of
controller.go's New): the watch's DELETED event names it, and a job gone from one list to the next is caught too
(without a watch). A job waits for arbitration while it is Pending
(or has no phase) and does not carry passed-arbitration; one that does, or is Running, is reconciled, so a restarted
descheduler carries on with the jobs it finds (docs/decisions.md).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence

from apis.client.kubeapi import KubeClient
from apis.core.errors import InvalidInput, KoordletError
from apis.core.objects import JSON, as_object
from apis.extension.descheduling import ANNOTATION_PASSED_ARBITRATION
from apis.scheduling import migration as m
from scheduler.descheduler.migration.arbitrator import FAILED, PASSED, Decision
from scheduler.descheduler.migration.kubeapi import JOBS, KubeMigrationAPI, scavenge
from scheduler.descheduler.migration.reconcile import BACKOFF, WARNING, Outcome, Reconciler

log = logging.getLogger("koord-descheduler.migration")
RESYNC = 3.0  # seconds between lists when nothing is due (upstream's requeue of a waiting job)
SCAVENGE_PERIOD = 60.0  # seconds: upstream's scavenger
FORGOTTEN = 1024  # deleted jobs remembered, so that their Reservation is deleted once (event and list both see it)

Arbitrate = Callable[[Sequence[m.PodMigrationJob], Sequence[m.PodMigrationJob]], list[Decision]]
"""(the jobs waiting, every job listed) → the decisions, the jobs' objects changed as upstream writes them."""


def awaiting_arbitration(job: m.PodMigrationJob) -> bool:
    """Pending (or no phase), not paused, and not yet passed."""
    return (job.phase or m.PHASE_PENDING) == m.PHASE_PENDING and not job.paused \
        and job.annotations.get(ANNOTATION_PASSED_ARBITRATION) != "true"


class Requeues:
    """When each job is next reconciled: once its resourceVersion differs from the one its last reconcile left
    (an update event upstream), or once the requeue that reconcile asked for is due."""

    def __init__(self) -> None:
        self.version: dict[str, str] = {}
        self.due: dict[str, float] = {}

    def is_due(self, name: str, version: str, now: float) -> bool:
        return self.version.get(name) != version or self.due.get(name, 0.0) <= now

    def any_due(self, now: float) -> bool:
        return any(t <= now for t in self.due.values())

    def done(self, name: str, version: str, outcome: Outcome, now: float) -> None:
        self.version[name] = version
        wait = BACKOFF if outcome.error and outcome.requeue is None else outcome.requeue
        self.due[name] = math.inf if wait is None else now + wait

    def keep(self, names: set[str]) -> None:
        for d in (self.version, self.due):
            for name in [n for n in d if n not in names]:
                del d[name]


class ControllerLoop:
    """One thread: a tick every `interval` (the arbitration interval) until stopped. `kick` asks the next tick to
    list the jobs (a round created one)."""

    def __init__(self, client: KubeClient, reconciler: Reconciler, api: KubeMigrationAPI, arbitrate: Arbitrate,
                 interval: float, *, clock: Callable[[], float] = time.time, resync: float = RESYNC) -> None:
        self.client = client
        self.reconciler = reconciler
        self.api = api
        self.arbitrate = arbitrate
        self.interval = max(interval, 0.01)
        self.clock = clock
        self.resync = resync
        self.kick = threading.Event()
        self.requeues = Requeues()
        self.listed = -math.inf
        self.scavenged = -math.inf
        self.waiting = 0  # jobs left waiting for arbitration by the last tick
        self.reservations: dict[str, str] = {}  # job → its Reservation, as last listed (and reconciled)
        self.deleted: list[tuple[str, str]] = []  # (job, its Reservation) heard deleted, not yet handled
        self.deleted_lock = threading.Lock()
        self.forgotten: dict[str, None] = {}  # jobs whose Reservation was deleted with them (the latest FORGOTTEN)

    def run(self, stop: threading.Event) -> None:
        """wait.Until: a tick at once, then one every interval; an API error costs the tick, with one line."""
        while not stop.is_set():
            try:
                self.tick()
            except KoordletError as e:
                log.warning("PodMigrationJobs: pass skipped: %s", e)
            stop.wait(self.interval)

    def heard(self, op: str, kind: str, payload: object) -> None:
        """A change of the live view (a watch thread): a job added, changed or listed asks the next tick to list;
        a job deleted is remembered with the Reservation its last state names, deleted at the next tick."""
        if kind != m.KIND:
            return
        if op == "DELETED" and isinstance(payload, dict):
            name = str(as_object(payload.get("metadata")).get("name") or "")
            with self.deleted_lock:
                self.deleted.append((name, _reservation_ref(payload)))
        self.kick.set()

    def tick(self) -> None:
        now = self.clock()
        self._delete_heard()
        if now - self.scavenged >= SCAVENGE_PERIOD:
            self.scavenged = now
            scavenge(self.client, now)
        if not (self.kick.is_set() or self.waiting or self.requeues.any_due(now) or now - self.listed >= self.resync):
            return
        self.kick.clear()
        self.listed = now
        jobs = self._list()
        waiting = [j for j in jobs if awaiting_arbitration(j)]
        unwritten = set()
        if waiting:
            unwritten = {d.job.name for d in self.arbitrate(waiting, jobs) if not self._write(d)}
        self.waiting = sum(1 for j in waiting if awaiting_arbitration(j)) + len(unwritten)
        for job in jobs:
            if awaiting_arbitration(job) or not job.active or job.paused or job.name in unwritten:
                continue
            version = _version(job.obj)
            if self.requeues.is_due(job.name, version, now):
                outcome = self.reconciler.reconcile(job.obj)
                if outcome.error:
                    log.warning("PodMigrationJob %s: %s", job.name, outcome.error)
                self.requeues.done(job.name, _version(job.obj), outcome, now)
        self.requeues.keep({j.name for j in jobs})
        self._forget_deleted(jobs)

    def _delete_heard(self) -> None:
        with self.deleted_lock:
            deleted, self.deleted = self.deleted, []
        for name, reservation in deleted:
            self.reservations.pop(name, None)
            if reservation and name not in self.forgotten:
                self._delete_reservation(name, reservation)

    def _forget_deleted(self, jobs: list[m.PodMigrationJob]) -> None:
        """A job deleted since the last list takes its Reservation with it (upstream's delete predicate), unless
        its DELETED event already did. The Reservations are read off the jobs as this tick left them (a reconcile
        may have just created one)."""
        names = {j.name for j in jobs}
        for name, reservation in self.reservations.items():
            if name not in names and name not in self.forgotten:
                self._delete_reservation(name, reservation)
        self.reservations = {j.name: ref for j in jobs if (ref := _reservation_ref(j.obj))}

    def _delete_reservation(self, job: str, reservation: str) -> None:
        log.info("PodMigrationJob %s deleted: deleting its Reservation %s", job, reservation)
        self.forgotten[job] = None
        if len(self.forgotten) > FORGOTTEN:
            del self.forgotten[next(iter(self.forgotten))]
        try:
            self.api.delete_reservation(reservation)
        except KoordletError as e:
            log.warning("deleting Reservation %s of deleted PodMigrationJob %s: %s", reservation, job, e)

    def _list(self) -> list[m.PodMigrationJob]:
        out = []
        for obj in self.client.list(JOBS).get("items") or []:
            if not isinstance(obj, dict):
                continue
            obj.setdefault("apiVersion", m.API_VERSION)
            obj.setdefault("kind", m.KIND)
            try:
                out.append(m.decode_job(obj))
            except InvalidInput as e:
                log.debug("PodMigrationJob %s ignored: %s", as_object(obj.get("metadata")).get("name"), e)
        return out

    def _write(self, decision: Decision) -> bool:
        """A passed job's annotation (Update) or a failed one's status, with its Warning Event; False when the API
        refused the write (the job is arbitrated again next tick)."""
        if decision.outcome not in (PASSED, FAILED):
            return True
        job = decision.job
        try:
            self.api.update_job(job.obj)
        except KoordletError as e:
            log.warning("PodMigrationJob %s: arbitration's update: %s", job.name, e)
            return False
        if decision.outcome == FAILED:
            message = str(as_object(job.obj.get("status")).get("message") or "")
            log.info("PodMigrationJob %s failed arbitration: %s", job.name, decision.why)
            self.api.event(job.obj, WARNING, m.REASON_FORBIDDEN_MIGRATE_POD, message)
        return True


def _reservation_ref(obj: JSON) -> str:
    """spec.reservationOptions.reservationRef.name, or ""."""
    options = as_object(as_object(obj.get("spec")).get("reservationOptions"))
    return str(as_object(options.get("reservationRef")).get("name") or "")


def _version(obj: JSON) -> str:
    return str(as_object(obj.get("metadata")).get("resourceVersion") or "")
