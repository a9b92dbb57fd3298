"""BatchResource: BE pods' and containers' cpu.shares, CFS quota and memory limit from their batch resources."""

# Upstream: pkg/koordlet/runtimehooks/hooks/batchresource/{batch_resource.go,rule.go} (the pod and container
# reconcilers for BE pods and the two rules), spec qos-and-runtime-hooks.md §5.4. Values: koordlet/qos/batchspec.py.
#
# - Pods: labelled `koordinator.sh/qosClass: BE` only; containers from the pod status (ids known), no sandbox
#   (upstream: "TODO set for sandbox container"). Nothing for a pod that declares no batch resource.
# - CFS quota: -1 at both levels while NodeSLO `resourceUsedThresholdWithBE` has `enable: true` and
#   `cpuSuppressPolicy: cfsQuota` (the besteffort dir's quota then limits BE, and v1 wants a parent's quota >= each
#   child's). Otherwise divided by the Node's `node.koordinator.sh/cpu-normalization-ratio` when > 1: upstream's
#   BatchResource reads that annotation whether or not gate CPUNormalization is on, and so do we (only in cluster
#   mode, where there is a Node object). A malformed ratio is an Event and no scaling (upstream keeps the last good
#   ratio; a pure planner has none).
# - cpu.idle (koordlet/qos/cpuqos.py): a pod that CPU QoS idles in this pass refuses cpu.shares writes (EINVAL), so
#   its pod-level shares are not planned (`cpuqos.idled_pods`, the same rule, so the features never disagree);
#   its containers' shares, its quota and memory limit are. When such a pod leaves idle, cpuqos restores its batch
#   shares itself (kernel reset to 1024), so this plan's write of the same value finds the file done.
# - cgroup v2: cpu.weight from the shares (kubelet's mapping), `cpu.max` as "<quota|max> 100000" (upstream's quota
#   assumes the 100 ms base period, so the period is written with it and the line reads back as written),
#   `memory.max` "max" for unlimited.
# - cgroup v1 quota order: the kernel refuses a child quota above its parent's, and a parent quota below a child's.
#   Growing works pod first, shrinking containers first; without reading the files the plan writes the pod's quota,
#   the containers', then the pod's again: when shrinking the first pod write fails (one logged EINVAL) and the second
#   succeeds in the same pass; otherwise the second is a cache hit (upstream: LeveledUpdateBatch's merge pass).

from __future__ import annotations

from dataclasses import dataclass

from apis.core.errors import HostReadError, PlanError
from apis.extension.node import ANNOTATION_CPU_NORMALIZATION_RATIO, cpu_normalization_ratio
from apis.slo.types import CPU_SUPPRESS_CFS_QUOTA, NodeSLOSpec
from koordlet.host.paths import HostPaths
from koordlet.host.resources import CFS_BASE_PERIOD_US, cpu_max, resource_path, shares_to_weight
from koordlet.qos import cpuqos
from koordlet.qos.batchspec import (
    UNLIMITED,
    BatchSpecError,
    BatchValues,
    PodBatch,
    container_values,
    is_batch_pod,
    pod_batch,
    pod_values,
)
from koordlet.qos.model import Plan, Write
from koordlet.qos.state import QoSState
from koordlet.qos.steady import SteadyFacts
from koordlet.states.model import PodMeta

_TERMINATED = ("Succeeded", "Failed")


@dataclass(frozen=True)
class BatchFacts:
    cpu_idle: bool  # CPU QoS uses cpu.idle (no group identity): pods it idles keep their pod-level shares
    ratio: float | None  # the Node's CPU normalization ratio; None: no Node, no annotation
    ratio_error: str | None = None  # the annotation is present but not a positive number


def read_facts(state: QoSState, *, steady: SteadyFacts | None = None) -> BatchFacts:
    """CPU QoS's mechanism (kept with the steady facts, shared with cpuqos) and the Node's ratio (every pass: the
    Node is not part of what keeps steady facts)."""
    try:
        cpu_idle = cpuqos.read_facts(state, steady=steady).mechanism == "cpu-idle"
    except HostReadError:
        # cpuqos cannot tell either and plans nothing; pods it idled before may still be idle, and a shares write
        # to an idle cgroup fails, while a skipped one leaves kubelet's value: assume cpu.idle.
        cpu_idle = True
    ratio, error = cpu_normalization_ratio(state.node)
    return BatchFacts(cpu_idle, ratio, error)


