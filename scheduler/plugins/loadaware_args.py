"""LoadAwareSchedulingArgs: upstream's names, defaults and validation, parsed from a KubeSchedulerConfiguration.

Upstream: pkg/scheduler/apis/config/types.go (LoadAwareSchedulingArgs), v1/defaults.go, validation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from apis.core import godur
from apis.core.errors import InvalidInput
from apis.core.objects import JSON, JSONMapping
from apis.core.resources import CPU, MEMORY

AGGREGATION_TYPES = ("avg", "p50", "p90", "p95", "p99")


@dataclass
class AggregatedArgs:
    usage_thresholds: dict[str, int] = field(default_factory=dict)
    usage_aggregation_type: str = ""
    usage_aggregated_duration: float = 0.0  # seconds; 0 = the longest reported
    score_aggregation_type: str = ""
    score_aggregated_duration: float = 0.0


@dataclass
class LoadAwareArgs:
    """LoadAwareSchedulingArgs with upstream defaults (pkg/scheduler/apis/config/v1/defaults.go)."""

    filter_expired_node_metrics: bool = True
    node_metric_expiration_seconds: int = 180
    enable_schedule_when_node_metrics_expired: bool = False
    resource_weights: dict[str, int] = field(default_factory=dict)
    dominant_resource_weight: int = 0
    usage_thresholds: dict[str, int] = field(default_factory=lambda: {CPU: 65, MEMORY: 95})
    prod_usage_thresholds: dict[str, int] = field(default_factory=dict)
    prod_usage_include_sys: bool = False
    score_according_prod_usage: bool = False
    estimated_scaling_factors: dict[str, int] = field(default_factory=dict)
    estimated_seconds_after_pod_scheduled: int | None = None
    estimated_seconds_after_initialized: int | None = None
    allow_customize_estimation: bool = False
    aggregated: AggregatedArgs | None = None
    supported_resources: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        for k, v in {CPU: 85, MEMORY: 70}.items():
            self.estimated_scaling_factors.setdefault(k, v)
        if not self.resource_weights and self.dominant_resource_weight == 0:
            self.resource_weights = {CPU: 1, MEMORY: 1}
        self.validate()

    def validate(self) -> None:
        if self.node_metric_expiration_seconds <= 0:
            raise InvalidInput("LoadAwareScheduling: nodeMetricExpirationSeconds must be > 0")
        if not 0 <= self.dominant_resource_weight <= 100:
            raise InvalidInput("LoadAwareScheduling: dominantResourceWeight must be in 0..100")
        for r in self.resource_weights:
            if r not in self.estimated_scaling_factors:
                raise InvalidInput(f"LoadAwareScheduling: resourceWeights[{r}] has no estimatedScalingFactors entry")
        for name, thresholds in (("usageThresholds", self.usage_thresholds),
                                 ("prodUsageThresholds", self.prod_usage_thresholds)):
            for r, v in thresholds.items():
                if not 0 <= v <= 100:
                    raise InvalidInput(f"LoadAwareScheduling: {name}[{r}] must be in 0..100")
        agg = self.aggregated
        if agg is not None:
            for t in (agg.usage_aggregation_type, agg.score_aggregation_type):
                if t and t not in AGGREGATION_TYPES:
                    raise InvalidInput(f"LoadAwareScheduling: unknown aggregation type {t!r}")

    @classmethod
    def from_dict(cls, raw: JSONMapping | None) -> LoadAwareArgs:
        """Upstream (camelCase) arg names; absent fields keep their defaults."""
        raw = dict(raw or {})
        known = {"filterExpiredNodeMetrics", "nodeMetricExpirationSeconds", "enableScheduleWhenNodeMetricsExpired",
                 "resourceWeights", "dominantResourceWeight", "usageThresholds", "prodUsageThresholds",
                 "prodUsageIncludeSys", "scoreAccordingProdUsage", "estimatedScalingFactors",
                 "estimatedSecondsAfterPodScheduled", "estimatedSecondsAfterInitialized",
                 "allowCustomizeEstimation", "aggregated", "supportedResources", "apiVersion", "kind"}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise InvalidInput(f"LoadAwareScheduling: unknown args {unknown}")
        kw: JSON = {}
        for arg, attr in (("filterExpiredNodeMetrics", "filter_expired_node_metrics"),
                          ("enableScheduleWhenNodeMetricsExpired", "enable_schedule_when_node_metrics_expired"),
                          ("prodUsageIncludeSys", "prod_usage_include_sys"),
                          ("scoreAccordingProdUsage", "score_according_prod_usage"),
                          ("allowCustomizeEstimation", "allow_customize_estimation")):
            if raw.get(arg) is not None:
                kw[attr] = bool(raw[arg])
        for arg, attr in (("nodeMetricExpirationSeconds", "node_metric_expiration_seconds"),
                          ("dominantResourceWeight", "dominant_resource_weight"),
                          ("estimatedSecondsAfterPodScheduled", "estimated_seconds_after_pod_scheduled"),
                          ("estimatedSecondsAfterInitialized", "estimated_seconds_after_initialized")):
            if raw.get(arg) is not None:
                kw[attr] = _int(arg, raw[arg])
        for arg, attr in (("resourceWeights", "resource_weights"), ("usageThresholds", "usage_thresholds"),
                          ("prodUsageThresholds", "prod_usage_thresholds"),
                          ("estimatedScalingFactors", "estimated_scaling_factors")):
            if raw.get(arg) is not None:
                kw[attr] = int_map(arg, raw[arg])
        if raw.get("supportedResources") is not None:
            kw["supported_resources"] = [str(r) for r in raw["supportedResources"]]
        if raw.get("aggregated") is not None:
            a = raw["aggregated"]
            if not isinstance(a, Mapping):
                raise InvalidInput("LoadAwareScheduling: aggregated must be an object")
            kw["aggregated"] = AggregatedArgs(
                usage_thresholds=int_map("aggregated.usageThresholds", a.get("usageThresholds") or {}),
                usage_aggregation_type=str(a.get("usageAggregationType") or ""),
                usage_aggregated_duration=parse_duration(a.get("usageAggregatedDuration")),
                score_aggregation_type=str(a.get("scoreAggregationType") or ""),
                score_aggregated_duration=parse_duration(a.get("scoreAggregatedDuration")))
        return cls(**kw)


def _int(name: str, v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise InvalidInput(f"LoadAwareScheduling: {name} must be an integer, got {v!r}")
    return int(v)


def int_map(name: str, v: object) -> dict[str, int]:
    """A resource → integer map (thresholds, weights, factors), or InvalidInput naming the field."""
    if not isinstance(v, Mapping):
        raise InvalidInput(f"LoadAwareScheduling: {name} must be a map of resource → integer")
    return {str(k): _int(f"{name}[{k}]", x) for k, x in v.items()}


def parse_duration(v: object) -> float:
    """Seconds from a Go duration string or a number; absent/empty is 0 (the longest reported window)."""
    if v is None or v == "":
        return 0.0
    if isinstance(v, int | float) and not isinstance(v, bool):
        return float(v)
    return godur.parse(str(v))
