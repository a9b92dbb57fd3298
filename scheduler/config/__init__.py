"""`--config`: a KubeSchedulerConfiguration (v1) read as kube-scheduler reads it, and the plugins it makes.

`load_config` parses (profile.py: extension points, weights, merge onto our defaults; args.py: typed pluginConfig
args; repair.py: the release texts' unambiguous mistakes); `build` instantiates the enabled plugins per extension
point. Every refusal is a `ConfigError` whose message is one line naming the field (the CLI exits 2 with it).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from scheduler.config.fields import ConfigError
from scheduler.config.plugins import FILTER, PERMIT, POST_FILTER, PRE_FILTER, RESERVE, SCORE
from scheduler.config.profile import SchedulerConfig, parse_config
from scheduler.config.repair import load_text

__all__ = ["ConfigError", "Plugins", "SchedulerConfig", "build", "load_config", "parse_config"]

log = logging.getLogger("koord-sched.config")


def load_config(path: str | None, scheduler_name: str | None = None) -> SchedulerConfig:
    """The profile of a config file (`scheduler_name`'s, else the first); None means our defaults."""
    if path is None:
        return SchedulerConfig()
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as e:
        raise ConfigError(f"{path}: {e.strerror or e}") from None
    return parse_config(load_text(text, path), scheduler_name)


@dataclass
class Plugins:
    """Plugin instances per list of scheduler.framework.Scheduler (one instance may be in several)."""

    filters: list[Any] = field(default_factory=list)
    scorers: list[Any] = field(default_factory=list)
    reservers: list[Any] = field(default_factory=list)


def build(cfg: SchedulerConfig, *, simulate: bool = False) -> Plugins:
    """Instances of the profile's plugins. `simulate`: Coscheduling's enablePreemption and awareNetworkTopology
    default to true unless the file sets them (a simulation shows what the features would do)."""
    from scheduler.deviceshare.plugin import DeviceShare
    from scheduler.elasticquota.plugin import ElasticQuota
    from scheduler.framework import NodeResourcesFit
    from scheduler.numa.plugin import NodeNUMAResource
    from scheduler.plugins.fit_score import NodeResourcesBalancedAllocation, NodeResourcesFitScore
    from scheduler.plugins.fitplus import NodeResourcesFitPlus
    from scheduler.plugins.loadaware import LoadAware
    from scheduler.plugins.scarce import ScarceResourceAvoidance
    from scheduler.reservation.plugin import ReservationPlugin

    at = cfg.enabled_at
    made: dict[str, Any] = {}  # one instance per plugin, shared by the lists it is in
    for name in dict.fromkeys(n for names in cfg.points.values() for n in names):
        w = cfg.weight(name)
        if name == "LoadAwareScheduling":
            made[name] = LoadAware(cfg.plugin_args(name), weight=w)
        elif name == "DeviceShare":
            made[name] = DeviceShare.from_args(cfg.plugin_args(name), w)
        elif name == "NodeNUMAResource":
            a = cfg.plugin_args(name)
            made[name] = NodeNUMAResource(a.default_cpu_bind_policy, a.scoring_type, a.scoring_resources, w)
        elif name == "ElasticQuota":
            made[name] = ElasticQuota(cfg.plugin_args(name), check=at(name, PRE_FILTER), account=at(name, RESERVE))
        elif name == "NodeResourcesFitPlus":
            made[name] = NodeResourcesFitPlus(cfg.plugin_args(name), weight=w)
        elif name == "ScarceResourceAvoidance":
            made[name] = ScarceResourceAvoidance(cfg.plugin_args(name), weight=w)
        elif name == "Reservation":
            made[name] = ReservationPlugin(cfg.plugin_args(name), w, preemption=at(name, POST_FILTER))
        elif name == "NodeResourcesBalancedAllocation":
            made[name] = NodeResourcesBalancedAllocation(cfg.plugin_args(name).resources, w)
    numa, ds = made.get("NodeNUMAResource"), made.get("DeviceShare")
    aligned = not cfg.plugin_args("DeviceShare").disable_device_numa_topology_alignment
    if numa is not None and ds is not None and aligned:
        numa.deviceshare, ds.numa_affinity = ds, numa.affinity
    if made.get("Reservation") is not None and ds is not None:
        ds.reserved_devices = made["Reservation"].reserved_devices
        ds.restricted_reservation = made["Reservation"].restricted_on
    if made.get("Reservation") is not None and numa is not None:
        numa.reserved_cpus = made["Reservation"].reserved_cpus
        numa.restricted_reservation = made["Reservation"].restricted_on
    # Coscheduling is always there so the gang planner can read its switches (all off when it is disabled).
    made["Coscheduling"] = coscheduling(cfg, simulate)
    out = Plugins()
    for name in cfg.points.get(FILTER, []):
        if name == "NodeResourcesFit":
            out.filters.append(NodeResourcesFit())
        elif name in made:
            out.filters.append(made[name])
    for name in cfg.points.get(SCORE, []):
        if name == "NodeResourcesFit":
            a = cfg.plugin_args(name)
            out.scorers.append(NodeResourcesFitScore(a.scoring_type, a.resources, cfg.weight(name)))
        elif name in made:
            out.scorers.append(made[name])
    for name in cfg.points.get(RESERVE, []):
        if name in made:
            out.reservers.append(made[name])
    for name in ("ElasticQuota", "Coscheduling"):  # their PreFilter / planner switches are read from here
        if name in made and made[name] not in out.reservers:
            out.reservers.append(made[name])
    return out


def coscheduling(cfg: SchedulerConfig, simulate: bool = False) -> Any:
    from scheduler.gang.plugin import Coscheduling

    a = cfg.plugin_args("Coscheduling")
    at = cfg.enabled_at
    preemption = a.enable_preemption or (simulate and "enablePreemption" not in a.explicit)
    aware = a.aware_network_topology or (simulate and "awareNetworkTopology" not in a.explicit)
    return Coscheduling(a, cfg.weight("Coscheduling"), admission=at("Coscheduling", PRE_FILTER),
                        permit=at("Coscheduling", PERMIT), preemption=preemption and at("Coscheduling", POST_FILTER),
                        aware_network_topology=aware, match_policy=a.default_match_policy)
