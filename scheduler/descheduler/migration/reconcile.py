"""The PodMigrationJob lifecycle: one reconcile of a job against the cluster, through a small API.

Upstream: controllers/migration/controller.go (Reconcile, doMigrate, the ReservationFirst and EvictDirectly paths,
the scavenger), evictor/* (Eviction, Delete, SoftEviction), util.go (UpdateCondition). A job times out after its
ttl; a pending one gets its pod's UID and Running; the object limiters hold it back; then either the pod is evicted
directly, or a Reservation is created, waited for until koord-sched places it on another node, the pod is evicted,
and the job succeeds once a pod is bound to the reservation and Ready. Every wait asks to be called again in 3s.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from apis.core.errors import ApiError, InvalidInput, KoordletError
from apis.core.metatime import rfc3339
from apis.core.objects import JSON, as_object, as_objects
from apis.extension.descheduling import (
    ANNOTATION_DESCHEDULER_EVICT,
    ANNOTATION_EVICT_REASON,
    ANNOTATION_EVICT_TRIGGER,
    LABEL_EVICT_POLICY,
)
from apis.scheduling import migration as m
from apis.scheduling import reservation as rsv
from scheduler.descheduler.config.migration_args import MigrationControllerArgs
from scheduler.descheduler.metrics import ERROR, SUCCESS
from scheduler.descheduler.migration.objectlimiter import TokenBucket
from scheduler.descheduler.migration.reservation import reservation_of, template_for

REQUEUE = 3.0  # defaultRequeueAfter
BACKOFF = 1.0  # an error: call again soon
SCAVENGE_GRACE = 300.0  # a job is deleted ttl + 5m after creation
SCAVENGE_NO_TTL = 1800.0  # or 30m after it when it has no ttl
WARNING, NORMAL = "Warning", "Normal"
DESCHEDULED = "Descheduled"  # the Event on the evicted pod


class MigrationAPI(Protocol):
    """What the reconciler reads and writes (the API server in `run`, a fake in tests). Writes raise ApiError."""

    def get_pod(self, namespace: str, name: str) -> JSON | None: ...

    def get_reservation(self, name: str) -> JSON | None: ...

    def create_reservation(self, obj: JSON) -> JSON:
        """The created object (with its uid); an existing one of that name is returned as it is."""
        ...

    def update_reservation(self, obj: JSON) -> None: ...

    def delete_reservation(self, name: str) -> None: ...

    def evict_pod(self, pod: JSON, policy: str, delete_options: Mapping[str, object] | None,
                  soft_eviction: str) -> None:
        """Eviction: the Eviction API; Delete: DELETE; SoftEviction: annotate the pod with `soft_eviction`."""
        ...

    def update_job(self, obj: JSON) -> None: ...

    def event(self, obj: JSON, type_: str, reason: str, message: str) -> None: ...


@dataclass(frozen=True)
class Outcome:
    """After one reconcile: call again after `requeue` seconds (None: only when the job changes)."""

    requeue: float | None = None
    error: str = ""


DONE = Outcome()


def trigger_and_reason(annotations: Mapping[str, str]) -> tuple[str, str]:
    """GetEvictionTriggerAndReason: the reason is evict-reason, else the trigger, else NotSet."""
    trigger = annotations.get(ANNOTATION_EVICT_TRIGGER, "")
    return trigger, annotations.get(ANNOTATION_EVICT_REASON) or trigger or "NotSet"


def soft_eviction(now: float, delete_options: Mapping[str, object] | None, trigger: str, reason: str) -> str:
    """The soft-eviction annotation's value."""
    doc: JSON = {"timestamp": rfc3339(now), "initiator": trigger, "reason": reason}
    if delete_options:
        doc["deleteOptions"] = dict(delete_options)
    return json.dumps(doc, separators=(",", ":"))


def scavengeable(job: m.PodMigrationJob, now: float) -> bool:
    """The scavenger deletes a job (any phase) ttl + 5m after its creation, or 30m after it without a ttl."""
    if job.created is None:
        return False
    limit = job.ttl + SCAVENGE_GRACE if job.ttl > 0 else SCAVENGE_NO_TTL
    return now - job.created >= limit


def _uncounted(result: str, strategy: str, namespace: str, node: str) -> None:
    """No metrics (tests of the reconciler alone)."""


