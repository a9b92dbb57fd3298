"""PodMigrationJobs reconciled against the Kubernetes API double (kmock): EvictDirectly through the Eviction API
(a PodDisruptionBudget holding it back, then letting it go), ReservationFirst creating a Reservation, and a
restart mid-migration — a fresh reconciler (new instance UUID) resumes the jobs where they stand: no second
Reservation, no second eviction, and the filter still refuses a new job for the pod."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import kmock
import pytest

from apis.client.kubeapi import KubeClient, KubeConfig
from apis.scheduling.migration import decode_job
from scheduler.descheduler.config.migration_args import decode_migration_args
from scheduler.descheduler.migration.jobs import MigratingJobs
from scheduler.descheduler.migration.kubeapi import KubeMigrationAPI, reconcile_all, scavenge
from scheduler.descheduler.migration.reconcile import REQUEUE, Outcome, Reconciler

from kubedouble import PDBS, emulate_eviction, emulate_put, status_failure
from migbuild import T0, owned, placed, pmj

JOBS = "scheduling.koordinator.sh/v1alpha1/podmigrationjobs"
RESERVATIONS = "scheduling.koordinator.sh/v1alpha1/reservations"
EVENTS = "events.k8s.io/v1/events"
JSON = dict[str, Any]


def emulate_status(km: kmock.KubernetesEmulator, resource: str) -> None:
    """PUT <resource>/<name>/status: only the status is taken, resourceVersion checked and bumped."""

    def put_status(request: kmock.Request) -> Any:
        obj = km.objects[resource, None, str(request.name)]
        current = obj.raw
        sent = (request.data or {}).get("metadata", {}).get("resourceVersion")
        have = current.get("metadata", {}).get("resourceVersion", "1")
        if sent is not None and sent != have:
            return kmock.Response(status=409, payload=status_failure(409, "the object has been modified"))
        updated = copy.deepcopy(current)
        updated["status"] = request.data.get("status")
        updated["metadata"]["resourceVersion"] = str(int(have) + 1)
        obj.history.append(updated)
        return kmock.Response(status=200, payload=updated)

    km["put", kmock.resource(resource), kmock.subresource("status")] << put_status


@pytest.fixture
def km(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    for res in ("v1/pods", PDBS, JOBS, RESERVATIONS, EVENTS):
        kmock.resources[res] = {}
    emulate_status(kmock, JOBS)
    emulate_put(kmock, JOBS, status_subresource=True)
    emulate_eviction(kmock)
    return kmock


def reconciler(km: kmock.KubernetesEmulator, clock: list[float]) -> tuple[Reconciler, KubeClient]:
    """A fresh reconciler (as after a start) and its client."""
    client = KubeClient(KubeConfig(server=str(km.url)))
    api = KubeMigrationAPI(client, clock=lambda: clock[0])
    return Reconciler(decode_migration_args({}, "args"), api, limited=lambda pod: False, evicted=lambda pod: None,
                      now=lambda: clock[0]), client


def add_job(km: kmock.KubernetesEmulator, name: str, pod: JSON, mode: str) -> None:
    job = pmj(name, pod, created="2024-05-01T00:00:00Z")
    job["spec"].update({"mode": mode, "ttl": "5m0s"})
    job["metadata"]["resourceVersion"] = "1"
    km.objects[JOBS, None, name] = job


def stored(km: kmock.KubernetesEmulator, resource: str, name: str, namespace: str | None = None) -> JSON:
    raw: JSON = km.objects[resource, namespace, name].raw
    return raw


def posts(km: kmock.KubernetesEmulator, suffix: str) -> list[str]:
    return [r.url.path for r in km if r.method.value == "POST" and r.url.path.endswith(suffix)]


async def test_evict_directly_honours_the_pdb(km: kmock.KubernetesEmulator) -> None:
    pod = owned("p", "n1")
    pod["metadata"]["labels"] = {"app": "a"}
    km.objects["v1/pods", "default", "p"] = pod
    km.objects[PDBS, "default", "keep"] = {"metadata": {"name": "keep", "namespace": "default"},
                                          "spec": {"selector": {"matchLabels": {"app": "a"}}},
                                          "status": {"disruptionsAllowed": 0}}
    add_job(km, "job", pod, "EvictDirectly")
    clock = [T0]
    r, client = reconciler(km, clock)
    out = await asyncio.to_thread(reconcile_all, client, r)
    assert out["job"].requeue == 1.0 and "disruption budget" in out["job"].error
    assert stored(km, JOBS, "job")["status"]["phase"] == "Running"
    assert stored(km, "v1/pods", "p", "default")["metadata"].get("deletionTimestamp") is None
    km.objects[PDBS, "default", "keep"].patch({"status": {"disruptionsAllowed": 1}})
    clock[0] += 1
    out = await asyncio.to_thread(reconcile_all, client, r)
    assert out["job"] == Outcome(REQUEUE)
    assert stored(km, "v1/pods", "p", "default")["metadata"]["deletionTimestamp"]
    assert stored(km, JOBS, "job")["status"]["reason"] == "Evicting"
    km.objects["v1/pods", "default", "p"].delete()  # the kubelet finishes it
    out = await asyncio.to_thread(reconcile_all, client, r)
    assert out["job"] == Outcome()
    assert stored(km, JOBS, "job")["status"]["phase"] == "Succeeded"
    events = [r.data for r in km if r.method.value == "POST" and r.url.path.endswith("/events")]
    on_pod = [e for e in events if e["regarding"]["kind"] == "Pod"]
    assert [e["reason"] for e in on_pod] == ["Descheduled"] and on_pod[0]["metadata"]["namespace"] == "default"
    on_job = {e["reason"] for e in events if e["regarding"]["kind"] == "PodMigrationJob"}
    assert {"Evicting", "EvictComplete", "Complete"} <= on_job


async def test_restart_resumes_instead_of_duplicating(km: kmock.KubernetesEmulator) -> None:
    pod = owned("p", "n1")
    km.objects["v1/pods", "default", "p"] = pod
    add_job(km, "job", pod, "ReservationFirst")
    clock = [T0]
    first = reconciler(km, clock)
    await asyncio.to_thread(reconcile_all, first[1], first[0])
    job = stored(km, JOBS, "job")
    assert job["spec"]["reservationOptions"]["reservationRef"]["name"] == "uid-job"
    assert len(posts(km, "/reservations")) == 1
    # koord-sched places the reservation; then the descheduler restarts
    km.objects[RESERVATIONS, None, "uid-job"].patch({"status": placed("n2")})
    second = reconciler(km, clock)
    clock[0] += 10
    out = await asyncio.to_thread(reconcile_all, second[1], second[0])
    assert out["job"] == Outcome(REQUEUE)
    assert len(posts(km, "/reservations")) == 1 and len(posts(km, "/eviction")) == 1
    job = stored(km, JOBS, "job")
    assert job["status"]["nodeName"] == "n2" and job["status"]["reason"] == "Evicting"
    # the filter of the restarted descheduler sees the job: no second job for the pod
    jobs = MigratingJobs([decode_job(copy.deepcopy(job))], set())
    assert jobs.has_job("uid-p", "default", "p")
    third = reconciler(km, clock)
    await asyncio.to_thread(reconcile_all, third[1], third[0])
    assert len(posts(km, "/eviction")) == 1  # still evicting: not evicted again


async def test_scavenger_deletes_old_jobs_after_their_reservations(km: kmock.KubernetesEmulator) -> None:
    """A 5m-ttl job is deleted 10m after its creation, with its Reservation; a younger one stays; a job without a
    ttl stays for 30m."""
    pod = owned("p", "n1")
    for name, created, ttl in (("old", "2024-05-01T00:00:00Z", "5m0s"), ("young", "2024-05-01T00:08:00Z", "5m0s"),
                               ("no-ttl", "2024-05-01T00:00:00Z", "")):
        job = pmj(name, pod, "Succeeded", created=created)
        if ttl:
            job["spec"]["ttl"] = ttl
        if name == "old":
            job["spec"]["reservationOptions"] = {"reservationRef": {"name": "r-old"}}
            km.objects[RESERVATIONS, None, "r-old"] = {"metadata": {"name": "r-old"}}
        km.objects[JOBS, None, name] = job
    client = KubeClient(KubeConfig(server=str(km.url)))
    assert await asyncio.to_thread(scavenge, client, T0 + 600) == ["old"]
    deletes = [r.url.path.rsplit("/", 2)[-2:] for r in km if r.method.value == "DELETE"]
    assert deletes == [["reservations", "r-old"], ["podmigrationjobs", "old"]]  # the reservation first
    assert await asyncio.to_thread(scavenge, client, T0 + 1800) == ["young", "no-ttl"]


async def test_a_reservation_that_cannot_be_deleted_ends_the_scavengers_pass(km: kmock.KubernetesEmulator) -> None:
    """[quirk, mirrored] controller.go doScavenge: a Reservation delete failing otherwise than NotFound breaks the
    loop, so that job and every later one wait for the next pass; a NotFound one does not."""
    pod = owned("p", "n1")
    for name, reservation in (("a-gone", "r-gone"), ("b-stuck", "r-stuck"), ("c-later", "")):
        job = pmj(name, pod, "Succeeded", created="2024-05-01T00:00:00Z")
        job["spec"]["ttl"] = "5m0s"
        if reservation:
            job["spec"]["reservationOptions"] = {"reservationRef": {"name": reservation}}
        km.objects[JOBS, None, name] = job
    km.objects[RESERVATIONS, None, "r-stuck"] = {"metadata": {"name": "r-stuck"}}

    def refuse(request: kmock.Request) -> Any:
        return kmock.Response(status=500, payload=status_failure(500, "etcd is sad"))

    km["delete", kmock.resource(RESERVATIONS), kmock.name("r-stuck")] << refuse
    client = KubeClient(KubeConfig(server=str(km.url)))
    assert await asyncio.to_thread(scavenge, client, T0 + 600) == ["a-gone"]  # r-gone: NotFound, job deleted
    assert not km.objects[JOBS, None, "c-later"].deleted and not km.objects[JOBS, None, "b-stuck"].deleted
