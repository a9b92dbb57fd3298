"""PodMigrationJob (scheduling.koordinator.sh/v1alpha1): its names, phases, conditions, and its decoder and builder.

Upstream: apis/scheduling/v1alpha1/pod_migration_job_types.go; the condition rules of
pkg/descheduler/controllers/migration/util/util.go (UpdateCondition). The annotations the MigrationController writes on
a job live in apis/extension/descheduling.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from apis.core import godur
from apis.core.errors import InvalidInput
from apis.core.metatime import parse_time, rfc3339
from apis.core.objects import JSON, as_object, as_objects

API_VERSION = "scheduling.koordinator.sh/v1alpha1"
KIND = "PodMigrationJob"
PLURAL = "podmigrationjobs"
# on the Reservations a job creates (upstream controllers/migration/reservation: LabelCreatedBy, DefaultCreator)
LABEL_CREATED_BY = "app.kubernetes.io/created-by"
CREATOR = "koord-descheduler"

MODE_RESERVATION_FIRST = "ReservationFirst"
MODE_EVICT_DIRECTLY = "EvictDirectly"
MODES = (MODE_RESERVATION_FIRST, MODE_EVICT_DIRECTLY)

PHASE_PENDING = "Pending"
PHASE_RUNNING = "Running"
PHASE_SUCCEEDED = "Succeeded"
PHASE_FAILED = "Failed"
PHASE_ABORTED = "Aborted"  # set by a user; the controller then leaves the job alone
STATUS_COMPLETE = "Complete"  # status.status once Succeeded

COND_RESERVATION_CREATED = "ReservationCreated"
COND_RESERVATION_SCHEDULED = "ReservationScheduled"
COND_PREEMPTION = "Preemption"
COND_EVICTION = "Eviction"
COND_POD_SCHEDULED = "PodScheduled"
COND_POD_BOUND_RESERVATION = "PodBoundReservation"
COND_BOUND_POD_READY = "BoundPodReady"
COND_RESERVATION_BOUND = "ReservationBound"
TRUE, FALSE, UNKNOWN = "True", "False", "Unknown"

REASON_TIMEOUT = "Timeout"
REASON_FAILED_CREATE_RESERVATION = "FailedCreateReservation"
REASON_RESERVATION_EXPIRED = "ReservationExpired"
REASON_UNSCHEDULABLE = "Unschedulable"
REASON_FORBIDDEN_MIGRATE_POD = "ForbiddenMigratePod"
REASON_MISSING_POD = "MissingPod"
REASON_MISSING_RESERVATION = "MissingReservation"
REASON_PREEMPTING = "Preempting"
REASON_PREEMPT_COMPLETE = "PreemptComplete"
REASON_EVICTING = "Evicting"
REASON_FAILED_EVICT = "FailedEvict"
REASON_EVICT_COMPLETE = "EvictComplete"
REASON_WAIT_FOR_POD_BIND_RESERVATION = "WaitForPodBindReservation"
REASON_WAIT_FOR_BOUND_POD_READY = "WaitForBoundPodReady"
REASON_INVALID_POD_REF = "InvalidPodRef"


def is_active(phase: str) -> bool:
    """A job that still migrates (and so counts against the limits): phase empty (read as Pending), Pending or
    Running."""
    return phase in ("", PHASE_PENDING, PHASE_RUNNING)


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str
    uid: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass
class PodMigrationJob:
    """A decoded job: what the controller and the limits read of it; `obj` is the object itself."""

    obj: JSON
    name: str
    uid: str
    created: float | None
    pod_ref: PodRef
    mode: str  # "" → the controller's defaultJobMode
    ttl: float  # seconds; 0 = none
    paused: bool
    phase: str
    annotations: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    reservation_name: str = ""
    node_name: str = ""

    @property
    def ident(self) -> str:
        """The UID, or the name of a job not created yet (a simulation's)."""
        return self.uid or self.name

    @property
    def active(self) -> bool:
        return is_active(self.phase)

    def condition(self, type_: str) -> JSON | None:
        for c in as_objects(as_object(self.obj.get("status")).get("conditions")):
            if isinstance(c, dict) and c.get("type") == type_:
                return c
        return None


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidInput(f"{where}: must be an object")
    return value


def _text(m: Mapping[str, Any], name: str, where: str) -> str:
    v = m.get(name)
    if v is None:
        return ""
    if not isinstance(v, str):
        raise InvalidInput(f"{where}.{name}: must be a string")
    return v


def _strings(m: Mapping[str, Any], name: str, where: str) -> dict[str, str]:
    out = {}
    for k, v in _mapping(m.get(name), f"{where}.{name}").items():
        if not isinstance(v, str):
            raise InvalidInput(f"{where}.{name}.{k}: must be a string")
        out[str(k)] = v
    return out


def decode_job(obj: Mapping[str, Any]) -> PodMigrationJob:
    """A PodMigrationJob as the API server would hold it; InvalidInput naming the field otherwise (spec.podRef is
    required by the CRD; its namespace and name are checked by the controller, not here). `obj` is kept, not
    copied: writes through the job land in it."""
    meta = _mapping(obj.get("metadata"), "metadata")
    spec = _mapping(obj.get("spec"), "spec")
    status = _mapping(obj.get("status"), "status")
    if spec.get("podRef") is None:
        raise InvalidInput("spec.podRef: required")
    ref = _mapping(spec.get("podRef"), "spec.podRef")
    ttl_text = _text(spec, "ttl", "spec")
    try:
        ttl = godur.parse(ttl_text) if ttl_text else 0.0
    except InvalidInput as e:
        raise InvalidInput(f"spec.ttl: {e}") from None
    mode = _text(spec, "mode", "spec")
    if mode and mode not in MODES:
        raise InvalidInput(f"spec.mode: must be {MODE_RESERVATION_FIRST} or {MODE_EVICT_DIRECTLY}, got {mode!r}")
    paused = spec.get("paused")
    if paused is not None and not isinstance(paused, bool):
        raise InvalidInput("spec.paused: must be a boolean")
    options = _mapping(spec.get("reservationOptions"), "spec.reservationOptions")
    reservation = _mapping(options.get("reservationRef"), "spec.reservationOptions.reservationRef")
    return PodMigrationJob(
        obj=obj if isinstance(obj, dict) else dict(obj), name=_text(meta, "name", "metadata"),
        uid=_text(meta, "uid", "metadata"),
        created=parse_time(meta.get("creationTimestamp")),
        pod_ref=PodRef(_text(ref, "namespace", "spec.podRef"), _text(ref, "name", "spec.podRef"),
                       _text(ref, "uid", "spec.podRef")),
        mode=mode, ttl=ttl, paused=bool(paused), phase=_text(status, "phase", "status"),
        annotations=_strings(meta, "annotations", "metadata"), labels=_strings(meta, "labels", "metadata"),
        reservation_name=_text(reservation, "name", "spec.reservationOptions.reservationRef"),
        node_name=_text(status, "nodeName", "status"))


def new_job(name: str, pod: PodRef, *, mode: str, ttl: float, created: float,
            annotations: Mapping[str, str] | None = None, labels: Mapping[str, str] | None = None,
            delete_options: Mapping[str, object] | None = None) -> JSON:
    """The object the MigrationController creates for one pod (upstream evict.go CreatePodMigrationJob): phase
    Pending, the pod's reference with its uid, the mode and ttl given (a ttl of 0 is left out)."""
    meta: JSON = {"name": name, "creationTimestamp": rfc3339(created)}
    if annotations:
        meta["annotations"] = dict(annotations)
    if labels:
        meta["labels"] = dict(labels)
    ref: JSON = {"namespace": pod.namespace, "name": pod.name}
    if pod.uid:
        ref["uid"] = pod.uid
    spec: JSON = {"podRef": ref, "mode": mode}
    if ttl > 0:
        spec["ttl"] = godur.format_seconds(ttl)
    if delete_options:
        spec["deleteOptions"] = dict(delete_options)
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta, "spec": spec,
            "status": {"phase": PHASE_PENDING}}


