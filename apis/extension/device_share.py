"""Device sharing's labels and annotations: the GPU facts koordlet reports and the hints koord-scheduler reads."""

from __future__ import annotations

# Upstream: apis/extension/device_share.go, apis/extension/constants.go.

# Device CR (and node) labels koordlet writes
LABEL_GPU_VENDOR = "node.koordinator.sh/gpu-vendor"  # nvidia, huawei, cambricon, metax
LABEL_GPU_MODEL = "node.koordinator.sh/gpu-model"
LABEL_GPU_DRIVER_VERSION = "node.koordinator.sh/gpu-driver-version"
LABEL_GPU_PARTITION_POLICY = "node.koordinator.sh/gpu-partition-policy"  # Prefer or Honor
LABEL_SECONDARY_DEVICE_WELL_PLANNED = "node.koordinator.sh/secondary-device-well-planned"
GPU_LABELS = (LABEL_GPU_VENDOR, LABEL_GPU_MODEL, LABEL_GPU_DRIVER_VERSION)  # copied from the Device to its node
# Device CR annotation koordlet writes: the NVLink/HCCS GPU groups allocated together
ANNOTATION_GPU_PARTITIONS = "scheduling.koordinator.sh/gpu-partitions"

# pod label: which GPU isolation the pod asks for (HAMi-core)
LABEL_GPU_ISOLATION_PROVIDER = "koordinator.sh/gpu-isolation-provider"
# pod annotations the scheduler reads
ANNOTATION_DEVICE_ALLOCATE_HINT = "scheduling.koordinator.sh/device-allocate-hint"
ANNOTATION_DEVICE_JOINT_ALLOCATE = "scheduling.koordinator.sh/device-joint-allocate"
ANNOTATION_GPU_PARTITION_SPEC = "scheduling.koordinator.sh/gpu-partition-spec"
# pod annotations the scheduler writes for device plugins besides device-allocated
ANNOTATION_BIND_TIMESTAMP = "scheduling.koordinator.sh/bind-timestamp"
ANNOTATION_GPU_MINORS = "scheduling.koordinator.sh/gpu-minors"
# MetaX's device plugin: the pod's GPUs/sGPUs as [[{"uuid", "compute", "vRam" (MiB)}]] (one list per container; the
# scheduler writes one), and the node lock (HAMi's key, adopted by MetaX) held until the plugin has read it
ANNOTATION_METAX_GPU_DEVICES_ALLOCATED = "metax-tech.com/gpu-devices-allocated"
ANNOTATION_HAMI_NODE_LOCK = "hami.io/mutex.lock"

# Device CR entry labels koordlet writes for an RDMA NIC (its PF) and, agreed over its VFs, the VFs' settings
LABEL_RDMA_NETDEV = "node.koordinator.sh/rdma-netdev"
LABEL_RDMA_LINK_STATE = "node.koordinator.sh/rdma-link-state"
LABEL_RDMA_VF_MAC = "node.koordinator.sh/rdma-vf-mac"
LABEL_RDMA_VF_VLAN = "node.koordinator.sh/rdma-vf-vlan"
LABEL_RDMA_VF_TRUST = "node.koordinator.sh/rdma-vf-trust"
LABEL_RDMA_VF_SPOOFCHK = "node.koordinator.sh/rdma-vf-spoofchk"
LABEL_RDMA_VF_LINK_STATE = "node.koordinator.sh/rdma-vf-link-state"
