"""MetaX GPUs: what koord-scheduler writes for MetaX's device plugin (restating upstream's
TestMetaXGPUDevicePluginAdapter_Adapt and the metax case of TestPlugin_adaptForDevicePlugin), end to end."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from scheduler.cluster import build_cluster
from scheduler.deviceshare.plugin import DeviceShare
from scheduler.deviceshare.state import Allocation
from scheduler.deviceshare.vendors import VENDOR_METAX, adapt, check
from scheduler.framework import Profile, Scheduler
from scheduler.plugins.fit import NodeResourcesFit

T0 = dt.datetime(2025, 6, 1, 12, 0, 0, tzinfo=dt.UTC)
METAX = "metax-tech.com/gpu-devices-allocated"
LOCK = "hami.io/mutex.lock"
GI = 1 << 30


def pod_obj(name: str = "test-pod") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "annotations": {}}}


def gpus(*specs: tuple[int, dict[str, int]]) -> dict[str, list[Allocation]]:
    return {"gpu": [Allocation(minor, resources) for minor, resources in specs]}


# ---- metaxDevicePluginAdapter (device_plugin_adapter_test.go) ----------------------------------------------------

def test_metax_adapter_writes_uuid_compute_and_vram_in_mib() -> None:
    allocs = gpus((0, {"koordinator.sh/gpu-core": 5, "koordinator.sh/gpu-memory": GI}),
                  (1, {"koordinator.sh/gpu-core": 5, "koordinator.sh/gpu-memory": GI}))
    ids = {("gpu", 0): "GPU-0", ("gpu", 1): "GPU-1"}
    assert check(VENDOR_METAX, allocs) is None
    out = adapt(pod_obj(), "metax", allocs, VENDOR_METAX, "", T0, ids)
    assert out.annotations[METAX] == ('[[{"uuid":"GPU-0","compute":5,"vRam":1024},'
                                      '{"uuid":"GPU-1","compute":5,"vRam":1024}]]')


def test_metax_adapter_refusals() -> None:
    missing_core = gpus((0, {"koordinator.sh/gpu-memory": GI}))
    assert check(VENDOR_METAX, missing_core) == "gpu core resource is required"
    too_small = gpus((0, {"koordinator.sh/gpu-core": 5, "koordinator.sh/gpu-memory": 512 * 1024}))
    assert check(VENDOR_METAX, too_small) == "gpu memory must not be less than 1048576 bytes"


def test_adapt_for_the_metax_device_plugin_locks_the_node() -> None:
    """The metax case: bind-timestamp, gpu-minors, the allocation, and the Node's `hami.io/mutex.lock`."""
    allocs = gpus((0, {"koordinator.sh/gpu-core": 5, "koordinator.sh/gpu-memory": GI}))
    out = adapt(pod_obj(), "metax", allocs, VENDOR_METAX, "", T0, {("gpu", 0): "GPU-0"})
    assert out.annotations == {
        "scheduling.koordinator.sh/bind-timestamp": str(int(T0.timestamp()) * 1_000_000_000),
        "scheduling.koordinator.sh/gpu-minors": "0",
        METAX: '[[{"uuid":"GPU-0","compute":5,"vRam":1024}]]'}
    assert out.node_annotations == {LOCK: "2025-06-01T12:00:00Z,default,test-pod"}


# ---- end to end ---------------------------------------------------------------------------------------------------

def metax_cluster() -> list[dict[str, Any]]:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "mx", "labels": {}},
            "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110",
                                       "koordinator.sh/gpu-core": "200", "koordinator.sh/gpu-memory-ratio": "200",
                                       "koordinator.sh/gpu-memory": "128Gi"}}}
    devices = [{"type": "gpu", "minor": m, "id": f"GPU-mx-{m}", "health": True,
                "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory-ratio": "100",
                              "koordinator.sh/gpu-memory": "64Gi"}} for m in (0, 1)]
    device = {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Device",
              "metadata": {"name": "mx", "labels": {"node.koordinator.sh/gpu-vendor": "metax",
                                                    "node.koordinator.sh/gpu-model": "MXC500"}},
              "spec": {"devices": devices}}
    return [node, device]


def shared_pod(name: str, memory: str = "8Gi") -> dict[str, Any]:
    requests = {"cpu": "1", "koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory": memory}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": {}, "annotations": {}},
            "spec": {"containers": [{"name": "c", "resources": {"requests": requests, "limits": requests}}]},
            "status": {"phase": "Pending"}}


def metax_scheduler() -> Scheduler:
    ds = DeviceShare(clock=lambda: T0)
    return Scheduler(build_cluster(metax_cluster()), Profile([NodeResourcesFit(), ds], [ds], [ds]))


def test_a_metax_pod_is_placed_with_the_annotation_and_locks_the_node() -> None:
    sched = metax_scheduler()
    placed = sched.schedule(shared_pod("p1"))
    assert placed.node == "mx"
    (alloc,) = json.loads(placed.annotations["scheduling.koordinator.sh/device-allocated"])["gpu"]
    assert json.loads(placed.annotations[METAX]) == [[{"uuid": f"GPU-mx-{alloc['minor']}", "compute": 50,
                                                       "vRam": 8192}]]
    assert sched.prebind_patches("default/p1") == ({}, {LOCK: "2025-06-01T12:00:00Z,default,p1"})
    # MetaX's plugin tells pods apart by the lock: a second pod waits until the plugin lifts it
    refused = sched.schedule(shared_pod("p2"))
    assert refused.node is None and "node(s) locked for the device plugin by pod default/p1" in refused.reason
    # sub-MiB memory is what the plugin cannot take: a per-node reason at Filter
    tiny = metax_scheduler().schedule(shared_pod("tiny", "512Ki"))
    assert tiny.node is None and "gpu memory must not be less than 1048576 bytes" in tiny.reason
