"""BECPUEvict: BE pods starved of CPU while using what they get → evict BE pods until their requests fit.

BE satisfaction = real limit / request; below the lower satisfaction percent, BE pods are evicted until it would
reach the upper one.

Upstream: pkg/koordlet/qosmanager/plugins/cpuevict/cpu_evict.go (v1.7; the BE-satisfaction mode only: the gates
CPUEvict and CPUAllocatableEvict are not implemented). Spec dropin.md §d.2. All CPU amounts are milli-cores.

- Config: `cpuEvictBESatisfactionLowerPercent` in (0, 60], `…UpperPercent` in (0, 100), upper ≥ lower, both set;
  otherwise the round is skipped (under the chart neither is set: BECPUEvict is a no-op there).
- Window W = max(collect interval, `cpuEvictTimeWindowSeconds`) in whole seconds. The avg of BE usage, request and
  real limit over W (koordlet/collectors/beresource.py) needs `min count × interval ≥ W / 3`.
- limit = real limit, or with `cpuEvictPolicy: evictByAllocatable` the Node's allocatable batch-cpu (0 → 1, missing
  or negative → −1). "High" usage: false for limit ≤ 0, true for limit < 1000, else usage/limit ≥
  `cpuEvictBEUsageThresholdPercent` (90) / 100.
- release(req, lim) = 0 if req ≤ 0; sat = lim / req; 0 if sat > lower/100; else ⌊req × (upper/100 − sat)⌋ (0 if not
  positive). With the avg values first; then with the "last" values (newest in two collection intervals): usage not
  high → nothing; request and limit as the averages → the avg release; else the smaller of the two (a current
  release ≤ 0 → nothing).
- Victims: BE-labelled pods (no phase filter), credited with their batch-cpu request; ordered by priority ascending
  (unset: 0, see `_order`), then by last CPU use / request descending.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from apis.core.errors import InvalidInput, QuantityError
from apis.core.quantity import milli_value, parse_quantity
from apis.extension.qos import QOS_BE
from apis.extension.resources import BATCH_CPU
from apis.slo.types import CPU_EVICT_BY_ALLOCATABLE, ResourceThresholdStrategy
from koordlet.collectors.beresource import KIND_REAL_LIMIT, KIND_REQUEST, KIND_USAGE, pod_batch_milli_cpu
from koordlet.metriccache import MetricCache
from koordlet.qos.eviction import (
    Eviction,
    EvictionPlan,
    feature_disabled,
    message,
    spec_priority,
)
from koordlet.qos.state import QoSState
from koordlet.states.cpupools import CPUTopology
from koordlet.states.model import PodMeta

GATE = "BECPUEvict"
STRATEGY = GATE.removeprefix("BE")  # upstream's CPUEvictName (also the name of a gate we do not serve)
SATISFACTION_LOWER_MAX = 60  # beCPUSatisfactionLowPercentMax
SATISFACTION_UPPER_MAX = 100  # beCPUSatisfactionUpperPercentMax
USAGE_THRESHOLD_PERCENT = 90  # beCPUUsageThresholdPercent
MIN_ALLOCATABLE_BATCH_MILLI = 1  # defaultMinAllocatableBatchMilliCPU


@dataclass(frozen=True)
class BEWindow:
    """The three BE series over one query range: value (avg or last) and sample count each."""

    usage: float = 0.0
    request: float = 0.0
    real_limit: float = 0.0
    count: int = 0  # the smallest of the three counts


@dataclass(frozen=True)
class CPUFacts:
    capacity_milli: int | None = None  # None: unknown (no Node yet in a cluster)
    window_seconds: int = 1
    interval_seconds: int = 1
    avg: BEWindow = BEWindow()
    last: BEWindow = BEWindow()
    batch_allocatable: float = -1.0  # getBEMilliAllocatable
    pod_cpu: Mapping[str, float] = field(default_factory=dict)  # pod uid -> last CPU cores


def window_seconds(cfg: ResourceThresholdStrategy, interval_seconds: int) -> int:
    """v1.7+: max(collect interval, cpuEvictTimeWindowSeconds)."""
    configured = cfg.cpu_evict_time_window_seconds
    return configured if configured is not None and configured > interval_seconds else interval_seconds


def read_facts(state: QoSState, *, collect_interval: float, now_ms: int, standalone: bool = False) -> CPUFacts:
    interval = int(collect_interval)  # Duration.Seconds() truncated to int64, as upstream
    cfg = state.nodeslo.resource_used_threshold_with_be
    window = window_seconds(cfg, interval)
    capacity = _capacity(state, standalone)
    cache = state.cache
    if cache is None or feature_disabled(state.nodeslo_present, state.nodeslo) is not None \
            or isinstance(check_config(cfg), str):
        # no usage, or the plan stops at the config (under the chart, every round: no satisfaction percents)
        return CPUFacts(capacity, window, interval, batch_allocatable=_batch_allocatable(state))
    avg = _query(cache, now_ms - window * 1000, now_ms, last=False)
    last = _query(cache, now_ms - int(2000 * collect_interval), now_ms, last=True)
    oldest = now_ms - int(2000 * collect_interval)
    pods = {}
    for pod in state.pods:
        sample = cache.last(MetricCache.key("pod_cpu_usage", pod_uid=pod.uid))
        if sample is not None and sample[0] >= oldest:
            pods[pod.uid] = sample[1]
    return CPUFacts(capacity, window, interval, avg, last, _batch_allocatable(state), pods)


def _query(cache: MetricCache, start_ms: int, end_ms: int, *, last: bool) -> BEWindow:
    values, counts = [], []
    for kind in (KIND_USAGE, KIND_REQUEST, KIND_REAL_LIMIT):
        agg = cache.aggregate(MetricCache.key(kind), start_ms, end_ms)
        values.append(0.0 if agg is None else (agg.last if last else agg.avg))
        counts.append(0 if agg is None else agg.count)
    return BEWindow(values[0], values[1], values[2], min(counts))


def _capacity(state: QoSState, standalone: bool) -> int | None:
    if state.node is None:
        # standalone (no Node object): the host's online CPUs, as the node info loop last read them (not sysfs every
        # round: a file or more per CPU)
        if not standalone:
            return None
        topology = state.cpu_topology
        if topology is None or not topology.cpus:
            topology = CPUTopology.read(state.paths)
        return len(topology.cpus) * 1000
    try:
        return milli_value(_status(state, "capacity").get("cpu"))
    except QuantityError:  # absent or malformed: no capacity, so no eviction this pass
        return None


def _batch_allocatable(state: QoSState) -> float:
    """getBEMilliAllocatable: the Node's allocatable batch-cpu (milli already), 0 → 1, missing or negative → −1."""
    if state.node is None:
        return -1.0
    value = _status(state, "allocatable").get(BATCH_CPU)
    if value is None or isinstance(value, bool) or not isinstance(value, str | int | float):
        return -1.0
    try:
        quantity = parse_quantity(value)
    except InvalidInput:
        return -1.0
    if quantity < 0:
        return -1.0
    return float(math.ceil(quantity)) if quantity > 0 else float(MIN_ALLOCATABLE_BATCH_MILLI)


