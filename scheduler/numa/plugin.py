"""NodeNUMAResource: NUMA policies, hints from CPU, memory and DeviceShare, CPU binding and resource-status.

Upstream pkg/scheduler/plugins/nodenumaresource (Filter, Reserve, PreBind) with the topology manager of
frameworkext/topologymanager. Filter merges the hints and remembers the NUMA affinity per (pod, node); DeviceShare
asks `affinity()` so the pod's GPUs and RDMA VFs come from the same NUMA node(s); Reserve picks the cpuset and
splits cpu and memory over the affinity's NUMA nodes into `scheduling.koordinator.sh/resource-status`, the format
koordlet's CPUSetAllocator reads (koordlet/states/cpupools.py resource_status()).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from koordlet.errors import InvalidInput
from koordlet.quantity import format_bytes, format_milli
from koordlet.states.cpupools import ANNOTATION_RESOURCE_STATUS, resource_status
from koordlet.states.qos import PRIORITY_PROD, QOS_LSE, QOS_LSR, koord_qos_class, priority_class_with_default
from scheduler.cluster import CPU, JSON, MEMORY, Cluster, NodeInfo, key, pod_requests
from scheduler.framework import Unschedulable
from scheduler.numa.cpus import ERR_NOT_ENOUGH_CPUS, FULL_PCPUS, SPREAD_BY_PCPUS, take_cpus
from scheduler.numa.hints import (
    BEST_EFFORT,
    POLICIES,
    PREFERRED,
    REQUIRED,
    SHARED,
    SINGLE,
    Hint,
    generate,
    merge,
)
from scheduler.numa.topology import LABEL_CPU_BIND_POLICY, NodeTopology, node_policy, parse_topology

ANNOTATION_NUMA_TOPOLOGY_SPEC = "scheduling.koordinator.sh/numa-topology-spec"
ANNOTATION_RESOURCE_SPEC = "scheduling.koordinator.sh/resource-spec"
# upstream nodenumaresource/plugin.go and topology_hint.go messages
ERR_NOT_MATCH_NUMA_TOPOLOGY = "node(s) NUMA Topology policy not match"
ERR_INVALID_REQUESTED_CPUS = "the requested CPUs must be integer"
ERR_INVALID_CPU_TOPOLOGY = "node(s) invalid CPU Topology"
ERR_SMT_ALIGNMENT = "node(s) requested cpus not multiple cpus per core"
ERR_CPU_BIND_POLICY_CONFLICT = "node(s) cpu bind policy conflicts with pod's required cpu bind policy"
ERR_MISSING_NUMA_RESOURCES = "node(s) missing NUMA resources"
NODE_FULL_PCPUS_ONLY, NODE_SPREAD_BY_PCPUS = "FullPCPUsOnly", "SpreadByPCPUs"
_BIND_POLICIES = ("", "Default", FULL_PCPUS, SPREAD_BY_PCPUS)


@dataclass(frozen=True)
class PodNUMA:
    """What the pod asks of NUMA placement (upstream PreFilter state)."""

    policy: str  # "" or a NUMATopologyPolicy
    exclusive: str
    cpu: int  # millicores
    memory: int
    bind: bool  # a cpuset is to be chosen
    required_bind: str
    preferred_bind: str
    problem: str = ""


def _json_annotation(annotations: dict[str, Any], name: str) -> dict[str, Any]:
    text = annotations.get(name)
    if not text:
        return {}
    doc = json.loads(text)
    if not isinstance(doc, dict):
        raise ValueError("must be a JSON object")
    return doc


def pod_numa(pod: JSON, default_bind: str) -> PodNUMA:
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    req = pod_requests(pod)
    cpu, memory = req.get(CPU, 0), req.get(MEMORY, 0)
    try:
        spec = _json_annotation(annotations, ANNOTATION_NUMA_TOPOLOGY_SPEC)
        rspec = _json_annotation(annotations, ANNOTATION_RESOURCE_SPEC)
    except ValueError as e:
        return PodNUMA("", "", cpu, memory, False, "", "", f"invalid pod annotation: {e}")
    policy, exclusive = str(spec.get("numaTopologyPolicy") or ""), str(spec.get("singleNUMANodeExclusive") or "")
    if (policy and policy not in POLICIES) or (exclusive and exclusive not in (REQUIRED, PREFERRED)):
        return PodNUMA("", "", cpu, memory, False, "", "",
                       f"invalid {ANNOTATION_NUMA_TOPOLOGY_SPEC}: {json.dumps(spec, separators=(',', ':'))}")
    required = str(rspec.get("requiredCPUBindPolicy") or "")
    preferred = str(rspec.get("preferredCPUBindPolicy") or "")
    if required not in _BIND_POLICIES or preferred not in _BIND_POLICIES:
        return PodNUMA(policy, exclusive, cpu, memory, False, "", "",
                       f"invalid {ANNOTATION_RESOURCE_SPEC}: unsupported cpu bind policy")
    if preferred in ("", "Default"):
        preferred = default_bind
    if required == "Default":
        required = default_bind
    bind = False
    if koord_qos_class(pod) in (QOS_LSE, QOS_LSR) and priority_class_with_default(pod) == PRIORITY_PROD and cpu > 0:
        if cpu % 1000:
            return PodNUMA(policy, exclusive, cpu, memory, False, "", "", ERR_INVALID_REQUESTED_CPUS)
        bind = True
    return PodNUMA(policy, exclusive, cpu, memory, bind, required, preferred)


@dataclass
class _Usage:
    cpus: set[int]
    numa: dict[int, dict[str, int]]
    status: dict[int, str]  # NumaNodeStatus of NUMA nodes used by NUMA-aligned pods


class NodeNUMAResource:
    name = "NodeNUMAResource"

    def __init__(self, default_cpu_bind_policy: str = FULL_PCPUS) -> None:
        self.default_bind = default_cpu_bind_policy
        self.deviceshare: Any = None  # scheduler.deviceshare.plugin.DeviceShare when enabled (set by config.build)
        self._topo: dict[str, tuple[JSON | None, NodeTopology]] = {}  # node → (the NRT object parsed, its facts)
        self._usage: dict[str, _Usage] = {}
        self._affinity: dict[tuple[str, str], frozenset[int] | None] = {}
        self._pod: JSON | None = None
        self._spec: PodNUMA | None = None

    # ---- facts ----------------------------------------------------------------------------------------------

    def topology(self, node: NodeInfo) -> NodeTopology:
        nrt = getattr(node, "nrt", None)
        cached = self._topo.get(node.name)
        if cached is None or cached[0] is not nrt:  # a watch replaces the object: parse the new one
            cached = self._topo[node.name] = (nrt, parse_topology(nrt))
        return cached[1]

    def usage(self, node: NodeInfo) -> _Usage:
        u = self._usage.get(node.name)
        if u is None:
            node.watch(self, self._forget_usage)
            u = _Usage(set(), {}, {})
            for pod in node.pods.values():
                try:
                    st = resource_status((pod.get("metadata") or {}).get("annotations") or {})
                except InvalidInput:
                    continue
                u.cpus.update(st.cpus())
                nodes = [n.node for n in st.numa_node_resources]
                for n in st.numa_node_resources:
                    acc = u.numa.setdefault(n.node, {})
                    for r, v in n.resources.items():
                        if r in (CPU, MEMORY):
                            acc[r] = acc.get(r, 0) + int(v * 1000 if r == CPU else v)
                    if len(nodes) > 1 or u.status.get(n.node) == SHARED:
                        u.status[n.node] = SHARED
                    else:
                        u.status[n.node] = SINGLE
            self._usage[node.name] = u
        return u

    def _forget_usage(self, node: NodeInfo) -> None:
        self._usage.pop(node.name, None)

    def spec(self, pod: JSON) -> PodNUMA:
        if pod is not self._pod or self._spec is None:
            self._pod, self._spec = pod, pod_numa(pod, self.default_bind)
        return self._spec

    def affinity(self, pod: JSON, node: NodeInfo) -> frozenset[int] | None:
        """The NUMA nodes Filter chose for the pod on this node (None: no restriction)."""
        return self._affinity.get((key(pod), node.name))

    # ---- Filter ---------------------------------------------------------------------------------------------

    def filter(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> str | None:
        s = self.spec(pod)
        self._affinity.pop((key(pod), node.name), None)
        if s.problem:
            return s.problem
        if not s.policy and not s.bind and not node.labels.get("node.koordinator.sh/numa-topology-policy"):
            return None
        topo = self.topology(node)
        policy = node_policy(node.labels, topo)
        if policy and s.policy and policy != s.policy:
            return ERR_NOT_MATCH_NUMA_TOPOLOGY
        policy = s.policy or policy
        bind_policy = ""
        if s.bind:
            bind_policy, why = self._bind_policy(s, node, topo)
            if why:
                return why
        if policy and policy != BEST_EFFORT and (not topo.has_nrt or not topo.numa):
            return ERR_MISSING_NUMA_RESOURCES
        if not policy or not topo.numa:
            if s.bind and take_cpus(topo.cpus, self._free_cpus(node, topo, None), s.cpu // 1000, bind_policy) is None:
                return ERR_NOT_ENOUGH_CPUS
            return None
        exclusive = s.exclusive or (REQUIRED if s.policy else "")
        providers = self._hints(pod, s, node, topo, bind_policy)
        best, admit, reasons = merge(policy, sorted(topo.numa), providers, exclusive, self.usage(node).status)
        if not admit:
            return ", ".join(reasons)
        self._affinity[(key(pod), node.name)] = best.mask
        return None

    def _bind_policy(self, s: PodNUMA, node: NodeInfo, topo: NodeTopology) -> tuple[str, str]:
        if not topo.cpu_topology_valid():
            return "", ERR_INVALID_CPU_TOPOLOGY
        node_bind = node.labels.get(LABEL_CPU_BIND_POLICY, "")
        if not node_bind and topo.kubelet_policy == "static" and topo.kubelet_options.get("full-pcpus-only") == "true":
            node_bind = NODE_FULL_PCPUS_ONLY
        required = s.required_bind
        forced = {NODE_FULL_PCPUS_ONLY: FULL_PCPUS, NODE_SPREAD_BY_PCPUS: SPREAD_BY_PCPUS}.get(node_bind, "")
        if forced:
            if required and required != forced:
                return "", ERR_CPU_BIND_POLICY_CONFLICT
            required = forced
        policy = required or s.preferred_bind
        if policy == FULL_PCPUS and (s.cpu // 1000) % topo.cpus_per_core():
            return "", ERR_SMT_ALIGNMENT
        return policy, ""

    def _free_cpus(self, node: NodeInfo, topo: NodeTopology, mask: frozenset[int] | None) -> set[int]:
        used = self.usage(node).cpus
        return {c.id for c in topo.cpus.values()
                if c.id not in used and c.id not in topo.reserved_cpus and (mask is None or c.node in mask)}

    def _hints(self, pod: JSON, s: PodNUMA, node: NodeInfo, topo: NodeTopology, bind_policy: str
               ) -> dict[str, list[Hint] | None]:
        numa = sorted(topo.numa)
        used = self.usage(node).numa
        out: dict[str, list[Hint] | None] = {}

        def amount(r: str, want: int) -> list[Hint]:
            def total(m: frozenset[int]) -> int:
                return sum(topo.numa[i].get(r, 0) for i in m)

            def free(m: frozenset[int]) -> int:
                return total(m) - sum(used.get(i, {}).get(r, 0) for i in m)

            return generate(numa, lambda m: free(m) >= want, lambda m: total(m) >= want)

        if s.bind:
            n = s.cpu // 1000
            out[CPU] = generate(numa, lambda m: take_cpus(topo.cpus, self._free_cpus(node, topo, m), n, bind_policy)
                                is not None,
                                lambda m: sum(1 for c in topo.cpus.values() if c.node in m) >= n)
        elif s.cpu > 0:
            out[CPU] = amount(CPU, s.cpu)
        if s.memory > 0:
            out[MEMORY] = amount(MEMORY, s.memory)
        ds = self.deviceshare
        if ds is not None:
            found = ds.numa_hints(pod, node, numa)
            if found is not None:
                out[found[0]] = found[1]
        return out

    # ---- Reserve --------------------------------------------------------------------------------------------

    def reserve(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> dict[str, str]:
        s = self.spec(pod)
        k = (key(pod), node.name)
        if k not in self._affinity and not s.bind:
            return {}
        if k not in self._affinity:
            why = self.filter(pod, node, cluster)
            if why is not None:
                raise Unschedulable(why)
        mask = self._affinity.get(k)
        topo = self.topology(node)
        status: dict[str, Any] = {}
        chosen: list[int] = []
        if s.bind:
            bind_policy, why = self._bind_policy(s, node, topo)
            got = None if why else take_cpus(topo.cpus, self._free_cpus(node, topo, mask), s.cpu // 1000, bind_policy)
            if got is None:
                raise Unschedulable(why or ERR_NOT_ENOUGH_CPUS)
            chosen = got
            from koordlet.states.cpupools import format_cpuset
            status["cpuset"] = format_cpuset(chosen)
        split = self._split(s, node, topo, mask, chosen) if k in self._affinity and topo.numa else []
        if split:  # upstream ResourceStatus: numaNodeResources omitempty; `{}` for an aligned pod asking no cpu/memory
            status["numaNodeResources"] = split
        if not status and k not in self._affinity:
            return {}
        return {ANNOTATION_RESOURCE_STATUS: json.dumps(status, separators=(",", ":"))}

    def _split(self, s: PodNUMA, node: NodeInfo, topo: NodeTopology, mask: frozenset[int] | None,
               chosen: list[int]) -> list[dict[str, Any]]:
        """cpu and memory per NUMA node of the affinity: the chosen CPUs' nodes, else filled node by node."""
        nodes = sorted(mask) if mask else sorted(topo.numa)
        used = self.usage(node).numa
        per: dict[int, dict[str, int]] = {i: {} for i in nodes}
        if chosen:
            for c in chosen:
                i = topo.cpus[c].node
                per.setdefault(i, {})[CPU] = per.get(i, {}).get(CPU, 0) + 1000
        for r, want in ((CPU, 0 if chosen else s.cpu), (MEMORY, s.memory)):
            for i in nodes:
                if want <= 0:
                    break
                free = max(topo.numa.get(i, {}).get(r, 0) - used.get(i, {}).get(r, 0), 0)
                take = min(want, free) if i != nodes[-1] else want
                if take > 0:
                    per[i][r] = per[i].get(r, 0) + take
                    want -= take
        out = []
        for i in sorted(per):
            if per[i]:
                res = {r: format_milli(v) if r == CPU else format_bytes(v) for r, v in sorted(per[i].items())}
                out.append({"node": i, "resources": res})
        return out

    def unreserve(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> None:
        self._affinity.pop((key(pod), node.name), None)