def set_condition(obj: JSON, type_: str, status: str, reason: str, message: str, now: float) -> bool:
    """Write one condition as upstream's UpdateCondition: an unchanged condition (same status, reason, message) is
    left alone (False returned); a changed one keeps its lastTransitionTime while the status is unchanged; every
    write copies type, reason and message into status.status/reason/message."""
    st = obj.setdefault("status", {})
    conditions = st.setdefault("conditions", [])
    at = rfc3339(now)
    new: JSON = {"type": type_, "status": status, "reason": reason, "message": message,
                 "lastProbeTime": at, "lastTransitionTime": at}
    for i, old in enumerate(conditions):
        if old.get("type") != type_:
            continue
        if (old.get("status"), old.get("reason"), old.get("message")) == (status, reason, message):
            return False
        if old.get("status") == status and old.get("lastTransitionTime"):
            new["lastTransitionTime"] = old["lastTransitionTime"]
        conditions[i] = new
        break
    else:
        conditions.append(new)
    st["status"], st["reason"], st["message"] = type_, reason, message
    return True


def set_phase(obj: JSON, phase: str, reason: str = "", message: str = "") -> None:
    """status.phase with the reason and message of the change (Succeeded also sets status.status Complete)."""
    st = obj.setdefault("status", {})
    st["phase"] = phase
    if phase == PHASE_SUCCEEDED:
        st["status"] = STATUS_COMPLETE
    if reason:
        st["reason"] = reason
    if message:
        st["message"] = message
