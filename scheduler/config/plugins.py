"""The plugin names a KubeSchedulerConfiguration may use with koord-sched: where each runs here, and what it does.

Our default profile is koord-scheduler's shipped `config/manager/scheduler-config.yaml` restricted to the plugins we
implement; a user's file is merged onto it as kube-scheduler merges a file onto its defaults (see profile.py).
"""

from __future__ import annotations

from dataclasses import dataclass

PRE_ENQUEUE, QUEUE_SORT, PRE_FILTER, FILTER, POST_FILTER = "preEnqueue", "queueSort", "preFilter", "filter", \
    "postFilter"
PRE_SCORE, SCORE, RESERVE, PERMIT, PRE_BIND, BIND, POST_BIND = "preScore", "score", "reserve", "permit", \
    "preBind", "bind", "postBind"
MULTI_POINT = "multiPoint"
POINTS = (PRE_ENQUEUE, QUEUE_SORT, PRE_FILTER, FILTER, POST_FILTER, PRE_SCORE, SCORE, RESERVE, PERMIT, PRE_BIND,
          BIND, POST_BIND)

RUN, NOOP, LATER, NOT_IMPLEMENTED = "run", "noop", "later", "not-implemented"


@dataclass(frozen=True)
class PluginInfo:
    name: str
    points: tuple[str, ...]  # extension points the plugin implements (upstream)
    default: tuple[str, ...] = ()  # points it is enabled at in our default profile
    status: str = RUN  # RUN: implemented; NOOP: accepted, nothing to do here; LATER: accepted, not implemented yet
    note: str = ""


_GANG = (PRE_ENQUEUE, PRE_FILTER, POST_FILTER, PRE_SCORE, SCORE, RESERVE, PERMIT, PRE_BIND, POST_BIND)
_OURS = (
    PluginInfo("NodeResourcesFit", (PRE_FILTER, FILTER, PRE_SCORE, SCORE), (PRE_FILTER, FILTER)),
    PluginInfo("LoadAwareScheduling", (FILTER, SCORE, RESERVE), (FILTER, SCORE, RESERVE)),
    PluginInfo("NodeNUMAResource", (PRE_FILTER, FILTER, PRE_SCORE, SCORE, RESERVE, PRE_BIND),
               (PRE_FILTER, FILTER, SCORE, RESERVE, PRE_BIND)),
    PluginInfo("DeviceShare", (PRE_FILTER, FILTER, PRE_SCORE, SCORE, RESERVE, PRE_BIND),
               (PRE_FILTER, FILTER, PRE_SCORE, SCORE, RESERVE, PRE_BIND)),
    PluginInfo("Reservation", (PRE_FILTER, FILTER, POST_FILTER, PRE_SCORE, SCORE, RESERVE, PERMIT, PRE_BIND),
               (PRE_FILTER, FILTER, POST_FILTER, PRE_SCORE, SCORE, RESERVE, PRE_BIND)),
    PluginInfo("ElasticQuota", (PRE_ENQUEUE, PRE_FILTER, POST_FILTER, RESERVE), (PRE_FILTER, POST_FILTER, RESERVE)),
    PluginInfo("Coscheduling", _GANG, _GANG),
    PluginInfo("NodeResourcesFitPlus", (PRE_SCORE, SCORE)),
    PluginInfo("ScarceResourceAvoidance", (SCORE,)),
    PluginInfo("NodeResourcesBalancedAllocation", (PRE_SCORE, SCORE)),
    PluginInfo("PrioritySort", (QUEUE_SORT,), (QUEUE_SORT,), NOOP, "pending pods are always taken by priority"),
    PluginInfo("DefaultBinder", (BIND,), (BIND,), NOOP, "binds through the Binding API"),
    PluginInfo("DefaultPreBind", (PRE_BIND,), (), NOOP, "annotations are written before the Binding"),
    PluginInfo("SchedulingGates", (PRE_ENQUEUE,), (PRE_ENQUEUE,), NOOP, "gated pods are never taken"),
    PluginInfo("DefaultPreemption", (POST_FILTER,), (POST_FILTER,), NOOP,
               "pod-level preemption of lone pods is not implemented; gangs use Coscheduling's job preemption"),
)
# kube-scheduler's and koord-scheduler's other plugins: known names, not implemented by koord-sched.
_KUBE = ("NodeUnschedulable", "NodeName", "TaintToleration", "NodeAffinity", "NodePorts", "VolumeRestrictions",
         "NodeVolumeLimits", "EBSLimits", "GCEPDLimits", "AzureDiskLimits", "CinderLimits", "VolumeBinding",
         "VolumeZone", "PodTopologySpread", "InterPodAffinity", "ImageLocality", "DynamicResources")
_KOORD = ("SchedulingHint", "ElasticQuotaV2")

PLUGINS: dict[str, PluginInfo] = {p.name: p for p in _OURS}
for _n in (*_KUBE, *_KOORD):
    PLUGINS[_n] = PluginInfo(_n, POINTS, (), NOT_IMPLEMENTED)

# score weights of our default profile (koord-scheduler's scheduler-config.yaml gives each 1)
DEFAULT_WEIGHTS = {"LoadAwareScheduling": 1, "NodeNUMAResource": 1, "DeviceShare": 1, "Reservation": 5000,
                   "Coscheduling": 1}


def supported() -> list[str]:
    """Names that may be enabled (implemented, no-op or accepted for later)."""
    return [p.name for p in _OURS]
