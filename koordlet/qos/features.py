"""The QoS features the manager can run, each binding its planner module's facts and plan to its gate options."""

from __future__ import annotations

from koordlet.qos import (
    batchresource,
    blkio,
    blkio_facts,
    cpuburst,
    cpuburst_facts,
    cpuqos,
    cpuset,
    cpusuppress,
    memoryqos,
    resctrl,
    resctrl_facts,
)
from koordlet.qos.feature import FeatureResult, PlannedFeature
from koordlet.qos.model import Report
from koordlet.qos.state import QoSState
from koordlet.qos.steady import SteadyFacts


class Resctrl(PlannedFeature[resctrl_facts.ResctrlFacts]):
    """Gates RdtResctrl (class groups) and Resctrl (pod groups from the annotation)."""

    name = "resctrl"

    def __init__(self, *, pod_level: bool = False, node_name: str = "") -> None:
        self.pod_level = pod_level
        self.node_name = node_name

    def read_facts(self, state: QoSState, steady: SteadyFacts) -> resctrl_facts.ResctrlFacts:
        return resctrl_facts.read_facts(state, steady=steady)

    def plan(self, state: QoSState, facts: resctrl_facts.ResctrlFacts) -> FeatureResult:
        return FeatureResult(resctrl.plan(state, facts, pod_level=self.pod_level, node_name=self.node_name))


class CPUQoS(PlannedFeature[cpuqos.CPUQoSFacts]):
    """Gates GroupIdentity and CoreSched."""

    name = "cpuqos"

    def __init__(self, *, group_identity: bool = True, core_sched: bool = False, node_name: str = "",
                 batch_resource: bool = False) -> None:
        self.group_identity = group_identity
        self.core_sched = core_sched
        self.node_name = node_name
        self.batch_resource = batch_resource

    def read_facts(self, state: QoSState, steady: SteadyFacts) -> cpuqos.CPUQoSFacts:
        return cpuqos.read_facts(state, steady=steady)

    def reports(self, facts: cpuqos.CPUQoSFacts) -> tuple[Report, ...]:
        return cpuqos.capabilities(facts)

    def plan(self, state: QoSState, facts: cpuqos.CPUQoSFacts) -> FeatureResult:
        return FeatureResult(cpuqos.plan(state, facts, group_identity=self.group_identity,
                                         core_sched=self.core_sched, node_name=self.node_name,
                                         batch_resource=self.batch_resource))


class CPUSet(PlannedFeature[cpuset.CPUSetFacts]):
    """Gate CPUSetAllocator."""

    name = "cpuset"

    def __init__(self, *, disable_unset_cpu_quota: bool = False, be_cpu_manager: bool = False) -> None:
        self.disable_unset_cpu_quota = disable_unset_cpu_quota
        self.be_cpu_manager = be_cpu_manager

    def read_facts(self, state: QoSState, steady: SteadyFacts) -> cpuset.CPUSetFacts:
        return cpuset.read_facts(state, steady=steady)

    def reports(self, facts: cpuset.CPUSetFacts) -> tuple[Report, ...]:
        return cpuset.capabilities(facts)

    def plan(self, state: QoSState, facts: cpuset.CPUSetFacts) -> FeatureResult:
        return FeatureResult(cpuset.plan(state, facts, disable_unset_cpu_quota=self.disable_unset_cpu_quota,
                                         be_cpu_manager=self.be_cpu_manager))


class Blkio(PlannedFeature[blkio_facts.BlkioFacts]):
    """Gate BlkIOReconcile."""

    name = "blkio"

    def read_facts(self, state: QoSState, steady: SteadyFacts) -> blkio_facts.BlkioFacts:
        return blkio_facts.read_facts(state, steady=steady)

    def plan(self, state: QoSState, facts: blkio_facts.BlkioFacts) -> FeatureResult:
        return FeatureResult(blkio.plan(state, facts))


class BatchResource(PlannedFeature[batchresource.BatchFacts]):
    """Gate BatchResource."""

    name = "batchresource"

    def __init__(self, *, group_identity: bool = True, node_name: str = "") -> None:
        self.group_identity = group_identity
        self.node_name = node_name

    def read_facts(self, state: QoSState, steady: SteadyFacts) -> batchresource.BatchFacts:
        return batchresource.read_facts(state, steady=steady)

    def plan(self, state: QoSState, facts: batchresource.BatchFacts) -> FeatureResult:
        return FeatureResult(batchresource.plan(state, facts, group_identity=self.group_identity,
                                                node_name=self.node_name))


class MemoryQoS(PlannedFeature[memoryqos.MemoryQoSFacts]):
    """Gate CgroupReconcile (memory QoS)."""

    name = "memoryqos"

    def read_facts(self, state: QoSState, steady: SteadyFacts) -> memoryqos.MemoryQoSFacts:
        return memoryqos.read_facts(state, steady=steady)

    def reports(self, facts: memoryqos.MemoryQoSFacts) -> tuple[Report, ...]:
        return memoryqos.capabilities(facts)

    def plan(self, state: QoSState, facts: memoryqos.MemoryQoSFacts) -> FeatureResult:
        return FeatureResult(memoryqos.plan(state, facts))


class CPUBurst(PlannedFeature[cpuburst_facts.BurstFacts]):
    """Gate CPUBurst. Its token buckets are its memory between passes: read_facts turns them into plain facts, so
    the plan stays a pure function of (state, facts)."""

    name = "cpuburst"

    def __init__(self, *, node_name: str = "", collect_interval: float = 1.0,
                 reconcile_interval: float = 1.0) -> None:
        self.node_name = node_name
        self.memory = cpuburst_facts.BurstMemory(collect_interval, reconcile_interval)

    def read_facts(self, state: QoSState, steady: SteadyFacts) -> cpuburst_facts.BurstFacts:
        return cpuburst_facts.read_facts(state, steady=steady, memory=self.memory)

    def reports(self, facts: cpuburst_facts.BurstFacts) -> tuple[Report, ...]:
        return cpuburst.capabilities(facts)

    def plan(self, state: QoSState, facts: cpuburst_facts.BurstFacts) -> FeatureResult:
        return FeatureResult(cpuburst.plan(state, facts, node_name=self.node_name))


class CPUSuppress(PlannedFeature[cpusuppress.SuppressFacts]):
    """Gate BECPUSuppress; its numbers go to the exporter as the result's status."""

    name = "cpusuppress"

    def __init__(self, *, be_cpu_manager: bool = False, node_name: str = "", collect_interval: float = 1.0) -> None:
        self.be_cpu_manager = be_cpu_manager
        self.node_name = node_name
        self.collect_interval = collect_interval

    def read_facts(self, state: QoSState, steady: SteadyFacts) -> cpusuppress.SuppressFacts:
        return cpusuppress.read_facts(state, steady=steady)

    def plan(self, state: QoSState, facts: cpusuppress.SuppressFacts) -> FeatureResult:
        out = cpusuppress.plan(state, facts, be_cpu_manager=self.be_cpu_manager, node_name=self.node_name,
                               collect_interval=self.collect_interval)
        return FeatureResult(out, suppress=out.status)
