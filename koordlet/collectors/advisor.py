"""One collection tick: node, pods/containers, host apps and system usage → metric-cache samples.

Upstream: pkg/koordlet/metricsadvisor (NodeResource, PodResource, PodThrottled, HostApplication and
SystemResource collectors share one state; here they share one function call).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from koordlet.collectors.cgroups import CgroupUsage, CgroupUsageCollector, Target, pod_targets
from koordlet.collectors.hostapps import HostApp, hostapp_targets
from koordlet.collectors.node import NodeCollector, NodeUsage
from koordlet.collectors.psi import PSICollector, PSIReading
from koordlet.health import Health
from koordlet.metriccache import MetricCache, Series
from koordlet.states.model import PodMeta

if TYPE_CHECKING:  # the NVML code is imported only where a GPU hook is wired
    from koordlet.devices.nvidia.usage import GpuUsageCollector


# Series kinds and their one label per target scope (metriccache.KIND_PROPERTIES).
_KIND_PREFIX = {"pod": "pod", "container": "container", "hostapp": "host_application"}
_KIND_LABEL = {"pod": "pod_uid", "container": "container_id", "hostapp": "host_app_name"}
# target, usage id, then the series of memory, memory with page cache, CPU and throttling (None: not kept)
_TargetSeries = tuple[Target, tuple[str, str], Series, Series | None, Series, Series | None]


@dataclass
class Latest:
    """The newest values, for the Prometheus exporter (read-only there)."""

    node: NodeUsage | None = None
    system_cpu: float | None = None
    system_memory: int | None = None
    usage: dict[tuple[str, str], CgroupUsage] = field(default_factory=dict)
    psi: dict[tuple[str, str], PSIReading] = field(default_factory=dict)
    pods: list[PodMeta] = field(default_factory=list)
    host_apps: list[HostApp] = field(default_factory=list)


class Advisor:
    def __init__(self, cache: MetricCache, node: NodeCollector, cgroups: CgroupUsageCollector,
                 psi: PSICollector | None, health: Health, page_cache: bool = False,
                 gpu: GpuUsageCollector | None = None) -> None:
        self.cache = cache
        self.node = node
        self.cgroups = cgroups
        self.psi = psi
        self.health = health
        self.page_cache = page_cache
        self.gpu = gpu  # optional NVIDIA usage hook (upstream: the GPU device collector's Fill*Metric)
        self.latest = Latest()
        self._targets: tuple[list[PodMeta], list[HostApp], list[Target]] | None = None
        self._series: tuple[list[Target], int, list[_TargetSeries]] | None = None
        self._last_store_ms = 0

    def _targets_for(self, pods: list[PodMeta], apps: list[HostApp]) -> list[Target]:
        """Targets change only when the pod list or host apps are replaced; reuse them between ticks."""
        cached = self._targets
        if cached is None or cached[0] is not pods or cached[1] is not apps:
            cached = self._targets = (pods, apps, pod_targets(pods) + hostapp_targets(apps))
        return cached[2]

    def _series_for(self, targets: list[Target]) -> list[_TargetSeries]:
        """Per target: its usage id and the series it feeds, held between ticks (no key building or lookups on
        the hot path); rebuilt when the targets change or the cache's gc dropped series."""
        cached = self._series
        if cached is None or cached[0] is not targets or cached[1] != self.cache.generation:
            series, key = self.cache.series, self.cache.key
            rows: list[_TargetSeries] = []
            for t in targets:
                p = _KIND_PREFIX[t.scope]
                label = {_KIND_LABEL[t.scope]: t.key}
                with_cache = self.page_cache or t.scope == "hostapp"
                rows.append((t, (t.scope, t.key), series(key(f"{p}_memory_usage", **label)),
                             series(key(f"{p}_memory_usage_with_page_cache", **label)) if with_cache else None,
                             series(key(f"{p}_cpu_usage", **label)),
                             None if t.scope == "hostapp" else series(key(f"{p}_cpu_throttled", **label))))
            cached = self._series = (targets, self.cache.generation, rows)
        return cached[2]

    def collect_usage(self, pods: list[PodMeta], apps: list[HostApp], now_ms: int, now_mono_ns: int) -> None:
        node = self.node.collect(now_mono_ns / 1e9)
        targets = self._targets_for(pods, apps)
        usage = self.cgroups.collect(targets, now_mono_ns)
        self._store(node, targets, usage, now_ms)
        if self.gpu is not None:
            self._store_gpu(self.gpu, pods, now_ms)
        self.latest.node, self.latest.usage = node, usage
        self.latest.pods, self.latest.host_apps = pods, apps

    def _store_gpu(self, gpu: GpuUsageCollector, pods: list[PodMeta], now_ms: int) -> None:
        append, key = self.cache.append, self.cache.key
        for sample in gpu.collect(pods):
            append(key(sample.kind, **sample.labels), now_ms, sample.value)

    def collect_psi(self, pods: list[PodMeta]) -> None:
        if self.psi is None:
            return
        self.latest.psi = self.psi.collect(pod_targets(pods))
        self.latest.pods = pods

    def _store(self, node: NodeUsage, targets: list[Target], usage: dict[tuple[str, str], CgroupUsage],
               now_ms: int) -> None:
        append, key = self.cache.append, self.cache.key
        append(key("node_memory_usage"), now_ms, node.memory_bytes)
        for numa, mem in node.numa_memory_bytes.items():
            append(key("node_numa_memory_usage", numa_node_id=str(numa)), now_ms, mem)
        if node.cpu_cores is not None:
            append(key("node_cpu_usage"), now_ms, node.cpu_cores)
            for numa, cores in node.numa_cpu_cores.items():
                append(key("node_numa_cpu_usage", numa_node_id=str(numa)), now_ms, cores)

        sums = {"pod": [0.0, 0], "hostapp": [0.0, 0]}
        cpu_complete = True  # False when a pod/app read this tick has no CPU rate yet (its first observation)
        in_order = now_ms >= self._last_store_ms  # the wall clock stepped back: let the cache drop the samples
        self._last_store_ms = max(now_ms, self._last_store_ms)
        for t, id_, s_mem, s_cache, s_cpu, s_thr in self._series_for(targets):
            u = usage.get(id_)
            if u is None:
                continue
            if in_order:
                s_mem.add(now_ms, u.memory)
                if s_cache is not None:
                    s_cache.add(now_ms, u.memory_with_cache)
                if u.cpu_cores is not None:
                    s_cpu.add(now_ms, u.cpu_cores)
                if u.throttled_ratio is not None and s_thr is not None:
                    s_thr.add(now_ms, u.throttled_ratio)
            sums_of = sums.get(t.scope)
            if sums_of is not None:
                sums_of[0] += u.cpu_cores or 0.0
                sums_of[1] += u.memory
                cpu_complete = cpu_complete and u.cpu_cores is not None

        # System usage = node − Σ pods − Σ host apps, clamped at 0 (upstream collectors/sysresource).
        sys_memory = max(node.memory_bytes - int(sums["pod"][1]) - int(sums["hostapp"][1]), 0)
        append(key("sys_memory_usage"), now_ms, sys_memory)
        self.latest.system_memory = sys_memory
        # Upstream skips system usage while an input is stale; a pod seen for the first time has no CPU rate
        # yet, and counting it as 0 would charge its usage to the system for one tick.
        if node.cpu_cores is not None and cpu_complete:
            sys_cpu = max(node.cpu_cores - sums["pod"][0] - sums["hostapp"][0], 0.0)
            append(key("sys_cpu_usage"), now_ms, sys_cpu)
            self.latest.system_cpu = sys_cpu
            numa_total = sum(node.numa_cpu_cores.values())
            for numa, cores in node.numa_cpu_cores.items():
                share = cores / numa_total if numa_total > 0 else 0.0
                append(key("sys_numa_cpu_usage", numa_node_id=str(numa)), now_ms, sys_cpu * share)
