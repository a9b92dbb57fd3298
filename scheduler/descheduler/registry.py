"""The plugins this program builds, by upstream name (upstream framework/plugins/registry.go), and the ones upstream
has that it does not (refused by name)."""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.descheduler.config.common import ConfigError
from scheduler.descheduler.config.types import DeschedulerConfig
from scheduler.descheduler.interfaces import EXTENSION_POINTS, PluginSpec
from scheduler.descheduler.migration import plugin as migration
from scheduler.descheduler.plugins import defaultevictor
from scheduler.descheduler.plugins.lownodeload import plugin as lownodeload

REGISTRY: dict[str, PluginSpec] = {spec.name: spec for spec in (defaultevictor.SPEC, lownodeload.SPEC, migration.SPEC)}
"""name → spec of every plugin this program builds."""

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


def check_supported(config: DeschedulerConfig) -> None:
    """Refuse, by name and with the supported list, a plugin upstream registers that this program does not build."""
    for i, profile in enumerate(config.profiles):
        for point in EXTENSION_POINTS:
            for name in profile.enabled(point):
                if name in UPSTREAM_ONLY:
                    raise ConfigError(f"profiles[{i}].plugins.{point}: plugin {name!r} is not built by "
                                      f"koord-descheduler; supported: {', '.join(supported())}")
