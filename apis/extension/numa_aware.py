"""NUMA-aware scheduling's names: the NodeResourceTopology annotations koordlet writes and koord-sched reads, the
node labels choosing a NUMA or CPU bind policy, and the pod annotations asking for one."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from apis.core.objects import JSON
from apis.extension.errors import AnnotationError, struct_fields

# Upstream: apis/extension/numa_aware.go, apis/extension/node_reservation.go (enable-numa-reservation).

# NodeResourceTopology annotations (koordlet writes them)
ANNOTATION_CPU_TOPOLOGY = "node.koordinator.sh/cpu-topology"
ANNOTATION_CPU_SHARED_POOLS = "node.koordinator.sh/cpu-shared-pools"
ANNOTATION_BE_CPU_SHARED_POOLS = "node.koordinator.sh/be-cpu-shared-pools"
ANNOTATION_POD_CPU_ALLOCS = "node.koordinator.sh/pod-cpu-allocs"
ANNOTATION_CPU_BASIC_INFO = "node.koordinator.sh/cpu-basic-info"
ANNOTATION_KUBELET_CPU_MANAGER_POLICY = "kubelet.koordinator.sh/cpu-manager-policy"

# KubeletCPUManagerPolicy.policy values (the kubelet's cpuManagerPolicy)
KUBELET_CPU_MANAGER_POLICY_NONE = "none"
KUBELET_CPU_MANAGER_POLICY_STATIC = "static"

# NodeResourceTopology topologyPolicies values (noderesourcetopology-api v1alpha1 TopologyManagerPolicy): what
# koordlet reports for the kubelet topology manager's (scope, policy), koord-sched reads back
NRT_TOPOLOGY_POLICY_NONE = "None"
NRT_TOPOLOGY_POLICIES = {
    ("container", "single-numa-node"): "SingleNUMANodeContainerLevel",
    ("container", "restricted"): "RestrictedContainerLevel",
    ("container", "best-effort"): "BestEffortContainerLevel",
    ("pod", "single-numa-node"): "SingleNUMANodePodLevel",
    ("pod", "restricted"): "RestrictedPodLevel",
    ("pod", "best-effort"): "BestEffortPodLevel",
}

# node labels
LABEL_NUMA_TOPOLOGY_POLICY = "node.koordinator.sh/numa-topology-policy"
LABEL_CPU_BIND_POLICY = "node.koordinator.sh/cpu-bind-policy"
LABEL_ENABLE_NUMA_RESERVATION = "node.koordinator.sh/enable-numa-reservation"
LABEL_NUMA_ALLOCATE_STRATEGY = "node.koordinator.sh/numa-allocate-strategy"
NUMA_MOST_ALLOCATED, NUMA_LEAST_ALLOCATED = "MostAllocated", "LeastAllocated"
NUMA_ALLOCATE_STRATEGIES = (NUMA_MOST_ALLOCATED, NUMA_LEAST_ALLOCATED)  # the label's values koord-scheduler honours

# pod annotations koord-sched reads
ANNOTATION_NUMA_TOPOLOGY_SPEC = "scheduling.koordinator.sh/numa-topology-spec"
ANNOTATION_RESOURCE_SPEC = "scheduling.koordinator.sh/resource-spec"


@dataclass(frozen=True)
class CPUInfo:
    """One logical CPU of the cpu-topology annotation (CPUInfo JSON: {id, core, socket, node})."""

    id: int
    core: int  # logical core id, unique across sockets (lscpu's CORE column, which upstream reads)
    socket: int
    node: int  # NUMA node

    def to_json(self) -> dict[str, int]:
        return {"id": self.id, "core": self.core, "socket": self.socket, "node": self.node}


def cpu_topology_json(cpus: Sequence[CPUInfo]) -> dict[str, Any]:
    """CPUTopology as koordlet reports it: `{"detail": [...]}`, `detail` omitted when empty (omitempty)."""
    return {"detail": [c.to_json() for c in cpus]} if cpus else {}


def decode_cpu_topology(text: str) -> tuple[CPUInfo, ...]:
    """The cpu-topology annotation's CPUs, as Go's json.Unmarshal into CPUTopology reads it: field names match
    case-insensitively, `null` is the zero value, numbers must be integers; AnnotationError names the bad field."""
    fields = struct_fields(text)
    detail = fields.get("detail") if fields is not None else None
    if detail is None:
        return ()
    if not isinstance(detail, list):
        raise AnnotationError("detail", "must be an array")
    out = []
    for i, item in enumerate(detail):
        if item is None:
            item = {}
        if not isinstance(item, dict):
            raise AnnotationError(f"detail[{i}]", "must be an object")
        fields = {k.lower(): v for k, v in item.items()}
        values = []
        for name in ("id", "core", "socket", "node"):
            v = fields.get(name)
            if v is None:
                v = 0
            if isinstance(v, bool) or not isinstance(v, int) or not -(2**31) <= v < 2**31:
                raise AnnotationError(f"detail[{i}].{name}", f"must be an int32, not {v!r}")
            values.append(v)
        out.append(CPUInfo(*values))
    return tuple(out)


@dataclass(frozen=True)
class KubeletCPUManagerPolicy:
    """The kubelet.koordinator.sh/cpu-manager-policy annotation: KubeletCPUManagerPolicy {policy, options,
    reservedCPUs}, the kubelet's CPU manager settings as koordlet reports them."""

    policy: str = ""
    options: Mapping[str, str] = field(default_factory=dict)
    reserved_cpus: str = ""  # a Linux CPU list

    def to_json(self) -> JSON:
        """As json.Marshal writes it: omitempty fields dropped, option names sorted."""
        out: JSON = {}
        if self.policy:
            out["policy"] = self.policy
        if self.options:
            out["options"] = dict(sorted(self.options.items()))
        if self.reserved_cpus:
            out["reservedCPUs"] = self.reserved_cpus
        return out


def decode_kubelet_cpu_manager_policy(text: str) -> KubeletCPUManagerPolicy:
    """GetKubeletCPUManagerPolicy, as Go's json.Unmarshal reads it: field names matched case-insensitively, `null`
    the zero value, options a map of strings; AnnotationError names the bad field. reservedCPUs is not parsed here
    (upstream parses it where it is used)."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise AnnotationError("", f"invalid JSON: {e}") from None
    if doc is None:
        return KubeletCPUManagerPolicy()
    if not isinstance(doc, dict):
        raise AnnotationError("", "must be a JSON object")
    fields = {k.lower(): v for k, v in doc.items()}
    options = fields.get("options")
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise AnnotationError("options", "must be an object")
    for name, value in options.items():
        if value is not None and not isinstance(value, str):
            raise AnnotationError(f"options.{name}", f"must be a string, not {value!r}")
    return KubeletCPUManagerPolicy(_string(fields, "policy", "policy"),
                                   {name: value or "" for name, value in options.items()},
                                   _string(fields, "reservedcpus", "reservedCPUs"))


def _string(fields: Mapping[str, Any], key: str, name: str) -> str:
    value = fields.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise AnnotationError(name, f"must be a string, not {value!r}")
    return value