def _status(state: QoSState, key: str) -> Mapping[str, object]:
    status = (state.node or {}).get("status")
    value = status.get(key) if isinstance(status, dict) else None
    return value if isinstance(value, dict) else {}



def check_config(cfg: ResourceThresholdStrategy) -> tuple[int, int] | str:
    """isSatisfactionConfigValid: (lower, upper) percents, or upstream's reason for refusing them."""
    lower = cfg.cpu_evict_be_satisfaction_lower_percent
    upper = cfg.cpu_evict_be_satisfaction_upper_percent
    if lower is None or upper is None:
        return "CPUEvictBESatisfactionLowerPercent or CPUEvictBESatisfactionUpperPercent not config"
    if lower > SATISFACTION_LOWER_MAX or lower <= 0:
        return f"CPUEvictBESatisfactionLowerPercent({lower}) is not valid! must (0,{SATISFACTION_LOWER_MAX}]"
    if upper >= SATISFACTION_UPPER_MAX or upper <= 0:
        return f"CPUEvictBESatisfactionUpperPercent({upper}) is not valid,must (0,{SATISFACTION_UPPER_MAX})"
    if upper < lower:
        return f"CPUEvictBESatisfactionUpperPercent({upper}) < CPUEvictBESatisfactionLowerPercent({lower})"
    return lower, upper


