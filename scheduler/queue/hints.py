"""Queueing hints: the cluster events each plugin registers as able to make a pod it rejected schedulable.

Upstream each plugin's EventsToRegister (koord-scheduler v1.5–v1.7 on kube-scheduler v1.28.7); no Koordinator
plugin sets a QueueingHintFn, so a registered event always requeues (kube-scheduler's default hint). A pod rejected
by no plugin in particular (Reserve, a member's group failing with it) is requeued by any event.

| plugin | events |
|---|---|
| Reservation | Pod Delete; Reservation Add/Update/Delete (plugins/reservation/plugin.go) |
| DeviceShare | Pod Delete; Device Add/Update/Delete (plugins/deviceshare/plugin.go) |
| NodeNUMAResource | Pod Delete; NodeResourceTopology Add/Update/Delete (plugins/nodenumaresource/plugin.go) |
| LoadAwareScheduling | Pod Delete; NodeMetric Add/Update/Delete (plugins/loadaware/load_aware.go) |
| ElasticQuota | Pod Delete; ElasticQuota, every action (plugins/elasticquota/plugin.go) |
| Coscheduling v1.5/v1.6 | Pod Add; PodGroup Add/Update (plugins/coscheduling/coscheduling.go) |
| Coscheduling v1.7 | none: the gang cache activates a gang instead when a member is created or its PodGroup is
  added or updated (coscheduling/core/gang_cache.go onPodAdd, onPodGroupAdd/Update) — `GANG_ACTIVATION` |
| NodeResourcesFit, NodePorts | Pod Delete; Node Add/Update (kube-scheduler's noderesources/fit.go, nodeports) |
| NodeAffinity, NodeName, TaintToleration | Node Add/Update |
| NodeUnschedulable | Node Add/Update (upstream: only a taint update; we do not tell node updates apart) |
| PodTopologySpread | Pod, every action; Node Add/Update/Delete |
| InterPodAffinity | Pod, every action; Node Add/Update |

An assigned pod's Add or Update requeues only pods with pod (anti-)affinity terms (kube-scheduler v1.28's
AssignedPodAdded/AssignedPodUpdated); a Pod Delete, any pod. A Reservation with a node deleted is also a Pod Delete
(koord-scheduler's reservation handler takes its reserve pod out of the cache that way). v1.8 adds QueueingHintFns
to ElasticQuota behind `enableQueueHint`; the charts here (v1.5–v1.7) have none.
"""

from __future__ import annotations

from dataclasses import dataclass

ADD, UPDATE, DELETE = "Add", "Update", "Delete"
ALL = (ADD, UPDATE, DELETE)


@dataclass(frozen=True)
class ClusterEvent:
    """One kind of change: the resource (a kind) and what happened to it."""

    resource: str
    action: str


def _events(resource: str, *actions: str) -> tuple[ClusterEvent, ...]:
    return tuple(ClusterEvent(resource, a) for a in actions)


POD_DELETE = _events("Pod", DELETE)
NODE_CHANGE = _events("Node", ADD, UPDATE)

KOORDINATOR: dict[str, tuple[ClusterEvent, ...]] = {
    "Reservation": POD_DELETE + _events("Reservation", *ALL),
    "DeviceShare": POD_DELETE + _events("Device", *ALL),
    "NodeNUMAResource": POD_DELETE + _events("NodeResourceTopology", *ALL),
    "LoadAwareScheduling": POD_DELETE + _events("NodeMetric", *ALL),
    "ElasticQuota": POD_DELETE + _events("ElasticQuota", *ALL),
}
COSCHEDULING_V1_6 = _events("Pod", ADD) + _events("PodGroup", ADD, UPDATE)
COSCHEDULING_V1_7: tuple[ClusterEvent, ...] = ()
# v1.7's gang cache: a member created, or its PodGroup added/updated, activates the gang (all versions here: the
# v1.5/v1.6 rows' PodGroup events say as much, and a gang short of members has nothing else to wait for)
GANG_ACTIVATION = "Coscheduling"

IN_TREE: dict[str, tuple[ClusterEvent, ...]] = {
    "NodeResourcesFit": POD_DELETE + NODE_CHANGE,
    "NodePorts": POD_DELETE + NODE_CHANGE,
    "NodeAffinity": NODE_CHANGE,
    "NodeName": NODE_CHANGE,
    "TaintToleration": NODE_CHANGE,
    "NodeUnschedulable": NODE_CHANGE,
    "PodTopologySpread": _events("Pod", *ALL) + _events("Node", *ALL),
    "InterPodAffinity": _events("Pod", *ALL) + NODE_CHANGE,
}


def table(coscheduling_sorts: bool) -> dict[str, frozenset[ClusterEvent]]:
    """plugin → the events that requeue a pod it rejected; `coscheduling_sorts`: Coscheduling is the profile's
    queueSort (the v1.5/v1.6 plugin, with its own events), else v1.7's (none: only the gang activation and the
    periodic flush retry a pod it alone rejected). A plugin missing from the table is registered for every event,
    as kube-scheduler registers a plugin that has no EventsToRegister."""
    out = {name: frozenset(events) for name, events in {**IN_TREE, **KOORDINATOR}.items()}
    out["Coscheduling"] = frozenset(COSCHEDULING_V1_6 if coscheduling_sorts else COSCHEDULING_V1_7)
    return out


def requeues(plugins: frozenset[str], event: ClusterEvent, hints: dict[str, frozenset[ClusterEvent]]) -> bool:
    """Whether the event can help a pod these plugins rejected (none to blame: any event can)."""
    if not plugins:
        return True
    return any(p not in hints or event in hints[p] for p in plugins)
