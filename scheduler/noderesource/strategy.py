"""The colocation strategy of the `slo-controller-config` ConfigMap, defaulted, validated and chosen per node.

Upstream: pkg/util/sloconfig/colocation_config.go (defaults, validity, per-node strategy) and
pkg/slo-controller/config/colocation_cm_event_handler.go (parsing, merging node configs over the cluster's).
"""

from __future__ import annotations

import copy
import json
import logging
from dataclasses import dataclass, field

from apis.core.errors import InvalidInput
from apis.core.labelselector import LabelSelector, selector_or_nothing
from apis.core.objects import JSON, JSONMapping
from apis.core.shape import json_object
from apis.extension.node import (
    ANNOTATION_COLOCATION_STRATEGY,
    LABEL_CPU_RECLAIM_RATIO,
    LABEL_MEMORY_RECLAIM_RATIO,
    LABEL_MID_STATIC_CPU_RESERVED_RATIO,
    LABEL_MID_STATIC_MEMORY_RESERVED_RATIO,
)

log = logging.getLogger(__name__)

CONFIG_NAMESPACE = "koordinator-system"
CONFIG_NAME = "slo-controller-config"
CONFIG_KEY = "colocation-config"
# node labels that override one percentage each (value: a ratio, e.g. "0.7" → 70 %)
RATIO_LABELS = {
    LABEL_CPU_RECLAIM_RATIO: "cpuReclaimThresholdPercent",
    LABEL_MEMORY_RECLAIM_RATIO: "memoryReclaimThresholdPercent",
    LABEL_MID_STATIC_CPU_RESERVED_RATIO: "midStaticCPUReservedPercent",
    LABEL_MID_STATIC_MEMORY_RESERVED_RATIO: "midStaticMemoryReservedPercent",
}

# sloconfig.DefaultColocationStrategy (the fields the node resource calculation reads, plus the metric ones a
# user may set: they are carried along so the ConfigMap round-trips).
DEFAULT_STRATEGY: JSON = {
    "enable": False,
    "metricAggregateDurationSeconds": 300,
    "metricReportIntervalSeconds": 60,
    "metricAggregatePolicy": {"durations": ["5m0s", "10m0s", "30m0s"]},
    "metricMemoryCollectPolicy": "usageWithoutPageCache",
    "cpuReclaimThresholdPercent": 60,
    "cpuCalculatePolicy": "usage",
    "midStaticCPUReservedPercent": 0,
    "midStaticMemoryReservedPercent": 0,
    "memoryReclaimThresholdPercent": 65,
    "memoryCalculatePolicy": "usage",
    "degradeTimeMinutes": 15,
    "updateTimeThresholdSeconds": 300,
    "resourceDiffThreshold": 0.1,
    "midCPUThresholdPercent": 100,
    "midMemoryThresholdPercent": 100,
    "midUnallocatedPercent": 0,
}
_INTS = ("metricAggregateDurationSeconds", "metricReportIntervalSeconds", "cpuReclaimThresholdPercent",
         "midStaticCPUReservedPercent", "midStaticMemoryReservedPercent", "memoryReclaimThresholdPercent",
         "degradeTimeMinutes", "updateTimeThresholdSeconds", "midCPUThresholdPercent", "midMemoryThresholdPercent",
         "midUnallocatedPercent", "batchCPUThresholdPercent", "batchMemoryThresholdPercent")
_STRINGS = ("metricMemoryCollectPolicy", "cpuCalculatePolicy", "memoryCalculatePolicy", "midReclaimMode")
# IsColocationStrategyValid: field → (lowest, highest, lowest excluded)
_BOUNDS: dict[str, tuple[float, float | None, bool]] = {
    "metricAggregateDurationSeconds": (0, None, True), "metricReportIntervalSeconds": (0, None, True),
    "cpuReclaimThresholdPercent": (0, None, False), "midStaticCPUReservedPercent": (0, None, False),
    "memoryReclaimThresholdPercent": (0, None, False), "midStaticMemoryReservedPercent": (0, None, False),
    "degradeTimeMinutes": (0, None, True), "updateTimeThresholdSeconds": (0, None, True),
    "resourceDiffThreshold": (0, None, True), "midCPUThresholdPercent": (0, 100, False),
    "midMemoryThresholdPercent": (0, 100, False), "midUnallocatedPercent": (0, 100, False),
    "batchCPUThresholdPercent": (0, None, False), "batchMemoryThresholdPercent": (0, None, False),
}


class ConfigError(ValueError):
    """The colocation config does not parse or is invalid: the previous one stays (upstream's errorStatus)."""


def _check_types(strategy: JSONMapping, where: str) -> None:
    """What Go's json.Unmarshal into ColocationStrategy would refuse, as one line naming the field."""
    for k in _INTS:
        v = strategy.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise ConfigError(f"{where}{k}: want an integer, got {v!r}")
    v = strategy.get("resourceDiffThreshold")
    if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
        raise ConfigError(f"{where}resourceDiffThreshold: want a number, got {v!r}")
    v = strategy.get("enable")
    if v is not None and not isinstance(v, bool):
        raise ConfigError(f"{where}enable: want true or false, got {v!r}")
    for k in _STRINGS:
        v = strategy.get(k)
        if v is not None and not isinstance(v, str):
            raise ConfigError(f"{where}{k}: want a string, got {v!r}")


