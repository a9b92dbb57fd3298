"""What LoadAwareScheduling reads: a pod's estimated usage, and a node's load from its NodeMetric and its pods.

Upstream: pkg/scheduler/plugins/loadaware/estimator/default_estimator.go (estimates), pod_assign_cache.go (when a
pod was scheduled, so which pods still count beside the reported usage), helper.go (node, prod and aggregated usage,
capacity). The plugin (loadaware.py) only compares these with thresholds and turns them into scores.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from apis.core.errors import InvalidInput
from apis.core.objects import JSON
from apis.core.resources import CPU, MEMORY, containers_key, strings_only
from apis.extension.load_aware import (
    ANNOTATION_LOAD_ESTIMATED_SCALING_FACTORS,
    ANNOTATION_LOAD_ESTIMATED_SECONDS_AFTER_INITIALIZED,
    ANNOTATION_LOAD_ESTIMATED_SECONDS_AFTER_POD_SCHEDULED,
    ANNOTATION_USAGE_THRESHOLDS,
)
from apis.extension.node import ANNOTATION_NODE_RAW_ALLOCATABLE, decode_node_raw_allocatable
from apis.extension.priority import (
    LABEL_POD_PRIORITY_CLASS,
    PRIORITY_BATCH,
    PRIORITY_MID,
    PRIORITY_PROD,
    priority_class_with_default,
)
from apis.extension.qos import LABEL_POD_QOS
from apis.extension.resources import BATCH_CPU, BATCH_MEMORY, MID_CPU, MID_MEMORY
from apis.slo.nodemetric import Usage, node_metric_status
from scheduler.amplification import ratio_text, status_allocatable
from scheduler.cluster import (
    NodeInfo,
    is_reserve_pod,
    key,
    pod_limits,
    pod_requests,
    quantity_value,
    resource_list,
)
from scheduler.plugins.loadaware_args import LoadAwareArgs, parse_duration

DEFAULT_MILLI_CPU = 250
DEFAULT_MEMORY = 200 * 1024 * 1024
DEFAULT_REPORT_INTERVAL = 60.0
SHAPE_MEMO_SIZE = 4096  # distinct pod shapes remembered; a cluster's pods repeat a few (one per workload)
_ABSENT = object()
_TRANSLATE = {PRIORITY_BATCH: {CPU: BATCH_CPU, MEMORY: BATCH_MEMORY}, PRIORITY_MID: {CPU: MID_CPU, MEMORY: MID_MEMORY}}

Vector = dict[str, int]


# ---- pods ----

def is_daemonset_pod(pod: JSON) -> bool:
    return any(ref.get("kind") == "DaemonSet" for ref in (pod.get("metadata") or {}).get("ownerReferences") or [])


@dataclass
class PodEntry:
    """An assigned pod as the node's load sees it."""

    estimated: Vector
    timestamp: float  # PodScheduled, else when this scheduler assumed it
    deadline: float | None  # counted as not reported until then (estimated-seconds-after-*)
    prod: bool


