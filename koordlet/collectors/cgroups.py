"""Pod, container and host-application usage from cgroups: CPU rate, memory and throttling in one read pass.

Upstream splits this over PodResourceCollector, PodThrottledCollector and HostApplicationCollector
(pkg/koordlet/metricsadvisor/collectors/{podresource,podthrottled,hostapplication}); reading each cgroup's files
once per tick is what keeps the cost proportional to pods × containers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from koordlet.errors import HostReadError, InvalidInput
from koordlet.health import Health
from koordlet.host.cgroup import CgroupBackend, CgroupStats
from koordlet.host.files import OpenFiles
from koordlet.states.model import PodMeta

# Previous counters are kept this many ticks after a cgroup was last read (upstream: TTL = 20 × interval).
_PREV_TTL_TICKS = 20


class CgroupUsage(NamedTuple):
    """Usage of one cgroup at one tick (a tuple: built per cgroup per tick)."""

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


class CgroupUsageCollector:
    """Turns cumulative cgroup counters into usage; remembers only the previous read of each target."""

    def __init__(self, backend: CgroupBackend, health: Health, files: OpenFiles | None = None) -> None:
        self.backend = backend
        self.health = health
        self.files = OpenFiles() if files is None else files  # descriptors kept between ticks
        # (scope, key) → (monotonic ns, stats, tick) of the previous read: plain tuples, one per cgroup per tick.
        self._prev: dict[tuple[str, str], tuple[int, CgroupStats, int]] = {}
        self._targets: list[Target] | None = None  # the list `_plan` was built for
        self._plan: list[tuple[Target, tuple[str, str], tuple[str, ...] | InvalidInput]] = []
        self._tick = 0

    def _plan_for(self, targets: list[Target]) -> list[tuple[Target, tuple[str, str], tuple[str, ...] | InvalidInput]]:
        """Per target: its series id and the files to read (or why its dir is refused). Built when the target list
        is replaced (pods came or went), which also closes the descriptors of cgroups no longer read."""
        if targets is not self._targets:
            plan: list[tuple[Target, tuple[str, str], tuple[str, ...] | InvalidInput]] = []
            for t in targets:
                try:
                    plan.append((t, (t.scope, t.key), self.backend.stat_paths(t.rel_dir)))
                except InvalidInput as e:  # a dir that would leave the hierarchy: never read
                    plan.append((t, (t.scope, t.key), e))
            self._targets, self._plan = targets, plan
            self.files.retain({f for _, _, fs in plan if isinstance(fs, tuple) for f in fs})
        return self._plan

    def collect(self, targets: list[Target], now_mono_ns: int) -> dict[tuple[str, str], CgroupUsage]:
        """Usage of every target readable now: CPU cores and throttled share from the change since its previous
        read (None on the first), memory as read. The loop is the collection hot path: 1000 cgroups a second."""
        self._tick += 1
        tick = self._tick
        out: dict[tuple[str, str], CgroupUsage] = {}
        stats_at, read = self.backend.stats_at, self.files.read
        prev_map = self._prev
        reads = 0
        for t, id_, files in self._plan_for(targets):
            if isinstance(files, InvalidInput):
                self.health.skip(t.scope, "bad-cgroup-dir", t.label, str(files))
                continue
            try:
                stats = stats_at(files, read)
            except HostReadError as e:
                self.health.cgroup_read_errors[t.scope] += 1
                if not t.quiet:
                    self.health.skip(t.scope, "cgroup-unreadable", t.label, str(e))
                continue
            reads += 1
            prev = prev_map.get(id_)
            prev_map[id_] = (now_mono_ns, stats, tick)
            cpu: float | None = None
            throttled: float | None = None
            if prev is not None and now_mono_ns > prev[0]:
                before = prev[1]
                delta_cpu = stats.cpu_usage_ns - before.cpu_usage_ns
                if delta_cpu >= 0:  # a negative delta means the cgroup was recreated: wait for the next tick
                    cpu = delta_cpu / (now_mono_ns - prev[0])
                periods = stats.nr_periods - before.nr_periods
                throttled = (stats.nr_throttled - before.nr_throttled) / periods if periods > 0 else 0.0
            out[id_] = CgroupUsage(cpu, stats.memory_usage, stats.memory_with_cache, throttled)
        self.health.cgroup_reads += reads
        if tick % _PREV_TTL_TICKS == 0:
            horizon = tick - _PREV_TTL_TICKS
            self._prev = {k: v for k, v in prev_map.items() if v[2] > horizon}
        return out

    def remembered(self) -> int:
        return len(self._prev)

    def close(self) -> None:
        self.files.close()


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