def overlay(base: JSONMapping, top: JSONMapping) -> JSON:
    """util.MergeCfg: the fields set (non-null) in `top` replace those of `base`."""
    out = copy.deepcopy(dict(base))
    out.update({k: copy.deepcopy(v) for k, v in top.items() if v is not None})
    return out


def invalid_field(strategy: JSONMapping) -> str | None:
    """The first field out of sloconfig.IsColocationStrategyValid's bounds, as "field=value (want ...)"."""
    for name, (low, high, exclusive) in _BOUNDS.items():
        v = strategy.get(name)
        if v is None:
            continue
        if (v <= low if exclusive else v < low) or (high is not None and v > high):
            want = f"{'>' if exclusive else '>='} {low:g}" + (f" and <= {high:g}" if high is not None else "")
            return f"{name}={v} (want {want})"
    policy = strategy.get("metricMemoryCollectPolicy")
    if policy is not None and not policy:
        return "metricMemoryCollectPolicy is empty"
    return None


@dataclass(frozen=True)
class NodeConfig:
    name: str
    selector: LabelSelector | None  # None matches no node (a nil selector, or one that does not convert)
    strategy: JSON  # already merged over the cluster strategy


@dataclass(frozen=True)
class ColocationConfig:
    strategy: JSON = field(default_factory=lambda: dict(DEFAULT_STRATEGY))
    node_configs: tuple[NodeConfig, ...] = ()

    def for_node(self, node: JSONMapping) -> JSON:
        """sloconfig.GetNodeColocationStrategy: the first matching node config over the cluster strategy, then the
        node's own annotation and ratio labels."""
        meta = node.get("metadata") or {}
        labels = meta.get("labels") or {}
        strategy = self.strategy
        for nc in self.node_configs:
            if nc.selector is not None and nc.selector.matches(labels):
                strategy = nc.strategy
                break
        annotation = (meta.get("annotations") or {}).get(ANNOTATION_COLOCATION_STRATEGY)
        if annotation:
            try:
                own = json.loads(annotation)
                if not isinstance(own, dict):
                    raise ConfigError("not an object")
                _check_types(own, "")
                strategy = overlay(strategy, own)
            except (ValueError, ConfigError) as e:
                log.debug("node %s: annotation %s ignored: %s", meta.get("name"), ANNOTATION_COLOCATION_STRATEGY, e)
        for label, key in RATIO_LABELS.items():
            if label not in labels:
                continue
            try:
                ratio = float(labels[label])
            except (TypeError, ValueError):
                continue
            if ratio >= 0:
                strategy = {**strategy, key: int(ratio * 100)}
        return strategy

    def enabled_for(self, node: JSONMapping) -> bool:
        """Colocation on for this node: the cluster switch and the node's strategy (isColocationCfgDisabled)."""
        return bool(self.strategy.get("enable")) and bool(self.for_node(node).get("enable"))


def parse_config_map(cm: JSONMapping | None) -> ColocationConfig:
    """The colocation config of a ConfigMap (None or no `colocation-config` key: upstream's defaults). A config
    that does not parse or is out of bounds raises ConfigError; an invalid node config falls back to the cluster's
    strategy with a log line, as upstream."""
    text = ((cm or {}).get("data") or {}).get(CONFIG_KEY) if cm is not None else None
    if not text:
        return ColocationConfig()
    try:
        raw = json_object(text, f"{CONFIG_NAMESPACE}/{CONFIG_NAME} {CONFIG_KEY}")
    except InvalidInput as e:
        raise ConfigError(str(e)) from None
    _check_types(raw, f"{CONFIG_KEY}: ")
    cluster = overlay(DEFAULT_STRATEGY, {k: v for k, v in raw.items() if k != "nodeConfigs"})
    bad = invalid_field(cluster)
    if bad:
        raise ConfigError(f"{CONFIG_NAMESPACE}/{CONFIG_NAME} {CONFIG_KEY}: {bad}")
    nodes: list[NodeConfig] = []
    raw_nodes = raw.get("nodeConfigs") or []
    if not isinstance(raw_nodes, list):
        raise ConfigError(f"{CONFIG_KEY}: nodeConfigs: want a list")
    for i, nc in enumerate(raw_nodes):
        if not isinstance(nc, dict):
            raise ConfigError(f"{CONFIG_KEY}: nodeConfigs[{i}]: want an object")
        _check_types(nc, f"{CONFIG_KEY}: nodeConfigs[{i}].")
        name = str(nc.get("name") or f"nodeConfigs[{i}]")
        own = {k: v for k, v in nc.items() if k not in ("name", "nodeSelector")}
        merged = overlay(cluster, own)
        if bad := invalid_field(merged):
            log.warning("colocation node config %s is invalid (%s): the cluster strategy is used for its nodes",
                        name, bad)
            merged = dict(cluster)
        nodes.append(NodeConfig(name, selector_or_nothing(nc.get("nodeSelector")), merged))
    return ColocationConfig(cluster, tuple(nodes))

