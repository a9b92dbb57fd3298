"""`koordinator.sh/memoryQOS`: a pod's memory QoS policy and values over its class's NodeSLO."""

from __future__ import annotations

# Upstream: apis/slo/v1alpha1/pod.go (PodMemoryQOSConfig).
# The decoder stays with its planner in koordlet/qos until NodeSLO's typed config lands in apis/slo.

ANNOTATION_POD_MEMORY_QOS = "koordinator.sh/memoryQOS"
