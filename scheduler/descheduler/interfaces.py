"""The descheduler's extension points (upstream pkg/descheduler/framework/types.go) as Protocols.

A plugin implements one or more of them and is built by a `Factory(args, handle)`; through the `Handle` it reads
the round's `Snapshot`, asks the framework's `Evictor` (the limiter, the filter plugins and the one evict plugin
behind it) to evict, and reads the `EvictionLimiter`. Plugins import this module and nothing above it.

Points per round (framework.Framework.run_round): every profile's `deschedule` plugins, then every profile's
`balance` plugins. `evict` has exactly one plugin per profile; `filter` plugins are ANDed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from apis.core.objects import JSON
from scheduler.cluster import Cluster, NodeInfo, build_cluster, key
from scheduler.descheduler.config.features import FeatureGates
from scheduler.descheduler.kube import KubeAccess

DESCHEDULE = "deschedule"
BALANCE = "balance"
EVICT = "evict"
FILTER = "filter"
EXTENSION_POINTS = (DESCHEDULE, BALANCE, EVICT, FILTER)


@dataclass(frozen=True)
class JobContext:
    """What the caller adds to the PodMigrationJob the MigrationController creates for this eviction (upstream
    controllers/migration/context.go JobContext): labels and annotations merged over the job's own, and, when
    set, the job's ttl (seconds; 0: none) and mode instead of defaultJobTTL and defaultJobMode."""

    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    ttl: float | None = None
    mode: str = ""


@dataclass(frozen=True)
class EvictOptions:
    """Why a pod is evicted: `plugin` (upstream's strategy, the PMJ's evict-trigger) and `reason` in upstream's
    wording (e.g. LowNodeLoad's "node is overutilized, ..."); `delete_options` (DeleteOptions) instead of the evict
    plugin's default; `job`, for the MigrationController, what its job carries beyond its defaults."""

    plugin: str
    reason: str = ""
    delete_options: Mapping[str, object] | None = None
    job: JobContext | None = None


@dataclass
class Snapshot:
    """What one round sees: the cluster as scheduler.cluster builds it (nodes with their pods and NodeMetric,
    PodDisruptionBudgets, Reservations, PriorityClasses) and every other object by kind (Deployments, ReplicaSets,
    StatefulSets, CloneSets, PodMigrationJobs, Namespaces, ...), at time `now` (unix seconds)."""

    cluster: Cluster
    objects: Mapping[str, list[JSON]] = field(default_factory=dict)
    now: float = 0.0

    def nodes(self) -> list[NodeInfo]:
        return list(self.cluster.nodes.values())

    def pods_on(self, node: str) -> list[JSON]:
        """The node's pods that hold resources (not Succeeded/Failed), as build_cluster keeps them."""
        info = self.cluster.nodes.get(node)
        return list(info.pods.values()) if info is not None else []

    def all_pods(self) -> Iterator[JSON]:
        """Bound pods (of known nodes) and pending ones."""
        yield from self.cluster.assigned_pods()
        yield from self.cluster.pending

    def pod(self, namespace: str, name: str) -> JSON | None:
        want = f"{namespace}/{name}"
        for p in self.all_pods():
            if key(p) == want:
                return p
        return None

    def of_kind(self, kind: str) -> list[JSON]:
        return list(self.objects.get(kind, ()))


def snapshot(objects: Iterable[JSON], now: float) -> Snapshot:
    """The cluster (nodes, their pods and NodeMetrics, PDBs, Reservations, PriorityClasses) and every object by
    kind."""
    objs = list(objects)
    by_kind: dict[str, list[JSON]] = {}
    for o in objs:
        by_kind.setdefault(str(o.get("kind") or ""), []).append(o)
    return Snapshot(build_cluster(objs), by_kind, now)


