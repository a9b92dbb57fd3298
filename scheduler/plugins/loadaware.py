"""LoadAwareScheduling: filter and score nodes by their NodeMetric usage plus estimates of not-yet-reported pods.

Upstream: pkg/scheduler/plugins/loadaware/load_aware.go. The facts it judges (pod estimates, node load from the
NodeMetric) come from loadaware_facts.py, its arguments from loadaware_args.py.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any, Literal

import numpy as np

from apis.core.errors import InvalidInput
from apis.core.objects import JSON
from apis.core.resources import CPU, MEMORY
from scheduler.cluster import Cluster, NodeInfo
from scheduler.nodeindex import BoolArray, FloatArray, IntArray, NodeIndex, Rows, Tracker
from scheduler.plugins.loadaware_args import (
    AGGREGATION_TYPES,
    AggregatedArgs,
    LoadAwareArgs,
    int_map,
    parse_duration,
)
from scheduler.plugins.loadaware_facts import (
    NodeLoad,
    NodeLoads,
    PodEstimates,
    Vector,
    is_daemonset_pod,
    round_half_away,
)
from scheduler.rowcache import FEW_ROWS, by_rows

__all__ = ["AGGREGATION_TYPES", "NAME", "AggregatedArgs", "LoadAware", "LoadAwareArgs"]

NAME = "LoadAwareScheduling"


class LoadAware:
    """Filter: estimated usage ≤ thresholds; score: raw 0..100 least-used (load_aware.go)."""

    name = NAME
    exact_rows = True  # prefilter_rows is exactly filter's verdict (scheduler.interfaces)

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
        self.pods = PodEstimates(a, self.resources, lambda: self.now())
        self.loads = NodeLoads(self.resources, self.pods, a.prod_usage_include_sys)
        # NodeLoad as arrays over NodeIndex rows (columns: self.resources), refreshed for changed nodes only
        self._tracker = Tracker()
        self._col = {r: j for j, r in enumerate(self.resources)}
        self._has_state: BoolArray = np.zeros(0, dtype=np.bool_)  # has a NodeMetric
        self._has_metric: BoolArray = np.zeros(0, dtype=np.bool_)  # ... with status.nodeMetric
        self._custom: BoolArray = np.zeros(0, dtype=np.bool_)  # has the usage-thresholds annotation
        self._update: FloatArray = np.zeros(0)  # NaN: no updateTime
        self._cap: IntArray = np.zeros((0, len(self.resources)), dtype=np.int64)
        self._usage: IntArray = np.zeros((0, len(self.resources)), dtype=np.int64)  # nodeUsage + nodeDelta
        self._prod: IntArray = np.zeros((0, len(self.resources)), dtype=np.int64)  # prodUsage + prodDelta
        # Per estimate, the time-independent part of the vector results, refreshed for changed rows only: a
        # placement changes one node's load, so the next pod of the same shape recomputes one row, not all.
        self._row_version: IntArray = np.zeros(0, dtype=np.int64)
        self._row_cache: dict[tuple[object, ...], tuple[IntArray, Any]] = {}
        # the nodes whose metric is expired as of the last look, and when the next one expires: the epoch grows
        # whenever the clock alone changed that set (the kept vectors' shapes name it)
        self._expired_rows: BoolArray = np.zeros(0, dtype=np.bool_)
        self._expired_at = (math.inf, -math.inf)  # (next expiry, the time last looked)
        self._expiry_epoch = 0
        self._incoming: tuple[Any, bool, IntArray] = (None, False, np.zeros(0, dtype=np.int64))
        self._weights: IntArray | None = None  # resource_weights over self.resources (the vector score's)
        self._weight_sum = 0

    def estimate(self, pod: JSON) -> Vector:
        """Estimated usage of a pod over the resource vector (estimator/default_estimator.go)."""
        return self.pods.estimate(pod)

    def _expired(self, st: NodeLoad) -> bool:
        return st.update_time is None or self.now() - st.update_time >= self.args.node_metric_expiration_seconds

    # ---- Filter ----

    def _thresholds(self, st: NodeLoad) -> tuple[dict[str, int], dict[str, int], AggregatedArgs | None]:
        a = self.args
        usage, prod, agg = a.usage_thresholds, a.prod_usage_thresholds, a.aggregated
        if agg is not None and not (agg.usage_thresholds and agg.usage_aggregation_type):
            agg = None
        custom = st.thresholds
        if isinstance(custom, dict):
            try:
                if custom.get("usageThresholds"):
                    usage = int_map("usageThresholds", custom["usageThresholds"])
                if custom.get("prodUsageThresholds"):
                    prod = int_map("prodUsageThresholds", custom["prodUsageThresholds"])
                c = custom.get("aggregatedUsage")
                if isinstance(c, dict) and c.get("usageThresholds") and c.get("usageAggregationType"):
                    agg = AggregatedArgs(int_map("aggregatedUsage", c["usageThresholds"]),
                                         str(c["usageAggregationType"]),
                                         parse_duration(c.get("usageAggregatedDuration")))
            except InvalidInput:
                usage, prod = a.usage_thresholds, a.prod_usage_thresholds
        return usage, prod, agg

    def filter(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> str | None:
        if is_daemonset_pod(pod):
            return None
        st = self.loads.get(node)
        if st is None:
            return None  # load-awareness is best-effort
        usage_t, prod_t, agg = self._thresholds(st)
        prod = bool(prod_t) and self._is_prod(pod)
        thresholds = prod_t if prod else agg.usage_thresholds if agg is not None else usage_t
        if not thresholds:
            return None
        if self.args.filter_expired_node_metrics and self._expired(st):
            return None if self.args.enable_schedule_when_node_metrics_expired else "node(s) nodeMetric expired"
        if not st.has_metric:
            return None
        what = "usage"
        if prod:
            base = st.prod()
        elif agg is not None:
            what = "aggregated usage"
            base = self.loads.aggregated(node, st, agg.usage_aggregation_type, agg.usage_aggregated_duration)
        else:
            base = st.usage()
        est = self._pod_estimate(pod)
        for r in sorted(thresholds):
            t, cap = thresholds[r], st.capacity.get(r, 0)
            if t == 0 or cap == 0:
                continue
            used = base.get(r, 0) + est.get(r, 0)
            if round_half_away(used / cap * 100) > t:
                return f"node(s) {r} {what} exceed threshold"
        return None

    # ---- the same over every node at once (scheduler.framework's vector stage) ----

    def sync(self, index: NodeIndex) -> None:
        """Bring the per-node arrays up to date (the framework's prepare and every vector call)."""
        changed = self._tracker.changes(index)
        if changed is None:
            self._fill_all(index)
            self._expired_at = (-math.inf, math.inf)  # looked at whole
            self._expiry()
            return
        for i in changed:
            node = index.nodes[i]
            self._row_version[i] += 1
            st = self.loads.get(node)
            self._has_state[i] = st is not None
            if st is None:
                continue
            self._has_metric[i] = st.has_metric
            self._custom[i] = isinstance(st.thresholds, dict)
            self._update[i] = np.nan if st.update_time is None else st.update_time
            usage, prod, cap = st.usage(), st.prod(), st.capacity
            # whole rows from lists (the columns are self.resources in order): three numpy calls, not three a column
            self._cap[i] = [cap.get(r, 0) for r in self.resources]
            self._usage[i] = [usage.get(r, 0) for r in self.resources]
            self._prod[i] = [prod.get(r, 0) for r in self.resources]
        if changed:
            self._expire_rows(changed)

    def _expiry(self) -> int:
        """The expiry epoch, looked at again (one pass over the nodes) when the clock reached the next expiry."""
        now = self.now()
        nxt, last = self._expired_at
        if now >= nxt or now < last or len(self._expired_rows) != len(self._update):
            expired = self._expired_vector()
            if len(expired) != len(self._expired_rows) or bool((expired != self._expired_rows).any()):
                self._expired_rows, self._expiry_epoch = expired, self._expiry_epoch + 1
            deadlines = self._update[~expired] + self.args.node_metric_expiration_seconds
            self._expired_at = (float(deadlines.min()) if deadlines.size else math.inf, now)
        return self._expiry_epoch

    def _expire_rows(self, rows: list[int]) -> None:
        """Changed rows' expiry as of now (their kept values are recomputed anyway)."""
        now, limit = self.now(), self.args.node_metric_expiration_seconds
        nxt, last = self._expired_at
        if len(self._expired_rows) != len(self._update):
            return  # looked at whole by the next _expiry
        for i in rows:
            update = float(self._update[i])
            live = not math.isnan(update) and now - update < limit
            self._expired_rows[i] = not live
            if live:
                nxt = min(nxt, update + limit)
        self._expired_at = (nxt, last)

    def _incoming_vector(self, pod: JSON) -> tuple[bool, IntArray]:
        """(prod, the estimate over self.resources) of the cycle's pod, computed once per pod."""
        if self._incoming[0] is not pod:
            self._incoming = (pod, self._is_prod(pod), self._estimate_vector(pod))
        return self._incoming[1], self._incoming[2]

    def _filter_thresholds(self, pod: JSON) -> tuple[bool, dict[str, int]] | None:
        """(prod, the thresholds) the vector filter applies; None where every node is asked (aggregated usage)."""
        a = self.args
        agg = a.aggregated
        if agg is not None and not (agg.usage_thresholds and agg.usage_aggregation_type):
            agg = None
        prod = bool(a.prod_usage_thresholds) and self._is_prod(pod)
        if agg is not None and not prod:
            return None
        return prod, a.prod_usage_thresholds if prod else a.usage_thresholds

    # -- kept between cycles by the framework (scheduler.vectorcache): a shape per estimate and expiry epoch --
    def prefilter_shape(self, pod: JSON, index: NodeIndex) -> tuple[object, ...] | None:
        self.sync(index)
        if is_daemonset_pod(pod):
            return ("daemonset",)
        how = self._filter_thresholds(pod)
        if how is None:
            return None
        _, est = self._incoming_vector(pod)
        return how[0], tuple(est.tolist()), self._expiry()

    def prefilter_rows(self, pod: JSON, index: NodeIndex, rows: Rows) -> BoolArray:
        picked = np.arange(len(index)) if isinstance(rows, slice) else rows
        fail = np.zeros(len(picked), dtype=np.bool_)
        how = None if is_daemonset_pod(pod) else self._filter_thresholds(pod)
        if how is None:
            return ~fail
        prod, thresholds = how
        if len(picked) <= FEW_ROWS:
            return np.array([self._passes(pod, index, i, prod, thresholds) for i in picked.tolist()], dtype=np.bool_)
        a = self.args
        if thresholds:
            live = self._has_state[rows] & self._has_metric[rows]
            if a.filter_expired_node_metrics:
                expired = self._expired_rows[rows]
                if not a.enable_schedule_when_node_metrics_expired:
                    fail |= self._has_state[rows] & expired
                live &= ~expired
            _, est = self._incoming_vector(pod)
            fail |= live & self._over_rows(rows, prod, est, thresholds)
        for j in np.flatnonzero(self._custom[rows] & self._has_state[rows]).tolist():
            fail[j] = self.filter(pod, index.nodes[int(picked[j])], index.cluster) is not None
        return ~fail

    def _passes(self, pod: JSON, index: NodeIndex, i: int, prod: bool, thresholds: dict[str, int]) -> bool:
        """`prefilter_rows` of one row, in Python."""
        if not self._has_state[i]:
            return True
        if self._custom[i]:
            return self.filter(pod, index.nodes[i], index.cluster) is None
        if not thresholds:
            return True
        a = self.args
        if a.filter_expired_node_metrics and self._expired_rows[i]:
            return bool(a.enable_schedule_when_node_metrics_expired)
        if not self._has_metric[i]:
            return True
        _, est = self._incoming_vector(pod)
        return not self._over(self._cap[i].tolist(), self._used_row(i, prod, est), thresholds)

    def _score_how(self, pod: JSON) -> tuple[bool, IntArray, int] | Literal[False] | None:
        """(prod, weights, dominant weight) of the vector score; False: every score is 0; None: aggregated."""
        a = self.args
        if not a.resource_weights and a.dominant_resource_weight == 0:
            return False
        if a.score_according_prod_usage and self._is_prod(pod):
            prod = True
        elif a.aggregated is not None and a.aggregated.score_aggregation_type:
            return None
        else:
            prod = False
        if self._weights is None:
            self._weights = np.array([a.resource_weights.get(r, 0) for r in self.resources], dtype=np.int64)
            self._weight_sum = int(self._weights.sum())
        if self._weight_sum + a.dominant_resource_weight == 0:
            return False
        return prod, self._weights, a.dominant_resource_weight

    def score_shape(self, pod: JSON, index: NodeIndex) -> tuple[object, ...] | None:
        self.sync(index)
        how = self._score_how(pod)
        if not how:
            return None if how is None else ("zero",)
        _, est = self._incoming_vector(pod)
        return how[0], tuple(est.tolist()), self._expiry()

    def score_rows(self, pod: JSON, index: NodeIndex, rows: Rows) -> IntArray:
        picked = np.arange(len(index)) if isinstance(rows, slice) else rows
        how = self._score_how(pod)
        if not how:
            return np.zeros(len(picked), dtype=np.int64)
        prod, weights, d = how
        _, est = self._incoming_vector(pod)
        if len(picked) <= FEW_ROWS:
            return np.array([self._score_of(self._cap[i].tolist(), self._used_row(i, prod, est))
                             if self._has_state[i] and self._has_metric[i] and not self._expired_rows[i] else 0
                             for i in picked.tolist()], dtype=np.int64)
        else:
            score = self._score_rows(rows, prod, est, weights, d)
        valid = self._has_state[rows] & self._has_metric[rows] & ~self._expired_rows[rows]
        return np.where(valid, score, 0).astype(np.int64)
    def _fill_all(self, index: NodeIndex) -> None:
        """Every row as `sync` writes a changed one, built as lists and handed to numpy once per array."""
        n, width = len(index), len(self.resources)
        loads = [self.loads.get(node) for node in index.nodes]
        none = (False, False, False, np.nan, [0] * width, [0] * width, [0] * width)
        rows = [none if st is None else (
            True, st.has_metric, isinstance(st.thresholds, dict), np.nan if st.update_time is None else st.update_time,
            [st.capacity.get(r, 0) for r in self.resources], _row(st.node_usage, st.node_delta, self.resources),
            _row(st.prod_usage, st.prod_delta, self.resources)) for st in loads]
        has_state, has_metric, custom, update, cap, usage, prod = zip(*rows, strict=True) if rows else ((),) * 7
        self._has_state = np.array(has_state, dtype=np.bool_).reshape(n)
        self._has_metric = np.array(has_metric, dtype=np.bool_).reshape(n)
        self._custom = np.array(custom, dtype=np.bool_).reshape(n)
        self._update = np.array(update, dtype=np.float64).reshape(n)
        self._cap, self._usage, self._prod = (np.array(v, dtype=np.int64).reshape(n, width) for v in (cap, usage, prod))
        self._row_version = np.ones(n, dtype=np.int64)
        self._row_cache.clear()

    def _by_rows(self, key: tuple[object, ...], compute: Callable[[Any], Any], one: Callable[[int], Any]) -> Any:
        """`compute(rows)` over every node, cached per key; only rows whose version moved since are recomputed."""
        return by_rows(self._row_cache, self._row_version, key, compute, one)

    def _used_row(self, i: int, prod: bool, est: IntArray) -> list[int]:
        used: list[int] = ((self._prod if prod else self._usage)[i] + est).tolist()
        return used

    def _expired_vector(self) -> BoolArray:
        age = self.now() - self._update
        return ~(age < self.args.node_metric_expiration_seconds)  # NaN (no updateTime) counts as expired

    def _estimate_vector(self, pod: JSON) -> IntArray:
        est = self._pod_estimate(pod)
        return np.array([est.get(r, 0) for r in self.resources], dtype=np.int64)

    def prefilter_vector(self, pod: JSON, index: NodeIndex) -> BoolArray | None:
        """Exactly `filter` for every node (nodes with their own thresholds annotation are asked one by one)."""
        self.sync(index)
        if is_daemonset_pod(pod):
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
            est = self._estimate_vector(pod)
            over = self._by_rows(("over", prod, tuple(est.tolist())),
                                 lambda rows: self._over_rows(rows, prod, est, thresholds),
                                 lambda i: self._over(self._cap[i].tolist(), self._used_row(i, prod, est), thresholds))
            fail |= live & over
        for i in np.flatnonzero(self._custom & self._has_state).tolist():
            fail[i] = self.filter(pod, index.nodes[i], cluster) is not None
        return ~fail

    def _over_rows(self, rows: Any, prod: bool, est: IntArray, thresholds: dict[str, int]) -> BoolArray:
        used = (self._prod if prod else self._usage)[rows] + est
        cap_all = self._cap[rows]
        over = np.zeros(len(cap_all), dtype=np.bool_)
        with np.errstate(divide="ignore", invalid="ignore"):
            for r in sorted(thresholds):
                t, j = thresholds[r], self._col[r]
                if t == 0:
                    continue
                cap = cap_all[:, j]
                over |= (cap != 0) & (np.floor(used[:, j] / cap * 100 + 0.5) > t)
        return over

    def _over(self, cap: list[int], used: list[int], thresholds: dict[str, int]) -> bool:
        """`_over_rows` of one node (cap and used in the order of `self.resources`)."""
        for r in sorted(thresholds):
            t, j = thresholds[r], self._col[r]
            if t != 0 and cap[j] != 0 and math.floor(used[j] / cap[j] * 100 + 0.5) > t:
                return True
        return False

    def score_vector(self, pod: JSON, index: NodeIndex) -> IntArray | None:
        """Exactly `score` for every node; None for aggregated scoring (then `score` runs per node)."""
        self.sync(index)
        a = self.args
        n = len(index)
        if not a.resource_weights and a.dominant_resource_weight == 0:
            return np.zeros(n, dtype=np.int64)
        if a.score_according_prod_usage and self._is_prod(pod):
            prod = True
        elif a.aggregated is not None and a.aggregated.score_aggregation_type:
            return None
        else:
            prod = False
        weights = np.array([a.resource_weights.get(r, 0) for r in self.resources], dtype=np.int64)
        d = a.dominant_resource_weight
        if int(weights.sum()) + d == 0:
            return np.zeros(n, dtype=np.int64)
        est = self._estimate_vector(pod)
        score = self._by_rows(("score", prod, tuple(est.tolist())),
                              lambda rows: self._score_rows(rows, prod, est, weights, d),
                              lambda i: self._score_of(self._cap[i].tolist(), self._used_row(i, prod, est)))
        valid = self._has_state & self._has_metric & ~self._expired_vector()
        return np.where(valid, score, 0).astype(np.int64)

    def _score_rows(self, rows: Any, prod: bool, est: IntArray, weights: IntArray, d: int) -> IntArray:
        used, cap = (self._prod if prod else self._usage)[rows] + est, self._cap[rows]
        per = np.where((cap == 0) | (used > cap), 0, (cap - used) * 100 // np.where(cap == 0, 1, cap))
        lowest = np.minimum(per.min(axis=1), 100) if per.shape[1] else np.full(len(cap), 100, dtype=np.int64)
        result: IntArray = ((per * weights).sum(axis=1) + d * lowest) // (int(weights.sum()) + d)
        return result

    # ---- Score ----

    def score(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> int:
        a = self.args
        if not a.resource_weights and a.dominant_resource_weight == 0:
            return 0
        st = self.loads.get(node)
        if st is None or self._expired(st) or not st.has_metric:
            return 0
        if a.score_according_prod_usage and self._is_prod(pod):
            base = st.prod()
        elif a.aggregated is not None and a.aggregated.score_aggregation_type:
            agg = a.aggregated
            base = self.loads.aggregated(node, st, agg.score_aggregation_type, agg.score_aggregated_duration)
        else:
            base = st.usage()
        est = self._pod_estimate(pod)
        return self._score_of([st.capacity.get(r, 0) for r in self.resources],
                              [base.get(r, 0) + est.get(r, 0) for r in self.resources])

    def _score_of(self, caps: list[int], used: list[int]) -> int:
        """One node's score from its capacity and used (node usage + estimate) in the order of `self.resources`."""
        a = self.args
        total = weights = 0
        lowest = 100
        for r, cap, u in zip(self.resources, caps, used, strict=True):
            s = 0 if cap == 0 or u > cap else (cap - u) * 100 // cap
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
        return self.pods.incoming(pod)[0]

    def _is_prod(self, pod: JSON) -> bool:
        return self.pods.incoming(pod)[1]

    # ---- Reserve: remember when we assumed the pod (pod_assign_cache.go AssumePod) ----

    def reserve(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> dict[str, str]:
        self.pods.assume(pod)
        return {}

    def unreserve(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> None:
        self.pods.forget(pod)


def _row(a: dict[str, int] | None, b: dict[str, int], resources: list[str]) -> list[int]:
    """vsum(a, b) over `resources`, in their order (NodeLoad.usage() and .prod() as an array row)."""
    a = a or {}
    return [a.get(r, 0) + b.get(r, 0) for r in resources]
