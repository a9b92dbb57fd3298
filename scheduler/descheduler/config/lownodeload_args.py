"""LowNodeLoadArgs (descheduler/v1alpha2): decoded strictly, defaulted, converted to node pools, validated.

Upstream: apis/config/v1alpha2/types_loadaware.go (fields), defaults.go (SetDefaults_LowNodeLoadArgs and its node
pools), conversion_plugins.go (the top-level thresholds become the pool `__default_node_pool__`, prepended),
validation/validation_loadaware.go (checked on the converted args: the default pool is nodePools[0]).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from apis.core.labelselector import LabelSelector
from scheduler.descheduler.config.common import (
    INT32,
    INT64,
    UINT32,
    ConfigError,
    Namespaces,
    Problems,
    args_object,
    boolean,
    check_keys,
    duration,
    integer,
    mapping,
    namespaces,
    percentages,
    selector,
    string,
    weights,
)

KIND = "LowNodeLoadArgs"
DEFAULT_POOL = "__default_node_pool__"
DEFAULT_EXPIRATION_SECONDS = 180
DEFAULT_DETECTOR_CACHE_TIMEOUT = 300.0
DEFAULT_ANOMALY_TIMEOUT = 60.0
DEFAULT_ABNORMALITIES = 5
DEFAULT_NORMALITIES = 3

Thresholds = dict[str, float]

_FIELDS = ("paused", "dryRun", "numberOfNodes", "nodeMetricExpirationSeconds", "evictableNamespaces",
           "nodeSelector", "podSelectors", "nodeFit", "useDeviationThresholds", "highThresholds", "lowThresholds",
           "prodHighThresholds", "prodLowThresholds", "resourceWeights", "anomalyCondition",
           "detectorCacheTimeout", "nodePools")
_POOL_FIELDS = ("name", "nodeSelector", "useDeviationThresholds", "highThresholds", "lowThresholds",
                "prodHighThresholds", "prodLowThresholds", "resourceWeights", "anomalyCondition")
_THRESHOLDS = ("highThresholds", "lowThresholds", "prodHighThresholds", "prodLowThresholds")


@dataclass
class AnomalyCondition:
    """LoadAnomalyCondition; timeout None is Go's nil (the detector then waits 60s)."""

    timeout: float | None = DEFAULT_ANOMALY_TIMEOUT
    consecutive_abnormalities: int = DEFAULT_ABNORMALITIES
    consecutive_normalities: int = DEFAULT_NORMALITIES


@dataclass
class PodSelector:
    name: str
    selector: LabelSelector | None


@dataclass
class NodePool:
    """LowNodeLoadNodePool after defaulting. A threshold map is None where Go's is nil; an inherited map is the
    same dict object as the top level's (upstream shares it, and the plugin completes it in place, §3.2)."""

    name: str = ""
    node_selector: LabelSelector | None = None
    use_deviation_thresholds: bool = False
    high: Thresholds | None = None
    low: Thresholds | None = None
    prod_high: Thresholds | None = None
    prod_low: Thresholds | None = None
    resource_weights: dict[str, int] = field(default_factory=dict)
    anomaly: AnomalyCondition = field(default_factory=AnomalyCondition)


@dataclass
class LowNodeLoadArgs:
    """The converted args the plugin runs on: `node_pools[0]` is the default pool built from the top level."""

    paused: bool = False
    dry_run: bool = False
    number_of_nodes: int = 0
    node_metric_expiration_seconds: int = DEFAULT_EXPIRATION_SECONDS
    evictable_namespaces: Namespaces | None = None
    pod_selectors: list[PodSelector] = field(default_factory=list)
    node_fit: bool = True
    detector_cache_timeout: float = DEFAULT_DETECTOR_CACHE_TIMEOUT
    node_pools: list[NodePool] = field(default_factory=list)


def default_args() -> LowNodeLoadArgs:
    """The args of an enabled LowNodeLoad without a pluginConfig entry."""
    return decode_lownodeload_args({}, "args")


