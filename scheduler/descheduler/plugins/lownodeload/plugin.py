"""LowNodeLoad's balance point: per node pool, classify the measured nodes, confirm the hot ones over consecutive
rounds, then evict from them, hottest first, while the targets (low nodes) have room below their high thresholds
(upstream loadaware low_node_load.go Balance/processOneNodePool, utilization_util.go evictPodsFromSourceNodes,
balancePods, evictPods, podFitsAnyNodeWithThreshold).

A first pass moves load from nodes above the node thresholds to low and bothLow nodes (all pods); a second moves
prod load from nodes above the prod thresholds to prodLow and bothLow nodes (prod pods only).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np

from apis.core.objects import JSON
from apis.core.resources import PODS
from apis.extension.qos import pod_labels
from scheduler.cluster import NodeInfo, key
from scheduler.descheduler import nodeutil
from scheduler.descheduler.config.common import ConfigError
from scheduler.descheduler.config.lownodeload_args import LowNodeLoadArgs, NodePool, default_args
from scheduler.descheduler.interfaces import BALANCE, EvictOptions, Handle, PluginSpec
from scheduler.descheduler.plugins.lownodeload import usage as u
from scheduler.descheduler.plugins.lownodeload.anomaly import ANOMALY, BasicDetector, DetectorCache
from scheduler.descheduler.plugins.lownodeload.sorting import excess_and_weights, sort_nodes, sort_pods

NAME = "LowNodeLoad"
_INT64_MAX = 2**63 - 1
_INT64_MIN = -(2**63)
log = logging.getLogger("koord-descheduler.lownodeload")

Amounts = dict[str, int]


class LowNodeLoad:
    """Implements interfaces.BalancePlugin; `report()` gives the last round's node classes per pool."""

    name = NAME

    def __init__(self, args: LowNodeLoadArgs, handle: Handle) -> None:
        self.args = args
        self.handle = handle
        self.node_detectors = DetectorCache(args.detector_cache_timeout)
        self.prod_detectors = DetectorCache(args.detector_cache_timeout)
        self.last_report: dict[str, dict[str, JSON]] = {}
        self.confirmed: set[str] = set()  # the pool's nodes this round took as abnormal (node or prod level)

    # ---- the pod filter (namespaces, the profile's filter plugins, podSelectors) ----

    def pod_filter(self, pod: JSON) -> bool:
        ns = str((pod.get("metadata") or {}).get("namespace") or "")
        if self.args.evictable_namespaces is not None and not self.args.evictable_namespaces.allows(ns):
            return False
        if not self.handle.evictor().filter(pod):
            return False
        selectors = [s.selector for s in self.args.pod_selectors if s.selector is not None]
        if not selectors:
            return True
        labels = {str(k): str(v) for k, v in pod_labels(pod).items()}
        return any(s.matches(labels) for s in selectors)

    # ---- interfaces.BalancePlugin ----

    def balance(self, nodes: Sequence[NodeInfo]) -> None:
        self.last_report = {}
        if self.args.paused:
            log.info("LowNodeLoad is paused and will do nothing")
            return
        processed: set[str] = set()
        for pool in self.args.node_pools:
            self._pool(pool, nodes, processed)

    def report(self) -> dict[str, dict[str, JSON]]:
        """pool → node → {class, abnormalities, anomaly} of the last round (unmeasured nodes: class null)."""
        return self.last_report

    # ---- one pool ----

    def _pool(self, pool: NodePool, nodes: Sequence[NodeInfo], processed: set[str]) -> None:
        now = self.handle.snapshot.now
        if pool.node_selector is not None:  # a nil selector takes every node, the processed ones too (upstream)
            nodes = [n for n in nodes if n.name not in processed and pool.node_selector.matches(n.labels)]
        if not nodes:
            return
        low_p, high_p, prod_low_p, prod_high_p = u.complete_thresholds(
            pool.use_deviation_thresholds, pool.low, pool.high, pool.prod_low, pool.prod_high)
        resources = list(low_p)
        usages = u.node_usages(nodes, resources, self.args.node_metric_expiration_seconds, now)
        u.set_thresholds(usages, low_p, high_p, prod_low_p, prod_high_p, resources, pool.use_deviation_thresholds)
        classes = u.classify(usages)
        self.confirmed = set()
        try:
            self._act(pool, nodes, classes, resources, high_p, prod_high_p, processed, now)
        finally:
            self._report(pool, nodes, classes, now)

    def _act(self, pool: NodePool, nodes: Sequence[NodeInfo], classes: u.Classes, resources: list[str],
             high_p: dict[str, float], prod_high_p: dict[str, float], processed: set[str], now: float) -> None:
        """The gates of processOneNodePool after classification, then the eviction passes."""
        if not classes.source and not classes.prod_high:
            return
        abnormal = self._abnormal(classes.source, self.node_detectors, pool, now)
        abnormal_prod = self._abnormal(classes.prod_high, self.prod_detectors, pool, now)
        self.confirmed = {n.name for n in (*abnormal, *abnormal_prod)}
        if not abnormal and not abnormal_prod:
            return
        if not classes.low and not classes.prod_low and not classes.both_low:
            return
        self._reset(classes.low, self.node_detectors, now)
        self._reset(classes.prod_low, self.prod_detectors, now)
        self._reset(classes.both_low, self.node_detectors, now)
        n_low = len(classes.low) + len(classes.prod_low) + len(classes.both_low)
        if n_low <= self.args.number_of_nodes:
            log.info("pool %s: %d underutilized nodes, not more than numberOfNodes %d", pool.name, n_low,
                     self.args.number_of_nodes)
            return
        if n_low == len(nodes):
            log.info("pool %s: all nodes are underutilized, nothing to do", pool.name)
            return
        abnormal = sort_nodes(abnormal, pool.resource_weights, prod=False)
        abnormal_prod = sort_nodes(abnormal_prod, pool.resource_weights, prod=True)
        reason = _reason_of(high_p, prod_high_p)
        self._evict_from(pool, abnormal, classes.low, abnormal_prod, classes.prod_low, classes.both_low, resources,
                         reason, now)
        for node_usage in abnormal:
            self._mark_normal(node_usage, self.node_detectors, now)
        for node_usage in abnormal_prod:
            self._mark_normal(node_usage, self.prod_detectors, now)
        processed.update(n.name for n in classes.source)

    def _abnormal(self, sources: list[u.NodeUsage], cache: DetectorCache, pool: NodePool,
                  now: float) -> list[u.NodeUsage]:
        """filterRealAbnormalNodes: with consecutiveAbnormalities 1 every source at once; otherwise each source's
        detector (made when absent) is marked abnormal and the nodes now in Anomaly are kept."""
        cond = pool.anomaly
        if cond.consecutive_abnormalities == 1:
            return list(sources)
        out = []
        for s in sources:
            detector = cache.get(s.name, now) or BasicDetector(
                s.name, cond.timeout, cond.consecutive_abnormalities, cond.consecutive_normalities, now)
            if detector.mark(False, now) == ANOMALY:
                out.append(s)
            cache.set(s.name, detector, now)
        return out

    @staticmethod
    def _reset(nodes: list[u.NodeUsage], cache: DetectorCache, now: float) -> None:
        for n in nodes:
            detector = cache.get(n.name, now)
            if detector is not None:
                detector.reset(now)

    @staticmethod
    def _mark_normal(n: u.NodeUsage, cache: DetectorCache, now: float) -> None:
        detector = cache.get(n.name, now)
        if detector is not None:
            detector.mark(True, now)

    # ---- eviction (evictPodsFromSourceNodes) ----

    def _evict_from(self, pool: NodePool, sources: list[u.NodeUsage], low: list[u.NodeUsage],
                    prod_sources: list[u.NodeUsage], prod_low: list[u.NodeUsage], both_low: list[u.NodeUsage],
                    resources: list[str], reason: Callable[[u.NodeUsage, bool], str], now: float) -> None:
        low_avail = _available(low, resources, prod=False)
        prod_avail = _available(prod_low, resources, prod=True)
        both_avail = _available(both_low, resources, prod=False)
        both_prod_avail = _available(both_low, resources, prod=True)
        node_budget = {r: low_avail[r] + both_avail[r] for r in resources}
        self.balance_pass(pool, sources, [*low, *both_low], node_budget, False, reason, now)
        for r in resources:  # the bothLow room left to prod is what the node pass left, at most
            both_avail[r] = min(both_avail[r], node_budget[r])
        prod_budget = {r: prod_avail[r] + min(both_prod_avail[r], both_avail[r]) for r in resources}
        self.balance_pass(pool, prod_sources, [*prod_low, *both_low], prod_budget, True, reason, now)

    def balance_pass(self, pool: NodePool, sources: list[u.NodeUsage], targets: list[u.NodeUsage], budget: Amounts,
                     prod: bool, reason: Callable[[u.NodeUsage, bool], str], now: float) -> None:
        """balancePods: per source, the removable pods (filter, and with nodeFit a target that fits them below
        its high thresholds — that check adds the pod's usage to the target and keeps it), sorted, evicted."""
        if not targets:
            return
        room = TargetRoom(targets, prod)
        for src in sources:
            pods = src.prod_pods if prod else src.all_pods
            removable = [p for p in pods if self.pod_filter(p) and (
                not self.args.node_fit or self._fits_a_target(p, src, room))]
            if not removable:
                continue
            thresholds = src.thresholds.prod_high if prod else src.thresholds.high
            excess, weights = excess_and_weights(src.prod_usage if prod else src.usage, thresholds,
                                                 pool.resource_weights)
            ordered = sort_pods(removable, excess, src.pod_metrics, weights)
            self._evict_pods(ordered, src, budget, prod, reason, now)

    def _fits_a_target(self, pod: JSON, src: u.NodeUsage, room: TargetRoom) -> bool:
        """podFitsAnyNodeWithThreshold: the pod needs a metric; the first target that NodeFit accepts and whose
        usage stays within its high thresholds with the pod's usage added takes it (the addition stays)."""
        metric = src.pod_metrics.get(key(pod))
        if metric is None:
            return False
        return room.place(pod, metric)

    def _evict_pods(self, pods: list[JSON], src: u.NodeUsage, budget: Amounts, prod: bool,
                    reason: Callable[[u.NodeUsage, bool], str], now: float) -> None:
        """evictPods: stop once the source is no longer over its high thresholds (its detector is reset then) or
        a resource's budget is spent; a pod the evictor refuses costs nothing; without a metric nothing is
        accounted."""
        cache = self.prod_detectors if prod else self.node_detectors
        for pod in pods:
            used = src.prod_usage if prod else src.usage
            limits = src.thresholds.prod_high if prod else src.thresholds.high
            if not u.overutilized(used, limits):
                self._reset([src], cache, now)
                return
            if any(budget[r] <= 0 for r in budget):
                return
            if not self.pod_filter(pod):
                continue
            if self.args.dry_run:
                log.info("dry run: would evict pod %s from node %s", key(pod), src.name)
            elif not self.handle.evictor().evict(pod, EvictOptions(NAME, reason(src, prod))):
                log.info("pod %s on node %s not evicted", key(pod), src.name)
                continue
            metric = src.pod_metrics.get(key(pod))
            if metric is None:
                continue
            for r in budget:
                q = 1 if r == PODS else metric.get(r, 0)
                budget[r] -= q
                if r in src.usage:
                    src.usage[r] -= q
                if prod and r in src.prod_usage:
                    src.prod_usage[r] -= q

    # ---- the report ----

    def _report(self, pool: NodePool, nodes: Sequence[NodeInfo], classes: u.Classes, now: float) -> None:
        rows: dict[str, JSON] = {}
        for n in nodes:
            cls = classes.of.get(n.name)
            cache = self.prod_detectors if cls == u.PROD_HIGH else self.node_detectors
            detector = cache.get(n.name, now)
            state = detector.current(now) if detector else None  # upstream's State(): an expired Anomaly is OK
            rows[n.name] = {"class": cls,
                            "abnormalities": detector.counter.consecutive_abnormalities if detector else 0,
                            "anomaly": state == ANOMALY,
                            "abnormal": n.name in self.confirmed}
        self.last_report[pool.name] = rows


