"""The Device CR's device types (scheduling.koordinator.sh/v1alpha1 DeviceType), the keys of device-allocated."""

from __future__ import annotations

# Upstream: apis/scheduling/v1alpha1/device_types.go. Huawei Ascend and Cambricon cards are `gpu` devices too: the
# node's Device CR says which vendor (label node.koordinator.sh/gpu-vendor).
DEVICE_TYPE_GPU = "gpu"
DEVICE_TYPE_RDMA = "rdma"
DEVICE_TYPE_FPGA = "fpga"
DEVICE_TYPES = (DEVICE_TYPE_GPU, DEVICE_TYPE_RDMA, DEVICE_TYPE_FPGA)
