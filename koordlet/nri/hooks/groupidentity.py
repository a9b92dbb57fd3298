"""Runtime hook `GroupIdentity` at RunPodSandbox (feature gate GroupIdentity, on by default): the pod's bvt.

Upstream: pkg/koordlet/runtimehooks/hooks/groupidentity/{interceptor.go,rule.go,bvt.go},
pkg/koordlet/util/cgroup_parent_utils.go (spec §2.2-2.4). The rule and the pod value are koordlet.qos.cpuqos's
(`bvt_rule`, `pod_value`), so the hook and the reconciler agree: by the `koordinator.sh/qosClass` label, else by the
kube QoS the cgroup parent names (`besteffort`, `burstable`, else Guaranteed); for LS pods the
`koordinator.sh/cpuQOS` annotation may override. The result is one `cpu.bvt_warp_ns` write at the pod's cgroup dir,
as a Plan for the executor. Nothing is written when the kernel has no group identity, before a NodeSLO arrived, or
when the rule is off and the sysctl is off too (a disabled rule with the sysctl on writes the 0s that reset).

**[quirk] (spec §6.1) the systemd cgroup parent.** NRI's `linux.cgroup_parent` is, with the systemd driver, a slice
name such as `kubepods-burstable-pod<uid_>.slice`; upstream writes under it as if it were a path, which misses the
pod's directory, and waits for the reconciler to repair it. Here a bare slice name is expanded as systemd nests
slices (each `-` a level: `kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice`), so the
write lands in the pod's cgroup at once. A parent with a `/` (cgroupfs, or a full systemd path) is used as given.
"""

from __future__ import annotations

import re

from koordlet.host.driver import K8sQoS
from koordlet.host.resources import resource_path
from koordlet.nri.hooks.context import HookCall, HookInputError
from koordlet.nri.hooks.model import HookResult
from koordlet.qos.cpuqos import AnnotationError, pod_value
from koordlet.qos.model import Plan, Write

HOOK_NAME = "GroupIdentity"
GATE = "GroupIdentity"
RESOURCE = "cpu.bvt_warp_ns"
FIELD_CGROUP_PARENT = "linux.cgroup_parent"
_COMPONENT = re.compile(r"[A-Za-z0-9_.:@-]+")
_SLICE_SUFFIX = ".slice"


def pod_cgroup_dir(cgroup_parent: str) -> str:
    """The pod's cgroup dir relative to a hierarchy root, from NRI's cgroup parent; HookInputError for an empty
    parent or one that is not a plain path below the root."""
    raw = cgroup_parent.strip()
    if not raw:
        raise HookInputError(FIELD_CGROUP_PARENT, "empty: the runtime did not say where the pod's cgroup is")
    if "/" not in raw and raw.endswith(_SLICE_SUFFIX):
        stem = raw[: -len(_SLICE_SUFFIX)]
        parts = stem.split("-")
        if stem == "" or "" in parts:
            raise HookInputError(FIELD_CGROUP_PARENT, f"{raw!r} is not a systemd slice name")
        rel = "/".join("-".join(parts[: i + 1]) + _SLICE_SUFFIX for i in range(len(parts)))
    else:
        rel = raw.strip("/")
    components = rel.split("/")
    if not rel or any(c in ("", ".", "..") or not _COMPONENT.fullmatch(c) for c in components):
        raise HookInputError(FIELD_CGROUP_PARENT, f"{raw!r} is not a cgroup path below the hierarchy root")
    return rel


def kube_qos_by_cgroup_parent(cgroup_dir: str) -> K8sQoS:
    """GetKubeQoSByCgroupParent: the name says besteffort or burstable, else Guaranteed."""
    if "besteffort" in cgroup_dir:
        return K8sQoS.BESTEFFORT
    if "burstable" in cgroup_dir:
        return K8sQoS.BURSTABLE
    return K8sQoS.GUARANTEED


def set_pod_bvt(call: HookCall) -> HookResult:
    facts = call.facts
    rule = facts.bvt_rule
    if not facts.group_identity.supported or rule is None:
        return HookResult()
    if not rule.enable and not facts.group_identity.sysctl_enabled:
        return HookResult()  # interceptor.go prepare: rule and sysctl both off
    pod = call.pod
    rel = pod_cgroup_dir(pod.cgroup_parent)
    try:
        value = pod_value(rule, pod, kube_qos_by_cgroup_parent(rel))
    except AnnotationError as e:
        raise HookInputError(e.error.field, e.error.message) from None
    path = resource_path(facts.cgroup_version, facts.paths, RESOURCE, rel)
    write = Write(path, str(value), f"runtime hook {HOOK_NAME}: pod {pod.key} bvt={value}", resource=RESOURCE)
    return HookResult(plan=Plan(writes=[write]))
