"""The profile runner: plugins built per profile from the registry, the evictor proxy, and one round.

Upstream: framework/runtime/framework.go (building, the evict-plugin count), runtime/evictor_proxy.go (limiter,
dry run, the one evict plugin), descheduler.go (a round: ready nodes, reset the limiter, every profile's
deschedule plugins, then every profile's balance plugins).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from apis.core.labelselector import LabelSelector
from apis.core.objects import JSON
from scheduler.cluster import Cluster, NodeInfo
from scheduler.descheduler.config.features import FeatureGates
from scheduler.descheduler.config.types import DeschedulerConfig, Profile
from scheduler.descheduler.interfaces import (
    BALANCE,
    DESCHEDULE,
    EVICT,
    EXTENSION_POINTS,
    FILTER,
    BalancePlugin,
    DeschedulePlugin,
    EvictionLimiter,
    EvictOptions,
    EvictorPlugin,
    FilterPlugin,
    Plugin,
    PluginSpec,
    Snapshot,
)
from scheduler.descheduler.kube import KubeAccess
from scheduler.descheduler.limiter import Limiter
from scheduler.descheduler.nodeutil import is_ready

log = logging.getLogger("koord-descheduler")
TOO_FEW_NODES = "the cluster size is 0 or 1 meaning eviction causes service disruption or degradation"
_POINT_TYPE = {DESCHEDULE: "Deschedule", BALANCE: "Balance", EVICT: "Evict", FILTER: "Filter"}


class FrameworkError(ValueError):
    """A profile that cannot be built (upstream's framework errors, worded as upstream's)."""


@dataclass(frozen=True)
class Eviction:
    """One pod a round decided to evict (or migrate)."""

    namespace: str
    name: str
    node: str
    plugin: str
    reason: str

    def as_json(self) -> JSON:
        return {"namespace": self.namespace, "name": self.name, "node": self.node, "plugin": self.plugin,
                "reason": self.reason}


class RecordingEvictor:
    """The evict plugin `simulate` uses when the profile enables none: every eviction succeeds (and is recorded
    by the proxy). Not in the registry: `run` refuses a profile without an evict plugin, as upstream."""

    name = "Recorder"

    def evict(self, pod: JSON, options: EvictOptions) -> bool:
        return True


class EvictorProxy:
    """interfaces.Evictor over one profile: limiter, framework dry run, the profile's evict plugin, record."""

    def __init__(self, plugin: EvictorPlugin, filters: Sequence[FilterPlugin], limiter: EvictionLimiter,
                 dry_run: bool, record: Callable[[Eviction], None], kube: KubeAccess | None = None) -> None:
        self.plugin = plugin
        self.filters = list(filters)
        self.limiter = limiter
        self.dry_run = dry_run
        self.record = record
        self.kube = kube

    def filter(self, pod: JSON) -> bool:
        return all(f.filter(pod) for f in self.filters)

    def pre_eviction_filter(self, pod: JSON) -> bool:
        return all(f.pre_eviction_filter(pod) for f in self.filters)

    def evict(self, pod: JSON, options: EvictOptions) -> bool:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        ident = f"{meta.get('namespace')}/{meta.get('name')}"
        refused = self.limiter.allowed(pod)
        if refused is not None:
            log.info("pod %s not evicted by %s: %s", ident, options.plugin, refused)
            if self.kube is not None:
                self.kube.metrics.pod_evicted(refused, options.plugin, str(meta.get("namespace") or ""),
                                              str(spec.get("nodeName") or ""))
            return False
        if self.dry_run:
            log.info("dry run: would evict pod %s (%s): %s", ident, options.plugin, options.reason)
        elif not self.plugin.evict(pod, options):
            return False
        self.limiter.done(pod)
        self.record(Eviction(str(meta.get("namespace") or ""), str(meta.get("name") or ""),
                             str(spec.get("nodeName") or ""), options.plugin, options.reason))
        return True


