"""`koord-sched run` against kmock: a pending Reservation is placed and its status written; an owner is bound with
`reservation-allocated` patched before its Binding, and the reservation's status follows."""

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
    return kmock


def owner() -> dict[str, Any]:
    return {"apiVersion": "v1", "metadata": {"name": "owner", "namespace": "default", "uid": "uid-owner",
                                             "labels": {"app": "a"}},
            "spec": {"schedulerName": NAME, "containers": [{"name": "c", "resources": {"requests": {"cpu": "4"}}}]},
            "status": {"phase": "Pending"}}


async def test_reservation_placed_then_owner_served(km: kmock.KubernetesEmulator, validate_crd: Any) -> None:
    r = {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
         "metadata": {"name": "r1", "uid": "uid-r1"},
         "spec": {"template": {"spec": {"schedulerName": NAME, "containers": [
             {"name": "c", "resources": {"requests": {"cpu": "6"}}}]}},
             "owners": [{"labelSelector": {"matchLabels": {"app": "a"}}}]}}
    km.objects[RESV, None, "r1"] = r

    def make(cluster: Cluster) -> Scheduler:
        return Scheduler(cluster, profile(None))

    runner = SecondaryScheduler(KubeClient(KubeConfig(server=str(km.url))), NAME, make)
    await asyncio.to_thread(runner.run_once)
    status_patches = [json.loads(q.body) for q in km if q.method.value == "PATCH" and q.url.path.endswith(
        "/reservations/r1/status")]
    assert status_patches and status_patches[-1]["status"]["phase"] == "Available"
    assert status_patches[-1]["status"]["nodeName"] == "n1"
    assert status_patches[-1]["status"]["allocatable"] == {"cpu": "6"}
    assert {(c["type"], c["status"], c["reason"]) for c in status_patches[-1]["status"]["conditions"]} == \
        {("Scheduled", "True", "Scheduled"), ("Ready", "True", "Available")}
    validate_crd("scheduling.koordinator.sh_reservations.yaml", {**r, "status": status_patches[-1]["status"]})
    # the next cycle lists it Available (as the API now holds it) and serves the owner
    km.objects[RESV, None, "r1"] = {**r, "status": status_patches[-1]["status"]}
    km.objects["v1/pods", "default", "owner"] = owner()
    placements = await asyncio.to_thread(runner.run_once)
    assert [(p.pod, p.node) for p in placements] == [("default/owner", "n1")]
    pod_patches = [json.loads(q.body) for q in km if q.method.value == "PATCH" and q.url.path.endswith(
        "/pods/owner")]
    assert json.loads(pod_patches[0]["metadata"]["annotations"][ALLOCATED]) == {"name": "r1", "uid": "uid-r1"}
    last = [json.loads(q.body) for q in km if q.method.value == "PATCH" and q.url.path.endswith(
        "/reservations/r1/status")][-1]["status"]
    assert last["phase"] == "Succeeded" and last["allocated"] == {"cpu": "4"}
    assert last["currentOwners"] == [{"namespace": "default", "name": "owner", "uid": "uid-owner"}]
    validate_crd("scheduling.koordinator.sh_reservations.yaml", {**r, "status": last})


