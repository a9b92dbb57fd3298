"""`koord-sched noderesource`: list nodes, pods, NodeMetrics, Devices and the colocation ConfigMap; write each
node's extended resources through its status subresource (and its GPU labels) when they changed enough, and its
resource amplification ratio annotation (scheduler.noderesource.amplification) when that changed.

Upstream is event-driven (noderesource_controller.go Reconcile per node); this loop re-lists on an interval and
reconciles every node, with upstream's per-node sync time (NodeSyncContext) and thresholds deciding the writes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from apis.client.kubeapi import KubeClient
from apis.core.errors import KoordletError, NotFound
from apis.core.objects import JSON
from scheduler.noderesource.amplification import AmplificationConfig, annotation_patch, parse_amplification_config
from scheduler.noderesource.apply import Plan, label_patch, plan, status_patch
from scheduler.noderesource.calculate import NodeResource, calculate
from scheduler.noderesource.strategy import (
    CONFIG_NAME,
    CONFIG_NAMESPACE,
    ColocationConfig,
    ConfigError,
    parse_config_map,
)

log = logging.getLogger(__name__)
NODES = "/api/v1/nodes"
PODS = "/api/v1/pods"
NODEMETRICS = "/apis/slo.koordinator.sh/v1alpha1/nodemetrics"
DEVICES = "/apis/scheduling.koordinator.sh/v1alpha1/devices"
LIST_PAGE = 500
FEATURE_GATES = {"EnableSyncGPUSharedResource": False}  # koord-manager's gate (pkg/features/features.go), alpha


@dataclass
class NodeOutcome:
    node: str
    resources: NodeResource
    plan: Plan
    error: str = ""
    annotations: dict[str, str | None] = field(default_factory=dict)  # the amplification annotation to write


@dataclass
class PassResult:
    nodes: list[NodeOutcome] = field(default_factory=list)
    status_writes: int = 0
    label_writes: int = 0
    annotation_writes: int = 0
    errors: int = 0
    config_error: str = ""


def parse_gates(text: str) -> dict[str, bool]:
    """`--feature-gates Name=true,...` over FEATURE_GATES; ValueError names a gate or value it does not know."""
    gates = dict(FEATURE_GATES)
    for item in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep or name.strip() not in gates or value.strip().lower() not in ("true", "false"):
            raise ValueError(f"--feature-gates: {item!r} (known: {', '.join(f'{g}=true|false' for g in gates)})")
        gates[name.strip()] = value.strip().lower() == "true"
    return gates


class NodeResourceController:
    def __init__(self, client: KubeClient, *, sync_gpu_shared: bool = False, config_namespace: str = CONFIG_NAMESPACE,
                 clock: Callable[[], float] = time.time, dry_run: bool = False) -> None:
        self.client = client
        self.sync_gpu_shared = sync_gpu_shared
        self.config_namespace = config_namespace
        self.clock = clock
        self.dry_run = dry_run
        self.config: ColocationConfig | None = None  # the last valid one
        self.amplification = AmplificationConfig()  # the last valid resource-amplification-config
        self.last_write: dict[str, float] = {}  # node → when its status was last written (NodeSyncContext)
        self._optional_missing: set[str] = set()

    # -- listing --------------------------------------------------------------------------------------------------
    def _list(self, path: str, field_selector: str | None = None) -> list[JSON]:
        items: list[JSON] = []
        cont = ""
        while True:
            params = {"limit": str(LIST_PAGE), **({"continue": cont} if cont else {})}
            page = self.client.list(path, field_selector=field_selector, params=params)
            items.extend(i for i in page.get("items") or [] if isinstance(i, dict))
            cont = str((page.get("metadata") or {}).get("continue") or "")
            if not cont:
                return items

    def _optional(self, path: str) -> list[JSON]:
        try:
            items = self._list(path)
        except NotFound:
            if path not in self._optional_missing:
                self._optional_missing.add(path)
                log.warning("%s is not served (CRD not installed?); continuing without it", path)
            return []
        self._optional_missing.discard(path)
        return items

    def load_config(self) -> ColocationConfig | None:
        """The ConfigMap's colocation config (absent: upstream's defaults); a bad one keeps the last good one, or
        None before any (upstream then reconciles nothing)."""
        path = f"/api/v1/namespaces/{self.config_namespace}/configmaps/{CONFIG_NAME}"
        try:
            cm: JSON | None = self.client.get(path)
        except NotFound:
            cm = None
        try:
            self.amplification = parse_amplification_config(cm)
        except ConfigError as e:  # upstream keeps the old config and records an Event
            log.error("resource amplification config refused, the previous one stays: %s", e)
        try:
            self.config = parse_config_map(cm)
        except ConfigError as e:
            log.error("colocation config refused, %s: %s", "the previous one stays" if self.config else
                      "nothing is reconciled until it is fixed", e)
            raise
        return self.config

    # -- one pass -------------------------------------------------------------------------------------------------
    def run_once(self) -> PassResult:
        result = PassResult()
        try:
            config = self.load_config()
        except ConfigError as e:
            result.config_error = str(e)
            config = self.config
            if config is None:
                return result
        assert config is not None
        nodes = self._list(NODES)
        pods_by_node: dict[str, list[JSON]] = {}
        for pod in self._list(PODS, "spec.nodeName!="):
            name = (pod.get("spec") or {}).get("nodeName")
            if name:
                pods_by_node.setdefault(str(name), []).append(pod)
        metrics = {str((o.get("metadata") or {}).get("name")): o for o in self._optional(NODEMETRICS)}
        devices = {str((o.get("metadata") or {}).get("name")): o for o in self._optional(DEVICES)}
        now = self.clock()
        for node in nodes:
            name = str((node.get("metadata") or {}).get("name"))
            outcome = self.reconcile(config, node, pods_by_node.get(name, []), metrics.get(name), devices.get(name),
                                     now)
            result.nodes.append(outcome)
            if outcome.error:
                result.errors += 1
            elif not self.dry_run:
                result.status_writes += bool(outcome.plan.status)
                result.label_writes += bool(outcome.plan.labels)
                result.annotation_writes += bool(outcome.annotations)
        live = {o.node for o in result.nodes}
        for gone in set(self.last_write) - live:
            del self.last_write[gone]
        return result

    def reconcile(self, config: ColocationConfig, node: JSON, pods: list[JSON], nodemetric: JSON | None,
                  device: JSON | None, now: float) -> NodeOutcome:
        name = str((node.get("metadata") or {}).get("name"))
        status = node.get("status") or {}
        if not isinstance(status.get("allocatable"), dict) or not isinstance(status.get("capacity"), dict):
            log.warning("node %s skipped: status.allocatable or status.capacity missing", name)
            return NodeOutcome(name, NodeResource(), Plan(), "no status.allocatable/capacity")
        strategy = config.for_node(node)
        nr = calculate(strategy, config.enabled_for(node), node, pods, nodemetric, device, now,
                       sync_gpu_shared=self.sync_gpu_shared)
        last = self.last_write.get(name)
        expired = last is None or now - last > float(strategy["updateTimeThresholdSeconds"])
        p = plan(node, nr, strategy, expired)
        outcome = NodeOutcome(name, nr, p)
        try:
            outcome.annotations = annotation_patch(self.amplification, node) or {}
        except ValueError as e:  # upstream: Calculate fails and the node keeps its annotation
            log.warning("node %s: resource amplification not calculated: %s", name, e)
        if not p.status and expired:
            self.last_write[name] = now  # in sync: the node holds what a write would have written
        if self.dry_run or (p.empty and not outcome.annotations):
            return outcome
        try:
            if p.status:
                self.client.patch(f"{NODES}/{name}/status", status_patch(p))
                self.last_write[name] = now
                log.info("node %s: %s", name, "; ".join(p.reasons))
            if p.labels:
                self.client.patch(f"{NODES}/{name}", label_patch(p))
                log.info("node %s: labels %s", name, ", ".join(f"{k}={v}" for k, v in p.labels.items()))
            if outcome.annotations:
                self.client.patch(f"{NODES}/{name}", {"metadata": {"annotations": outcome.annotations}})
                log.info("node %s: annotations %s", name, outcome.annotations)
        except KoordletError as e:
            outcome.error = str(e)
            log.warning("node %s: writing node resources failed (retried next pass): %s", name, e)
        return outcome

    def run(self, stop: threading.Event, interval: float) -> None:
        """run_once every `interval` seconds until `stop` is set; API errors are logged and retried next time."""
        while not stop.is_set():
            try:
                result = self.run_once()
                if result.status_writes or result.label_writes or result.annotation_writes or result.errors:
                    log.info("noderesource pass: %d nodes, %d status writes, %d label writes, %d annotation writes, "
                             "%d errors", len(result.nodes), result.status_writes, result.label_writes,
                             result.annotation_writes, result.errors)
            except KoordletError as e:
                log.warning("noderesource pass: %s", e)
            stop.wait(interval)
