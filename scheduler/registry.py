"""The plugin registry: each plugin name koord-sched implements → its factory; `build` makes a profile's plugins.

A factory gets the profile's config and the plugins made before it (the registry's order), so collaborations are
passed in when a plugin is made: the Reservation plugin lends owners its reserved devices and CPUs, DeviceShare's
devices are aligned by NodeNUMAResource (upstream frameworkext's reservation nominator and NUMA hint providers).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from scheduler.config import SchedulerConfig
from scheduler.config.plugins import (
    BIND,
    FILTER,
    PERMIT,
    PLUGINS,
    POST_FILTER,
    PRE_BIND,
    PRE_FILTER,
    QUEUE_SORT,
    RESERVE,
    SCORE,
)
from scheduler.deviceshare.plugin import DeviceShare
from scheduler.elasticquota.plugin import ElasticQuota
from scheduler.framework import Profile
from scheduler.gang.plugin import Coscheduling
from scheduler.interfaces import BindPlugin, FilterPlugin, Plugin, QueueSortPlugin, ReservePlugin, ScorePlugin
from scheduler.numa.plugin import NodeNUMAResource
from scheduler.plugins.fit import NodeResourcesFit
from scheduler.plugins.fit_score import NodeResourcesBalancedAllocation, NodeResourcesFitScore
from scheduler.plugins.fitplus import NodeResourcesFitPlus
from scheduler.plugins.hint import SchedulingHint
from scheduler.plugins.imagelocality import ImageLocality
from scheduler.plugins.interpodaffinity import InterPodAffinity
from scheduler.plugins.intree import DefaultBinder, PrioritySort
from scheduler.plugins.loadaware import LoadAware
from scheduler.plugins.nodeaffinity import NodeAffinity
from scheduler.plugins.nodeports import NodePorts
from scheduler.plugins.nodeunschedulable import NodeUnschedulable
from scheduler.plugins.podtopologyspread import PodTopologySpread
from scheduler.plugins.scarce import ScarceResourceAvoidance
from scheduler.plugins.tainttoleration import TaintToleration
from scheduler.reservation.plugin import ReservationPlugin

P = TypeVar("P")


class Made:
    """The plugins of one profile made so far, by name."""

    def __init__(self) -> None:
        self.plugins: dict[str, Plugin] = {}

    def get(self, name: str, kind: type[P]) -> P | None:
        p = self.plugins.get(name)
        return p if isinstance(p, kind) else None


Factory = Callable[[SchedulerConfig, str, Made, bool], Plugin]  # (config, name, made so far, simulate)


def _loadaware(cfg: SchedulerConfig, name: str, made: Made, simulate: bool) -> Plugin:
    return LoadAware(cfg.plugin_args(name), weight=cfg.weight(name))


def _reservation(cfg: SchedulerConfig, name: str, made: Made, simulate: bool) -> Plugin:
    bind = cfg.points.get(BIND, [])
    # Bind asks its plugins in order: DefaultBinder ahead of Reservation would take the reserve pods (and fail)
    binds = name in bind and ("DefaultBinder" not in bind or bind.index(name) < bind.index("DefaultBinder"))
    return ReservationPlugin(cfg.plugin_args(name), cfg.weight(name), preemption=cfg.enabled_at(name, POST_FILTER),
                             binds_reservations=binds)


def _deviceshare(cfg: SchedulerConfig, name: str, made: Made, simulate: bool) -> Plugin:
    ds = DeviceShare.from_args(cfg.plugin_args(name), cfg.weight(name))
    resv = made.get("Reservation", ReservationPlugin)
    if resv is not None:
        ds.serve_reservations(resv)
    return ds


def _numa(cfg: SchedulerConfig, name: str, made: Made, simulate: bool) -> Plugin:
    a = cfg.plugin_args(name)
    numa = NodeNUMAResource(a.default_cpu_bind_policy, a.scoring_type, a.scoring_resources, cfg.weight(name))
    ds = made.get("DeviceShare", DeviceShare)
    if ds is not None and not cfg.plugin_args("DeviceShare").disable_device_numa_topology_alignment:
        numa.align_devices(ds)
    resv = made.get("Reservation", ReservationPlugin)
    if resv is not None:
        numa.serve_reservations(resv)
    return numa


def _quota(cfg: SchedulerConfig, name: str, made: Made, simulate: bool) -> Plugin:
    return ElasticQuota(cfg.plugin_args(name), check=cfg.enabled_at(name, PRE_FILTER),
                        account=cfg.enabled_at(name, RESERVE))


def _fitplus(cfg: SchedulerConfig, name: str, made: Made, simulate: bool) -> Plugin:
    return NodeResourcesFitPlus(cfg.plugin_args(name), weight=cfg.weight(name))


def _scarce(cfg: SchedulerConfig, name: str, made: Made, simulate: bool) -> Plugin:
    return ScarceResourceAvoidance(cfg.plugin_args(name), weight=cfg.weight(name))


def _balanced(cfg: SchedulerConfig, name: str, made: Made, simulate: bool) -> Plugin:
    return NodeResourcesBalancedAllocation(cfg.plugin_args(name).resources, cfg.weight(name))


def _fit(cfg: SchedulerConfig, name: str, made: Made, simulate: bool) -> Plugin:
    return NodeResourcesFit()


def _fit_score(cfg: SchedulerConfig, name: str, made: Made, simulate: bool) -> Plugin:
    a = cfg.plugin_args(name)
    return NodeResourcesFitScore(a.scoring_type, a.resources, cfg.weight(name))


def _coscheduling(cfg: SchedulerConfig, name: str, made: Made, simulate: bool) -> Coscheduling:
    """`simulate`: enablePreemption and awareNetworkTopology default to true unless the file sets them (a
    simulation shows what the features would do)."""
    a = cfg.plugin_args(name)
    at = cfg.enabled_at
    preemption = a.enable_preemption or (simulate and "enablePreemption" not in a.explicit)
    aware = a.aware_network_topology or (simulate and "awareNetworkTopology" not in a.explicit)
    return Coscheduling(a, cfg.weight(name), admission=at(name, PRE_FILTER), permit=at(name, PERMIT),
                        prebind=at(name, PRE_BIND), preemption=preemption and at(name, POST_FILTER),
                        aware_network_topology=aware,
                        match_policy=a.default_match_policy)


def _priority_sort(cfg: SchedulerConfig, name: str, made: Made, simulate: bool) -> Plugin:
    # koord-scheduler takes any plugin with a NextPod as the queue's (frameworkext PluginFactoryProxy): Coscheduling
    # has one from v1.7 on whenever the profile names it at some point; no feature gate or arg turns it on or off
    return PrioritySort(gangs_together=any("Coscheduling" in names for names in cfg.points.values()))


def _default_binder(cfg: SchedulerConfig, name: str, made: Made, simulate: bool) -> Plugin:
    return DefaultBinder()


def _hint(cfg: SchedulerConfig, name: str, made: Made, simulate: bool) -> Plugin:
    return SchedulingHint()


def _unschedulable(cfg: SchedulerConfig, name: str, made: Made, simulate: bool) -> Plugin:
    return NodeUnschedulable()


def _taints(cfg: SchedulerConfig, name: str, made: Made, simulate: bool) -> Plugin:
    return TaintToleration(cfg.weight(name))


def _node_affinity(cfg: SchedulerConfig, name: str, made: Made, simulate: bool) -> Plugin:
    a = cfg.plugin_args(name)
    return NodeAffinity(a.added_required, a.added_preferred, cfg.weight(name))


def _node_ports(cfg: SchedulerConfig, name: str, made: Made, simulate: bool) -> Plugin:
    return NodePorts()


def _spread(cfg: SchedulerConfig, name: str, made: Made, simulate: bool) -> Plugin:
    return PodTopologySpread(cfg.weight(name))


def _image_locality(cfg: SchedulerConfig, name: str, made: Made, simulate: bool) -> Plugin:
    return ImageLocality(cfg.weight(name))


def _inter_pod_affinity(cfg: SchedulerConfig, name: str, made: Made, simulate: bool) -> Plugin:
    a = cfg.plugin_args(name)
    return InterPodAffinity(cfg.weight(name), a.hard_pod_affinity_weight, a.ignore_preferred_terms_of_existing_pods)


@dataclass(frozen=True)
class Entry:
    shared: Factory | None = None  # one instance for every extension point the plugin is enabled at
    filter: Factory | None = None  # or a fresh instance per point (NodeResourcesFit's Filter and Score are two)
    score: Factory | None = None


# In build order: a factory may use the plugins made before it.
REGISTRY: dict[str, Entry] = {
    "NodeUnschedulable": Entry(_unschedulable),
    "TaintToleration": Entry(_taints),
    "NodeAffinity": Entry(_node_affinity),
    "NodePorts": Entry(_node_ports),
    "PodTopologySpread": Entry(_spread),
    "InterPodAffinity": Entry(_inter_pod_affinity),
    "ImageLocality": Entry(_image_locality),
    "Reservation": Entry(_reservation),
    "DeviceShare": Entry(_deviceshare),
    "NodeNUMAResource": Entry(_numa),
    "LoadAwareScheduling": Entry(_loadaware),
    "ElasticQuota": Entry(_quota),
    "NodeResourcesFitPlus": Entry(_fitplus),
    "ScarceResourceAvoidance": Entry(_scarce),
    "NodeResourcesBalancedAllocation": Entry(_balanced),
    "Coscheduling": Entry(_coscheduling),
    "NodeResourcesFit": Entry(filter=_fit, score=_fit_score),
    "SchedulingHint": Entry(_hint),
    "PrioritySort": Entry(_priority_sort),
    "DefaultBinder": Entry(_default_binder),
}
ALWAYS = ("Coscheduling",)  # made even when disabled: the gang planner reads its switches (all off then)
KEPT = ("ElasticQuota", "Coscheduling")  # kept among the reservers: their PreFilter / planner switches are read there


def build(cfg: SchedulerConfig, *, simulate: bool = False, topology_manager: bool = True) -> Profile:
    """Fresh instances of the profile's plugins, resolved per extension point.

    `topology_manager`: --enable-network-topology-manager (koord-scheduler's frameworkext flag, not the profile's)."""
    enabled = {n for names in cfg.points.values() for n in names}
    made = Made()
    for name, entry in REGISTRY.items():
        if entry.shared is not None and (name in enabled or name in ALWAYS):
            made.plugins[name] = entry.shared(cfg, name, made, simulate)
    if (cos := made.get("Coscheduling", Coscheduling)) is not None:
        cos.topology_manager = topology_manager
    filters: list[FilterPlugin] = []
    scorers: list[ScorePlugin] = []
    reservers: list[ReservePlugin] = []
    for name in cfg.points.get(FILTER, []):
        p = _at(cfg, name, made, simulate, FILTER)
        if isinstance(p, FilterPlugin):
            filters.append(p)
    for name in cfg.points.get(SCORE, []):
        p = _at(cfg, name, made, simulate, SCORE)
        if isinstance(p, ScorePlugin):
            scorers.append(p)
    for name in [*cfg.points.get(RESERVE, []), *KEPT]:
        p = made.plugins.get(name)
        if isinstance(p, ReservePlugin) and p not in reservers:
            reservers.append(p)
    sorts = [p for n in cfg.points.get(QUEUE_SORT, []) if isinstance(p := made.plugins.get(n), QueueSortPlugin)]
    binders = [p for n in cfg.points.get(BIND, []) if isinstance(p := made.plugins.get(n), BindPlugin)]
    # plugins that extend PreFilter and none of Filter, Score and Reserve join the profile from there
    alone = [made.plugins[n] for n in cfg.points.get(PRE_FILTER, []) if n in made.plugins
             and not {FILTER, SCORE, RESERVE} & set(PLUGINS[n].points)]
    return Profile(filters, scorers, reservers, queue_sort=sorts[0] if sorts else None, binders=binders,
                   prefilter_only=alone)


def _at(cfg: SchedulerConfig, name: str, made: Made, simulate: bool, point: str) -> Plugin | None:
    entry = REGISTRY.get(name)
    if entry is None:
        return None
    own = entry.filter if point == FILTER else entry.score
    return own(cfg, name, made, simulate) if own is not None else made.plugins.get(name)
