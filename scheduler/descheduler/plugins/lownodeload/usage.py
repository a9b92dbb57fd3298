"""Node usage from NodeMetrics, thresholds as quantities and the node classes (upstream loadaware
utilization_util.go getNodeUsage, getNodeThresholds, classifyNodes; low_node_load.go newThresholds).

Amounts are ResourceList integers: cpu in millicores, the rest in whole units.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from apis.core.objects import JSON
from apis.core.resources import CPU, MEMORY, PODS
from apis.core.taints import node_unschedulable
from apis.extension.priority import PRIORITY_PROD, priority_class_with_default
from apis.slo.nodemetric import node_metric_status
from scheduler.cluster import NodeInfo, key
from scheduler.descheduler.nodeutil import raw_allocatable

MIN_PERCENT = 0.0
MAX_PERCENT = 100.0

Amounts = dict[str, int]
Percents = dict[str, float]

LOW, BOTH_LOW, PROD_LOW, PROD_HIGH, HIGH, NORMAL = "low", "bothLow", "prodLow", "prodHigh", "high", "normal"


@dataclass
class Thresholds:
    low: Amounts = field(default_factory=dict)
    high: Amounts = field(default_factory=dict)
    prod_low: Amounts = field(default_factory=dict)
    prod_high: Amounts = field(default_factory=dict)


@dataclass
class NodeUsage:
    """One measured node: its pods, the NodeMetric's usage (changed in place as the round decides), thresholds."""

    node: NodeInfo
    capacity: Amounts
    all_pods: list[JSON]
    prod_pods: list[JSON]
    usage: Amounts
    prod_usage: Amounts
    pod_metrics: dict[str, Amounts]
    thresholds: Thresholds = field(default_factory=Thresholds)

    @property
    def name(self) -> str:
        return self.node.name


@dataclass
class Classes:
    low: list[NodeUsage] = field(default_factory=list)
    source: list[NodeUsage] = field(default_factory=list)
    prod_low: list[NodeUsage] = field(default_factory=list)
    prod_high: list[NodeUsage] = field(default_factory=list)
    both_low: list[NodeUsage] = field(default_factory=list)
    of: dict[str, str] = field(default_factory=dict)  # node → class, for the report


def complete_thresholds(deviation: bool, low: Percents | None, high: Percents | None, prod_low: Percents | None,
                        prod_high: Percents | None) -> tuple[Percents, Percents, Percents, Percents]:
    """newThresholds: every resource named in any map, and memory, gets low/high (prodLow/prodHigh) — a resource
    missing from low (prodLow) gets both set to 100% (0% with deviation thresholds). A given map is completed in
    place, as upstream does; a nil one is a fresh map."""
    names = [*(low or {}), *(high or {}), *(prod_low or {}), *(prod_high or {}), MEMORY]
    low = low if low is not None else {}
    high = high if high is not None else {}
    prod_low = prod_low if prod_low is not None else {}
    prod_high = prod_high if prod_high is not None else {}
    fill = MIN_PERCENT if deviation else MAX_PERCENT
    for r in names:
        if r not in low:
            low[r] = high[r] = fill
        if r not in prod_low:
            prod_low[r] = prod_high[r] = fill
    return low, high, prod_low, prod_high


def is_prod(pod: JSON) -> bool:
    return priority_class_with_default(pod) == PRIORITY_PROD


def node_usages(nodes: Sequence[NodeInfo], resources: Sequence[str], expiration_seconds: int,
                now: float) -> dict[str, NodeUsage]:
    """getNodeUsage: nodes without a NodeMetric, with a null status.nodeMetric or an expired one are left out (they
    still count in the pool's size). Usage = systemUsage + every pod's usage; prod usage = the prod pods' usage."""
    out: dict[str, NodeUsage] = {}
    for node in nodes:
        pods = list(node.pods.values())
        prod_pods = [p for p in pods if is_prod(p)]
        prod_keys = {key(p) for p in prod_pods}
        if node.nodemetric is None:
            continue
        status = node_metric_status(node.nodemetric)
        if not status.has_node_metric or _expired(status.update_time, expiration_seconds, now):
            continue
        usage: Amounts = {}
        prod_usage: Amounts = {}
        for r in resources:
            usage[r] = status.system_usage.get(r, 0) + sum(p.usage.get(r, 0) for p in status.pods)
            prod_usage[r] = sum(p.usage.get(r, 0) for p in status.pods if p.key in prod_keys)
        usage[PODS] = len(pods)
        prod_usage[PODS] = len(prod_pods)
        out[node.name] = NodeUsage(node, raw_allocatable(node.obj), pods, prod_pods, usage, prod_usage,
                                   {p.key: dict(p.usage) for p in status.pods})
    return out


