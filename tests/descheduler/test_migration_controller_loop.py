"""The MigrationController's loop in `run` (migration.controller) against the API double (kmock), one tick at a time:
pending jobs are arbitrated before anything else happens to them (upstream arbitrator.go: a non-retryable refusal
fails the job ForbiddenMigratePod with a Warning Event, a retryable one leaves it waiting, a pass is an Update with
passed-arbitration and the job is then reconciled); a job is reconciled again when it changes or its requeue is
due, not at every tick."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import kmock
import pytest
from test_migration_kube import emulate_status

from apis.core.metatime import rfc3339
from apis.extension.descheduling import ANNOTATION_EVICTION_COST, ANNOTATION_PASSED_ARBITRATION
from scheduler.descheduler.config.decode import parse_config
from scheduler.descheduler.migration.controller import ControllerLoop, Requeues
from scheduler.descheduler.migration.plugin import MigrationController
from scheduler.descheduler.migration.reconcile import Outcome
from scheduler.descheduler.server import InCluster

from deschedbuild import config, node
from deschedkube import RESOURCES, client
from kubedouble import emulate_eviction, emulate_put
from migbuild import owned, pmj

JSON = dict[str, Any]
JOBS = "scheduling.koordinator.sh/v1alpha1/podmigrationjobs"
SOURCES = (*RESOURCES, JOBS, "events.k8s.io/v1/events")


@pytest.fixture
async def ticking(kmock: kmock.KubernetesEmulator) -> tuple[ControllerLoop, list[int]]:
    """The MigrationController's loop, and how many times it copied the live view. Three pods of one ReplicaSet
    (10 replicas) on n1, the third never to be evicted (eviction cost MaxInt32); a Pending EvictDirectly job for
    each; maxMigratingGlobally 1."""
    for res in SOURCES:
        kmock.resources[res] = {}
    emulate_status(kmock, JOBS)
    emulate_put(kmock, JOBS, status_subresource=True)
    emulate_eviction(kmock)
    kmock.objects["v1/nodes", None, "n1"] = node("n1", 4000, 16 << 30, 110)
    kmock.objects["apps/v1/replicasets", "default", "rs-1"] = {
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "rs-1", "namespace": "default",
                                                                   "uid": "rs-1"}, "spec": {"replicas": 10}}
    pods = [owned("a", "n1"), owned("b", "n1"),
            owned("never", "n1", annotations={ANNOTATION_EVICTION_COST: str(2**31 - 1)})]
    for p in pods:
        kmock.objects["v1/pods", "default", p["metadata"]["name"]] = p
        job = pmj(f"job-{p['metadata']['name']}", p, "Pending", created=rfc3339(time.time()))  # the scavenger's
        job["spec"]["mode"] = "EvictDirectly"
        job["metadata"]["resourceVersion"] = "1"
        kmock.objects[JOBS, None, job["metadata"]["name"]] = job
    cfg = config({"cpu": 30}, {"cpu": 50})
    prof = cfg["profiles"][0]
    prof["plugins"]["evict"]["enabled"] = prof["plugins"]["filter"]["enabled"] = [{"name": "MigrationController"}]
    prof["pluginConfig"].append({"name": "MigrationController", "args": {"maxMigratingGlobally": 1}})
    r = InCluster(client(kmock), parse_config(cfg), watch=False)
    await asyncio.to_thread(r.cache.relist)  # the view the arbitration reads
    (plugin,) = r.controllers()
    assert isinstance(plugin, MigrationController)
    made = plugin.controller_loop()
    assert made is not None
    copies = [0]
    view = r.kube.objects

    def counted() -> list[JSON]:
        copies[0] += 1
        return view()

    r.kube.objects = counted
    return made, copies


def job(km: kmock.KubernetesEmulator, name: str) -> JSON:
    raw: JSON = km.objects[JOBS, None, name].raw
    return raw


def evicted(km: kmock.KubernetesEmulator) -> list[str]:
    return sorted(r.url.path.split("/")[-2] for r in km if r.method.value == "POST"
                  and r.url.path.endswith("/eviction"))


async def test_one_tick_arbitrates_then_reconciles_what_passed(
        kmock: kmock.KubernetesEmulator, ticking: tuple[ControllerLoop, list[int]]) -> None:
    loop, copies = ticking
    await asyncio.to_thread(loop.tick)
    assert copies == [1]  # the live view, copied for the arbitration
    never = job(kmock, "job-never")["status"]
    assert (never["phase"], never["reason"], never["message"]) == (
        "Failed", "ForbiddenMigratePod",
        'Pod "default/never" is forbidden to migrate because it does not meet the requirements')
    events = [r.data for r in kmock if r.method.value == "POST" and r.url.path.endswith("/events")]
    forbidden = [e for e in events if e["reason"] == "ForbiddenMigratePod"]
    assert [(e["type"], e["action"], e["regarding"]["name"], e["note"]) for e in forbidden] == [
        ("Warning", "Migrating", "job-never", never["message"])]
    # maxMigratingGlobally 1: one of a and b passes and is carried out at once; the other waits, untouched
    passed = [n for n in ("job-a", "job-b")
              if job(kmock, n)["metadata"]["annotations"].get(ANNOTATION_PASSED_ARBITRATION) == "true"]
    assert len(passed) == 1
    (waiting,) = {"job-a", "job-b"} - set(passed)
    assert job(kmock, passed[0])["status"]["phase"] == "Running" and evicted(kmock) == [passed[0][4:]]
    assert job(kmock, waiting)["status"] == {"phase": "Pending"}
    assert ANNOTATION_PASSED_ARBITRATION not in job(kmock, waiting)["metadata"]["annotations"]
    assert loop.waiting == 1

    # the next tick lists again (a job waits) and arbitrates it again over the same view (not copied again): it
    # still waits; nothing is due, so no second eviction and nothing written
    writes = sum(1 for r in kmock if r.method.value != "GET")
    await asyncio.to_thread(loop.tick)
    assert evicted(kmock) == [passed[0][4:]] and job(kmock, waiting)["status"] == {"phase": "Pending"}
    assert sum(1 for r in kmock if r.method.value != "GET") == writes and copies == [1]


async def test_a_deleted_job_takes_its_reservation_with_it(kmock: kmock.KubernetesEmulator,
                                                          ticking: tuple[ControllerLoop, list[int]]) -> None:
    loop, _ = ticking
    kmock.resources["scheduling.koordinator.sh/v1alpha1/reservations"] = {}
    kmock.objects["scheduling.koordinator.sh/v1alpha1/reservations", None, "r-held"] = {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation", "metadata": {"name": "r-held"}}
    held = pmj("job-held", owned("a", "n1"), "Running", passed=True, created=rfc3339(time.time()))
    held["spec"].update({"paused": True, "reservationOptions": {"reservationRef": {"name": "r-held"}}})
    kmock.objects[JOBS, None, "job-held"] = held
    await asyncio.to_thread(loop.tick)
    kmock.objects[JOBS, None, "job-held"].delete()  # by a person
    loop.kick.set()
    await asyncio.to_thread(loop.tick)
    deletes = [r.url.path for r in kmock if r.method.value == "DELETE"]
    assert deletes == ["/apis/scheduling.koordinator.sh/v1alpha1/reservations/r-held"]
    assert kmock.objects["scheduling.koordinator.sh/v1alpha1/reservations", None, "r-held"].deleted


RESERVATIONS = "scheduling.koordinator.sh/v1alpha1/reservations"


def reservation(km: kmock.KubernetesEmulator, name: str) -> None:
    km.resources.setdefault(RESERVATIONS, {})
    km.objects[RESERVATIONS, None, name] = {"apiVersion": "scheduling.koordinator.sh/v1alpha1",
                                            "kind": "Reservation", "metadata": {"name": name}}


def reservation_deletes(km: kmock.KubernetesEmulator) -> list[str]:
    return [r.url.path.rsplit("/", 1)[-1] for r in km if r.method.value == "DELETE" and "/reservations/" in r.url.path]


async def test_a_job_heard_deleted_takes_its_reservation_once(kmock: kmock.KubernetesEmulator,
                                                             ticking: tuple[ControllerLoop, list[int]]) -> None:
    """The watch's DELETED event names the Reservation of the job's last state, even one no list of this loop saw
    (set between two lists); the list that no longer shows the job does not delete it a second time."""
    loop, _ = ticking
    reservation(kmock, "r-listed")
    reservation(kmock, "r-unlisted")
    listed = pmj("job-listed", owned("a", "n1"), "Running", passed=True, created=rfc3339(time.time()))
    listed["spec"].update({"paused": True, "reservationOptions": {"reservationRef": {"name": "r-listed"}}})
    kmock.objects[JOBS, None, "job-listed"] = listed
    await asyncio.to_thread(loop.tick)
    unlisted = pmj("job-unlisted", owned("b", "n1"), "Running", passed=True)
    unlisted["spec"]["reservationOptions"] = {"reservationRef": {"name": "r-unlisted"}}
    last = job(kmock, "job-listed")
    kmock.objects[JOBS, None, "job-listed"].delete()
    loop.kick.set()
    await asyncio.to_thread(loop.tick)  # the list no longer shows it: its Reservation goes
    assert reservation_deletes(kmock) == ["r-listed"]
    loop.heard("DELETED", "PodMigrationJob", last)  # its event, late: not a second time
    loop.heard("DELETED", "PodMigrationJob", unlisted)
    loop.heard("DELETED", "Pod", owned("c", "n1"))  # another kind: nothing
    assert loop.kick.is_set()
    await asyncio.to_thread(loop.tick)
    assert reservation_deletes(kmock) == ["r-listed", "r-unlisted"]


async def test_a_job_deleted_before_the_loop_started_leaves_its_reservation(
        kmock: kmock.KubernetesEmulator, ticking: tuple[ControllerLoop, list[int]]) -> None:
    """As upstream: the Reservation carries no owner reference to its job, and a controller starting after the
    deletion never hears of it (its informer lists what exists); the Reservation lives out its ttl (the job's)."""
    loop, _ = ticking
    reservation(kmock, "r-orphan")
    await asyncio.to_thread(loop.tick)
    loop.kick.set()
    await asyncio.to_thread(loop.tick)
    assert reservation_deletes(kmock) == []
    assert not kmock.objects[RESERVATIONS, None, "r-orphan"].deleted


async def test_the_live_view_tells_the_loop(kmock: kmock.KubernetesEmulator) -> None:
    """`run` wires the loop to the cache's watch events (Handle.kube.listen): a job's change kicks a list, a job's
    deletion reaches `heard` with the job's last state."""
    for res in SOURCES:
        kmock.resources[res] = {}
    cfg = config({"cpu": 30}, {"cpu": 50})
    prof = cfg["profiles"][0]
    prof["plugins"]["evict"]["enabled"] = prof["plugins"]["filter"]["enabled"] = [{"name": "MigrationController"}]
    r = InCluster(client(kmock), parse_config(cfg), watch=False)
    (plugin,) = r.controllers()
    assert isinstance(plugin, MigrationController)
    loop = plugin.controller_loop()
    assert loop is not None and loop.heard in r.cache.listeners
    source = next(s for s in r.cache.sources if s.kind == "PodMigrationJob")
    job = pmj("job-x", owned("a", "n1"), "Running", passed=True)
    job["spec"]["reservationOptions"] = {"reservationRef": {"name": "r-x"}}
    r.cache.apply(source, "ADDED", job)
    assert loop.kick.is_set() and loop.deleted == []
    r.cache.apply(source, "DELETED", job)
    assert loop.deleted == [("job-x", "r-x")]


def test_requeues_follow_the_outcome_and_the_version() -> None:
    q = Requeues()
    assert q.is_due("j", "1", 0.0)  # never reconciled
    q.done("j", "2", Outcome(3.0), 10.0)
    assert not q.is_due("j", "2", 12.9) and q.is_due("j", "2", 13.0) and q.is_due("j", "3", 11.0)
    q.done("j", "2", Outcome(), 20.0)  # done: only a change brings it back
    assert q.due["j"] == math.inf and not q.any_due(1e9) and q.is_due("j", "4", 21.0)
    q.done("j", "2", Outcome(None, "conflict"), 30.0)  # an error without a requeue: the backoff
    assert q.is_due("j", "2", 31.0) and not q.is_due("j", "2", 30.5)
    q.keep(set())
    assert q.due == {} and q.version == {}
