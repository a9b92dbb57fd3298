"""The plugins this program builds, by upstream name (upstream framework/plugins/registry.go), and the ones upstream
has that it does not (refused by name)."""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.descheduler.interfaces import PluginSpec

REGISTRY: dict[str, PluginSpec] = {}
"""name → spec; each plugin module's spec is added below as it is built."""

UPSTREAM_ONLY = ("CustomPriority", "FragmentationAware", "ScaleDownBinPack", "HighNodeUtilization",
                 "LowNodeUtilization", "PodLifeTime", "RemoveFailedPods", "RemoveDuplicates",
                 "RemovePodsHavingTooManyRestarts", "RemovePodsViolatingInterPodAntiAffinity",
                 "RemovePodsViolatingNodeAffinity", "RemovePodsViolatingNodeTaints",
                 "RemovePodsViolatingTopologySpreadConstraint")
"""Registered upstream, not built here: a configuration enabling one is refused with the supported list."""


def registry() -> Mapping[str, PluginSpec]:
    return REGISTRY


def supported() -> list[str]:
    return sorted(REGISTRY)
