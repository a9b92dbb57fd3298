"""What CPU burst decides from: current quotas, throttling and usage from the metric cache, the token buckets."""

# Upstream: pkg/koordlet/qosmanager/plugins/cpuburst/cpu_burst.go (burstLimiter, getNodeStateForBurst,
# cfsBurstAllowedByLimiter, the container/pod quota reads), qosmanager/helpers/metrics_query.go (windows).
#
# The planner's memory between passes is the token bucket of each container (upstream's containerLimiter map). It
# lives in a BurstMemory the CPUBurst feature object keeps (koordlet/qos/features.py); read_facts
# advances the buckets with this pass's usage and puts only their verdicts in the facts, so plan is a pure function
# of (state, facts). The quota a scaling step starts from is the cgroup file itself, read here, as upstream does.

from __future__ import annotations

import contextlib
import logging
import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from apis.core.errors import HostReadError, InvalidInput
from apis.extension.qos import QOS_BE, QOS_LSE, QOS_LSR, koord_qos_class
from apis.extension.resource_status import CPUSetError, parse_cpuset
from apis.slo.types import CPUBurstConfig, CPUBurstStrategy
from koordlet.host.driver import K8sQoS
from koordlet.host.resources import parse_cpu_max
from koordlet.metriccache import MetricCache, SeriesKey
from koordlet.qos.cpuburst_config import (
    base_quota,
    burstable,
    container_specs,
    cpu_limit_milli,
    pod_config,
)
from koordlet.qos.cpuqos import pod_cpu_request_milli
from koordlet.qos.state import QoSState
from koordlet.qos.steady import SteadyFacts
from koordlet.states.model import PodMeta

log = logging.getLogger(__name__)
T = TypeVar("T")

NodeState = Literal["overload", "cooling", "idle", "unknown"]
SHARE_POOL_COOLING_RATIO = 0.9  # cooling from 0.9 × threshold up to the threshold
LIMITER_CONSUME_PERCENT = 100  # usage at or above the limit spends tokens
LIMITER_SAVE_PERCENT = 60  # usage below 60 % of the limit saves tokens


# ---- the token bucket (burstLimiter) -----------------------------------------------------------------------------


@dataclass
class Limiter:
    """A container's burst budget: capacity = cfsQuotaBurstPeriodSeconds × (cfsQuotaBurstPercent − 100); usage above
    the limit spends (usage% − 100) per second, usage below 60 % saves (100 − usage%) per second; bursting is allowed
    while the balance is positive.

    [quirk] upstream counts whole elapsed seconds (int64 of the float) and forgets the fraction at every update, so
    a pass interval under a second never moves the bucket; we count the exact elapsed time."""

    capacity: int
    tokens: float
    last: float  # monotonic seconds of the last update
    expire: float  # seconds without an update after which the bucket is dropped (2 × the period)

    @classmethod
    def new(cls, period_seconds: int, max_percent: int, now: float, rng: random.Random) -> Limiter:
        capacity = period_seconds * (max_percent - 100)
        # upstream starts each bucket at a random fill in [0, 0.5) of the capacity
        return cls(capacity, float(int(capacity * (rng.random() / 2))), now, float(2 * period_seconds))

    def allow(self, now: float, usage_percent: int) -> bool:
        elapsed = now - self.last
        if usage_percent >= LIMITER_CONSUME_PERCENT:
            self.tokens -= (usage_percent - 100) * elapsed
        elif usage_percent < LIMITER_SAVE_PERCENT:
            self.tokens += (100 - usage_percent) * elapsed
        self.tokens = max(min(self.tokens, self.capacity), -self.capacity)
        self.last = now
        return self.tokens > 0

    def expired(self, now: float) -> bool:
        return now - self.last > self.expire


