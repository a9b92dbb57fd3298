"""The chart's koord-scheduler configuration (fixtures/upstream-chart, copied in seeds/chart) as a test's start.

A file's profile is merged onto kube-scheduler's default plugins, so Koordinator's plugins run only where the file
names them: a test that configures them starts from the chart's lists, as a user editing the chart's ConfigMap does.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).parent / "seeds" / "chart"
KEY = "koord-scheduler-config"  # the ConfigMap's data key holding the KubeSchedulerConfiguration


def chart_file(version: str = "1.7.0") -> Path:
    return CHART / f"koord-scheduler-config-v{version}.yaml"


def chart_config(version: str = "1.7.0", *, enable: dict[str, list[Any]] | None = None,
                 plugins: dict[str, Any] | None = None, plugin_config: list[dict[str, Any]] | None = None,
                 **profile: Any) -> dict[str, Any]:
    """The chart's KubeSchedulerConfiguration; `enable`: names (or `{name, weight}`) appended to a point's enabled
    list; `plugins`: whole point sections replaced (None removes one); `plugin_config`: entries replacing the chart's
    of the same name, or added; `profile`: other profile fields set."""
    doc: dict[str, Any] = yaml.safe_load(yaml.safe_load(chart_file(version).read_text())["data"][KEY])
    prof = doc["profiles"][0]
    points = prof["plugins"]
    for point, names in (enable or {}).items():
        section = points.setdefault(point, {})
        section.setdefault("enabled", []).extend(n if isinstance(n, dict) else {"name": n} for n in names)
    for point, section in (plugins or {}).items():
        if section is None:
            points.pop(point, None)
        else:
            points[point] = copy.deepcopy(section)
    for entry in plugin_config or []:
        kept = [pc for pc in prof.get("pluginConfig", []) if pc["name"] != entry["name"]]
        prof["pluginConfig"] = [*kept, copy.deepcopy(entry)]
    prof.update(copy.deepcopy(profile))
    return doc


def without(doc: dict[str, Any], point: str, name: str) -> dict[str, Any]:
    """`doc` with `name` taken out of `point`'s enabled list (of the first profile)."""
    section = doc["profiles"][0]["plugins"][point]
    section["enabled"] = [e for e in section.get("enabled", []) if e["name"] != name]
    return doc


def in_chart(snippet: dict[str, Any], version: str = "1.7.0") -> dict[str, Any]:
    """A release text's KubeSchedulerConfiguration snippet (its first profile) put into the chart's configuration,
    as the text means it: its plugin sections replace the chart's at those points, its pluginConfig entries the
    chart's of the same name."""
    prof = snippet["profiles"][0]
    return chart_config(version, plugins=prof.get("plugins") or {}, plugin_config=prof.get("pluginConfig") or [])
