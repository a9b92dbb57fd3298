"""Pre-allocation (spec.preAllocation): a Reservation placed by taking over a running owner's resources.

Upstream pkg/scheduler/plugins/reservation (transformer.go listPreAllocatableCandidates, plugin.go
filterWithPreAllocatablePod, nominator.go NominatePreAllocation, scoring.go scoreForPreAllocation), Default mode with
one pod: the candidates are the assigned pods its labelSelector owners select that no reservation serves yet; on a
node, a candidate qualifies when it asks for a resource the reservation restricts, fits in the reservation, and the
reservation fits the node without it; the one filling the reservation most is taken and becomes its owner.
"""

from __future__ import annotations

from apis.core.objects import JSON
from apis.scheduling.reservation import ANNOTATION_RESERVATION_ALLOCATED, LABEL_PRE_ALLOCATION_REQUIRED
from scheduler.cluster import Cluster, NodeInfo, is_reserve_pod, pod_requests
from scheduler.reservation.matching import selected_by_owner_selector
from scheduler.reservation.model import Reservation

ERR_UNSUPPORTED = "node(s) reservation pre allocation is unsupported with current attributes"
ERR_REQUIRED = "node(s) no pod match reservation with pre allocation required"
ERR_NO_POD_FITS = "node(s) no pod(s) to meet the pre-allocation requirements"


def required(r: Reservation) -> bool:
    """pre-allocation-required on the reserve pod's labels (the template's, overwritten by the object's: upstream
    transformer.go reads extension.IsPreAllocationRequired(reservePod.Labels))."""
    labels = (r.pod.get("metadata") or {}).get("labels") or {}
    return labels.get(LABEL_PRE_ALLOCATION_REQUIRED) == "true"


def candidates(r: Reservation, cluster: Cluster) -> dict[str, list[JSON]]:
    """node → the assigned pods the reservation may pre-allocate there, in key order."""
    out: dict[str, list[JSON]] = {}
    for name, node in cluster.nodes.items():
        for k in sorted(node.pods):
            pod = node.pods[k]
            annotations = (pod.get("metadata") or {}).get("annotations") or {}
            if is_reserve_pod(pod) or annotations.get(ANNOTATION_RESERVATION_ALLOCATED):
                continue
            if selected_by_owner_selector(r, pod):
                out.setdefault(name, []).append(pod)
    return out


def qualifies(r: Reservation, requests: dict[str, int], node: NodeInfo) -> bool:
    """The pod asks for a resource the reservation restricts, fits in it, and the reservation fits the node
    without the pod (upstream fitsNodeAndReservation with the pod's requests given back to the node)."""
    names = r.restricted_options[0] or sorted(r.allocatable)
    if not any(requests.get(n, 0) > 0 for n in names) or r.restricted_misfit(requests):
        return False
    return all(v <= node.allocatable.get(k, 0) - (node.requested.get(k, 0) - requests.get(k, 0))
               for k, v in r.allocatable.items())


def score(r: Reservation, requests: dict[str, int]) -> int:
    """ScoreReservation: how much of the reservation the pod fills (MostAllocated, every resource weighing 1)."""
    reserved = {k: v for k, v in r.allocatable.items() if v}
    if not reserved:
        return 0
    total = sum(100 * requests.get(k, 0) // cap for k, cap in reserved.items() if requests.get(k, 0) <= cap)
    return total // len(reserved)


def nominate(r: Reservation, node: NodeInfo, pods: list[JSON]) -> tuple[JSON, int] | None:
    """The qualifying pod filling the reservation most (the first by key on a tie) and its score; None if none."""
    best: tuple[JSON, int] | None = None
    for pod in pods:
        requests = pod_requests(pod)
        if qualifies(r, requests, node):
            s = score(r, requests)
            if best is None or s > best[1]:
                best = (pod, s)
    return best
