"""The composition root: builds every component from a Config and exposes one method per unit of work.

The asyncio daemon (daemon.py) and the one-shot `koordlet nodemetric` call the same methods, so what a
user sees from the CLI is exactly what the daemon reports.
"""

from __future__ import annotations

import logging
import os
import time

from apis.core.errors import HostReadError, InvalidInput, KoordletError, PlanError
from apis.core.objects import JSON
from apis.core.shape import object_ident
from apis.slo.decode import decode_nodeslo, nodeslo_config
from koordlet import heap
from koordlet.collectors.advisor import Advisor
from koordlet.collectors.beresource import BEResourceCollector
from koordlet.collectors.cgroups import CONTAINER_INTERVAL_SECONDS, MAX_STRIDE, CgroupUsageCollector
from koordlet.collectors.hostapps import host_apps
from koordlet.collectors.node import NodeCollector, parse_meminfo
from koordlet.collectors.numamemory import PodNumaMemory
from koordlet.collectors.psi import PSICollector
from koordlet.config import Config
from koordlet.devices import rdma
from koordlet.devices.inventory import DeviceInventory
from koordlet.devices.metrics import DeviceView
from koordlet.devices.model import DeviceSet
from koordlet.devices.nvidia.telemetry import TelemetryCollector
from koordlet.devices.nvidia.usage import GpuUsageCollector
from koordlet.devices.rdma_metrics import RDMACollector
from koordlet.devices.report import API_VERSION as DEVICE_API_VERSION
from koordlet.devices.report import GROUP as DEVICE_GROUP
from koordlet.devices.report import PLURAL as DEVICE_PLURAL
from koordlet.devices.report import changed, desired
from koordlet.events import EventRecorder
from koordlet.exporter import AgentMetrics
from koordlet.health import Health
from koordlet.host.cgroup import detect_backend
from koordlet.host.driver import detect_driver
from koordlet.metriccache import MetricCache
from koordlet.nodestate import NodeInfo, NodeMetricSpec, NodeState, SLOState
from koordlet.prediction.predictor import Outcome, predict
from koordlet.prediction.server import PeakPredictServer, training_pods
from koordlet.qos.cpuburst_facts import containers_read_every_tick
from koordlet.qos.cpuset import CPUSetRule
from koordlet.qos.cpusuppress import SuppressStatus
from koordlet.qos.evictor import EvictionStats, Evictor, Post
from koordlet.qos.evictstrategy import strategies as eviction_strategies
from koordlet.qos.executor import Executor
from koordlet.qos.manager import QoSManager, enabled_features
from koordlet.qos.metrics import QoSMetrics
from koordlet.qos.state import QoSState
from koordlet.reporters import nrt
from koordlet.reporters.nodemetric import NodeMetricBuilder
from koordlet.reporters.statedir import StateDirWriter
from koordlet.schedlat.collector import SchedLatency
from koordlet.states.cpuinfo import read_cpu_basic_info, read_numa_memory
from koordlet.states.cpupools import CPUTopology
from koordlet.states.kubeletcpu import (
    KubeletCPUManager,
    cpu_manager,
    read_cpu_manager_state,
    read_kubelet_config_file,
)
from koordlet.states.model import PodMeta, PodSource
from koordlet.states.nodecpu import NodeCPUFacts, node_cpu_facts
from koordlet.states.nodeslo import load_nodeslo_file
from koordlet.states.pods import PodsDirSource

log = logging.getLogger(__name__)

NODEMETRIC_GROUP = "slo.koordinator.sh"
NODEMETRIC_API_VERSION = "slo.koordinator.sh/v1alpha1"
_GRACE_SECONDS = 60  # retention slack beyond the longest query window


def api_path(api_version: str, plural: str, name: str) -> str:
    """Where the API server (and our standalone HTTP endpoint) serves a cluster-scoped object."""
    return f"/apis/{api_version}/{plural}/{name}"


