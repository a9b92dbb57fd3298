"""Prometheus metrics (upstream koordlet names and labels) and the agent's HTTP endpoints.

Families are built fresh on every render from the agent's latest state (prometheus/client_python custom
collectors), so the series of a deleted pod disappear with the pod; the HTTP server renders once per collection
tick and serves that render to every scraper (koordlet/exposition.py). Upstream: pkg/koordlet/metrics/*.go.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import selectors
import threading
import time
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from apis.core.objects import JSON
from apis.core.quantity import parse_measured, parse_quantity
from apis.extension.resource_status import CPUSetError, parse_cpuset
from apis.extension.resources import BATCH_CPU, BATCH_MEMORY, MID_CPU, MID_MEMORY
from koordlet.collectors.advisor import Latest
from koordlet.collectors.psi import PSIReading
from koordlet.collectors.usage import CgroupUsage, UsageId
from koordlet.devices.metrics import DeviceCollector, DeviceView
from koordlet.exposition import ExpositionCache, SharedRenderError, accepts_gzip
from koordlet.health import Health
from koordlet.metriccache import MetricCache
from koordlet.prediction.predictor import Outcome
from koordlet.qos.cpuset import CPUSetRule
from koordlet.qos.cpusuppress import SuppressStatus
from koordlet.qos.evictor import EvictionStats
from koordlet.schedlat.collector import SchedLatency
from koordlet.schedlat.hist import Totals, cumulative_buckets
from koordlet.states.cpupools import SharePool
from koordlet.states.model import PodMeta
from koordlet.textformat import GoCounterFamily, HistogramRows, RowFamily, TextRenderer
from koordlet.textformat import render_text as render_text  # what tests and benchmarks render one registry with

log = logging.getLogger(__name__)

# kubernetes.io batch/mid extended resources recorded per container (upstream states_pods.go).
_BATCH_MID = (
    (BATCH_CPU, "integer"), (BATCH_MEMORY, "byte"), (MID_CPU, "integer"), (MID_MEMORY, "byte"),
)
# Histogram buckets at 2, 8, 32 ... µs up to 2.1 s: every other log2 slot of the kernel's histogram (hist.py).
_SCHEDLAT_BOUNDS = tuple(range(1, 22, 2))
_PSI_PRECISIONS = ("avg10", "avg60", "avg300")  # upstream metrics/psi.go Precision10/60/300
# Our own pod/container series label pods as cAdvisor does (docs/decisions.md "Pod series"), plus the pod's uid: two
# pods of one name can briefly share a node (a StatefulSet pod recreated), and their series must not collide.
POD_SERIES_LABELS = ["node", "namespace", "pod", "uid"]
CONTAINER_SERIES_LABELS = [*POD_SERIES_LABELS, "container"]
# (name after koordlet_<pod|container>_, help) of the cAdvisor-style counters, from the tick's cumulative reads
_USAGE_COUNTERS = (
    ("cpu_usage_seconds_total", "Cumulative CPU time consumed by the {} (cpuacct.usage / cpu.stat usage_usec)"),
    ("cpu_cfs_periods_total", "CFS enforcement periods the {} has run (cpu.stat nr_periods; only with a quota)"),
    ("cpu_cfs_throttled_periods_total", "CFS periods in which the {} was throttled (cpu.stat nr_throttled)"),
    ("cpu_cfs_throttled_seconds_total", "Time the {} was throttled (cpu.stat throttled_time / throttled_usec)"),
)
_WORKING_SET = ("memory_working_set_bytes", "Working set of the {}: memory usage minus inactive page cache, as "
                "cAdvisor and kubelet compute it (read at scrape time)")

_VIEWS = ("all", "internal", "external")


@dataclass
class AgentMetrics:
    """Stateful metrics (histograms) plus what the fresh-per-scrape collectors read."""

    node_name: str
    health: Health
    latest: Latest
    cache: MetricCache
    start_time: float = field(default_factory=time.time)
    last_nodemetric: JSON | None = None
    # API path of an object this node reports (standalone), e.g. /apis/<group>/<version>/<plural>/<name> → object
    served: dict[str, JSON] = field(default_factory=dict)
    node_allocatable: dict[str, float] = field(default_factory=dict)
    nodemetric_prom: bool = False
    schedlat: SchedLatency | None = None  # gate CPUSchedLatency
    suppress: Callable[[], SuppressStatus] | None = None  # BE CPU suppress's numbers, as the QoS manager has them
    evictions: EvictionStats | None = None  # the eviction strategies' koordlet_pod_eviction{,_detail}
    device_view: Callable[[], DeviceView | None] | None = None  # gates Accelerators / RDMADevices
    # the cgroups' working set, read when a scrape renders (CgroupUsageCollector.working_set), by usage id
    working_set: Callable[[], Mapping[UsageId, int]] | None = None
    container_series: bool = True  # --disable-container-metrics turns the per-container usage and PSI series off
    prediction: Outcome | None = None  # the last NodeMetric report's Prod reclaimable prediction
    # gate CPUSetAllocator: the runtime hook's cpuset rule (share pools from the NRT loop), None until computed
    cpuset_rule: Callable[[], CPUSetRule | None] | None = None
    per_cpu_metric: bool = False  # gate PerCPUMetric: the share pools' CPUs one series each
    # (info, status) → count: the node info collections (`cpu`/`numa`, `succeeded`/`failed`), Agent.refresh_node_info
    node_info_status: Tally[tuple[str, str]] = field(default_factory=Tally)
    # what /metrics shows changes with each collection (or PSI) tick: `collected` counts them; between ticks a
    # render is reused for at most `max_staleness` seconds (the collection interval; docs/decisions.md)
    generation: int = 0
    max_staleness: float = 1.0
    internal: CollectorRegistry = field(default_factory=lambda: CollectorRegistry(auto_describe=False))
    external: CollectorRegistry = field(default_factory=lambda: CollectorRegistry(auto_describe=False))
    # one per view: each keeps the label and histogram-row texts of its last render (koordlet/textformat.py)
    renderers: dict[str, TextRenderer] = field(default_factory=lambda: {v: TextRenderer() for v in _VIEWS})

    def __post_init__(self) -> None:
        self.loop_duration = Histogram(
            "koordlet_agent_loop_duration_seconds", "Duration of one run of an agent loop.", ["loop"],
            buckets=(0.001, 0.004, 0.016, 0.064, 0.256, 1.0, 4.0), registry=self.internal)
        # CPU of the event-loop thread while a loop ran: exact for loops that never await (collect, psi, qos,
        # gc); for loops that hand work to a thread it counts the loop's own share and whatever ran meanwhile.
        self.loop_cpu = Counter(
            "koordlet_agent_loop_cpu_seconds", "CPU time of the event-loop thread spent in an agent loop.", ["loop"],
            registry=self.internal)
        self.kubelet_request_duration = Histogram(
            "koordlet_kubelet_request_duration_seconds", "kubelet http request duration in seconds",
            ["verb", "path", "code"],
            buckets=tuple(0.001 * 4**k for k in range(7)), registry=self.internal)
        self.internal.register(_InternalCollector(self))
        # The agent's own CPU/RSS/fds (upstream's internal registry exposes Go's process collector likewise).
        ProcessCollector(registry=self.internal)
        self.external.register(_ExternalCollector(self))
        self.external.register(DeviceCollector(self.node_name, lambda: self.device_view() if self.device_view
                                               else None))

    def collected(self) -> None:
        """A tick changed the collected state: the next scrape renders anew."""
        self.generation += 1

    def observe_kubelet(self, verb: str, path: str, code: str, seconds: float) -> None:
        self.kubelet_request_duration.labels(verb, path, code).observe(seconds)

    def render(self, which: str = "all") -> bytes:
        if which in ("internal", "external"):
            return self.renderers[which].render(self.internal if which == "internal" else self.external)
        return self.renderers["all"].render(self.internal, self.external)


class _InternalCollector(Collector):
    def __init__(self, m: AgentMetrics) -> None:
        self.m = m
        self._pools: tuple[CPUSetRule, tuple[list[int], list[int]]] | None = None  # a rule, its LS and BE pools' CPUs

    def collect(self) -> Iterator[Metric]:
        m, node = self.m, self.m.node_name
        g = GaugeMetricFamily("koordlet_start_time", "the start time of koordlet", labels=["node"])
        g.add_metric([node], m.start_time)
        yield g
        yield from _node_info_families(node, m.node_info_status)
        latest = m.latest
        if latest.node is not None:
            if latest.node.cpu_cores is not None:
                g = GaugeMetricFamily("koordlet_node_used_cpu_cores", "Number of cpu cores used by node in realtime",
                                      labels=["node"])
                g.add_metric([node], latest.node.cpu_cores)
                yield g
            g = GaugeMetricFamily("koordlet_node_used_memory_bytes", "Memory used by node in realtime",
                                  labels=["node"])
            g.add_metric([node], latest.node.memory_bytes)
            yield g
        yield from self._host_apps(latest)
        if m.nodemetric_prom and m.last_nodemetric is not None:
            yield from _nodemetric_families(node, m.last_nodemetric.get("status", {}))
        yield from self._health()
        yield from self._bpf_programs()
        if m.suppress is not None:
            yield from _suppress_families(node, m.suppress())
        if m.evictions is not None:
            yield from _eviction_families(node, m.evictions)
        yield from _predicted_families(node, m.prediction)
        if m.cpuset_rule is not None:
            yield from self._cpuset(m.cpuset_rule())

    def _cpuset(self, rule: CPUSetRule | None) -> Iterator[Metric]:
        """Upstream metrics/cpu_cpuset.go, set by the cpuset hook's rule parse (hooks/cpuset/rule.go parseRule):
        how many CPUs the LS and BE share pools hold and, with gate PerCPUMetric, which (parsed once per rule)."""
        node = self.m.node_name
        if rule is not None and (self._pools is None or self._pools[0] is not rule):
            self._pools = (rule, (_pool_cpus(rule.share_pools), _pool_cpus(rule.be_share_pools)))
        pools = self._pools[1] if rule is not None and self._pools is not None else None
        for i, (name, doc) in enumerate(_POOL_CORES):
            g = GaugeMetricFamily(name, doc, labels=["node"])
            if pools is not None:
                g.add_metric([node], len(pools[i]))
            yield g
        if not self.m.per_cpu_metric:
            return
        for i, (name, doc) in enumerate(_POOL_INFO):
            g = GaugeMetricFamily(name, doc, labels=["node", "cpu"])
            for cpu in pools[i] if pools is not None else ():
                g.add_metric([node, str(cpu)], 1.0)
            yield g

    def _bpf_programs(self) -> Iterator[Metric]:
        """The agent's own eBPF cost (fdinfo run_time_ns/run_cnt while the agent holds bpf stats on)."""
        stats = self.m.schedlat.program_stats() if self.m.schedlat is not None else {}
        if not stats:
            return
        t = CounterMetricFamily("koordlet_agent_bpf_program_run_seconds", "kernel time spent in the agent's eBPF "
                                "programs", labels=["program"])
        n = CounterMetricFamily("koordlet_agent_bpf_program_runs", "runs of the agent's eBPF programs",
                                labels=["program"])
        for name, (ns, runs) in sorted(stats.items()):
            t.add_metric([name], ns / 1e9)
            n.add_metric([name], runs)
        yield t
        yield n

    def _host_apps(self, latest: Latest) -> Iterator[Metric]:
        g = GaugeMetricFamily("koordlet_host_application_resource_usage",
                              "Host application resource usage collected by koordlet",
                              labels=["node", "host_application_name", "resource", "priority_class", "qos"])
        for app in latest.host_apps:
            u = latest.usage.get(("hostapp", app.name))
            if u is None:
                continue
            if u.cpu_cores is not None:
                g.add_metric([self.m.node_name, app.name, "cpu", app.priority, app.qos], u.cpu_cores)
            g.add_metric([self.m.node_name, app.name, "memory", app.priority, app.qos], u.memory)
        yield g

    def _health(self) -> Iterator[Metric]:
        h = self.m.health
        table: list[tuple[type[CounterMetricFamily | GaugeMetricFamily], str, str, list[str], dict[Any, float]]] = [
            (CounterMetricFamily, "koordlet_agent_cgroup_reads", "cgroup stat reads that succeeded", [],
             {(): h.cgroup_reads}),
            (CounterMetricFamily, "koordlet_agent_cgroup_read_errors", "cgroup reads that failed", ["scope"],
             dict(h.cgroup_read_errors)),
            (CounterMetricFamily, "koordlet_agent_cgroup_writes", "cgroup/resctrl writes that succeeded", [],
             {(): h.cgroup_writes}),
            (CounterMetricFamily, "koordlet_agent_cgroup_write_errors", "cgroup/resctrl writes that failed",
             ["reason"], dict(h.cgroup_write_errors)),
            (CounterMetricFamily, "koordlet_agent_resource_writes", "QoS executor outcomes by file and result "
             "(written, unchanged, cached, invalid, vanished, unsupported, error)", ["file", "result"],
             dict(h.resource_writes)),
            (CounterMetricFamily, "koordlet_agent_skipped_items", "items skipped because of bad or missing input",
             ["kind", "reason"], dict(h.skipped)),
            (GaugeMetricFamily, "koordlet_agent_kernel_capability", "1 if the kernel interface is available",
             ["capability"], {k: float(v) for k, v in h.capabilities.items()}),
            (GaugeMetricFamily, "koordlet_agent_setting_without_effect", "1 for each flag or feature gate set that "
             "this agent accepts without having its feature (the start-up log says what happens instead)",
             ["kind", "name"], dict.fromkeys(h.settings_without_effect, 1.0)),
            (GaugeMetricFamily, "koordlet_agent_nodemetric_last_report_timestamp_seconds",
             "unix time of the last successful NodeMetric report", [], {(): h.report_last_success}),
            (CounterMetricFamily, "koordlet_agent_nodemetric_report_failures", "failed NodeMetric reports",
             ["reason"], dict(h.report_failures)),
            (GaugeMetricFamily, "koordlet_agent_loop_last_success_timestamp_seconds",
             "unix time each loop last completed", ["loop"], dict(h.loop_last_success)),
            (GaugeMetricFamily, "koordlet_agent_metric_cache_series", "series held in the metric cache", [],
             {(): float(self.m.cache.series_count())}),
        ]
        for cls, name, doc, labels, values in table:
            fam = cls(name, doc, labels=labels)
            for key, value in values.items():
                fam.add_metric(list(key) if isinstance(key, tuple) else [key], value)
            yield fam


