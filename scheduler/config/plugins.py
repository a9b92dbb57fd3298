"""The plugin names a KubeSchedulerConfiguration may use with koord-sched: where each runs here, and what it does.

Without a file, our default profile is koord-scheduler's shipped `config/manager/scheduler-config.yaml` restricted
to the plugins we implement. A file's profile is merged onto kube-scheduler's own default plugins, as koord-scheduler
(kube-scheduler's v1 defaulting) merges it (see profile.py).
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

# kube-scheduler's name of each point's plugin interface, as its startup errors word them
KUBE_TYPES = {PRE_ENQUEUE: "PreEnqueuePlugin", QUEUE_SORT: "QueueSortPlugin", PRE_FILTER: "PreFilterPlugin",
              FILTER: "FilterPlugin", POST_FILTER: "PostFilterPlugin", PRE_SCORE: "PreScorePlugin",
              SCORE: "ScorePlugin", RESERVE: "ReservePlugin", PERMIT: "PermitPlugin", PRE_BIND: "PreBindPlugin",
              BIND: "BindPlugin", POST_BIND: "PostBindPlugin"}


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
    PluginInfo("Reservation", (PRE_FILTER, FILTER, POST_FILTER, PRE_SCORE, SCORE, RESERVE, PERMIT, PRE_BIND, BIND),
               (PRE_FILTER, FILTER, POST_FILTER, PRE_SCORE, SCORE, RESERVE, PRE_BIND, BIND)),
    PluginInfo("ElasticQuota", (PRE_ENQUEUE, PRE_FILTER, POST_FILTER, RESERVE), (PRE_FILTER, POST_FILTER, RESERVE)),
    # queueSort: v1.5 and v1.6 only (v1.7 dropped it); the file does not say which version wrote it, so accepted
    # preBind (the bind-gang annotations) is off by default as in v1.7.0's shipped config and chart; v1.8's enable it
    PluginInfo("Coscheduling", (QUEUE_SORT, *_GANG), tuple(p for p in _GANG if p != PRE_BIND)),
    PluginInfo("SchedulingHint", (PRE_FILTER,)),
    PluginInfo("NodeResourcesFitPlus", (PRE_SCORE, SCORE)),
    PluginInfo("ScarceResourceAvoidance", (SCORE,)),
    PluginInfo("NodeResourcesBalancedAllocation", (PRE_SCORE, SCORE)),
    PluginInfo("PrioritySort", (QUEUE_SORT,), (QUEUE_SORT,)),
    PluginInfo("DefaultBinder", (BIND,), (BIND,)),
    PluginInfo("DefaultPreBind", (PRE_BIND,), (), NOOP,
               "its PreBind does nothing; the plugins' annotations go out in one patch before the Binding"),
    PluginInfo("SchedulingGates", (PRE_ENQUEUE,), (PRE_ENQUEUE,), NOOP, "gated pods are never taken"),
    PluginInfo("DefaultPreemption", (POST_FILTER,), (POST_FILTER,), LATER,
               "pod-level preemption of lone pods is not implemented by koord-sched (a lone pod no "
               "node takes stays pending); gangs use Coscheduling's job preemption, owners Reservation's"),
    # kube-scheduler's node plugins: in its default (multiPoint) plugins, so under every file's profile; in our
    # default profile after koord-scheduler's plugins
    PluginInfo("NodeUnschedulable", (FILTER,), (FILTER,)),
    PluginInfo("NodeName", (FILTER,), (FILTER,), NOOP,
               "a pod with spec.nodeName is bound already; koord-sched never takes one"),
    PluginInfo("TaintToleration", (FILTER, PRE_SCORE, SCORE), (FILTER, PRE_SCORE, SCORE)),
    PluginInfo("NodeAffinity", (PRE_FILTER, FILTER, PRE_SCORE, SCORE), (PRE_FILTER, FILTER, PRE_SCORE, SCORE)),
    PluginInfo("NodePorts", (PRE_FILTER, FILTER), (PRE_FILTER, FILTER)),
    PluginInfo("PodTopologySpread", (PRE_FILTER, FILTER, PRE_SCORE, SCORE), (PRE_FILTER, FILTER, PRE_SCORE, SCORE)),
    PluginInfo("InterPodAffinity", (PRE_FILTER, FILTER, PRE_SCORE, SCORE), (PRE_FILTER, FILTER, PRE_SCORE, SCORE)),
    PluginInfo("ImageLocality", (SCORE,), (SCORE,)),
)
# kube-scheduler's volume and DRA plugins: koord-sched reads no PersistentVolume(Claim), StorageClass, CSINode or
# ResourceClaim, so on the objects it schedules they have nothing to check: accepted as no-ops (docs/decisions.md).
_KUBE_NOOP = tuple(PluginInfo(n, pts, (), NOOP, "koord-sched reads no volumes or resource claims; nothing to check")
                   for n, pts in (("VolumeRestrictions", (PRE_FILTER, FILTER)), ("NodeVolumeLimits", (FILTER,)),
                                  ("EBSLimits", (FILTER,)), ("GCEPDLimits", (FILTER,)), ("AzureDiskLimits", (FILTER,)),
                                  ("CinderLimits", (FILTER,)), ("VolumeZone", (FILTER,)),
                                  ("VolumeBinding", (PRE_FILTER, FILTER, RESERVE, PRE_BIND, PRE_SCORE, SCORE)),
                                  ("DynamicResources", (PRE_ENQUEUE, PRE_FILTER, FILTER, POST_FILTER, PRE_SCORE,
                                                        RESERVE, PRE_BIND))))
# kube-scheduler's and koord-scheduler's other plugins: known names, not implemented by koord-sched.
_NOT_IMPLEMENTED = (PluginInfo("ElasticQuotaV2", POINTS, (), NOT_IMPLEMENTED),)
# kube-scheduler's default plugins (k8s v1.28 pkg/scheduler/apis/config/v1 default_plugins.go getDefaultPlugins, the
# same in v1beta3), in order, with their multiPoint score weights (0: none given): a file's profile is merged onto
# these; each expands to every point it implements
KUBE_DEFAULT_PLUGINS = (("SchedulingGates", 0), ("PrioritySort", 0), ("NodeUnschedulable", 0), ("NodeName", 0),
                        ("TaintToleration", 3), ("NodeAffinity", 2), ("NodePorts", 0), ("NodeResourcesFit", 1),
                        ("VolumeRestrictions", 0), ("EBSLimits", 0), ("GCEPDLimits", 0), ("NodeVolumeLimits", 0),
                        ("AzureDiskLimits", 0), ("VolumeBinding", 0), ("VolumeZone", 0), ("PodTopologySpread", 2),
                        ("InterPodAffinity", 2), ("DefaultPreemption", 0), ("NodeResourcesBalancedAllocation", 1),
                        ("ImageLocality", 1), ("DefaultBinder", 0))
# in every profile unless disabled, so their pluginConfig is legal
KUBE_DEFAULTS = frozenset(n for n, _ in KUBE_DEFAULT_PLUGINS)

PLUGINS: dict[str, PluginInfo] = {p.name: p for p in (*_OURS, *_KUBE_NOOP, *_NOT_IMPLEMENTED)}

# score weights of our default profile (koord-scheduler's scheduler-config.yaml gives each 1; kube-scheduler's
# defaults give TaintToleration 3, NodeAffinity, PodTopologySpread and InterPodAffinity 2, ImageLocality 1)
DEFAULT_WEIGHTS = {"TaintToleration": 3, "NodeAffinity": 2, "PodTopologySpread": 2, "InterPodAffinity": 2,
                   "ImageLocality": 1, "LoadAwareScheduling": 1, "NodeNUMAResource": 1, "DeviceShare": 1,
                   "Reservation": 5000, "Coscheduling": 1}


def supported() -> list[str]:
    """Names that may be enabled (implemented, no-op or accepted for later)."""
    return [p.name for p in _OURS]
