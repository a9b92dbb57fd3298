"""`koordinator.sh/blkioQOS`: a pod's blkio throttles and weights per block device."""

from __future__ import annotations

# Upstream: apis/slo/v1alpha1/pod.go (BlkIOQOS).
# The decoder stays with its planner in koordlet/qos until NodeSLO's typed config lands in apis/slo.

ANNOTATION_POD_BLKIO_QOS = "koordinator.sh/blkioQOS"