class BurstMemory:
    """What CPU burst remembers between passes: one Limiter per container id, and the clocks and windows."""

    def __init__(self, collect_interval: float = 1.0, reconcile_interval: float = 1.0, *,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
                 rng: random.Random | None = None) -> None:
        # helpers.CollectContainerResMetricLast / CollectContainerThrottledMetric: the last sample within 2 × the
        # collect interval; getNodeStateForBurst: the average over min(5 × the reconcile interval, 10 s).
        self.last_window = 2 * collect_interval
        self.avg_window = min(5 * reconcile_interval, 10.0)
        self.clock = clock
        self.wall = wall
        self.rng = rng or random.Random()
        self.limiters: dict[str, Limiter] = {}

    def allowed(self, container_id: str, cfg: CPUBurstConfig, limit_milli: int, usage: float | None) -> bool:
        """cfsBurstAllowedByLimiter."""
        if cfg.cfs_quota_burst_period_seconds < 0:
            return True  # no period: bursting is not limited over time
        if cfg.cfs_quota_burst_percent < 100:
            return False
        limit = limit_milli / 1000
        used = usage if usage is not None else limit  # no sample: taken as using exactly its limit
        now = self.clock()
        limiter = self.limiters.get(container_id)
        capacity = cfg.cfs_quota_burst_period_seconds * (cfg.cfs_quota_burst_percent - 100)
        if limiter is None or limiter.capacity != capacity:  # new, or the config changed (UpdateIfChanged)
            limiter = self.limiters[container_id] = Limiter.new(cfg.cfs_quota_burst_period_seconds,
                                                                cfg.cfs_quota_burst_percent, now, self.rng)
        return limiter.allow(now, int(used / limit * 100))

    def recycle(self) -> None:
        """Recycle: drop the buckets of containers not seen for 2 × their period."""
        now = self.clock()
        for key in [k for k, v in self.limiters.items() if v.expired(now)]:
            del self.limiters[key]


# ---- facts ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ContainerFacts:
    quota: int  # current cpu.cfs_quota_us (-1: unlimited)
    period: int | None  # v2: cpu.max's period (the line is rewritten with it); None on v1
    throttled: float | None  # last throttled-periods ratio within the window; None: no sample
    allowed: bool  # the token bucket lets it burst


@dataclass(frozen=True)
class BurstFacts:
    burst_file: bool  # cpu.cfs_burst_us (v2 cpu.max.burst) exists: kernel >= 5.14 or Anolis
    node_state: NodeState = "unknown"
    containers: Mapping[str, ContainerFacts] = field(default_factory=dict)  # container cgroup dir -> facts
    pods: Mapping[str, tuple[int, int | None]] = field(default_factory=dict)  # pod cgroup dir -> (quota, v2 period)


def read_facts(state: QoSState, *, steady: SteadyFacts | None = None,
               memory: BurstMemory | None = None) -> BurstFacts:
    """The current quotas of the containers the cfs-quota burst looks at, their throttling and usage from the metric
    cache, the token buckets' verdicts and the node's share-pool state.

    Where a pod's policy has no cfs-quota burst, its containers are only reset to their base quota: those quotas
    are kept with the steady facts (a reset value stays put). Where it has one they are read every pass, and so are
    throttling, usage and the node state. Nothing is read before a NodeSLO arrived (the plan writes nothing then)."""
    memory = memory if memory is not None else BurstMemory()
    burst_file = _kept(steady, "cpuburst/burst-file", lambda: os.path.exists(
        state.cgroup_file("cpu.cfs_burst_us", state.qos_dir(K8sQoS.GUARANTEED))))
    if not state.nodeslo_present:
        return BurstFacts(burst_file)
    node = state.nodeslo.cpu_burst_strategy
    targets = _kept(steady, "cpuburst/targets", lambda: _targets(state, node.config))
    if steady is not None and steady.get("cpuburst/resets-only", lambda: not any(
            fresh or _limited(cfg) for _, _, cfg, fresh, _ in targets)):
        # only resets to base quotas and no token bucket in play: the facts are those of the kept quotas
        memory.recycle()
        return steady.get("cpuburst/facts", lambda: _gather(state, steady, memory, node, targets, burst_file))
    return _gather(state, steady, memory, node, targets, burst_file)


def _limited(cfg: CPUBurstConfig) -> bool:
    """Whether the token bucket limits bursting over time (only then does its verdict need the usage)."""
    return cfg.cfs_quota_burst_period_seconds >= 0 and cfg.cfs_quota_burst_percent >= 100


