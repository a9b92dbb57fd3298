"""Koordinator's extended resource names (batch, mid, devices) and the deprecated names they replace."""

from __future__ import annotations

from collections.abc import Mapping

# Upstream: apis/extension/resource.go (batch and mid resources), apis/extension/device_share.go (device resources),
# apis/extension/deprecated.go (DeprecatedDeviceResourcesMapper).

# the priority classes' overcommitted resources: cpu in milli-cores ("1000" is one core), memory in bytes
BATCH_CPU = "kubernetes.io/batch-cpu"
BATCH_MEMORY = "kubernetes.io/batch-memory"
MID_CPU = "kubernetes.io/mid-cpu"
MID_MEMORY = "kubernetes.io/mid-memory"
BATCH_RESOURCES = (BATCH_CPU, BATCH_MEMORY)
MID_RESOURCES = (MID_CPU, MID_MEMORY)

RESOURCE_GPU = "koordinator.sh/gpu"  # 100 per whole GPU: gpu-core and gpu-memory-ratio together
RESOURCE_GPU_SHARED = "koordinator.sh/gpu.shared"  # how many pods share one GPU (HAMi)
RESOURCE_GPU_CORE = "koordinator.sh/gpu-core"
RESOURCE_GPU_MEMORY = "koordinator.sh/gpu-memory"
RESOURCE_GPU_MEMORY_RATIO = "koordinator.sh/gpu-memory-ratio"
RESOURCE_RDMA = "koordinator.sh/rdma"
RESOURCE_FPGA = "koordinator.sh/fpga"
# vendors' device-plugin resources the device share reads as GPUs
RESOURCE_NVIDIA_GPU = "nvidia.com/gpu"
RESOURCE_AMD_GPU = "amd.com/gpu"
RESOURCE_HYGON_DCU = "dcu.com/gpu"
RESOURCE_NPU_CORE = "huawei.com/npu-core"
RESOURCE_NPU_CPU = "huawei.com/npu-cpu"
RESOURCE_NPU_DVPP = "huawei.com/npu-dvpp"

# v0.7's `kubernetes.io/` device names and the koordinator.sh names that replace them (upstream's informer
# transformers rename them in pods' containers, nodes' allocatable and Device CRs when the new name is absent)
DEPRECATED_DEVICE_RESOURCES: Mapping[str, str] = {
    "kubernetes.io/rdma": RESOURCE_RDMA,
    "kubernetes.io/fpga": RESOURCE_FPGA,
    "kubernetes.io/gpu": RESOURCE_GPU,
    "kubernetes.io/gpu-core": RESOURCE_GPU_CORE,
    "kubernetes.io/gpu-memory": RESOURCE_GPU_MEMORY,
    "kubernetes.io/gpu-memory-ratio": RESOURCE_GPU_MEMORY_RATIO,
}
# **[decision]** the v1.6 release text's HAMi pod asks `koordinator.sh/gpu-shared`; upstream ignores that name (and
# kubelet drops extended resources a node does not have), so the GPU would not be shared: read as gpu.shared.
MISSPELLED_DEVICE_RESOURCES: Mapping[str, str] = {"koordinator.sh/gpu-shared": RESOURCE_GPU_SHARED}

# pod annotation: each container's batch resources, {"containers": {"<name>": {"requests": ..., "limits": ...}}}
ANNOTATION_EXTENDED_RESOURCE_SPEC = "node.koordinator.sh/extended-resource-spec"
