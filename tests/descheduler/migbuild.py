"""Builders for the MigrationController's tests: workload-owned pods, workloads, PodMigrationJobs, and a handle over
a snapshot of them (as the framework gives the plugin)."""

from __future__ import annotations

from typing import Any

from apis.scheduling.migration import decode_job
from scheduler.descheduler.config.features import FeatureGates
from scheduler.descheduler.config.migration_args import MigrationControllerArgs, decode_migration_args
from scheduler.descheduler.interfaces import EvictOptions, Snapshot, snapshot
from scheduler.descheduler.limiter import Limiter
from scheduler.descheduler.migration.filter import MigrationFilter
from scheduler.descheduler.migration.jobs import MigratingJobs
from scheduler.descheduler.migration.plugin import MigrationController

from deschedbuild import node

JSON = dict[str, Any]
T0 = 1_714_521_600.0  # 2024-05-01T00:00:00Z


def owned(name: str, node_name: str, owner_uid: str = "rs-1", *, kind: str = "ReplicaSet",
          api_version: str = "apps/v1", namespace: str = "default", ready: bool = True,
          scheduler: str = "koord-scheduler", annotations: dict[str, str] | None = None, **spec: Any) -> JSON:
    """A Running pod controlled by `kind` (uid `owner_uid`, name `owner_uid`), Ready unless told."""
    meta: JSON = {"name": name, "namespace": namespace, "uid": f"uid-{name}", "annotations": annotations or {},
                  "creationTimestamp": "2024-04-30T00:00:00Z"}
    if kind:
        meta["ownerReferences"] = [{"apiVersion": api_version, "kind": kind, "name": owner_uid, "uid": owner_uid,
                                    "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"nodeName": node_name, "schedulerName": scheduler,
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}], **spec},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def workload(kind: str, uid: str, replicas: int | None, *, api_version: str = "apps/v1", namespace: str = "default",
             owner: JSON | None = None, labels: dict[str, str] | None = None, selector: JSON | None = None) -> JSON:
    meta: JSON = {"name": uid, "namespace": namespace, "uid": uid, "labels": labels or {}}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    spec: JSON = {} if replicas is None else {"replicas": replicas}
    if selector is not None:
        spec["selector"] = selector
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, "spec": spec}


def placed(node_name: str) -> JSON:
    """A Reservation's status once a scheduler placed it on the node (upstream SetReservationAvailable)."""
    return {"phase": "Available", "nodeName": node_name, "currentOwners": [],
            "conditions": [{"type": "Scheduled", "status": "True", "reason": "Scheduled"},
                           {"type": "Ready", "status": "True", "reason": "Available"}]}


def pmj(name: str, pod: JSON, phase: str = "", *, passed: bool = False, created: str = "2024-04-30T00:00:00Z",
        annotations: dict[str, str] | None = None) -> JSON:
    meta = pod["metadata"]
    ann = dict(annotations or {})
    if passed:
        ann["descheduler.koordinator.sh/passed-arbitration"] = "true"
    obj: JSON = {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "PodMigrationJob",
                 "metadata": {"name": name, "uid": f"uid-{name}", "creationTimestamp": created, "annotations": ann},
                 "spec": {"podRef": {"namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]}}}
    if phase:
        obj["status"] = {"phase": phase}
    return obj


class FakeHandle:
    """interfaces.Handle over a fixed snapshot."""

    def __init__(self, snap: Snapshot) -> None:
        self.snapshot = snap
        self.limiter = Limiter(None, None, None)
        self.kube: Any = None  # a simulation's
        self.feature_gates = FeatureGates()

    def evictor(self) -> Any:
        raise AssertionError("the MigrationController does not evict through the framework")


def controller(objects: list[JSON], args: JSON | None = None, now: float = T0,
               nodes: tuple[str, ...] = ("n1", "n2")) -> tuple[MigrationController, FakeHandle]:
    """A MigrationController over `objects` (plus nodes n1, n2 unless given)."""
    a: MigrationControllerArgs = decode_migration_args(args or {}, "args")
    handle = FakeHandle(snapshot([*(node(n, 8000, 16 * 1024**3, 110) for n in nodes), *objects], now))
    return MigrationController(a, handle), handle


def evict(mc: MigrationController, pod: JSON) -> bool:
    return mc.evict(pod, EvictOptions("LowNodeLoad", "node is overutilized"))


def checks(objects: list[JSON], args: JSON | None = None, passed: set[str] | None = None,
           now: float = T0) -> MigrationFilter:
    """The filter alone over `objects` (plus nodes n1, n2), its jobs those among them as they stand (no
    arbitration); `passed`: the UIDs of jobs that passed arbitration."""
    snap = snapshot([*(node(n, 8000, 16 * 1024**3, 110) for n in ("n1", "n2")), *objects], now)
    jobs = MigratingJobs([decode_job(j) for j in snap.of_kind("PodMigrationJob")], passed or set())
    return MigrationFilter(decode_migration_args(args or {}, "args"), lambda: snap, lambda: jobs)