def _gather(state: QoSState, steady: SteadyFacts | None, memory: BurstMemory, node: CPUBurstStrategy,
            targets: list[_Target], burst_file: bool) -> BurstFacts:
    now_ms = int(memory.wall() * 1000)
    containers: dict[str, ContainerFacts] = {}
    pods: dict[str, tuple[int, int | None]] = {}
    any_scaling = False
    for pod_dir, pod_quota, cfg, fresh, pod_targets in targets:
        limited = _limited(cfg)
        for container_id, cgroup_dir, quota_path, limit_milli in pod_targets:
            current = _quota(state, quota_path, steady, fresh)
            if current is None:
                continue  # upstream: the cgroup is not there (yet); skip this round
            # cfsBurstAllowedByLimiter runs before the policy is looked at, so buckets advance under any policy
            usage = _last(state.cache, "container_cpu_usage", container_id, now_ms, memory.last_window) \
                if limited else None
            allowed = memory.allowed(container_id, cfg, limit_milli, usage)
            throttled = (_last(state.cache, "container_cpu_throttled", container_id, now_ms, memory.last_window)
                         if fresh else None)
            containers[cgroup_dir] = ContainerFacts(current[0], current[1], throttled, allowed)
            if pod_dir not in pods:
                pod_current = _quota(state, pod_quota, steady, fresh)
                if pod_current is not None:
                    pods[pod_dir] = pod_current
            any_scaling = any_scaling or fresh
    memory.recycle()
    node_state: NodeState = "unknown"
    if any_scaling:  # the node state only changes a scale-up or a remain: needless under a reset
        node_state = share_pool_state(state, node.share_pool_threshold_percent, now_ms, memory.avg_window,
                                      _kept(steady, "cpuburst/cpus", lambda: _online_cpus(state)), steady)
    return BurstFacts(burst_file, node_state, containers, pods)


_Target = tuple[str, str, CPUBurstConfig, bool, tuple[tuple[str, str, str, int], ...]]


def _targets(state: QoSState, node: CPUBurstConfig) -> list[_Target]:
    """(pod cgroup dir, its quota file, its config, whether it has the cfs-quota burst, its running containers with
    a CPU limit as (container ID, cgroup dir, quota file, limit in milli-CPU)) for each burstable pod: a function of
    the pods and the NodeSLO only, so kept with the steady facts."""
    out: list[_Target] = []
    for pod in state.pods:
        if not burstable(pod):
            continue
        cfg, _ = pod_config(pod, node)
        specs = container_specs(pod)
        targets = []
        for c in pod.containers:
            spec = specs.get(c.name)
            if spec is None or not c.running or c.cgroup_dir is None or base_quota(spec) <= 0:
                continue
            targets.append((c.container_id, c.cgroup_dir, state.cgroup_file("cpu.cfs_quota_us", c.cgroup_dir),
                            cpu_limit_milli(spec)))
        out.append((pod.cgroup_dir, state.cgroup_file("cpu.cfs_quota_us", pod.cgroup_dir), cfg, cfg.cfs_quota_burst,
                    tuple(targets)))
    return out


def containers_read_every_tick(pods: Sequence[PodMeta], node: CPUBurstConfig) -> frozenset[str]:
    """The containers whose per-second throttling or usage `_gather` reads (those with a CPU limit, of burstable
    pods with the cfs-quota burst or a limiting token bucket): the collection tick reads them every tick, other
    containers every few (cgroups.CONTAINER_INTERVAL_SECONDS)."""
    out: set[str] = set()
    for pod in pods:
        if not burstable(pod):
            continue
        cfg, _ = pod_config(pod, node)
        if not (cfg.cfs_quota_burst or _limited(cfg)):
            continue
        specs = container_specs(pod)
        for c in pod.containers:
            spec = specs.get(c.name)
            if c.running and spec is not None and base_quota(spec) > 0:
                out.add(c.container_id)
    return frozenset(out)


