"""Device series for Prometheus: each reported device's health and allocatable, and NVIDIA GPU usage per GPU, pod and
container labelled as dcgm-exporter labels them, so dashboards need no pod-mapping side-car.

Upstream koordlet exports no device series; the names are ours (docs/decisions.md "Device series"). Built fresh per
scrape from the device round's last result and the collection tick's last GPU samples: no NVML call is made here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from apis.core.quantity import parse_quantity
from apis.extension.device_share import LABEL_GPU_MODEL
from koordlet.devices.gpu_series import GPU_LABELS, gpu_label_values, telemetry_families
from koordlet.devices.model import DeviceEntry
from koordlet.devices.nvidia import usage as gpu_usage
from koordlet.devices.nvidia.backend import GpuInfo
from koordlet.devices.nvidia.telemetry import XidCounts
from koordlet.states.model import PodMeta

DEVICE_LABELS = ["node", "type", "minor", "uuid", "model"]
# dcgm-exporter's labels (gpu_series.GPU_LABELS; `pod`, `namespace`, `container` here name the process owner)
POD_GPU_LABELS = [*GPU_LABELS, "namespace", "pod"]
CONTAINER_GPU_LABELS = [*POD_GPU_LABELS, "container"]

# (family name, help) of each GPU usage series by the metric-cache kind it comes from
_GPU_FAMILIES: dict[str, tuple[str, str]] = {
    gpu_usage.NODE_CORE: ("koordlet_gpu_core_usage_percent", "SM utilisation of the GPU's compute processes, "
                          "percent (NVML process utilisation, summed)"),
    gpu_usage.NODE_MEMORY: ("koordlet_gpu_memory_used_bytes", "GPU memory used by compute processes"),
    gpu_usage.NODE_MEMORY_TOTAL: ("koordlet_gpu_memory_total_bytes", "GPU memory in total"),
    gpu_usage.POD_CORE: ("koordlet_pod_gpu_core_usage_percent", "SM utilisation of the pod's processes on the GPU, "
                         "percent"),
    gpu_usage.POD_MEMORY: ("koordlet_pod_gpu_memory_used_bytes", "GPU memory used by the pod's processes"),
    gpu_usage.CONTAINER_CORE: ("koordlet_container_gpu_core_usage_percent", "SM utilisation of the container's "
                               "processes on the GPU, percent"),
    gpu_usage.CONTAINER_MEMORY: ("koordlet_container_gpu_memory_used_bytes", "GPU memory used by the container's "
                                 "processes"),
}
_SCOPE_LABELS = {gpu_usage.NODE_CORE: GPU_LABELS, gpu_usage.NODE_MEMORY: GPU_LABELS,
                 gpu_usage.NODE_MEMORY_TOTAL: GPU_LABELS, gpu_usage.POD_CORE: POD_GPU_LABELS,
                 gpu_usage.POD_MEMORY: POD_GPU_LABELS, gpu_usage.CONTAINER_CORE: CONTAINER_GPU_LABELS,
                 gpu_usage.CONTAINER_MEMORY: CONTAINER_GPU_LABELS}


@dataclass
class DeviceView:
    """What the device families read: the last composed devices and NVML inventory (the device round), and the
    last GPU usage samples and pod list (the collection tick)."""

    devices: list[DeviceEntry] = field(default_factory=list)
    node_labels: dict[str, str] = field(default_factory=dict)
    gpus: Sequence[GpuInfo] = ()
    samples: Sequence[gpu_usage.Sample] = ()
    pods: Sequence[PodMeta] = ()
    models: dict[str, str] = field(default_factory=dict)  # device id → model, where not from NVML (RDMA: PCI ids)
    driver_version: str = ""
    telemetry: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # bus id → telemetry readings
    xid: XidCounts | None = None


def _unit(resource: str) -> str:
    return "byte" if resource.endswith("memory") else "integer"  # as koordlet_node_resource_allocatable


def device_families(node: str, view: DeviceView) -> Iterator[Metric]:
    healthy = GaugeMetricFamily("koordlet_device_healthy", "1 while the device is healthy in the Device CR, else 0",
                                labels=DEVICE_LABELS)
    alloc = GaugeMetricFamily("koordlet_device_allocatable", "allocatable resources of the device as reported in the "
                              "Device CR", labels=[*DEVICE_LABELS, "resource", "unit"])
    names = {g.uuid: g.name for g in view.gpus}
    for entry in view.devices:
        dtype, uuid = str(entry.get("type", "")), str(entry.get("id", ""))
        model = names.get(uuid) or view.models.get(uuid) or (
            view.node_labels.get(LABEL_GPU_MODEL, "") if dtype == "gpu" else "")
        base = [node, dtype, str(entry.get("minor", "")), uuid, model]
        healthy.add_metric(base, 1.0 if entry.get("health") else 0.0)
        for res, q in sorted((entry.get("resources") or {}).items()):
            try:
                value = float(parse_quantity(str(q)))
            except Exception:  # the Device CR carries what the sources parsed; a bad one is skipped, not fatal
                continue
            alloc.add_metric([*base, res, _unit(res)], value)
    yield healthy
    yield alloc
    yield from gpu_families(node, view)
    yield from telemetry_families(node, view.gpus, view.driver_version, view.telemetry, view.xid, view.pods)


def gpu_families(node: str, view: DeviceView) -> Iterator[Metric]:
    by_uuid = {g.uuid: g for g in view.gpus}
    pods: dict[str, PodMeta] = {p.uid: p for p in view.pods}
    containers: dict[str, tuple[PodMeta, str]] = {c.container_id: (p, c.name) for p in view.pods
                                                  for c in p.containers}
    fams = {kind: GaugeMetricFamily(name, doc, labels=_SCOPE_LABELS[kind])
            for kind, (name, doc) in _GPU_FAMILIES.items()}
    for s in view.samples:
        fam = fams.get(s.kind)
        gpu = by_uuid.get(s.labels.get("gpu_device_uuid", ""))
        if fam is None or gpu is None:
            continue
        values = gpu_label_values(node, gpu, view.driver_version)
        if "pod_uid" in s.labels:
            pod = pods.get(s.labels["pod_uid"])
            if pod is None:
                continue
            values += [pod.namespace, pod.name]
        elif "container_id" in s.labels:
            owner = containers.get(s.labels["container_id"])
            if owner is None:
                continue
            values += [owner[0].namespace, owner[0].name, owner[1]]
        fam.add_metric(values, s.value)
    yield from fams.values()


class DeviceCollector(Collector):
    """The device families of whatever `view()` returns now (None: no device gate on, no families)."""

    def __init__(self, node: str, view: Any) -> None:
        self.node = node
        self.view = view

    def collect(self) -> Iterator[Metric]:
        current: DeviceView | None = self.view()
        if current is None:
            return
        yield from device_families(self.node, current)