def decode_lownodeload_args(raw: object, where: str) -> LowNodeLoadArgs:
    m = args_object(raw, where, _FIELDS)
    top = _pool_fields(m, where)
    expiration = integer(m, "nodeMetricExpirationSeconds", where, INT64)
    anomaly = m.get("anomalyCondition")
    args = LowNodeLoadArgs(
        paused=boolean(m, "paused", where),
        dry_run=boolean(m, "dryRun", where),
        number_of_nodes=integer(m, "numberOfNodes", where, INT32) or 0,
        node_metric_expiration_seconds=DEFAULT_EXPIRATION_SECONDS if expiration is None else expiration,
        evictable_namespaces=namespaces(m, "evictableNamespaces", where),
        pod_selectors=_pod_selectors(m, where),
        node_fit=boolean(m, "nodeFit", where, True),
    )
    timeout = duration(m, "detectorCacheTimeout", where)
    args.detector_cache_timeout = DEFAULT_DETECTOR_CACHE_TIMEOUT if timeout is None else timeout
    # SetDefaults_LowNodeLoadArgs: weights 1 for cpu, memory and each top-level low/high key; a user weight <= 0
    # on those keys becomes 1.
    defaults = {"cpu": 1, "memory": 1, **dict.fromkeys(top.low or {}, 1), **dict.fromkeys(top.high or {}, 1)}
    given = weights(m, "resourceWeights", where)
    if given is None:
        top.resource_weights = defaults
    else:
        top.resource_weights = {**given, **{r: w for r, w in defaults.items() if given.get(r, 0) <= 0}}
    top.anomaly = _default_anomaly(anomaly, where)
    top.name = DEFAULT_POOL
    pools = [top]
    raw_pools = m.get("nodePools")
    if raw_pools is not None:
        if not isinstance(raw_pools, list):
            raise ConfigError(f"{where}.nodePools: must be a list, got {raw_pools!r}")
        for i, rp in enumerate(raw_pools):
            pools.append(_node_pool(rp, f"{where}.nodePools[{i}]", top, m))
    args.node_pools = pools
    validate(args, where)
    return args


def _pool_fields(m: Mapping[str, object], where: str) -> NodePool:
    pool = NodePool(node_selector=selector(m, "nodeSelector", where),
                    use_deviation_thresholds=boolean(m, "useDeviationThresholds", where))
    pool.high = percentages(m, "highThresholds", where)
    pool.low = percentages(m, "lowThresholds", where)
    pool.prod_high = percentages(m, "prodHighThresholds", where)
    pool.prod_low = percentages(m, "prodLowThresholds", where)
    return pool


def _node_pool(raw: object, where: str, top: NodePool, top_raw: Mapping[str, object]) -> NodePool:
    """SetDefaults_LowNodeLoadNodePools: a nil threshold map, nil weights and a nil anomaly condition come from
    the top level; zero anomaly counts inherit the top level's."""
    m = mapping(raw, where)
    check_keys(m, _POOL_FIELDS, where)
    pool = NodePool(name=string(m, "name", where), node_selector=selector(m, "nodeSelector", where),
                    use_deviation_thresholds=boolean(m, "useDeviationThresholds", where))
    for key, attr in zip(_THRESHOLDS, ("high", "low", "prod_high", "prod_low"), strict=True):
        own = percentages(m, key, where)
        # a map is shared with the top level when inherited, as upstream's (it is mutated in place, §3.2)
        setattr(pool, attr, own if own is not None else getattr(top, attr))
    own_weights = weights(m, "resourceWeights", where)
    pool.resource_weights = own_weights if own_weights is not None else top.resource_weights
    if m.get("anomalyCondition") is None:
        pool.anomaly = top.anomaly
    else:
        own_anomaly = _anomaly(m["anomalyCondition"], f"{where}.anomalyCondition")
        if own_anomaly.consecutive_abnormalities == 0:
            own_anomaly.consecutive_abnormalities = top.anomaly.consecutive_abnormalities
        if own_anomaly.consecutive_normalities == 0:
            own_anomaly.consecutive_normalities = top.anomaly.consecutive_normalities
        pool.anomaly = own_anomaly
    return pool


def _anomaly(raw: object, where: str) -> AnomalyCondition:
    m = mapping(raw, where)
    check_keys(m, ("timeout", "consecutiveAbnormalities", "consecutiveNormalities"), where)
    return AnomalyCondition(duration(m, "timeout", where),
                            integer(m, "consecutiveAbnormalities", where, UINT32) or 0,
                            integer(m, "consecutiveNormalities", where, UINT32) or 0)


