"""`koordinator.sh/cpuBurst`: a pod's CPU burst policy and percentages over the NodeSLO's cpuBurstStrategy."""

from __future__ import annotations

# Upstream: apis/slo/v1alpha1/pod.go (CPUBurstConfig).
# The decoder stays with its planner in koordlet/qos until NodeSLO's typed config lands in apis/slo.

ANNOTATION_POD_CPU_BURST = "koordinator.sh/cpuBurst"