def _pool_cpus(pools: Iterable[SharePool]) -> list[int]:
    """The CPUs of the pools, in pool order; a pool whose cpuset does not parse is skipped (as upstream)."""
    out: list[int] = []
    for pool in pools:
        try:
            out += parse_cpuset(pool.cpuset)
        except CPUSetError:
            continue
    return out


# (name, help) of the LS then the BE share pool's families (upstream metrics/cpu_cpuset.go)
_POOL_CORES = (("koordlet_cpuset_share_pool_cpu_cores", "Number of share pool cores"),
               ("koordlet_cpuset_be_share_pool_cpu_cores", "Number of be share pool cores"))
_POOL_INFO = (("koordlet_cpuset_share_pool_info", "CPUSet share pool info, means this cpu id is in cpuset share pool"),
              ("koordlet_cpuset_be_share_pool_info",
               "CPUSet be share pool info, means this cpu id is in cpuset be share pool"))
_NODE_INFO = (("cpu", "koordlet_collect_node_cpu_info_status", "the count of CollectNodeCPUInfo status"),
              ("numa", "koordlet_collect_node_numa_info_status", "the count of CollectNodeNUMAInfo status"))


def _node_info_families(node: str, counts: Tally[tuple[str, str]]) -> Iterator[Metric]:
    """Upstream metrics/common.go: each node info collection by outcome (nodeinfo/node_info_collector.go)."""
    for info, name, doc in _NODE_INFO:
        c = GoCounterFamily(name, doc, ["node", "status"])
        for status in ("succeeded", "failed"):
            n = counts.get((info, status))
            if n:
                c.add_metric([node, status], n)
        yield c


