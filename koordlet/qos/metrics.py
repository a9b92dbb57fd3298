"""What the QoS pass tells Prometheus: the executor's update latency, the runtime-hook reconcilers' latency, CPU
burst's scaled values, with upstream's names, labels and buckets, and the pods refused a resctrl group (our own).

Upstream: pkg/koordlet/metrics/resource_executor.go (`koordlet_resource_update_duration_milliseconds`, labels type,
status `success`/`failed`), runtime_hook.go (`koordlet_runtime_hook_reconciler_invoked_duration_milliseconds`,
labels node, level, resource_type, status `succeeded`/`failed`), cpu_burst.go (`koordlet_container_scaled_cfs_*`).
Everything here is fed by the executor as it carries out a write (koordlet.qos.executor.UpdateObserver), or by the
pass's plan (`planned`): nothing is read from the host for it, and a cached write (the steady state) costs nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from koordlet.promchildren import LabelledChildren
from koordlet.qos.model import Plan, Write
from koordlet.qos.resctrl import REASON_CLOSID
from koordlet.states.model import PodMeta

# prometheus.ExponentialBuckets(0.01, 4, 8): 10 µs to 163.84 ms
BUCKETS_MS = tuple(0.01 * 4**k for k in range(8))
SCALED_LABELS = ["node", "pod_namespace", "pod_name", "container_id", "container_name"]
# Write.note kinds → (family, help) (upstream cpu_burst.go)
SCALED: dict[str, tuple[str, str]] = {
    "cfs_burst_us": ("koordlet_container_scaled_cfs_burst_us",
                     "The maximum accumulated run-time(in microseconds) in container-level set by koordlet"),
    "cfs_quota_us": ("koordlet_container_scaled_cfs_quota_us",
                     "Run-time replenished within a period (in microseconds) in container-level set by koordlet"),
}
REFUSED = "koordlet_resctrl_group_refused"  # no upstream family: upstream hands CLOSIDs out first come, first served
REFUSED_LABELS = ["node", "namespace", "pod", "uid"]  # ours: cAdvisor's pod labels (docs/decisions.md "Pod series")
# executor results → the two histograms' status; results absent here are not recorded (upstream ignores an
# unsupported file and a vanished cgroup: isUpdateErrIgnored)
_UPDATE_STATUS = {"written": "success", "unchanged": "success", "invalid": "failed", "error": "failed"}
_FAILED = frozenset({"invalid", "error"})


class QoSMetrics:
    def __init__(self, node_name: str, registry: CollectorRegistry | None = None, *, cpu_burst: bool = False) -> None:
        self.node = node_name
        registry = registry if registry is not None else CollectorRegistry(auto_describe=False)
        self.update_ms = Histogram("koordlet_resource_update_duration_milliseconds",
                                   "time duration of resource update such as cgroup files", ["type", "status"],
                                   buckets=BUCKETS_MS, registry=registry)
        self.reconciler_ms = Histogram("koordlet_runtime_hook_reconciler_invoked_duration_milliseconds",
                                       "time duration of invocations of runtime hook reconciler plugins",
                                       ["node", "level", "resource_type", "status"], buckets=BUCKETS_MS,
                                       registry=registry)
        # note kind → (pod_namespace, pod_name, container_id, container_name) → the value last written; only the
        # QoS loop changes it, a scrape copies its items in one step
        self.scaled: dict[str, dict[tuple[str, ...], float]] = {kind: {} for kind in SCALED}
        # (namespace, pod, uid) of the pods the last pass refused a resctrl group of their own
        self.resctrl_refused: frozenset[tuple[str, str, str]] = frozenset()
        self._child = LabelledChildren()
        registry.register(_RefusedCollector(self))  # empty without gate Resctrl: only pod-level groups are refused
        if cpu_burst:  # upstream registers them always; here they exist with the feature that sets them
            registry.register(_ScaledCollector(self))

    def updated(self, write: Write, kind: str, result: str, seconds: float) -> None:
        """The executor carried out (or tried) `write`: `result` is its outcome, `seconds` how long it took."""
        ms = seconds * 1000
        status = _UPDATE_STATUS.get(result)
        if status is not None:
            self._child(self.update_ms, kind, status).observe(ms)
        if write.level is not None and result != "planned":
            resource = write.resource or os.path.basename(write.path)
            self._child(self.reconciler_ms, self.node, write.level, resource,
                        "failed" if result in _FAILED else "succeeded").observe(ms)
        if write.note is not None and status == "success":
            what, labels, value = write.note
            values = self.scaled.get(what)
            if values is not None:
                values[labels] = value

    def planned(self, plan: Plan) -> None:
        """The pass's plan (QoSManager.reconcile's `report`): its pods refused a resctrl group of their own
        (koordlet.qos.resctrl REASON_CLOSID) become the series of koordlet_resctrl_group_refused."""
        refused = set()
        for e in plan.errors:
            if e.kind == "Pod" and e.reason == REASON_CLOSID:
                namespace, _, name = e.name.partition("/")  # PlanError names a pod namespace/name
                refused.add((namespace, name, e.uid))
        self.resctrl_refused = frozenset(refused)

    def retain(self, pods: Iterable[PodMeta]) -> None:
        """Forget the scaled values of containers no longer on the node (upstream keeps them until restart)."""
        live = {c.container_id for p in pods for c in p.containers}
        for what, values in self.scaled.items():
            if any(labels[2] not in live for labels in values):
                self.scaled[what] = {k: v for k, v in values.items() if k[2] in live}


class _ScaledCollector(Collector):
    def __init__(self, m: QoSMetrics) -> None:
        self.m = m

    def collect(self) -> Iterator[Metric]:
        for what, (name, doc) in SCALED.items():
            g = GaugeMetricFamily(name, doc, labels=SCALED_LABELS)
            for labels, value in list(self.m.scaled[what].items()):
                g.add_metric([self.m.node, *labels], value)
            yield g


class _RefusedCollector(Collector):
    def __init__(self, m: QoSMetrics) -> None:
        self.m = m

    def collect(self) -> Iterator[Metric]:
        g = GaugeMetricFamily(REFUSED, "1 for each pod whose resctrl annotation got no resctrl group of its own in the "
                              "last QoS pass: the CPU's CLOSIDs went to pods of higher priority (koordlet plan says "
                              "why)", labels=REFUSED_LABELS)
        for namespace, name, uid in sorted(self.m.resctrl_refused):
            g.add_metric([self.m.node, namespace, name, uid], 1.0)
        yield g
