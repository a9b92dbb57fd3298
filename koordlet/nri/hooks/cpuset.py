"""Runtime hook `CPUSetAllocator` (gate CPUSetAllocator, on): a container's cpuset at creation, its pod's quota.

Upstream: pkg/koordlet/runtimehooks/hooks/cpuset/cpuset.go (SetContainerCPUSetAndUnsetCFS at PreCreateContainer
and PreUpdateContainerResources, UnsetPodCPUQuota at PreRunPodSandbox), protocol/container_context.go NriDone (the
cpuset and quota go into the adjustment and the update). The rule is koordlet.qos.cpuset's `container_cpuset`, over
the share pools the NodeResourceTopology loop last computed (NodeFacts.cpuset_rule), so the hook and the
reconciler agree. A pod with a resource-status cpuset gets it even before the rule is known; otherwise, with no
rule yet, nothing is set and the reconciler catches up. "" (besteffort) is not sent: NRI reads an empty `cpus` as
unset, as upstream's own empty value does. Fails open: a malformed annotation adds nothing and is reported.
"""

from __future__ import annotations

from apis.core.errors import InvalidInput
from apis.extension.pod import pod_resource_status
from apis.extension.qos import koord_qos_class_of_labels
from apis.extension.resource_status import ANNOTATION_RESOURCE_STATUS, CPUSetError, ResourceStatus
from koordlet.host.resources import CFS_BASE_PERIOD_US, cpu_max, resource_path
from koordlet.nri.hooks.context import HookCall, HookInputError, annotation_field
from koordlet.nri.hooks.groupidentity import pod_cgroup_dir
from koordlet.nri.hooks.model import Adjustment, HookResult
from koordlet.qos.cpuset import GATE_BE_CPU_MANAGER, canonical, container_cpuset
from koordlet.qos.model import Plan, Write

HOOK_NAME = "CPUSetAllocator"
GATE = "CPUSetAllocator"
QUOTA_UNLIMITED = -1


def _status(call: HookCall) -> ResourceStatus:
    try:
        return pod_resource_status(call.pod)
    except InvalidInput as e:
        raise HookInputError(annotation_field(ANNOTATION_RESOURCE_STATUS), str(e)) from None


def set_container(call: HookCall) -> HookResult:
    """CreateContainer / UpdateContainer: `linux.resources.cpu.cpus`, and quota -1 for a pod with a cpuset."""
    status = _status(call)
    pod = call.pod
    qos = koord_qos_class_of_labels(pod.labels)
    value = container_cpuset(call.facts.cpuset_rule, status, qos, pod.cgroup_parent,
                             be_cpu_manager=call.options.gate(GATE_BE_CPU_MANAGER))
    adj = Adjustment()
    if value:
        try:
            adj.cpuset_cpus = canonical(value) or None
        except CPUSetError as e:
            raise HookInputError(annotation_field(ANNOTATION_RESOURCE_STATUS, "cpuset"), str(e)) from None
    if status.cpuset and not call.options.disable_unset_cpu_quota:
        adj.cpu_quota = QUOTA_UNLIMITED
    return HookResult(adjustment=adj)


def unset_pod_quota(call: HookCall) -> HookResult:
    """RunPodSandbox: the pod cgroup's CFS quota -1 when the pod has a cpuset (issue koordinator#489)."""
    if call.options.disable_unset_cpu_quota or not _status(call).cpuset:
        return HookResult()
    rel = pod_cgroup_dir(call.pod.cgroup_parent)
    facts = call.facts
    value = str(QUOTA_UNLIMITED) if facts.cgroup_version == 1 else cpu_max(QUOTA_UNLIMITED, CFS_BASE_PERIOD_US)
    path = resource_path(facts.cgroup_version, facts.paths, "cpu.cfs_quota_us", rel)
    write = Write(path, value, f"runtime hook {HOOK_NAME}: pod {call.pod.key} has a cpuset, no CFS quota",
                  resource="cpu.cfs_quota_us")
    return HookResult(plan=Plan(writes=[write]))
