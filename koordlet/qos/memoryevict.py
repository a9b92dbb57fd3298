"""BEMemoryEvict: node memory at or over its NodeSLO threshold → evict BE pods down to the lower percent.

Upstream: pkg/koordlet/qosmanager/plugins/memoryevict/memory_evict.go (v1.7; the BE mode only: the gates
MemoryEvict and MemoryAllocatableEvict are not implemented). Spec dropin.md §d.3.

- `pct = ⌊used × 100 / capacity⌋`; nothing below `thr`; else `need = capacity × (pct − lower) / 100` bytes, where
  `lower = memoryEvictLowerPercent` or `thr − 2` and must be below `thr`.
- Victims: every pod labelled `koordinator.sh/qosClass=BE` (no phase filter), credited with its last memory (0
  without a sample), ordered: priorities different → the lower first (unset: 0, see `_compare`); else both memories
  non-zero → the larger first; else both zero → name descending; else the non-zero one first.
- "last" = the newest sample no older than two collection intervals. Capacity is the Node's
  `status.capacity.memory`; standalone (no Node object) the host's MemTotal.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from apis.core.errors import HostReadError, InvalidInput
from apis.core.quantity import parse_quantity
from apis.extension.qos import QOS_BE
from apis.slo.types import ResourceThresholdStrategy
from koordlet.host.files import read_bytes
from koordlet.metriccache import MetricCache
from koordlet.qos.eviction import (
    Eviction,
    EvictionPlan,
    feature_disabled,
    message,
    spec_priority,
)
from koordlet.qos.state import QoSState
from koordlet.states.model import PodMeta

GATE = "BEMemoryEvict"
STRATEGY = "memoryEvict"  # upstream's MemoryEvictName
RELEASE_BUFFER_PERCENT = 2  # memoryReleaseBufferPercent


@dataclass(frozen=True)
class MemoryFacts:
    capacity: int | None = None  # bytes; None: unknown (no Node yet in a cluster)
    capacity_error: str | None = None
    used: float | None = None  # node memory used, bytes ("last"); None: no recent sample
    pod_memory: Mapping[str, float] = field(default_factory=dict)  # pod uid -> last memory, bytes


def read_facts(state: QoSState, *, collect_interval: float, now_ms: int, standalone: bool = False) -> MemoryFacts:
    """The node's memory capacity, its last memory use and every pod's (from the metric cache)."""
    capacity, error = _capacity(state, standalone)
    cache = state.cache
    if cache is None:
        return MemoryFacts(capacity, error)
    oldest = now_ms - int(2000 * collect_interval)
    used = _last(cache, MetricCache.key("node_memory_usage"), oldest)
    pods: dict[str, float] = {}
    if not _over(state, capacity, used):
        return MemoryFacts(capacity, error, used, pods)  # the plan stops before the pods: they are not looked up
    for pod in state.pods:
        value = _last(cache, MetricCache.key("pod_memory_usage", pod_uid=pod.uid), oldest)
        if value is not None:
            pods[pod.uid] = value
    return MemoryFacts(capacity, error, used, pods)


def _over(state: QoSState, capacity: int | None, used: float | None) -> bool:
    """Whether the plan gets as far as the victims: enabled, a valid config, the node at or over its threshold."""
    checked = check_config(state.nodeslo.resource_used_threshold_with_be)
    if feature_disabled(state.nodeslo_present, state.nodeslo) is not None or isinstance(checked, str):
        return False
    return capacity is not None and capacity > 0 and used is not None and int(used) * 100 // capacity >= checked[0]


def _last(cache: MetricCache, key: tuple[str, ...], oldest: int) -> float | None:
    sample = cache.last(key)
    return sample[1] if sample is not None and sample[0] >= oldest else None


def _capacity(state: QoSState, standalone: bool) -> tuple[int | None, str | None]:
    if state.node is None:
        if not standalone:
            return None, "the Node object is not known yet"
        try:  # standalone: the host's MemTotal (kB)
            for line in read_bytes(state.proc("meminfo")).decode().splitlines():
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024, None
        except (HostReadError, ValueError, IndexError) as e:
            return None, f"MemTotal unreadable: {e}"
        return None, "no MemTotal in meminfo"
    status = state.node.get("status")
    capacity = status.get("capacity") if isinstance(status, dict) else None
    value = capacity.get("memory") if isinstance(capacity, dict) else None
    if value is None or isinstance(value, bool) or not isinstance(value, str | int | float):
        return None, "Node status.capacity.memory is missing"
    try:
        return math.ceil(parse_quantity(value)), None  # Quantity.Value
    except InvalidInput as e:
        return None, f"Node status.capacity.memory {value!r}: {e}"


def check_config(cfg: ResourceThresholdStrategy) -> tuple[int, int] | str:
    """(threshold, lower) percents, or why the config is refused (upstream's messages)."""
    thr = cfg.memory_evict_threshold_percent
    if thr is None:
        return "threshold percent is nil"
    if thr < 0:
        return f"threshold percent({thr}) should equal or greater than 0"
    lower = cfg.memory_evict_lower_percent
    if lower is None:
        lower = thr - RELEASE_BUFFER_PERCENT
    if lower >= thr:
        return f"lower percent({lower}) should less than threshold percent({thr})"
    return thr, lower


def plan(state: QoSState, facts: MemoryFacts) -> EvictionPlan:
    """One round's decision (memoryEvict), without the cool-down (the strategy runner keeps that)."""
    off = feature_disabled(state.nodeslo_present, state.nodeslo)
    if off is not None:
        return EvictionPlan(GATE, skip=off)
    checked = check_config(state.nodeslo.resource_used_threshold_with_be)
    if isinstance(checked, str):
        return EvictionPlan(GATE, skip=f"invalid config: {checked}")
    thr, lower = checked
    if facts.capacity is None or facts.capacity <= 0:
        return EvictionPlan(GATE, skip=facts.capacity_error or f"memory capacity({facts.capacity}) should greater "
                                                                   "than 0")
    if facts.used is None:
        return EvictionPlan(GATE, skip="no recent node memory sample")
    pct = int(facts.used) * 100 // facts.capacity
    if pct < thr:
        return EvictionPlan(GATE)  # below the threshold: the normal case, nothing to say
    need = facts.capacity * (pct - lower) // 100
    summary = (f"node memory usage {pct}% (used {int(facts.used)} of {facts.capacity} bytes) >= threshold {thr}%, "
               f"release {need} bytes to reach {lower}%")
    return EvictionPlan(GATE, float(need), tuple(victims(state.pods, facts.pod_memory)), summary=summary)


def victims(pods: list[PodMeta], memory: Mapping[str, float]) -> list[Eviction]:
    """BE-labelled pods in upstream's order, each credited with its last memory."""
    infos = [(p, memory.get(p.uid, 0.0)) for p in pods if p.koord_qos == QOS_BE]
    infos.sort(key=functools.cmp_to_key(_compare))
    return [Eviction(p, GATE, mem, message=message(GATE, p.name)) for p, mem in infos]


def _compare(a: tuple[PodMeta, float], b: tuple[PodMeta, float]) -> int:
    """getSortedBEPodInfos' less(a, b) as a comparison. [quirk] upstream compares priorities only when both pods
    have one, which is no strict weak order once some have none; an unset priority counts as 0 here (what the
    Priority admission gives a pod without a PriorityClass), see docs/decisions.md."""
    pa, pb = spec_priority(a[0]) or 0, spec_priority(b[0]) or 0
    if pa != pb:
        return -1 if pa < pb else 1
    ma, mb = a[1], b[1]
    if ma != 0 and mb != 0:
        return -1 if ma > mb else (1 if ma < mb else 0)
    if ma == 0 and mb == 0:
        na, nb = a[0].name, b[0].name
        return -1 if na > nb else (1 if na < nb else 0)
    return -1 if mb == 0 else 1


def plan_round(state: QoSState, *, collect_interval: float, now_ms: int, standalone: bool = False) -> EvictionPlan:
    """One round: the facts read now, then the plan (koordlet.qos.evictstrategy runs it)."""
    return plan(state, read_facts(state, collect_interval=collect_interval, now_ms=now_ms, standalone=standalone))
