"""Build the NodeMetric `status` upstream koordlet reports, from the metric cache (pure: no I/O).

Upstream: pkg/koordlet/statesinformer/impl/states_nodemetric.go (collectMetric, queryNodeMetric,
collectNodeAggregateMetric, collectPodMetric, collectHostAppMetric, metricsInColdStart).
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from apis.core import godur
from apis.core.errors import InvalidInput
from apis.core.objects import JSON
from apis.core.quantity import format_bytes, format_milli
from apis.extension.resources import RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY, RESOURCE_GPU_MEMORY_RATIO
from koordlet.collectors.hostapps import HostApp
from koordlet.metriccache import AGGREGATIONS, MetricCache, SeriesKey
from koordlet.prediction.predictor import Outcome, resource_list
from koordlet.states.model import PodMeta

log = logging.getLogger(__name__)

DEFAULT_SPEC: JSON = {
    "metricCollectPolicy": {
        "aggregateDurationSeconds": 300,
        "reportIntervalSeconds": 60,
        "nodeAggregatePolicy": {"durations": ["5m0s", "10m0s", "30m0s"]},
        "nodeMemoryCollectPolicy": "usageWithoutPageCache",
    }
}
MIN_REPORT_INTERVAL = 30  # upstream never reports more often
MIN_QUERY_WINDOW = 60
COLD_START_RATIO = 0.5  # an aggregate spanning less than half its duration is reported empty
_MEMORY_KIND_SUFFIX = {"usageWithPageCache": "memory_usage_with_page_cache"}


@dataclass(frozen=True)
class CollectPolicy:
    """The merged `spec.metricCollectPolicy` this node reports by."""

    aggregate_seconds: int
    report_interval_seconds: int
    durations: tuple[float, ...]  # seconds
    memory_policy: str

    @property
    def report_period(self) -> int:
        return max(self.report_interval_seconds, MIN_REPORT_INTERVAL)

    @property
    def window(self) -> int:
        return max(self.aggregate_seconds, MIN_QUERY_WINDOW)

    @property
    def longest(self) -> float:
        return max((self.window, *self.durations))


def merge_spec(received: JSON | None) -> JSON:
    """JSON-overlay a received NodeMetric spec on the defaults (lists are replaced, objects merged)."""
    merged = copy.deepcopy(DEFAULT_SPEC)

    def overlay(dst: JSON, src: JSON) -> None:
        for k, v in src.items():
            if isinstance(v, dict) and isinstance(dst.get(k), dict):
                overlay(dst[k], v)
            elif v is not None:
                dst[k] = copy.deepcopy(v)

    if isinstance(received, dict):
        overlay(merged, received)
    return merged


def collect_policy(spec: JSON | None) -> CollectPolicy:
    """The policy of a (merged) spec; a malformed field falls back to its default with a log line."""
    merged = merge_spec(spec)
    p = merged["metricCollectPolicy"]
    d = DEFAULT_SPEC["metricCollectPolicy"]

    def as_int(name: str) -> int:
        v = p.get(name)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
        log.warning("NodeMetric spec.metricCollectPolicy.%s=%r is invalid, using %s", name, v, d[name])
        return int(d[name])

    durations: list[float] = []
    raw = (p.get("nodeAggregatePolicy") or {}).get("durations") or []
    for item in raw if isinstance(raw, list) else []:
        try:
            seconds = godur.parse(str(item))
        except InvalidInput:
            log.warning("NodeMetric aggregate duration %r is invalid, skipped", item)
            continue
        if seconds > 0:
            durations.append(seconds)
    policy = p.get("nodeMemoryCollectPolicy")
    return CollectPolicy(as_int("aggregateDurationSeconds"), as_int("reportIntervalSeconds"), tuple(durations),
                         policy if isinstance(policy, str) else "usageWithoutPageCache")


def _memory_kind(scope: str, policy: str) -> str:
    # usageWithHotPageCache needs the kidled cold-page collector, which this agent does not run: upstream then
    # degrades to usage without page cache, and so do we.
    return f"{scope}_{_MEMORY_KIND_SUFFIX.get(policy, 'memory_usage')}"


class GpuSeries(NamedTuple):
    """A GPU known to the metric cache (it has a `node_gpu_memory_total` series)."""

    minor: int
    uuid: str
    memory_total: float


def rfc3339(ts: float) -> str:
    return dt.datetime.fromtimestamp(int(ts), tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class NodeMetricBuilder:
    def __init__(self, cache: MetricCache) -> None:
        self.cache = cache

    def _resources(self, cpu: SeriesKey, mem: SeriesKey, start: int, end: int, agg: str,
                   cold_start: bool) -> JSON | None:
        """{"resources": {cpu, memory}} or None when either query has no samples or is in cold start."""
        c = self.cache.aggregate(cpu, start, end)
        m = self.cache.aggregate(mem, start, end)
        if c is None or m is None:
            return None
        if cold_start and c.duration_ms < (end - start) * COLD_START_RATIO:
            return None
        return {"resources": {"cpu": format_milli(int(c.get(agg) * 1000)), "memory": format_bytes(int(m.get(agg)))}}

    def _gpus(self, start: int, end: int) -> list[GpuSeries]:
        """GPUs with a memory-total sample in the window (upstream reads the GPU inventory from the KV cache)."""
        out = []
        for k in self.cache.keys("node_gpu_memory_total"):
            agg = self.cache.aggregate(k, start, end)
            if agg is None or not k[1].isdigit():
                continue
            out.append(GpuSeries(int(k[1]), k[2], agg.last))
        return sorted(out)

    def _gpu_devices(self, gpus: list[GpuSeries], prefix: str, owner: tuple[str, ...], start: int, end: int,
                     agg: str) -> list[JSON]:
        """Per-GPU usage entries (states_nodemetric.go collectNodeGPUMetric / collectPodGPUMetric); a GPU
        without samples in the window is left out."""
        out: list[JSON] = []
        for g in gpus:
            labels = (*owner, str(g.minor), g.uuid)
            core = self.cache.aggregate((f"{prefix}_gpu_core_usage", *labels), start, end)
            mem = self.cache.aggregate((f"{prefix}_gpu_memory_usage", *labels), start, end)
            if core is None or mem is None:
                continue
            used = mem.get(agg)
            # Go divides by the total as a float; a zero total would be +Inf there, we report 0.
            ratio = int(100 * used / g.memory_total) if g.memory_total > 0 else 0
            out.append({
                "id": g.uuid,
                "minor": g.minor,
                "type": "gpu",
                "health": False,  # upstream never sets it on usage entries, so it serializes as false
                "resources": {
                    RESOURCE_GPU_CORE: str(int(core.get(agg))),
                    RESOURCE_GPU_MEMORY: format_bytes(int(used)),
                    RESOURCE_GPU_MEMORY_RATIO: str(ratio),
                },
            })
        return out

    def _with_devices(self, usage: JSON | None, gpus: list[GpuSeries], start: int, end: int,
                      agg: str) -> JSON:
        """Node usage plus GPU devices: upstream queryNodeMetric adds them to every node ResourceMap it builds
        (nodeUsage and each aggregatedNodeUsages entry) that is not empty."""
        if not usage:
            return {}
        if gpus and (devices := self._gpu_devices(gpus, "node", (), start, end, agg)):
            usage["devices"] = devices
        return usage

    def _usage_with_aggregates(self, scope: str, policy: CollectPolicy, now_ms: int) -> tuple[
            JSON, list[JSON]]:
        key = self.cache.key
        cpu, mem = key(f"{scope}_cpu_usage"), key(_memory_kind(scope, policy.memory_policy))
        if scope == "sys":
            mem = key("sys_memory_usage")
        window_start = now_ms - policy.window * 1000
        gpus = self._gpus(window_start, now_ms) if scope == "node" else []
        usage = self._with_devices(self._resources(cpu, mem, window_start, now_ms, "avg", False), gpus,
                                   window_start, now_ms, "avg")
        aggregated = []
        for d in policy.durations:
            start = now_ms - int(d * 1000)
            aggregated.append({
                "duration": godur.format_seconds(d),
                "usage": {a: self._with_devices(self._resources(cpu, mem, start, now_ms, a, True), gpus, start,
                                                now_ms, a) for a in AGGREGATIONS},
            })
        return usage, aggregated

    def _numa(self, numa_ids: list[int], start: int, end: int) -> list[JSON]:
        key = self.cache.key
        out = []
        for nid in sorted(numa_ids):
            lbl = {"numa_node_id": str(nid)}
            node = self._resources(key("node_numa_cpu_usage", **lbl), key("node_numa_memory_usage", **lbl),
                                   start, end, "avg", False)
            if node is None:
                continue
            entry: JSON = {"numaNodeID": nid, "nodeUsage": node}
            sys_cpu = self.cache.aggregate(key("sys_numa_cpu_usage", **lbl), start, end)
            sys_mem = self.cache.aggregate(key("sys_numa_memory_usage", **lbl), start, end)
            system: dict[str, str] = {}
            if sys_cpu is not None:
                system["cpu"] = format_milli(int(sys_cpu.avg * 1000))
            if sys_mem is not None:
                system["memory"] = format_bytes(int(sys_mem.avg))
            if system:
                entry["systemUsage"] = {"resources": system}
            out.append(entry)
        return out

    def build(self, pods: list[PodMeta], apps: list[HostApp], policy: CollectPolicy, numa_ids: list[int],
              now: float, predict: Callable[[list[JSON], float], Outcome] | None = None) -> JSON:
        now_ms = int(now * 1000)
        start = now_ms - policy.window * 1000
        node_usage, node_aggs = self._usage_with_aggregates("node", policy, now_ms)
        sys_usage, sys_aggs = self._usage_with_aggregates("sys", policy, now_ms)
        node_metric: JSON = {
            "nodeUsage": node_usage,
            "aggregatedNodeUsages": node_aggs,
            "systemUsage": sys_usage,
            "aggregatedSystemUsages": sys_aggs,
        }
        if numa := self._numa(numa_ids, start, now_ms):
            node_metric["numaUsages"] = numa

        key = self.cache.key
        gpus = self._gpus(start, now_ms)
        pods_metric = []
        predicted: list[JSON] = []  # pods with metrics: the ones the predictor sees (upstream)
        for pod in pods:
            usage = self._resources(key("pod_cpu_usage", pod_uid=pod.uid),
                                    key(_memory_kind("pod", policy.memory_policy), pod_uid=pod.uid),
                                    start, now_ms, "avg", False)
            if usage is None:
                continue  # upstream: AVG over no samples is an error and the pod is left out
            if gpus and (devices := self._gpu_devices(gpus, "pod", (pod.uid,), start, now_ms, "avg")):
                usage["devices"] = devices
            predicted.append(pod.raw)
            entry = {"namespace": pod.namespace, "name": pod.name, "podUsage": usage}
            # priority and qos are omitempty upstream (QoSNone and no priority class are "").
            entry.update({k: v for k, v in (("priority", pod.priority_class), ("qos", pod.koord_qos)) if v})
            pods_metric.append(entry)
        pods_metric.sort(key=lambda p: (p["namespace"], p["name"]))

        apps_metric = []
        for app in sorted(apps, key=lambda a: a.name):
            usage = self._resources(key("host_application_cpu_usage", host_app_name=app.name),
                                    key(_memory_kind("host_application", policy.memory_policy),
                                        host_app_name=app.name),
                                    start, now_ms, "avg", False)
            if usage is not None:
                entry = {"name": app.name, "usage": usage}
                entry.update({k: v for k, v in (("priority", app.priority), ("qos", app.qos)) if v})
                apps_metric.append(entry)

        status: JSON = {
            "updateTime": rfc3339(now),
            "nodeMetric": node_metric,
            "podsMetric": pods_metric,
            "hostApplicationMetric": apps_metric,
            "prodReclaimableMetric": {"resource": {}},  # what upstream reports when the prediction fails
        }
        outcome = predict(predicted, now) if predict is not None else None
        if outcome is not None and outcome.reclaimable is not None:
            status["prodReclaimableMetric"] = {"resource": {"resources": resource_list(outcome.reclaimable)}}
        if outcome is not None and outcome.peak is not None:
            status["prodPeakMetric"] = {"resource": {"resources": resource_list(outcome.peak)}}
        return status
