"""NVIDIA GPUs → Device CR entries, labels and the partition annotation (upstream NVML path of the Device report).

Upstream: pkg/koordlet/metricsadvisor/devices/gpu/collector_gpu_linux.go (inventory),
pkg/koordlet/util/system/gpu.go (bus ids from the nvidia driver dir), pkg/koordlet/statesinformer/impl/
states_device_linux.go (buildGPUDevice, getGPUDriverAndModel, fillGPUDevice). Additions: MIG mode as a device
label, and the NVLink partition table with its policy label (koordlet/devices/nvidia/topology.py).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

from apis.core.errors import InvalidInput
from apis.core.quantity import format_bytes
from apis.extension.device_share import (
    ANNOTATION_GPU_PARTITIONS,
    LABEL_GPU_DRIVER_VERSION,
    LABEL_GPU_MODEL,
    LABEL_GPU_PARTITION_POLICY,
    LABEL_GPU_VENDOR,
)
from apis.extension.resources import RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY, RESOURCE_GPU_MEMORY_RATIO
from koordlet.devices import pci
from koordlet.devices.model import DeviceEntry, DeviceSet, healthy_condition, topology
from koordlet.devices.nvidia.backend import GpuInfo, NvmlBackend, NvmlError
from koordlet.devices.nvidia.health import XidHealth
from koordlet.devices.nvidia.topology import partitions
from koordlet.devices.partitions import POLICY_HONOR, POLICY_PREFER, table_annotation
from koordlet.health import Health
from koordlet.host.paths import HostPaths

VENDOR_NVIDIA = "nvidia"
DRIVER = "nvidia"  # <sys>/bus/pci/drivers/nvidia; NVSwitches bind nvidia-nvswitch and are not listed there
LABEL_MIG_MODE = "mig-mode"  # device label, set to "Enabled" only on GPUs whose current MIG mode is enabled


@dataclass(frozen=True)
class Gpu:
    """A GPU NVML answered for, with its place in the PCIe tree (upstream GPUDeviceInfo)."""

    info: GpuInfo
    node_id: int
    pcie_id: str

    @property
    def bus_id(self) -> str:
        return self.info.bus_id


def inventory(backend: NvmlBackend, paths: HostPaths, health: Health) -> list[Gpu] | None:
    """The GPUs to report; None when NVML is unavailable (logged once, never raised).

    Bus ids come from `<sys>/bus/pci/drivers/nvidia` as upstream. **[decision]** When that directory does not
    exist at all (sysfs not mounted into the container, or a snapshot replayed without a sysfs tree) NVML's own
    enumeration is used instead; upstream would report no GPU.
    """
    try:
        backend.init()
    except NvmlError as e:
        health.capabilities["nvml"] = False
        if not os.path.isdir(paths.sys("bus", "pci", "drivers", DRIVER)):
            # No NVIDIA driver bound on this host: nothing is skipped, there are simply no NVIDIA GPUs.
            health.once("nvml-no-driver", logging.INFO, "no NVIDIA driver on this host (NVML: %s): no NVIDIA GPUs",
                        e.name)
            return None
        health.skip("gpu", "nvml-unavailable", backend.name, f"NVML init failed ({e.name}): {e}; no GPUs reported")
        return None
    health.capabilities["nvml"] = True
    if os.path.isdir(paths.sys("bus", "pci", "drivers", DRIVER)):
        bus_ids = pci.driver_devices(paths, DRIVER)
    else:
        try:
            bus_ids = backend.bus_ids()
        except NvmlError as e:
            health.skip("gpu", "nvml-enumeration-failed", backend.name, str(e))
            return []
    gpus = []
    for bus in bus_ids:
        try:
            info = backend.device(bus)
        except NvmlError as e:
            health.skip("gpu", "nvml-device-failed", bus, f"{e.name}: {e}")
            continue
        health.recovered("gpu", "nvml-device-failed", bus)
        # Upstream ParsePCIInfo: NUMA -1 → 0, root complex from the resolved sysfs path.
        gpus.append(Gpu(info, pci.numa_node(paths, bus), pci.pcie_root(paths, bus)))
    return sorted(gpus, key=lambda g: (g.info.minor, g.bus_id))


def model_label(names: Sequence[str]) -> str:
    """Upstream getGPUDriverAndModel: one model only when every name is identical and non-empty; drop the
    "NVIDIA " prefix, spaces → "-" ("NVIDIA A100 SXM4 80GB" → "A100-SXM4-80GB", "Tesla T4" → "Tesla-T4")."""
    if not names or any(n == "" for n in names) or len(set(names)) != 1:
        return ""
    return names[0].removeprefix("NVIDIA ").replace(" ", "-")


def gpu_entry(gpu: Gpu, state: XidHealth | None, now: float) -> DeviceEntry:
    """Upstream buildGPUDevice, plus the MIG label."""
    info = gpu.info
    status = state.status(info.bus_id, now) if state is not None else None
    entry: DeviceEntry = {
        "id": info.uuid,
        "minor": info.minor,
        "type": "gpu",
        "health": status is None or status.healthy,
        "resources": {
            RESOURCE_GPU_CORE: "100",
            RESOURCE_GPU_MEMORY: format_bytes(info.memory_total),
            RESOURCE_GPU_MEMORY_RATIO: "100",
        },
    }
    if info.mig_current:
        entry["labels"] = {LABEL_MIG_MODE: "Enabled"}
    if gpu.node_id >= 0 and gpu.pcie_id and info.bus_id:
        entry["topology"] = topology(gpu.node_id, gpu.pcie_id, info.bus_id)
    if status is not None and not status.healthy:
        # Healthy NVML GPUs carry no condition at all (upstream getGPUDeviceConditions only runs for unhealthy).
        entry["conditions"] = [healthy_condition(False, status.reason, status.message)]
    return entry


def build_device_set(gpus: Sequence[Gpu], driver_version: str | None, *, state: XidHealth | None = None,
                     now: float | None = None, partition_policy: str = POLICY_PREFER) -> DeviceSet:
    """Entries, labels and annotations for discovered GPUs; `driver_version` None = the NVML call failed."""
    if partition_policy not in (POLICY_PREFER, POLICY_HONOR):
        raise InvalidInput(f"GPU partition policy must be {POLICY_PREFER} or {POLICY_HONOR}, got {partition_policy!r}")
    if not gpus:
        return DeviceSet()
    now = time.time() if now is None else now
    devices = [gpu_entry(g, state, now) for g in gpus]
    labels = {LABEL_GPU_VENDOR: VENDOR_NVIDIA}
    # **[quirk]** upstream returns ("", "") when the driver-version call fails, dropping the model label too.
    model = model_label([g.info.name for g in gpus]) if driver_version else ""
    if model:
        labels[LABEL_GPU_MODEL] = model
    if driver_version:
        labels[LABEL_GPU_DRIVER_VERSION] = driver_version
    annotations = {}
    table = table_annotation(partitions([g.info for g in gpus]))
    if table is not None:
        annotations[ANNOTATION_GPU_PARTITIONS] = table
        labels[LABEL_GPU_PARTITION_POLICY] = partition_policy
    return DeviceSet(devices, labels, annotations)


def discover(backend: NvmlBackend, paths: HostPaths, health: Health, *, partition_policy: str = POLICY_PREFER,
             state: XidHealth | None = None, now: float | None = None) -> DeviceSet:
    """One discovery round: an empty DeviceSet when NVML is unavailable; a GPU NVML fails for is skipped."""
    gpus = inventory(backend, paths, health)
    if not gpus:
        return build_device_set([], None, partition_policy=partition_policy)
    try:
        driver: str | None = backend.driver_version()
    except NvmlError as e:
        health.skip("gpu", "nvml-driver-version-failed", backend.name, str(e))
        driver = None
    return build_device_set(gpus, driver, state=state, now=now, partition_policy=partition_policy)
