"""One reconcile pass: snapshot the node, read each enabled feature's host facts, plan, report bad input, apply.

Features follow upstream's gates: `RdtResctrl` (class-level resctrl, on by default), `Resctrl` (pod-level resctrl
groups from the annotation, off), `GroupIdentity` (CPU QoS, on; includes the coreSched policy's cpu.idle when
NodeSLO selects it and gate `CoreSched` is on), `CPUSetAllocator` (cpusets from the scheduler's allocation and the
share pools, on), `BlkIOReconcile` (off), `BatchResource` (BE pods' limits from batch resources, on), `CPUBurst`
(cfs burst and the cfs-quota burst, on), `BECPUSuppress` (BE CPU suppress, on; acts when NodeSLO
`resourceUsedThresholdWithBE.enable`), `CgroupReconcile` (memory QoS from NodeSLO `memoryQOS`, off). A dry run also
shows what `BEMemoryEvict` / `BECPUEvict` would evict now (koordlet/qos/evictstrategy.py; the daemon runs them in
loops of their own).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from apis.core.objects import JSON
from koordlet.config import Config
from koordlet.events import EventRecorder
from koordlet.health import Health
from koordlet.qos.cpusuppress import SuppressStatus
from koordlet.qos.evictstrategy import EvictStrategy
from koordlet.qos.executor import Executor, Result
from koordlet.qos.feature import FeatureResult, QoSFeature, record
from koordlet.qos.features import BatchResource, Blkio, CPUBurst, CPUQoS, CPUSet, CPUSuppress, MemoryQoS, Resctrl
from koordlet.qos.metrics import QoSMetrics
from koordlet.qos.model import Plan
from koordlet.qos.state import CGROUP_FILES, QoSState
from koordlet.qos.steady import SteadyFacts

log = logging.getLogger(__name__)


def enabled_features(config: Config) -> list[QoSFeature]:
    """The features the gates enable, in the order a pass plans and applies them."""
    out: list[QoSFeature] = []
    if config.gate("RdtResctrl") or config.gate("Resctrl"):
        out.append(Resctrl(pod_level=config.gate("Resctrl"), node_name=config.node_name))
    if config.gate("GroupIdentity") or config.gate("CoreSched"):
        out.append(CPUQoS(group_identity=config.gate("GroupIdentity"), core_sched=config.gate("CoreSched"),
                          node_name=config.node_name, batch_resource=config.gate("BatchResource")))
    if config.gate("CPUSetAllocator"):
        out.append(CPUSet(disable_unset_cpu_quota=config.disable_unset_cpu_quota,
                          be_cpu_manager=config.gate("BECPUManager")))
    if config.gate("BlkIOReconcile"):
        out.append(Blkio())
    if config.gate("BatchResource"):  # after cpuqos: the same pass's cpu.idle decisions (koordlet/qos/batchresource.py)
        out.append(BatchResource(group_identity=config.gate("GroupIdentity"), node_name=config.node_name))
    if config.gate("CgroupReconcile"):  # memory QoS (koordlet/qos/memoryqos.py)
        out.append(MemoryQoS())
    if config.gate("CPUBurst"):
        out.append(CPUBurst(node_name=config.node_name, collect_interval=config.collect_res_used_interval,
                            reconcile_interval=config.reconcile_interval_seconds))
    # after BatchResource: on cgroup v1 a parent's quota must be at least each child's, and BatchResource is what
    # sets the BE pods' quotas to -1 under the cfsQuota policy before the besteffort dir's is lowered
    if config.gate("BECPUSuppress"):
        out.append(CPUSuppress(be_cpu_manager=config.gate("BECPUManager"), node_name=config.node_name,
                               collect_interval=config.collect_res_used_interval))
    return out


class QoSManager:
    def __init__(self, features: Sequence[QoSFeature], executor: Executor, events: EventRecorder, health: Health,
                 metrics: QoSMetrics | None = None, *, evictions: list[EvictStrategy] | None = None) -> None:
        self.features = list(features)
        self.evictions = evictions or []  # shown by a dry run only: the daemon runs them in their own loops
        self.metrics = metrics  # the executor's observer, pruned here when the pods change
        self.executor = executor
        self.events = events
        self.health = health
        # facts that change only with pods, NodeSLO or the kernel: re-read on a change or after the executor's window
        self.steady = SteadyFacts(executor.force_seconds, executor.clock)
        self._last: dict[str, tuple[int, object, FeatureResult]] = {}  # feature -> (steady inputs, facts, result)
        self._retained = -1  # the steady generation the metrics were last pruned at
        # BE CPU suppress's numbers, every pass's last value (koordlet_be_suppress_*): replaced, never changed in
        # place, by the pass that has new ones; the exporter reads it from its own thread
        self.suppress = SuppressStatus()

    def plan(self, state: QoSState) -> Plan:
        """Every enabled feature's plan; a feature whose facts or planning fail is skipped (logged once).

        Planners are pure functions of (state, facts), so while the pods and NodeSLO are the last pass's a feature
        whose freshly read facts equal the last pass's gets the last plan again: also when the window had the kept
        facts read again (they are compared, not trusted); the executor still reads every file once a window."""
        total = Plan(errors=list(state.input_errors))
        if not self.steady.begin(state):  # pods, NodeSLO or the window changed: gone pods' paths may go
            CGROUP_FILES.rotate()
        for f in self.features:
            try:
                prepared = f.prepare(state, self.steady)
                record(self.health, prepared.reports)  # which kernel mechanism the feature uses
                last = self._last.get(f.name)
                if last is not None and last[0] == self.steady.inputs and last[1] == prepared.facts:
                    result = last[2]
                else:
                    result = prepared.plan()
                    self._last[f.name] = (self.steady.inputs, prepared.facts, result)
                total.extend(result.plan)
                if result.suppress is not None:
                    self.suppress = self.suppress.then(result.suppress)
                self.health.recovered("qos", "feature-failed", f.name)
            except Exception as e:  # one feature's bug must not stop the others
                self.health.skip("qos", "feature-failed", f.name, f"{type(e).__name__}: {e}")
        if self.executor.dry_run:
            for strategy in self.evictions:  # what a round would evict now, cool-down aside
                try:
                    planned = strategy.plan(state, ignore_cool_down=True)
                except Exception as e:
                    self.health.skip("qos", "feature-failed", strategy.name, f"{type(e).__name__}: {e}")
                    continue
                if planned is not None:
                    total.evictions.extend(planned.evictions)
        return total

    def reconcile(self, state: QoSState, report: Callable[[Plan], None] | None = None) -> list[Result]:
        plan = self.plan(state)
        mounts = self.executor.mounts
        results = self.executor.apply(plan)
        if self.executor.mounts != mounts:
            # A filesystem this pass mounted (resctrl) shows what the planners need (masks, CLOSIDs) only now: plan
            # again at once, so one pass configures the groups fully. (A dry run cannot mount: it shows the mount.)
            self.steady.drop()
            again = self.plan(state)
            results += self.executor.apply(again)
            plan = Plan(plan.writes + again.writes, again.errors, again.evictions)
        if self._retained != self.steady.generation:  # what is kept per pod follows the pods
            self._retained = self.steady.generation
            self.executor.retain(plan)
            if self.metrics is not None:
                self.metrics.retain(state.pods)
        for err in plan.errors:
            self.events.report(err)
        if report is not None:
            report(plan)
        return results


def plan_json(results: list[Result], plan: Plan, executor: Executor) -> JSON:
    """`koordlet plan -o json`: the writes one pass would make (dry-run results 'planned'), the pods the eviction
    strategies would evict now, and the errors."""
    return {
        "writes": [{"path": executor.paths.host_relative(r.write.path), "value": r.write.value,
                    "reason": r.write.reason, **({"op": r.write.op} if r.write.op != "write" else {})}
                   for r in results if r.result == "planned"],
        "evictions": [e.as_json() for e in plan.evictions],
        "errors": [e.as_json() for e in plan.errors]
                  + [{"object": r.write.path, "field": r.write.reason, "message": r.detail, "reason": r.result}
                     for r in results if r.result in ("invalid", "error")],
    }