class PodEstimates:
    """Estimated usage of pods and when each was scheduled; the incoming pod is estimated once per cycle."""

    def __init__(self, args: LoadAwareArgs, resources: list[str], now: Callable[[], float]) -> None:
        self.args = args
        self.resources = resources
        self.now = now
        self._assumed: dict[str, float] = {}  # pod key → when this scheduler assumed it (no PodScheduled condition)
        self._entries: dict[int, tuple[JSON, PodEntry]] = {}  # id(pod) → (pod, entry); pod kept to pin the id
        self._incoming: tuple[JSON | None, Vector, bool] = (None, {}, False)  # last pod seen: estimate, is prod
        self._shapes: dict[tuple[object, ...], tuple[Vector, str]] = {}  # pod shape → (estimate, priority class)

    def estimate(self, pod: JSON) -> Vector:
        """Estimated usage of a pod over the resource vector."""
        return self._facts(pod)[0]

    def incoming(self, pod: JSON) -> tuple[Vector, bool]:
        """(estimate, is prod) of the pod being scheduled, which is judged against every node."""
        if self._incoming[0] is not pod:
            estimated, priority = self._facts(pod)
            self._incoming = (pod, estimated, priority == PRIORITY_PROD)
        return self._incoming[1], self._incoming[2]

    def _facts(self, pod: JSON, shared: bool = False) -> tuple[Vector, str]:
        """(estimate, priority class with default), computed once per pod shape: pods of one workload repeat the
        same resources and labels, and parsing them was most of a cold start (5 running pods a node). `shared`:
        the caller only reads the estimate (a pod entry), so the remembered one is handed out as it is."""
        shape = self._shape(pod)
        known = None
        if shape is not None:
            try:
                known = self._shapes.get(shape)
            except TypeError:  # a label or field holding a list or object: not memoized
                shape = None
        if known is not None:
            return known[0] if shared else dict(known[0]), known[1]
        priority = priority_class_with_default(pod)
        estimated = self._estimate(pod, priority)
        if shape is not None and strings_only(shape[0]):
            if len(self._shapes) >= SHAPE_MEMO_SIZE:
                self._shapes.clear()
            self._shapes[shape] = (dict(estimated), priority)
        return estimated, priority

    def _shape(self, pod: JSON) -> tuple[Any, ...] | None:
        """Everything `_facts` reads from a plain pod (apis.core.resources.containers_key, the priority and QoS
        labels and fields, the scaling-factor annotation) as a key, or None for any other pod, which is then
        computed on its own. A key may be unhashable (a label holding a list), and only keys whose quantities are
        all strings are remembered."""
        meta, status = pod.get("metadata"), pod.get("status")
        if type(meta) is not dict or (status is not None and type(status) is not dict):
            return None
        containers = containers_key(pod)
        labels = meta.get("labels") or {}
        if containers is None or type(labels) is not dict:
            return None
        priority = pod["spec"].get("priority", _ABSENT)  # containers_key found spec a dict
        custom = _annotations(pod).get(ANNOTATION_LOAD_ESTIMATED_SCALING_FACTORS) \
            if self.args.allow_customize_estimation else None
        return (containers, labels.get(LABEL_POD_PRIORITY_CLASS, _ABSENT), labels.get(LABEL_POD_QOS, _ABSENT),
                type(priority), priority, (status or {}).get("qosClass", _ABSENT), custom)

    def _estimate(self, pod: JSON, priority: str) -> Vector:
        factors = self.args.estimated_scaling_factors
        if self.args.allow_customize_estimation:
            custom = json_annotation(pod, ANNOTATION_LOAD_ESTIMATED_SCALING_FACTORS)
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
            est = int(round_half_away(quantity * factors.get(r, 0) / 100))
            out[r] = min(est, limit) if limit > 0 else est
        return out

    def entry(self, pod: JSON, pod_key: str | None = None) -> PodEntry:
        """`pod_key`: key(pod), when the caller has it (the node's pods are kept under it)."""
        cached = self._entries.get(id(pod))
        if cached is not None and cached[0] is pod:
            return cached[1]
        k = key(pod) if pod_key is None else pod_key
        conditions = (pod.get("status") or {}).get("conditions")
        ts = _condition_time(pod, "PodScheduled") if conditions else None
        if ts is None:
            ts = self._assumed.get(k)
            if ts is None:
                ts = self._assumed[k] = self.now()
        after_init, after_sched = self.args.estimated_seconds_after_initialized, \
            self.args.estimated_seconds_after_pod_scheduled
        if self.args.allow_customize_estimation:
            ann = _annotations(pod)
            after_init = _int_or(ann.get(ANNOTATION_LOAD_ESTIMATED_SECONDS_AFTER_INITIALIZED), after_init)
            after_sched = _int_or(ann.get(ANNOTATION_LOAD_ESTIMATED_SECONDS_AFTER_POD_SCHEDULED), after_sched)
        deadline: float | None = None
        init_time = _condition_time(pod, "Initialized") if conditions else None
        if after_init and after_init > 0 and init_time is not None:
            deadline = init_time + after_init
        elif after_sched and after_sched > 0:
            deadline = ts + after_sched
        if pod is self._incoming[0]:  # just placed: estimated as the incoming pod of this cycle already
            estimated, prod = self._incoming[1], self._incoming[2]
        else:
            estimated, priority = self._facts(pod, shared=True)
            prod = priority == PRIORITY_PROD
        entry = PodEntry(estimated, ts, deadline, prod)
        self._entries[id(pod)] = (pod, entry)
        return entry

    def counted(self, pod: JSON, pod_key: str) -> tuple[Vector, bool]:
        """(estimate, prod) of one of a node's pods as its `entry` has them, without the entry's times (they matter
        only against a reported usage), but first seen when `entry` would have seen it: a pod without a
        PodScheduled condition gets its assumed time now, as `entry` gives it."""
        cached = self._entries.get(id(pod))
        if cached is not None and cached[0] is pod:
            return cached[1].estimated, cached[1].prod
        conditions = (pod.get("status") or {}).get("conditions")
        if (not conditions or _condition_time(pod, "PodScheduled") is None) and pod_key not in self._assumed:
            self._assumed[pod_key] = self.now()
        if pod is self._incoming[0]:
            return self._incoming[1], self._incoming[2]
        estimated, priority = self._facts(pod, shared=True)
        return estimated, priority == PRIORITY_PROD

    def assume(self, pod: JSON) -> str:
        """pod_assign_cache.go AssumePod: remember when this scheduler placed it; the pod's key."""
        k = key(pod)
        self._assumed.setdefault(k, self.now())
        self._entries.pop(id(pod), None)
        return k

    def forget(self, pod: JSON) -> None:
        self._assumed.pop(key(pod), None)
        self._entries.pop(id(pod), None)