def _default_anomaly(raw: object, where: str) -> AnomalyCondition:
    """Absent: {1m, 5, 3}. Given: abnormalities 0 → 5, *else if* normalities 0 → 3 (upstream's else-if: both 0
    leaves normalities 0, which validation then refuses)."""
    if raw is None:
        return AnomalyCondition()
    a = _anomaly(raw, f"{where}.anomalyCondition")
    if a.consecutive_abnormalities == 0:
        a.consecutive_abnormalities = DEFAULT_ABNORMALITIES
    elif a.consecutive_normalities == 0:
        a.consecutive_normalities = DEFAULT_NORMALITIES
    return a


def _pod_selectors(m: Mapping[str, object], where: str) -> list[PodSelector]:
    v = m.get("podSelectors")
    if v is None:
        return []
    if not isinstance(v, list):
        raise ConfigError(f"{where}.podSelectors: must be a list, got {v!r}")
    out = []
    for i, item in enumerate(v):
        at = f"{where}.podSelectors[{i}]"
        sm = mapping(item, at)
        check_keys(sm, ("name", "selector"), at)
        out.append(PodSelector(string(sm, "name", at), selector(sm, "selector", at)))
    return out


def validate(args: LowNodeLoadArgs, where: str) -> None:
    """ValidateLowLoadUtilizationArgs on the converted args (selectors were checked while decoding)."""
    p = Problems()
    if args.number_of_nodes < 0:
        p.invalid(f"{where}.numberOfNodes", args.number_of_nodes, "must be greater than or equal to 0")
    if args.node_metric_expiration_seconds <= 0:
        # upstream names this path without the args prefix, and misspelt
        p.invalid("nodeMetricExpiredSeconds", args.node_metric_expiration_seconds,
                  "nodeMetricExpiredSeconds should be a positive value")
    ns = args.evictable_namespaces
    if ns is not None and ns.include and ns.exclude:
        p.invalid(f"{where}.evictableNamespaces", _namespaces_text(ns),
                  "only one of Include/Exclude namespaces can be set")
    for i, pool in enumerate(args.node_pools):
        at = f"{where}.nodePools[{i}]"
        high, low, prod_high, prod_low = pool.high or {}, pool.low or {}, pool.prod_high or {}, pool.prod_low or {}
        # each threshold's path (upstream's spelling), its values, and the thresholds it may not exceed
        checks: tuple[tuple[str, Thresholds, Thresholds, str], ...] = (
            ("highThresholds", high, {}, ""),
            ("lowThresholds", low, high, "low percentage must be less than or equal to highThresholds"),
            ("ProdHighThresholds", prod_high, high,
             "node percentage must be greater than or equal to prodHighThresholds"),
            ("ProdLowThresholds", prod_low, prod_high,
             "low percentage must be less than or equal to prodHighThresholds"),
        )
        for name, values, cap, above_cap in checks:
            for r, v in values.items():
                if v < 0:
                    p.invalid(f"{at}.{name}[{r}]", v, "percentage must be greater than or equal to 0")
                if r in cap and v > cap[r]:
                    p.invalid(f"{at}.{name}[{r}]", v, above_cap)
        if pool.anomaly.consecutive_abnormalities <= 0:
            p.invalid(f"{at}.anomalyDetectionThresholds.consecutiveAbnormalities",
                      pool.anomaly.consecutive_abnormalities, "consecutiveAbnormalities must be greater than 0")
        if pool.anomaly.consecutive_normalities <= 0:
            p.invalid(f"{at}.anomalyDetectionThresholds.consecutiveNormalities",
                      pool.anomaly.consecutive_normalities, "consecutiveNormalities must be greater than 0")
    p.raise_first()


def _namespaces_text(ns: Namespaces) -> str:
    return f"{{include: {list(ns.include)}, exclude: {list(ns.exclude)}}}"


def with_cache_timeout_at_least(args: LowNodeLoadArgs, interval: float) -> LowNodeLoadArgs:
    """At start a detectorCacheTimeout below deschedulingInterval is raised to the interval (upstream
    descheduler.go), so detectors survive from one round to the next."""
    if args.detector_cache_timeout < interval:
        return replace(args, detector_cache_timeout=interval)
    return args
