"""Reservation's names: annotations and labels that bind a pod to a Reservation, keep it out of one, or shape one."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from apis.extension.errors import AnnotationError, struct_fields

# Upstream: apis/extension/reservation.go.

API_VERSION = "scheduling.koordinator.sh/v1alpha1"
KIND = "Reservation"
PHASE_PENDING, PHASE_AVAILABLE, PHASE_SUCCEEDED, PHASE_FAILED = "Pending", "Available", "Succeeded", "Failed"
CONDITION_SCHEDULED, CONDITION_READY = "Scheduled", "Ready"
# the conditions' reasons (reservation_types.go): Scheduled is True/Scheduled or False/Unschedulable; Ready is
# True/Available, or False/Succeeded or False/Expired
REASON_SCHEDULED, REASON_UNSCHEDULABLE = "Scheduled", "Unschedulable"
REASON_AVAILABLE, REASON_SUCCEEDED, REASON_EXPIRED = "Available", "Succeeded", "Expired"

ANNOTATION_RESERVATION_ALLOCATED = "scheduling.koordinator.sh/reservation-allocated"  # {"name": ..., "uid": ...}
ANNOTATION_RESERVATION_AFFINITY = "scheduling.koordinator.sh/reservation-affinity"
ANNOTATION_EXACT_MATCH_RESERVATION = "scheduling.koordinator.sh/exact-match-reservation"
LABEL_RESERVATION_IGNORED = "scheduling.koordinator.sh/reservation-ignored"
ANNOTATION_RESERVE_POD = "scheduling.koordinator.sh/reserve-pod"  # marks the pod that stands for a Reservation
# on the reserve pod (upstream pkg/util/reservation): the Reservation's name (searched inversely), the node its
# template names (spec.nodeName moved here, so no plugin takes the pod as bound) and spec.preAllocation
ANNOTATION_RESERVATION_NAME = "scheduling.koordinator.sh/reservation-name"
ANNOTATION_RESERVATION_NODE = "scheduling.koordinator.sh/reservation-node"
ANNOTATION_IS_PRE_ALLOCATION = "scheduling.koordinator.sh/is-pre-allocation"
LABEL_POD_PREEMPTIBLE = "scheduling.koordinator.sh/preemptible"  # "false": neither preempted nor lent from
# on the Reservation: among those a pod may use on a node, the smallest non-zero order is preferred
LABEL_RESERVATION_ORDER = "scheduling.koordinator.sh/reservation-order"
# on the reserve pod (template or Reservation labels): place a spec.preAllocation one only by pre-allocating a pod
LABEL_PRE_ALLOCATION_REQUIRED = "scheduling.koordinator.sh/pre-allocation-required"
# on a Restricted Reservation: {"resources": [...]}, which reserved resources the policy restricts
ANNOTATION_RESERVATION_RESTRICTED_OPTIONS = "scheduling.koordinator.sh/reservation-restricted-options"


@dataclass(frozen=True)
class ReservationAllocated:
    """The Reservation a pod was served from (reservation-allocated: {"name": ..., "uid": ...})."""

    name: str
    uid: str = ""


def decode_reservation_allocated(text: str) -> ReservationAllocated:
    """The annotation's value; AnnotationError when it is not a JSON object. A missing or empty field is ""."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise AnnotationError("", f"invalid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise AnnotationError("", "must be a JSON object")
    return ReservationAllocated(str(doc.get("name") or ""), str(doc.get("uid") or ""))


def encode_reservation_allocated(ref: ReservationAllocated) -> str:
    """The annotation koord-scheduler writes at Reserve: the name, and the uid when the Reservation has one."""
    return json.dumps({"name": ref.name, **({"uid": ref.uid} if ref.uid else {})}, separators=(",", ":"))


def decode_reservation_order(text: str | None) -> int:
    """The reservation-order label as upstream reads it (strconv.ParseInt, base 10, 64 bits): 0 — no preference — when
    absent, empty or not such an integer."""
    if not text or re.fullmatch(r"[+-]?[0-9]+", text) is None:
        return 0
    value = int(text)
    return value if -(2**63) <= value < 2**63 else 0


def decode_restricted_resources(text: str) -> tuple[str, ...]:
    """The `resources` of reservation-restricted-options (json.Unmarshal into ReservationRestrictedOptions: field names
    fold, `null` is none); AnnotationError when it is not such an object."""
    fields = struct_fields(text)
    names = fields.get("resources") if fields is not None else None
    if names is None:
        return ()
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise AnnotationError("resources", "must be a list of resource names")
    return tuple(names)
