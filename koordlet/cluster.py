"""Cluster mode: pods from kubelet (API server as fallback), Node/NodeSLO/NodeMetric watched, status reported.

Upstream: pkg/koordlet/statesinformer/impl (states_node.go, states_nodeslo.go, states_nodemetric.go,
states_pods.go). Watches run in daemon threads and hand objects to the event loop; the loop owns the Agent.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

from apis.client.backoff import REFLECTOR, BackoffPolicy, ExponentialBackoff
from apis.client.kubeapi import Gone, KubeClient, KubeConfig
from apis.client.listwatch import REAL_CLOCK, Clock, list_and_watch
from apis.core.errors import ApiError, KoordletError
from apis.core.objects import JSON
from apis.core.quantity import parse_quantity
from apis.extension.resources import BATCH_RESOURCES, MID_RESOURCES
from koordlet.agent import Agent
from koordlet.config import Config
from koordlet.devices.model import DeviceSet
from koordlet.events import EventRecorder
from koordlet.reporters.device_api import DeviceApiWriter
from koordlet.reporters.nodemetric_api import NodeMetricApiWriter
from koordlet.reporters.nrt import TopologyStatus
from koordlet.reporters.nrt_api import NRTApiWriter
from koordlet.states.kubelet import ApiServerPodSource, KubeletPodSource
from koordlet.states.shapes import ShapeGate, problem

log = logging.getLogger(__name__)

NODESLO_PATH = "/apis/slo.koordinator.sh/v1alpha1/nodeslos"
NODEMETRIC_PATH = "/apis/slo.koordinator.sh/v1alpha1/nodemetrics"
NODE_PATH = "/api/v1/nodes"
_ALLOCATABLE = (*BATCH_RESOURCES, *MID_RESOURCES)
_WATCH_TIMEOUT = 300
# The kinds the link gates, as Health and the shape gate name them, and as an Event names the object.
_EVENT_KINDS = {"node": "Node", "nodemetric": "NodeMetric"}
MALFORMED_EVENT_REASON = "MalformedObject"
_CONFIGZ_REFRESH = 60.0  # kubelet /configz is re-read at most this often (upstream asks on every NRT round)
# Retries of a failed NodeMetric report within its period: [1, 2) s doubling to [8, 16) s; the writer's own budget
# (0.1 update/s, burst 2, as upstream's statusUpdater) and a 429's Retry-After may ask for longer.
REPORT_RETRY = BackoffPolicy(initial=1.0, cap=8.0, factor=2.0, jitter=1.0)


class ClusterLink:
    def __init__(self, config: Config, kube: KubeConfig, client: KubeClient, agent: Agent) -> None:
        self.config = config
        self.kube = kube
        self.client = client
        self.clock: Clock = REAL_CLOCK  # the watches' and report retries' waits (a test's own clock)
        self.kubelet: KubeletPodSource | None = None
        self.apiserver_pods = ApiServerPodSource(client, config.node_name)
        self.writer = NodeMetricApiWriter(client, config.node_name, clock=lambda: self.clock.now())
        self.device_writer = DeviceApiWriter(client, config.node_name)
        self.nrt_writer = NRTApiWriter(client, config.node_name)
        self._configz_at: float | None = None
        self._stop = threading.Event()
        self._agent = agent
        self.shapes = ShapeGate(agent.health)
        self.events = EventRecorder(agent.health, config.node_name, client.post)
        self.nodemetric_present: bool | None = None  # None until the NodeMetric watch has listed once
        self.watch_backoff: BackoffPolicy = REFLECTOR
        self.report_backoff: BackoffPolicy = REPORT_RETRY

    @classmethod
    def connect(cls, config: Config, agent: Agent) -> ClusterLink | None:
        kube = KubeConfig.load(config.kubeconfig)
        if kube is None:
            return None
        kube = replace(kube, qps=config.kube_api_qps, burst=config.kube_api_burst)
        return cls(config, kube, KubeClient(kube), agent)

    # -- pods ----------------------------------------------------------------------------------------------
    def _kubelet_source(self) -> KubeletPodSource | None:
        node = self._agent.state.node()
        if self.kubelet is None and node is not None:
            try:
                self.kubelet = KubeletPodSource.from_node(
                    node, self.kube, preferred_address_type=self.config.kubelet_preferred_address_type,
                    insecure_tls=self.config.kubelet_insecure_tls,
                    read_only_port=self.config.kubelet_read_only_port, timeout=self.config.kubelet_sync_timeout,
                    observe=self._agent.metrics.observe_kubelet)
            except (KoordletError, ValueError) as e:
                self._agent.health.skip("kubelet", "no-address", self.config.node_name, str(e))
        return self.kubelet

    def sync_pods(self, agent: Agent) -> None:
        """kubelet first; when it fails, the API server (field selector on this node)."""
        if agent.state.node() is None:
            self.load_node(agent)
        source = self._kubelet_source()
        if source is not None and agent.sync_pods(source):
            return
        agent.sync_pods(self.apiserver_pods)

    # -- Node / NodeSLO / NodeMetric -----------------------------------------------------------------------
    def load_node(self, agent: Agent) -> None:
        try:
            node = self.client.get(f"{NODE_PATH}/{self.config.node_name}")
        except ApiError as e:
            agent.health.skip("node", "get-failed", self.config.node_name, str(e))
            return
        if self.admit("node", node):
            self.apply_node(agent, node)

    def admit(self, kind: str, obj: object) -> bool:
        """The shape gate every object received passes (koordlet.states.shapes): a malformed one is skipped, the
        state adopted before stays; it is counted and logged, and a Warning Event posted on it, once per version.
        Called where the object arrives (a watch thread, a one-shot read), never on the event loop: it may post."""
        why = problem(kind, obj)
        if why is None:
            return True
        if self.shapes.report(kind, obj, why) and kind in _EVENT_KINDS:
            meta = obj.get("metadata") if isinstance(obj, dict) else None
            uid = meta.get("uid") if isinstance(meta, dict) else None
            self.events.emit(_EVENT_KINDS[kind], "default", self.config.node_name,
                             uid if isinstance(uid, str) else None, MALFORMED_EVENT_REASON,
                             f"skipped by koordlet: {why}")
        return False

    def _adopt_nodemetric_spec(self, agent: Agent, spec: object) -> None:
        """A NodeMetric spec read by name (`report`'s and `load_once`'s GET; None: no NodeMetric, the defaults):
        adopted unless malformed."""
        if spec is None or self.admit("nodemetric", {"metadata": {"name": self.config.node_name}, "spec": spec}):
            agent.set_nodemetric_spec(spec if isinstance(spec, dict) else None)

    def load_once(self, agent: Agent) -> None:
        """One-shot reads for `koordlet nodemetric`: NodeSLO and the NodeMetric spec."""
        try:
            slo = self.client.get(f"{NODESLO_PATH}/{self.config.node_name}")
        except ApiError as e:
            log.info("no NodeSLO for %s (%s); using defaults", self.config.node_name, e)
        else:
            self.apply_nodeslo(agent, slo)
        self._adopt_nodemetric_spec(agent, self.writer.read_spec())

    def apply_node(self, agent: Agent, node: JSON | None) -> None:
        if node is None:
            return
        old = agent.state.node()
        agent.state.set_node(node)
        if old is not None and _address_changed(old, node):
            self.kubelet = None
        alloc = (node.get("status") or {}).get("allocatable") or {}
        values: dict[str, float] = {}
        for name in _ALLOCATABLE:
            if name in alloc:
                try:
                    values[name] = float(parse_quantity(str(alloc[name])))
                except Exception:
                    agent.health.skip("node", "bad-allocatable", f"{self.config.node_name}/{name}", str(alloc[name]))
        agent.metrics.node_allocatable = values

    def apply_nodeslo(self, agent: Agent, obj: JSON | None) -> None:
        agent.set_nodeslo(obj)

    def _nodemetric_exists(self) -> None:
        self.nodemetric_present = True

    def apply_nodemetric(self, agent: Agent, obj: JSON | None) -> None:
        self.nodemetric_present = obj is not None
        agent.set_nodemetric_spec((obj or {}).get("spec"))

    def report(self, agent: Agent) -> None:
        if not self.config.enable_node_metric_report:
            return
        if self.nodemetric_present is None:  # no watch yet (one-shot use): read the spec directly
            spec = self.writer.read_spec()
            self.nodemetric_present = spec is not None
            self._adopt_nodemetric_spec(agent, spec)
        if not self.nodemetric_present:
            return  # NodeMetric not created yet by koord-manager: nothing to report (not an error)
        # A failed write is tried again within this period (upstream waits for the next one), rebuilt each time,
        # one attempt after the other, after a growing wait and never sooner than the writer allows.
        deadline = self.clock.now() + agent.state.nodemetric().policy.report_period
        waits = ExponentialBackoff(self.report_backoff, clock=self.clock.now)
        while True:
            obj = agent.build_nodemetric()
            if self.writer.write_status(obj["status"]):
                agent.health.report_last_success = time.time()
                return
            agent.health.report_failures["write"] += 1
            soonest = self.writer.retry_in()
            if soonest is None:
                return
            delay = max(waits.next(), soonest)
            if self.clock.now() + delay >= deadline:
                log.info("NodeMetric %s not reported this period (%s); next try in the next period",
                         self.config.node_name, self.writer.last_reason)
                return
            log.debug("NodeMetric %s report failed (%s), retrying in %.1fs", self.config.node_name,
                      self.writer.last_reason, delay)
            if self.clock.wait(self._stop, delay):
                return

    def report_devices(self, composed: DeviceSet) -> None:
        uid = ((self._agent.state.node() or {}).get("metadata") or {}).get("uid")
        self.device_writer.report(composed, str(uid) if uid else None)

    def refresh_kubelet_config(self, agent: Agent, now: float | None = None) -> None:
        """kubelet's running configuration from /configz (CPU and topology manager policies), at most once a
        minute; unless --disable-query-kubelet-config. On failure the last one (or kubelet's config file) stays."""
        if self.config.disable_query_kubelet_config:
            return
        now = time.monotonic() if now is None else now
        if self._configz_at is not None and now - self._configz_at < _CONFIGZ_REFRESH:
            return
        source = self._kubelet_source()
        if source is None:
            return
        self._configz_at = now
        try:
            agent.state.set_kubelet_config(source.get_configz())
            agent.health.recovered("kubelet", "configz-failed", self.config.node_name)
        except Exception as e:
            agent.health.skip("kubelet", "configz-failed", self.config.node_name, str(e))

    def report_nrt(self, status: TopologyStatus) -> bool:
        uid = ((self._agent.state.node() or {}).get("metadata") or {}).get("uid")
        return self.nrt_writer.report(status, str(uid) if uid else None)

    # -- watches -------------------------------------------------------------------------------------------
    def start_watches(self, agent: Agent) -> None:
        """Daemon threads (never joined: a blocked watch must not delay shutdown) feeding the running loop."""
        loop = asyncio.get_running_loop()
        specs: list[tuple[str, str, Callable[[Agent, JSON | None], None]]] = [
            (NODE_PATH, "node", self.apply_node), (NODESLO_PATH, "nodeslo", self.apply_nodeslo),
            (NODEMETRIC_PATH, "nodemetric", self.apply_nodemetric),
        ]
        for path, kind, apply in specs:
            def deliver(obj: JSON | None, kind: str = kind,
                        apply: Callable[[Agent, JSON | None], None] = apply) -> None:
                # A NodeSLO's gate is its decoder (Agent.set_nodeslo): refused there with InvalidNodeSLO Events.
                if obj is not None and kind != "nodeslo" and not self.admit(kind, obj):
                    if kind == "nodemetric":  # it exists (status can be reported); its last good spec stays
                        loop.call_soon_threadsafe(self._nodemetric_exists)
                    return
                loop.call_soon_threadsafe(apply, agent, obj)

            threading.Thread(target=self._watch_forever, args=(path, deliver), name=f"watch{path}",
                             daemon=True).start()

    def _watch_forever(self, path: str, deliver: Callable[[JSON | None], None]) -> None:
        """List then watch one object by name (field selector), as client-go's reflector (apis.client.listwatch)."""
        selector = f"metadata.name={self.config.node_name}"

        def list_mine() -> str | None:
            listed = self.client.list(path, field_selector=selector)
            mine = [i for i in listed.get("items") or [] if self._is_mine(i)]
            deliver(mine[0] if mine else None)
            self._agent.health.recovered("watch", "failed", path)  # a later outage is logged again
            return str((listed.get("metadata") or {}).get("resourceVersion") or "") or None

        def watch(rv: str | None) -> Iterator[JSON]:
            return self.client.watch(path, field_selector=selector, resource_version=rv,
                                     timeout_seconds=_WATCH_TIMEOUT)

        def on_event(event: JSON) -> None:
            obj = event.get("object") or {}
            if not self._is_mine(obj):
                return  # the field selector already filters; a server that ignores it must not leak
            if event.get("type") in ("ADDED", "MODIFIED"):
                deliver(obj)
            elif event.get("type") == "DELETED":
                deliver(None)

        def on_error(error: Exception, wait: float) -> None:
            if isinstance(error, Gone):
                log.debug("watch %s: %s; re-listing in %.1fs", path, error, wait)
            else:
                self._agent.health.skip("watch", "failed", path, f"{error} (retrying in {wait:.1f}s)")

        list_and_watch(self._stop, list_mine, watch, on_event, backoff=self.watch_backoff, clock=self.clock,
                       on_error=on_error)

    def _is_mine(self, obj: object) -> bool:
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        return isinstance(meta, dict) and meta.get("name") == self.config.node_name

    def close(self) -> None:
        self._stop.set()
        self.client.close()


def _address_changed(old: JSON, new: JSON) -> bool:
    def key(n: JSON) -> tuple[object, object]:
        st = n.get("status") or {}
        return (st.get("addresses"), st.get("daemonEndpoints"))

    return bool(key(old) != key(new))
