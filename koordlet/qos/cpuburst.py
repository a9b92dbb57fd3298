"""CPU burst: containers' `cpu.cfs_burst_us` from their limits, and their CFS quota scaled up while throttled."""

# Upstream: pkg/koordlet/qosmanager/plugins/cpuburst/cpu_burst.go (start, applyCPUBurst, applyCFSQuotaBurst,
# genOperationByContainer, changeOperationByNode, applyContainerCFSQuota); spec qos-and-runtime-hooks.md §2.6.
# Configuration: koordlet/qos/cpuburst_config.py; facts and the token buckets: koordlet/qos/cpuburst_facts.py.
#
# - Pods: not LSR/LSE/BE by the raw label, phase Pending or Running; containers from the status matched to the spec
#   by name. Nothing before a NodeSLO arrived (upstream: no cpuBurstStrategy, no run).
# - Static burst (policy cpuBurstOnly or auto; 0 under any other): limit × cpuBurstPercent / 100 × 100 ms, the pod
#   gets the sum. [quirk] The kernel refuses a burst above the group's quota (EINVAL, mainline >= 5.14: checked on
#   this machine's 6.18), so upstream's value for any cpuBurstPercent > 100 (the default is 1000) is never written
#   there and the container gets no burst at all; we write the largest value the kernel takes, the container's base
#   quota (a scaled quota is never below it). Skipped where the kernel has no cfs_burst_us (logged once).
# - CFS quota burst (policy cfsQuotaBurstOnly or auto; under any other the quota is reset to the base): a container
#   with a limit and a running state scales its current quota ×1.2 when throttled, ×0.8 when its token bucket is
#   empty, within [base, base × cfsQuotaBurstPercent / 100]; the node's share-pool state turns a scale-up into a
#   remain (cooling, unknown) and a scale-up or remain into a scale-down (overload). The pod's quota, when limited,
#   moves by the same deltas, raised before its containers grow and lowered after they shrink (v1 wants a parent's
#   quota >= each child's). [quirk] upstream writes the pod once per changed container; we write it once before the
#   growing containers and once after the shrinking ones, with the same final value.
# - cgroup v2: cpu.max is rewritten as "<quota> <period>" with the period read from it; cpu.max.burst for the burst.

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from apis.slo.types import CPUBurstConfig
from koordlet.host.resources import CFS_BASE_PERIOD_US, cpu_max
from koordlet.qos.cpuburst_config import (
    base_quota,
    burstable,
    ceiling_quota,
    container_specs,
    pod_config,
    static_burst_us,
)
from koordlet.qos.cpuburst_facts import BurstFacts, ContainerFacts, NodeState
from koordlet.qos.model import Capability, Plan, Report, Write
from koordlet.qos.state import QoSState
from koordlet.states.model import ContainerMeta, PodMeta

CAP_CPU_BURST = "cpu-burst"
SCALE_UP, SCALE_DOWN = 1.2, 0.8  # cfsIncreaseStep, cfsDecreaseStep

Operation = Literal["up", "down", "remain", "reset"]
Note = tuple[str, tuple[str, ...], float]  # Write.note: the container's scaled value for koordlet/qos/metrics.py


def capabilities(facts: BurstFacts) -> tuple[Report, ...]:
    """`koordlet_agent_kernel_capability{capability="cpu-burst"}`; a kernel without cfs_burst_us is logged once."""
    return (Capability(CAP_CPU_BURST, facts.burst_file,
                       "no cpu.cfs_burst_us (v2 cpu.max.burst) at the kubepods root (kernel < 5.14): static CPU burst "
                       "is not written; the cfs-quota burst still works"),)


def operation(cfg: CPUBurstConfig, facts: ContainerFacts) -> Operation:
    """genOperationByContainer."""
    if not cfg.cfs_quota_burst:
        return "reset"
    if not facts.allowed:
        return "down"
    if facts.throttled is None:
        return "remain"  # no throttling sample: skip this round
    return "up" if facts.throttled > 0 else "remain"


def by_node(node: NodeState, op: Operation) -> Operation:
    """changeOperationByNode."""
    if node == "overload" and op in ("up", "remain"):
        return "down"
    if node in ("cooling", "unknown") and op == "up":
        return "remain"
    return op


def target_quota(current: int, base: int, ceiling: int, op: Operation) -> int:
    """The quota after one step, kept within [base, ceiling]."""
    if op == "up":
        target = int(float(current) * SCALE_UP)
    elif op == "down":
        target = int(float(current) * SCALE_DOWN)
    elif op == "reset":
        target = base
    else:
        target = current
    return max(base, min(target, ceiling))


