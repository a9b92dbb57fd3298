"""A node's NUMA facts as the scheduler reads them: the agent's NodeResourceTopology and the Node's labels.

Zones of type `Node` named `node-<i>` give each NUMA node's allocatable cpu and memory; the NRT's
`node.koordinator.sh/cpu-topology` annotation gives every logical CPU's core, socket and NUMA node;
`kubelet.koordinator.sh/cpu-manager-policy` the kubelet's CPU manager policy and reserved CPUs; `topologyPolicies`
the kubelet topology manager policy (upstream nodenumaresource/topology_options.go and util.go).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from apis.core.errors import InvalidInput
from apis.core.objects import JSON
from apis.core.resources import CPU, MEMORY
from apis.extension.errors import AnnotationError
from apis.extension.numa_aware import (
    ANNOTATION_CPU_TOPOLOGY,
    ANNOTATION_KUBELET_CPU_MANAGER_POLICY,
    LABEL_NUMA_TOPOLOGY_POLICY,
    NRT_TOPOLOGY_POLICIES,
    CPUInfo,
    decode_cpu_topology,
    decode_kubelet_cpu_manager_policy,
)
from apis.extension.resource_status import CPUSetError, parse_cpuset
from scheduler.cluster import quantity_value
from scheduler.numa.hints import BEST_EFFORT, POLICIES, RESTRICTED, SINGLE_NUMA_NODE

log = logging.getLogger(__name__)
# kubelet topology manager policies as the agent reports them in NRT.topologyPolicies (v1alpha1 TopologyManagerPolicy)
_BY_KUBELET_POLICY = {"single-numa-node": SINGLE_NUMA_NODE, "restricted": RESTRICTED, "best-effort": BEST_EFFORT}
_KUBELET_POLICIES = {nrt: _BY_KUBELET_POLICY[policy] for (_, policy), nrt in NRT_TOPOLOGY_POLICIES.items()}


@dataclass
class NodeTopology:
    """One node's NUMA nodes with allocatable cpu (millicores) and memory (bytes), and its CPUs."""

    numa: dict[int, dict[str, int]] = field(default_factory=dict)
    cpus: dict[int, CPUInfo] = field(default_factory=dict)  # logical CPU id → where it is
    kubelet_policy: str = ""  # "static" / "none" / ""
    kubelet_options: dict[str, str] = field(default_factory=dict)
    reserved_cpus: frozenset[int] = frozenset()
    topology_policy: str = ""  # the kubelet topology manager policy as a NUMATopologyPolicy ("" none)
    has_nrt: bool = False
    problems: list[str] = field(default_factory=list)

    def cpus_per_core(self) -> int:
        cores: dict[tuple[int, int], int] = {}
        for c in self.cpus.values():
            cores[(c.socket, c.core)] = cores.get((c.socket, c.core), 0) + 1
        return max(cores.values(), default=1)

    def cpu_topology_valid(self) -> bool:
        return bool(self.cpus)


def node_policy(labels: dict[str, str], topo: NodeTopology) -> str:
    """getNUMATopologyPolicy: the node label when it names a policy, else the kubelet's."""
    value = labels.get(LABEL_NUMA_TOPOLOGY_POLICY, "")
    return value if value in POLICIES else topo.topology_policy


def parse_topology(nrt: JSON | None) -> NodeTopology:
    """The NRT's facts; a malformed part is left out with a line in `problems`, never an exception."""
    topo = NodeTopology()
    if not isinstance(nrt, dict):
        return topo
    topo.has_nrt = True
    for z in nrt.get("zones") or []:
        if not isinstance(z, dict) or z.get("type") != "Node" or not str(z.get("name", "")).startswith("node-"):
            continue
        try:
            i = int(str(z["name"])[5:])
        except ValueError:
            topo.problems.append(f"zone {z.get('name')!r}: not node-<number>")
            continue
        res: dict[str, int] = {}
        for r in z.get("resources") or []:
            if isinstance(r, dict) and r.get("name") in (CPU, MEMORY):
                try:
                    res[str(r["name"])] = quantity_value(str(r["name"]), r.get("allocatable", r.get("capacity", 0)))
                except InvalidInput as e:
                    topo.problems.append(f"zone {z['name']} {r['name']}: {e}")
        topo.numa[i] = res
    annotations = (nrt.get("metadata") or {}).get("annotations") or {}
    _read_cpus(topo, annotations.get(ANNOTATION_CPU_TOPOLOGY))
    _read_kubelet(topo, annotations.get(ANNOTATION_KUBELET_CPU_MANAGER_POLICY))
    for p in nrt.get("topologyPolicies") or []:
        if p in _KUBELET_POLICIES:
            topo.topology_policy = _KUBELET_POLICIES[p]
    if not topo.numa and topo.cpus:  # zones absent: NUMA nodes from the CPU topology, resources unknown
        for c in topo.cpus.values():
            topo.numa.setdefault(c.node, {})
    for line in topo.problems:
        log.warning("NodeResourceTopology %s: %s", (nrt.get("metadata") or {}).get("name"), line)
    return topo


def _read_cpus(topo: NodeTopology, text: object) -> None:
    if not text:
        return
    try:
        if not isinstance(text, str):
            raise AnnotationError("", "must be a string")
        for c in decode_cpu_topology(text):
            topo.cpus[c.id] = c
    except InvalidInput as e:
        topo.cpus = {}
        topo.problems.append(f"{ANNOTATION_CPU_TOPOLOGY}: {e}")


def _read_kubelet(topo: NodeTopology, text: Any) -> None:
    if not text:
        return
    try:
        if not isinstance(text, str):
            raise AnnotationError("", "must be a string")
        policy = decode_kubelet_cpu_manager_policy(text)
    except InvalidInput as e:  # upstream logs it and goes on without the kubelet's policy
        topo.problems.append(f"{ANNOTATION_KUBELET_CPU_MANAGER_POLICY}: {e}")
        return
    topo.kubelet_policy = policy.policy
    topo.kubelet_options = dict(policy.options)
    try:
        topo.reserved_cpus = frozenset(parse_cpuset(policy.reserved_cpus))
    except CPUSetError as e:  # upstream logs it: no CPU reserved
        topo.problems.append(f"{ANNOTATION_KUBELET_CPU_MANAGER_POLICY}: {e}")
