"""One collection tick: node, pods/containers, host apps and system usage → metric-cache samples.

Upstream: pkg/koordlet/metricsadvisor (NodeResource, PodResource, PodThrottled, HostApplication and
SystemResource collectors share one state; here they share one function call).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import reduce
from operator import add
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import numpy.typing as npt

from koordlet.collectors.cgroups import CgroupUsageCollector, Target, pod_targets
from koordlet.collectors.hostapps import HostApp, hostapp_targets
from koordlet.collectors.node import NodeCollector, NodeUsage
from koordlet.collectors.numamemory import PodNumaMemory
from koordlet.collectors.psi import PSICollector, PSIReading
from koordlet.collectors.usage import CgroupUsage, TickUsage, UsageId
from koordlet.health import Health
from koordlet.metriccache import ColumnWriter, MetricCache, SeriesKey
from koordlet.states.model import PodMeta

if TYPE_CHECKING:  # the NVML code is imported only where a GPU hook is wired
    from koordlet.devices.nvidia.usage import GpuUsageCollector, Sample


# Series kinds and their one label per target scope (metriccache.KIND_PROPERTIES).
_KIND_PREFIX = {"pod": "pod", "container": "container", "hostapp": "host_application"}
_KIND_LABEL = {"pod": "pod_uid", "container": "container_id", "hostapp": "host_app_name"}
Rows = npt.NDArray[np.intp]


class _Columns(NamedTuple):
    """Where one target list's usage goes, held between ticks: the writer of its series (memory of every target,
    memory with page cache of `cache_rows`, CPU of every target, throttling of `throttle_rows`), and the rows
    of pods and of host applications, summed for system usage."""

    targets: list[Target]
    generation: int
    writer: ColumnWriter
    cache_rows: Rows
    throttle_rows: Rows
    pod_rows: Rows
    app_rows: Rows


@dataclass
class Latest:
    """The newest values, for the Prometheus exporter (read-only there)."""

    node: NodeUsage | None = None
    system_cpu: float | None = None
    system_memory: int | None = None
    usage: Mapping[UsageId, CgroupUsage] = field(default_factory=dict)
    psi: dict[tuple[str, str], PSIReading] = field(default_factory=dict)
    pods: list[PodMeta] = field(default_factory=list)
    host_apps: list[HostApp] = field(default_factory=list)
    gpu: list[Sample] = field(default_factory=list)  # the GPU usage samples of the last tick (NVIDIA)


class Advisor:
    def __init__(self, cache: MetricCache, node: NodeCollector, cgroups: CgroupUsageCollector,
                 psi: PSICollector | None, health: Health, page_cache: bool = False,
                 gpu: GpuUsageCollector | None = None, numa_memory: PodNumaMemory | None = None) -> None:
        self.cache = cache
        self.node = node
        self.cgroups = cgroups
        self.psi = psi
        self.health = health
        self.page_cache = page_cache
        self.gpu = gpu  # optional NVIDIA usage hook (upstream: the GPU device collector's Fill*Metric)
        self.numa_memory = numa_memory  # pods' memory per NUMA node, every few ticks: per-NUMA system memory
        self.latest = Latest()
        self._targets: tuple[list[PodMeta], list[HostApp], list[Target]] | None = None
        self._columns: _Columns | None = None
        self._last_store_ms = 0

    def _targets_for(self, pods: list[PodMeta], apps: list[HostApp]) -> list[Target]:
        """Targets change only when the pod list or host apps are replaced; reuse them between ticks."""
        cached = self._targets
        if cached is None or cached[0] is not pods or cached[1] is not apps:
            cached = self._targets = (pods, apps, pod_targets(pods) + hostapp_targets(apps))
        return cached[2]

    def _columns_for(self, targets: list[Target]) -> _Columns:
        """The series of each target and its rows, held between ticks (no key building or lookups on the hot
        path); rebuilt when the targets change or the cache's gc dropped series."""
        cached = self._columns
        if cached is None or cached.targets is not targets or cached.generation != self.cache.generation:
            key = self.cache.key
            names = [(_KIND_PREFIX[t.scope], {_KIND_LABEL[t.scope]: t.key}) for t in targets]
            cache_rows = [i for i, t in enumerate(targets) if self.page_cache or t.scope == "hostapp"]
            throttle_rows = [i for i, t in enumerate(targets) if t.scope != "hostapp"]
            keys: list[SeriesKey] = [key(f"{p}_memory_usage", **label) for p, label in names]
            keys += [key(f"{names[i][0]}_memory_usage_with_page_cache", **names[i][1]) for i in cache_rows]
            keys += [key(f"{p}_cpu_usage", **label) for p, label in names]
            keys += [key(f"{names[i][0]}_cpu_throttled", **names[i][1]) for i in throttle_rows]
            cached = self._columns = _Columns(
                targets, self.cache.generation, self.cache.columns(keys), _rows(cache_rows), _rows(throttle_rows),
                _rows([i for i, t in enumerate(targets) if t.scope == "pod"]),
                _rows([i for i, t in enumerate(targets) if t.scope == "hostapp"]))
        return cached

    def collect_usage(self, pods: list[PodMeta], apps: list[HostApp], now_ms: int, now_mono_ns: int,
                      every_tick: frozenset[str] = frozenset()) -> None:
        """`every_tick`: the IDs of the containers a per-second reader needs (the others are read every
        `cgroups.container_stride` ticks)."""
        node = self.node.collect(now_mono_ns / 1e9)
        targets = self._targets_for(pods, apps)
        usage = self.cgroups.collect(targets, now_mono_ns, every_tick)
        self._store(node, targets, usage, now_ms)
        if self.numa_memory is not None and node.numa_memory_bytes:
            self._store_numa_memory(node, pods, now_ms)
        if self.gpu is not None:
            self._store_gpu(self.gpu, pods, now_ms)
        self.latest.node, self.latest.usage = node, usage
        self.latest.pods, self.latest.host_apps = pods, apps

    def _store_gpu(self, gpu: GpuUsageCollector, pods: list[PodMeta], now_ms: int) -> None:
        append, key = self.cache.append, self.cache.key
        samples = gpu.collect(pods)
        for sample in samples:
            append(key(sample.kind, **sample.labels), now_ms, sample.value)
        self.latest.gpu = samples

    def _store_numa_memory(self, node: NodeUsage, pods: list[PodMeta], now_ms: int) -> None:
        """System memory per NUMA node = the node's − Σ pods', clamped at 0 (upstream sysresource
        collectSysNUMAResUsed; host applications are not subtracted there either)."""
        assert self.numa_memory is not None
        pods_numa = self.numa_memory.sample(pods, self.cgroups.last_read)
        if pods_numa is None:
            return
        append, key = self.cache.append, self.cache.key
        for numa, mem in node.numa_memory_bytes.items():
            append(key("sys_numa_memory_usage", numa_node_id=str(numa)), now_ms,
                   float(max(mem - pods_numa.get(numa, 0), 0)))

    def collect_psi(self, pods: list[PodMeta]) -> None:
        if self.psi is None:
            return
        self.latest.psi = self.psi.collect(pod_targets(pods))
        self.latest.pods = pods

    def _store(self, node: NodeUsage, targets: list[Target], usage: TickUsage, now_ms: int) -> None:
        append, key = self.cache.append, self.cache.key
        append(key("node_memory_usage"), now_ms, node.memory_bytes)
        for numa, mem in node.numa_memory_bytes.items():
            append(key("node_numa_memory_usage", numa_node_id=str(numa)), now_ms, mem)
        if node.cpu_cores is not None:
            append(key("node_cpu_usage"), now_ms, node.cpu_cores)
            for numa, cores in node.numa_cpu_cores.items():
                append(key("node_numa_cpu_usage", numa_node_id=str(numa)), now_ms, cores)

        columns = self._columns_for(targets)
        if now_ms >= self._last_store_ms:  # else the wall clock stepped back: the cache would drop the samples
            fresh = usage.fresh  # a row carried from an earlier tick was stored then
            values = (np.where(fresh, usage.memory, np.nan), np.where(fresh, usage.memory_with_cache, np.nan)[
                columns.cache_rows], np.where(fresh, usage.cpu, np.nan),
                np.where(fresh, usage.throttled, np.nan)[columns.throttle_rows])
            columns.writer.add(now_ms, np.concatenate(values))
        self._last_store_ms = max(now_ms, self._last_store_ms)
        pods_cpu, pods_memory, pods_complete = _sums(usage, columns.pod_rows)
        apps_cpu, apps_memory, apps_complete = _sums(usage, columns.app_rows)

        # System usage = node − Σ pods − Σ host apps, clamped at 0 (upstream collectors/sysresource).
        sys_memory = max(node.memory_bytes - pods_memory - apps_memory, 0)
        append(key("sys_memory_usage"), now_ms, sys_memory)
        self.latest.system_memory = sys_memory
        # Upstream skips system usage while an input is stale; a pod seen for the first time has no CPU rate
        # yet, and counting it as 0 would charge its usage to the system for one tick.
        if node.cpu_cores is not None and pods_complete and apps_complete:
            sys_cpu = max(node.cpu_cores - pods_cpu - apps_cpu, 0.0)
            append(key("sys_cpu_usage"), now_ms, sys_cpu)
            self.latest.system_cpu = sys_cpu
            numa_total = sum(node.numa_cpu_cores.values())
            for numa, cores in node.numa_cpu_cores.items():
                share = cores / numa_total if numa_total > 0 else 0.0
                append(key("sys_numa_cpu_usage", numa_node_id=str(numa)), now_ms, sys_cpu * share)


def _rows(rows: list[int]) -> Rows:
    return np.array(rows, dtype=np.intp)


def _sums(usage: TickUsage, rows: Rows) -> tuple[float, int, bool]:
    """CPU cores and memory summed over the rows read, and whether each of them has a CPU rate. CPU is added in
    row order one at a time, not pairwise as numpy sums: the same float as a loop over the targets."""
    read = usage.read[rows]
    cpu = usage.cpu[rows][read]
    rated = cpu == cpu  # not NaN
    return reduce(add, cpu[rated].tolist(), 0.0), sum(usage.memory[rows][read].tolist()), bool(rated.all())
