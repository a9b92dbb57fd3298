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
from scheduler.cluster import Cluster, NodeInfo, is_reserve_pod
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
    # the placed node's row grown by the reserved pod's estimate when that pod is all that changed (`_grow_row`);
    # False: every changed row is read again from the node's load (the plain path, kept for comparison)
    grow_placed_rows = True

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
        # the cycle's pod: (pod, prod, estimate as an array, as a tuple over self.resources, a DaemonSet's pod,
        # the filter's (prod, thresholds), the score's how) — what the hooks of its cycle read, worked out once
        self._incoming: tuple[Any, bool, IntArray, tuple[int, ...], bool, tuple[bool, dict[str, int]] | None,
                              tuple[bool, IntArray, int] | Literal[False] | None] = \
            (None, False, np.zeros(0, dtype=np.int64), (), False, None, None)
        self._estimates: dict[tuple[int, ...], IntArray] = {}  # estimate tuple → its array (read only), per shape
        # Each row's capacity, usage and prod usage as lists too (what the one- or two-row paths of a cycle read,
        # without numpy's per-call cost), the capacity map and the NodeLoad stamp the row was written from, and
        # the NodeMetric's reported pods where no prod pod is reported (None: any other case): see `_grow_row`
        self._lists: list[tuple[Vector | None, list[int], list[int], list[int], Any, dict[str, Vector] | None]] = []
        # the pod this plugin last reserved: (node, key, pod, its estimate's positive part over self.resources,
        # prod) — the next sync may grow that node's row by it alone (`_grow_row`)
        self._placed: tuple[NodeInfo, str, JSON, list[int], bool] | None = None
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
        placed, self._placed = self._placed, None  # for this sync only
        if changed is None:
            self._fill_all(index)
            self._expired_at = (-math.inf, math.inf)  # looked at whole
            self._expiry()
            return
        resources, lists = self.resources, self._lists
        looked = changed
        for i in changed:
            node = index.nodes[i]
            self._row_version[i] += 1
            if placed is not None and placed[0] is node and self._grow_row(i, placed):
                # the same NodeMetric and updateTime: the row's expiry is as last looked at, unless the clock
                # reached its deadline, which is among those `_expiry` watches (it looks at every row then)
                looked = [j for j in changed if j != i]
                continue
            st = self.loads.get(node)
            self._has_state[i] = st is not None
            if st is None:
                lists[i] = (*lists[i][:4], None, None)
                continue
            self._has_metric[i] = st.has_metric
            self._custom[i] = isinstance(st.thresholds, dict)
            self._update[i] = np.nan if st.update_time is None else st.update_time
            # whole rows from lists (the columns are self.resources in order), each written only when it moved: a
            # placement leaves the capacity (the very map) and, for a non-prod pod, the prod usage as they were
            was_cap, cap, usage, prod, _, _ = lists[i]
            if st.capacity is not was_cap:
                cap = [st.capacity.get(r, 0) for r in resources]
                self._cap[i] = cap
            new_usage = _row(st.node_usage, st.node_delta, resources)
            if new_usage != usage:
                self._usage[i] = usage = new_usage
            new_prod = _row(st.prod_usage, st.prod_delta, resources)
            if new_prod != prod:
                self._prod[i] = prod = new_prod
            lists[i] = (st.capacity, cap, usage, prod, st.stamp, self.loads.unreported_counted_in_full(node))
        if looked:
            self._expire_rows(looked)

    def _grow_row(self, i: int, placed: tuple[NodeInfo, str, JSON, list[int], bool]) -> bool:
        """Row i after the pod this plugin reserved on its node, without reading the node's load again, when all
        that changed since the row was written (its NodeLoad stamp `seen`) is that pod added — this very object,
        last of the node's pods, one pod more and one node change, the same NodeMetric, updateTime and Node (a
        new allocatable is a change too) — and its load counts the pod in full (not among the NodeMetric's
        reported pods, none of them prod: NodeLoads._count's usual case). Then the load is the one the row was
        written from plus the pod's estimate in usage (and prod usage, a prod pod), so is the row; every other
        column is as it was. The node's NodeLoad is left behind (`get` counts it again when asked)."""
        node, k, pod, add, prod = placed
        cap_map, cap, usage, prod_row, seen, reported = self._lists[i]
        if reported is None or k in reported:
            return False
        # one node change and one pod more: only an add (a new Node, NodeMetric or allocatable is a change of its
        # own); the pod last is the one added. updateTime is compared: it may be rewritten in place.
        nm, pods = node.nodemetric, node.pods
        if (node.generation != seen[5] + 1 or len(pods) != seen[3] + 1 or pods.get(k) is not pod
                or next(reversed(pods)) != k or nm is None or (nm.get("status") or {}).get("updateTime") != seen[1]):
            return False
        usage = [u + v for u, v in zip(usage, add, strict=True)]
        self._usage[i] = usage
        if prod:
            prod_row = [u + v for u, v in zip(prod_row, add, strict=True)]
            self._prod[i] = prod_row
        self._lists[i] = (cap_map, cap, usage, prod_row, (seen[0], seen[1], seen[2], seen[3] + 1, k, seen[5] + 1),
                          reported)
        return True

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
        inc = self._incoming if self._incoming[0] is pod else self._see(pod)
        return inc[1], inc[2]

    def _incoming_tuple(self, pod: JSON) -> tuple[int, ...]:
        """The cycle's pod's estimate over self.resources as a tuple (its shapes' part)."""
        inc = self._incoming if self._incoming[0] is pod else self._see(pod)
        return inc[3]

    def _see(self, pod: JSON) -> Any:
        est, prod = self.pods.incoming(pod)
        t = tuple([est.get(r, 0) for r in self.resources])
        arr = self._estimates.get(t)
        if arr is None:
            if len(self._estimates) >= 256:
                self._estimates.clear()
            arr = self._estimates[t] = np.array(t, dtype=np.int64).reshape(len(t))
            arr.flags.writeable = False
        daemon = is_daemonset_pod(pod)
        self._incoming = (pod, prod, arr, t, daemon, None if daemon else self._filter_thresholds(pod),
                          self._score_how(pod))
        return self._incoming

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
        inc = self._incoming if self._incoming[0] is pod else self._see(pod)
        if inc[4]:
            return ("daemonset",)
        how = inc[5]
        if how is None:
            return None
        return how[0], inc[3], self._expiry()

    def prefilter_rows(self, pod: JSON, index: NodeIndex, rows: Rows) -> BoolArray:
        inc = self._incoming if self._incoming[0] is pod else self._see(pod)
        how = inc[5]
        if how is not None and not isinstance(rows, slice) and len(rows) <= FEW_ROWS:
            prod, thresholds = how
            return np.array([self._passes(pod, index, i, prod, thresholds) for i in rows.tolist()], dtype=np.bool_)
        picked = np.arange(len(index)) if isinstance(rows, slice) else rows
        fail = np.zeros(len(picked), dtype=np.bool_)
        if how is None:
            return ~fail
        prod, thresholds = how
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
        if not self._has_state.item(i):
            return True
        if self._custom.item(i):
            return self.filter(pod, index.nodes[i], index.cluster) is None
        if not thresholds:
            return True
        a = self.args
        if a.filter_expired_node_metrics and self._expired_rows.item(i):
            return bool(a.enable_schedule_when_node_metrics_expired)
        if not self._has_metric.item(i):
            return True
        return not self._over(self._lists[i][1], self._used_list(i, prod, pod), thresholds)

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
        inc = self._incoming if self._incoming[0] is pod else self._see(pod)
        how = inc[6]
        if not how:
            return None if how is None else ("zero",)
        return how[0], inc[3], self._expiry()

    def score_rows(self, pod: JSON, index: NodeIndex, rows: Rows) -> IntArray:
        picked = np.arange(len(index)) if isinstance(rows, slice) else rows
        inc = self._incoming if self._incoming[0] is pod else self._see(pod)
        how = inc[6]
        if not how:
            return np.zeros(len(picked), dtype=np.int64)
        prod, weights, d = how
        if len(picked) <= FEW_ROWS:
            has_state, has_metric, expired = self._has_state, self._has_metric, self._expired_rows
            return np.array([self._score_of(self._lists[i][1], self._used_list(i, prod, pod))
                             if has_state.item(i) and has_metric.item(i) and not expired.item(i) else 0
                             for i in picked.tolist()], dtype=np.int64)
        else:
            _, est = self._incoming_vector(pod)
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
        full = self.loads.unreported_counted_in_full
        self._lists = [(None, c, u, p, None, None) if st is None else
                       (st.capacity, c, u, p, st.stamp, full(node))
                       for node, st, c, u, p in zip(index.nodes, loads, cap, usage, prod, strict=True)]
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

    def _used_list(self, i: int, prod: bool, pod: JSON) -> list[int]:
        """`_used_row` of the cycle's pod, from the row's lists."""
        row = self._lists[i]
        return [u + e for u, e in zip(row[3] if prod else row[2], self._incoming_tuple(pod), strict=True)]

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
        k = self.pods.assume(pod)
        inc = self._incoming if self._incoming[0] is pod else self._see(pod)
        # a reservation's reserve pod is not counted (NodeLoads._count): its node's row is read again
        self._placed = None if is_reserve_pod(pod) or not self.grow_placed_rows else \
            (node, k, pod, [v if v > 0 else 0 for v in inc[3]], inc[1])
        return {}

    def unreserve(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> None:
        self._placed = None
        self.pods.forget(pod)


def _row(a: dict[str, int] | None, b: dict[str, int], resources: list[str]) -> list[int]:
    """vsum(a, b) over `resources`, in their order (NodeLoad.usage() and .prod() as an array row)."""
    a = a or {}
    return [a.get(r, 0) + b.get(r, 0) for r in resources]