class TargetRoom:
    """The targets' room below their high (prod: prodHigh) thresholds, one row per target, for the hotspot
    pre-check: a pod goes to the first target, in order, with room for its usage on every threshold resource and
    that NodeFit accepts; its usage is then added to that target (array and usage map). Equivalent to upstream's
    add-compare-undo per target, without walking the full targets one by one."""

    def __init__(self, targets: list[u.NodeUsage], prod: bool) -> None:
        self.targets = targets
        self.prod = prod
        first = targets[0].thresholds.prod_high if prod else targets[0].thresholds.high
        self.names = [r for r in first if all(r in self._used(t) for t in targets)]
        self.room = np.array([[_int64(self._limits(t)[r] - self._used(t)[r]) for r in self.names]
                              for t in targets], dtype=np.int64).reshape(len(targets), len(self.names))

    def _used(self, t: u.NodeUsage) -> Amounts:
        return t.prod_usage if self.prod else t.usage

    def _limits(self, t: u.NodeUsage) -> Amounts:
        return t.thresholds.prod_high if self.prod else t.thresholds.high

    def place(self, pod: JSON, metric: Amounts) -> bool:
        need = np.array([_int64(metric.get(r, 0)) for r in self.names], dtype=np.int64)
        candidates = np.flatnonzero((self.room >= need).all(axis=1))
        if not len(candidates):
            return False
        facts = nodeutil.PodFacts.of(pod)
        for i in candidates:
            target = self.targets[int(i)]
            if nodeutil.node_fit(facts, target.node):
                continue
            self.room[i] -= need
            used = self._used(target)
            for r in self.names:
                used[r] += metric.get(r, 0)
            return True
        return False


