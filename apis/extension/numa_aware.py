"""NUMA-aware scheduling's names: the NodeResourceTopology annotations koordlet writes and koord-sched reads, the
node labels choosing a NUMA or CPU bind policy, and the pod annotations asking for one."""

from __future__ import annotations

# Upstream: apis/extension/numa_aware.go, apis/extension/node_reservation.go (enable-numa-reservation).

# NodeResourceTopology annotations (koordlet writes them)
ANNOTATION_CPU_TOPOLOGY = "node.koordinator.sh/cpu-topology"
ANNOTATION_CPU_SHARED_POOLS = "node.koordinator.sh/cpu-shared-pools"
ANNOTATION_BE_CPU_SHARED_POOLS = "node.koordinator.sh/be-cpu-shared-pools"
ANNOTATION_POD_CPU_ALLOCS = "node.koordinator.sh/pod-cpu-allocs"
ANNOTATION_CPU_BASIC_INFO = "node.koordinator.sh/cpu-basic-info"
ANNOTATION_KUBELET_CPU_MANAGER_POLICY = "kubelet.koordinator.sh/cpu-manager-policy"

# node labels
LABEL_NUMA_TOPOLOGY_POLICY = "node.koordinator.sh/numa-topology-policy"
LABEL_CPU_BIND_POLICY = "node.koordinator.sh/cpu-bind-policy"
LABEL_ENABLE_NUMA_RESERVATION = "node.koordinator.sh/enable-numa-reservation"

# pod annotations koord-sched reads
ANNOTATION_NUMA_TOPOLOGY_SPEC = "scheduling.koordinator.sh/numa-topology-spec"
ANNOTATION_RESOURCE_SPEC = "scheduling.koordinator.sh/resource-spec"