class Reconciler:
    """Reconciles jobs one at a time. `limited(pod)`: the object limiters hold the pod back; `evicted(pod)`: one
    eviction to track; `now()`: the clock; `drop_pvc`: the feature gate DisablePVCReservation; `counted(result,
    strategy, namespace, node)`: each eviction tried, for descheduler_pods_evicted (upstream's evictor interpreter
    counts success and error with the job's trigger as the strategy)."""

    def __init__(self, args: MigrationControllerArgs, api: MigrationAPI, *, limited: Callable[[JSON], bool],
                 evicted: Callable[[JSON], None], now: Callable[[], float], drop_pvc: bool = False,
                 counted: Callable[[str, str, str, str], None] = _uncounted) -> None:
        self.counted = counted
        self.args = args
        self.drop_pvc = drop_pvc
        self.api = api
        self.limited = limited
        self.evicted = evicted
        self.now = now
        start = now()
        self.bucket = TokenBucket(args.evict_qps, args.evict_burst, float(args.evict_burst), start)

    def reconcile(self, obj: JSON) -> Outcome:
        try:
            job = m.decode_job(obj)
        except InvalidInput as e:
            return Outcome(error=f"invalid PodMigrationJob: {e}")
        if job.paused or not job.active:
            return DONE
        try:
            return self._reconcile(job)
        except ApiError as e:
            return Outcome(BACKOFF, str(e))

    # ---- the steps ----

    def _reconcile(self, job: m.PodMigrationJob) -> Outcome:
        now = self.now()
        if job.ttl > 0 and job.created is not None and now - job.created >= job.ttl:
            if job.reservation_name:
                self.api.delete_reservation(job.reservation_name)
            return self._fail(job, m.REASON_TIMEOUT, "Abort job caused by timeout")
        ref = job.pod_ref
        if job.phase in ("", m.PHASE_PENDING):
            if not ref.namespace or not ref.name:
                return self._fail(job, m.REASON_INVALID_POD_REF, "Abort job caused by invalid podRef")
            pod = self.api.get_pod(ref.namespace, ref.name)
            if pod is None:
                return self._fail(job, m.REASON_MISSING_POD, f'Abort job caused by missing Pod "{ref.key}"')
            job.obj["spec"]["podRef"]["uid"] = str(as_object(pod.get("metadata")).get("uid") or "")
            m.set_phase(job.obj, m.PHASE_RUNNING)
            self.api.update_job(job.obj)
            job = m.decode_job(job.obj)
        pod = self.api.get_pod(ref.namespace, ref.name)
        if pod is not None and ANNOTATION_DESCHEDULER_EVICT not in job.annotations and self.limited(pod):
            return Outcome(REQUEUE)
        mode = job.mode or self.args.default_job_mode
        if mode == m.MODE_EVICT_DIRECTLY:
            done, outcome = self._evict(job, None)
            if not done:
                return outcome
            return self._succeed(job, f'Pod "{ref.key}" has been evicted')
        return self._reservation_first(job, pod)

    def _reservation_first(self, job: m.PodMigrationJob, pod: JSON | None) -> Outcome:
        ref = job.pod_ref
        if not job.reservation_name:
            if pod is None:
                return self._fail(job, m.REASON_MISSING_POD, f'Abort job caused by missing Pod "{ref.key}"')
            template = template_for(job, pod, self.now(), drop_pvc=self.drop_pvc)
            try:
                created = self.api.create_reservation(reservation_of(template))
            except ApiError as e:
                message = f"Failed to create Reservation caused by {e}"
                return self._condition(job, m.COND_RESERVATION_CREATED, m.FALSE, m.REASON_FAILED_CREATE_RESERVATION,
                                       message, WARNING, Outcome(BACKOFF, message))
            meta = as_object(created.get("metadata"))
            spec = job.obj["spec"]
            options = spec.setdefault("reservationOptions", {})
            options["template"] = template  # upstream keeps the options it built on the job
            options["reservationRef"] = {
                "kind": rsv.KIND, "apiVersion": rsv.API_VERSION, "name": str(meta.get("name") or ""),
                **({"uid": str(meta["uid"])} if meta.get("uid") else {})}
            self.api.update_job(job.obj)
            self.api.event(job.obj, NORMAL, m.COND_RESERVATION_CREATED,
                           f'Successfully create Reservation "{meta.get("name")}"')
            return Outcome(0.0)
        name = job.reservation_name
        r = self.api.get_reservation(name)
        if r is None:
            return self._fail(job, m.REASON_MISSING_RESERVATION, f'Abort job caused by missing Reservation "{name}"')
        labels = r.setdefault("metadata", {}).setdefault("labels", {})
        if rsv.LABEL_RESERVATION_ORDER not in labels:  # setReservationOrder: one the job names, made elsewhere
            labels[rsv.LABEL_RESERVATION_ORDER] = str(int(self.now() * 1000))
            self.api.update_reservation(r)
        self._write(job, m.COND_RESERVATION_CREATED, m.TRUE, "", "")
        status = as_object(r.get("status"))
        phase = str(status.get("phase") or "")
        scheduled = _condition(r, rsv.CONDITION_SCHEDULED)
        if scheduled is not None and scheduled.get("reason") == rsv.REASON_UNSCHEDULABLE and self._write(
                job, m.COND_RESERVATION_SCHEDULED, m.FALSE, m.REASON_UNSCHEDULABLE,
                str(scheduled.get("message") or ""), WARNING):
            self.api.update_job(job.obj)  # syncReservationScheduleFailed's status update
        if phase in ("", rsv.PHASE_PENDING):
            return Outcome(REQUEUE)
        ready = _condition(r, rsv.CONDITION_READY)
        if phase == rsv.PHASE_FAILED and ready is not None and ready.get("reason") == rsv.REASON_EXPIRED:
            return self._fail(job, m.REASON_RESERVATION_EXPIRED, f'Reservation "{name}" is expired')
        node = str(status.get("nodeName") or "")
        if not node or not _scheduled(r):
            return self._fail(job, m.REASON_UNSCHEDULABLE, f'Reservation "{name}" is not scheduled')
        if pod is not None and node == as_object(pod.get("spec")).get("nodeName"):
            return self._fail(job, m.REASON_FORBIDDEN_MIGRATE_POD,
                              f'Reservation "{name}" is scheduled to the node "{node}" of the Pod')
        if job.node_name != node:
            job.obj.setdefault("status", {})["nodeName"] = node
            self._write(job, m.COND_RESERVATION_SCHEDULED, m.TRUE, "", "")
            self.api.update_job(job.obj)
            self.api.event(job.obj, NORMAL, m.COND_RESERVATION_SCHEDULED,
                           f'Assigned Reservation "{name}" to node "{node}"')
        if _migrates_pending_pod(r):
            return self._wait_pending_pod_scheduled(job, r, node)
        done, outcome = self._evict(job, r)
        if not done:
            return outcome
        owners = status.get("currentOwners") or []
        if not owners:
            return self._condition(job, m.COND_POD_BOUND_RESERVATION, m.FALSE,
                                   m.REASON_WAIT_FOR_POD_BIND_RESERVATION,
                                   f'Waiting for a Pod to bind Reservation "{name}"', NORMAL, Outcome(REQUEUE))
        owner = as_object(owners[0])
        self._write(job, m.COND_RESERVATION_BOUND, m.TRUE, "", "")
        job.obj.setdefault("status", {})["podRef"] = {k: owner[k] for k in ("namespace", "name", "uid")
                                                      if owner.get(k)}
        bound = self.api.get_pod(str(owner.get("namespace") or ""), str(owner.get("name") or ""))
        if bound is not None and not _ready(bound):
            return self._condition(job, m.COND_BOUND_POD_READY, m.FALSE, m.REASON_WAIT_FOR_BOUND_POD_READY,
                                   f'Waiting for Pod "{owner.get("namespace")}/{owner.get("name")}" to be ready',
                                   NORMAL, Outcome(REQUEUE))
        self._write(job, m.COND_BOUND_POD_READY, m.TRUE, "", "")
        message = f'Bind Pod "{owner.get("namespace")}/{owner.get("name")}" in Reservation "{name}"'
        self._write(job, m.COND_POD_BOUND_RESERVATION, m.TRUE, "", message)
        return self._succeed(job, message)

    def _wait_pending_pod_scheduled(self, job: m.PodMigrationJob, r: JSON, node: str) -> Outcome:
        """A pending pod's migration (the reservation is owned by the pod itself): nothing to evict; done once the
        pod is scheduled, aborted if another pod took the reservation."""
        ref = job.pod_ref
        pod = self.api.get_pod(ref.namespace, ref.name)
        if pod is None:
            return self._fail(job, m.REASON_MISSING_POD, f'Abort job caused by missing Pod "{ref.key}"')
        scheduled = _condition(pod, m.COND_POD_SCHEDULED)
        if scheduled is not None and scheduled.get("status") == m.TRUE:
            message = f'Assign Pod "{ref.key}" to node "{node}"'
            self._write(job, m.COND_POD_SCHEDULED, m.TRUE, "", message)
            return self._succeed(job, message)
        uid = as_object(pod.get("metadata")).get("uid")
        if any(as_object(o).get("uid") not in (None, uid)
               for o in as_object(r.get("status")).get("currentOwners") or []):
            return self._fail(job, m.REASON_FORBIDDEN_MIGRATE_POD, "Reservation is already bound by another Pod")
        return self._condition(job, m.COND_POD_SCHEDULED, m.FALSE, m.REASON_UNSCHEDULABLE,
                               f'Pod "{ref.key}" is not scheduled yet', NORMAL, Outcome(REQUEUE))

    def _evict(self, job: m.PodMigrationJob, reservation: JSON | None) -> tuple[bool, Outcome]:
        """(done, what to do when not): the eviction step of both modes."""
        ref = job.pod_ref
        cond = job.condition(m.COND_EVICTION)
        if cond is not None and cond.get("status") == m.TRUE:
            return True, DONE
        pod = self.api.get_pod(ref.namespace, ref.name)
        gone = pod is None or (cond is not None and as_object(pod.get("metadata")).get("uid") != ref.uid)
        if gone:
            if cond is None:
                return False, self._fail(job, m.REASON_MISSING_POD, f'Abort job caused by missing Pod "{ref.key}"')
            self._write(job, m.COND_EVICTION, m.TRUE, m.REASON_EVICT_COMPLETE, f'Pod "{ref.key}" has been evicted',
                        NORMAL)
            self.api.update_job(job.obj)
            return True, DONE
        assert pod is not None
        if cond is not None and cond.get("reason") == m.REASON_EVICTING:
            return False, Outcome(REQUEUE)
        if reservation is not None and as_object(reservation.get("status")).get("phase") == rsv.PHASE_SUCCEEDED:
            return False, self._fail(job, m.REASON_FORBIDDEN_MIGRATE_POD,
                                     "Reservation is already bound by another Pod")
        if not self.bucket.allow(self.now()):
            return False, Outcome(BACKOFF, "TooManyEvictions")
        labels = {**job.labels, **{str(k): str(v) for k, v in
                                   as_object(as_object(pod.get("metadata")).get("labels")).items()}}
        policy = labels.get(LABEL_EVICT_POLICY) or self.args.eviction_policy
        options = as_object(job.obj["spec"].get("deleteOptions")) or self.args.default_delete_options
        trigger, reason = trigger_and_reason(job.annotations)
        node = str(as_object(pod.get("spec")).get("nodeName") or "")
        try:
            self.api.evict_pod(pod, policy, options, soft_eviction(self.now(), options, trigger, reason))
        except KoordletError as e:
            self.counted(ERROR, trigger, ref.namespace, node)
            if not isinstance(e, ApiError):
                raise
            self.api.event(job.obj, WARNING, m.REASON_EVICTING, f'Failed evict Pod "{ref.key}" caused by {e}')
            return False, Outcome(BACKOFF, str(e))
        self.counted(SUCCESS, trigger, ref.namespace, node)
        self.evicted(pod)
        self.api.event(pod, NORMAL, DESCHEDULED, f'Pod evicted from node "{node}" by the reason "{reason}"')
        message = f'Pod "{ref.key}" evicted from node "{node}" by the reason "{reason}"'
        return False, self._condition(job, m.COND_EVICTION, m.FALSE, m.REASON_EVICTING, message, NORMAL,
                                      Outcome(REQUEUE))

    # ---- writes ----

    def _write(self, job: m.PodMigrationJob, type_: str, status: str, reason: str, message: str,
               event: str = "") -> bool:
        changed = m.set_condition(job.obj, type_, status, reason, message, self.now())
        if changed and event:
            self.api.event(job.obj, event, reason or type_, message)
        return changed

    def _condition(self, job: m.PodMigrationJob, type_: str, status: str, reason: str, message: str, event: str,
                   outcome: Outcome) -> Outcome:
        if self._write(job, type_, status, reason, message, event):
            self.api.update_job(job.obj)
        return outcome

    def _fail(self, job: m.PodMigrationJob, reason: str, message: str) -> Outcome:
        m.set_phase(job.obj, m.PHASE_FAILED, reason, message)
        self.api.update_job(job.obj)
        self.api.event(job.obj, WARNING, reason, message)
        return DONE

    def _succeed(self, job: m.PodMigrationJob, message: str) -> Outcome:
        m.set_phase(job.obj, m.PHASE_SUCCEEDED, "", message)
        self.api.update_job(job.obj)
        self.api.event(job.obj, NORMAL, m.STATUS_COMPLETE, message)
        return DONE


def _condition(obj: JSON, type_: str) -> JSON | None:
    for c in as_objects(as_object(obj.get("status")).get("conditions")):
        if isinstance(c, dict) and c.get("type") == type_:
            return c
    return None


def _migrates_pending_pod(r: JSON) -> bool:
    """IsMigratePendingPod: an owner that is an object reference alone."""
    return any(isinstance(o, dict) and o.get("object") and not o.get("controller") and not o.get("labelSelector")
               for o in as_objects(as_object(r.get("spec")).get("owners")))


def _scheduled(r: JSON) -> bool:
    """IsReservationScheduled (migration/reservation): a nodeName and a Scheduled condition True with reason
    Scheduled, as koord-sched and koord-scheduler write them when they place one."""
    if not as_object(r.get("status")).get("nodeName"):
        return False
    return any(isinstance(c, dict) and c.get("type") == rsv.CONDITION_SCHEDULED
               and c.get("reason") == rsv.REASON_SCHEDULED and c.get("status") == m.TRUE
               for c in as_objects(as_object(r.get("status")).get("conditions")))


def _ready(pod: JSON) -> bool:
    return any(isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
               for c in as_objects(as_object(pod.get("status")).get("conditions")))
