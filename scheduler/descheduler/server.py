"""`koord-descheduler run` (upstream cmd/koord-descheduler/app/server.go and descheduler.go's Start): descheduling
rounds every `deschedulingInterval` over a live view of the cluster, as the leader of a Lease.

The view is one ClusterCache (scheduler.cache: list + watch per collection, the malformed-object gate) of Nodes,
Pods, NodeMetrics, PodDisruptionBudgets, PriorityClasses, PersistentVolumeClaims, the workloads that own pods
(ReplicaSets, Deployments, StatefulSets, Kruise CloneSets), Reservations and PodMigrationJobs; a CRD that is not
installed counts as empty. Each round hands the framework a private snapshot at the round's clock, and the same
Descheduler object serves every round (LowNodeLoad's anomaly counts carry over). Rounds are not sliding: the next
starts `deschedulingInterval` after the previous one started (wait.NonSlidingUntil); 0 runs one round and stops.

An API server that does not answer costs the round, with one log line, and the next round tries again; a round never
ends the process.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from apis.client.kubeapi import KubeClient
from apis.core.errors import KoordletError
from apis.core.objects import JSON
from scheduler.cache import SYNC_TIMEOUT, ClusterCache, Source
from scheduler.descheduler.config.features import FeatureGates
from scheduler.descheduler.config.types import DeschedulerConfig
from scheduler.descheduler.framework import Descheduler
from scheduler.descheduler.interfaces import Controller, Plugin, PluginSpec, snapshot
from scheduler.descheduler.kube import KubeAccess, Tally
from scheduler.descheduler.metrics import DeschedulerMetrics
from scheduler.descheduler.registry import registry
from scheduler.descheduler.runner import prepared
from scheduler.descheduler.serving import WATCHDOG_TIMEOUT
from scheduler.leaderelection import LeaderElector, LeaseConfig

log = logging.getLogger("koord-descheduler")

SOURCES: tuple[Source, ...] = (
    Source("/api/v1/nodes", "Node"),
    Source("/api/v1/pods", "Pod"),
    Source("/apis/slo.koordinator.sh/v1alpha1/nodemetrics", "NodeMetric", optional=True),
    Source("/apis/policy/v1/poddisruptionbudgets", "PodDisruptionBudget"),
    Source("/apis/scheduling.k8s.io/v1/priorityclasses", "PriorityClass"),
    Source("/api/v1/persistentvolumeclaims", "PersistentVolumeClaim"),
    Source("/apis/apps/v1/replicasets", "ReplicaSet"),
    Source("/apis/apps/v1/deployments", "Deployment"),
    Source("/apis/apps/v1/statefulsets", "StatefulSet"),
    Source("/api/v1/replicationcontrollers", "ReplicationController"),
    Source("/apis/apps.kruise.io/v1alpha1/clonesets", "CloneSet", optional=True),
    Source("/apis/apps.kruise.io/v1beta1/statefulsets", "StatefulSet", optional=True, name="KruiseStatefulSet"),
    Source("/apis/scheduling.koordinator.sh/v1alpha1/reservations", "Reservation", optional=True),
    Source("/apis/scheduling.koordinator.sh/v1alpha1/podmigrationjobs", "PodMigrationJob", optional=True),
)
"""What a round sees; what `run` lists and watches (deploy/descheduler/rbac.yaml grants exactly these)."""


def api_version(source: Source) -> str:
    """The apiVersion of a source's objects, from its path (/api/v1/... → v1, /apis/G/V/... → G/V)."""
    parts = source.path.strip("/").split("/")
    return parts[1] if parts[0] == "api" else f"{parts[1]}/{parts[2]}"


def typed(by_store: Mapping[str, list[JSON]], sources: tuple[Source, ...]) -> None:
    """Each object's apiVersion where the API server left it out (a list's items carry none, a watch's objects
    do): the MigrationController tells workloads apart by API group (apps/v1 from Kruise's StatefulSets)."""
    for source in sources:
        version = api_version(source)
        for obj in by_store.get(source.store, ()):
            obj.setdefault("apiVersion", version)


class NamedController(Controller, Plugin, Protocol):
    """A plugin that is a Controller."""


@dataclass
class Round:
    """What one round did: `error` when it did not run (API server, too few nodes), the evictions decided (in a
    dry run: reported only) and, through the API, done, refused by a PodDisruptionBudget, failed."""

    error: str | None = None
    decided: list[str] = field(default_factory=list)
    tally: Tally = field(default_factory=Tally)


