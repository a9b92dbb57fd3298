"""Device CR over real HTTP against kmock: create when missing, update only on change, keep foreign labels."""

from __future__ import annotations

import asyncio
from typing import Any

import kmock
import pytest

from apis.client.kubeapi import KubeClient, KubeConfig
from koordlet.devices.model import DeviceSet
from koordlet.reporters.device_api import DeviceApiWriter

from kubedouble import emulate_put

DEV = "scheduling.koordinator.sh/v1alpha1/devices"
GPU = {"id": "GPU-a", "minor": 0, "type": "gpu", "health": True, "resources": {"koordinator.sh/gpu-core": "100"}}
SET = DeviceSet([GPU], {"node.koordinator.sh/gpu-vendor": "nvidia"})


@pytest.fixture
def km(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    kmock.resources[DEV] = {}
    emulate_put(kmock, DEV)
    return kmock


def _writer(km: kmock.KubernetesEmulator) -> DeviceApiWriter:
    return DeviceApiWriter(KubeClient(KubeConfig(server=str(km.url))), "node-1", sleep=lambda s: None)


async def test_creates_then_stays_quiet_then_updates(km: kmock.KubernetesEmulator, validate_crd: Any) -> None:
    w = _writer(km)
    assert await asyncio.to_thread(w.report, SET, "uid-1")
    [created] = km["post"]
    validate_crd("scheduling.koordinator.sh_devices.yaml", created.data)
    assert created.data["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert await asyncio.to_thread(w.report, SET, "uid-1")  # unchanged: no write
    assert len(km["post"]) == 0 + 1 and len(km["put"]) == 0
    stored = km.objects[DEV, None, "node-1"]
    stored.patch({"metadata": {"labels": {"team.example.com/owner": "ml"}, "resourceVersion": "3"}})
    sick = DeviceSet([{**GPU, "health": False}], SET.labels)
    assert await asyncio.to_thread(w.report, sick, "uid-1")
    [put] = km["put"]
    assert put.data["spec"]["devices"][0]["health"] is False
    assert put.data["metadata"]["labels"] == {"node.koordinator.sh/gpu-vendor": "nvidia",
                                              "team.example.com/owner": "ml"}
    assert put.data["metadata"]["resourceVersion"] == "3"
    assert w.writes == 2


async def test_conflict_is_retried_with_a_fresh_read(km: kmock.KubernetesEmulator) -> None:
    km.objects[DEV, None, "node-1"] = {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Device",
                                      "metadata": {"name": "node-1", "resourceVersion": "1"}, "spec": {}}
    w = _writer(km)
    # the first read sees resourceVersion 1; someone writes before our PUT lands
    km["get", kmock.resource(DEV)][:1] << (lambda: km.objects[DEV, None, "node-1"].patch(
        {"metadata": {"resourceVersion": "2"}}) or {"apiVersion": "scheduling.koordinator.sh/v1alpha1",
                                                    "kind": "Device",
                                                    "metadata": {"name": "node-1", "resourceVersion": "1"},
                                                    "spec": {}})
    assert await asyncio.to_thread(w.report, SET, None)
    # the retry re-read the object: its PUT carries the fresh resourceVersion
    assert [r.data["metadata"]["resourceVersion"] for r in km["put"]] == ["1", "2"]


async def test_server_errors_return_false_without_raising(km: kmock.KubernetesEmulator) -> None:
    km["get", kmock.resource(DEV)] << 500 << {"kind": "Status", "code": 500, "message": "etcd down"}
    w = _writer(km)
    assert not await asyncio.to_thread(w.report, SET, None)
    assert "etcd down" in w.last_error
