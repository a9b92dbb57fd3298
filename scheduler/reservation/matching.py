"""Which reservations a pod may be served from: owners, reservation-affinity, taints, exact match, pod limit.

Upstream: pkg/util/reservation (MatchReservationOwners), apis/extension/reservation.go (ReservationAffinity,
ExactMatchReservation, IsReservationIgnored), pkg/scheduler/plugins/reservation (taint tolerance).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from apis.core.objects import JSON
from apis.core.taints import NO_EXECUTE, NO_SCHEDULE, first_untolerated
from apis.scheduling.reservation import (
    ANNOTATION_EXACT_MATCH_RESERVATION,
    ANNOTATION_RESERVATION_AFFINITY,
    LABEL_RESERVATION_IGNORED,
)
from scheduler.cluster import pod_requests
from scheduler.reservation.model import AVAILABLE, Reservation, repair_exact_match


def _meta(pod: JSON) -> JSON:
    return pod.get("metadata") or {}


def ignored(pod: JSON) -> bool:
    """IsReservationIgnored: a pod LABEL (the v1.6 text shows it under labels too)."""
    return (_meta(pod).get("labels") or {}).get(LABEL_RESERVATION_IGNORED) == "true"


def _ref_matches(ref: object, name: object, namespace: str, uid: object, kind: object = None) -> bool:
    if not isinstance(ref, dict):
        return False
    if ref.get("uid"):
        return bool(ref["uid"] == uid)
    if ref.get("namespace") and ref["namespace"] != namespace:
        return False
    if ref.get("kind") and kind is not None and ref["kind"] != kind:
        return False
    return bool(ref.get("name")) and ref.get("name") == name


def owner_of(r: Reservation, pod: JSON) -> bool:
    """MatchReservationOwners: any owner (object, controller or labelSelector) matches; the terms are ORed."""
    meta = _meta(pod)
    ns = meta.get("namespace") or "default"
    labels = meta.get("labels") or {}
    controllers = [o for o in meta.get("ownerReferences") or [] if isinstance(o, dict) and o.get("controller")]
    for owner in r.spec.get("owners") or []:
        if not isinstance(owner, dict):
            continue
        if owner.get("object") is not None and _ref_matches(owner["object"], meta.get("name"), ns, meta.get("uid")):
            return True
        if owner.get("controller") is not None and any(
                _ref_matches(owner["controller"], c.get("name"), ns, c.get("uid"), c.get("kind"))
                for c in controllers):
            return True
    return any(s.matches(labels) for s in r.owner_selectors)


def selected_by_owner_selector(r: Reservation, pod: JSON) -> bool:
    """Whether one of the reservation's labelSelector owner terms selects the pod (the pods it may pre-allocate)."""
    labels = _meta(pod).get("labels") or {}
    return any(s.matches(labels) for s in r.owner_selectors)


@dataclass
class PodView:
    """A pod's reservation-related wishes, parsed once per cycle."""

    requests: dict[str, int]
    ignored: bool = False
    required: bool = False  # reservation-affinity present: only a reservation may serve it
    name: str = ""
    selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[JSON] = field(default_factory=list)
    exact: list[str] = field(default_factory=list)
    invalid: str = ""

    def eligible(self, r: Reservation, pod: JSON) -> bool:
        if r.phase != AVAILABLE or not r.node or r.spec.get("unschedulable") or r.full():
            return False
        if r.restricted_options[1]:  # upstream: a parse error leaves it unmatchable
            return False
        if self.name and r.name != self.name:
            return False
        labels = (r.obj.get("metadata") or {}).get("labels") or {}
        if any(labels.get(k) != v for k, v in self.selector.items()):
            return False
        if first_untolerated(r.taints, self.tolerations, (NO_SCHEDULE, NO_EXECUTE)) is not None:
            return False
        if not exact_match(self.requests, r.allocatable, self.exact):
            return False
        return owner_of(r, pod)


def exact_match(requests: dict[str, int], allocatable: dict[str, int], names: list[str]) -> bool:
    """ExactMatchReservation: for each named resource both absent, or both present and equal. Upstream returns
    true at the first resource absent from both (an early return we keep: it is the shipped behaviour)."""
    for n in names:
        if n not in allocatable or n not in requests:
            return n not in allocatable and n not in requests
        if allocatable[n] != requests[n]:
            return False
    return True


def owner_kinds(r: Reservation) -> frozenset[str]:
    """Which kinds of owner terms (object, controller, labelSelector) the reservation has."""
    return frozenset(k for o in r.spec.get("owners") or [] if isinstance(o, dict)
                     for k in ("object", "controller", "labelSelector") if o.get(k) is not None)


def signature(pod: JSON, v: PodView, kinds: frozenset[str]) -> tuple[object, ...]:
    """Everything `PodView.eligible` reads of the pod, for reservations whose owner terms are of `kinds`: pods with
    one signature match the same reservations (the pod's name and uid count only where an object term exists)."""
    meta = _meta(pod)
    ns = meta.get("namespace") or "default"
    labels = tuple(sorted((str(k), str(x)) for k, x in (meta.get("labels") or {}).items()))
    ident = (meta.get("name"), meta.get("uid")) if "object" in kinds else None
    controllers = (json.dumps(meta.get("ownerReferences"), sort_keys=True, default=str)
                   if "controller" in kinds else None)
    return (ns, labels, ident, controllers, v.ignored, v.required, v.name, tuple(sorted(v.selector.items())),
            json.dumps(v.tolerations, sort_keys=True, default=str), tuple(v.exact),
            tuple(sorted(v.requests.items())) if v.exact else None)


def view(pod: JSON) -> PodView:
    annotations = _meta(pod).get("annotations") or {}
    v = PodView(requests=pod_requests(pod), ignored=ignored(pod))
    raw = annotations.get(ANNOTATION_RESERVATION_AFFINITY)
    if raw:
        try:
            a = json.loads(raw)
            if not isinstance(a, dict):
                raise ValueError("not an object")
            v.required = True
            v.name = str(a.get("name") or "")
            v.selector = {str(k): str(x) for k, x in (a.get("reservationSelector") or {}).items()}
            v.tolerations = [t for t in a.get("tolerations") or [] if isinstance(t, dict)]
        except (ValueError, AttributeError) as e:
            v.invalid = f"invalid {ANNOTATION_RESERVATION_AFFINITY}: {e}"
    raw = annotations.get(ANNOTATION_EXACT_MATCH_RESERVATION)
    if raw:
        try:
            spec = json.loads(repair_exact_match(raw))
            names = spec.get("resourceNames") if isinstance(spec, dict) else None
            if names is not None and not isinstance(names, list):
                raise ValueError("resourceNames must be a list")
            v.exact = [str(n) for n in names or []]
        except (ValueError, AttributeError) as e:
            v.invalid = f"invalid {ANNOTATION_EXACT_MATCH_RESERVATION}: {e}"
    return v
