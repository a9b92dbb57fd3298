"""CPUSetAllocator: each container's (and sandbox's) `cpuset.cpus` from the scheduler's allocation and the pools.

Upstream: pkg/koordlet/runtimehooks/hooks/cpuset/{cpuset.go,rule.go} (spec qos-and-runtime-hooks.md §5.4), the
reconcilers it registers (container and sandbox cpuset for every pod, container/sandbox/pod `cfs_quota_us=-1` for
LSE/LSR pods — a pod of no QoS label with a resource-status cpuset counts as LSR), pkg/util/pod.go
GetPodSandboxContainerID (the sandbox is the one pod cgroup subdir that is no known container's).

The rule, in order (`container_cpuset`):
1. the pod's resource-status `cpuset` (LSE/LSR pods the scheduler bound);
2. a NUMA allocation (a NUMA node with cpu or batch-cpu): the share pools of those nodes (BE pods: the BE pools,
   only with gate BECPUManager; without it a BE pod falls through);
3. a SYSTEM pod: the node's system-QoS cpuset, when one is set;
4. an LS pod: all LS share pools;
5. a pod whose cgroup parent says besteffort: "" (see below);
6. kubelet `static` policy: nothing (kubelet owns those pods' cpusets);
7. otherwise all LS share pools.

**The besteffort "" rule.** Upstream answers "" so that kubelet's static policy does not pin BE containers, and
then never writes it: the reconciler skips an empty cpuset, and an empty `cpus` in an NRI adjustment or CRI
response means "not set". We do the same — "" is never written, on either hierarchy: on cgroup v1 an empty
`cpuset.cpus` would leave the container's tasks nowhere to run (the kernel refuses it with ENOSPC while tasks are
attached, and a container created with it cannot start), and on v2 the BE cpusets are BE suppress's to set (the
besteffort dir's cpuset, `cpuset` policy). A BE container keeps the cpuset it inherited.

Values are written in the canonical list form (`0-3,8`), which is what the kernel reads back, so a second pass
writes nothing. On cgroup v2 the unset quota is `max 100000` (kubelet's CFS period).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from apis.core.errors import InvalidInput, KoordletError, PlanError
from apis.extension.node import ANNOTATION_NODE_RESERVATION, ANNOTATION_SYSTEM_QOS_RESOURCE
from apis.extension.pod import pod_resource_status
from apis.extension.qos import QOS_BE, QOS_LS, QOS_LSE, QOS_LSR, QOS_NONE, QOS_SYSTEM, koord_qos_class
from apis.extension.resource_status import (
    ANNOTATION_RESOURCE_STATUS,
    CPUSetError,
    ResourceStatus,
    format_cpuset,
    parse_cpuset,
)
from koordlet.host.driver import K8sQoS
from koordlet.host.resources import CFS_BASE_PERIOD_US, cpu_max
from koordlet.qos.model import Capability, Plan, Report, Write
from koordlet.qos.state import QoSState
from koordlet.qos.steady import SteadyFacts
from koordlet.states.cpupools import CPUTopology, SharePool
from koordlet.states.kubeletcpu import cpu_manager, read_cpu_manager_state, read_kubelet_config_file
from koordlet.states.model import PodMeta
from koordlet.states.nodecpu import NodeCPUFacts, node_cpu_facts

GATE = "CPUSetAllocator"
GATE_BE_CPU_MANAGER = "BECPUManager"
FIELD_STATUS = f"annotations[{ANNOTATION_RESOURCE_STATUS}]"


@dataclass(frozen=True)
class CPUSetRule:
    """cpusetRule: what the NRT says (share pools, BE pools, kubelet policy, system-QoS cpuset)."""

    share_pools: tuple[SharePool, ...] = ()
    be_share_pools: tuple[SharePool, ...] = ()
    kubelet_static: bool = False
    system_qos_cpuset: str = ""

    @classmethod
    def from_facts(cls, facts: NodeCPUFacts) -> CPUSetRule:
        return cls(facts.share_pools, facts.be_share_pools, facts.kubelet.static, facts.system_qos_cpuset)


def container_cpuset(rule: CPUSetRule | None, status: ResourceStatus, koord_qos: str, cgroup_parent: str, *,
                     be_cpu_manager: bool = False) -> str | None:
    """The cpuset a container of this pod gets (None: leave it alone; "" see the module doc), by upstream's rule
    order. `koord_qos` is the raw `koordinator.sh/qosClass` label (QOS_NONE without one); `cgroup_parent` the
    pod's cgroup dir (its name tells the kube QoS)."""
    if status.cpuset:
        return status.cpuset
    if rule is None:
        return None
    if status.numa_aware():
        if koord_qos == QOS_BE and be_cpu_manager:
            return _by_nodes(rule.be_share_pools, status)
        if koord_qos != QOS_BE:
            return _by_nodes(rule.share_pools, status)
    if koord_qos == QOS_SYSTEM and rule.system_qos_cpuset:
        return rule.system_qos_cpuset
    if koord_qos == QOS_LS:
        return _all(rule.share_pools)
    if "besteffort" in cgroup_parent:
        return ""
    if rule.kubelet_static:
        return None
    return _all(rule.share_pools)


