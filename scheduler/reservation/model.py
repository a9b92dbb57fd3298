"""Reservation objects (scheduling.koordinator.sh/v1alpha1) as the scheduler keeps them: phase, node, what is left.

Upstream: apis/scheduling/v1alpha1/reservation_types.go, apis/extension/reservation.go, pkg/util/reservation.
A placed, available reservation is represented on its node by a "reserve pod" (the template pod, named
`reservation/<name>`, which no real pod can be named) whose requests are what is still unallocated: so every plugin
sees reserved resources as used, and an owner is served by taking the reserve pod off its node for the cycle.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import time
from dataclasses import dataclass, field

from apis.core.errors import InvalidInput
from apis.core.labelselector import LabelSelector, selector_or_nothing
from apis.core.metatime import parse_time, rfc3339
from apis.core.objects import JSON
from apis.core.podmeta import DEFAULT_SCHEDULER_NAME
from apis.core.resources import PODS
from apis.extension.device_allocated import ANNOTATION_DEVICE_ALLOCATED
from apis.extension.priority import LABEL_POD_SUB_PRIORITY
from apis.extension.resource_status import ANNOTATION_RESOURCE_STATUS
from apis.scheduling.reservation import (
    ANNOTATION_EXACT_MATCH_RESERVATION,
    ANNOTATION_IS_PRE_ALLOCATION,
    ANNOTATION_RESERVATION_ALLOCATED,
    ANNOTATION_RESERVATION_NAME,
    ANNOTATION_RESERVATION_NODE,
    ANNOTATION_RESERVATION_RESTRICTED_OPTIONS,
    ANNOTATION_RESERVE_POD,
    CONDITION_READY,
    CONDITION_SCHEDULED,
    LABEL_RESERVATION_ORDER,
    PHASE_AVAILABLE,
    PHASE_FAILED,
    PHASE_PENDING,
    PHASE_SUCCEEDED,
    REASON_AVAILABLE,
    REASON_EXPIRED,
    REASON_SCHEDULED,
    REASON_SUCCEEDED,
    REASON_UNSCHEDULABLE,
    ReservationAllocated,
    decode_reservation_allocated,
    decode_reservation_order,
    decode_restricted_resources,
)
from scheduler import malformed
from scheduler.cluster import Cluster, key, pod_requests
from scheduler.deviceshare.state import Allocations
from scheduler.elasticquota.model import resource_json
from scheduler.gang.model import parse_go_duration
from scheduler.reservation import cpus, devices

log = logging.getLogger(__name__)

PENDING, AVAILABLE, SUCCEEDED, FAILED = PHASE_PENDING, PHASE_AVAILABLE, PHASE_SUCCEEDED, PHASE_FAILED
RESTRICTED = "Restricted"  # spec.allocatePolicy (Aligned, the other value, is the default behaviour)
DEFAULT_POLICY = ""  # spec.allocatePolicy unset: Default (deprecated upstream, served as Aligned)
REASON_PREFIX = "Reservation(s) "  # pkg/util/reservation ErrReasonPrefix
DEFAULT_TTL = 24 * 3600.0  # reservation_types.go: ttl defaults to 24h
MAX_INT32 = 2**31 - 1


@dataclass
class Reservation:
    obj: JSON
    name: str
    uid: str
    phase: str
    node: str | None
    allocatable: dict[str, int] = field(default_factory=dict)  # reserved (no "pods": that is pod_limit)
    allocated: dict[str, int] = field(default_factory=dict)
    owners: list[str] = field(default_factory=list)  # ns/name of pods served
    owner_refs: list[JSON] = field(default_factory=list)  # status.currentOwners
    pod_limit: int | None = None  # the template's `pods` request: how many owners at most
    reason: str = ""
    annotations: dict[str, str] = field(default_factory=dict)  # written on the object (device-allocated)
    pod: JSON = field(default_factory=dict)  # the reserve pod
    owner_devices: JSON = field(default_factory=dict)  # owner key → its device Allocations
    owner_cpus: JSON = field(default_factory=dict)  # owner key → its CPUs and NUMA resources (cpus.Held)
    dirty: bool = False  # status differs from the object's
    placed: JSON | None = None  # the reserve pod `place` made last, and what it was made from
    placed_shape: tuple[object, ...] = ()
    placed_requests: dict[str, int] = field(default_factory=dict)
    placed_from: tuple[object, ...] = ()  # (revision, node, allocatable, annotations) `placed_shape` was computed at
    revision: int = 0  # grows with every account/release
    pre_allocated: list[JSON] = field(default_factory=list)  # running pods made owners at placement, to annotate

    @property
    def spec(self) -> JSON:
        return self.obj.get("spec") or {}

    @property
    def scheduler_name(self) -> str:
        """The template's spec.schedulerName ("" when the template cannot be read)."""
        tmpl = self.spec.get("template")
        spec = tmpl.get("spec") if isinstance(tmpl, dict) else None
        return str(spec.get("schedulerName") or "") if isinstance(spec, dict) else ""

    @property
    def allocate_once(self) -> bool:
        return self.spec.get("allocateOnce") is not False  # IsReservationAllocateOnce: nil means true

    @functools.cached_property
    def pod_key(self) -> str:  # the name never changes; read for every reservation in every owner's cycle
        return f"{reserve_pod_namespace(self.obj)}/reservation/{self.name}"

    @property
    def taints(self) -> list[JSON]:
        return [t for t in self.spec.get("taints") or [] if isinstance(t, dict)]

    def remaining(self) -> dict[str, int]:
        return {r: max(0, v - self.allocated.get(r, 0)) for r, v in self.allocatable.items()}

    def held_devices(self) -> tuple[str, Allocations] | None:
        """(encoded, Allocations) of the devices still held, or None when it reserved none."""
        reserved = self.annotations.get(ANNOTATION_DEVICE_ALLOCATED)
        return devices.remaining(reserved, list(self.owner_devices.values())) if reserved else None

    def held_cpus(self) -> tuple[str, frozenset[int]] | None:
        """(resource-status, CPUs) of the cpuset and NUMA resources still held, or None when it was given none."""
        reserved = self.annotations.get(ANNOTATION_RESOURCE_STATUS)
        return cpus.remaining(reserved, list(self.owner_cpus.values())) if reserved else None

    @property
    def pre_allocation(self) -> bool:
        """spec.preAllocation: placed by taking over a running owner's resources (see preallocation)."""
        return self.spec.get("preAllocation") is True

    @property
    def policy(self) -> str:
        """spec.allocatePolicy: "" (Default), Aligned or Restricted."""
        return str(self.spec.get("allocatePolicy") or DEFAULT_POLICY)

    @property
    def restricted(self) -> bool:
        """spec.allocatePolicy Restricted: owners get only what it reserved, for the resources it reserves."""
        return self.policy == RESTRICTED

    @functools.cached_property
    def owner_selectors(self) -> tuple[LabelSelector, ...]:
        """spec.owners' labelSelector terms, converted once (upstream MatchReservationOwners skips a term whose
        selector does not convert)."""
        owners = [o for o in self.spec.get("owners") or [] if isinstance(o, dict)]
        got = (selector_or_nothing(o.get("labelSelector")) for o in owners)
        return tuple(s for s in got if s is not None)

    @functools.cached_property
    def order(self) -> int:
        """The reservation-order label of the object (0: no preference); the smaller is preferred."""
        labels = (self.obj.get("metadata") or {}).get("labels") or {}
        return decode_reservation_order(labels.get(LABEL_RESERVATION_ORDER))

    @functools.cached_property
    def restricted_options(self) -> tuple[tuple[str, ...], str]:
        """(names restricted, why the options are invalid): with reservation-restricted-options, the reserved
        resources it lists (all reserved ones when it lists none of them); read for Restricted ones only, as
        upstream NewReservationInfo, whose parse error leaves the reservation unmatchable."""
        raw = ((self.obj.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_RESERVATION_RESTRICTED_OPTIONS)
        if not self.restricted or not raw:
            return (), ""
        try:
            listed = set(decode_restricted_resources(str(raw)))
        except InvalidInput as e:
            why = f"invalid {ANNOTATION_RESERVATION_RESTRICTED_OPTIONS}: {e}"
            malformed.report("Reservation", self.obj, why, "serves no pod")
            return (), why
        return tuple(n for n in sorted(self.allocatable) if n in listed), ""

    @property
    def matchable(self) -> bool:
        """Upstream IsMatchable: Available on a node, options readable, not an allocateOnce one already used."""
        return (self.phase == AVAILABLE and bool(self.node) and not self.restricted_options[1]
                and not (self.allocate_once and self.owners))

    def restricted_misfit(self, requests: dict[str, int]) -> str:
        """Why a Restricted reservation cannot serve these requests, "" when it can: each resource it restricts
        (reservation-restricted-options, else all it reserves) that the pod asks must fit in what is left of it
        (upstream reservation/plugin.go fitsReservation)."""
        for name in self.restricted_options[0] or sorted(self.allocatable):
            want = requests.get(name, 0)
            if want > 0 and want > self.allocatable[name] - self.allocated.get(name, 0):
                return f"{REASON_PREFIX}Insufficient {name}"
        return ""

    def full(self) -> bool:
        return self.pod_limit is not None and len(self.owners) >= self.pod_limit

    def status(self, now: float | None = None) -> JSON:
        """The status subresource, its conditions as _conditions writes them."""
        out: JSON = {"phase": self.phase}
        if self.node:
            out["nodeName"] = self.node
        alloc = dict(self.allocatable)
        if self.pod_limit is not None:
            alloc[PODS] = self.pod_limit
        if self.node:
            out["allocatable"] = resource_json(alloc)
        if self.allocated or self.owners:
            used = dict(self.allocated)
            if self.pod_limit is not None:
                used[PODS] = len(self.owners)
            out["allocated"] = resource_json(used)
        if self.owner_refs:
            out["currentOwners"] = self.owner_refs
        conditions = self._conditions(rfc3339(time.time() if now is None else now))
        if conditions is not None:
            out["conditions"] = conditions
        return out


    def _conditions(self, stamp: str) -> list[JSON] | None:
        """The conditions upstream's pkg/util/reservation writes for the phase (None: leave them as they are):
        Available → exactly Scheduled=True/Scheduled and Ready=True/Available (SetReservationAvailable); Succeeded
        → Ready=False/Succeeded; Failed → Ready=False/Expired with the reason as message (SetReservationExpired);
        Pending with a reason → Scheduled=False/Unschedulable with it, or a Scheduled=True kept as it is
        (SetReservationUnschedulable). Other conditions stay. Every condition written carries lastProbeTime `stamp`;
        lastTransitionTime stays while the condition's status does, else it is `stamp`."""
        if self.phase == AVAILABLE:
            wanted = [(CONDITION_SCHEDULED, "True", REASON_SCHEDULED, ""),
                      (CONDITION_READY, "True", REASON_AVAILABLE, "")]
        elif self.phase == SUCCEEDED:
            wanted = [(CONDITION_READY, "False", REASON_SUCCEEDED, "")]
        elif self.phase == FAILED:
            wanted = [(CONDITION_READY, "False", REASON_EXPIRED, self.reason)]
        elif self.reason:
            wanted = [(CONDITION_SCHEDULED, "False", REASON_UNSCHEDULABLE, self.reason)]
        else:
            return None
        before = [c for c in (self.obj.get("status") or {}).get("conditions") or [] if isinstance(c, dict)]
        out = [] if self.phase == AVAILABLE else [dict(c) for c in before]
        for ctype, status, reason, message in wanted:
            old = next((c for c in before if c.get("type") == ctype), {})
            if ctype == CONDITION_SCHEDULED and status == "False" and old.get("status") == "True":
                status, reason, message = "True", str(old.get("reason") or REASON_SCHEDULED), ""  # placed: kept
            cond: JSON = {"type": ctype, "status": status, "reason": reason}
            if message:
                cond["message"] = message
            cond["lastProbeTime"] = stamp
            cond["lastTransitionTime"] = (old.get("lastTransitionTime") or stamp
                                          if old.get("status") == status else stamp)
            at = next((i for i, c in enumerate(out) if c.get("type") == ctype), None)
            if at is None:
                out.append(cond)
            else:
                out[at] = cond
        return out


def reserve_pod_namespace(obj: JSON) -> str:
    """The reserve pod's namespace: the template's, else "default" (upstream NewReservePod)."""
    tmeta = (((obj.get("spec") or {}).get("template") or {}).get("metadata") or {})
    return str(tmeta.get("namespace") or "default")


def _reserve_pod_priority(spec: JSON, labels: JSON) -> int:
    """The template's spec.priority, else the Reservation's koordinator.sh/priority label when it is an int32, else
    the largest int32 so that nothing preempts it (upstream NewReservePod; a priorityClassName is not resolved)."""
    if spec.get("priority") is not None:
        return int(spec["priority"])
    text = str(labels.get(LABEL_POD_SUB_PRIORITY) or "")
    if re.fullmatch(r"[+-]?[0-9]+", text) and -(2**31) <= int(text) < 2**31:
        return int(text)
    return MAX_INT32


def reserve_pod(obj: JSON) -> JSON:
    """The pod a reservation is scheduled as (upstream reservationutil.NewReservePod): spec.template, named
    reservation/<name> (upstream names it by the uid) in the template's namespace; the Reservation's labels and
    annotations over the template's, the reserve-pod and reservation-name markers, is-pre-allocation with
    spec.preAllocation, a template's spec.nodeName moved to reservation-node; priority and schedulerName defaulted."""
    meta = obj.get("metadata") or {}
    tmpl = (obj.get("spec") or {}).get("template") or {}
    tmeta = tmpl.get("metadata") or {}
    spec = json.loads(json.dumps(tmpl.get("spec") or {}))
    for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        for part in ("requests", "limits"):  # the pod-count limit is the reservation's, not a request
            ((c.get("resources") or {}).get(part) or {}).pop(PODS, None)
    labels = {**(tmeta.get("labels") or {}), **(meta.get("labels") or {})}
    annotations = {**(tmeta.get("annotations") or {}), **(meta.get("annotations") or {}),
                   ANNOTATION_RESERVE_POD: "true", ANNOTATION_RESERVATION_NAME: str(meta.get("name") or "")}
    if (obj.get("spec") or {}).get("preAllocation") is True:
        annotations[ANNOTATION_IS_PRE_ALLOCATION] = "true"
    if spec.get("nodeName"):
        annotations[ANNOTATION_RESERVATION_NODE] = str(spec.pop("nodeName"))
    spec["priority"] = _reserve_pod_priority(spec, meta.get("labels") or {})
    spec["schedulerName"] = spec.get("schedulerName") or DEFAULT_SCHEDULER_NAME
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"reservation/{meta.get('name')}", "namespace": reserve_pod_namespace(obj),
                         "uid": meta.get("uid"), "labels": labels, "annotations": annotations},
            "spec": spec}


