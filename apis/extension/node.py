"""Node annotations and labels Koordinator's components exchange: reserved resources, raw allocatable, CPU
normalization and the per-node colocation strategy."""

from __future__ import annotations

# Upstream: apis/extension/node_reservation.go, apis/extension/system_qos.go,
# apis/extension/node_resource_amplification.go, apis/extension/node_colocation.go.

# resources kept out of the pods' reach: {"resources": {...}, "reservedCPUs": "0-1", "applyPolicy": ...}
ANNOTATION_NODE_RESERVATION = "node.koordinator.sh/reservation"
# CPUs for SYSTEM QoS pods: {"cpuset": "0-1", "cpusetExclusive": true}
ANNOTATION_SYSTEM_QOS_RESOURCE = "node.koordinator.sh/system-qos-resource"
# the allocatable before resource amplification, as a ResourceList
ANNOTATION_NODE_RAW_ALLOCATABLE = "node.koordinator.sh/raw-allocatable"
ANNOTATION_CPU_NORMALIZATION_RATIO = "node.koordinator.sh/cpu-normalization-ratio"

# the node's own colocation strategy (a JSON ColocationStrategy) and the labels overriding single thresholds
ANNOTATION_COLOCATION_STRATEGY = "node.koordinator.sh/colocation-strategy"
LABEL_CPU_RECLAIM_RATIO = "node.koordinator.sh/cpu-reclaim-ratio"
LABEL_MEMORY_RECLAIM_RATIO = "node.koordinator.sh/memory-reclaim-ratio"
LABEL_MID_STATIC_CPU_RESERVED_RATIO = "node.koordinator.sh/mid-static-cpu-reserved-ratio"
LABEL_MID_STATIC_MEMORY_RESERVED_RATIO = "node.koordinator.sh/mid-static-memory-reserved-ratio"
