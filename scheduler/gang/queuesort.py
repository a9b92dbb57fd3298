"""The pending queue's orders: PrioritySort's (kube-scheduler's, a gang's members kept together) and
Coscheduling's queueSort Less of koord-scheduler v1.5/v1.6 (v1.7 dropped the extension point).

Both sort the whole queue at once with a key equal to the Less they restate; the times are creationTimestamps
(RFC 3339 strings sort chronologically), which is when upstream's queue and gang cache first see a pod.
"""

from __future__ import annotations

from collections.abc import Callable

from apis.core.objects import JSON
from apis.extension.priority import LABEL_POD_SUB_PRIORITY
from scheduler.cluster import key
from scheduler.gang.model import gang_id_of, gang_name_of


def created(pod: JSON) -> str:
    return str((pod.get("metadata") or {}).get("creationTimestamp") or "")


def sub_priority(pod: JSON) -> int:
    """GetPodSubPriority: the `koordinator.sh/priority` label as an integer; absent or invalid reads 0."""
    raw = ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_POD_SUB_PRIORITY)
    try:
        return int(str(raw)) if raw is not None else 0
    except ValueError:
        return 0


def priority_order(pods: list[JSON], priority: Callable[[JSON], int] | None = None) -> list[JSON]:
    """PrioritySort: higher priority first, then by creation time; a gang's members together, at its highest
    priority and oldest member (the gang planner takes a gang whole)."""
    first: dict[str, tuple[int, str]] = {}
    for p in pods:
        unit = gang_id_of(p) or key(p)
        mine = (-(priority(p) if priority else 0), created(p))
        first[unit] = min(first.get(unit, mine), mine)

    def rank(p: JSON) -> tuple[int, str, str, str, str]:
        unit = gang_id_of(p) or key(p)
        return first[unit][0], first[unit][1], unit, created(p), key(p)

    return sorted(pods, key=rank)


def coscheduling_order(pods: list[JSON], priority: Callable[[JSON], int]) -> list[JSON]:
    """Coscheduling's Less (v1.5/v1.6): higher priority, then higher `koordinator.sh/priority` sub-priority, then
    the earlier last-schedule time of the pod's gang (a gang's is its oldest member's here: nothing has been tried
    yet in a cycle; a lone pod's is its own), then the gang id `<namespace>/<gang>` (`<namespace>/` for a lone pod),
    then the member's own time (the child schedule cycles are all equal at the start of a cycle), then the key."""
    gang_time: dict[str, str] = {}
    for p in pods:
        gid = gang_id_of(p)
        if gid is not None:
            gang_time[gid] = min(gang_time.get(gid, created(p)), created(p))

    def rank(p: JSON) -> tuple[int, int, str, str, str, str]:
        gid = gang_id_of(p)
        namespace = (p.get("metadata") or {}).get("namespace") or "default"
        last = gang_time[gid] if gid is not None else created(p)
        return -priority(p), -sub_priority(p), last, f"{namespace}/{gang_name_of(p) or ''}", created(p), key(p)

    return sorted(pods, key=rank)
