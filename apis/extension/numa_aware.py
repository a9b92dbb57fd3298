"""NUMA-aware scheduling's names: the NodeResourceTopology annotations koordlet writes and koord-sched reads, the
node labels choosing a NUMA or CPU bind policy, and the pod annotations asking for one."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from apis.extension.errors import AnnotationError

# Upstream: apis/extension/numa_aware.go, apis/extension/node_reservation.go (enable-numa-reservation).

# NodeResourceTopology annotations (koordlet writes them)
ANNOTATION_CPU_TOPOLOGY = "node.koordinator.sh/cpu-topology"
ANNOTATION_CPU_SHARED_POOLS = "node.koordinator.sh/cpu-shared-pools"
ANNOTATION_BE_CPU_SHARED_POOLS = "node.koordinator.sh/be-cpu-shared-pools"
ANNOTATION_POD_CPU_ALLOCS = "node.koordinator.sh/pod-cpu-allocs"
ANNOTATION_CPU_BASIC_INFO = "node.koordinator.sh/cpu-basic-info"
ANNOTATION_KUBELET_CPU_MANAGER_POLICY = "kubelet.koordinator.sh/cpu-manager-policy"

# node labels
LABEL_NUMA_TOPOLOGY_POLICY = "node.koordinator.sh/numa-topology-policy"
LABEL_CPU_BIND_POLICY = "node.koordinator.sh/cpu-bind-policy"
LABEL_ENABLE_NUMA_RESERVATION = "node.koordinator.sh/enable-numa-reservation"

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
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise AnnotationError("", f"invalid JSON: {e}") from None
    if doc is None:
        return ()
    if not isinstance(doc, dict):
        raise AnnotationError("", "must be a JSON object")
    detail = {k.lower(): v for k, v in doc.items()}.get("detail")
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