def plan(state: QoSState, facts: BurstFacts, *, node_name: str = "") -> Plan:
    """The writes for one pass (every eligible pod: static burst, then the quota steps)."""
    out = Plan()
    if not state.nodeslo_present:
        return out
    node = state.nodeslo.cpu_burst_strategy
    for pod in state.pods:
        if not burstable(pod):
            continue
        cfg, error = pod_config(pod, node.config)
        if error is not None:
            out.errors.append(error)
        specs = container_specs(pod)
        if facts.burst_file:
            _plan_static(state, pod, specs, cfg, out)
        _plan_quota(state, pod, specs, cfg, facts, out)
    return out


def _plan_static(state: QoSState, pod: PodMeta, specs: Mapping[str, Mapping[str, object]], cfg: CPUBurstConfig,
                 out: Plan) -> None:
    """applyCPUBurst: each container with an id, then the pod with the sum."""
    who = f"cpuburst: pod {pod.namespace}/{pod.name}"
    total = 0
    for c in pod.containers:
        spec = specs.get(c.name)
        if spec is None or c.cgroup_dir is None:
            continue
        value = static_burst_us(spec, cfg)
        cap = base_quota(spec)
        if cap > 0:
            value = min(value, cap)  # the kernel's bound, see the module notes
        total += value
        out.writes.append(_burst(state, c.cgroup_dir, value, f"{who} container {c.name}",
                                 ("cfs_burst_us", _labels(pod, c), float(value))))
    out.writes.append(_burst(state, pod.cgroup_dir, total, who))


def _plan_quota(state: QoSState, pod: PodMeta, specs: Mapping[str, Mapping[str, object]], cfg: CPUBurstConfig,
                facts: BurstFacts, out: Plan) -> None:
    """applyCFSQuotaBurst and applyContainerCFSQuota for one pod."""
    pod_now = facts.pods.get(pod.cgroup_dir)
    if pod_now is None:
        return  # upstream: the pod's quota cannot be read, so none of its containers is changed
    who = f"cpuburst: pod {pod.namespace}/{pod.name}"
    grow: list[Write] = []
    shrink: list[Write] = []
    up = down = 0
    for c in pod.containers:
        spec = specs.get(c.name)
        now = facts.containers.get(c.cgroup_dir) if c.cgroup_dir is not None else None
        if spec is None or now is None or c.cgroup_dir is None:
            continue
        base = base_quota(spec)
        op = by_node(facts.node_state, operation(cfg, now))
        target = target_quota(now.quota, base, ceiling_quota(base, cfg), op)
        if target == now.quota:
            continue
        write = _quota(state, c.cgroup_dir, target, now.period,
                       f"{who} container {c.name} {op}: cfs_quota {now.quota} -> {target}",
                       ("cfs_quota_us", _labels(pod, c), float(target)))
        if target > now.quota:
            grow.append(write)
            up += target - now.quota
        else:
            shrink.append(write)
            down += target - now.quota
    pod_quota, pod_period = pod_now
    limited = pod_quota > 0  # an unlimited pod quota stays unlimited
    if limited and up:
        out.writes.append(_quota(state, pod.cgroup_dir, pod_quota + up, pod_period,
                                 f"{who} cfs_quota {pod_quota} -> {pod_quota + up} (containers grow)"))
    out.writes.extend(grow)
    out.writes.extend(shrink)
    if limited and down:
        out.writes.append(_quota(state, pod.cgroup_dir, pod_quota + up + down, pod_period,
                                 f"{who} cfs_quota -> {pod_quota + up + down} (containers shrink)"))


def _labels(pod: PodMeta, c: ContainerMeta) -> tuple[str, str, str, str]:
    """The scaled-value gauges' labels after `node` (upstream cpu_burst.go RecordContainerScaledCFS*)."""
    return pod.namespace, pod.name, c.container_id, c.name


def _burst(state: QoSState, rel: str, value: int, who: str, note: Note | None = None) -> Write:
    return Write(state.cgroup_file("cpu.cfs_burst_us", rel), str(value), f"{who} cfs_burst_us={value}",
                 resource="cpu.cfs_burst_us", note=note)


def _quota(state: QoSState, rel: str, quota: int, period: int | None, reason: str, note: Note | None = None) -> Write:
    value = str(quota) if state.cgroup_version == 1 else cpu_max(quota, period or CFS_BASE_PERIOD_US)
    return Write(state.cgroup_file("cpu.cfs_quota_us", rel), value, reason, resource="cpu.cfs_quota_us", note=note)