def share_pool_state(state: QoSState, threshold_percent: int, now_ms: int, window: float,
                     cpus: int | None, steady: SteadyFacts | None = None) -> NodeState:
    """getNodeStateForBurst: the share pool is the node's CPUs minus the LSE/LSR pods' requests; its usage is the
    node's minus the LSE/LSR/BE pods' (system usage stays in, to be conservative), averaged over the window."""
    cache = state.cache
    if cache is None or not cpus:
        return "unknown"
    start = now_ms - int(window * 1000)
    node = _mean(cache, cache.key("node_cpu_usage"), start, now_ms)
    if node is None:
        return "unknown"
    total, used = float(cpus), node
    for request, key in _kept(steady, "cpuburst/share-pool", lambda: _share_pool_pods(state)):
        if request is not None:
            total -= request / 1000
        if key is not None:
            usage = _mean(cache, key, start, now_ms)
            if usage is not None:
                used -= usage
    return node_state(used / total if total > 0 else 1.0, threshold_percent)


def _share_pool_pods(state: QoSState) -> list[tuple[int | None, SeriesKey | None]]:
    """Per pod, in order: its CPU request (milli) where it is LSE/LSR (what the share pool lacks), the key of its
    usage series where it is LSE/LSR/BE (what the share pool's usage leaves out); a function of the pods alone."""
    out: list[tuple[int | None, SeriesKey | None]] = []
    for pod in state.pods:
        qos = koord_qos_class(pod.raw)
        request = None
        if qos in (QOS_LSE, QOS_LSR):
            with contextlib.suppress(InvalidInput):  # an unreadable request counts as none
                request = pod_cpu_request_milli(pod)
        if qos in (QOS_LSE, QOS_LSR, QOS_BE):
            out.append((request, MetricCache.key("pod_cpu_usage", pod_uid=pod.uid)))
    return out


def _mean(cache: MetricCache, key: SeriesKey, start_ms: int, end_ms: int) -> float | None:
    """The window's average (all the share-pool state needs: no percentiles), None without samples."""
    _, values = cache.window(key, start_ms, end_ms)
    return sum(values) / len(values) if len(values) else None


def node_state(ratio: float, threshold_percent: int) -> NodeState:
    threshold = threshold_percent / 100
    if ratio >= threshold:
        return "overload"
    if ratio >= threshold * SHARE_POOL_COOLING_RATIO:
        return "cooling"
    return "idle"


def _last(cache: MetricCache | None, kind: str, container_id: str, now_ms: int, window: float) -> float | None:
    if cache is None:
        return None
    sample = cache.last(cache.key(kind, container_id=container_id))
    if sample is None or sample[0] < now_ms - int(window * 1000):
        return None
    return sample[1]


def _quota(state: QoSState, path: str, steady: SteadyFacts | None, fresh: bool) -> tuple[int, int | None] | None:
    if fresh or steady is None:
        return _read_quota(path, state.cgroup_version)
    return steady.get(f"cpuburst/quota/{path}", lambda: _read_quota(path, state.cgroup_version))


def _read_quota(path: str, version: int) -> tuple[int, int | None] | None:
    """(quota, v2 period) from cpu.cfs_quota_us or cpu.max; None when missing or unreadable."""
    try:  # os-level read: a pass reads one of these per container under the cfs-quota burst
        fd = os.open(path, os.O_RDONLY)
        try:
            text = os.read(fd, 64).decode("ascii", "replace").strip()
        finally:
            os.close(fd)
    except OSError:
        return None
    if version == 2:
        try:
            return parse_cpu_max(text)
        except HostReadError:
            return None
    try:
        return int(text), None
    except ValueError:
        return None


def _online_cpus(state: QoSState) -> int | None:
    """len(NodeCPUInfo.ProcessorInfos): the node's online logical CPUs."""
    try:
        with open(state.paths.sys("devices", "system", "cpu", "online"), encoding="ascii") as f:
            return len(parse_cpuset(f.read())) or None
    except (OSError, ValueError, CPUSetError):
        return None


def _kept(steady: SteadyFacts | None, key: str, read: Callable[[], T]) -> T:
    return steady.get(key, read) if steady is not None else read()
