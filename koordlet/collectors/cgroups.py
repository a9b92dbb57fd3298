"""Pod, container and host-application usage from cgroups: CPU rate, memory and throttling in one read pass.

Upstream splits this over PodResourceCollector, PodThrottledCollector and HostApplicationCollector
(pkg/koordlet/metricsadvisor/collectors/{podresource,podthrottled,hostapplication}); reading each cgroup's files
once per tick is what keeps the cost proportional to pods × containers.
"""

from __future__ import annotations

from dataclasses import dataclass

from koordlet.errors import HostReadError
from koordlet.health import Health
from koordlet.host.cgroup import CgroupBackend, CgroupStats
from koordlet.states.model import PodMeta

# Previous counters are kept this many ticks after a cgroup was last read (upstream: TTL = 20 × interval).
_PREV_TTL_TICKS = 20


@dataclass(frozen=True, slots=True)
class CgroupUsage:
    cpu_cores: float | None  # None until two observations exist
    memory: int
    memory_with_cache: int
    throttled_ratio: float | None


@dataclass(frozen=True, slots=True)
class Target:
    """One cgroup to sample: scope is `pod`, `container` or `hostapp`; key is uid / container id / app name."""

    scope: str
    key: str
    rel_dir: str
    label: str  # for log lines: `ns/name` or `ns/name/container`
    quiet: bool = False  # a pod not Running may have no cgroup: count the miss, do not warn


@dataclass(slots=True)
class _Prev:
    mono_ns: int
    stats: CgroupStats
    tick: int


class CgroupUsageCollector:
    """Turns cumulative cgroup counters into usage; remembers only the previous read of each target."""

    def __init__(self, backend: CgroupBackend, health: Health) -> None:
        self.backend = backend
        self.health = health
        self._prev: dict[tuple[str, str], _Prev] = {}
        self._tick = 0

    def collect(self, targets: list[Target], now_mono_ns: int) -> dict[tuple[str, str], CgroupUsage]:
        self._tick += 1
        out: dict[tuple[str, str], CgroupUsage] = {}
        for t in targets:
            try:
                stats = self.backend.stats(t.rel_dir)
            except HostReadError as e:
                self.health.cgroup_read_errors[t.scope] += 1
                if not t.quiet:
                    self.health.skip(t.scope, "cgroup-unreadable", t.label, str(e))
                continue
            self.health.cgroup_reads += 1
            id_ = (t.scope, t.key)
            prev = self._prev.get(id_)
            self._prev[id_] = _Prev(now_mono_ns, stats, self._tick)
            out[id_] = _usage(stats, prev, now_mono_ns)
        if self._tick % _PREV_TTL_TICKS == 0:
            horizon = self._tick - _PREV_TTL_TICKS
            self._prev = {k: v for k, v in self._prev.items() if v.tick > horizon}
        return out

    def remembered(self) -> int:
        return len(self._prev)


def _usage(stats: CgroupStats, prev: _Prev | None, now_mono_ns: int) -> CgroupUsage:
    cpu: float | None = None
    throttled: float | None = None
    if prev is not None and now_mono_ns > prev.mono_ns:
        delta_cpu = stats.cpu_usage_ns - prev.stats.cpu_usage_ns
        if delta_cpu >= 0:  # a negative delta means the cgroup was recreated: wait for the next tick
            cpu = delta_cpu / (now_mono_ns - prev.mono_ns)
        periods = stats.nr_periods - prev.stats.nr_periods
        throttled = (stats.nr_throttled - prev.stats.nr_throttled) / periods if periods > 0 else 0.0
    return CgroupUsage(cpu, stats.memory_usage, stats.memory_with_cache, throttled)


def pod_targets(pods: list[PodMeta]) -> list[Target]:
    """The pod dirs and their running containers' dirs (terminated pods are attempted too, like upstream)."""
    out: list[Target] = []
    for pod in pods:
        label = f"{pod.namespace}/{pod.name}"
        quiet = pod.phase != "Running"
        out.append(Target("pod", pod.uid, pod.cgroup_dir, label, quiet))
        for c in pod.containers:
            if c.running and c.cgroup_dir is not None:
                out.append(Target("container", c.container_id, c.cgroup_dir, f"{label}/{c.name}", quiet))
    return out
