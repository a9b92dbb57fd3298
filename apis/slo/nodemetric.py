"""A NodeMetric's status (slo.koordinator.sh/v1alpha1) as its readers use it: when it was updated, the system and
node usage, each pod's usage and priority class. Quantities are ResourceList amounts (cpu in millicores, the rest
in whole units); an entry that does not parse is left out, a map that is not one reads as empty."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from apis.core.errors import InvalidInput
from apis.core.metatime import parse_time
from apis.core.objects import as_object, as_objects
from apis.core.resources import resource_value

API_VERSION = "slo.koordinator.sh/v1alpha1"
KIND = "NodeMetric"

Usage = dict[str, int]


@dataclass(frozen=True)
class PodUsage:
    namespace: str
    name: str
    usage: Usage
    priority: str = ""  # the pod's priority class as the agent reported it (koord-prod, ...; "" when absent)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class NodeMetricStatus:
    """status of a NodeMetric: `has_node_metric` false when status.nodeMetric is null (no report yet)."""

    update_time: float | None
    has_node_metric: bool
    system_usage: Usage = field(default_factory=dict)
    node_usage: Usage = field(default_factory=dict)
    pods: tuple[PodUsage, ...] = ()


def resource_map(value: object) -> Usage:
    """A ResourceMap (`{resources: ResourceList}`) as amounts; unreadable entries left out."""
    out: Usage = {}
    for name, quantity in as_object(as_object(value).get("resources")).items():
        try:
            out[str(name)] = resource_value(str(name), quantity)
        except InvalidInput:
            continue
    return out


def node_metric_status(obj: Mapping[str, Any]) -> NodeMetricStatus:
    status = as_object(obj.get("status"))
    metric = status.get("nodeMetric")
    pods = tuple(PodUsage(str(p.get("namespace") or ""), str(p.get("name") or ""), resource_map(p.get("podUsage")),
                          str(p.get("priority") or ""))
                 for p in as_objects(status.get("podsMetric")))
    return NodeMetricStatus(
        update_time=parse_time(status.get("updateTime")),
        has_node_metric=isinstance(metric, dict),
        system_usage=resource_map(as_object(metric).get("systemUsage")),
        node_usage=resource_map(as_object(metric).get("nodeUsage")),
        pods=pods,
    )
