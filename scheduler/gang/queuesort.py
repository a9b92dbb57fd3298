"""The pending queue's orders: PrioritySort's (kube-scheduler's; with Coscheduling in the profile, v1.7's NextPod
keeps a gang's members together at its representative's place) and Coscheduling's queueSort Less of koord-scheduler
v1.5/v1.6 (v1.7 dropped that extension point).

Both sort the whole queue at once with a key equal to the Less they restate. What upstream's queue and gang cache
know beyond the pod comes in a `QueueState` (scheduler.queue keeps one across `run`'s cycles); without one a pod's
queue time is its creationTimestamp (RFC 3339 strings sort chronologically), which keeps `simulate` deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

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


@dataclass
class QueueState:
    """The queue's and the gang cache's memory of the pods (upstream QueuedPodInfo and GangGroupInfo).

    `timestamps`: pod key → QueuedPodInfo.Timestamp, set when the pod entered the queue and again each time it came
    back unschedulable (so a pod that failed goes behind those waiting since). `group_times`: GangGroup id →
    LastScheduleTime (ganggroup.go: when the group was first seen, moved to now once every member was tried in it).
    `child_cycles`: pod key → the member's child schedule cycle (v1.5/v1.6's ChildrenScheduleRoundMap)."""

    timestamps: dict[str, str] = field(default_factory=dict)
    group_times: dict[str, str] = field(default_factory=dict)
    child_cycles: dict[str, int] = field(default_factory=dict)

    def timestamp(self, pod: JSON) -> str:
        return self.timestamps.get(key(pod)) or created(pod)


def _group_ids(pods: Iterable[JSON], groups: Callable[[JSON], str] | None) -> dict[str, str]:
    """pod key → its GangGroup id (`groups`; else the pod's own gang id); lone pods are left out."""
    out: dict[str, str] = {}
    for p in pods:
        gid = gang_id_of(p)
        if gid is not None:
            out[key(p)] = groups(p) if groups is not None else gid
    return out


def priority_order(pods: list[JSON], priority: Callable[[JSON], int] | None = None,
                   state: QueueState | None = None, gangs_together: bool = True) -> list[JSON]:
    """PrioritySort's Less (higher priority, then the earlier queue timestamp) over units: a lone pod, or a gang's
    members together at the place of its representative (the member first in that order: v1.7 Coscheduling's
    PreEnqueue lets one member per gang into the queue and NextPod hands out the rest right after it). Without
    Coscheduling in the profile (`gangs_together` False) there is no NextPod: every pod is a unit of its own."""
    st = state or QueueState()

    def unit_of(p: JSON) -> str:
        return (gang_id_of(p) if gangs_together else None) or key(p)

    first: dict[str, tuple[int, str]] = {}
    for p in pods:
        unit = unit_of(p)
        mine = (-(priority(p) if priority else 0), st.timestamp(p))
        first[unit] = min(first.get(unit, mine), mine)

    def rank(p: JSON) -> tuple[int, str, str, str, str]:
        unit = unit_of(p)
        return first[unit][0], first[unit][1], unit, st.timestamp(p), key(p)

    return sorted(pods, key=rank)


def coscheduling_order(pods: list[JSON], priority: Callable[[JSON], int], state: QueueState | None = None,
                       groups: Callable[[JSON], str] | None = None) -> list[JSON]:
    """Coscheduling's Less (v1.5/v1.6 coscheduling.go): higher priority, then higher `koordinator.sh/priority`
    sub-priority, then the earlier last-schedule time (a gang member's is its GangGroup's LastScheduleTime, a lone
    pod's its queue timestamp), then the GangGroup id (a lone pod has none: "" sorts first), then the gang id
    `<namespace>/<gang>` (`<namespace>/` for a lone pod), then the smaller child schedule cycle, then the pod name.

    Without a recorded LastScheduleTime a group's is its oldest member's queue timestamp (the gang cache makes the
    GangGroupInfo when it sees the first member)."""
    st = state or QueueState()
    group_of = _group_ids(pods, groups)
    group_time: dict[str, str] = {}
    for p in pods:
        g = group_of.get(key(p))
        if g is not None:
            group_time[g] = min(group_time.get(g, st.timestamp(p)), st.timestamp(p))

    def rank(p: JSON) -> tuple[int, int, str, str, str, int, str]:
        k = key(p)
        g = group_of.get(k)
        namespace = (p.get("metadata") or {}).get("namespace") or "default"
        last = (st.group_times.get(g) or group_time[g]) if g is not None else st.timestamp(p)
        return (-priority(p), -sub_priority(p), last, g or "", f"{namespace}/{gang_name_of(p) or ''}",
                st.child_cycles.get(k, 0), str((p.get("metadata") or {}).get("name") or ""))

    return sorted(pods, key=rank)
