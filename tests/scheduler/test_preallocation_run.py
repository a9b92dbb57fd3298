"""`run` pre-allocates as upstream's PreBindReservation: the running pod taken over is patched (under its uid)
before the Reservation is marked Available; a failed patch fails the Reservation's binding, which stays Pending
with the reason and the pod is not its owner."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import kmock
import pytest

from apis.client.kubeapi import KubeClient, KubeConfig
from scheduler.cli import profile
from scheduler.cluster import Cluster
from scheduler.framework import Scheduler
from scheduler.runner import SecondaryScheduler

from kubedouble import emulate_binding

NAME = "koord-py"
RESV = "scheduling.koordinator.sh/v1alpha1/reservations"
ALLOCATED = "scheduling.koordinator.sh/reservation-allocated"


@pytest.fixture
def km(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    for res in ("v1/nodes", "v1/pods", RESV):
        kmock.resources[res] = {}
    kmock.objects["v1/nodes", None, "n1"] = {"apiVersion": "v1", "metadata": {"name": "n1"}, "status": {
        "allocatable": {"cpu": "8", "memory": "64Gi", "pods": "110"}}}
    emulate_binding(kmock)
    kmock.objects[RESV, None, "r1"] = {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
        "metadata": {"name": "r1", "uid": "uid-r1", "labels": {"scheduling.koordinator.sh/pre-allocation-required":
                                                              "true"}},
        "spec": {"template": {"spec": {"schedulerName": NAME, "containers": [
            {"name": "c", "resources": {"requests": {"cpu": "6"}}}]}}, "allocateOnce": False,
            "preAllocation": True, "allocatePolicy": "Restricted",
            "owners": [{"labelSelector": {"matchLabels": {"app": "a"}}}]}}
    kmock.objects["v1/pods", "default", "running"] = {
        "apiVersion": "v1", "metadata": {"name": "running", "namespace": "default", "uid": "uid-running",
                                         "labels": {"app": "a"}},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {"requests": {"cpu": "6"}}}]},
        "status": {"phase": "Running"}}
    return kmock


def runner(km: kmock.KubernetesEmulator) -> SecondaryScheduler:
    def make(cluster: Cluster) -> Scheduler:
        return Scheduler(cluster, profile(None))

    return SecondaryScheduler(KubeClient(KubeConfig(server=str(km.url))), NAME, make)


def writes(km: kmock.KubernetesEmulator) -> list[tuple[str, dict[str, Any]]]:
    return [(r.url.path, json.loads(r.body)) for r in km if r.method.value == "PATCH"]


async def test_pod_is_patched_under_its_uid_before_the_reservation_is_available(km: kmock.KubernetesEmulator) -> None:
    await asyncio.to_thread(runner(km).run_once)
    w = writes(km)
    pod_at = next(i for i, (path, _) in enumerate(w) if path.endswith("/pods/running"))
    status_at = next(i for i, (path, _) in enumerate(w) if path.endswith("/reservations/r1/status"))
    assert pod_at < status_at
    patch = w[pod_at][1]["metadata"]
    assert patch["uid"] == "uid-running"  # the API server refuses it if the pod was re-created under the name
    assert json.loads(patch["annotations"][ALLOCATED]) == {"name": "r1", "uid": "uid-r1"}
    status = w[status_at][1]["status"]
    assert status["phase"] == "Available" and status["allocated"] == {"cpu": "6"}
    assert status["currentOwners"] == [{"namespace": "default", "name": "running", "uid": "uid-running"}]


async def test_failed_pod_patch_leaves_the_reservation_pending(km: kmock.KubernetesEmulator) -> None:
    km["patch", kmock.resource("v1/pods"), kmock.name("running")] << 409 << {
        "kind": "Status", "code": 409, "message": "the object has been modified"}
    sched = runner(km)
    await asyncio.to_thread(sched.run_once)
    statuses = [body["status"] for path, body in writes(km) if path.endswith("/reservations/r1/status")]
    assert statuses and all(s.get("phase") != "Available" and not s.get("nodeName") for s in statuses)
    assert "pre-allocating default/running" in json.dumps(statuses[-1])
    assert not statuses[-1].get("currentOwners")
    # the cycle's pod does not name the reservation: it is not counted as an owner of a Pending one
    cached = sched.scheduler.cluster.nodes["n1"].pods["default/running"]
    assert ALLOCATED not in (cached["metadata"].get("annotations") or {})
    assert "default/reservation/r1" not in sched.scheduler.cluster.nodes["n1"].pods