def _suppress_families(node: str, s: SuppressStatus) -> Iterator[Metric]:
    """Upstream metrics/cpu_suppress.go; a series appears once the planner first set it (a GaugeVec child)."""
    g = GaugeMetricFamily("koordlet_be_suppress_cpu_cores", "Number of cores suppress by koordlet",
                          labels=["node", "type"])
    for policy, cores in sorted(s.cores.items()):
        g.add_metric([node, policy], cores)
    yield g
    for name, doc, value in (
            ("koordlet_be_suppress_ls_used_cpu_cores", "Number of cpu cores used by LS. We consider non-BE pods and "
             "podMeta-missing pods as LS.", s.ls_used),
            ("koordlet_be_suppress_be_used_cpu_cores", "Number of cpu cores used by BE.", s.be_used)):
        g = GaugeMetricFamily(name, doc, labels=["node"])
        if value is not None:
            g.add_metric([node], value)
        yield g


def _eviction_families(node: str, stats: EvictionStats) -> Iterator[Metric]:
    """Upstream metrics/common.go PodEviction and internal_metrics.go PodEvictionDetail (GC'd after 5 min), Go-named
    counters; a family without a series is not written."""
    total, detail = stats.snapshot()
    for name, doc, series in (
            ("koordlet_pod_eviction", "Number of eviction launched by koordlet",
             [({"node": node, "reason": r}, v) for r, v in sorted(total.items())]),
            ("koordlet_pod_eviction_detail", "evict detail launched by koordlet",
             [({"node": node, "pod_namespace": ns, "pod_name": pod, "reason": r}, v)
              for (ns, pod, r), v in sorted(detail.items())])):
        if not series:
            continue
        keys = list(series[0][0])
        fam = GoCounterFamily(name, doc, labels=keys)
        for labels, value in series:
            fam.add_metric([labels[k] for k in keys], value)
        yield fam