def _pod_limit(obj: JSON) -> int | None:
    total = 0
    found = False
    for c in ((((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []):
        v = ((c.get("resources") or {}).get("requests") or {}).get(PODS)
        if v is not None:
            found = True
            total += int(str(v))
    return total if found else None


def expired(obj: JSON, now: float) -> bool:
    """`expires` first, else creationTimestamp + ttl (default 24h, "0" never)."""
    spec = obj.get("spec") or {}
    at = parse_time(spec.get("expires"))
    if at is not None:
        return now >= at
    created = parse_time((obj.get("metadata") or {}).get("creationTimestamp"))
    if created is None:
        return False
    ttl = parse_go_duration(str(spec["ttl"])) if spec.get("ttl") is not None else DEFAULT_TTL
    return bool(ttl) and ttl is not None and now >= created + ttl


def parse(obj: JSON, now: float | None = None) -> Reservation:
    """One object as the scheduler starts from; a malformed one is Failed with the reason (never raised)."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    name = str(meta.get("name") or "")
    r = Reservation(obj, name, str(meta.get("uid") or ""), str(status.get("phase") or PENDING),
                    status.get("nodeName") or None, annotations=dict(meta.get("annotations") or {}))
    if r.phase not in (PENDING, AVAILABLE, SUCCEEDED, FAILED):
        r.phase = PENDING
    try:
        r.pod = reserve_pod(obj)
        r.pod_limit = _pod_limit(obj)
        r.allocatable = {k: v for k, v in pod_requests(r.pod).items() if v}
        if not isinstance((obj.get("spec") or {}).get("owners"), list) or not obj["spec"]["owners"]:
            raise ValueError("spec.owners is required")
    except (ValueError, TypeError, AttributeError) as e:
        # written once: a malformed object already Failed is not patched again every cycle
        r.phase, r.reason, r.dirty = FAILED, f"invalid reservation: {e}", r.phase != FAILED
        malformed.report("Reservation", obj, str(e), "marked Failed")
        return r
    if r.phase in (PENDING, AVAILABLE) and expired(obj, time.time() if now is None else now):
        r.phase, r.reason, r.dirty = FAILED, "reservation expired", True
    if r.phase == AVAILABLE and not r.node:
        r.phase = PENDING
    if r.node and r.phase == PENDING:  # placed but not yet marked available (another scheduler's bind)
        r.phase, r.dirty = AVAILABLE, True
    return r


def _requests_masked(r: Reservation, pod: JSON) -> dict[str, int]:
    return {k: v for k, v in pod_requests(pod).items() if k in r.allocatable}


def allocated_to(pod: JSON) -> ReservationAllocated | None:
    """The Reservation the pod says it was served from; None without the annotation or when it is malformed."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_RESERVATION_ALLOCATED)
    try:
        return decode_reservation_allocated(raw) if raw else None
    except InvalidInput:
        return None


def account(r: Reservation, pod: JSON) -> None:
    """The pod is served from the reservation (status.allocated, currentOwners; allocateOnce ends it)."""
    for k, v in _requests_masked(r, pod).items():
        r.allocated[k] = r.allocated.get(k, 0) + v
    r.owners.append(key(pod))
    meta = pod.get("metadata") or {}
    ref = {"namespace": meta.get("namespace") or "default", "name": meta.get("name")}
    if meta.get("uid"):
        ref["uid"] = meta["uid"]
    r.owner_refs.append(ref)
    held_devices = devices.pod_devices(pod)
    if held_devices:
        r.owner_devices[key(pod)] = held_devices
    held_cpus = cpus.pod_held(pod)
    if held_cpus:
        r.owner_cpus[key(pod)] = held_cpus
    r.revision += 1
    if r.allocate_once:
        r.phase = SUCCEEDED


def release(r: Reservation, pod: JSON) -> None:
    """Undo `account` (a preempted owner)."""
    k = key(pod)
    if k not in r.owners:
        return
    for res, v in _requests_masked(r, pod).items():
        r.allocated[res] = max(0, r.allocated.get(res, 0) - v)
    r.allocated = {res: v for res, v in r.allocated.items() if v}
    r.owners.remove(k)
    r.revision += 1
    r.owner_devices.pop(k, None)
    r.owner_cpus.pop(k, None)
    r.owner_refs = [o for o in r.owner_refs if f"{o.get('namespace')}/{o.get('name')}" != k]


def load(cluster: Cluster, objects: list[JSON], now: float | None = None) -> dict[str, Reservation]:
    """Reservations of the cluster, with running owners accounted (the `reservation-allocated` annotation, v1.7's
    binding of running pods included) and each available one's reserve pod placed on its node."""
    book: dict[str, Reservation] = {}
    for o in objects:
        r = parse(o, now)
        if r.name:
            book[r.name] = r
    if not book:  # nothing any pod can be allocated to: no need to read every assigned pod
        return book
    by_uid = {r.uid: r for r in book.values() if r.uid}
    for pod in list(cluster.assigned_pods()):
        ref = allocated_to(pod)
        if ref is None:
            continue
        got = by_uid.get(ref.uid) or book.get(ref.name)
        if got is None or (ref.uid and got.uid and ref.uid != got.uid):
            continue
        r = got
        if key(pod) not in r.owners:
            before = r.phase
            account(r, pod)
            if r.phase != before or (r.obj.get("status") or {}).get("allocated") is None:
                r.dirty = True
    for r in book.values():
        if r.phase == AVAILABLE:
            node = cluster.nodes.get(str(r.node))
            if node is None:
                r.phase, r.reason, r.dirty = FAILED, f"node {r.node} not found", True
                continue
            place(r, cluster)
        elif r.phase == SUCCEEDED and (r.obj.get("status") or {}).get("phase") != SUCCEEDED:
            r.dirty = True
    return book


def place(r: Reservation, cluster: Cluster) -> None:
    """Put the reserve pod, requesting what is still unallocated, on the reservation's node: a new object when
    that changed (DeviceShare re-reads a pod replaced under its key), the same one otherwise (the node is then
    exactly as before it was taken off: see ReservationPlugin._lend)."""
    pod = r.pod
    fast = r.placed_from
    if r.placed is not pod or not fast or fast[0] != r.revision or fast[1] != r.node or fast[2] is not \
            r.allocatable or fast[3] != r.annotations:  # else: nothing the reserve pod is made from moved
        held = r.held_devices()
        held_cpu = r.held_cpus()
        left = r.remaining()
        shape = (r.node, tuple(left.items()), held[0] if held is not None else None,
                 held_cpu[0] if held_cpu is not None else None, tuple(r.annotations.items()))
        if r.placed is not pod or r.placed_shape != shape:
            annotations = {**((pod.get("metadata") or {}).get("annotations") or {}), **r.annotations}
            if held is not None:  # the reserve pod holds what is left; the object keeps what was reserved
                annotations[ANNOTATION_DEVICE_ALLOCATED] = held[0]
            if held_cpu is not None:
                annotations[ANNOTATION_RESOURCE_STATUS] = held_cpu[0]
            r.pod = {**pod, "metadata": {**(pod.get("metadata") or {}), "annotations": annotations},
                     "spec": {**(pod.get("spec") or {}), "nodeName": r.node, "initContainers": [], "overhead": None,
                              "containers": [{"name": "reserved", "resources": {"requests": {
                                  k: (f"{v}m" if k == "cpu" else str(v)) for k, v in left.items()}}}]}}
            r.placed, r.placed_shape, r.placed_requests = r.pod, shape, pod_requests(r.pod)
        r.placed_from = (r.revision, r.node, r.allocatable, dict(r.annotations))
    cluster.nodes[str(r.node)].add_pod(r.pod, r.placed_requests, r.pod_key)


def requests_of(r: Reservation, pod: JSON | None) -> dict[str, int] | None:
    """pod_requests of the reserve pod `place` made last (None for any other object: the node parses it)."""
    return r.placed_requests if pod is not None and pod is r.placed else None


def repair_exact_match(raw: str) -> str:
    """**[decision]** the v1.6 release text writes `{"resourceNames":{"cpu","memory",...}}` (a set, not JSON);
    its intent is a list, so braces holding only strings are read as brackets (logged once per text)."""
    fixed = re.sub(r'\{(\s*"[^"{}:]*"(?:\s*,\s*"[^"{}:]*")*\s*)\}', r"[\1]", raw)
    if fixed != raw:
        log.info("%s %r read as %r (the v1.6 release text's spelling)", ANNOTATION_EXACT_MATCH_RESERVATION, raw, fixed)
    return fixed
