"""Reservation's names: the pod annotations and labels that bind a pod to a Reservation or keep it out of one."""

from __future__ import annotations

import json
from dataclasses import dataclass

from apis.extension.errors import AnnotationError

# Upstream: apis/extension/reservation.go.

ANNOTATION_RESERVATION_ALLOCATED = "scheduling.koordinator.sh/reservation-allocated"  # {"name": ..., "uid": ...}
ANNOTATION_RESERVATION_AFFINITY = "scheduling.koordinator.sh/reservation-affinity"
ANNOTATION_EXACT_MATCH_RESERVATION = "scheduling.koordinator.sh/exact-match-reservation"
LABEL_RESERVATION_IGNORED = "scheduling.koordinator.sh/reservation-ignored"
ANNOTATION_RESERVE_POD = "scheduling.koordinator.sh/reserve-pod"  # marks the pod that stands for a Reservation
LABEL_POD_PREEMPTIBLE = "scheduling.koordinator.sh/preemptible"  # "false": neither preempted nor lent from


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
