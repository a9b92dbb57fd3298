"""LoadAware scheduling's annotations: a node's own usage thresholds and a pod's load estimation settings."""

from __future__ import annotations

# Upstream: apis/extension/load_aware.go.

ANNOTATION_USAGE_THRESHOLDS = "scheduling.koordinator.sh/usage-thresholds"
ANNOTATION_LOAD_ESTIMATED_SCALING_FACTORS = "scheduling.koordinator.sh/load-estimated-scaling-factors"
ANNOTATION_LOAD_ESTIMATED_SECONDS_AFTER_POD_SCHEDULED = (
    "scheduling.koordinator.sh/load-estimated-seconds-after-pod-scheduled")
ANNOTATION_LOAD_ESTIMATED_SECONDS_AFTER_INITIALIZED = (
    "scheduling.koordinator.sh/load-estimated-seconds-after-initialized")
