"""An API-server double seeded with a small GPU cluster, shared by the extender and secondary-scheduler tests:
two 8-GPU nodes (our agent's l20-pcie Device CR), a CPU-only node, and a running pod holding GPU minor 0 on gpu-a."""

from __future__ import annotations

from typing import Any

import kmock

from conftest import agent_device
from kubedouble import NM, emulate_binding

DEVICES = "scheduling.koordinator.sh/v1alpha1/devices"
ALLOCATED = "scheduling.koordinator.sh/device-allocated"
GPU_NODES = ("gpu-a", "gpu-b")
FAIL_BINDING = "test/fail-binding"  # the emulated binding subresource answers 500 for pods with this annotation


def device(name: str) -> dict[str, Any]:
    doc = agent_device("l20-pcie", name)
    doc.pop("kind", None)  # list items come without kind: the source must fill it in
    return doc


def node(name: str, gpus: int) -> dict[str, Any]:
    alloc = {"cpu": "96", "memory": "1Ti", "pods": "110"}
    if gpus:
        alloc |= {"nvidia.com/gpu": str(gpus), "koordinator.sh/gpu-core": str(100 * gpus),
                  "koordinator.sh/gpu-memory-ratio": str(100 * gpus), "koordinator.sh/rdma": "400"}
    return {"apiVersion": "v1", "metadata": {"name": name}, "status": {"allocatable": alloc}}


def pod(name: str, requests: dict[str, Any], node: str = "", annotations: dict[str, str] | None = None,
        uid: str = "") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": uid or f"uid-{name}",
                         "annotations": dict(annotations or {})},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": requests}}]},
            "status": {"phase": "Running" if node else "Pending"}}


def seed(km: kmock.KubernetesEmulator, extra_resources: tuple[str, ...] = ()) -> kmock.KubernetesEmulator:
    for res in ("v1/nodes", "v1/pods", DEVICES, NM, *extra_resources):
        km.resources[res] = {}
    for name in GPU_NODES:
        km.objects["v1/nodes", None, name] = node(name, 8)
        km.objects[DEVICES, None, name] = device(name)
    km.objects["v1/nodes", None, "cpu-only"] = node("cpu-only", 0)
    used = '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory-ratio":"100"}}]}'
    km.objects["v1/pods", "default", "old"] = pod("old", {"nvidia.com/gpu": 1}, "gpu-a", {ALLOCATED: used})
    emulate_binding(km, FAIL_BINDING)
    return km
