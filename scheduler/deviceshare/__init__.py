"""DeviceShare: GPU/RDMA/FPGA request normalisation, per-minor accounting, allocation and the DeviceShare plugin."""

from scheduler.deviceshare.allocator import LEAST_ALLOCATED, MOST_ALLOCATED, Allocator, Scorer
from scheduler.deviceshare.plugin import DeviceShare
from scheduler.deviceshare.requests import InvalidDeviceRequest, canonical_requests, gpu_requirement, plan_pod
from scheduler.deviceshare.state import (
    Allocation,
    DeviceState,
    NodeDeviceState,
    encode_allocations,
    read_allocations,
)

__all__ = [
    "LEAST_ALLOCATED",
    "MOST_ALLOCATED",
    "Allocation",
    "Allocator",
    "DeviceShare",
    "DeviceState",
    "InvalidDeviceRequest",
    "NodeDeviceState",
    "Scorer",
    "canonical_requests",
    "encode_allocations",
    "gpu_requirement",
    "plan_pod",
    "read_allocations",
]