class Agent:
    def __init__(self, config: Config, health: Health | None = None) -> None:
        self.config = config
        self.health = health or Health()
        heap.settle()
        paths = config.paths
        self.backend = detect_backend(paths)
        driver, certain = detect_driver(paths, self.backend.version)
        self._driver_certain = certain
        log.info("cgroup v%d, driver %s%s, cgroup root %s", self.backend.version, driver,
                 "" if certain else " (assumed: no kubepods dir and no kubelet found)", paths.cgroup_root)
        # CPU topology, CPU basic info and NUMA memory: read with the node info, reported in the NRT
        topology = CPUTopology.read(paths)
        self.state = NodeState(driver, self.health,
                               NodeInfo(topology, read_cpu_basic_info(paths, topology), read_numa_memory(paths)))
        self.cache = MetricCache(self._retention)
        self.node = NodeCollector(paths)
        psi = PSICollector(self.backend, self.health) if config.gate("PSICollector") else None
        # containers every CONTAINER_INTERVAL_SECONDS; at sub-second intervals more often (at most 60 phases)
        stride = min(max(1, round(CONTAINER_INTERVAL_SECONDS / config.collect_res_used_interval)), MAX_STRIDE) \
            if config.collect_res_used_interval > 0 else 1
        self.advisor = Advisor(self.cache, self.node, CgroupUsageCollector(self.backend, self.health,
                                                                           container_stride=stride), psi,
                               self.health, page_cache=config.enable_pagecache_collector,
                               numa_memory=PodNumaMemory(paths, self.backend.version))
        self._every_tick: tuple[list[PodMeta], SLOState, frozenset[str]] | None = None
        self._host_node_obj: JSON | None = None
        self._nrt_obj: JSON | None = None  # standalone: the NodeResourceTopology last written
        # BECPUEvict reads the besteffort cgroup's usage and limit and the BE requests, collected every tick
        self.be_resource = BEResourceCollector(self.backend, driver, self.health) \
            if config.gate("BECPUEvict") else None
        self.eviction_stats = EvictionStats()  # koordlet_pod_eviction{,_detail}
        self.evict_strategies = eviction_strategies(config, self.health)  # their cool-downs live here
        self._evictor: Evictor | None = None
        self.metrics = AgentMetrics(config.node_name, self.health, self.advisor.latest, self.cache,
                                    nodemetric_prom=config.gate("NodeMetricPromMetrics"), suppress=self.suppress_status,
                                    evictions=self.eviction_stats,
                                    max_staleness=config.collect_res_used_interval,
                                    working_set=self.advisor.cgroups.working_set,
                                    container_series=not config.disable_container_metrics)
        self._count_node_info("cpu", bool(topology.cpus))  # the first node info collection
        if topology.cpus:  # upstream reads the NUMA info only after the CPU info
            self._count_node_info("numa", True)
        if config.gate("CPUSetAllocator"):  # upstream's cpuset hook records its share pools as it parses the rule
            self.metrics.cpuset_rule = self.state.cpuset_rule
            self.metrics.per_cpu_metric = config.gate("PerCPUMetric")
        # the QoS executor's update and reconciler latencies and CPU burst's scaled values
        self.qos_metrics = QoSMetrics(config.node_name, self.metrics.internal, cpu_burst=config.gate("CPUBurst"))
        self.builder = NodeMetricBuilder(self.cache)
        self.predict_server = PeakPredictServer(config.prediction, self.cache, config.prediction_checkpoint_dir)
        self.state_writer = StateDirWriter(config.state_dir)
        self.pod_source: PodSource | None = PodsDirSource(config.pods_dir, self.health) if config.pods_dir else None
        self.collected_once = False
        self.devices: DeviceInventory | None = None
        if config.gate("Accelerators") or config.gate("RDMADevices"):
            self.devices = DeviceInventory(config, self.health)
        self._device_obj: JSON | None = None
        if self.devices is not None:
            self.metrics.device_view = self.device_view
        if config.gate("RDMADevices"):  # ports and counters read by the scrape (at most every 5 s), not the tick
            self.metrics.external.register(RDMACollector(config.node_name, config.paths,
                                                         lambda: self.advisor.latest.pods))
        self._qos: QoSManager | None = None
        # Loaded by the first collection tick, off the caller's thread (bcc compiles for a few tenths of a second).
        self.schedlat: SchedLatency | None = None
        if config.gate("CPUSchedLatency"):
            self.schedlat = SchedLatency(paths, self.backend.version, self.health)
        self.metrics.schedlat = self.schedlat

    def _retention(self, kind: str) -> float:
        policy = self.state.nodemetric().policy
        if kind.startswith(("node_", "sys_")):
            return policy.longest + _GRACE_SECONDS
        return policy.window + _GRACE_SECONDS

    # -- state ---------------------------------------------------------------------------------------------
    def sync_pods(self, source: PodSource | None = None) -> bool:
        """One pod sync; on failure the previous pod list stays. Returns whether it succeeded."""
        source = source or self.pod_source
        if source is None:
            return False
        try:
            raw = source.list_pods()
        except Exception as e:  # any source failure: keep the old list, say so once per distinct error
            self.health.skip("pods", f"{source.name}-failed", source.name, str(e))
            return False
        if not self._driver_certain:
            self.redetect_driver()
        self.state.update_pods(raw)
        self.health.recovered("pods", f"{source.name}-failed", source.name)
        return True

    def redetect_driver(self) -> None:
        driver, certain = detect_driver(self.config.paths, self.backend.version)
        if certain:
            self._driver_certain = True
            if driver != self.state.driver():
                log.info("cgroup driver detected: %s", driver)
                self.state.set_driver(driver)

    def set_nodeslo(self, obj: JSON | None) -> bool:
        """Adopt a NodeSLO object (None = absent). A malformed one is logged and skipped: the old one stays, and every
        QoS pass (so `koordlet plan` too) reports why as errors, which become Events on the NodeSLO."""
        if obj is None:
            spec, present = nodeslo_config(None), False
        else:
            decoded = decode_nodeslo(obj)
            if decoded.spec is None:
                problems = list(decoded.problems)
                name, rv = object_ident(obj)  # logged once per version: a later invalid one is logged again
                self.health.skip("nodeslo", "invalid", f"{name} (resourceVersion {rv})" if rv else name,
                                 "; ".join(problems[:5]))
                self._refuse_nodeslo(problems)
                return False
            spec, present = decoded.spec, True
        self.state.set_nodeslo(SLOState(spec, present, (), host_apps(spec.host_applications, self.state.driver())))
        return True

    def load_nodeslo_file(self) -> bool:
        if not self.config.nodeslo_file:
            return False
        try:
            obj = load_nodeslo_file(self.config.nodeslo_file)
        except (InvalidInput, KoordletError, OSError) as e:
            self.health.skip("nodeslo", "unreadable", self.config.nodeslo_file, str(e))
            self._refuse_nodeslo([f"{self.config.nodeslo_file}: {e}"])
            return False
        return self.set_nodeslo(obj)

    def _refuse_nodeslo(self, problems: list[str], limit: int = 10) -> None:
        """One error per problem ("<field>: <message>"), on the NodeSLO named after the node (upstream's naming)."""
        errors = []
        for problem in problems[:limit]:
            where, _, message = problem.partition(": ")
            errors.append(PlanError("NodeSLO", self.config.node_name, where,
                                    f"{message or where}; the NodeSLO is refused as a whole, nothing from it is "
                                    f"applied (the previous one, or the defaults, stay)", "InvalidNodeSLO"))
        self.state.refuse_nodeslo(tuple(errors))

    def set_nodemetric_spec(self, spec: JSON | None) -> None:
        """Adopt a NodeMetric spec (None = absent: the defaults)."""
        self.state.set_nodemetric(NodeMetricSpec.of(spec))

    # -- work ----------------------------------------------------------------------------------------------
    def collect(self, now: float | None = None, mono_ns: int | None = None) -> None:
        now = time.time() if now is None else now
        mono_ns = time.monotonic_ns() if mono_ns is None else mono_ns
        pods = self.state.pods()
        self.advisor.collect_usage(pods, self.state.nodeslo().host_apps, int(now * 1000), mono_ns,
                                   self._containers_every_tick(pods))
        if self.be_resource is not None:
            self.be_resource.collect(pods, self.cache, int(now * 1000), mono_ns)
        if self.schedlat is not None:
            self.schedlat.collect(pods, int(now * 1000), self.cache)
        self.collected_once = True
        self.metrics.collected()

    def _containers_every_tick(self, pods: list[PodMeta]) -> frozenset[str]:
        """The containers CPU burst reads per second (kept while the pod list and NodeSLO are the same objects)."""
        slo = self.state.nodeslo()
        kept = self._every_tick
        if kept is None or kept[0] is not pods or kept[1] is not slo:
            ids = containers_read_every_tick(pods, slo.spec.cpu_burst_strategy.config) \
                if slo.present and self.config.gate("CPUBurst") else frozenset()
            kept = self._every_tick = (pods, slo, ids)
        return kept[2]

    def collect_psi(self) -> None:
        self.advisor.collect_psi(self.state.pods())
        self.metrics.collected()

    def gc(self, now: float | None = None) -> int:
        dropped = self.cache.gc(int((time.time() if now is None else now) * 1000))
        heap.trim()  # what the gc and a minute of pod changes freed, given back
        return dropped

    def refresh_node_info(self) -> None:
        """Upstream's node info collector (nodeinfo/node_info_collector.go): the CPU info, then, only when that was
        read, the NUMA info; each counted by outcome. A read that fails or finds no online CPU keeps the last info."""
        paths = self.config.paths
        try:
            topology = CPUTopology.read(paths)
            if not topology.cpus:
                raise HostReadError(f"no online CPU under {paths.sys('devices', 'system', 'cpu')}")
            basic = read_cpu_basic_info(paths, topology)
        except Exception as e:  # the readers tolerate missing files; anything else must not stop the loop
            self.health.skip("nodeinfo", "cpu-info-failed", self.config.node_name, f"{type(e).__name__}: {e}")
            self._count_node_info("cpu", False)
            return
        numa_memory = self.state.node_info().numa_memory
        self.state.set_node_info(NodeInfo(topology, basic, numa_memory))
        self.health.recovered("nodeinfo", "cpu-info-failed", self.config.node_name)
        self._count_node_info("cpu", True)
        try:
            self.node.refresh_topology()
            numa_memory = read_numa_memory(paths)
        except Exception as e:
            self.health.skip("nodeinfo", "numa-info-failed", self.config.node_name, f"{type(e).__name__}: {e}")
            self._count_node_info("numa", False)
            return
        self.state.set_node_info(NodeInfo(topology, basic, numa_memory))
        self.health.recovered("nodeinfo", "numa-info-failed", self.config.node_name)
        self._count_node_info("numa", True)

    def _count_node_info(self, info: str, ok: bool) -> None:
        self.metrics.node_info_status[(info, "succeeded" if ok else "failed")] += 1

    # -- prediction (pkg/koordlet/prediction) -------------------------------------------------------------------
    def train_prediction(self, now: float | None = None) -> None:
        """One training round, after the pods are known (the first one restores the checkpoints of the models
        still meaningful: the node's and those of the pods listed now)."""
        if not self.state.pods_synced():
            return
        now = time.time() if now is None else now
        pods = self.state.pods()
        if not self.predict_server.restored:
            self.predict_server.restore(p.uid for p in pods)
        self.predict_server.train(training_pods(p.raw for p in pods), now)

    def checkpoint_prediction(self, now: float | None = None) -> None:
        """Every minute: drop expired models and checkpoint the ones due."""
        now = time.time() if now is None else now
        self.predict_server.gc(now)
        self.predict_server.checkpoint(now)

    def _host_node(self) -> JSON | None:
        """Standalone there is no Node: the machine itself stands in, its CPUs and MemTotal as allocatable."""
        if self._host_node_obj is None:
            try:
                with open(self.config.paths.proc("meminfo"), "rb") as f:
                    mem_kib = parse_meminfo(f.read()).get("MemTotal", 0)
            except OSError:
                return None
            self._host_node_obj = {"metadata": {"name": self.config.node_name}, "status": {"allocatable": {
                "cpu": str(len(self.state.node_info().cpu_topology.cpus)), "memory": f"{mem_kib}Ki"}}}
        return self._host_node_obj

    def _predict(self, pods: list[JSON], now: float) -> Outcome:
        node = self.state.node()
        if node is None and self.config.standalone:
            node = self._host_node()
        outcome = predict(self.predict_server, self.config.prediction, node, pods, now)
        self.metrics.prediction = outcome
        if outcome.warming_up:  # the first training round is a minute away: expected, not a skipped item
            self.health.expect("prediction", "failed", self.config.node_name, outcome.error)
        elif outcome.error:
            self.health.skip("prediction", "failed", self.config.node_name, outcome.error)
        else:
            self.health.recovered("prediction", "failed", self.config.node_name)
        return outcome

    def build_nodemetric(self, now: float | None = None) -> JSON:
        """The full NodeMetric object this node reports now (status built from the metric cache)."""
        now = time.time() if now is None else now
        slo, nodemetric = self.state.nodeslo(), self.state.nodemetric()
        status = self.builder.build(self.state.pods(), slo.host_apps if slo.present else [], nodemetric.policy,
                                    list(self.node.topology.cpus_by_node), now, predict=self._predict)
        obj = {
            "apiVersion": NODEMETRIC_API_VERSION,
            "kind": "NodeMetric",
            "metadata": {"name": self.config.node_name},
            "spec": nodemetric.spec,
            "status": status,
        }
        self.metrics.last_nodemetric = obj
        self.metrics.served[api_path(NODEMETRIC_API_VERSION, "nodemetrics", self.config.node_name)] = obj
        return obj

    def refresh_devices(self) -> DeviceSet | None:
        """One discovery round of the enabled device sources (None when no device gate is on); NVIDIA GPUs found
        also feed per-process GPU usage into the collection tick (upstream's GPU device collector)."""
        if self.devices is None:
            return None
        composed = self.devices.refresh()
        self.state.set_devices(composed)
        backend = self.devices.nvml()
        if backend is not None and self.devices.gpus:
            if self.advisor.gpu is None:
                self.advisor.gpu = GpuUsageCollector(backend, self.backend, self.health, self.devices.gpus,
                                                     telemetry=TelemetryCollector(backend, self.health))
            else:
                self.advisor.gpu.gpus = list(self.devices.gpus)
        return composed

    def device_view(self) -> DeviceView | None:
        """What the device series show: the last device round and the last tick's GPU usage."""
        if self.devices is None:
            return None
        composed = self.state.devices()
        gpu = self.advisor.gpu
        return DeviceView(composed.devices, composed.labels, self.devices.gpus, self.advisor.latest.gpu,
                          self.advisor.latest.pods, models=rdma.models(self.config.paths, composed.devices),
                          driver_version=self.devices.driver_version,
                          telemetry=gpu.telemetry.latest if gpu is not None and gpu.telemetry is not None else {},
                          xid=self.devices.xid_counts)

    def write_devices(self, composed: DeviceSet) -> bool:
        """Standalone: the Device object to the state dir and the HTTP endpoint, rewritten only on change."""
        obj = desired(self.config.node_name, None, composed, self._device_obj)
        if not changed(self._device_obj, obj) and self._device_obj is not None:
            return False
        self._device_obj = obj
        self.state_writer.write(DEVICE_GROUP, DEVICE_PLURAL, obj)
        self.metrics.served[api_path(DEVICE_API_VERSION, DEVICE_PLURAL, self.config.node_name)] = obj
        return True

    # -- NodeResourceTopology ----------------------------------------------------------------------------------
    def kubelet_cpu_manager(self) -> tuple[KubeletCPUManager, dict[str, list[int]] | None]:
        """The kubelet CPU manager (from /configz when the cluster link fetched it, else kubelet's config file) and,
        under the static policy, its checkpoint's assignments; bad input is logged once and counts as unknown."""
        paths, name = self.config.paths, self.config.node_name
        config = self.state.kubelet_config()
        try:
            if config is None:
                config = read_kubelet_config_file(paths)
            kubelet = cpu_manager(config, self.state.node_info().cpu_topology)
        except InvalidInput as e:
            self.health.skip("kubelet-config", "invalid", name, str(e))
            return KubeletCPUManager(), None
        if not kubelet.static:
            return kubelet, None
        try:
            return kubelet, read_cpu_manager_state(paths)
        except InvalidInput as e:
            self.health.skip("kubelet-config", "invalid-cpu-manager-state", name, str(e))
            return kubelet, None

    def node_cpu_facts(self) -> NodeCPUFacts:
        """The CPU facts both the NRT and the cpuset rule use (share pools from the pods' resource-status)."""
        kubelet, entries = self.kubelet_cpu_manager()
        node_meta = (self.state.node() or {}).get("metadata") or {}
        facts = node_cpu_facts(self.state.node_info().cpu_topology, self.state.pods(),
                               node_meta.get("annotations") or {}, kubelet, entries, self.config.node_name)
        for e in facts.errors:
            self.health.skip("nrt", e.reason, f"{e.kind}/{e.name}", f"{e.field}: {e.message}")
        return facts

    def nrt_status(self) -> nrt.TopologyStatus:
        """What this node's NodeResourceTopology says now (computed even with the report off: the runtime hook's
        cpuset rule follows it, as upstream's follows the local NRT); InvalidInput when sysfs is inconsistent."""
        facts = self.node_cpu_facts()
        self.state.set_cpuset_rule(CPUSetRule.from_facts(facts))
        info = self.state.node_info()
        return nrt.topology_status(facts, info.cpu_basic, info.numa_memory, self.state.node(),
                                   hugepage_report=self.config.gate("HugePageReport"))

    def write_nrt(self, status: nrt.TopologyStatus) -> bool:
        """Standalone: the NRT to the state dir and the HTTP endpoint, rewritten only when it changed."""
        if not nrt.changed(self._nrt_obj, status):
            return False
        base = self._nrt_obj or nrt.new_object(self.config.node_name, None)
        obj = nrt.updated(base, status)
        self._nrt_obj = obj
        self.state_writer.write(nrt.GROUP, nrt.PLURAL, obj)
        self.metrics.served[api_path(nrt.API_VERSION, nrt.PLURAL, self.config.node_name)] = obj
        return True

    # -- QoS ---------------------------------------------------------------------------------------------------
    def qos_state(self) -> QoSState:
        """The snapshot one QoS pass (or eviction round) plans from."""
        state, slo = self.state, self.state.nodeslo()
        return QoSState(self.config.paths, self.backend.version, state.driver(), state.pods(), slo.spec,
                        slo.host_apps if slo.present else [], slo.present, slo.refused,
                        cache=self.cache, node=state.node(), kubelet_config=state.kubelet_config(),
                        cpu_topology=state.node_info().cpu_topology)

    def qos_manager(self, *, dry_run: bool = False, post_event: Post | None = None) -> QoSManager:
        """The QoS reconciler for the enabled gates, writing through one executor (audit under the state dir)."""
        if dry_run or self._qos is None:
            metrics = None if dry_run else self.qos_metrics
            executor = Executor(self.config.paths, self.backend.version, self.health, dry_run=dry_run,
                                audit_path=None if dry_run else os.path.join(self.config.state_dir, "audit",
                                                                             "qos.jsonl"),
                                force_seconds=self.config.resource_force_update_seconds, observer=metrics)
            manager = QoSManager(enabled_features(self.config), executor,
                                 EventRecorder(self.health, self.config.node_name, post_event), self.health,
                                 metrics, evictions=eviction_strategies(self.config, self.health) if dry_run else None)
            if dry_run:
                return manager
            self._qos = manager
        return self._qos

    def suppress_status(self) -> SuppressStatus:
        """BE CPU suppress's numbers as the daemon's QoS manager last published them (koordlet_be_suppress_*; a dry
        run's manager publishes its own)."""
        return self._qos.suppress if self._qos is not None else SuppressStatus()

    def evictor(self, post: Post | None = None) -> Evictor:
        """The one evictor of the eviction strategies (its evicted-UID cache is shared): Evictions and Events through
        `post` (KubeClient.post) in a cluster; standalone, or without a client, it only reports."""
        if self._evictor is None:
            cfg = self.config
            self._evictor = Evictor(node_name=cfg.node_name, paths=cfg.paths, cgroup_version=self.backend.version,
                                    health=self.health, stats=self.eviction_stats,
                                    events=EventRecorder(self.health, cfg.node_name, post), post=post,
                                    only_evict_by_api=cfg.evict.only_evict_by_api,
                                    standalone=cfg.standalone or post is None, state_dir=cfg.state_dir)
        return self._evictor

    def close(self) -> None:
        """Release the descriptors the collectors keep between ticks."""
        self.advisor.cgroups.close()
        self.node.close()
        if self.schedlat is not None:
            self.schedlat.close()

    def write_state(self, obj: JSON) -> str:
        path = self.state_writer.write(NODEMETRIC_GROUP, "nodemetrics", obj)
        self.health.report_last_success = time.time()
        return path
