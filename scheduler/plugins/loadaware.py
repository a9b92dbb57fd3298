"""LoadAwareScheduling: filter and score nodes by their NodeMetric usage plus estimates of not-yet-reported pods."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from koordlet import godur
from koordlet.errors import InvalidInput
from koordlet.states.qos import PRIORITY_BATCH, PRIORITY_MID, PRIORITY_PROD, priority_class_with_default
from scheduler.cluster import CPU, JSON, MEMORY, Cluster, NodeInfo, key, pod_requests, quantity_value, resource_list
from scheduler.nodeindex import BoolArray, FloatArray, IntArray, NodeIndex, Tracker

NAME = "LoadAwareScheduling"
AGGREGATION_TYPES = ("avg", "p50", "p90", "p95", "p99")
ANNOTATION_USAGE_THRESHOLDS = "scheduling.koordinator.sh/usage-thresholds"
ANNOTATION_RAW_ALLOCATABLE = "node.koordinator.sh/raw-allocatable"
ANNOTATION_SCALING_FACTORS = "scheduling.koordinator.sh/load-estimated-scaling-factors"
ANNOTATION_SECONDS_AFTER_SCHEDULED = "scheduling.koordinator.sh/load-estimated-seconds-after-pod-scheduled"
ANNOTATION_SECONDS_AFTER_INITIALIZED = "scheduling.koordinator.sh/load-estimated-seconds-after-initialized"
DEFAULT_MILLI_CPU = 250
DEFAULT_MEMORY = 200 * 1024 * 1024
DEFAULT_REPORT_INTERVAL = 60.0
BATCH_CPU, BATCH_MEMORY = "kubernetes.io/batch-cpu", "kubernetes.io/batch-memory"
MID_CPU, MID_MEMORY = "kubernetes.io/mid-cpu", "kubernetes.io/mid-memory"
_TRANSLATE = {PRIORITY_BATCH: {CPU: BATCH_CPU, MEMORY: BATCH_MEMORY}, PRIORITY_MID: {CPU: MID_CPU, MEMORY: MID_MEMORY}}

Vector = dict[str, int]


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
    def from_dict(cls, raw: Mapping[str, Any] | None) -> LoadAwareArgs:
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
        kw: dict[str, Any] = {}
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
                kw[attr] = _int_map(arg, raw[arg])
        if raw.get("supportedResources") is not None:
            kw["supported_resources"] = [str(r) for r in raw["supportedResources"]]
        if raw.get("aggregated") is not None:
            a = raw["aggregated"]
            if not isinstance(a, Mapping):
                raise InvalidInput("LoadAwareScheduling: aggregated must be an object")
            kw["aggregated"] = AggregatedArgs(
                usage_thresholds=_int_map("aggregated.usageThresholds", a.get("usageThresholds") or {}),
                usage_aggregation_type=str(a.get("usageAggregationType") or ""),
                usage_aggregated_duration=_duration(a.get("usageAggregatedDuration")),
                score_aggregation_type=str(a.get("scoreAggregationType") or ""),
                score_aggregated_duration=_duration(a.get("scoreAggregatedDuration")))
        return cls(**kw)


def _int(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise InvalidInput(f"LoadAwareScheduling: {name} must be an integer, got {v!r}")
    return int(v)


def _int_map(name: str, v: Any) -> dict[str, int]:
    if not isinstance(v, Mapping):
        raise InvalidInput(f"LoadAwareScheduling: {name} must be a map of resource → integer")
    return {str(k): _int(f"{name}[{k}]", x) for k, x in v.items()}


def _duration(v: Any) -> float:
    if v is None or v == "":
        return 0.0
    if isinstance(v, int | float) and not isinstance(v, bool):
        return float(v)
    return godur.parse(str(v))


def _parse_time(v: Any) -> float | None:
    if not v:
        return None
    try:
        return dt.datetime.fromisoformat(str(v).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def pod_limits(pod: JSON) -> dict[str, int]:
    """k8s.io/component-helpers resource.PodLimits: Σ containers, at least each init container, plus overhead."""
    spec = pod.get("spec") or {}
    total: dict[str, int] = {}
    for c in spec.get("containers") or []:
        for k, v in resource_list((c.get("resources") or {}).get("limits")).items():
            total[k] = total.get(k, 0) + v
    for c in spec.get("initContainers") or []:
        for k, v in resource_list((c.get("resources") or {}).get("limits")).items():
            total[k] = max(total.get(k, 0), v)
    if total:
        for k, v in resource_list(spec.get("overhead")).items():
            if k in total:
                total[k] += v
    return total


def _is_daemonset_pod(pod: JSON) -> bool:
    return any(ref.get("kind") == "DaemonSet" for ref in (pod.get("metadata") or {}).get("ownerReferences") or [])


def _annotations(obj: JSON) -> dict[str, Any]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def _condition_time(pod: JSON, ctype: str) -> float | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype and c.get("status", "True") == "True":
            return _parse_time(c.get("lastTransitionTime"))
    return None


@dataclass
class _PodEntry:
    estimated: Vector
    timestamp: float
    deadline: float | None
    prod: bool


@dataclass
class _NodeState:
    """What one node contributes, recomputed only when its NodeMetric or pod set changes."""

    stamp: tuple[Any, ...]
    capacity: Vector
    update_time: float | None
    node_usage: Vector | None
    node_delta: Vector
    node_estimated: Vector
    prod_usage: Vector
    prod_delta: Vector
    thresholds: dict[str, Any] | None  # the node's usage-thresholds annotation, parsed


class LoadAware:
    """Filter: estimated usage ≤ thresholds; score: raw 0..100 least-used (load_aware.go)."""

    name = NAME

    def __init__(self, args: LoadAwareArgs | None = None, weight: int = 1,
                 now: Callable[[], float] = time.time) -> None:
        self.args = args or LoadAwareArgs()
        self.weight = weight
        self.now = now
        a = self.args
        names = {CPU, MEMORY, *a.usage_thresholds, *a.prod_usage_thresholds, *a.resource_weights,
                 *a.estimated_scaling_factors, *a.supported_resources}
        if a.aggregated is not None:
            names |= set(a.aggregated.usage_thresholds)
        self.resources: list[str] = sorted(names)
        self._nodes: dict[str, _NodeState] = {}
        self._assumed: dict[str, float] = {}  # pod key → when this scheduler assumed it (no PodScheduled condition)
        self._entries: dict[int, tuple[JSON, _PodEntry]] = {}  # id(pod) → (pod, entry); pod kept to pin the id
        self._incoming: tuple[JSON | None, Vector, bool] = (None, {}, False)  # last pod seen: estimate, is prod
        # _NodeState as arrays over NodeIndex rows (columns: self.resources), refreshed for changed nodes only
        self._tracker = Tracker()
        self._col = {r: j for j, r in enumerate(self.resources)}
        self._has_state: BoolArray = np.zeros(0, dtype=np.bool_)  # has a NodeMetric
        self._has_metric: BoolArray = np.zeros(0, dtype=np.bool_)  # ... with status.nodeMetric
        self._custom: BoolArray = np.zeros(0, dtype=np.bool_)  # has the usage-thresholds annotation
        self._update: FloatArray = np.zeros(0)  # NaN: no updateTime
        self._cap: IntArray = np.zeros((0, len(self.resources)), dtype=np.int64)
        self._usage: IntArray = np.zeros((0, len(self.resources)), dtype=np.int64)  # nodeUsage + nodeDelta
        self._prod: IntArray = np.zeros((0, len(self.resources)), dtype=np.int64)  # prodUsage + prodDelta

    # ---- estimator (estimator/default_estimator.go) ----

    def estimate(self, pod: JSON) -> Vector:
        """Estimated usage of a pod over the resource vector."""
        return self._estimate(pod, priority_class_with_default(pod))

    def _estimate(self, pod: JSON, priority: str) -> Vector:
        factors = self.args.estimated_scaling_factors
        if self.args.allow_customize_estimation:
            custom = _json_annotation(pod, ANNOTATION_SCALING_FACTORS)
            if isinstance(custom, dict) and custom:
                factors = {**factors, **{str(k): int(v) for k, v in custom.items() if isinstance(v, int | float)}}
        requests, limits = pod_requests(pod), pod_limits(pod)
        translate = _TRANSLATE.get(priority, {})
        out: Vector = {}
        for r in self.resources:
            real = translate.get(r, r)
            request, limit = requests.get(real, 0), limits.get(real, 0)
            quantity = max(limit, request)
            if quantity == 0:
                # **[quirk]** only cpu/memory and the batch names get a default; a mid-tier pod without
                # mid-cpu/mid-memory requests estimates 0 (default_estimator.go estimatedUsedByResource).
                out[r] = DEFAULT_MILLI_CPU if real in (CPU, BATCH_CPU) else \
                    DEFAULT_MEMORY if real in (MEMORY, BATCH_MEMORY) else 0
                continue
            # a resource with no scaling factor estimates 0, as upstream iterates the factor map only
            est = int(_round_half_away(quantity * factors.get(r, 0) / 100))
            out[r] = min(est, limit) if limit > 0 else est
        return out

    def _entry(self, pod: JSON) -> _PodEntry:
        cached = self._entries.get(id(pod))
        if cached is not None and cached[0] is pod:
            return cached[1]
        k = key(pod)
        ts = _condition_time(pod, "PodScheduled")
        if ts is None:
            ts = self._assumed.setdefault(k, self.now())
        after_init, after_sched = self.args.estimated_seconds_after_initialized, \
            self.args.estimated_seconds_after_pod_scheduled
        if self.args.allow_customize_estimation:
            ann = _annotations(pod)
            after_init = _int_or(ann.get(ANNOTATION_SECONDS_AFTER_INITIALIZED), after_init)
            after_sched = _int_or(ann.get(ANNOTATION_SECONDS_AFTER_SCHEDULED), after_sched)
        deadline: float | None = None
        init_time = _condition_time(pod, "Initialized")
        if after_init and after_init > 0 and init_time is not None:
            deadline = init_time + after_init
        elif after_sched and after_sched > 0:
            deadline = ts + after_sched
        if pod is self._incoming[0]:  # just placed: estimated as the incoming pod of this cycle already
            estimated, prod = self._incoming[1], self._incoming[2]
        else:
            priority = priority_class_with_default(pod)
            estimated, prod = self._estimate(pod, priority), priority == PRIORITY_PROD
        entry = _PodEntry(estimated, ts, deadline, prod)
        self._entries[id(pod)] = (pod, entry)
        return entry

    # ---- per-node state (pod_assign_cache.go + load_aware.go) ----

    def _state(self, node: NodeInfo) -> _NodeState | None:
        nm = node.nodemetric
        if nm is None:
            return None
        status = nm.get("status") or {}
        last = next(reversed(node.pods), None) if node.pods else None
        stamp = (id(nm), status.get("updateTime"), id(node.obj), len(node.pods), last)
        st = self._nodes.get(node.name)
        if st is not None and st.stamp == stamp:
            return st
        st = self._build_state(node, nm, stamp)
        self._nodes[node.name] = st
        return st

    def _build_state(self, node: NodeInfo, nm: JSON, stamp: tuple[Any, ...]) -> _NodeState:
        status = nm.get("status") or {}
        metric = status.get("nodeMetric")
        update_time = _parse_time(status.get("updateTime"))
        interval = ((nm.get("spec") or {}).get("metricCollectPolicy") or {}).get("reportIntervalSeconds")
        report_interval = float(interval) if isinstance(interval, int | float) and interval else DEFAULT_REPORT_INTERVAL
        usages: dict[str, Vector] = {}
        prod_usages: dict[str, Vector] = {}
        for pm in status.get("podsMetric") or []:
            k = f"{pm.get('namespace')}/{pm.get('name')}"
            vec = self._vector((pm.get("podUsage") or {}).get("resources"))
            usages[k] = vec
            if pm.get("priority") == PRIORITY_PROD:
                prod_usages[k] = vec
        zero = dict.fromkeys(self.resources, 0)
        node_delta, node_est, prod_usage, prod_delta = dict(zero), dict(zero), dict(zero), dict(zero)
        ut = update_time if update_time is not None else 0.0
        for k, pod in node.pods.items():
            e = self._entry(pod)
            _add(node_est, e.estimated)
            if _is_delta(e, usages.get(k), ut, report_interval):
                _add_delta(node_delta, e.estimated, usages.get(k))
            if e.prod:
                reported = prod_usages.get(k)
                if reported is not None:
                    _add(prod_usage, reported)
                if _is_delta(e, reported, ut, report_interval):
                    _add_delta(prod_delta, e.estimated, reported)
        if self.args.prod_usage_include_sys and isinstance(metric, dict):
            _add(prod_usage, self._vector((metric.get("systemUsage") or {}).get("resources")))
        node_usage = self._vector((metric.get("nodeUsage") or {}).get("resources")) \
            if isinstance(metric, dict) else None
        return _NodeState(stamp, self._capacity(node), update_time, node_usage, node_delta, node_est,
                          prod_usage, prod_delta, _json_annotation(node.obj, ANNOTATION_USAGE_THRESHOLDS))

    def _vector(self, resources: Any) -> Vector:
        out = dict.fromkeys(self.resources, 0)
        if isinstance(resources, dict):
            for r in self.resources:
                if r in resources:
                    out[r] = quantity_value(r, resources[r])
        return out

    def _capacity(self, node: NodeInfo) -> Vector:
        cap = {r: node.allocatable.get(r, 0) for r in self.resources}
        raw = _json_annotation(node.obj, ANNOTATION_RAW_ALLOCATABLE)
        if isinstance(raw, dict):
            with contextlib.suppress(InvalidInput, ValueError, ArithmeticError):
                cap.update({r: v for r, v in resource_list(raw).items() if r in cap})
        return cap

    def _expired(self, st: _NodeState) -> bool:
        return st.update_time is None or self.now() - st.update_time >= self.args.node_metric_expiration_seconds

    def _aggregated(self, node: NodeInfo, st: _NodeState, agg_type: str, duration: float) -> Vector:
        """aggUsage + nodeDelta (helper.go getTargetAggregatedUsage)."""
        metric = ((node.nodemetric or {}).get("status") or {}).get("nodeMetric") or {}
        found: Any = None
        entries = metric.get("aggregatedNodeUsages") or []
        if duration <= 0:
            best = -1.0
            for item in entries:
                res = ((item.get("usage") or {}).get(agg_type) or {}).get("resources")
                d = _duration(item.get("duration"))
                if res and d > best:
                    best, found = d, res
            if found is None and st.node_usage is not None and any(st.node_usage.values()):
                return _sum(st.node_usage, st.node_delta)
        else:
            for item in entries:
                res = ((item.get("usage") or {}).get(agg_type) or {}).get("resources")
                if res and _duration(item.get("duration")) == duration:
                    found = res
                    break
        if found is None:
            # **[quirk]** no aggregate for the requested window ⇒ upstream falls back to the full estimates of all
            # assigned pods (nodeEstimated), ignoring the node's measured usage; mirrored for parity.
            return dict(st.node_estimated)
        return _sum(self._vector(found), st.node_delta)

    # ---- Filter ----

    def _thresholds(self, st: _NodeState) -> tuple[dict[str, int], dict[str, int], AggregatedArgs | None]:
        a = self.args
        usage, prod, agg = a.usage_thresholds, a.prod_usage_thresholds, a.aggregated
        if agg is not None and not (agg.usage_thresholds and agg.usage_aggregation_type):
            agg = None
        custom = st.thresholds
        if isinstance(custom, dict):
            try:
                if custom.get("usageThresholds"):
                    usage = _int_map("usageThresholds", custom["usageThresholds"])
                if custom.get("prodUsageThresholds"):
                    prod = _int_map("prodUsageThresholds", custom["prodUsageThresholds"])
                c = custom.get("aggregatedUsage")
                if isinstance(c, dict) and c.get("usageThresholds") and c.get("usageAggregationType"):
                    agg = AggregatedArgs(_int_map("aggregatedUsage", c["usageThresholds"]),
                                         str(c["usageAggregationType"]),
                                         _duration(c.get("usageAggregatedDuration")))
            except InvalidInput:
                usage, prod = a.usage_thresholds, a.prod_usage_thresholds
        return usage, prod, agg

    def filter(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> str | None:
        if _is_daemonset_pod(pod):
            return None
        st = self._state(node)
        if st is None:
            return None  # load-awareness is best-effort
        usage_t, prod_t, agg = self._thresholds(st)
        prod = bool(prod_t) and self._is_prod(pod)
        thresholds = prod_t if prod else agg.usage_thresholds if agg is not None else usage_t
        if not thresholds:
            return None
        if self.args.filter_expired_node_metrics and self._expired(st):
            return None if self.args.enable_schedule_when_node_metrics_expired else "node(s) nodeMetric expired"
        if ((node.nodemetric or {}).get("status") or {}).get("nodeMetric") is None:
            return None
        what = "usage"
        if prod:
            base = _sum(st.prod_usage, st.prod_delta)
        elif agg is not None:
            what = "aggregated usage"
            base = self._aggregated(node, st, agg.usage_aggregation_type, agg.usage_aggregated_duration)
        else:
            base = _sum(st.node_usage or {}, st.node_delta)
        est = self._pod_estimate(pod)
        for r in sorted(thresholds):
            t, cap = thresholds[r], st.capacity.get(r, 0)
            if t == 0 or cap == 0:
                continue
            used = base.get(r, 0) + est.get(r, 0)
            if _round_half_away(used / cap * 100) > t:
                return f"node(s) {r} {what} exceed threshold"
        return None

    # ---- the same over every node at once (scheduler.framework's vector stage) ----

    def sync(self, index: NodeIndex) -> None:
        """Bring the per-node arrays up to date (the framework's prepare and every vector call)."""
        changed = self._tracker.changes(index)
        if changed is None:
            n, width = len(index), len(self.resources)
            self._has_state, self._has_metric = np.zeros(n, dtype=np.bool_), np.zeros(n, dtype=np.bool_)
            self._custom, self._update = np.zeros(n, dtype=np.bool_), np.full(n, np.nan)
            self._cap, self._usage, self._prod = (np.zeros((n, width), dtype=np.int64) for _ in range(3))
        for i in range(len(index)) if changed is None else changed:
            node = index.nodes[i]
            st = self._state(node)
            self._has_state[i] = st is not None
            if st is None:
                continue
            self._has_metric[i] = ((node.nodemetric or {}).get("status") or {}).get("nodeMetric") is not None
            self._custom[i] = isinstance(st.thresholds, dict)
            self._update[i] = np.nan if st.update_time is None else st.update_time
            usage, prod = _sum(st.node_usage or {}, st.node_delta), _sum(st.prod_usage, st.prod_delta)
            for r, j in self._col.items():
                self._cap[i, j], self._usage[i, j], self._prod[i, j] = st.capacity.get(r, 0), usage.get(r, 0), \
                    prod.get(r, 0)

    def _expired_vector(self) -> BoolArray:
        age = self.now() - self._update
        return ~(age < self.args.node_metric_expiration_seconds)  # NaN (no updateTime) counts as expired

    def _estimate_vector(self, pod: JSON) -> IntArray:
        est = self._pod_estimate(pod)
        return np.array([est.get(r, 0) for r in self.resources], dtype=np.int64)

    def prefilter_vector(self, pod: JSON, index: NodeIndex) -> BoolArray | None:
        """Exactly `filter` for every node (nodes with their own thresholds annotation are asked one by one)."""
        self.sync(index)
        if _is_daemonset_pod(pod):
            return None
        a, cluster = self.args, index.cluster
        agg = a.aggregated
        if agg is not None and not (agg.usage_thresholds and agg.usage_aggregation_type):
            agg = None
        prod = bool(a.prod_usage_thresholds) and self._is_prod(pod)
        if agg is not None and not prod:
            return np.array([self.filter(pod, n, cluster) is None for n in index.nodes], dtype=np.bool_)
        thresholds = a.prod_usage_thresholds if prod else a.usage_thresholds
        fail = np.zeros(len(index), dtype=np.bool_)
        if thresholds:
            live = self._has_state & self._has_metric
            if a.filter_expired_node_metrics:
                expired = self._expired_vector()
                if not a.enable_schedule_when_node_metrics_expired:
                    fail |= self._has_state & expired
                live &= ~expired
            used = (self._prod if prod else self._usage) + self._estimate_vector(pod)
            over = np.zeros(len(index), dtype=np.bool_)
            with np.errstate(divide="ignore", invalid="ignore"):
                for r in sorted(thresholds):
                    t, j = thresholds[r], self._col[r]
                    if t == 0:
                        continue
                    cap = self._cap[:, j]
                    over |= (cap != 0) & (np.floor(used[:, j] / cap * 100 + 0.5) > t)
            fail |= live & over
        for i in np.flatnonzero(self._custom & self._has_state).tolist():
            fail[i] = self.filter(pod, index.nodes[i], cluster) is not None
        return ~fail

    def score_vector(self, pod: JSON, index: NodeIndex) -> IntArray | None:
        """Exactly `score` for every node; None for aggregated scoring (then `score` runs per node)."""
        self.sync(index)
        a = self.args
        n = len(index)
        if not a.resource_weights and a.dominant_resource_weight == 0:
            return np.zeros(n, dtype=np.int64)
        if a.score_according_prod_usage and self._is_prod(pod):
            base = self._prod
        elif a.aggregated is not None and a.aggregated.score_aggregation_type:
            return None
        else:
            base = self._usage
        weights = np.array([a.resource_weights.get(r, 0) for r in self.resources], dtype=np.int64)
        d = a.dominant_resource_weight
        if int(weights.sum()) + d == 0:
            return np.zeros(n, dtype=np.int64)
        used, cap = base + self._estimate_vector(pod), self._cap
        per = np.where((cap == 0) | (used > cap), 0, (cap - used) * 100 // np.where(cap == 0, 1, cap))
        lowest = np.minimum(per.min(axis=1), 100) if per.shape[1] else np.full(n, 100, dtype=np.int64)
        score = ((per * weights).sum(axis=1) + d * lowest) // (int(weights.sum()) + d)
        valid = self._has_state & self._has_metric & ~self._expired_vector()
        return np.where(valid, score, 0).astype(np.int64)

    # ---- Score ----

    def score(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> int:
        a = self.args
        if not a.resource_weights and a.dominant_resource_weight == 0:
            return 0
        st = self._state(node)
        if st is None or self._expired(st) or ((node.nodemetric or {}).get("status") or {}).get("nodeMetric") is None:
            return 0
        if a.score_according_prod_usage and self._is_prod(pod):
            base = _sum(st.prod_usage, st.prod_delta)
        elif a.aggregated is not None and a.aggregated.score_aggregation_type:
            agg = a.aggregated
            base = self._aggregated(node, st, agg.score_aggregation_type, agg.score_aggregated_duration)
        else:
            base = _sum(st.node_usage or {}, st.node_delta)
        est = self._pod_estimate(pod)
        total = weights = 0
        lowest = 100
        for r in self.resources:
            cap, used = st.capacity.get(r, 0), base.get(r, 0) + est.get(r, 0)
            s = 0 if cap == 0 or used > cap else (cap - used) * 100 // cap
            w = a.resource_weights.get(r, 0)
            total += s * w
            weights += w
            # **[quirk]** the dominant term's min covers every vectorised resource, weight-0 ones too, so a resource
            # the node lacks (capacity 0) pulls it to 0; mirrored from load_aware.go.
            lowest = min(lowest, s)
        d = a.dominant_resource_weight
        if weights + d == 0:
            return 0
        return (total + d * lowest) // (weights + d)

    def _pod_estimate(self, pod: JSON) -> Vector:
        return self._pod_info(pod)[1]

    def _is_prod(self, pod: JSON) -> bool:
        return self._pod_info(pod)[2]

    def _pod_info(self, pod: JSON) -> tuple[JSON | None, Vector, bool]:
        """The incoming pod is judged against every node: estimate it once per cycle."""
        if self._incoming[0] is not pod:
            priority = priority_class_with_default(pod)
            self._incoming = (pod, self._estimate(pod, priority), priority == PRIORITY_PROD)
        return self._incoming

    # ---- Reserve: remember when we assumed the pod (pod_assign_cache.go AssumePod) ----

    def reserve(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> dict[str, str]:
        self._assumed.setdefault(key(pod), self.now())
        self._entries.pop(id(pod), None)
        return {}

    def unreserve(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> None:
        self._assumed.pop(key(pod), None)
        self._entries.pop(id(pod), None)


def _round_half_away(x: float) -> int:
    """Go math.Round (halves away from zero), not Python's banker's rounding."""
    return int(x + 0.5) if x >= 0 else -int(-x + 0.5)


def _int_or(v: Any, default: int | None) -> int | None:
    try:
        return int(str(v)) if v is not None else default
    except ValueError:
        return default


def _json_annotation(obj: JSON, name: str) -> Any:
    raw = _annotations(obj).get(name)
    if not raw:
        return None
    try:
        return json.loads(raw)
    except (TypeError, ValueError):
        return None


def _is_delta(e: _PodEntry, reported: Vector | None, update_time: float, report_interval: float) -> bool:
    """pod_assign_cache.go: unreported, scheduled within the last report window, or still before its deadline."""
    return (reported is None or e.timestamp > update_time - report_interval
            or (e.deadline is not None and e.deadline > update_time))


def _add(dst: Vector, src: Vector) -> None:
    for r, v in src.items():
        if r in dst:
            dst[r] += v


def _add_delta(dst: Vector, estimated: Vector, reported: Vector | None) -> None:
    for r in dst:
        dst[r] += max(0, estimated.get(r, 0) - (reported.get(r, 0) if reported else 0))


def _sum(a: Vector, b: Vector) -> Vector:
    return {r: a.get(r, 0) + b.get(r, 0) for r in {*a, *b}}