def _cpu_memory_samples(rl: dict[str, int]) -> Iterator[tuple[str, str, float]]:
    if "cpu" in rl:
        yield "cpu", "core", rl["cpu"] / 1000
    if "memory" in rl:
        yield "memory", "byte", float(rl["memory"])


def _predicted_families(node: str, outcome: Outcome | None) -> Iterator[Metric]:
    """Upstream metrics/prediction.go: each predictor's result and peak, set when that predictor succeeded."""
    families = (GaugeMetricFamily("koordlet_node_predicted_resource_reclaimable",
                                  "the node reclaimable resources predicted by koordinator",
                                  labels=["node", "predictor", "resource", "unit"]),
                GaugeMetricFamily("koordlet_node_predicted_resource_peak", "the node peak resources predicted by "
                                  "koordinator", labels=["node", "predictor", "resource", "unit"]))
    for predictor, values in sorted((outcome.by_predictor if outcome else {}).items()):
        for fam, rl in zip(families, values, strict=True):
            for res, unit, value in _cpu_memory_samples(rl or {}):
                fam.add_metric([node, predictor, res, unit], value)
    yield from families


def _priority_reclaimable_families(node: str, outcome: Outcome | None) -> Iterator[Metric]:
    """Upstream metrics/resource_summary.go, as states_nodemetric.go records them: the Prod reclaimable of the
    last report (0 with status 1 when the prediction failed)."""
    g = GaugeMetricFamily("koordlet_node_priority_resource_reclaimable", "the node reclaimable of different "
                          "priorities resources updated by koordinator",
                          labels=["node", "priority", "resource", "unit"])
    s = GaugeMetricFamily("koordlet_node_resource_priority_reclaimable_status", "status of node reclaimable of "
                          "different priorities resources updated by koordinator", labels=["node", "priority"])
    if outcome is not None:
        rl = outcome.reclaimable if outcome.reclaimable is not None else {"cpu": 0, "memory": 0}
        for res, unit, value in _cpu_memory_samples(rl):
            g.add_metric([node, "koord-prod", res, unit], value)
        s.add_metric([node, "koord-prod"], 0.0 if outcome.reclaimable is not None else 1.0)
    yield g
    yield s


