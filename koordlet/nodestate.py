"""The agent's node state: what the sources learnt, with one typed getter each and change subscriptions.

Upstream: pkg/koordlet/statesinformer (GetNode, GetNodeSLO, GetAllPods, GetNodeTopo, RegisterCallbacks). The
sources write it (the pod sync, ClusterLink's watches and kubelet /configz, the node info and NRT loops, device
discovery); QoS, NRI, the reporters and the exporter read it. Planners never see it: the agent hands them a
QoSState snapshot built from it.

Threads: the writers run on the event loop or in a worker thread (the pod sync, /configz, device discovery); the
readers on the loop, in worker threads (the cluster report) and in the HTTP thread. Each slot is one reference to
an immutable record (or to a list never changed in place), replaced by one assignment, so a reader always gets a
whole record without a lock and a getter costs an attribute read. A subscriber runs on the writer's thread right
after the change: it must be quick and hand work to its own thread (the daemon's calls `call_soon_threadsafe`).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from apis.core.errors import PlanError
from apis.core.objects import JSON
from apis.extension.node import cpu_normalization_ratio
from apis.slo.decode import nodeslo_config
from apis.slo.types import NodeSLOSpec
from koordlet.collectors.hostapps import HostApp
from koordlet.devices.model import DeviceSet
from koordlet.health import Health
from koordlet.host.driver import CgroupDriver
from koordlet.qos.cpuset import CPUSetRule
from koordlet.reporters.nodemetric import CollectPolicy, collect_policy, merge_spec
from koordlet.states.cpuinfo import CPUBasicInfo, NumaMemory
from koordlet.states.cpupools import CPUTopology
from koordlet.states.model import PodMeta
from koordlet.states.pods import PodState

log = logging.getLogger(__name__)


class Change(enum.Enum):
    """What changed (upstream's RegisterType), the key a subscriber registers under."""

    PODS = "pods"
    DRIVER = "driver"
    NODE = "node"
    NODESLO = "nodeslo"
    NODEMETRIC = "nodemetric"
    KUBELET_CONFIG = "kubelet-config"
    NODE_INFO = "node-info"
    CPUSET_RULE = "cpuset-rule"
    DEVICES = "devices"


Subscriber = Callable[[Change], None]


@dataclass(frozen=True, slots=True)
class SLOState:
    """The NodeSLO in force: its typed spec (merged on the defaults), and why the last one received was refused."""

    spec: NodeSLOSpec  # decode_nodeslo's spec of the last valid one received (the defaults while none was)
    present: bool = False  # a valid NodeSLO was received and not deleted since
    refused: tuple[PlanError, ...] = ()  # the last one received was refused for these (the previous one stays)
    host_apps: list[HostApp] = field(default_factory=list)  # its hostApplications' cgroup dirs; never mutated


@dataclass(frozen=True, slots=True)
class NodeMetricSpec:
    """The NodeMetric spec merged on the defaults, and the collect policy it gives."""

    spec: JSON
    policy: CollectPolicy

    @classmethod
    def of(cls, received: JSON | None) -> NodeMetricSpec:
        spec = merge_spec(received)
        return cls(spec, collect_policy(spec))


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """The CPU topology, CPU basic info and NUMA memory last read (upstream's node info collector)."""

    cpu_topology: CPUTopology
    cpu_basic: CPUBasicInfo
    numa_memory: dict[int, NumaMemory]  # never mutated


@dataclass(frozen=True, slots=True)
class NodeObject:
    """The Node (cluster mode) and its CPU normalization ratio, decoded once per change."""

    obj: JSON
    cpu_normalization_ratio: float | None  # None: no annotation, or a malformed one (the QoS reconciler says so)

    @classmethod
    def of(cls, obj: JSON) -> NodeObject:
        return cls(obj, cpu_normalization_ratio(obj)[0])


class NodeState:
    """The node's state as the sources last reported it (see the module doc)."""

    def __init__(self, driver: CgroupDriver, health: Health, node_info: NodeInfo) -> None:
        self._pods = PodState(driver, health)
        self._node: NodeObject | None = None
        self._slo = SLOState(nodeslo_config(None))
        self._nodemetric = NodeMetricSpec.of(None)
        self._kubelet_config: JSON | None = None
        self._node_info = node_info
        self._cpuset_rule: CPUSetRule | None = None
        self._devices = DeviceSet()
        self._subscribers: dict[Change, tuple[Subscriber, ...]] = {}

    # -- getters (any thread) ------------------------------------------------------------------------------
    def pods(self) -> list[PodMeta]:
        """The node's pods (the same list object while none changed: caches are keyed on it)."""
        return self._pods.pods

    def pods_synced(self) -> bool:
        """Whether a pod sync succeeded once (upstream's HasSynced for pods)."""
        return self._pods.synced

    def driver(self) -> CgroupDriver:
        return self._pods.driver

    def node(self) -> JSON | None:
        """The Node object (cluster mode); None standalone or before the first get/watch."""
        node = self._node
        return None if node is None else node.obj

    def cpu_normalization_ratio(self) -> float | None:
        """The Node's `node.koordinator.sh/cpu-normalization-ratio`; None without a Node, annotation or valid one."""
        node = self._node
        return None if node is None else node.cpu_normalization_ratio

    def nodeslo(self) -> SLOState:
        return self._slo

    def nodeslo_spec_in_force(self) -> NodeSLOSpec | None:
        """The typed NodeSLO spec once one was received, else None (the runtime hooks wait for one)."""
        slo = self._slo
        return slo.spec if slo.present else None

    def nodemetric(self) -> NodeMetricSpec:
        return self._nodemetric

    def kubelet_config(self) -> JSON | None:
        """kubelet's /configz (cluster mode, when fetched); None: readers fall back to kubelet's config file."""
        return self._kubelet_config

    def node_info(self) -> NodeInfo:
        return self._node_info

    def cpuset_rule(self) -> CPUSetRule | None:
        """The share pools etc. the NodeResourceTopology loop last computed; None until it ran."""
        return self._cpuset_rule

    def devices(self) -> DeviceSet:
        """The last device discovery round (empty before the first, or with no device gate on)."""
        return self._devices

    # -- writers (the sources) -----------------------------------------------------------------------------
    def update_pods(self, raw_pods: list[JSON]) -> bool:
        """A pod sync's raw pods (bad ones are skipped); returns whether the pod list changed."""
        changed = self._pods.update(raw_pods)
        if changed:
            self._notify(Change.PODS)
        return changed

    def set_driver(self, driver: CgroupDriver) -> None:
        """A newly detected cgroup driver: the next pod sync rebuilds every pod's dirs."""
        if driver != self._pods.driver:
            self._pods.set_driver(driver)
            self._notify(Change.DRIVER)

    def set_node(self, node: JSON) -> None:
        self._node = NodeObject.of(node)
        self._notify(Change.NODE)

    def set_nodeslo(self, slo: SLOState) -> None:
        """A NodeSLO adopted or deleted (subscribers are told of each: QoS plans again on each)."""
        self._slo = slo
        self._notify(Change.NODESLO)

    def refuse_nodeslo(self, errors: tuple[PlanError, ...]) -> None:
        """The last NodeSLO received was refused: the one in force stays, so subscribers are not told."""
        self._slo = replace(self._slo, refused=errors)

    def set_nodemetric(self, spec: NodeMetricSpec) -> None:
        self._nodemetric = spec
        self._notify(Change.NODEMETRIC)

    def set_kubelet_config(self, config: JSON) -> None:
        self._kubelet_config = config
        self._notify(Change.KUBELET_CONFIG)

    def set_node_info(self, info: NodeInfo) -> None:
        self._node_info = info
        self._notify(Change.NODE_INFO)

    def set_cpuset_rule(self, rule: CPUSetRule) -> None:
        """Kept (and subscribers told) only when it differs: the runtime hooks' cached facts compare it."""
        if rule != self._cpuset_rule:
            self._cpuset_rule = rule
            self._notify(Change.CPUSET_RULE)

    def set_devices(self, devices: DeviceSet) -> None:
        self._devices = devices
        self._notify(Change.DEVICES)

    # -- subscriptions -------------------------------------------------------------------------------------
    def subscribe(self, changes: Change | Iterable[Change], fn: Subscriber) -> None:
        """Call `fn(change)` after each change of these kinds, on the writer's thread."""
        for change in (changes,) if isinstance(changes, Change) else changes:
            self._subscribers[change] = (*self._subscribers.get(change, ()), fn)

    def unsubscribe(self, fn: Subscriber) -> None:
        self._subscribers = {c: tuple(f for f in fns if f is not fn) for c, fns in self._subscribers.items()}

    def _notify(self, change: Change) -> None:
        for fn in self._subscribers.get(change, ()):
            try:
                fn(change)
            except Exception:  # one subscriber's failure must not stop the source nor the other subscribers
                log.exception("node state subscriber %r failed on a %s change", fn, change.value)