class Framework:
    """One profile's plugins; implements interfaces.Handle for them. `snapshot` is replaced each round."""

    def __init__(self, profile: Profile, registry: Mapping[str, PluginSpec], limiter: EvictionLimiter, *,
                 dry_run: bool = False, record: Callable[[Eviction], None] = lambda e: None,
                 snapshot: Snapshot | None = None, simulate: bool = False, kube: KubeAccess | None = None,
                 gates: FeatureGates | None = None) -> None:
        self.profile = profile
        self._gates = gates if gates is not None else FeatureGates()
        self._snapshot = snapshot if snapshot is not None else Snapshot(cluster=Cluster())
        self._limiter = limiter
        self._kube = kube
        self.plugins: dict[str, Plugin] = {}
        points: dict[str, list[Plugin]] = {p: [] for p in EXTENSION_POINTS}
        for point in EXTENSION_POINTS:
            for name in profile.enabled(point):
                spec = registry.get(name)
                if spec is None:
                    raise FrameworkError(f'{_POINT_TYPE[point]} "{name}" does not exist')
                if point not in spec.points:
                    raise FrameworkError(f'plugin "{name}" does not extend {point} plugin')
                if any(p.name == name for p in points[point]):
                    raise FrameworkError(f'plugin "{name}" already registered as "{_POINT_TYPE[point]}"')
                plugin = self.plugins.get(name)
                if plugin is None:
                    plugin = self.plugins[name] = spec.factory(profile.args.get(name), self)
                points[point].append(plugin)
        evictors = points[EVICT]
        if not evictors and simulate:
            evictors = [RecordingEvictor()]
        if not evictors:
            raise FrameworkError("no evict plugin is enabled")
        if len(evictors) > 1:
            raise FrameworkError("only one evict plugin can be enabled")
        self.deschedulers = [cast(DeschedulePlugin, _checked(p, DESCHEDULE)) for p in points[DESCHEDULE]]
        self.balancers = [cast(BalancePlugin, _checked(p, BALANCE)) for p in points[BALANCE]]
        filters = [cast(FilterPlugin, _checked(p, FILTER)) for p in points[FILTER]]
        evictor = cast(EvictorPlugin, _checked(evictors[0], EVICT))
        self.proxy = EvictorProxy(evictor, filters, limiter, dry_run, record, kube)

    # ---- interfaces.Handle ----

    def evictor(self) -> EvictorProxy:
        return self.proxy

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    @property
    def limiter(self) -> EvictionLimiter:
        return self._limiter

    @property
    def kube(self) -> KubeAccess | None:
        return self._kube

    @property
    def feature_gates(self) -> FeatureGates:
        return self._gates

    def set_snapshot(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot

    def profile_nodes(self, nodes: Sequence[NodeInfo]) -> list[NodeInfo]:
        return [n for n in nodes if _selected(self.profile.node_selector, n)]


class Descheduler:
    """Every profile of a configuration, run round by round over a snapshot (upstream descheduler.go)."""

    def __init__(self, config: DeschedulerConfig, registry: Mapping[str, PluginSpec], *,
                 simulate: bool = False, kube: KubeAccess | None = None, gates: FeatureGates | None = None) -> None:
        self.config = config
        self.evictions: list[Eviction] = []
        self.limiter = Limiter(config.max_pods_per_node, config.max_pods_per_namespace, config.max_pods_total)
        self.frameworks = [Framework(p, registry, self.limiter, dry_run=config.dry_run,
                                     record=self.evictions.append, simulate=simulate, kube=kube, gates=gates)
                           for p in config.profiles]

    def run_round(self, snapshot: Snapshot) -> str | None:
        """One round; None, or why the round failed (too few ready nodes)."""
        nodes = ready_nodes(snapshot.nodes(), self.config.node_selector)
        if len(nodes) <= 1:
            log.error("round failed: %s", TOO_FEW_NODES)
            return TOO_FEW_NODES
        self.limiter.reset()
        for fw in self.frameworks:
            fw.set_snapshot(snapshot)
        for fw in self.frameworks:
            for d in fw.deschedulers:
                d.deschedule(fw.profile_nodes(nodes))
        for fw in self.frameworks:
            for b in fw.balancers:
                b.balance(fw.profile_nodes(nodes))
        return None


_PROTOCOLS: dict[str, type] = {DESCHEDULE: DeschedulePlugin, BALANCE: BalancePlugin, EVICT: EvictorPlugin,
                               FILTER: FilterPlugin}


def _checked(plugin: Plugin, point: str) -> Plugin:
    """A factory whose plugin lacks the point's methods is a profile error, not a plugin silently left out."""
    if not isinstance(plugin, _PROTOCOLS[point]):
        raise FrameworkError(f'plugin "{plugin.name}" does not extend {point} plugin')
    return plugin


def ready_nodes(nodes: Sequence[NodeInfo], selector: LabelSelector | None) -> list[NodeInfo]:
    """Nodes matching the top-level nodeSelector with no Ready condition other than True (cordoned ones kept)."""
    return [n for n in nodes if _selected(selector, n) and is_ready(n.obj)]


def _selected(selector: LabelSelector | None, node: NodeInfo) -> bool:
    return selector is None or selector.matches(node.labels)