def _nodemetric_families(node: str, status: JSON) -> Iterator[Metric]:
    """Gate NodeMetricPromMetrics: mirror the reported node/system/NUMA usage."""
    nm = status.get("nodeMetric", {})
    for name, src in (("koordlet_node_metric_node_usage", nm.get("nodeUsage")),
                      ("koordlet_node_metric_system_usage", nm.get("systemUsage"))):
        g = GaugeMetricFamily(name, "NodeMetric usage as reported", labels=["node", "resource", "unit"])
        for res, unit, value in _resource_values((src or {}).get("resources", {})):
            g.add_metric([node, res, unit], value)
        yield g
    for name, field_ in (("koordlet_node_metric_numa_node_usage", "nodeUsage"),
                         ("koordlet_node_metric_numa_system_usage", "systemUsage")):
        g = GaugeMetricFamily(name, "NodeMetric NUMA usage as reported",
                              labels=["node", "numa_node_id", "resource", "unit"])
        for numa in nm.get("numaUsages", []):
            for res, unit, value in _resource_values((numa.get(field_) or {}).get("resources", {})):
                g.add_metric([node, str(numa["numaNodeID"]), res, unit], value)
        yield g


def _resource_values(resources: dict[str, str]) -> Iterator[tuple[str, str, float]]:
    for res, q in resources.items():
        unit = "core" if res == "cpu" else "byte" if res == "memory" else "integer"
        yield res, unit, float(parse_measured(q))  # usage: never the same twice, so not cached


