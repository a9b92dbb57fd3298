"""The MigrationController's pod filter: which pods may get a PodMigrationJob now.

Upstream: arbitrator/filter.go. In order: no migrating job for the pod already; in ReservationFirst mode the pod's
scheduler is one of `schedulerNames`; the non-retryable checks (namespace gray-scale, eviction cost MaxInt32, the pod
constraints, expected replicas) and the retryable ones (object limiters, maxMigratingPerNode, PerNamespace,
PerWorkload / maxUnavailablePerWorkload, maxMigratingGlobally). The evict annotation passes both check groups.
`skipEvictionGates` drops a throttler check or relaxes a policy (config/migration_args.py names them).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from apis.core import podmeta
from apis.core.objects import JSON, as_object, as_objects
from apis.extension.descheduling import (
    ANNOTATION_DESCHEDULER_EVICT,
    ANNOTATION_POD_ARBITRATING,
    EVICTION_COST_NEVER,
    eviction_cost,
)
from apis.scheduling.migration import MODE_RESERVATION_FIRST
from scheduler.cluster import key
from scheduler.descheduler.config import migration_args as ma
from scheduler.descheduler.config.migration_args import MigrationControllerArgs, ObjectLimiter
from scheduler.descheduler.interfaces import Snapshot
from scheduler.descheduler.migration import budget
from scheduler.descheduler.migration.constraints import PodConstraints
from scheduler.descheduler.migration.jobs import MigratingJobs
from scheduler.descheduler.migration.objectlimiter import ObjectLimiters, Subject
from scheduler.descheduler.migration.workload import ObjectIndex, Scales, Workload, controller_of

log = logging.getLogger("koord-descheduler.migration")


def gated(args: MigrationControllerArgs) -> MigrationControllerArgs:
    """The args with the policy gates of skipEvictionGates applied: PVC → ignorePvcPods off; BarePods → both
    bare-pod flags on; LocalStorage, SystemCritical → their flags on; PriorityThreshold, LabelSelector, Namespaces
    dropped; NodeFit off."""
    skip = set(args.skip_eviction_gates)
    a = dataclasses.replace(args)
    if ma.GATE_PVC in skip:
        a.ignore_pvc_pods = False
    if ma.GATE_BARE_PODS in skip:
        a.evict_all_bare_pods = a.evict_failed_bare_pods = True
    if ma.GATE_LOCAL_STORAGE in skip:
        a.evict_local_storage_pods = True
    if ma.GATE_SYSTEM_CRITICAL in skip:
        a.evict_system_critical_pods = True
    if ma.GATE_PRIORITY_THRESHOLD in skip:
        a.priority_threshold = None
    if ma.GATE_LABEL_SELECTOR in skip:
        a.label_selector = None
    if ma.GATE_NAMESPACES in skip:
        a.namespaces = None
    if ma.GATE_NODE_FIT in skip:
        a.node_fit = False
    return a


def is_arbitrating(pod: JSON) -> bool:
    return as_object(as_object(pod.get("metadata")).get("annotations")).get(ANNOTATION_POD_ARBITRATING) == "true"


class MigrationFilter:
    """The checks over the round's snapshot (`snapshot()`), the jobs known (`jobs()`) and the object limiters (their
    own, or `limiters` shared with another filter); `scales()`, where it gives one, reads the owners of other kinds
    (in `run`: migration/scale.ScaleReader), each at most once per snapshot."""

    def __init__(self, args: MigrationControllerArgs, snapshot: Callable[[], Snapshot],
                 jobs: Callable[[], MigratingJobs], *, limiters: ObjectLimiters | None = None,
                 scales: Callable[[], Scales | None] = lambda: None) -> None:
        self.args = gated(args)
        self.skip = set(args.skip_eviction_gates)
        self.snapshot = snapshot
        self.jobs = jobs
        self.limiters = limiters if limiters is not None else ObjectLimiters(args.object_limiters)
        self.constraints = PodConstraints(self.args, lambda: self.snapshot().nodes())
        self.scales = scales
        self._view: _View | None = None

    # ---- the plugin's Filter and PreEvictionFilter ----

    def filter(self, pod: JSON) -> bool:
        why = self.refusal(pod)
        if why is not None:
            log.debug("pod %s may not migrate: %s", key(pod), why)
        return why is None

    def pre_eviction_filter(self, pod: JSON) -> bool:
        """DefaultEvictor's PreEvictionFilter built from these args: nodeFit."""
        return not self.args.node_fit or self.constraints.node_fits(pod)

    def refusal(self, pod: JSON) -> str | None:
        meta = as_object(pod.get("metadata"))
        if self.jobs().has_job(str(meta.get("uid") or ""), str(meta.get("namespace") or ""),
                               str(meta.get("name") or "")):
            return "the pod already has a migrating PodMigrationJob"
        if self.args.default_job_mode == MODE_RESERVATION_FIRST:
            scheduler = str(as_object(pod.get("spec")).get("schedulerName") or "")
            if scheduler not in self.args.scheduler_names:
                return f"pod.schedulerName={scheduler} is not one of {self.args.scheduler_names} (ReservationFirst)"
        return self.non_retryable(pod) or self.retryable(pod)

    # ---- non-retryable: the pod may not migrate as it is ----

    def non_retryable(self, pod: JSON) -> str | None:
        if ANNOTATION_DESCHEDULER_EVICT in podmeta.pod_annotations(pod):
            return None
        ns = str(as_object(pod.get("metadata")).get("namespace") or "")
        if self.args.namespaces is not None and not self.args.namespaces.allows(ns):
            return f"namespace {ns} is not migrated (namespaces)"
        if eviction_cost(podmeta.pod_annotations(pod)) == EVICTION_COST_NEVER:
            return "eviction cost is MaxInt32"
        reasons = self.constraints.reasons(pod)
        if reasons:
            return "; ".join(reasons)
        return self.expected_replicas(pod)

    def expected_replicas(self, pod: JSON) -> str | None:
        if podmeta.controller_ref(pod) is None or ma.GATE_EXPECTED_REPLICAS in self.skip \
                or self.args.skip_check_expected_replicas:
            return None
        replicas = self._replicas(self.workload_of(pod))
        try:
            refused = budget.expected_replicas_refused(replicas, self.args.max_migrating_per_workload,
                                                       self.args.max_unavailable_per_workload)
        except ValueError as e:
            return str(e)
        return f"the workload's {replicas} replicas may not migrate (expectedReplicas)" if refused else None

    # ---- retryable: limits that may allow the pod later ----

    def retryable(self, pod: JSON) -> str | None:
        if ANNOTATION_DESCHEDULER_EVICT in podmeta.pod_annotations(pod):
            return None
        if self.limiters.exceeded(self.subject(pod), self.snapshot().now):
            return "the workload (or namespace) was migrated too often recently (objectLimiters)"
        arbitrating = is_arbitrating(pod)
        for gate, check in ((ma.GATE_MAX_MIGRATING_PER_NODE, self.per_node),
                            (ma.GATE_MAX_MIGRATING_PER_NAMESPACE, self.per_namespace),
                            (ma.GATE_MAX_MIGRATING_PER_WORKLOAD, self.per_workload),
                            (ma.GATE_MAX_MIGRATING_GLOBALLY, self.globally)):
            if gate not in self.skip:
                why = check(pod, arbitrating)
                if why is not None:
                    return why
        return None

    def per_node(self, pod: JSON, arbitrating: bool) -> str | None:
        limit = self.args.max_migrating_per_node
        node = str(as_object(pod.get("spec")).get("nodeName") or "")
        if not node or limit is None or limit <= 0:
            return None
        uid = _uid(pod)
        jobs = self.jobs()
        count = sum(1 for p in self.snapshot().pods_on(node) if _uid(p) != uid
                    and jobs.has_job(_uid(p), *_ns_name(p), arbitrating=arbitrating))
        return f"{count} pods of node {node} are migrating (maxMigratingPerNode {limit})" if count >= limit else None

    def per_namespace(self, pod: JSON, arbitrating: bool) -> str | None:
        limit = self.args.max_migrating_per_namespace
        if limit is None or limit <= 0:
            return None
        ns = _ns_name(pod)[0]
        count = self.jobs().count_other(_uid(pod), arbitrating, ns)
        return f"{count} pods of namespace {ns} are migrating (maxMigratingPerNamespace {limit})" \
            if count >= limit else None

    def globally(self, pod: JSON, arbitrating: bool) -> str | None:
        limit = self.args.max_migrating_globally
        if limit is None or limit <= 0:
            return None
        count = self.jobs().count_other(_uid(pod), arbitrating)
        return f"{count} pods are migrating (maxMigratingGlobally {limit})" if count >= limit else None

    def per_workload(self, pod: JSON, arbitrating: bool) -> str | None:
        """maxMigratingPerWorkload, then maxUnavailablePerWorkload over the unavailable pods and the migrating
        ones; a lookup that fails refuses, a pod without a controller passes."""
        ref = podmeta.controller_ref(pod)
        if ref is None:
            return None
        workload = self.workload_of(pod)
        replicas = self._replicas(workload)
        try:
            max_migrating = budget.max_migrating(replicas, self.args.max_migrating_per_workload)
            max_unavailable = budget.max_unavailable(replicas, self.args.max_unavailable_per_workload)
        except ValueError as e:
            return str(e)
        uid, owner = _uid(pod), str(ref.get("uid") or "")
        view = self.view()
        refs = self.jobs().by_controller(arbitrating, view.controller_uid).get(owner, [])
        migrating = {r.key for r in refs if r.uid != uid}
        if migrating and len(migrating) >= max_migrating:
            return f"{len(migrating)} pods of the workload are migrating (maxMigratingPerWorkload {max_migrating})"
        unavailable = view.unavailable(workload) | migrating
        if len(unavailable) >= max_unavailable:
            return f"{len(unavailable)} pods of the workload are unavailable or migrating " \
                   f"(maxUnavailablePerWorkload {max_unavailable})"
        return None

    # ---- object limiters ----

    def subject(self, pod: JSON) -> Subject:
        ref = podmeta.controller_ref(pod)
        return Subject(str(ref.get("uid") or "") if ref is not None else "", _ns_name(pod)[0])

    def track(self, pod: JSON, now: float) -> None:
        """One pod evicted by a job (upstream trackEvictedPod)."""
        workload = self.workload_of(pod)
        replicas = 0 if workload is None or workload.deleting else workload.replicas

        def max_migrating(kind: str, limiter: ObjectLimiter) -> int:
            value = limiter.max_migrating
            if kind == ma.LIMIT_NAMESPACE:  # an integer only: a percent reads 0
                return value if isinstance(value, int) else 0
            try:
                return budget.max_migrating(replicas, value if value is not None
                                            else self.args.max_migrating_per_workload)
            except ValueError:
                return 0

        self.limiters.track(self.subject(pod), max_migrating, now)

    # ---- helpers ----

    def _replicas(self, workload: Workload | None) -> int:
        return workload.replicas if workload is not None else 0

    def view(self) -> _View:
        """The indexes of the snapshot's objects (kept while they are the same objects, whatever its clock)."""
        snap = self.snapshot()
        if self._view is None or self._view.snapshot.cluster is not snap.cluster \
                or self._view.snapshot.objects is not snap.objects:
            self._view = _View(snap)
        return self._view

    def pods_by_key(self) -> dict[str, JSON]:
        return self.view().pods

    def workload_of(self, pod: JSON) -> Workload | None:
        view, scales = self.view(), self.scales()
        return controller_of(pod, view.objects, view.memoized(scales) if scales is not None else None)