def _by_nodes(pools: Sequence[SharePool], status: ResourceStatus) -> str:
    return ",".join(p.cpuset for n in status.numa_node_resources for p in pools if p.node == n.node)


def _all(pools: Sequence[SharePool]) -> str:
    return ",".join(p.cpuset for p in pools)


def canonical(value: str) -> str:
    """The list as the kernel prints it; CPUSetError when it is not a CPU list. Joined pools may hold empty parts
    (a pool left without CPUs), which upstream's parser would refuse: they are dropped here."""
    return format_cpuset(parse_cpuset(",".join(p for p in value.split(",") if p.strip())))


def unset_quota(status: ResourceStatus) -> bool:
    """IsPodCfsQuotaNeedUnset: the pod has a resource-status cpuset."""
    return bool(status.cpuset)


# ---- facts ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CPUSetFacts:
    rule: CPUSetRule
    sandboxes: Mapping[str, str] = field(default_factory=dict)  # pod UID -> its sandbox container's cgroup dir
    errors: tuple[PlanError, ...] = ()
    controller: bool = True  # the cpuset controller holds the kubepods tree (else only the quota part is planned)


CAPABILITY = "cpuset-allocator"


def capabilities(facts: CPUSetFacts) -> tuple[Report, ...]:
    """No cpuset controller at the kubepods root: said once (log, koordlet_agent_kernel_capability), and no
    cpuset writes planned, rather than writes to dirs that are not there every pass."""
    # kubelet always makes one: only a node without kubelet (standalone) lacks it
    return (Capability(CAPABILITY, facts.controller,
                       "no cpuset.cpus at the kubepods root: CPUSetAllocator writes no cpusets (CFS quota only)",
                       fallback=True),)


def read_facts(state: QoSState, *, steady: SteadyFacts | None = None) -> CPUSetFacts:
    """The CPU topology, kubelet's config file and checkpoint, and the pods' sandbox dirs are read when the pods
    change (or the steady window elapses); the rule is recomputed only when they, the Node's reservation/system-QoS
    annotations or kubelet's /configz change."""
    st = steady or SteadyFacts(0.0, lambda: 0.0)
    annotations = _node_annotations(state.node)
    key = (annotations.get(ANNOTATION_NODE_RESERVATION), annotations.get(ANNOTATION_SYSTEM_QOS_RESOURCE),
           repr(sorted((state.kubelet_config or {}).items())))
    facts = st.get(f"cpuset/{key!r}", lambda: _read(state, st, annotations))
    controller = st.get("cpuset/controller", lambda: _has_controller(state))
    return facts if controller else replace(facts, controller=False)


def _has_controller(state: QoSState) -> bool:
    try:
        return os.path.exists(state.cgroup_file("cpuset.cpus", state.qos_dir(K8sQoS.GUARANTEED)))
    except KoordletError:
        return False


def _read(state: QoSState, steady: SteadyFacts, annotations: Mapping[str, object]) -> CPUSetFacts:
    errors: list[PlanError] = []
    topo = steady.get("cpuset/topology", lambda: CPUTopology.read(state.paths))
    config = state.kubelet_config
    try:
        if config is None:
            config = steady.get("cpuset/kubelet-config", lambda: read_kubelet_config_file(state.paths))
        kubelet = cpu_manager(config, topo)
    except InvalidInput as e:
        errors.append(PlanError("Node", _node_name(state.node), "kubelet CPU manager", str(e), "InvalidKubeletConfig"))
        return CPUSetFacts(CPUSetRule(), {}, tuple(errors))
    entries = None
    if kubelet.static:
        try:
            entries = steady.get("cpuset/cpu-manager-state", lambda: read_cpu_manager_state(state.paths))
        except InvalidInput as e:  # as the NRT: kubelet's pods unknown, the rest of the rule stands
            errors.append(PlanError("Node", _node_name(state.node), "cpu_manager_state", str(e),
                                    "InvalidKubeletConfig"))
    facts = node_cpu_facts(topo, state.pods, annotations, kubelet, entries, _node_name(state.node))
    sandboxes = steady.get("cpuset/sandboxes", lambda: _sandboxes(state))
    node_errors = tuple(e for e in facts.errors if e.kind != "Pod")  # a pod's own bad annotation: plan reports it
    return CPUSetFacts(CPUSetRule.from_facts(facts), sandboxes, (*errors, *node_errors))