class EvictionLimiter(Protocol):
    """Per-round caps (upstream evictions/eviction_limiter.go): maxNoOfPodsToEvictPerNode/PerNamespace/Total."""

    def allowed(self, pod: JSON) -> str | None:
        """None when one more eviction of `pod` stays within the caps, else which cap it would pass (upstream's
        metric result wording, e.g. "maximum number of pods per node reached")."""
        ...

    def done(self, pod: JSON) -> None:
        """Count one eviction of `pod`."""
        ...

    def total(self) -> int: ...

    def reset(self) -> None: ...


class Evictor(Protocol):
    """What plugins evict through (upstream framework.Evictor, runtime/evictor_proxy.go): the limiter, then the
    profile's evict plugin; `filter` and `pre_eviction_filter` AND the profile's filter plugins."""

    def filter(self, pod: JSON) -> bool: ...

    def pre_eviction_filter(self, pod: JSON) -> bool: ...

    def evict(self, pod: JSON, options: EvictOptions) -> bool: ...


class Handle(Protocol):
    """What a plugin may ask of the framework (upstream framework.Handle). `snapshot.now` is the round's clock;
    `kube` is the cluster in `koord-descheduler run` (the API client, Events, metrics, the Eviction API) and None in
    `simulate`: an evict plugin acts through it when it is there and only decides when it is not;
    `feature_gates` are the command line's `--feature-gates` (upstream reads its global feature gate)."""

    def evictor(self) -> Evictor: ...

    @property
    def snapshot(self) -> Snapshot: ...

    @property
    def limiter(self) -> EvictionLimiter: ...

    @property
    def kube(self) -> KubeAccess | None: ...

    @property
    def feature_gates(self) -> FeatureGates: ...


@runtime_checkable
class Plugin(Protocol):
    name: str


@runtime_checkable
class DeschedulePlugin(Plugin, Protocol):
    """Runs first each round over the profile's ready nodes; errors are reported, the round goes on."""

    def deschedule(self, nodes: Sequence[NodeInfo]) -> None: ...


@runtime_checkable
class BalancePlugin(Plugin, Protocol):
    """Runs after every profile's deschedule plugins (LowNodeLoad is one)."""

    def balance(self, nodes: Sequence[NodeInfo]) -> None: ...


@runtime_checkable
class EvictorPlugin(Plugin, Protocol):
    """Carries out an eviction (DefaultEvictor: the Eviction API; MigrationController: a PodMigrationJob). False:
    not evicted (the caller moves on without counting it)."""

    def evict(self, pod: JSON, options: EvictOptions) -> bool: ...


@runtime_checkable
class FilterPlugin(Plugin, Protocol):
    """Which pods may be evicted: `filter` before a plugin picks candidates, `pre_eviction_filter` just before the
    eviction (upstream: NodeFit checks there)."""

    def filter(self, pod: JSON) -> bool: ...

    def pre_eviction_filter(self, pod: JSON) -> bool: ...


@runtime_checkable
class Controller(Protocol):
    """A plugin with work of its own between rounds (upstream: the MigrationController's reconcile loop and its
    arbitration, which the controller manager runs). `run` calls `run_controller(stop)` once, in a thread of its own,
    while this process leads, and sets `stop` when it stops leading or exits; the plugin reads the cluster through
    `Handle.kube` (`objects()` for the live view, `client` to write). `simulate` never calls it."""

    def run_controller(self, stop: threading.Event) -> None: ...


@runtime_checkable
class Reporter(Protocol):
    """A plugin whose last round `simulate` shows under "nodes" (LowNodeLoad: pool → node → class and anomaly
    counts)."""

    def report(self) -> Mapping[str, Mapping[str, JSON]]: ...


@runtime_checkable
class SimulationOutput(Protocol):
    """A plugin that adds keys of its own to `simulate`'s output (the MigrationController: podMigrationJobs)."""

    def simulation_output(self) -> Mapping[str, object]: ...


Factory = Callable[[object, Handle], Plugin]
"""Builds a plugin from its decoded args (the dataclass of config.args, or the raw mapping for an args kind the
config does not know) and the profile's handle."""


@dataclass(frozen=True)
class PluginSpec:
    """One registry entry: the upstream name, the factory and the extension points it implements."""

    name: str
    factory: Factory
    points: frozenset[str]
