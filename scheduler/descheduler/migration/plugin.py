"""MigrationController as a descheduler plugin (evict + filter): a pod chosen for eviction gets a PodMigrationJob.

Upstream: controllers/migration/controller.go (Filter, PreEvictionFilter, Evict), evict.go (the job created).
`dryRun` in the args: Evict answers true and creates nothing. In a simulation the jobs created are the plugin's
output (`podMigrationJobs`); the PodMigrationJobs of the first round's snapshot (the cluster directory) are
arbitrated once, before that round, and count against the limits as they stand; in `run` (Handle.kube set) a job
is also created in the cluster, and run_controller (migration.controller) arbitrates the pending jobs there on
arbitrationArgs.interval, reconciles the others and scavenges; a job created in a round migrates until its pod
leaves the state (the simulation removes an evicted pod), and the object limiters then count its eviction at the
job's creation. The round and the controller thread share the limits' state (object limiters, jobs that passed
arbitration) under one lock.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence

from apis.core.errors import InvalidInput, KoordletError
from apis.core.objects import JSON, as_object
from apis.extension.descheduling import (
    ANNOTATION_EVICT_REASON,
    ANNOTATION_EVICT_TRIGGER,
    ANNOTATION_JOB_CREATED_BY,
    ANNOTATION_PASSED_ARBITRATION,
)
from apis.scheduling.migration import KIND, PHASE_PENDING, PodMigrationJob, PodRef, decode_job, new_job
from scheduler.cluster import key
from scheduler.descheduler.config.common import ConfigError
from scheduler.descheduler.config.features import DISABLE_PVC_RESERVATION
from scheduler.descheduler.config.migration_args import EVICTION_POLICIES, MigrationControllerArgs, default_args
from scheduler.descheduler.interfaces import (
    EVICT,
    FILTER,
    EvictOptions,
    Handle,
    JobContext,
    PluginSpec,
    Snapshot,
    snapshot,
)
from scheduler.descheduler.migration import arbitrator
from scheduler.descheduler.migration.controller import ControllerLoop
from scheduler.descheduler.migration.filter import MigrationFilter
from scheduler.descheduler.migration.jobs import MigratingJobs
from scheduler.descheduler.migration.kubeapi import JOBS, KubeMigrationAPI
from scheduler.descheduler.migration.reconcile import Reconciler
from scheduler.descheduler.migration.scale import ScaleReader
from scheduler.descheduler.migration.workload import Scales

NAME = "MigrationController"
log = logging.getLogger("koord-descheduler.migration")


class MigrationController:
    """Implements interfaces.EvictorPlugin, FilterPlugin and SimulationOutput."""

    name = NAME

    def __init__(self, args: MigrationControllerArgs, handle: Handle, *,
                 new_name: Callable[[], str] = lambda: str(uuid.uuid4())) -> None:
        self.args = args
        self.handle = handle
        self.new_name = new_name
        self.instance_id = str(uuid.uuid4())  # job-created-by: new at every start, as upstream
        self.passed: set[str] = set()
        self.given: list[PodMigrationJob] | None = None  # the cluster directory's jobs, decoded on first use
        self.changed: list[PodMigrationJob] = []  # given jobs arbitration changed
        self.created: list[tuple[PodMigrationJob, JSON]] = []  # (job, its pod as it was)
        self.migrating_created: list[tuple[PodMigrationJob, JSON]] = []
        self.seen: Snapshot | None = None
        self.current: MigratingJobs | None = None  # jobs(), until a job is created or the round changes
        self.scale_reader: ScaleReader | None = None
        self.checks = MigrationFilter(args, lambda: self.handle.snapshot, self.jobs, scales=self._scales)
        self.lock = threading.RLock()  # the round's calls and the controller thread's
        # `run`'s controller thread: the same checks over the live view and the jobs it listed, the same buckets
        self.live: tuple[Snapshot, MigratingJobs] | None = None
        self.view: tuple[int, Snapshot] | None = None  # the live view's version and the snapshot made of it
        self.live_checks = MigrationFilter(args, lambda: self._live()[0], lambda: self._live()[1],
                                           limiters=self.checks.limiters, scales=self._scales)
        self.listed: list[PodMigrationJob] = []
        self.loop: ControllerLoop | None = None

    def _scales(self) -> Scales | None:
        """In `run`, owners of other kinds read through their scale subresource (one reader: its discovery kept)."""
        kube = self.handle.kube
        if kube is None:
            return None
        if self.scale_reader is None or self.scale_reader.client is not kube.client:
            self.scale_reader = ScaleReader(kube.client)
        return self.scale_reader.scale

    # ---- FilterPlugin ----

    def filter(self, pod: JSON) -> bool:
        with self.lock:
            return self.checks.filter(pod)

    def pre_eviction_filter(self, pod: JSON) -> bool:
        with self.lock:
            return self.checks.pre_eviction_filter(pod)

    # ---- EvictorPlugin ----

    def evict(self, pod: JSON, options: EvictOptions) -> bool:
        with self.lock:
            return self._evict(pod, options)

    def _evict(self, pod: JSON, options: EvictOptions) -> bool:
        if self.args.dry_run:
            log.info("dry run: would migrate pod %s (%s): %s", key(pod), options.plugin, options.reason)
            return True
        if not self.checks.filter(pod):
            return False
        meta = as_object(pod.get("metadata"))
        annotations = {ANNOTATION_EVICT_REASON: options.reason, ANNOTATION_EVICT_TRIGGER: options.plugin,
                       ANNOTATION_JOB_CREATED_BY: self.instance_id}
        context = options.job or JobContext()  # evict.go: the caller's JobContext applied over the defaults
        ttl = self.args.default_job_ttl if context.ttl is None else context.ttl
        delete_options = options.delete_options if options.delete_options is not None \
            else self.args.default_delete_options
        obj = new_job(self.new_name(), PodRef(str(meta.get("namespace") or ""), str(meta.get("name") or ""),
                                              str(meta.get("uid") or "")),
                      mode=context.mode or self.args.default_job_mode, ttl=ttl, created=self.handle.snapshot.now,
                      annotations={**annotations, **context.annotations}, labels=context.labels,
                      delete_options=delete_options)
        job = decode_job(obj)
        kube = self.handle.kube
        if kube is not None:  # `run`: the job is created in the cluster; run_controller carries it out
            try:
                kube.client.post(JOBS, obj)
            except KoordletError as e:
                log.warning("pod %s: creating PodMigrationJob %s: %s", key(pod), job.name, e)
                return False
            if self.loop is not None:
                self.loop.kick.set()  # upstream's create event: the job waits for the next arbitration
        self.created.append((job, pod))
        self.migrating_created.append((job, pod))
        if self.current is not None:
            self.current.add(job)
        log.info("pod %s: PodMigrationJob %s created (%s: %s)", key(pod), job.name, options.plugin, options.reason)
        return True

    # ---- the jobs the limits count ----

    def jobs(self) -> MigratingJobs:
        """The jobs the limits count now (one instance, and its counts, until they change)."""
        self._catch_up()
        if self.current is None:
            self.current = MigratingJobs([*(self.given or []), *(j for j, _ in self.migrating_created)], self.passed)
        return self.current

    def _catch_up(self) -> None:
        """On a new round's snapshot: arbitrate the given jobs (first round only); created jobs whose pod left the
        state are done, and their evictions tracked by the object limiters."""
        snap = self.handle.snapshot
        if snap is self.seen:
            return
        self.seen = snap
        self.current = None
        if self.given is None:
            self.given = self._decode_given(snap.of_kind(KIND))
            self._arbitrate_given(snap)
        present = {key(p) for p in snap.all_pods()}
        still = []
        for job, pod in self.migrating_created:
            if key(pod) in present:
                still.append((job, pod))
            else:
                self.checks.track(pod, job.created or snap.now)
        self.migrating_created = still

    def _decode_given(self, objs: list[JSON]) -> list[PodMigrationJob]:
        out = []
        for obj in objs:
            try:
                out.append(decode_job(copy.deepcopy(obj)))
            except InvalidInput as e:
                name = as_object(obj.get("metadata")).get("name")
                log.warning("PodMigrationJob %s ignored: %s", name, e)
        return out

    def _arbitrate_given(self, snap: Snapshot) -> None:
        assert self.given is not None
        waiting = [j for j in self.given if (j.phase or PHASE_PENDING) == PHASE_PENDING
                   and j.annotations.get(ANNOTATION_PASSED_ARBITRATION) != "true"]
        for j in self.given:
            if j not in waiting and arbitrator.is_migrating(j):
                self.passed.add(j.ident)

        def invalidate() -> None:
            self.current = None

        decisions = self._arbitrate(self.checks, waiting, self.given, invalidate)
        self.changed = [d.job for d in decisions if d.outcome != arbitrator.WAITING]

    def _arbitrate(self, checks: MigrationFilter, waiting: Sequence[PodMigrationJob],
                   known: Sequence[PodMigrationJob], invalidate: Callable[[], None]) -> list[arbitrator.Decision]:
        """One arbitration of `waiting` by `checks`; `invalidate` drops the counts of the jobs checks sees, so a
        job that just passed counts for the next."""
        pods = checks.pods_by_key()
        pod_of = {j.name: pods[j.pod_ref.key] for j in waiting if j.pod_ref.key in pods}

        def fresh(check: Callable[[JSON], str | None]) -> Callable[[JSON], str | None]:
            def run(pod: JSON) -> str | None:
                invalidate()
                return check(pod)
            return run

        return arbitrator.arbitrate(waiting, pod_of, fresh(checks.non_retryable), fresh(checks.retryable),
                                    self.passed, lambda owner: _migrating_of_owner(owner, pods, known))

    # ---- interfaces.Controller (`run` only) ----

    def run_controller(self, stop: threading.Event) -> None:
        """The controller loop (migration.controller) until `stop`."""
        loop = self.controller_loop()
        if loop is not None:
            loop.run(stop)

    def controller_loop(self) -> ControllerLoop | None:
        """The loop over the cluster of Handle.kube (None in a simulation), made once."""
        kube = self.handle.kube
        if kube is None:
            return None
        if self.loop is None:
            api = KubeMigrationAPI(kube.client)
            reconciler = Reconciler(self.args, api, limited=self._limited, evicted=self._evicted, now=time.time,
                                    drop_pvc=self.handle.feature_gates.enabled(DISABLE_PVC_RESERVATION),
                                    counted=kube.metrics.pod_evicted)
            self.loop = ControllerLoop(kube.client, reconciler, api, self._arbitrate_listed,
                                       self.args.arbitration.interval)
            kube.listen(self.loop.heard)
        return self.loop

    def _arbitrate_listed(self, waiting: Sequence[PodMigrationJob], listed: Sequence[PodMigrationJob]
                          ) -> list[arbitrator.Decision]:
        """The controller's arbitration: the live view and the jobs just listed; the jobs that passed before (the
        annotation, or Running) are known as passed, finished ones no longer."""
        self._view_now()  # the copy of a changed view is made before the lock: the round does not wait for it
        with self.lock:
            self.listed, self.live = list(listed), None
            for j in listed:
                if not j.active:
                    self.passed.discard(j.ident)
                elif j not in waiting and arbitrator.is_migrating(j):
                    self.passed.add(j.ident)
            return self._arbitrate(self.live_checks, waiting, listed, self._invalidate_live)

    def _live(self) -> tuple[Snapshot, MigratingJobs]:
        """The controller's view: the cluster `run` watches (a snapshot made again only when it changed), at the wall
        clock, and the jobs last listed."""
        if self.live is None:
            now = dataclasses.replace(self._view_now(), now=time.time())
            self.live = (now, MigratingJobs(list(self.listed), self.passed))
        return self.live

    def _view_now(self) -> Snapshot:
        """The snapshot of the live view, made again when the view changed (the controller thread's own)."""
        kube = self.handle.kube
        version = kube.version() if kube is not None else 0
        if self.view is None or self.view[0] != version:
            self.view = (version, snapshot(kube.objects() if kube is not None else [], time.time()))
        return self.view[1]

    def _invalidate_live(self) -> None:
        if self.live is not None:
            self.live = (self.live[0], MigratingJobs(list(self.listed), self.passed))

    def _limited(self, pod: JSON) -> bool:
        with self.lock:
            return self.live_checks.limiters.exceeded(self.live_checks.subject(pod), time.time())

    def _evicted(self, pod: JSON) -> None:
        with self.lock:
            self.live_checks.track(pod, time.time())

    # ---- SimulationOutput ----

    def simulation_output(self) -> Mapping[str, object]:
        return {"podMigrationJobs": [j.obj for j in self.changed] + [j.obj for j, _ in self.created]}


def _migrating_of_owner(owner: str, pods: Mapping[str, JSON], known: Sequence[PodMigrationJob]) -> int:
    """The migrating jobs (arbitrator.is_migrating) over the pods of that batch Job."""
    uids = {str(as_object(p.get("metadata")).get("uid") or "") for p in pods.values()
            if any(r.get("uid") == owner for r in as_object(p.get("metadata")).get("ownerReferences") or [])}
    return sum(1 for j in known if j.pod_ref.uid in uids and arbitrator.is_migrating(j))


def new(args: object, handle: Handle) -> MigrationController:
    if args is None:
        args = default_args()
    elif not isinstance(args, MigrationControllerArgs):
        raise ConfigError(f"got args of type {type(args).__name__}, want *MigrationControllerArgs")
    if args.eviction_policy not in EVICTION_POLICIES:  # upstream refuses it when building the evictor (sic)
        raise ConfigError(f"MigrationController args.evictionPolicy: unsupported evicition policy "
                          f"{args.eviction_policy!r}")
    return MigrationController(args, handle)


SPEC = PluginSpec(NAME, new, frozenset({EVICT, FILTER}))