class _ExternalCollector(Collector):
    def __init__(self, m: AgentMetrics) -> None:
        self.m = m
        # (pod list, its parsed batch/mid requests and limits): the list object changes only when a pod does
        self._resources: tuple[list[PodMeta], list[tuple[bool, list[str], float]]] | None = None

    def collect(self) -> Iterator[Metric]:
        node, latest = self.m.node_name, self.m.latest
        g = GaugeMetricFamily("koordlet_node_resource_allocatable", "the node allocatable of resources updated by "
                              "koordinator", labels=["node", "resource", "unit"])
        for res, value in self.m.node_allocatable.items():
            g.add_metric([node, res, "byte" if res.endswith("memory") else "integer"], value)
        yield g
        yield from _priority_reclaimable_families(node, self.m.prediction)
        yield from self._requests_limits(latest)
        yield from self._usage(latest)
        yield from self._psi(latest)
        yield from self._schedlat()

    def _schedlat(self) -> Iterator[Metric]:
        """Ours (gate CPUSchedLatency): each pod's run-queue waits since the agent first saw it; buckets only with
        eBPF (schedstat knows sum and count alone)."""
        if self.m.schedlat is None:
            return
        h = HistogramRows("koordlet_pod_cpu_schedule_latency_seconds", "Run-queue wait of the pod's tasks "
                          "(runnable to running)", ["node", "namespace", "pod", "uid", "qos", "source"])
        for row in self.m.schedlat.latest:
            pod, total = row.pod, row.total
            # a pod with no new wait since the last render keeps its rows' text (TextRenderer, by this key)
            h.add_metric([self.m.node_name, pod.namespace, pod.name, pod.uid, pod.koord_qos or pod.k8s_qos,
                          row.source], partial(_schedlat_buckets, total), total.sum_ns / 1e9,
                         key=(total.count, total.sum_ns, total.hist is None))
        yield h

    def _requests_limits(self, latest: Latest) -> Iterator[Metric]:
        labels = ["node", "resource", "unit", "pod_uid", "pod_name", "pod_namespace", "container_id",
                  "container_name"]
        req = RowFamily("koordlet_container_resource_requests",
                        "the container requests of resources updated by koordinator", labels)
        lim = RowFamily("koordlet_container_resource_limits",
                        "the container limits of resources updated by koordinator", labels)
        cached = self._resources
        if cached is None or cached[0] is not latest.pods:
            cached = self._resources = (latest.pods, self._parse_resources(latest.pods))
        for is_limit, values, v in cached[1]:
            (lim if is_limit else req).add_metric(values, v)
        yield req
        yield lim

    def _parse_resources(self, pods: list[PodMeta]) -> list[tuple[bool, list[str], float]]:
        """(is a limit, label values, value) of every container's batch/mid request and limit."""
        rows: list[tuple[bool, list[str], float]] = []
        for pod in pods:
            ids = {c.name: c.container_id for c in pod.containers}
            for c in (pod.raw.get("spec") or {}).get("containers") or []:
                if not isinstance(c, dict):
                    continue
                res = c.get("resources") if isinstance(c.get("resources"), dict) else {}
                assert isinstance(res, dict)
                for section in ("requests", "limits"):
                    values = res.get(section) if isinstance(res.get(section), dict) else {}
                    assert isinstance(values, dict)
                    for name, unit in _BATCH_MID:
                        if name not in values:
                            continue
                        try:
                            v = float(parse_quantity(str(values[name])))
                        except Exception:
                            continue
                        # [quirk] upstream records batch/mid cpu *limits* with unit "byte"; we keep it so
                        # dashboards built on upstream series match (states_pods.go recordContainerResourceMetrics).
                        u = "byte" if section == "limits" and name.endswith("cpu") else unit
                        rows.append((section == "limits", [self.m.node_name, name, u, pod.uid, pod.name,
                                                           pod.namespace, ids.get(str(c.get("name")), ""),
                                                           str(c.get("name"))], v))
        return rows

    def _usage(self, latest: Latest) -> Iterator[Metric]:
        """Per-pod and per-container series as cAdvisor's container_* (upstream has none): counters from the
        collection tick's cumulative reads, and the working set read now (the one read a scrape makes)."""
        node, usage = self.m.node_name, latest.usage
        working_set = self.m.working_set() if self.m.working_set is not None else {}
        scopes = [("pod", POD_SERIES_LABELS)] + ([("container", CONTAINER_SERIES_LABELS)]
                                                  if self.m.container_series else [])
        fams = {scope: ([GoCounterFamily(f"koordlet_{scope}_{name}", doc.format(scope), labels)
                         for name, doc in _USAGE_COUNTERS],
                        RowFamily(f"koordlet_{scope}_{_WORKING_SET[0]}", _WORKING_SET[1].format(scope), labels))
                for scope, labels in scopes}
        pod_fams, ctr_fams = fams["pod"], fams.get("container")
        for pod in latest.pods:
            labels = [node, pod.namespace, pod.name, pod.uid]
            u = usage.get(("pod", pod.uid))
            if u is not None:
                _add_usage(pod_fams, labels, u, working_set.get(("pod", pod.uid)))
            if ctr_fams is None:
                continue
            for c in pod.containers:
                u = usage.get(("container", c.container_id))
                if u is not None:
                    _add_usage(ctr_fams, [*labels, c.name], u, working_set.get(("container", c.container_id)))
        for counters, ws in fams.values():
            yield from counters
            yield ws

    def _psi(self, latest: Latest) -> Iterator[Metric]:
        common = ["psi_resource_type", "psi_precision", "psi_degree", "cpu_full_supported"]
        pod_g = RowFamily("koordlet_pod_psi", "Pod psi collected by koordlet",
                          ["node", "pod_uid", "pod_name", "pod_namespace", *common])
        ctr_g = RowFamily("koordlet_container_psi", "Container psi collected by koordlet",
                          ["node", "container_id", "container_name", "pod_uid", "pod_name", "pod_namespace", *common])
        psi = latest.psi
        for pod in latest.pods:
            base = [self.m.node_name, pod.uid, pod.name, pod.namespace]
            reading = psi.get(("pod", pod.uid))
            if reading is not None:
                for labels, value in _psi_samples(reading):
                    pod_g.add_metric(base + labels, value)
            for c in pod.containers if self.m.container_series else ():
                reading = psi.get(("container", c.container_id))
                if reading is None:
                    continue
                cbase = [self.m.node_name, c.container_id, c.name, pod.uid, pod.name, pod.namespace]
                for labels, value in _psi_samples(reading):
                    ctr_g.add_metric(cbase + labels, value)
        yield pod_g
        yield ctr_g


