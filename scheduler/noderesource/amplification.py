"""koord-manager's ResourceAmplification plugin: each node's `resource-amplification-ratio` annotation from the
`resource-amplification-config` of `slo-controller-config` and the node's CPU normalization ratio.

Upstream: pkg/slo-controller/noderesource/plugins/resourceamplification (plugin.go Calculate/Prepare/NeedSyncMeta,
configmap_event_handler.go). The cpu ratio written is the configured one (1 when unset or disabled) × the node's
`node.koordinator.sh/cpu-normalization-ratio`: a node whose CPUs are normalised faster offers more cpu.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from apis.core.errors import InvalidInput
from apis.core.labelselector import LabelSelector, selector_or_nothing
from apis.core.objects import JSONMapping
from apis.core.resources import CPU
from apis.core.shape import json_object
from apis.extension.node import ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO, cpu_normalization_ratio
from scheduler.noderesource.strategy import CONFIG_NAME, CONFIG_NAMESPACE, ConfigError

AMPLIFICATION_KEY = "resource-amplification-config"


@dataclass(frozen=True)
class AmplificationStrategy:
    enable: bool = False
    ratios: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class AmplificationConfig:
    strategy: AmplificationStrategy = field(default_factory=AmplificationStrategy)
    node_configs: tuple[tuple[LabelSelector | None, AmplificationStrategy], ...] = ()  # (nodeSelector, merged)

    def for_node(self, node: JSONMapping) -> AmplificationStrategy:
        """GetStrategyCopy: the first node config whose selector matches, else the cluster's."""
        labels = (node.get("metadata") or {}).get("labels") or {}
        for selector, strategy in self.node_configs:
            if selector is not None and selector.matches(labels):
                return strategy
        return self.strategy


def _strategy(raw: JSONMapping, base: AmplificationStrategy, where: str) -> AmplificationStrategy:
    """util.MergeCfg of a ResourceAmplificationStrategy over `base`: `enable` replaces, ratios merge by resource."""
    enable = raw.get("enable")
    if enable is not None and not isinstance(enable, bool):
        raise ConfigError(f"{where}enable: want true or false, got {enable!r}")
    ratios = raw.get("resourceAmplificationRatio")
    if ratios is not None and not isinstance(ratios, dict):
        raise ConfigError(f"{where}resourceAmplificationRatio: want an object of numbers")
    merged = dict(base.ratios)
    for name, ratio in (ratios or {}).items():
        if isinstance(ratio, bool) or not isinstance(ratio, int | float):
            raise ConfigError(f"{where}resourceAmplificationRatio.{name}: want a number, got {ratio!r}")
        merged[str(name)] = float(ratio)
    return AmplificationStrategy(base.enable if enable is None else enable, merged)


def parse_amplification_config(cm: JSONMapping | None) -> AmplificationConfig:
    """The config of a ConfigMap (None, or no `resource-amplification-config` key: disabled); ConfigError when it
    does not parse (upstream keeps the previous config)."""
    text = ((cm or {}).get("data") or {}).get(AMPLIFICATION_KEY)
    if not text:
        return AmplificationConfig()
    where = f"{CONFIG_NAMESPACE}/{CONFIG_NAME} {AMPLIFICATION_KEY}: "
    try:
        raw = json_object(text, where[:-2])
    except InvalidInput as e:
        raise ConfigError(str(e)) from None
    cluster = _strategy(raw, AmplificationStrategy(), where)
    nodes = raw.get("nodeConfigs") or []
    if not isinstance(nodes, list):
        raise ConfigError(f"{where}nodeConfigs: want a list")
    out: list[tuple[LabelSelector | None, AmplificationStrategy]] = []
    for i, nc in enumerate(nodes):
        if not isinstance(nc, dict):
            raise ConfigError(f"{where}nodeConfigs[{i}]: want an object")
        out.append((selector_or_nothing(nc.get("nodeSelector")), _strategy(nc, cluster, f"{where}nodeConfigs[{i}].")))
    return AmplificationConfig(cluster, tuple(out))


def desired_ratios(config: AmplificationConfig, node: JSONMapping) -> dict[str, float]:
    """Calculate: the configured ratios when enabled, the cpu one × the CPU normalization ratio (kept when > 1).
    ValueError (one line) for a malformed normalization ratio or a ratio below 1."""
    strategy = config.for_node(node)
    ratios = dict(strategy.ratios) if strategy.enable else {}
    cpu = ratios.get(CPU, 0.0)
    cpu = cpu if cpu > 0 else 1.0
    normalization, error = cpu_normalization_ratio(dict(node))
    if error is not None:
        raise ValueError(f"failed to get cpu normalization ratio: {error}")
    if normalization is not None and normalization > 0:
        cpu *= normalization
    if cpu > 1:
        ratios[CPU] = cpu
    for name, ratio in sorted(ratios.items()):
        if ratio < 1:
            raise ValueError(f"ratio with resource type {name} and value {ratio:g} is invalid")
    return ratios


def encode_ratios(ratios: Mapping[str, float]) -> str:
    """json.Marshal of map[ResourceName]Ratio: keys sorted, each Ratio with 2 decimals (Ratio.MarshalJSON)."""
    return "{" + ",".join(f"{json.dumps(name)}:{ratio:.2f}" for name, ratio in sorted(ratios.items())) + "}"


def desired_annotation(config: AmplificationConfig, node: JSONMapping) -> str | None:
    """The annotation value koord-manager writes (None: it removes the annotation); ValueError as desired_ratios."""
    ratios = desired_ratios(config, node)
    return encode_ratios(ratios) if ratios else None


def annotation_patch(config: AmplificationConfig, node: JSONMapping) -> dict[str, str | None] | None:
    """NeedSyncMeta: the merge-patch annotations when the node's annotation should change, else None."""
    current = ((node.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO)
    want = desired_annotation(config, node)
    if (current or None) == want:
        return None
    return {ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO: want}
