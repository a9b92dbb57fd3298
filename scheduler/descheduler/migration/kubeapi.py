"""The reconciler's MigrationAPI over the Kubernetes API, and one pass over every PodMigrationJob.

Upstream: controllers/migration/controller.go (Status().Update after Update), evictor/* (the Eviction API with the
job's deleteOptions, DELETE, the soft-eviction annotation), the event recorder (action `Migrating`). Events on a
cluster-scoped job go to namespace `default`, as client-go's recorder does.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from collections.abc import Callable, Mapping

from apis.client.kubeapi import KubeClient
from apis.core.errors import ApiError, InvalidInput, KoordletError, NotFound
from apis.core.metatime import micro_time
from apis.core.objects import JSON, as_object
from apis.extension.descheduling import ANNOTATION_SOFT_EVICTION
from apis.scheduling import migration as m
from scheduler.descheduler.config.migration_args import POLICY_DELETE, POLICY_SOFT_EVICTION
from scheduler.descheduler.migration.reconcile import Outcome, Reconciler, scavengeable

log = logging.getLogger("koord-descheduler.migration")
GROUP_PATH = "/apis/scheduling.koordinator.sh/v1alpha1"
JOBS = f"{GROUP_PATH}/{m.PLURAL}"
RESERVATIONS = f"{GROUP_PATH}/reservations"
EVENTS = "/apis/events.k8s.io/v1/namespaces/{namespace}/events"
ACTION = "Migrating"
CONTROLLER = "koord-descheduler"


def pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}"


class KubeMigrationAPI:
    """Implements reconcile.MigrationAPI."""

    def __init__(self, client: KubeClient, clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.clock = clock
        self.instance = f"{CONTROLLER}-{socket.gethostname()}"

    def get_pod(self, namespace: str, name: str) -> JSON | None:
        try:
            return self.client.get(pod_path(namespace, name))
        except NotFound:
            return None

    def get_reservation(self, name: str) -> JSON | None:
        try:
            return self.client.get(f"{RESERVATIONS}/{name}")
        except NotFound:
            return None

    def create_reservation(self, obj: JSON) -> JSON:
        try:
            return self.client.post(RESERVATIONS, obj)
        except ApiError as e:
            if e.status != 409:
                raise
            existing = self.get_reservation(str(as_object(obj.get("metadata")).get("name") or ""))
            if existing is None:
                raise
            return existing

    def update_reservation(self, obj: JSON) -> None:
        self.client.put(f"{RESERVATIONS}/{as_object(obj.get('metadata')).get('name')}", obj)

    def delete_reservation(self, name: str) -> None:
        with contextlib.suppress(NotFound):
            self.client.request("DELETE", f"{RESERVATIONS}/{name}")

    def evict_pod(self, pod: JSON, policy: str, delete_options: Mapping[str, object] | None,
                  soft_eviction: str) -> None:
        meta = as_object(pod.get("metadata"))
        path = pod_path(str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        if policy == POLICY_SOFT_EVICTION:
            self.client.patch(path, {"metadata": {"annotations": {ANNOTATION_SOFT_EVICTION: soft_eviction}}})
        elif policy == POLICY_DELETE:
            self.client.request("DELETE", path, body=dict(delete_options) if delete_options else None)
        else:
            body: JSON = {"apiVersion": "policy/v1", "kind": "Eviction",
                          "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")}}
            if delete_options:
                body["deleteOptions"] = dict(delete_options)
            self.client.post(f"{path}/eviction", body)

    def update_job(self, obj: JSON) -> None:
        """Update, then the status subresource (the main resource ignores status), keeping resourceVersion."""
        name = str(as_object(obj.get("metadata")).get("name") or "")
        status = obj.get("status")
        stored = self.client.put(f"{JOBS}/{name}", obj)
        obj.setdefault("metadata", {})["resourceVersion"] = as_object(stored.get("metadata")).get("resourceVersion")
        if status is not None:
            stored = self.client.put(f"{JOBS}/{name}/status", {**obj, "status": status})
            obj["metadata"]["resourceVersion"] = as_object(stored.get("metadata")).get("resourceVersion")

    def event(self, obj: JSON, type_: str, reason: str, message: str) -> None:
        """An Event regarding a job (in `default`) or a pod (in its namespace)."""
        meta = as_object(obj.get("metadata"))
        name, now = str(meta.get("name") or ""), self.clock()
        namespace = str(meta.get("namespace") or "")
        regarding: JSON = {"apiVersion": obj.get("apiVersion") or ("v1" if namespace else m.API_VERSION),
                           "kind": obj.get("kind") or ("Pod" if namespace else m.KIND), "name": name,
                           "uid": str(meta.get("uid") or "")}
        if namespace:
            regarding["namespace"] = namespace
        event = {"apiVersion": "events.k8s.io/v1", "kind": "Event",
                 "metadata": {"name": f"{name}.{int(now * 1e9):x}", "namespace": namespace or "default"},
                 "eventTime": micro_time(now), "reportingController": CONTROLLER,
                 "reportingInstance": self.instance, "action": ACTION, "reason": reason, "type": type_,
                 "regarding": regarding, "note": message[:1024]}
        try:
            self.client.post(EVENTS.format(namespace=namespace or "default"), event)
        except KoordletError as e:
            log.debug("event %s on %s %s: %s", reason, regarding["kind"], name, e)


def reconcile_all(client: KubeClient, reconciler: Reconciler) -> dict[str, Outcome]:
    """One pass: every PodMigrationJob reconciled once (finished and paused ones are left alone); by job name."""
    out = {}
    for obj in client.list(JOBS).get("items") or []:
        if isinstance(obj, dict):
            obj.setdefault("apiVersion", m.API_VERSION)
            obj.setdefault("kind", m.KIND)
            out[str(as_object(obj.get("metadata")).get("name") or "")] = reconciler.reconcile(obj)
    return out





def scavenge(client: KubeClient, now: float) -> list[str]:
    """The scavenger's pass (upstream runs it every minute): every job past its age (reconcile.scavengeable) is
    deleted after its Reservation. A Reservation that cannot be deleted for another reason than NotFound ends the
    pass, as upstream's. The names of the jobs deleted."""
    deleted = []
    for obj in client.list(JOBS).get("items") or []:
        if not isinstance(obj, dict):
            continue
        try:
            job = m.decode_job(obj)
        except InvalidInput:
            continue
        if not scavengeable(job, now):
            continue
        if job.reservation_name:
            try:
                client.request("DELETE", f"{RESERVATIONS}/{job.reservation_name}")
            except NotFound:
                pass
            except ApiError as e:
                log.warning("scavenger: deleting Reservation %s of job %s: %s", job.reservation_name, job.name, e)
                break
        with contextlib.suppress(NotFound):
            client.request("DELETE", f"{JOBS}/{job.name}")
        deleted.append(job.name)
    return deleted
