"""Kubernetes' pod QoS class names (core/v1 PodQOSClass)."""

from __future__ import annotations

K8S_GUARANTEED = "Guaranteed"
K8S_BURSTABLE = "Burstable"
K8S_BEST_EFFORT = "BestEffort"
K8S_QOS_CLASSES = (K8S_GUARANTEED, K8S_BURSTABLE, K8S_BEST_EFFORT)
