"""The extender honours Reservations (kmock as the API server): non-owners see reserved resources as used, owners
prefer their reservation's node, `reservation-allocated` is patched before the Binding, allocateOnce ends it."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator
from typing import Any

import kmock
import pytest

from apis.client.kubeapi import KubeClient, KubeConfig
from scheduler.cli import profile
from scheduler.cluster import Cluster
from scheduler.extender import ClusterSource, Extender
from scheduler.framework import Scheduler

from kubedouble import driver_client, emulate_binding

RESV = "scheduling.koordinator.sh/v1alpha1/reservations"
ALLOCATED = "scheduling.koordinator.sh/reservation-allocated"
CRD = "scheduling.koordinator.sh_reservations.yaml"


def _reservation(name: str, node: str, cpu: str, allocate_once: bool | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"template": {"spec": {"containers": [
        {"name": "c", "resources": {"requests": {"cpu": cpu}}}]}},
        "owners": [{"labelSelector": {"matchLabels": {"app": "a"}}}]}
    if allocate_once is not None:
        spec["allocateOnce"] = allocate_once
    return {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
            "metadata": {"name": name, "uid": f"uid-{name}"}, "spec": spec,
            "status": {"phase": "Available", "nodeName": node, "allocatable": {"cpu": cpu}}}


def _pod(name: str, cpu: str, owner: bool, node: str = "", annotations: dict[str, str] | None = None
         ) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}",
                         "labels": {"app": "a" if owner else "b"}, "annotations": dict(annotations or {})},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": "Running" if node else "Pending"}}


@pytest.fixture
def km(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    for res in ("v1/nodes", "v1/pods", RESV):
        kmock.resources[res] = {}
    for n in ("n1", "n2"):
        kmock.objects["v1/nodes", None, n] = {"apiVersion": "v1", "metadata": {"name": n}, "status": {
            "allocatable": {"cpu": "8", "memory": "64Gi", "pods": "110"}}}
    kmock.objects[RESV, None, "r1"] = _reservation("r1", "n1", "6")
    emulate_binding(kmock)
    return kmock


@pytest.fixture
def ext(km: kmock.KubernetesEmulator) -> Extender:
    def make(cluster: Cluster) -> Scheduler:
        return Scheduler(cluster, profile(None))

    return Extender(ClusterSource(KubeClient(KubeConfig(server=str(km.url)))), make)


def _fits(ext: Extender, pod: dict[str, Any]) -> list[str]:
    return list(ext.filter({"Pod": pod, "NodeNames": ["n1", "n2"]})["NodeNames"])


def _scores(ext: Extender, pod: dict[str, Any]) -> dict[str, int]:
    return {p["Host"]: p["Score"] for p in ext.prioritize({"Pod": pod, "NodeNames": ["n1", "n2"]})}


def _bind(ext: Extender, km: kmock.KubernetesEmulator, pod: dict[str, Any], node: str) -> dict[str, Any]:
    km.objects["v1/pods", "default", pod["metadata"]["name"]] = pod
    return ext.bind({"PodName": pod["metadata"]["name"], "PodNamespace": "default",
                     "PodUID": pod["metadata"]["uid"], "Node": node})


def _writes(km: kmock.KubernetesEmulator) -> list[tuple[str, str, Any]]:
    return [(q.method.value, q.url.path, json.loads(q.body) if q.body else None)
            for q in km if q.method.value in ("PATCH", "POST")]


async def test_owner_served_allocate_once(km: kmock.KubernetesEmulator, ext: Extender, validate_crd: Any) -> None:
    await asyncio.to_thread(ext.refresh)
    # 6 of n1's 8 CPUs are reserved: a non-owner sees them used, an owner may have them
    assert _fits(ext, _pod("other", "4", owner=False)) == ["n2"]
    assert _fits(ext, _pod("own", "4", owner=True)) == ["n1", "n2"]
    scores = _scores(ext, _pod("own", "4", owner=True))
    assert scores["n1"] > scores["n2"]
    # a non-owner is ranked by the other plugins (the idle Reservation weight, 5000, left out of the 0..10 scale)
    scores = _scores(ext, _pod("other", "1", owner=False))
    assert scores["n2"] > scores["n1"]
    assert "default/reservation/r1" in ext.scheduler.cluster.nodes["n1"].pods  # the cycles put everything back

    res = await asyncio.to_thread(_bind, ext, km, _pod("own", "4", owner=True), "n1")
    assert res == {"Error": ""}
    writes = _writes(km)
    assert [(m, p) for m, p, _ in writes] == [
        ("PATCH", "/api/v1/namespaces/default/pods/own"), ("POST", "/api/v1/namespaces/default/pods/own/binding"),
        ("PATCH", "/apis/scheduling.koordinator.sh/v1alpha1/reservations/r1/status")]
    assert json.loads(writes[0][2]["metadata"]["annotations"][ALLOCATED]) == {"name": "r1", "uid": "uid-r1"}
    status = writes[2][2]["status"]
    assert status["phase"] == "Succeeded" and status["allocated"] == {"cpu": "4"}
    assert status["currentOwners"] == [{"namespace": "default", "name": "own", "uid": "uid-own"}]
    validate_crd(CRD, {**_reservation("r1", "n1", "6"), "status": status})

    # allocateOnce: the reservation ended, its unallocated CPUs are free again (8 - 4 for the owner)
    assert _fits(ext, _pod("other", "4", owner=False)) == ["n1", "n2"]
    assert _fits(ext, _pod("own2", "6", owner=True)) == ["n2"]
    # and a re-list (the owner bound with its annotation, the object Succeeded) agrees
    km.objects[RESV, None, "r1"] = {**_reservation("r1", "n1", "6"), "status": status}
    await asyncio.to_thread(ext.refresh)
    assert _fits(ext, _pod("other", "4", owner=False)) == ["n1", "n2"]
    assert _fits(ext, _pod("other", "5", owner=False)) == ["n2"]


async def test_not_allocate_once_tracks_owners(km: kmock.KubernetesEmulator, ext: Extender,
                                               validate_crd: Any) -> None:
    km.objects[RESV, None, "r1"] = _reservation("r1", "n1", "6", allocate_once=False)
    await asyncio.to_thread(ext.refresh)
    assert (await asyncio.to_thread(_bind, ext, km, _pod("a1", "2", owner=True), "n1")) == {"Error": ""}
    status = _writes(km)[-1][2]["status"]
    assert status["phase"] == "Available" and status["allocated"] == {"cpu": "2"}
    validate_crd(CRD, {**_reservation("r1", "n1", "6", False), "status": status})
    # 4 reserved CPUs left: a non-owner still sees 6 used (2 by a1 + 4 reserved), an owner gets the 4
    assert _fits(ext, _pod("other", "3", owner=False)) == ["n2"]
    assert _fits(ext, _pod("a2", "4", owner=True)) == ["n1", "n2"]
    assert (await asyncio.to_thread(_bind, ext, km, _pod("a2", "4", owner=True), "n1")) == {"Error": ""}
    status = _writes(km)[-1][2]["status"]
    assert status["allocated"] == {"cpu": "6"} and [o["name"] for o in status["currentOwners"]] == ["a1", "a2"]
    assert _fits(ext, _pod("a3", "3", owner=True)) == ["n2"]  # all 6 reserved are allocated, 2 free
    # an owner deleted: its share returns to the reservation (not to everyone)
    gone = copy.deepcopy(ext.scheduler.cluster.nodes["n1"].pods["default/a1"])
    ext.deliver("DELETED", "Pod", gone)
    assert _fits(ext, _pod("other", "3", owner=False)) == ["n2"]
    assert _fits(ext, _pod("a3", "4", owner=True)) == ["n1", "n2"]


async def test_failed_binding_returns_the_reservation(km: kmock.KubernetesEmulator, ext: Extender) -> None:
    await asyncio.to_thread(ext.refresh)
    pod = _pod("own", "4", owner=True, annotations={"test/fail-binding": "true"})
    res = await asyncio.to_thread(_bind, ext, km, pod, "n1")
    assert "binding" in res["Error"]
    assert not [p for _, p, _ in _writes(km) if "/reservations/" in p]  # nothing written for a failed bind
    assert _fits(ext, _pod("other", "4", owner=False)) == ["n2"]  # still reserved
    assert _fits(ext, _pod("own2", "6", owner=True)) == ["n1", "n2"]


async def test_non_owner_binds_beside_a_reservation(km: kmock.KubernetesEmulator, ext: Extender) -> None:
    await asyncio.to_thread(ext.refresh)
    assert (await asyncio.to_thread(_bind, ext, km, _pod("other", "2", owner=False), "n1")) == {"Error": ""}
    assert [p for _, p, _ in _writes(km)] == ["/api/v1/namespaces/default/pods/other/binding"]
    assert _fits(ext, _pod("other2", "1", owner=False)) == ["n2"]  # 2 bound + 6 reserved: n1 is full to it
    assert _fits(ext, _pod("own", "6", owner=True)) == ["n1", "n2"]


async def test_without_the_crd(kmock: kmock.KubernetesEmulator) -> None:
    """Reservations are optional like Device: a cluster without the CRD lists and filters as before."""
    for res in ("v1/nodes", "v1/pods"):
        kmock.resources[res] = {}
    kmock.objects["v1/nodes", None, "n1"] = {"apiVersion": "v1", "metadata": {"name": "n1"}, "status": {
        "allocatable": {"cpu": "8", "memory": "64Gi", "pods": "110"}}}
    ext = Extender(ClusterSource(KubeClient(KubeConfig(server=str(kmock.url)))),
                   lambda c: Scheduler(c, profile(None)))
    await asyncio.to_thread(ext.refresh)
    assert list(ext.filter({"Pod": _pod("p", "4", owner=True), "NodeNames": ["n1"]})["NodeNames"]) == ["n1"]


# --- watches ---------------------------------------------------------------------------------------------------
@pytest.fixture
async def watching(ext: Extender) -> AsyncIterator[Extender]:
    ext.start_watches(timeout_seconds=5)  # no refresh: every kind arrives by its own list+watch, in any order
    try:
        yield ext
    finally:
        ext.stop_watches()


async def _eventually(check: Any, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await asyncio.to_thread(check):
        assert asyncio.get_running_loop().time() < deadline, "the watch did not deliver in time"
        await asyncio.sleep(0.02)


async def test_watch_follows_reservations(km: kmock.KubernetesEmulator, watching: Extender) -> None:
    api = driver_client(km)
    other = _pod("other", "4", owner=False)
    await _eventually(lambda: _fits(watching, other) == ["n2"])  # r1 placed whichever came first, node or it
    await asyncio.to_thread(api.post, "/apis/scheduling.koordinator.sh/v1alpha1/reservations",
                            _reservation("r2", "n2", "6"))
    await _eventually(lambda: _fits(watching, other) == [])
    await asyncio.to_thread(api.request, "DELETE", "/apis/scheduling.koordinator.sh/v1alpha1/reservations/r1")
    await _eventually(lambda: _fits(watching, other) == ["n1"])
    assert not [p for _, p, _ in _writes(km) if "/reservations/" in p]  # the extender never wrote one it did not serve


# --- devices ---------------------------------------------------------------------------------------------------
async def test_reserved_gpus_go_to_the_owner(kmock: kmock.KubernetesEmulator) -> None:
    """A reservation holding GPUs 2 and 3 (its `device-allocated`): a non-owner never gets them, the owner does."""
    from test_reservation_devices import DEV, GPU_RES, device_cr, node, pod

    for res in ("v1/nodes", "v1/pods", RESV, "scheduling.koordinator.sh/v1alpha1/devices"):
        kmock.resources[res] = {}
    kmock.objects["v1/nodes", None, "n1"] = node()
    kmock.objects["scheduling.koordinator.sh/v1alpha1/devices", None, "n1"] = device_cr()
    held = json.dumps({"gpu": [{"minor": m, "id": f"GPU-{m}", "resources": GPU_RES} for m in (2, 3)]})
    r = _reservation("r1", "n1", "2")
    r["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "2"
    r["status"]["allocatable"]["nvidia.com/gpu"] = "2"
    r["metadata"]["annotations"] = {DEV: held}
    kmock.objects[RESV, None, "r1"] = r
    emulate_binding(kmock)
    ext = Extender(ClusterSource(KubeClient(KubeConfig(server=str(kmock.url)))),
                   lambda c: Scheduler(c, profile(None)))
    await asyncio.to_thread(ext.refresh)

    def minors(name: str) -> list[int]:
        raw = kmock.objects["v1/pods", "default", name].raw["metadata"]["annotations"][DEV]
        return sorted(a["minor"] for a in json.loads(raw)["gpu"])

    assert list(ext.filter({"Pod": pod("big", 3), "NodeNames": ["n1"]})["NodeNames"]) == []  # 2 free to it
    assert (await asyncio.to_thread(_bind, ext, kmock, pod("other", 1), "n1")) == {"Error": ""}
    assert minors("other") in ([0], [1])
    assert (await asyncio.to_thread(_bind, ext, kmock, pod("own", 2, owner=True), "n1")) == {"Error": ""}
    assert minors("own") == [2, 3]
    patched = [json.loads(q.body) for q in kmock if q.method.value == "PATCH" and q.url.path.endswith("/pods/own")]
    assert set(patched[0]["metadata"]["annotations"]) == {DEV, ALLOCATED}