# ---- nodes ----

@dataclass
class NodeLoad:
    """What one node contributes, recomputed only when its NodeMetric or pod set changes."""

    stamp: tuple[object, ...]
    has_metric: bool  # the NodeMetric has status.nodeMetric
    capacity: Vector
    update_time: float | None
    node_usage: Vector | None
    node_delta: Vector
    node_estimated: Vector
    prod_usage: Vector
    prod_delta: Vector
    thresholds: JSON | None  # the node's usage-thresholds annotation, parsed

    def usage(self) -> Vector:
        """nodeUsage plus what assigned pods add beyond their reported usage."""
        return vsum(self.node_usage or {}, self.node_delta)

    def prod(self) -> Vector:
        return vsum(self.prod_usage, self.prod_delta)


@dataclass
class _MetricFacts:
    """The NodeMetric's and Node's part of a NodeLoad (NodeLoads._metric_facts); shared by the loads built from
    them: read, never change."""

    key: tuple[object, ...]  # (the NodeMetric, its updateTime, the Node, its allocatable), held: compared by identity
    has_metric: bool
    update_time: float | None
    report_interval: float
    usages: dict[str, Vector]  # pod key → reported usage
    prod_usages: dict[str, Vector]  # the same, prod pods only
    system_usage: Vector | None  # counted in prod usage (prodUsageIncludeSys)
    node_usage: Vector | None
    capacity: Vector
    thresholds: JSON | None