def usage_high(usage: float, limit: float, threshold: int) -> bool:
    """isBECPUUsageHighEnough."""
    if limit <= 0:
        return False
    if limit < 1000:
        return True
    return usage / limit >= threshold / 100


def release(request: float, limit: float, lower: int, upper: int) -> int:
    """calculateResourceMilliToReleaseBySatisfaction."""
    if request <= 0:
        return 0
    satisfaction = limit / request
    if satisfaction > lower / 100:
        return 0
    gap = upper / 100 - satisfaction
    if gap <= 0:
        return 0
    return int(request * gap)


def plan(state: QoSState, facts: CPUFacts) -> EvictionPlan:
    """One round's decision (calculateMilliReleaseByBESatisfaction + getBEPodEvictInfoAndSort), no cool-down."""
    if facts.capacity_milli is None:
        return EvictionPlan(GATE, skip="the Node object is not known yet")
    if facts.capacity_milli <= 0:
        return EvictionPlan(GATE, skip=f"node CPU capacity {facts.capacity_milli}m is not positive")
    off = feature_disabled(state.nodeslo_present, state.nodeslo)
    if off is not None:
        return EvictionPlan(GATE, skip=off)
    cfg = state.nodeslo.resource_used_threshold_with_be
    checked = check_config(cfg)
    if isinstance(checked, str):
        return EvictionPlan(GATE, skip=f"invalid config: {checked}")
    lower, upper = checked
    threshold = cfg.cpu_evict_be_usage_threshold_percent
    threshold = USAGE_THRESHOLD_PERCENT if threshold is None else threshold
    by_allocatable = cfg.cpu_evict_policy == CPU_EVICT_BY_ALLOCATABLE
    avg, last = facts.avg, facts.last
    if facts.avg.count * facts.interval_seconds < facts.window_seconds // 3:
        return EvictionPlan(GATE, skip=f"BE CPU samples not enough ({avg.count} in a {facts.window_seconds}s window)")
    avg_limit = facts.batch_allocatable if by_allocatable else avg.real_limit
    if not usage_high(avg.usage, avg_limit, threshold):
        return EvictionPlan(GATE)
    need = release(avg.request, avg_limit, lower, upper)
    if need <= 0:
        return EvictionPlan(GATE)
    last_limit = facts.batch_allocatable if by_allocatable else last.real_limit
    if not usage_high(last.usage, last_limit, threshold):
        return EvictionPlan(GATE)
    if not (last.request == avg.request and last_limit == avg_limit):
        current = release(last.request, last_limit, lower, upper)
        if current <= 0:
            return EvictionPlan(GATE)
        need = min(need, current)
    summary = (f"BE CPU satisfaction {last_limit:.0f}m/{last.request:.0f}m below {lower}% with usage "
               f"{last.usage:.0f}m, release {need}m of batch-cpu requests to reach {upper}%")
    return EvictionPlan(GATE, float(need), tuple(victims(state.pods, facts.pod_cpu)), summary=summary)


def victims(pods: list[PodMeta], pod_cpu: Mapping[str, float]) -> list[Eviction]:
    """BE-labelled pods in upstream's order, each credited with its batch-cpu request."""
    infos = []
    for pod in pods:
        if pod.koord_qos != QOS_BE:
            continue
        used = int(pod_cpu.get(pod.uid, 0.0) * 1000)
        request = pod_batch_milli_cpu(pod.raw)
        infos.append((pod, request, used / request if request > 0 else 0.0))
    infos.sort(key=_order)
    return [Eviction(p, GATE, float(req), message=message(GATE, p.name)) for p, req, _ in infos]


def _order(info: tuple[PodMeta, int, float]) -> tuple[int, float]:
    """Lower priority first, then higher use/request. [quirk] upstream compares priorities only when both pods have
    one (else by use), which is no strict weak order; an unset priority counts as 0 here (docs/decisions.md)."""
    return spec_priority(info[0]) or 0, -info[2]


def plan_round(state: QoSState, *, collect_interval: float, now_ms: int, standalone: bool = False) -> EvictionPlan:
    """One round: the facts read now, then the plan (koordlet.qos.evictstrategy runs it)."""
    return plan(state, read_facts(state, collect_interval=collect_interval, now_ms=now_ms, standalone=standalone))
