"""Descheduling rounds over a directory of objects (`koord-descheduler simulate`).

The objects are read as `koord-sched simulate` reads them (scheduler.cluster). Round i runs at `now + i ×
deschedulingInterval`; between rounds each evicted pod leaves the state with its NodeMetric podsMetric entry (its
usage leaves the node's), and nothing takes its place: a simulation does not schedule.
"""

from __future__ import annotations

from collections.abc import Mapping

from apis.core.objects import JSON
from scheduler.cluster import key
from scheduler.descheduler.config.features import FeatureGates
from scheduler.descheduler.config.lownodeload_args import LowNodeLoadArgs, with_cache_timeout_at_least
from scheduler.descheduler.config.types import DeschedulerConfig
from scheduler.descheduler.framework import Descheduler
from scheduler.descheduler.interfaces import Reporter, SimulationOutput, snapshot
from scheduler.descheduler.registry import check_supported, registry


def prepared(config: DeschedulerConfig) -> DeschedulerConfig:
    """check_supported, and each LowNodeLoad's detectorCacheTimeout raised to the interval (upstream does it at
    start)."""
    check_supported(config)
    for profile in config.profiles:
        for name, args in list(profile.args.items()):
            if isinstance(args, LowNodeLoadArgs):
                profile.args[name] = with_cache_timeout_at_least(args, config.descheduling_interval)
    return config


def simulate(objects: list[JSON], config: DeschedulerConfig, *, rounds: int = 1, now: float = 0.0,
             gates: FeatureGates | None = None) -> JSON:
    """`rounds` rounds; the result: every eviction, the node classes of the last round per pool, each plugin's
    own output, and the rounds that failed."""
    desched = Descheduler(prepared(config), registry(), simulate=True, gates=gates)
    state = list(objects)  # never changed in place: a round's removals make new lists and NodeMetrics
    errors = []
    seen = 0
    for i in range(max(rounds, 1)):
        failure = desched.run_round(snapshot(state, now + i * config.descheduling_interval))
        if failure is not None:
            errors.append({"round": i + 1, "error": failure})
        gone = {f"{e.namespace}/{e.name}" for e in desched.evictions[seen:]}
        seen = len(desched.evictions)
        if gone:
            state = _without(state, gone)
    result: JSON = {"evictions": [e.as_json() for e in desched.evictions], "nodes": _nodes(desched)}
    for fw in desched.frameworks:
        for plugin in fw.plugins.values():
            if isinstance(plugin, SimulationOutput):
                result.update(plugin.simulation_output())
    if errors:
        result["errors"] = errors
    return result


def _nodes(desched: Descheduler) -> JSON:
    out: JSON = {}
    several = len(desched.frameworks) > 1
    for fw in desched.frameworks:
        for plugin in fw.plugins.values():
            if isinstance(plugin, Reporter):
                for pool, rows in plugin.report().items():
                    out[f"{fw.profile.name}/{pool}" if several else pool] = dict(rows)
    return out


def _without(objects: list[JSON], gone: set[str]) -> list[JSON]:
    kept = []
    for o in objects:
        kind = o.get("kind")
        if kind == "Pod" and isinstance(o.get("metadata"), dict) and key(o) in gone:  # a malformed one stays
            continue
        if kind == "NodeMetric":
            o = _drop_pod_metrics(o, gone)
        kept.append(o)
    return kept


def _drop_pod_metrics(nm: JSON, gone: set[str]) -> JSON:
    status = nm.get("status")
    if not isinstance(status, dict) or not isinstance(status.get("podsMetric"), list):
        return nm
    pods = [p for p in status["podsMetric"]
            if not (isinstance(p, Mapping) and f"{p.get('namespace')}/{p.get('name')}" in gone)]
    return {**nm, "status": {**status, "podsMetric": pods}}
