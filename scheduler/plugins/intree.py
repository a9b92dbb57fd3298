"""kube-scheduler's in-tree plugins koord-sched runs: PrioritySort (queueSort) and DefaultBinder (bind)."""

from __future__ import annotations

from apis.core.objects import JSON
from scheduler.cluster import Cluster
from scheduler.gang.model import pod_priority
from scheduler.gang.queuesort import QueueState, priority_order


class PrioritySort:
    """Pending pods by priority, then queue time; a gang's members together when Coscheduling is in the profile
    (its NextPod: scheduler.gang.queuesort)."""

    name = "PrioritySort"

    def __init__(self, gangs_together: bool = True) -> None:
        self.gangs_together = gangs_together

    def order(self, pods: list[JSON], cluster: Cluster, state: QueueState | None = None) -> list[JSON]:
        return priority_order(pods, lambda p: pod_priority(p, cluster), state, self.gangs_together)


class DefaultBinder:
    """Binds every pod through its Binding subresource (scheduler.binder does the writing)."""

    name = "DefaultBinder"

    def binds(self, pod: JSON) -> bool:
        return True