def _sandboxes(state: QoSState) -> dict[str, str]:
    """Per pod, the one subdir of its cpuset cgroup that belongs to no known container (GetPodSandboxContainerID:
    none or several candidates, e.g. while a container is starting, and the pod's sandbox is left alone)."""
    out: dict[str, str] = {}
    for pod in state.pods:
        known = {c.cgroup_dir.rsplit("/", 1)[-1] for c in pod.containers if c.cgroup_dir}
        if not pod.containers or not pod.cgroup_dir:
            continue
        base = os.path.dirname(state.cgroup_file("cpuset.cpus", pod.cgroup_dir))
        try:
            with os.scandir(base) as it:
                names = [e.name for e in it if e.is_dir(follow_symlinks=False)]
        except OSError:
            continue
        # [quirk] upstream also drops every `crio-*.scope` dir, which is CRI-O's sandbox itself under systemd;
        # only CRI-O's per-container conmon scopes are no sandbox, so only those are dropped here
        candidates = [n for n in names if n not in known and not n.startswith("crio-conmon-")]
        if len(candidates) == 1:
            out[pod.uid] = f"{pod.cgroup_dir}/{candidates[0]}"
    return out


def _node_annotations(node: Mapping[str, object] | None) -> Mapping[str, object]:
    meta = (node or {}).get("metadata") or {}
    value = meta.get("annotations") if isinstance(meta, dict) else None
    return value if isinstance(value, dict) else {}


def _node_name(node: Mapping[str, object] | None) -> str:
    meta = (node or {}).get("metadata") or {}
    return str(meta.get("name") or "") if isinstance(meta, dict) else ""


# ---- plan -------------------------------------------------------------------------------------------------------


def plan(state: QoSState, facts: CPUSetFacts, *, disable_unset_cpu_quota: bool = False,
         be_cpu_manager: bool = False) -> Plan:
    out = Plan(errors=list(facts.errors))
    for pod in state.pods:
        try:
            _plan_pod(state, facts, pod, out, disable_unset_cpu_quota, be_cpu_manager)
        except InvalidInput as e:
            out.errors.append(PlanError("Pod", f"{pod.namespace}/{pod.name}", FIELD_STATUS, str(e),
                                        "InvalidAnnotation", uid=pod.uid))
    return out


def _plan_pod(state: QoSState, facts: CPUSetFacts, pod: PodMeta, out: Plan, disable_unset_cpu_quota: bool,
              be_cpu_manager: bool) -> None:
    status = pod_resource_status(pod)
    running = [c.cgroup_dir for c in pod.containers if c.running and c.cgroup_dir]
    sandbox = facts.sandboxes.get(pod.uid)
    # (dir, upstream's reconciler level: cpuset.go registers container and sandbox cpuset, pod/sandbox/container quota)
    dirs = [*((d, "container") for d in running), *([(sandbox, "sandbox")] if sandbox else [])]
    if not dirs:
        return
    qos = koord_qos_class(pod.raw)  # the raw label: PodMeta.koord_qos falls back to the kube QoS
    value = container_cpuset(facts.rule, status, qos, pod.cgroup_dir, be_cpu_manager=be_cpu_manager)
    if value and facts.controller:
        try:
            cpus = canonical(value)
        except CPUSetError as e:
            raise InvalidInput(f"cpuset {value!r}: {e}") from None
        if cpus:
            reason = f"CPUSetAllocator: pod {pod.namespace}/{pod.name} cpuset {cpus}"
            out.writes += [Write(state.cgroup_file("cpuset.cpus", d), cpus, reason, resource="cpuset.cpus",
                                 level=level) for d, level in dirs]
    cpuset_pod = qos in (QOS_LSE, QOS_LSR) or (qos == QOS_NONE and bool(status.cpuset))
    if disable_unset_cpu_quota or not cpuset_pod or not unset_quota(status):
        return
    quota = "-1" if state.cgroup_version == 1 else cpu_max(-1, CFS_BASE_PERIOD_US)
    reason = f"CPUSetAllocator: pod {pod.namespace}/{pod.name} has a cpuset, no CFS quota"
    for d, level in ((pod.cgroup_dir, "pod"), *dirs):
        out.writes.append(Write(state.cgroup_file("cpu.cfs_quota_us", d), quota, reason,
                                resource="cpu.cfs_quota_us", level=level))