def _expired(update_time: float | None, expiration_seconds: int, now: float) -> bool:
    return update_time is None or (expiration_seconds > 0 and now - update_time >= expiration_seconds)


def quantity(capacity: Amounts, resource: str, percent: float) -> int:
    """resourceThreshold: percent of the capacity, truncated (cpu in millicores)."""
    return int(percent * 0.01 * capacity.get(resource, 0))


def set_thresholds(usages: dict[str, NodeUsage], low: Percents, high: Percents, prod_low: Percents,
                   prod_high: Percents, resources: Sequence[str], deviation: bool) -> None:
    """getNodeThresholds: static percentages of each node's capacity, or deviations around the pool's average
    usage percentage (a resource whose low deviation is 0 gets the full capacity as both thresholds)."""
    avg, prod_avg = average_percents(usages) if deviation else ({}, {})
    for u in usages.values():
        t = Thresholds()
        cap = u.capacity
        for r in resources:
            if deviation:
                if low[r] == MIN_PERCENT:
                    t.low[r] = t.high[r] = cap.get(r, 0)
                else:
                    t.low[r] = quantity(cap, r, _clamp(avg.get(r, 0.0) - low[r]))
                    t.high[r] = quantity(cap, r, _clamp(avg.get(r, 0.0) + high.get(r, 0.0)))
                if prod_low[r] == MIN_PERCENT:
                    t.prod_low[r] = t.prod_high[r] = cap.get(r, 0)
                else:
                    t.prod_low[r] = quantity(cap, r, _clamp(prod_avg.get(r, 0.0) - prod_low[r]))
                    t.prod_high[r] = quantity(cap, r, _clamp(prod_avg.get(r, 0.0) + prod_high.get(r, 0.0)))
            else:
                t.low[r] = quantity(cap, r, low[r])
                t.high[r] = quantity(cap, r, high.get(r, 0.0))
                t.prod_low[r] = quantity(cap, r, prod_low[r])
                t.prod_high[r] = quantity(cap, r, prod_high.get(r, 0.0))
        u.thresholds = t


def _clamp(percent: float) -> float:
    return min(max(percent, MIN_PERCENT), MAX_PERCENT)


def average_percents(usages: dict[str, NodeUsage]) -> tuple[Percents, Percents]:
    """calcAverageResourceUsagePercent: Σ usage/capacity·100 over the measured nodes (a zero capacity adds nothing
    but the node still counts in the divisor) ÷ their count."""
    total: Percents = {}
    prod_total: Percents = {}
    for u in usages.values():
        for acc, used in ((total, u.usage), (prod_total, u.prod_usage)):
            for r, v in used.items():
                cap = u.capacity.get(r, 0)
                if cap:
                    acc[r] = acc.get(r, 0.0) + v / cap * 100.0
    n = len(usages)
    return {r: v / n for r, v in total.items()}, {r: v / n for r, v in prod_total.items()}


def overutilized(usage: Amounts, thresholds: Amounts) -> dict[str, int]:
    """isNodeOverutilized: the resources whose usage is above their threshold, with that usage."""
    return {r: usage[r] for r, t in thresholds.items() if r in usage and usage[r] > t}


def underutilized(usage: Amounts, thresholds: Amounts) -> bool:
    return all(usage[r] <= t for r, t in thresholds.items() if r in usage)


def classify(usages: dict[str, NodeUsage]) -> Classes:
    """classifyNodes (the table of spec §3.3), in the pool's node order."""
    c = Classes()
    for u in usages.values():
        t = u.thresholds
        schedulable = not node_unschedulable(u.node.obj)
        low = schedulable and underutilized(u.usage, t.low)
        prod_high = bool(overutilized(u.prod_usage, t.prod_high))
        prod_low = schedulable and underutilized(u.prod_usage, t.prod_low)
        if low:
            cls = PROD_HIGH if prod_high else BOTH_LOW if prod_low else LOW
        elif overutilized(u.usage, t.high):
            cls = HIGH
        else:
            cls = PROD_HIGH if prod_high else PROD_LOW if prod_low else NORMAL
        lists = {LOW: c.low, BOTH_LOW: c.both_low, PROD_LOW: c.prod_low, PROD_HIGH: c.prod_high, HIGH: c.source}
        if cls in lists:
            lists[cls].append(u)
        c.of[u.name] = cls
    return c


def usage_percents(u: NodeUsage, prod: bool) -> dict[str, float]:
    """resourceUsagePercentages: 100·usage/capacity (in milli units) for resources with a capacity."""
    used = u.prod_usage if prod else u.usage
    out = {}
    for r, v in used.items():
        cap = u.capacity.get(r, 0)
        if cap:
            out[r] = 100.0 * _milli(r, v) / _milli(r, cap)
    return out


def _milli(resource: str, amount: int) -> int:
    return amount if resource == CPU else amount * 1000
