"""`koordinator.sh/cpuQOS`: a pod's CPU QoS (group identity, sched idle, core expeller) over its class's NodeSLO."""

from __future__ import annotations

# Upstream: apis/slo/v1alpha1/pod.go (CPUQOSCfg).
# The decoder stays with its planner in koordlet/qos until NodeSLO's typed config lands in apis/slo.

ANNOTATION_POD_CPU_QOS = "koordinator.sh/cpuQOS"