def _schedlat_buckets(total: Totals) -> list[tuple[str, float]]:
    """A pod's cumulative buckets (eBPF), then +Inf; schedstat knows the count and sum alone."""
    buckets: list[tuple[str, float]] = []
    if total.hist is not None:
        buckets = [(floatToGoString(le), float(n))  # type: ignore[no-untyped-call]
                   for le, n in cumulative_buckets(total.hist, _SCHEDLAT_BOUNDS)]
    buckets.append(("+Inf", float(total.count)))
    return buckets


def _add_usage(fams: tuple[list[GoCounterFamily], RowFamily], labels: list[str], u: CgroupUsage,
               working_set: int | None) -> None:
    cpu, periods, throttled, throttled_s = fams[0]
    cpu.add_metric(labels, u.cpu_ns / 1e9)
    if u.nr_periods > 0:  # CFS bandwidth series only once a quota has run (cAdvisor likewise)
        periods.add_metric(labels, u.nr_periods)
        throttled.add_metric(labels, u.nr_throttled)
        throttled_s.add_metric(labels, u.throttled_ns / 1e9)
    if working_set is not None:
        fams[1].add_metric(labels, working_set)


def _psi_samples(reading: PSIReading) -> Iterator[tuple[list[str], float]]:
    # Upstream (metrics/psi.go makePSIRecordSlice): `full` rows only where that file has a `full` line, and the
    # `cpu_full_supported` label carries that resource's own flag despite its name.
    for res, stats in reading.by_resource.items():
        full_ok = "false" if stats.full is None else "true"
        for degree, triple in (("some", stats.some), ("full", stats.full)):
            if triple is None:
                continue
            for precision, value in zip(_PSI_PRECISIONS, triple, strict=True):
                yield [res, precision, degree, full_ok], value


