"""The demo stack's pods: examples/pods/ (one on l20-pcie, one on h100-hgx) and a GPU pod for each further GPU node,
two of them sharing one GPU as koord-scheduler shares it (gpu-core and gpu-memory-ratio below 100), each with the
GPU work its process is given in the node's NVML snapshot."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from apis.extension.device_allocated import (
    ANNOTATION_DEVICE_ALLOCATED,
    DeviceAllocation,
    decode_device_allocations,
    encode_device_allocations,
)
from apis.extension.resources import RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY, RESOURCE_GPU_MEMORY_RATIO

EXAMPLE_PODS = Path(__file__).resolve().parents[1] / "examples" / "pods"
QOS_LABEL = "koordinator.sh/qosClass"


@dataclass(frozen=True)
class GpuPod:
    """A pod koord-scheduler placed on `node` with `share`% of the GPU of `minor` (100: the whole GPU), whose
    process uses `sm`% SM and `memory` bytes of it."""

    name: str
    namespace: str
    node: str
    minor: int
    share: int
    sm: int
    memory: int


# (pod, node, GPU minor, share %, SM %, memory): a whole GPU each, and on rtx4090x8 two notebooks sharing minor 1
# (NVML index 2: that box's minors are not in bus order) beside a pod holding minor 3 (index 0) whole
GPU_PODS = (
    GpuPod("infer-a10-0", "inference", "a10", 0, 100, 45, 12 << 30),
    GpuPod("train-a100-0", "training", "a100-mig", 1, 100, 70, 30 << 30),
    GpuPod("infer-a10g-0", "inference", "a10g", 0, 100, 35, 10 << 30),
    GpuPod("infer-t4-0", "inference", "t4", 0, 100, 25, 6 << 30),
    GpuPod("render-0", "render", "rtx4090x8", 3, 100, 80, 18 << 30),
    GpuPod("notebook-a", "research", "rtx4090x8", 1, 50, 30, 8 << 30),
    GpuPod("notebook-b", "research", "rtx4090x8", 1, 50, 20, 6 << 30),
)
# One application XID in the demo: 31 (GPU memory page fault, a CUDA program's own bug) on t4's GPU, which infer-t4-0
# holds: counted (koordlet_gpu_xid_errors_total) but, being an application XID, neither unhealthy nor alerted.
DEMO_XIDS = (("t4", 0, 31),)  # (node, NVML index, XID)
# the example pods' GPU work: their device-allocated (examples/pods/) names the GPU
EXAMPLE_GPU_WORK = {"web-0": (60, 20 << 30), "spark-executor-1": (30, 8 << 30)}


def example_pods() -> dict[str, dict[str, Any]]:
    """examples/pods/ by pod name."""
    out = {}
    for f in sorted(EXAMPLE_PODS.glob("*.yaml")):
        pod: dict[str, Any] = yaml.safe_load(f.read_text())
        out[pod["metadata"]["name"]] = pod
    return out


def manifest(pod: GpuPod, gpu_memory_total: int) -> dict[str, Any]:
    """The pod as kubelet's /pods lists it, with koord-scheduler's device-allocated for its share of the GPU
    (gpu-memory: the share of the GPU's `gpu_memory_total` bytes, as the scheduler fills it)."""
    resources = {RESOURCE_GPU_CORE: Decimal(pod.share), RESOURCE_GPU_MEMORY_RATIO: Decimal(pod.share),
                 RESOURCE_GPU_MEMORY: Decimal(gpu_memory_total * pod.share // 100 >> 20 << 20)}
    allocated = encode_device_allocations({"gpu": [DeviceAllocation(pod.minor, resources)]})
    digest = hashlib.sha256(pod.name.encode()).hexdigest()
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod.name, "namespace": pod.namespace,
                     "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"koordlet-demo/{pod.namespace}/{pod.name}")),
                     "labels": {QOS_LABEL: "LS"}, "annotations": {ANNOTATION_DEVICE_ALLOCATED: allocated}},
        "spec": {"priority": 9000, "containers": [{"name": "cuda", "image": "nvcr.io/nvidia/cuda:12.4.1-base",
                                                   "resources": {"requests": {"cpu": "250m", "memory": "256Mi"},
                                                                 "limits": {"cpu": "1", "memory": "512Mi"}}}]},
        "status": {"phase": "Running", "qosClass": "Burstable", "containerStatuses": [
            {"name": "cuda", "containerID": f"containerd://{digest}", "ready": True,
             "state": {"running": {"startedAt": "2026-11-22T09:00:00Z"}}}]},
    }


def gpu_minors(pod: dict[str, Any]) -> list[int]:
    """The GPU minors of the pod's device-allocated."""
    text = pod["metadata"].get("annotations", {}).get(ANNOTATION_DEVICE_ALLOCATED)
    return [] if text is None else [a.minor for a in decode_device_allocations(text).get("gpu", ())]
