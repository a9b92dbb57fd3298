"""Reservations holding GPUs and RDMA VFs: placed through DeviceShare, owners served from the reserved devices
(upstream deviceshare/reservation.go tryAllocateFromReusable), non-owners never given them; simulate and run."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import kmock
import pytest

from apis.client.kubeapi import KubeClient, KubeConfig
from scheduler.cli import profile, simulate
from scheduler.cluster import Cluster, build_cluster
from scheduler.framework import Scheduler
from scheduler.reservation.plugin import ReservationPlugin
from scheduler.runner import SecondaryScheduler

from kubedouble import emulate_binding

DEV = "scheduling.koordinator.sh/device-allocated"
HINT = "scheduling.koordinator.sh/device-allocate-hint"
ALLOCATED = "scheduling.koordinator.sh/reservation-allocated"
RESV = "scheduling.koordinator.sh/v1alpha1/reservations"
CRD = "scheduling.koordinator.sh_reservations.yaml"
GPU_RES = {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "16Gi",
           "koordinator.sh/gpu-memory-ratio": "100"}
VF_HINT = json.dumps({"rdma": {"vfSelector": {"matchLabels": {"type": "vf"}}}})
NAME = "koord-py"


def device_cr(name: str = "n1") -> dict[str, Any]:
    """4 GPUs, 2 RDMA NICs with 2 VFs each."""
    devices: list[dict[str, Any]] = [{"type": "gpu", "id": f"GPU-{i}", "minor": i, "health": True,
                                      "resources": GPU_RES} for i in range(4)]
    for i in range(2):
        devices.append({"type": "rdma", "id": f"0000:0{i}:00.0", "minor": i, "health": True,
                        "resources": {"koordinator.sh/rdma": "100"},
                        "vfGroups": [{"labels": {"type": "vf"},
                                      "vfs": [{"minor": k, "busID": f"0000:0{i}:00.{k + 1}"} for k in range(2)]}]})
    return {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Device", "metadata": {"name": name},
            "spec": {"devices": devices}}


def node(name: str = "n1") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110", "nvidia.com/gpu": "4",
                                       "koordinator.sh/gpu-core": "400", "koordinator.sh/gpu-memory-ratio": "400",
                                       "koordinator.sh/rdma": "200"}}}


def pod(name: str, gpus: int, rdma: bool = False, owner: bool = False) -> dict[str, Any]:
    req: dict[str, Any] = {"cpu": "1", "nvidia.com/gpu": str(gpus)}
    ann: dict[str, str] = {}
    if rdma:
        req["koordinator.sh/rdma"] = "1"
        ann[HINT] = VF_HINT
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}",
                         "labels": {"app": "a"} if owner else {}, "annotations": ann},
            "spec": {"schedulerName": NAME, "containers": [{"name": "c", "resources": {"requests": req}}]},
            "status": {"phase": "Pending"}}


# the devices of a reservation placed on minors 1 and 3 and the second VF of NIC 1 (not what a fresh pod gets)
HELD = {"gpu": [{"minor": 1, "resources": GPU_RES, "id": "GPU-1"}, {"minor": 3, "resources": GPU_RES, "id": "GPU-3"}],
        "rdma": [{"minor": 1, "resources": {"koordinator.sh/rdma": "1"}, "id": "0000:01:00.0",
                  "extension": {"vfs": [{"minor": 1, "busID": "0000:01:00.2"}]}}]}


def reservation(placed: bool = True, allocate_once: bool = False) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
        "metadata": {"name": "r1", "uid": "uid-r1", "annotations": {}},
        "spec": {"template": {"metadata": {"annotations": {HINT: VF_HINT}}, "spec": {
            "schedulerName": NAME, "containers": [{"name": "c", "resources": {"requests": {
                "cpu": "2", "nvidia.com/gpu": "2", "koordinator.sh/rdma": "1"}}}]}},
            "owners": [{"labelSelector": {"matchLabels": {"app": "a"}}}], "allocateOnce": allocate_once}}
    if placed:
        obj["metadata"]["annotations"][DEV] = json.dumps(HELD)
        obj["status"] = {"phase": "Available", "nodeName": "n1",
                         "allocatable": {"cpu": "2", "nvidia.com/gpu": "2", "koordinator.sh/rdma": "1"}}
    return obj


def gpus(annotations: dict[str, str]) -> list[int]:
    return sorted(a["minor"] for a in json.loads(annotations[DEV]).get("gpu", []))


def vfs(annotations: dict[str, str]) -> list[str]:
    return [v["busID"] for a in json.loads(annotations[DEV]).get("rdma", []) for v in a["extension"]["vfs"]]


def test_pending_reservation_takes_gpus_and_vf_through_deviceshare(validate_crd: Any) -> None:
    r = reservation(placed=False)
    validate_crd(CRD, r)
    cluster = build_cluster([node(), device_cr()])
    out = simulate(cluster, [r, pod("other", 3)])
    (res,) = out["reservations"]
    assert res["node"] == "n1" and res["phase"] == "Available"
    # the reservation holds 2 GPUs and a VF; a non-owner wanting 3 GPUs finds only 2 free
    (other,) = out["placements"]
    assert other["node"] is None and "Insufficient" in other["reason"]


def test_owner_served_from_reserved_minors_and_vf_non_owner_never() -> None:
    cluster = build_cluster([node(), device_cr(), reservation()])
    out = simulate(cluster, [pod("owner1", 1, rdma=True, owner=True), pod("other", 2), pod("other2", 1),
                             pod("owner2", 1, owner=True)])
    p = {x["pod"]: x for x in out["placements"]}
    o1 = p["default/owner1"]
    assert json.loads(o1["annotations"][ALLOCATED]) == {"name": "r1", "uid": "uid-r1"}
    # without the preference the least-allocated walk would give minor 0 and VF 0000:00:00.1
    assert gpus(o1["annotations"]) == [1] and vfs(o1["annotations"]) == ["0000:01:00.2"]
    assert gpus(p["default/other"]["annotations"]) == [0, 2]  # the free ones, never 3 (still reserved)
    assert p["default/other2"]["node"] is None  # only the reservation's minor 3 is left
    assert ALLOCATED not in p["default/other2"].get("annotations", {})
    assert gpus(p["default/owner2"]["annotations"]) == [3]
    (res,) = out["reservations"]
    assert res["owners"] == ["default/owner1", "default/owner2"]
    assert res["allocated"] == {"cpu": "2", "koordinator.sh/rdma": "1", "nvidia.com/gpu": "2"}


def test_reserve_pod_device_annotation_shrinks_as_owners_take() -> None:
    cluster = build_cluster([node(), device_cr(), reservation()])
    sched = Scheduler(cluster, profile(None))
    resv = sched.plugin("Reservation", ReservationPlugin)
    resv.bind(cluster)
    held = cluster.nodes["n1"].pods["default/reservation/r1"]["metadata"]["annotations"][DEV]
    assert gpus({DEV: held}) == [1, 3] and vfs({DEV: held}) == ["0000:01:00.2"]
    placed = sched.schedule(pod("owner1", 1, rdma=True, owner=True))
    assert placed.node == "n1"
    held = cluster.nodes["n1"].pods["default/reservation/r1"]["metadata"]["annotations"][DEV]
    assert json.loads(held) == {"gpu": [HELD["gpu"][1]]}  # GPU 1 and the VF are the owner's now
    # the object keeps what was reserved (upstream never rewrites it)
    assert resv.book["r1"].annotations[DEV] == json.dumps(HELD)
    # a running owner counts on reload: the reserve pod of a fresh scheduler holds only minor 3
    cluster2 = build_cluster([node(), device_cr(), resv.book["r1"].obj,
                              {**pod("owner1", 1, rdma=True, owner=True),
                               "metadata": {**pod("owner1", 1)["metadata"], "annotations": {
                                   DEV: placed.annotations[DEV], ALLOCATED: placed.annotations[ALLOCATED]}},
                               "spec": {**pod("owner1", 1)["spec"], "nodeName": "n1"},
                               "status": {"phase": "Running"}}])
    sched2 = Scheduler(cluster2, profile(None))
    sched2.plugin("Reservation", ReservationPlugin).bind(cluster2)
    held2 = cluster2.nodes["n1"].pods["default/reservation/r1"]["metadata"]["annotations"][DEV]
    assert gpus({DEV: held2}) == [3]
    other = sched2.schedule(pod("other", 3))
    assert other.node is None  # 0 and 2 free, 3 still reserved


def test_owner_larger_than_reservation_takes_reserved_first() -> None:
    cluster = build_cluster([node(), device_cr(), reservation()])
    out = simulate(cluster, [pod("big", 3, owner=True)])
    (p,) = out["placements"]
    assert 1 in gpus(p["annotations"]) and 3 in gpus(p["annotations"])


def test_reservation_ignored_pod_may_use_reserved_devices() -> None:
    cluster = build_cluster([node(), device_cr(), reservation()])
    ignored = pod("ign", 4)
    ignored["metadata"]["labels"]["scheduling.koordinator.sh/reservation-ignored"] = "true"
    out = simulate(cluster, [ignored])
    (p,) = out["placements"]
    assert gpus(p["annotations"]) == [0, 1, 2, 3] and ALLOCATED not in p["annotations"]


@pytest.fixture
def km(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    for res in ("v1/nodes", "v1/pods", RESV, "scheduling.koordinator.sh/v1alpha1/devices"):
        kmock.resources[res] = {}
    kmock.objects["v1/nodes", None, "n1"] = node()
    kmock.objects["scheduling.koordinator.sh/v1alpha1/devices", None, "n1"] = device_cr()
    emulate_binding(kmock)
    return kmock


async def test_run_places_device_reservation_then_serves_owner_from_it(km: kmock.KubernetesEmulator,
                                                                      validate_crd: Any) -> None:
    km.objects[RESV, None, "r1"] = reservation(placed=False)

    def make(cluster: Cluster) -> Scheduler:
        return Scheduler(cluster, profile(None))

    runner = SecondaryScheduler(KubeClient(KubeConfig(server=str(km.url))), NAME, make)
    await asyncio.to_thread(runner.run_once)
    patches = [(q.url.path, json.loads(q.body)) for q in km if q.method.value == "PATCH"]
    meta = [b for path, b in patches if path.endswith("/reservations/r1")]
    status = [b for path, b in patches if path.endswith("/reservations/r1/status")][-1]["status"]
    reserved = meta[-1]["metadata"]["annotations"][DEV]
    assert len(gpus({DEV: reserved})) == 2 and len(vfs({DEV: reserved})) == 1
    obj = reservation(placed=False)
    obj["metadata"]["annotations"][DEV] = reserved
    obj["status"] = status
    validate_crd(CRD, obj)
    km.objects[RESV, None, "r1"] = obj
    km.objects["v1/pods", "default", "owner"] = pod("owner", 1, rdma=True, owner=True)
    km.objects["v1/pods", "default", "other"] = pod("other", 2)
    placements = await asyncio.to_thread(runner.run_once)
    assert sorted((p.pod, p.node) for p in placements) == [("default/other", "n1"), ("default/owner", "n1")]
    by = {p.pod: p for p in placements}
    assert set(gpus(by["default/owner"].annotations)) <= set(gpus({DEV: reserved}))
    assert vfs(by["default/owner"].annotations) == vfs({DEV: reserved})
    assert not set(gpus(by["default/other"].annotations)) & set(gpus({DEV: reserved}))
    last = [json.loads(q.body) for q in km if q.method.value == "PATCH" and q.url.path.endswith(
        "/reservations/r1/status")][-1]["status"]
    assert last["allocated"] == {"cpu": "1", "koordinator.sh/rdma": "1", "nvidia.com/gpu": "1"}
    validate_crd(CRD, {**obj, "status": last})
    # the object's device annotation is not rewritten (upstream keeps what was reserved)
    later = [json.loads(q.body) for q in km if q.method.value == "PATCH" and q.url.path.endswith("/reservations/r1")]
    assert later == meta
