"""Reservation's names: the pod annotations and labels that bind a pod to a Reservation or keep it out of one."""

from __future__ import annotations

# Upstream: apis/extension/reservation.go.

ANNOTATION_RESERVATION_ALLOCATED = "scheduling.koordinator.sh/reservation-allocated"  # {"name": ..., "uid": ...}
ANNOTATION_RESERVATION_AFFINITY = "scheduling.koordinator.sh/reservation-affinity"
ANNOTATION_EXACT_MATCH_RESERVATION = "scheduling.koordinator.sh/exact-match-reservation"
LABEL_RESERVATION_IGNORED = "scheduling.koordinator.sh/reservation-ignored"
ANNOTATION_RESERVE_POD = "scheduling.koordinator.sh/reserve-pod"  # marks the pod that stands for a Reservation
LABEL_POD_PREEMPTIBLE = "scheduling.koordinator.sh/preemptible"  # "false": neither preempted nor lent from