def _int64(v: int) -> int:
    """A quantity as an int64 (a NodeMetric may report one beyond it: held at the bound, never an overflow)."""
    return max(_INT64_MIN, min(_INT64_MAX, v))


def _available(nodes: list[u.NodeUsage], resources: list[str], prod: bool) -> Amounts:
    """targetAvailableUsage: Σ (high − usage) over the targets (prod: prodHigh − prodUsage)."""
    out = dict.fromkeys(resources, 0)
    for n in nodes:
        limits = n.thresholds.prod_high if prod else n.thresholds.high
        used = n.prod_usage if prod else n.usage
        for r in resources:
            out[r] += limits.get(r, 0) - used.get(r, 0)
    return out


def _reason_of(high: dict[str, float], prod_high: dict[str, float]) -> Callable[[u.NodeUsage, bool], str]:
    """overUtilizedEvictionReason: the overused resources in name order, usage and threshold percentages."""
    names = sorted(high)

    def reason(n: u.NodeUsage, prod: bool) -> str:
        used = n.prod_usage if prod else n.usage
        limits = n.thresholds.prod_high if prod else n.thresholds.high
        percents = prod_high if prod else high
        over = u.overutilized(used, limits)
        usage_pct = u.usage_percents(n, prod)
        label = "prod" if prod else "node"
        infos = [f"{label} {r} usage({usage_pct.get(r, 0.0):.2f}%)>threshold({percents.get(r, 0.0):.2f}%)"
                 for r in names if r in over]
        return "node is overutilized, " + ", ".join(infos)

    return reason


def new(args: object, handle: Handle) -> LowNodeLoad:
    if args is None:
        args = default_args()
    if not isinstance(args, LowNodeLoadArgs):
        raise ConfigError(f"want args to be of type LowNodeLoadArgs, got {type(args).__name__}")
    return LowNodeLoad(args, handle)


SPEC = PluginSpec(NAME, new, frozenset({BALANCE}))
