"""koord-sched's Prometheus metrics, in kube-scheduler's and koord-scheduler's names, served at /metrics of the
`run` and `extender` ports.

kube-scheduler (`pkg/scheduler/metrics/metrics.go`): scheduler_framework_extension_point_duration_seconds,
scheduler_plugin_execution_duration_seconds, scheduler_schedule_attempts_total, scheduler_pending_pods,
scheduler_scheduling_attempt_duration_seconds — same labels and buckets. As koord-scheduler v1.6's frameworkext,
the plugin histogram also times the PreFilter transformers at extension_point BeforePreFilter and AfterPreFilter.
koord-scheduler (`pkg/scheduler/metrics/metrics.go`): scheduler_waiting_gang_group_number. Ours (no upstream
equivalent): scheduler_gang_groups_total{result}, scheduler_device_allocations_total{device_type} and
scheduler_malformed_objects_total{kind} (API object versions skipped or counted conservatively as malformed).
A Scheduler records only when its `metrics` is set (run and extender set it), so simulate and benchmarks pay
nothing.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from apis.core.errors import InvalidInput
from apis.extension.device_allocated import ANNOTATION_DEVICE_ALLOCATED, decode_device_allocations
from scheduler import malformed

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PROFILE = "default-scheduler"
SCHEDULED, UNSCHEDULABLE, ERROR = "scheduled", "unschedulable", "error"
ERROR_STATUS = "Error"  # framework.Code Error's name, the status label of a plugin that failed with an error


def _exponential(start: float, factor: float, count: int) -> tuple[float, ...]:
    return tuple(start * factor**i for i in range(count))


class _MalformedCollector(Collector):
    """scheduler_malformed_objects_total{kind} from scheduler.malformed's process-wide count."""

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily("scheduler_malformed_objects", "Malformed API object versions met in lists and "
                                     "watches, skipped or counted conservatively (koord-sched)", labels=["kind"])
        for kind, n in sorted(malformed.skipped.items()):
            family.add_metric([kind], n)
        yield family


class SchedulerMetrics:
    """One registry per process (or per test)."""

    def __init__(self, profile: str = PROFILE) -> None:
        self.profile = profile
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        self.extension_point = Histogram(
            "scheduler_framework_extension_point_duration_seconds",
            "Latency for running all plugins of a specific extension point.",
            ["extension_point", "status", "profile"], buckets=_exponential(0.0001, 2, 12), registry=r)
        self.plugin = Histogram(
            "scheduler_plugin_execution_duration_seconds", "Duration for running a plugin at a specific extension "
            "point.", ["plugin", "extension_point", "status"], buckets=_exponential(0.00001, 1.5, 20), registry=r)
        self.attempts = Counter(
            "scheduler_schedule_attempts", "Number of attempts to schedule pods, by the result. 'unschedulable' "
            "means a pod could not be scheduled, while 'error' means an internal scheduler problem.",
            ["result", "profile"], registry=r)
        self.attempt_duration = Histogram(
            "scheduler_scheduling_attempt_duration_seconds", "Scheduling attempt latency in seconds (scheduling "
            "algorithm + binding)", ["result", "profile"], buckets=_exponential(0.001, 2, 15), registry=r)
        self.pending = Gauge(
            "scheduler_pending_pods", "Number of pending pods, by the queue type. 'active' means number of pods in "
            "activeQ; 'backoff' means number of pods in backoffQ; 'unschedulable' means number of pods in "
            "unschedulablePods that the scheduler attempted to schedule and failed; 'gated' is the number of "
            "unschedulable pods that the scheduler never attempted to schedule because they are gated.",
            ["queue"], registry=r)
        self.waiting_gangs = Gauge("scheduler_waiting_gang_group_number", "The number of GangGroups in Waiting",
                                   registry=r)
        self.gang_groups = Counter(
            "scheduler_gang_groups", "GangGroups decided by the gang planner: bound whole or rejected (koord-sched)",
            ["result"], registry=r)
        self.device_allocations = Counter(
            "scheduler_device_allocations", "Devices allocated by DeviceShare in Reserve, by device type "
            "(koord-sched)", ["device_type"], registry=r)
        r.register(_MalformedCollector())
        for result in (SCHEDULED, UNSCHEDULABLE, ERROR):
            self.attempts.labels(result, profile)
        for queue in ("active", "backoff", "unschedulable", "gated"):
            self.pending.labels(queue).set(0)

    def point(self, extension_point: str, seconds: float, ok: bool = True) -> None:
        self.extension_point.labels(extension_point, "Success" if ok else "Unschedulable",
                                    self.profile).observe(seconds)

    def plugin_run(self, plugin: str, extension_point: str, seconds: float, ok: bool = True,
                   status: str | None = None) -> None:
        """`status` (a framework Code's name, e.g. "Error") overrides what `ok` says."""
        label = status or ("Success" if ok else "Unschedulable")
        self.plugin.labels(plugin, extension_point, label).observe(seconds)

    def attempt(self, result: str, seconds: float) -> None:
        self.attempts.labels(result, self.profile).inc()
        self.attempt_duration.labels(result, self.profile).observe(seconds)

    def reserved(self, annotations: dict[str, str]) -> None:
        """Count the devices of a pod's device-allocated annotation (DeviceShare's Reserve)."""
        raw = annotations.get(ANNOTATION_DEVICE_ALLOCATED)
        if not raw:
            return
        try:
            decoded = decode_device_allocations(raw)
        except InvalidInput:
            return
        for device_type, allocations in decoded.items():
            if allocations:
                self.device_allocations.labels(device_type).inc(len(allocations))

    def exposition(self) -> str:
        return generate_latest(self.registry).decode()