class NodeLoads:
    """Per-node load from the NodeMetric and the node's pods (helper.go, pod_assign_cache.go)."""

    # a node's load counted afresh adds each distinct estimate once, times its pods (`_count_grouped`); False: pod
    # by pod (`_count`), the plain path kept for comparison
    group_estimates = True

    def __init__(self, resources: list[str], pods: PodEstimates, prod_usage_include_sys: bool) -> None:
        self.resources = resources
        self.pods = pods
        self.prod_usage_include_sys = prod_usage_include_sys
        self._nodes: dict[str, NodeLoad] = {}
        self._metrics: dict[str, _MetricFacts] = {}

    def get(self, node: NodeInfo) -> NodeLoad | None:
        """None for a node without a NodeMetric (load-awareness is best-effort)."""
        nm = node.nodemetric
        if nm is None:
            return None
        status = nm.get("status") or {}
        last = next(reversed(node.pods), None) if node.pods else None
        # the generation: a pod replaced under its key changes neither the count nor the last key
        stamp = (id(nm), status.get("updateTime"), id(node.obj), len(node.pods), last, node.generation)
        load = self._nodes.get(node.name)
        if load is None or load.stamp != stamp:
            grown = self._grown(node, nm, stamp, load) if load is not None else None
            load = self._nodes[node.name] = grown if grown is not None else self._build(node, nm, stamp)
        return load

    def _build(self, node: NodeInfo, nm: JSON, stamp: tuple[object, ...]) -> NodeLoad:
        m = self._metric_facts(node, nm, stamp[1])
        zero = dict.fromkeys(self.resources, 0)
        node_delta, node_est, prod_usage, prod_delta = dict(zero), dict(zero), dict(zero), dict(zero)
        if self.group_estimates:
            self._count_grouped(m, node.pods, node_delta, node_est, prod_usage, prod_delta)
        else:
            for k, pod in node.pods.items():
                self._count(m, k, pod, node_delta, node_est, prod_usage, prod_delta)
        if m.system_usage is not None:
            _add(prod_usage, m.system_usage)
        return NodeLoad(stamp, m.has_metric, m.capacity, m.update_time, m.node_usage, node_delta, node_est,
                        prod_usage, prod_delta, m.thresholds)

    def _grown(self, node: NodeInfo, nm: JSON, stamp: tuple[object, ...], was: NodeLoad) -> NodeLoad | None:
        """`was` plus the one pod added since (a placement), when that is all that changed: the same NodeMetric,
        updateTime and Node, one pod more and one change of the node (NodeInfo.generation: a new allocatable is one
        too) — every pod counts on its own, so this equals `_build`. None otherwise."""
        if (stamp[:3] != was.stamp[:3] or stamp[3] != was.stamp[3] + 1  # type: ignore[operator]
                or stamp[5] != was.stamp[5] + 1):  # type: ignore[operator]
            return None
        m = self._metric_facts(node, nm, stamp[1])
        k = next(reversed(node.pods))  # the pod added
        node_delta, node_est = dict(was.node_delta), dict(was.node_estimated)
        prod_usage, prod_delta = dict(was.prod_usage), dict(was.prod_delta)
        self._count(m, k, node.pods[k], node_delta, node_est, prod_usage, prod_delta)
        return NodeLoad(stamp, m.has_metric, m.capacity, m.update_time, m.node_usage, node_delta, node_est,
                        prod_usage, prod_delta, m.thresholds)

    def unreported_counted_in_full(self, node: NodeInfo) -> dict[str, Vector] | None:
        """The reported pods of the NodeMetric the node's load was last counted with, when it reports no prod pod:
        then a pod not among them counts in full (`_count`'s usual case); None otherwise."""
        m = self._metrics.get(node.name)
        return m.usages if m is not None and not m.prod_usages else None

    def _count_grouped(self, m: _MetricFacts, pods: dict[str, JSON], node_delta: Vector, node_est: Vector,
                       prod_usage: Vector, prod_delta: Vector) -> None:
        """`_count` of every pod, in order, with the usual case's sums added once per distinct estimate times its
        pods: pods of one shape share their remembered estimate (PodEstimates._facts), and integer sums do not
        depend on the order they are added in. Each pod is still looked at (`counted`, `entry`) in turn."""
        usages, prod_usages = m.usages, m.prod_usages
        counted = self.pods.counted
        groups: dict[tuple[int, bool], list[Any]] = {}  # (id of the estimate, prod) → [estimate, prod, pods]
        for k, pod in pods.items():
            if prod_usages or (usages and k in usages) or is_reserve_pod(pod):
                self._count(m, k, pod, node_delta, node_est, prod_usage, prod_delta)
                continue
            estimated, prod = counted(pod, k)
            group = groups.get((id(estimated), prod))
            if group is None:
                groups[(id(estimated), prod)] = [estimated, prod, 1]  # holds the estimate: its id stays its own
            else:
                group[2] += 1
        for estimated, prod, n in groups.values():
            for r, v in estimated.items():
                if r in node_est:
                    node_est[r] += v * n
                if r in node_delta and v > 0:
                    node_delta[r] += v * n
                    if prod:
                        prod_delta[r] += v * n

    def _count(self, m: _MetricFacts, k: str, pod: JSON, node_delta: Vector, node_est: Vector, prod_usage: Vector,
               prod_delta: Vector) -> None:
        """Add one of the node's pods to its load's sums."""
        if is_reserve_pod(pod):
            return  # a reservation is not a pod that runs (upstream pod_assign_cache.go assign skips it)
        usages, prod_usages = m.usages, m.prod_usages
        reported = usages.get(k) if usages else None
        if reported is None and not prod_usages:  # the usual case, spelled out: unreported counts in full
            estimated, prod = self.pods.counted(pod, k)  # its times do not matter here
            _add(node_est, estimated)
            for r, v in estimated.items():
                if r in node_delta and v > 0:
                    node_delta[r] += v
                    if prod:
                        prod_delta[r] += v
            return
        e = self.pods.entry(pod, k)
        _add(node_est, e.estimated)
        ut, report_interval = m.update_time or 0.0, m.report_interval
        if _is_delta(e, reported, ut, report_interval):
            _add_delta(node_delta, e.estimated, reported)
        if e.prod:
            reported = prod_usages.get(k)
            if reported is not None:
                _add(prod_usage, reported)
            if _is_delta(e, reported, ut, report_interval):
                _add_delta(prod_delta, e.estimated, reported)

    def _metric_facts(self, node: NodeInfo, nm: JSON, update_time: object) -> _MetricFacts:
        """What a node's load takes from its NodeMetric and Node objects, read again only when one of them is
        replaced, the metric's updateTime moves or allocatable is recomputed, not when a pod is placed."""
        known = self._metrics.get(node.name)
        key = (nm, update_time, node.obj, node.allocatable)
        if (known is not None and known.key[0] is nm and known.key[1] == update_time and known.key[2] is node.obj
                and known.key[3] is node.allocatable):
            return known
        st = node_metric_status(nm)
        interval = ((nm.get("spec") or {}).get("metricCollectPolicy") or {}).get("reportIntervalSeconds")
        usages: dict[str, Vector] = {}
        prod_usages: dict[str, Vector] = {}
        for pm in st.pods:
            vec = self._over_resources(pm.usage)
            usages[pm.key] = vec
            if pm.priority == PRIORITY_PROD:
                prod_usages[pm.key] = vec
        facts = self._metrics[node.name] = _MetricFacts(
            key, st.has_node_metric, st.update_time,
            float(interval) if isinstance(interval, int | float) and interval else DEFAULT_REPORT_INTERVAL,
            usages, prod_usages,
            self._over_resources(st.system_usage) if self.prod_usage_include_sys and st.has_node_metric else None,
            self._over_resources(st.node_usage) if st.has_node_metric else None,
            self._capacity(node), json_annotation(node.obj, ANNOTATION_USAGE_THRESHOLDS))
        return facts

    def _over_resources(self, usage: Usage) -> Vector:
        """Decoded usage over the plugin's resources; absent ones are 0."""
        return {r: usage.get(r, 0) for r in self.resources}

    def vector(self, resources: object) -> Vector:
        """A ResourceList (quantity strings) over the plugin's resources; absent ones are 0."""
        out = dict.fromkeys(self.resources, 0)
        if isinstance(resources, dict):
            for r in self.resources:
                if r in resources:
                    out[r] = quantity_value(r, resources[r])
        return out

    def _capacity(self, node: NodeInfo) -> Vector:
        cap = {r: node.allocatable.get(r, 0) for r in self.resources}
        text = _annotations(node.obj).get(ANNOTATION_NODE_RAW_ALLOCATABLE)
        if text and isinstance(text, str):
            with contextlib.suppress(InvalidInput, ValueError, ArithmeticError):  # malformed: kept out
                raw = decode_node_raw_allocatable(text) or {}
                cap.update({r: v for r, v in resource_list(raw).items() if r in cap})
        elif ratio_text(node.obj) is not None:  # amplified by koord-sched itself: the raw is what status says
            cap.update({r: v for r, v in status_allocatable(node.obj).items() if r in cap})
        return cap

    def aggregated(self, node: NodeInfo, load: NodeLoad, agg_type: str, duration: float) -> Vector:
        """aggUsage + nodeDelta (helper.go getTargetAggregatedUsage); duration 0 = the longest reported."""
        metric = ((node.nodemetric or {}).get("status") or {}).get("nodeMetric") or {}
        found: Any = None
        entries = metric.get("aggregatedNodeUsages") or []
        if duration <= 0:
            best = -1.0
            for item in entries:
                res = ((item.get("usage") or {}).get(agg_type) or {}).get("resources")
                d = parse_duration(item.get("duration"))
                if res and d > best:
                    best, found = d, res
            if found is None and load.node_usage is not None and any(load.node_usage.values()):
                return load.usage()
        else:
            for item in entries:
                res = ((item.get("usage") or {}).get(agg_type) or {}).get("resources")
                if res and parse_duration(item.get("duration")) == duration:
                    found = res
                    break
        if found is None:
            # **[quirk]** no aggregate for the requested window ⇒ upstream falls back to the full estimates of all
            # assigned pods (nodeEstimated), ignoring the node's measured usage; mirrored for parity.
            return dict(load.node_estimated)
        return vsum(self.vector(found), load.node_delta)