class _View:
    """One snapshot's objects indexed for the checks: workloads by name, pods by key and by owner UID."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.objects = ObjectIndex(snapshot.objects)
        self.pods = {key(p): p for p in snapshot.all_pods()}
        self.by_owner: dict[str, list[JSON]] = {}
        for p in self.pods.values():
            for r in podmeta.owner_references(p):
                self.by_owner.setdefault(str(r.get("uid") or ""), []).append(p)

        self._controller: dict[str, str | None] = {}
        self._unavailable: dict[tuple[str, frozenset[str]], frozenset[str]] = {}
        self._scales: dict[tuple[str, str, str, str], JSON | None] = {}

    def memoized(self, scales: Scales) -> Scales:
        """`scales` asked at most once per owner while this view lasts."""
        def read(api_version: str, kind: str, namespace: str, name: str) -> JSON | None:
            k = (api_version, kind, namespace, name)
            if k not in self._scales:
                self._scales[k] = scales(*k)
            return self._scales[k]
        return read

    def controller_uid(self, pod_key: str) -> str | None:
        """The controller UID of the pod of that key (None: no such pod, or no controller)."""
        if pod_key not in self._controller:
            pod = self.pods.get(pod_key)
            ref = podmeta.controller_ref(pod) if pod is not None else None
            self._controller[pod_key] = str(ref.get("uid") or "") if ref is not None else None
        return self._controller[pod_key]

    def unavailable(self, workload: Workload | None) -> frozenset[str]:
        """The keys of the workload's pods that are not active and Ready."""
        if workload is None:
            return frozenset()
        k = (workload.uid, workload.owner_uids)
        if k not in self._unavailable:
            members = workload.pods([p for uid in workload.owner_uids for p in self.by_owner.get(uid, ())])
            self._unavailable[k] = frozenset(key(p) for p in members if not _available(p))
        return self._unavailable[k]


def _uid(pod: JSON) -> str:
    return str(as_object(pod.get("metadata")).get("uid") or "")


def _ns_name(pod: JSON) -> tuple[str, str]:
    meta = as_object(pod.get("metadata"))
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _available(pod: JSON) -> bool:
    """IsPodActive and IsPodReady."""
    status = as_object(pod.get("status"))
    if status.get("phase") in ("Succeeded", "Failed") or as_object(pod.get("metadata")).get("deletionTimestamp"):
        return False
    return any(isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
               for c in as_objects(status.get("conditions")))
