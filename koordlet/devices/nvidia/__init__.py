"""NVIDIA GPUs through NVML (live pynvml or a replayed snapshot): inventory, health, NVLink partitions, usage."""

from koordlet.devices.nvidia.backend import GpuInfo, NvmlBackend, NvmlError, PynvmlBackend
from koordlet.devices.nvidia.discovery import Gpu, build_device_set, discover, inventory
from koordlet.devices.nvidia.health import XidHealth, XidWatcher
from koordlet.devices.nvidia.snapshot import (
    SNAPSHOT_FORMAT,
    SnapshotBackend,
    dump_snapshot,
    load_snapshot,
    write_snapshot,
)
from koordlet.devices.nvidia.usage import GpuUsageCollector

__all__ = [
    "SNAPSHOT_FORMAT",
    "Gpu",
    "GpuInfo",
    "GpuUsageCollector",
    "NvmlBackend",
    "NvmlError",
    "PynvmlBackend",
    "SnapshotBackend",
    "XidHealth",
    "XidWatcher",
    "build_device_set",
    "discover",
    "dump_snapshot",
    "inventory",
    "load_snapshot",
    "write_snapshot",
]