def cfs_quota_enabled(nodeslo: NodeSLOSpec | None) -> bool:
    """rule.go parseRuleForNodeSLO: off while BE CPU suppress is enabled with the cfsQuota policy (no NodeSLO yet:
    on)."""
    if nodeslo is None:
        return True
    threshold = nodeslo.resource_used_threshold_with_be
    return not (threshold.enable and threshold.cpu_suppress_policy == CPU_SUPPRESS_CFS_QUOTA)


def plan(state: QoSState, facts: BatchFacts, *, group_identity: bool = True, node_name: str = "") -> Plan:
    """The writes for one pass. `group_identity` is gate GroupIdentity (whether CPU QoS runs and may idle pods)."""
    out = Plan()
    if facts.ratio_error is not None:
        name = str(((state.node or {}).get("metadata") or {}).get("name") or node_name or "node")
        out.errors.append(PlanError("Node", name, f"annotations[{ANNOTATION_CPU_NORMALIZATION_RATIO}]",
                                    facts.ratio_error))
    idled = cpuqos.idled_pods(state, "cpu-idle" if facts.cpu_idle else "none", group_identity=group_identity)
    cfs = cfs_quota_enabled(state.nodeslo)
    for pod in state.pods:
        if not is_batch_pod(pod) or pod.phase in _TERMINATED:
            continue
        try:
            batch = pod_batch(pod)
        except BatchSpecError as e:
            out.errors.append(PlanError("Pod", f"{pod.namespace}/{pod.name}", e.field, e.message, uid=pod.uid))
            continue
        if batch is None:
            continue
        if batch.annotation_error is not None:
            bad = batch.annotation_error
            out.errors.append(PlanError("Pod", f"{pod.namespace}/{pod.name}", bad.field, bad.message, uid=pod.uid))
        _plan_pod(state, pod, batch, cfs, facts.ratio, pod.cgroup_dir in idled, out)
    return out


def _plan_pod(state: QoSState, pod: PodMeta, batch: PodBatch, cfs: bool, ratio: float | None, idled: bool,
              out: Plan) -> None:
    who = f"batchresource: pod {pod.namespace}/{pod.name}"
    values = pod_values(batch, cfs_quota=cfs, ratio=ratio)
    writes = cgroup_writes(state.cgroup_version, state.paths, pod.cgroup_dir, values,
                           who if cfs else f"{who} (cfsQuota suppress policy)", shares=not idled, level="pod")
    out.writes += writes
    containers = 0
    for c in pod.containers:
        spec = batch.container(c.name)
        if spec is None or c.cgroup_dir is None:
            continue
        containers += 1
        out.writes += cgroup_writes(state.cgroup_version, state.paths, c.cgroup_dir,
                                    container_values(spec, cfs_quota=cfs, ratio=ratio),
                                    f"{who} container {c.name}", level="container")
    if state.cgroup_version == 1 and values.quota != UNLIMITED and containers:
        # see the module notes: v1 quota order without reading the files
        out.writes.append(next(w for w in writes if w.resource == "cpu.cfs_quota_us"))


def cgroup_writes(version: int, paths: HostPaths, rel: str, values: BatchValues, who: str, *,
                  shares: bool = True, level: str | None = None) -> list[Write]:
    """cpu.shares (unless `shares` is False), the CFS quota and the memory limit of one cgroup dir, in the cgroup
    version's files and units; what the RunPodSandbox hook writes at the pod's dir too. `level`: upstream's
    runtime-hook reconciler level of the write (batch_resource.go registers pod and container ones), for the
    reconciler latency metric; the hook's own writes carry none."""
    out = []
    if shares:
        value = values.shares if version == 1 else shares_to_weight(values.shares)
        out.append(Write(resource_path(version, paths, "cpu.shares", rel), str(value),
                         f"{who} cpu.shares={values.shares}", resource="cpu.shares", level=level))
    quota = str(values.quota) if version == 1 else cpu_max(values.quota, CFS_BASE_PERIOD_US)
    out.append(Write(resource_path(version, paths, "cpu.cfs_quota_us", rel), quota,
                     f"{who} cfs_quota={values.quota}", resource="cpu.cfs_quota_us", level=level))
    memory = "max" if version == 2 and values.memory_limit == UNLIMITED else str(values.memory_limit)
    out.append(Write(resource_path(version, paths, "memory.limit_in_bytes", rel), memory,
                     f"{who} memory limit={values.memory_limit}", resource="memory.limit_in_bytes",
                     level=level))
    return out
