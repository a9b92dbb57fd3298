"""`koord-sched run`: a secondary scheduler that places pending gang/topology jobs whole and binds them as units."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from apis.client.kubeapi import KubeClient
from apis.core.errors import KoordletError
from apis.core.objects import JSON
from apis.scheduling.reservation import ANNOTATION_RESERVATION_ALLOCATED
from scheduler import extender_reservation as served
from scheduler import malformed
from scheduler.binder import Binder, Member, path_of
from scheduler.cache import ClusterCache, Source
from scheduler.cluster import Cluster, build_cluster, is_active, key, pod_problem
from scheduler.elasticquota.plugin import NAME as ELASTIC_QUOTA
from scheduler.elasticquota.plugin import ElasticQuota
from scheduler.elasticquota.revoke import OverUseMonitor
from scheduler.elasticquota.status import status_patch
from scheduler.events import SchedulingEvents
from scheduler.eviction import Evictor
from scheduler.extender import CONFIGMAPS, SOURCES
from scheduler.framework import Assumed, Scheduler
from scheduler.gang.model import DEFAULT_TIMEOUT_SECONDS, collect_gangs, gang_groups, gang_id_of
from scheduler.gang.planner import plan_jobs_detail
from scheduler.gang.plugin import Coscheduling
from scheduler.gang.topology import cluster_tree
from scheduler.gcpolicy import scheduling_thresholds
from scheduler.interfaces import Placement
from scheduler.metrics import SchedulerMetrics
from scheduler.queue.hints import table
from scheduler.queue.pending import MAX_IN_UNSCHEDULABLE_SECONDS, SchedulingQueue
from scheduler.reservation.model import Reservation
from scheduler.reservation.plugin import NAME as RESERVATION_PLUGIN
from scheduler.reservation.plugin import ReservationPlugin

log = logging.getLogger(__name__)

# Collections beyond the extender's, kept by the same cache. Missing CRDs count as empty. Reservations and
# ElasticQuotas come with the extender's sources: listing them here again made every quota appear twice.
EXTRA_SOURCES: tuple[Source, ...] = (
    CONFIGMAPS,
    Source("/apis/scheduling.sigs.k8s.io/v1alpha1/podgroups", "PodGroup", optional=True),
    Source("/apis/scheduling.koordinator.sh/v1alpha1/clusternetworktopologies", "ClusterNetworkTopology",
           optional=True),
    Source("/apis/scheduling.k8s.io/v1/priorityclasses", "PriorityClass", optional=True),
    Source("/apis/policy/v1/poddisruptionbudgets", "PodDisruptionBudget", optional=True),
)
PENDING = "PendingPod"  # the cache's store of this scheduler's pods (the field selector is only a hint)


def run_sources(scheduler_name: str) -> tuple[Source, ...]:
    """Everything `run` reads; its pending pods last, so a re-list sees a pod bound in between at most twice."""
    return (*SOURCES, *EXTRA_SOURCES,
            Source("/api/v1/pods", "Pod", f"spec.nodeName=,spec.schedulerName={scheduler_name}", name=PENDING))


QUOTAS = "/apis/scheduling.sigs.k8s.io/v1alpha1/namespaces/{namespace}/elasticquotas/{name}"
CNT_STATUS = "/apis/scheduling.koordinator.sh/v1alpha1/clusternetworktopologies/{name}/status"
STRATEGIC_MERGE = "application/strategic-merge-patch+json"


@dataclass
class BindFailure:
    """One unit (GangGroup or lone pod) whose binding did not complete."""
    unit: str
    error: str
    bound: list[str] = field(default_factory=list)  # members bound before the failure: they stay bound
    rolled_back: list[str] = field(default_factory=list)


class SecondaryScheduler:
    """Snapshot → the pending pods due this cycle, in queueSort order (scheduler.queue: a pod that failed waits
    for an event that can help it) → plan (plan_jobs: all-or-nothing gangs, topology plans) → bind each unit.
    With `watch` the cluster cache is fed by list + watch and a steady cycle makes no list request; what a cycle
    bound stays assumed in the cache until the watch shows it (docs/decisions.md, "schedcache"). Without it every
    cycle re-lists the cache first (tests that change the API double between cycles and expect the next to see
    it)."""

    def __init__(self, client: KubeClient, scheduler_name: str, profile_factory: Callable[[Cluster], Scheduler], *,
                 default_timeout: float = DEFAULT_TIMEOUT_SECONDS, set_conditions: bool = True,
                 enable_preemption: bool = False, write_quota_status: bool = True,
                 write_topology_status: bool = True, watch: bool = False, queueing_hints: bool = True,
                 max_unschedulable: float = MAX_IN_UNSCHEDULABLE_SECONDS, record_events: bool = False) -> None:
        self.client = client
        self.watch = watch
        self.write_topology_status = write_topology_status
        self.enable_preemption = enable_preemption
        self.write_quota_status = write_quota_status
        self.evictor = Evictor(client, scheduler_name)
        self.binder = Binder(client)
        self.lock = threading.Lock()  # held for a whole cycle; the diagnosis API reads under it
        self.pending_pods: list[JSON] = []  # of the last cycle
        self.preempted: list[JSON] = []  # preemptions carried out in the last cycle
        self.preemption_errors: list[str] = []
        self.scheduler_name = scheduler_name
        self.profile_factory = profile_factory
        self.default_timeout = default_timeout
        self.set_conditions = set_conditions
        self.events = SchedulingEvents(client, scheduler_name) if record_events else None
        self.cache = ClusterCache(client, run_sources(scheduler_name))
        self.scheduler: Scheduler | None = None  # of the last cycle, with what it bound assumed
        self.failures: list[BindFailure] = []  # of the last cycle
        self._reported: dict[str, str] = {}  # pod key → last unschedulable reason logged
        self.metrics: SchedulerMetrics | None = None  # set to record (cli `run`)
        self.gated = 0  # pods of ours held back by schedulingGates in the last list
        self.clock: Callable[[], float] = time.monotonic  # the over-use revoke controller's
        self.revoke_monitor: OverUseMonitor | None = None  # kept across cycles (each cycle builds a new plugin)
        self._last_revoke = -math.inf
        self.revoked: list[tuple[str, str]] = []  # (quota, pod) evicted for over-use in the last cycle
        # the pending queue across cycles (scheduler.queue): None tries every pending pod every cycle
        self.queue = SchedulingQueue(table(False), {s.store: s.kind for s in self.cache.sources}, PENDING,
                                     next(s.store for s in self.cache.sources if s.assigned_only),
                                     max_unschedulable=max_unschedulable) if queueing_hints else None

    # -- the cluster ------------------------------------------------------------------------------------------
    def pending(self, pods: list[JSON]) -> list[JSON]:
        """Pods for this scheduler, not bound, not terminating, not gated (the cache isolated malformed ones)."""
        out = []
        self.gated = 0
        for p in pods:
            spec = p.get("spec") or {}
            if spec.get("schedulerName") != self.scheduler_name or spec.get("nodeName") or not is_active(p):
                continue
            if spec.get("schedulingGates"):
                self.gated += 1
                continue
            why = pod_problem(p)
            if why is not None:  # one pod isolated: the other pending pods are still scheduled
                malformed.report("Pod", p, why)
                continue
            p.setdefault("metadata", {}).setdefault("namespace", "default")
            out.append(p)
        return out

    def load(self) -> tuple[Cluster, list[JSON]]:
        """The cycle's own cluster and pending pods from the cache: watched (no API request once synced) or
        re-listed now."""
        if not self.watch:
            self.cache.relist()
        elif not self.cache.started:
            self.cache.start()
        if self.watch and not self.cache.wait_synced():
            raise KoordletError("the cluster cache has not listed every collection yet")
        _, by_store = self.cache.snapshot()
        if self.queue is not None:
            self.queue.observe(by_store)
        pods = self.pending(by_store.pop(PENDING))
        cluster = build_cluster(o for objects in by_store.values() for o in objects)
        bound = {k for n in cluster.nodes.values() for k in n.pods}
        return cluster, [p for p in pods if key(p) not in bound]

    def close(self) -> None:
        """Stop the cache's watches (when `watch`)."""
        if self.cache.started:
            self.cache.stop()

    # -- one cycle ------------------------------------------------------------------------------------------------
    @contextmanager
    def state(self) -> Iterator[tuple[Scheduler | None, list[JSON]]]:
        """The last cycle's scheduler and pending pods, for the diagnosis API."""
        with self.lock:
            yield self.scheduler, self.pending_pods

    def run_once(self) -> list[Placement]:
        """One pass over every pending pod; returns the outcome per pod (node None: not bound, with the reason)."""
        with self.lock:
            return self._cycle()

    def _cycle(self) -> list[Placement]:
        cluster, pods = self.load()
        self.failures, self.preempted, self.preemption_errors = [], [], []
        sched = self.profile_factory(cluster)
        sched.metrics = self.metrics
        if self.queue is not None:  # v1.5/v1.6's Coscheduling (the queueSort) registers events v1.7's does not
            self.queue.hints = table(isinstance(sched.profile.queue_sort, Coscheduling))
        self.scheduler, self.pending_pods = sched, pods
        self._write_topology_status(cluster)
        resv = sched.plugin(RESERVATION_PLUGIN, ReservationPlugin)
        if resv is not None:
            resv.bind(cluster)
            for r in sorted(resv.book.values(), key=lambda r: r.name):
                if r.scheduler_name == self.scheduler_name:
                    resv.schedule_reservation(sched, r)
                    self._pre_allocate(resv, r)
        try:
            return self._pods(sched, cluster, pods)
        finally:
            if resv is not None:
                self._write_reservations(resv)

    def _write_reservations(self, resv: ReservationPlugin) -> None:
        """Annotations (devices held) and status of every reservation that changed: a merge patch of the object,
        then of its status subresource (the CRD declares one)."""
        for r in resv.book.values():
            if r.dirty and served.write(self.client, r.name, served.changed_annotations(r), r.status()):
                r.dirty = False

    def _pre_allocate(self, resv: ReservationPlugin, r: Reservation) -> None:
        """Upstream PreBindReservation, before the reservation is bound (marked Available): each running pod it took
        over is patched to name it, under the pod's uid (a pod re-created under the name is not taken). A failed
        patch fails the binding: the reservation stays Pending with the reason and is tried again next cycle."""
        for pod in r.pre_allocated:
            meta = pod.get("metadata") or {}
            allocated = (meta.get("annotations") or {}).get(ANNOTATION_RESERVATION_ALLOCATED)
            patch = {"metadata": {"annotations": {ANNOTATION_RESERVATION_ALLOCATED: allocated},
                                  **({"uid": meta["uid"]} if meta.get("uid") else {})}}
            try:
                self.client.patch(path_of(pod), patch)
            except KoordletError as e:
                log.warning("pre-allocating %s to Reservation %s: %s", key(pod), r.name, e)
                resv.unplace(r, f"pre-allocating {key(pod)}: {e}")
                return
        r.pre_allocated.clear()

    def _pods(self, sched: Scheduler, cluster: Cluster, pending: list[JSON]) -> list[Placement]:
        pods, unit_of = pending, self._units(pending, cluster)
        if self.queue is not None:
            sched.admit_pending(pending)  # every pending pod counts in its quota, tried this cycle or not
            pods = self.queue.due(pending, unit_of)
        if not pods:
            self._write_quota_status(sched)
            self._revoke_over_use(sched)
            self._record(len(pending), 0)
            return []
        pods = sched.order(pods, self.queue.state if self.queue is not None else None)  # the profile's queueSort
        by_key = {key(p): p for p in pods}
        placements, planner = plan_jobs_detail(sched, pods, enable_preemption=self.enable_preemption,
                                               default_timeout=self.default_timeout)
        for entry, (preemptor, trigger) in zip(planner.preemptions, planner.preemptors, strict=True):
            self._preempt(entry, preemptor, trigger, planner.victims, by_key)
        units: dict[str, list[Placement]] = {}
        for p in placements:
            if p.node is not None:
                units.setdefault(planner.units.get(p.pod) or p.pod, []).append(p)
        for unit, members in units.items():
            self._bind_unit(sched, unit, members, by_key)
        for p in placements:
            if p.node is None:
                self._unschedulable(by_key[p.pod], p.reason)
            else:
                self._reported.pop(p.pod, None)
        if self.queue is not None:
            self.queue.record(placements, {k for f in self.failures for k in f.rolled_back}, unit_of, by_key)
        self._write_quota_status(sched)
        self._revoke_over_use(sched)
        self._record(len(pending) - sum(1 for p in placements if p.node is not None), planner.rejected_groups)
        return placements

    @staticmethod
    def _units(pods: list[JSON], cluster: Cluster) -> Callable[[JSON], str]:
        """pod → its unit in the queue: its GangGroup's id, or its own key."""
        groups = gang_groups(collect_gangs(pods, cluster))

        def unit(pod: JSON) -> str:
            gid = gang_id_of(pod)
            return key(pod) if gid is None else groups[gid].id if gid in groups else gid

        return unit

    def _record(self, unschedulable: int, waiting_groups: int) -> None:
        """scheduler_pending_pods and the waiting GangGroups after a cycle: every pod not bound waits (our
        'unschedulable' queue, scheduler.queue); nothing stays in active or backoff between cycles."""
        if self.metrics is None:
            return
        self.metrics.pending.labels("unschedulable").set(unschedulable)
        self.metrics.pending.labels("gated").set(self.gated)
        self.metrics.waiting_gangs.set(waiting_groups)

    def _preempt(self, entry: JSON, preemptor: str, trigger: str,
                 victims: dict[str, tuple[JSON, str]], pods: dict[str, JSON]) -> None:
        """Evict the planned victims, then nominate every member (prepareCandidates, makeNomination); a refused
        eviction stops here: the members are not nominated and the job retries next cycle."""
        for vk in entry["victims"]:
            why = self.evictor.evict(victims[vk][0], preemptor, trigger)
            if why is not None:
                self.preemption_errors.append(why)
                log.warning("preemption for %s stopped: %s", preemptor, why)
                return
        for pk, node in entry["nominatedNodes"].items():
            why = self.evictor.nominate(pods[pk], node)
            if why is not None:
                log.warning("%s", why)
        self.preempted.append(entry)
        log.info("%s preempted %s; nominated %s", preemptor, ", ".join(entry["victims"]),
                 ", ".join(f"{k}->{n}" for k, n in entry["nominatedNodes"].items()))

    def _write_topology_status(self, cluster: Cluster) -> None:
        """status.detailStatus of the ClusterNetworkTopology `default` from the nodes' labels, written (UpdateStatus)
        only when it changed — upstream's tree manager rebuilds it every minute and compares the same way."""
        if not self.write_topology_status:
            return
        cnt = next((t for t in cluster.topologies if (t.get("metadata") or {}).get("name") == "default"), None)
        tree = cluster_tree(cluster) if cnt is not None else None
        if cnt is None or tree is None:
            return
        detail = tree.status()
        if (cnt.get("status") or {}).get("detailStatus") == detail:
            return
        obj = {**cnt, "apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "ClusterNetworkTopology",
               "status": {"detailStatus": detail}}
        try:
            self.client.put(CNT_STATUS.format(name="default"), obj)
            cnt["status"] = obj["status"]
            log.info("ClusterNetworkTopology default: status.detailStatus updated (%d domains)", len(detail))
        except KoordletError as e:
            log.warning("updating ClusterNetworkTopology default status: %s", e)

    def _write_quota_status(self, sched: Scheduler) -> None:
        """status.used and the runtime/request annotations of every ElasticQuota that changed (the upstream
        ElasticQuotaController's merge patch on the object itself: the CRD has no status subresource)."""
        quota = sched.plugin(ELASTIC_QUOTA, ElasticQuota)
        if quota is None or not self.write_quota_status or not sched.cluster.elastic_quotas:
            return
        quota.bind(sched.cluster)
        quota.forest.refresh_all()
        for obj in sched.cluster.elastic_quotas:
            meta = obj.get("metadata") or {}
            name, ns = str(meta.get("name") or ""), str(meta.get("namespace") or "default")
            info = quota.info(name)
            if info is None or (info.namespace and info.namespace != ns):
                continue  # left out by validation, or another namespace's quota of the same name
            patch = quota.status_patch(obj, status_patch(obj, quota.summary(name) or {}))
            if patch is None:
                continue
            try:
                self.client.patch(QUOTAS.format(namespace=ns, name=name), patch)
            except KoordletError as e:
                log.warning("updating ElasticQuota %s/%s: %s", ns, name, e)

    def _revoke_over_use(self, sched: Scheduler) -> None:
        """QuotaOverUsedRevokeController, every revokePodInterval: evict the pods of each quota whose used has
        stayed above its runtime for longer than delayEvictTime (revoke.py's order)."""
        self.revoked = []
        quota = sched.plugin(ELASTIC_QUOTA, ElasticQuota)
        if quota is None or not quota.revokes or not sched.cluster.elastic_quotas:
            return
        now = self.clock()
        if now - self._last_revoke < quota.args.revoke_pod_interval:
            return
        self._last_revoke = now
        if self.revoke_monitor is None or self.revoke_monitor.delay != quota.args.delay_evict_time:
            self.revoke_monitor = OverUseMonitor(quota.args.delay_evict_time, self.clock)
        quota.bind(sched.cluster)
        for name in self.revoke_monitor.due(quota.usage()):
            for pod in quota.to_revoke(name):
                why = self.evictor.revoke(pod, name)
                if why is not None:
                    log.warning("revoking %s of over-used quota %s: %s", key(pod), name, why)
                    continue
                self.revoked.append((name, key(pod)))

    def _bind_unit(self, sched: Scheduler, unit: str, members: list[Placement], pods: dict[str, JSON]) -> None:
        """Bind a unit's members (scheduler.binder); the members rolled back get the failure as their reason."""
        targets = [Member(Assumed(pods[p.pod], str(p.node), p.annotations, p.removed),
                          str((pods[p.pod].get("metadata") or {}).get("uid") or "")) for p in members]
        result = self.binder.bind(sched, targets, sched.release)
        for m in result.bound:  # counted on their node by the next cycles until the watch shows them there
            self.cache.assume(m.assumed.pod, m.assumed.node, m.assumed.annotations)
            if self.events is not None:
                self.events.scheduled(m.assumed.pod, m.assumed.node)
        if not result.error:
            return
        undone = {m.key for m in result.rolled_back}
        for p in members:
            if p.pod in undone:
                p.reason = f"{'gang ' + unit + ' ' if len(members) > 1 else ''}bind failed: {result.error}"
                p.node, p.annotations = None, {}
        failure = BindFailure(unit, result.error, sorted(m.key for m in result.bound),
                              [m.key for m in result.rolled_back])
        self.failures.append(failure)
        if result.bound:
            log.error("unit %s partially bound (%s stay bound, %s rolled back): %s", unit, ", ".join(failure.bound),
                      ", ".join(failure.rolled_back), result.error)
        else:
            log.warning("unit %s not bound, rolled back: %s", unit, result.error)

    def _unschedulable(self, pod: JSON, reason: str) -> None:
        k = key(pod)
        if self._reported.get(k) != reason:  # one Event per reason, not one per cycle (docs/decisions.md)
            self._reported[k] = reason
            log.info("%s unschedulable: %s", k, reason)
            if self.events is not None:
                self.events.failed(pod, reason)
        if not self.set_conditions:
            return
        conditions = (pod.get("status") or {}).get("conditions") or []
        current = next((c for c in conditions if isinstance(c, dict) and c.get("type") == "PodScheduled"), {})
        if current.get("status") == "False" and current.get("message") == reason:
            return
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": reason,
                     "lastProbeTime": None,
                     "lastTransitionTime": current.get("lastTransitionTime") if current.get("status") == "False"
                     else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        try:  # strategic merge: conditions merge by type, as kube-scheduler's status update does
            self.client.patch(f"{path_of(pod)}/status", {"status": {"conditions": [condition]}},
                              patch_type=STRATEGIC_MERGE)
        except KoordletError as e:
            log.debug("setting PodScheduled=False on %s: %s", k, e)

    # -- loop ---------------------------------------------------------------------------------------------------
    def run(self, stop: threading.Event, interval: float = 1.0) -> None:
        """run_once every `interval` seconds until `stop` is set; API errors are logged and retried next time. The
        watches stop with it."""
        try:
            with scheduling_thresholds():
                while not stop.is_set():
                    try:
                        self.run_once()
                    except KoordletError as e:
                        log.warning("scheduling cycle: %s", e)
                    stop.wait(interval)
        finally:
            self.close()