class _Server(ThreadingHTTPServer):
    # listen backlog: socketserver's 5 drops the connections of concurrent scrapers past it, which the clients
    # retry only after a SYN timeout (1 s, then 3 s): with 50 scrapers that alone made the p99 seconds
    request_queue_size = 128
    timeout = 0.5  # handle_request's own wait, should a ready connection be gone before it is accepted

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        self._stopping = False
        self._wake_r, self._wake_w = os.pipe()  # before binding: a failed bind calls server_close
        super().__init__(address, handler)

    def serve_until_stopped(self) -> None:
        """socketserver's serve_forever polls for its shutdown every 0.5 s: two wake-ups a second of an idle agent,
        each ~0.1 ms of CPU on a VM before any work. This sleeps until a connection comes or stop() is called."""
        with selectors.DefaultSelector() as selector:
            selector.register(self, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            while not self._stopping:
                if any(key.fileobj is self for key, _ in selector.select()) and not self._stopping:
                    self.handle_request()

    def stop(self) -> None:
        self._stopping = True
        with contextlib.suppress(OSError):  # stopped and closed before
            os.write(self._wake_w, b"x")

    def server_close(self) -> None:
        super().server_close()
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)


class HttpServer:
    """/metrics, /internal-metrics, /external-metrics, /healthz, /readyz and the NodeMetric object."""

    def __init__(self, host: str, port: int, metrics: AgentMetrics, healthy: Callable[[], tuple[bool, str]],
                 ready: Callable[[], tuple[bool, str]]) -> None:
        self.metrics = metrics
        self.exposition = ExpositionCache(metrics.render, lambda: metrics.generation,
                                          lambda: metrics.max_staleness)
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner._dispatch(self)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("http: " + format, *args)

        self._healthy, self._ready = healthy, ready
        self.server = _Server((host, port), Handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_until_stopped, name="http", daemon=True)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.server.stop()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self.server.server_close()

    def _dispatch(self, req: BaseHTTPRequestHandler) -> None:
        path = req.path.split("?", 1)[0].rstrip("/") or "/"
        try:
            if path in ("/metrics", "/internal-metrics", "/external-metrics"):
                which = {"/metrics": "all", "/internal-metrics": "internal", "/external-metrics": "external"}[path]
                exposition = self.exposition.get(which)
                if accepts_gzip(req.headers.get("Accept-Encoding")):
                    _send(req, 200, exposition.gzipped(), _TEXT_FORMAT, "gzip")
                else:
                    _send(req, 200, exposition.text, _TEXT_FORMAT, "identity")
            elif path in ("/healthz", "/readyz"):
                ok, why = (self._healthy if path == "/healthz" else self._ready)()
                _send(req, 200 if ok else 503, (why or "ok").encode() + b"\n", "text/plain")
            elif path.startswith("/apis/"):
                obj = self.metrics.served.get(path)
                if obj is None:
                    parts = path.split("/")  # /apis/<group>/<version>/<plural>/<name>
                    what = f'{parts[4]}.{parts[2]} "{parts[5]}"' if len(parts) == 6 else path
                    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
                            "code": 404, "message": f"{what} not found"}
                    _send(req, 404, json.dumps(body).encode(), "application/json")
                else:
                    _send(req, 200, json.dumps(obj).encode(), "application/json")
            else:
                _send(req, 404, b"not found\n", "text/plain")
        except (BrokenPipeError, ConnectionResetError):
            pass
        except SharedRenderError:  # the scraper that ran the render logged why
            _send(req, 500, b"internal error\n", "text/plain")
        except Exception:
            log.exception("http handler failed for %s", path)
            _send(req, 500, b"internal error\n", "text/plain")


_TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"


def _send(req: BaseHTTPRequestHandler, code: int, body: bytes, ctype: str, encoding: str | None = None) -> None:
    """`encoding`: the body's Content-Encoding where the client chose it (then the answer varies with it)."""
    req.send_response(code)
    req.send_header("Content-Type", ctype)
    if encoding is not None:
        req.send_header("Vary", "Accept-Encoding")
        if encoding != "identity":
            req.send_header("Content-Encoding", encoding)
    req.send_header("Content-Length", str(len(body)))
    req.end_headers()
    req.wfile.write(body)