def test_conditions_as_upstream_writes_them(validate_crd: Any) -> None:
    """pkg/util/reservation: Available is Scheduled=True/Scheduled and Ready=True/Available; Succeeded turns Ready
    False/Succeeded and keeps Scheduled; expiry turns Ready False/Expired; an unschedulable pending one has
    Scheduled=False/Unschedulable with the reason. lastProbeTime is the write's time; lastTransitionTime stays
    while the condition's status does."""
    from scheduler.reservation.model import AVAILABLE, PENDING, SUCCEEDED, parse

    obj = {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
           "metadata": {"name": "r1", "uid": "uid-r1"},
           "spec": {"template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}},
                    "owners": [{"object": {"name": "p"}}]},
           "status": {"phase": AVAILABLE, "nodeName": "n1", "conditions": [
               {"type": "Ready", "status": "True", "reason": "Available",
                "lastTransitionTime": "2024-05-01T00:00:00Z", "lastProbeTime": "2024-05-01T00:00:00Z"}]}}

    def conds(status: dict[str, Any]) -> dict[str, tuple[str, str, str, str]]:
        return {c["type"]: (c["status"], c["reason"], c["lastTransitionTime"], c["lastProbeTime"])
                for c in status["conditions"]}

    r = parse(obj, now=1714521600.0)
    st = r.status(now=1714525200.0)  # an hour later, still Ready=True; Scheduled=True is added
    assert conds(st) == {"Ready": ("True", "Available", "2024-05-01T00:00:00Z", "2024-05-01T01:00:00Z"),
                         "Scheduled": ("True", "Scheduled", "2024-05-01T01:00:00Z", "2024-05-01T01:00:00Z")}
    validate_crd("scheduling.koordinator.sh_reservations.yaml", {**obj, "status": st})
    r.obj = {**obj, "status": st}
    r.phase, r.reason = SUCCEEDED, ""
    st = r.status(now=1714528800.0)
    assert conds(st) == {"Ready": ("False", "Succeeded", "2024-05-01T02:00:00Z", "2024-05-01T02:00:00Z"),
                         "Scheduled": ("True", "Scheduled", "2024-05-01T01:00:00Z", "2024-05-01T01:00:00Z")}
    r.phase, r.reason = "Failed", "reservation expired"
    failed = r.status(now=1714528800.0)
    (ready,) = [c for c in failed["conditions"] if c["type"] == "Ready"]
    assert (ready["status"], ready["reason"], ready["message"]) == ("False", "Expired", "reservation expired")
    pending = parse({**obj, "status": {}}, now=1714521600.0)
    assert "conditions" not in pending.status(now=1714521600.0)  # not tried yet: nothing to say
    pending.phase, pending.reason = PENDING, "0/3 nodes are available"
    (sched,) = pending.status(now=1714521600.0)["conditions"]
    assert (sched["type"], sched["status"], sched["reason"], sched["message"]) == \
        ("Scheduled", "False", "Unschedulable", "0/3 nodes are available")
    validate_crd("scheduling.koordinator.sh_reservations.yaml", {**obj, "status": pending.status(now=0.0)})


async def test_a_malformed_reservation_is_marked_failed_once(km: kmock.KubernetesEmulator) -> None:
    """A Reservation that cannot serve anyone (no owners) is Failed with the reason once; later cycles, which see
    it Failed, do not patch it again."""
    km.objects[RESV, None, "r-bad"] = {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
        "metadata": {"name": "r-bad", "uid": "uid-r-bad"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}}}
    runner = SecondaryScheduler(KubeClient(KubeConfig(server=str(km.url))), NAME,
                                lambda c: Scheduler(c, profile(None)))

    def patches() -> list[dict[str, Any]]:
        return [json.loads(q.body) for q in km if q.method.value == "PATCH" and q.url.path.endswith(
            "/reservations/r-bad/status")]

    await asyncio.to_thread(runner.run_once)
    (first,) = patches()
    assert first["status"]["phase"] == "Failed"
    assert km.objects[RESV, None, "r-bad"]["status"]["phase"] == "Failed"
    for _ in range(3):
        await asyncio.to_thread(runner.run_once)
    assert len(patches()) == 1


async def test_pre_allocated_pod_is_patched_to_name_its_reservation(km: kmock.KubernetesEmulator) -> None:
    """spec.preAllocation: the running owner taken over gets `reservation-allocated` (upstream PreBindReservation),
    so the next cycle still counts it as the reservation's."""
    r = {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
         "metadata": {"name": "r1", "uid": "uid-r1"},
         "spec": {"template": {"spec": {"schedulerName": NAME, "containers": [
             {"name": "c", "resources": {"requests": {"cpu": "6"}}}]}}, "allocateOnce": False,
             "preAllocation": True, "allocatePolicy": "Restricted",
             "owners": [{"labelSelector": {"matchLabels": {"app": "a"}}}]}}
    km.objects[RESV, None, "r1"] = r
    running = owner()
    running["spec"]["nodeName"] = "n1"
    running["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "6"
    running["status"]["phase"] = "Running"
    km.objects["v1/pods", "default", "owner"] = running

    def make(cluster: Cluster) -> Scheduler:
        return Scheduler(cluster, profile(None))

    runner = SecondaryScheduler(KubeClient(KubeConfig(server=str(km.url))), NAME, make)
    await asyncio.to_thread(runner.run_once)
    status = [json.loads(q.body) for q in km if q.method.value == "PATCH" and q.url.path.endswith(
        "/reservations/r1/status")][-1]["status"]
    assert status["phase"] == "Available" and status["nodeName"] == "n1" and status["allocated"] == {"cpu": "6"}
    [patch] = [json.loads(q.body) for q in km if q.method.value == "PATCH" and q.url.path.endswith("/pods/owner")]
    assert json.loads(patch["metadata"]["annotations"][ALLOCATED]) == {"name": "r1", "uid": "uid-r1"}
