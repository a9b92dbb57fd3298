"""The benchmarks' GPU cluster as plain objects: a node of 8 GPUs and 2 RDMA NICs (Node, Device, NodeMetric) and the
pods of each kind; no scheduler import, so one cluster serves this tree and an older commit's scheduler alike."""

from __future__ import annotations

import time
from typing import Any

NOW = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
KINDS = ("cpu", "whole-gpu", "shared-gpu", "gpu-rdma")


def node_objects(i: int) -> list[dict[str, Any]]:
    name = f"node-{i:04d}"
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {}},
            "status": {"allocatable": {"cpu": "96", "memory": "768Gi", "pods": "110",
                                       "koordinator.sh/gpu": "800", "koordinator.sh/gpu-core": "800",
                                       "koordinator.sh/gpu-memory-ratio": "800",
                                       "koordinator.sh/gpu-memory": "640Gi", "koordinator.sh/rdma": "200"}}}
    device = {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Device", "metadata": {"name": name},
              "spec": {"devices": [
                  {"type": "gpu", "id": f"GPU-{i:04d}-{m}", "minor": m, "health": True,
                   "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "80Gi",
                                 "koordinator.sh/gpu-memory-ratio": "100"},
                   "topology": {"socketID": -1, "nodeID": m // 4, "pcieID": f"pci0000:{m:02x}",
                                "busID": f"0000:{m:02x}:00.0"}} for m in range(8)] + [
                  # two ConnectX NICs with 4 VFs each, on the PCIe roots of GPUs 0 and 4
                  {"type": "rdma", "id": f"0000:{0x40 + m:02x}:00.0", "minor": k, "health": True,
                   "resources": {"koordinator.sh/rdma": "100"},
                   "topology": {"socketID": -1, "nodeID": m // 4, "pcieID": f"pci0000:{m:02x}",
                                "busID": f"0000:{0x40 + m:02x}:00.0"},
                   "vfGroups": [{"vfs": [{"minor": -1, "busID": f"0000:{0x40 + m:02x}:00.{v + 2}"}
                                         for v in range(4)]}]} for k, m in enumerate((0, 4))]}}
    metric = {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": name},
              "status": {"updateTime": NOW, "nodeMetric": {"nodeUsage": {"resources": {
                  "cpu": f"{(i % 40) + 5}", "memory": f"{(i % 300) + 50}Gi"}}}}}
    return [node, device, metric]


def bench_pod(name: str, kind: str, node: str | None = None) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": "2", "memory": "8Gi"}
    if kind == "whole-gpu":
        requests["koordinator.sh/gpu"] = "100"
    elif kind == "shared-gpu":
        requests.update({"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"})
    elif kind == "gpu-rdma":
        requests.update({"koordinator.sh/gpu": "100", "koordinator.sh/rdma": "1"})
    annotations = ({"scheduling.koordinator.sh/device-joint-allocate": '{"deviceTypes":["gpu","rdma"]}'}
                   if kind == "gpu-rdma" else {})
    pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": name, "namespace": "bench", "annotations": annotations},
                           "spec": {"containers": [{"name": "c", "resources": {"requests": requests,
                                                                               "limits": requests}}]},
                           "status": {"phase": "Running" if node else "Pending"}}
    if node:
        pod["spec"]["nodeName"] = node
    return pod