class InCluster:
    """The rounds against one API server. `watch` keeps the view by list + watch (no request in a steady round);
    without it every round re-lists first (tests that change the cluster between rounds)."""

    def __init__(self, client: KubeClient, config: DeschedulerConfig, *, watch: bool = True,
                 clock: Callable[[], float] = time.time, metrics: DeschedulerMetrics | None = None,
                 sources: tuple[Source, ...] = SOURCES, plugins: Mapping[str, PluginSpec] | None = None,
                 gates: FeatureGates | None = None) -> None:
        self.config = prepared(config)
        self.watch = watch
        self.clock = clock
        self.cache = ClusterCache(client, sources)
        self.kube = KubeAccess.of(client, metrics, clock, self.objects, lambda: self.cache.version,
                                  self.cache.listeners.append)
        self.desched = Descheduler(self.config, registry() if plugins is None else plugins, kube=self.kube,
                                   gates=gates)
        self.rounds = 0
        self.stop = threading.Event()  # `run`'s: a round waiting for the first lists gives up on it

    @property
    def metrics(self) -> DeschedulerMetrics:
        return self.kube.metrics

    def round(self) -> Round:
        """One round; never raises for the API server's sake."""
        try:
            if not self.watch:
                self.cache.relist()
            elif not self.cache.started:
                self.cache.start()
            if self.watch and not self._synced():
                return self._skipped("the cluster view has not listed every collection yet")
        except KoordletError as e:
            return self._skipped(f"listing the cluster: {e}")
        objects = self.objects()
        self.kube.evictor.tally = Tally()
        seen = len(self.desched.evictions)
        try:
            failure = self.desched.run_round(snapshot(objects, self.clock()))
        except KoordletError as e:  # a plugin's own API call (the evictor's are caught where they are made)
            return self._skipped(f"the API server, mid-round: {e}")
        self.rounds += 1
        done = Round(failure, [f"{e.namespace}/{e.name}" for e in self.desched.evictions[seen:]],
                     self.kube.evictor.tally)
        dry = " (dry run: nothing written)" if self.config.dry_run else ""
        log.info("round %d: %d pod(s) to evict%s, %d evicted, %d refused by a PodDisruptionBudget, %d failed",
                 self.rounds, len(done.decided), dry, done.tally.evicted, len(done.tally.refused),
                 len(done.tally.failed))
        return done

    def objects(self) -> list[JSON]:
        """A private copy of the live view, apiVersion filled in."""
        objects, by_store = self.cache.snapshot()
        typed(by_store, self.cache.sources)
        return objects

    def _synced(self) -> bool:
        """Whether every collection was listed once, waiting up to SYNC_TIMEOUT but no longer than until `stop`."""
        deadline = time.monotonic() + SYNC_TIMEOUT
        while not self.cache.wait_synced(min(1.0, max(0.0, deadline - time.monotonic()))):
            if self.stop.is_set() or time.monotonic() >= deadline:
                return False
        return True

    def _skipped(self, why: str) -> Round:
        log.warning("round skipped: %s; trying again next round", why)
        return Round(why)

    def run(self, stop: threading.Event) -> None:
        """Rounds until `stop` (or after one when the interval is 0)."""
        self.stop = stop
        interval = max(self.config.descheduling_interval, 0.0)
        log.info("descheduling every %gs%s", interval, " (dry run)" if self.config.dry_run else "")
        for plugin in self.controllers():
            threading.Thread(target=plugin.run_controller, args=(stop,), name=f"controller-{plugin.name}",
                             daemon=True).start()
        while not stop.is_set():
            started = time.monotonic()
            self.round()
            if interval <= 0:
                return
            stop.wait(max(0.0, interval - (time.monotonic() - started)))

    def controllers(self) -> list[NamedController]:
        """The plugins with a controller of their own (interfaces.Controller), each once."""
        return [p for fw in self.desched.frameworks for p in fw.plugins.values() if isinstance(p, Controller)]

    def close(self) -> None:
        if self.cache.started:
            self.cache.stop()


def lease_config(config: DeschedulerConfig) -> LeaseConfig:
    le = config.leader_election
    return LeaseConfig(le.resource_namespace, le.resource_name, le.lease_duration, le.renew_deadline,
                       le.retry_period)


def lead_and_run(rounds: InCluster, elector: LeaderElector | None, stop: threading.Event) -> int:
    """Upstream's Run: without leader election, rounds until stopped; with it, wait to lead, then rounds until stopped
    (the Lease given up on the way out, ReleaseOnCancel) or until the Lease is lost (exit 1: the Deployment restarts
    the container as a candidate). The exit code."""
    try:
        if elector is None:
            rounds.run(stop)
            return 0
        if not elector.acquire(stop):
            return 0
        lost = threading.Event()

        def on_lost() -> None:
            lost.set()
            stop.set()

        threading.Thread(target=elector.renew_until_lost, args=(stop, on_lost), name="leader-election",
                         daemon=True).start()
        rounds.run(stop)
        if lost.is_set():
            log.error("leaderelection lost")
            return 1
        elector.release()
        return 0
    finally:
        rounds.close()


def leader_health(elector: LeaderElector | None, clock: Callable[[], float] = time.time
                  ) -> Callable[[], str | None]:
    """The /healthz check of client-go's leader-election watchdog: failing while leading with a renewal older than
    the lease duration plus 20 s."""
    def check() -> str | None:
        if elector is None or not elector.leading:
            return None
        late = clock() - elector.renewed_at - elector.config.lease_duration
        return f"the Lease was last renewed {late:.0f}s past its duration" if late > WATCHDOG_TIMEOUT else None

    return check