# ---- helpers ----

def round_half_away(x: float) -> int:
    """Go math.Round (halves away from zero), not Python's banker's rounding."""
    return int(x + 0.5) if x >= 0 else -int(-x + 0.5)


def json_annotation(obj: JSON, name: str) -> Any:
    """The annotation parsed as JSON; None when absent or not JSON."""
    raw = _annotations(obj).get(name)
    if not raw:
        return None
    try:
        return json.loads(raw)
    except (TypeError, ValueError):
        return None


def vsum(a: Vector, b: Vector) -> Vector:
    return {r: a.get(r, 0) + b.get(r, 0) for r in {*a, *b}}


def _annotations(obj: JSON) -> JSON:
    """The object's annotations, read in place (never changed here)."""
    found = (obj.get("metadata") or {}).get("annotations")
    return found if type(found) is dict else dict(found or {})


def _parse_time(v: object) -> float | None:
    if not v:
        return None
    return _parse_time_text(v) if type(v) is str else _parse_time_text(str(v))


@functools.lru_cache(maxsize=4096)  # NodeMetrics of one report round share their updateTime
def _parse_time_text(text: str) -> float | None:
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _condition_time(pod: JSON, ctype: str) -> float | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype and c.get("status", "True") == "True":
            return _parse_time(c.get("lastTransitionTime"))
    return None


def _int_or(v: object, default: int | None) -> int | None:
    try:
        return int(str(v)) if v is not None else default
    except ValueError:
        return default


def _is_delta(e: PodEntry, reported: Vector | None, update_time: float, report_interval: float) -> bool:
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
