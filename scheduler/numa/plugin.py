"""NodeNUMAResource: NUMA policies, hints from CPU, memory and DeviceShare, CPU binding and resource-status.

Upstream pkg/scheduler/plugins/nodenumaresource (Filter, Reserve, PreBind) with the topology manager of
frameworkext/topologymanager. Filter merges the hints and remembers the NUMA affinity per (pod, node); DeviceShare
asks `affinity()` so the pod's GPUs and RDMA VFs come from the same NUMA node(s); Reserve picks the cpuset and
splits cpu and memory over the affinity's NUMA nodes into `scheduling.koordinator.sh/resource-status`, the format
koordlet's CPUSetAllocator reads (apis/extension/resource_status.py). On a node with resource amplification
(scheduler.amplification) cpuset-bound CPUs count amplified and each NUMA node's resources are amplified, as upstream.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np

from apis.core.errors import InvalidInput
from apis.core.objects import JSON
from apis.core.resources import CPU, MEMORY
from apis.extension.device_allocated import ANNOTATION_DEVICE_ALLOCATED
from apis.extension.errors import AnnotationError
from apis.extension.numa_aware import (
    ANNOTATION_NUMA_TOPOLOGY_SPEC,
    ANNOTATION_RESOURCE_SPEC,
    LABEL_CPU_BIND_POLICY,
    LABEL_NUMA_ALLOCATE_STRATEGY,
    LABEL_NUMA_TOPOLOGY_POLICY,
)
from apis.extension.pod import pod_resource_status
from apis.extension.priority import PRIORITY_PROD, priority_class_with_default
from apis.extension.qos import QOS_LSE, QOS_LSR, koord_qos_class
from apis.extension.resource_status import (
    ANNOTATION_RESOURCE_STATUS,
    encode_resource_status,
)
from scheduler.amplification import (
    ERR_INSUFFICIENT_AMPLIFIED_CPU,
    ERR_INVALID_CPU_AMPLIFICATION_RATIO,
    amplified_cpuset_milli,
    amplify,
    amplify_resources,
    cpu_ratio,
    node_ratios,
    ratio_text,
)
from scheduler.cluster import Cluster, NodeInfo, key, pod_requests
from scheduler.interfaces import NUMAHintProvider, ReservationLender, Unschedulable
from scheduler.nodeindex import BoolArray, IntArray, NodeIndex, Rows, Tracker, node_index
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
from scheduler.numa.score import DEFAULT_RESOURCES, LEAST_ALLOCATED, MOST_ALLOCATED, strategy_score
from scheduler.numa.topology import NodeTopology, node_policy, parse_topology
from scheduler.plugins.columns import NodeColumns, allocation_score
from scheduler.podview import pod_view
from scheduler.rowcache import by_rows

# upstream nodenumaresource/plugin.go and topology_hint.go messages
ERR_NOT_MATCH_NUMA_TOPOLOGY = "node(s) NUMA Topology policy not match"
ERR_INVALID_REQUESTED_CPUS = "the requested CPUs must be integer"
ERR_INVALID_CPU_TOPOLOGY = "node(s) invalid CPU Topology"
ERR_SMT_ALIGNMENT = "node(s) requested cpus not multiple cpus per core"
ERR_CPU_BIND_POLICY_CONFLICT = "node(s) cpu bind policy conflicts with pod's required cpu bind policy"
ERR_MISSING_NUMA_RESOURCES = "node(s) missing NUMA resources"
NODE_FULL_PCPUS_ONLY, NODE_SPREAD_BY_PCPUS = "FullPCPUsOnly", "SpreadByPCPUs"
_BIND_POLICIES = ("", "Default", FULL_PCPUS, SPREAD_BY_PCPUS)
_FEW_ROWS = 16  # changed rows below which the node-level score is recomputed per node in Python


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


def _json_annotation(annotations: JSON, name: str) -> JSON:
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
    # a plain pod's shapes and Filter decided by what they read (see `prefilter_shape`); False: its whole shape
    # and the whole Filter (the plain path, kept for comparison)
    plain_shortcuts = True

    def __init__(self, default_cpu_bind_policy: str = FULL_PCPUS, scoring_type: str = LEAST_ALLOCATED,
                 resources: tuple[tuple[str, int], ...] = DEFAULT_RESOURCES, weight: int = 1) -> None:
        self.default_bind = default_cpu_bind_policy
        self.most = scoring_type == MOST_ALLOCATED
        self.resources = resources
        self.weight = weight
        self._scores: dict[str, dict[int, JSON]] = {}  # node → pod shape (its number) → memo (_cached)
        self._shape_of: tuple[JSON | None, int] = (None, 0)
        self._shape_ids: dict[tuple[object, ...], int] = {}  # pod shape → a small number: hashed once per pod, not
        # once per node (the shape holds the pod's labels and annotations)
        self._dirty: set[str] = set()  # nodes changed since their memo was last checked
        self._changes = Tracker()  # feeds _dirty: a node the tracker does not report (unchanged, or back at the
        # version last seen: a reservation's reserve pod lent for an owner's cycle and put back) is not looked at
        self._fp: dict[str, tuple[object, ...]] = {}  # node → _fingerprint its usage and memo were made from
        self._checked: dict[str, int | None] = {}  # node → the NodeIndex version its memo was last checked at
        self._columns = NodeColumns(lambda _n: {})
        self._policy_set: set[int] = set()
        self._policy_rows: list[int] = []
        self._amplified_set: set[int] = set()  # rows whose node carries a resource amplification annotation
        self._amplified_rows: list[int] = []
        self._row_cache: dict[tuple[object, ...], tuple[IntArray, Any]] = {}  # node-level score per request shape
        self._row_index: tuple[NodeIndex | None, int] = (None, -1)  # the index (and epoch) the cache's rows are of
        self._synced: tuple[object, ...] = ()  # the index, epoch, log length and resources `sync` last saw
        self.deviceshare: NUMAHintProvider | None = None  # DeviceShare, when its devices are aligned (align_devices)
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
        if node.name in self._dirty:
            self._revalidate(node)
        u = self._usage.get(node.name)
        if u is None:
            u = _Usage(set(), {}, {})
            for pod in node.pods.values():
                try:
                    st = pod_resource_status(pod_view(pod))
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
            self._fp[node.name] = self._fingerprint(node)
        return u

    # Reservation.reserved_cpus when both plugins are on (scheduler.config): an owner's reserved CPUs come first
    reserved_cpus: Callable[[JSON, NodeInfo], frozenset[int] | None] | None = None

    restricted_reservation: Callable[[JSON, NodeInfo], bool] | None = None  # Reservation.restricted_on

    def align_devices(self, provider: NUMAHintProvider) -> None:
        """Align the provider's devices with the CPUs (its hints join ours; it allocates in our affinity)."""
        self.deviceshare = provider
        provider.align_numa(self.affinity)

    def serve_reservations(self, lender: ReservationLender) -> None:
        """An owner's reserved CPUs come first (and only those when its reservation is Restricted)."""
        self.reserved_cpus, self.restricted_reservation = lender.reserved_cpus, lender.restricted_on

    def _preferred(self, pod: JSON, node: NodeInfo) -> tuple[frozenset[int] | None, bool]:
        """(the owner's reserved CPUs on this node, whether they are the only ones it may get)."""
        prefer = self.reserved_cpus(pod, node) if self.reserved_cpus is not None else None
        only = bool(prefer) and self.restricted_reservation is not None and self.restricted_reservation(pod, node)
        return prefer, only

    def _track(self, index: NodeIndex) -> None:
        """Mark the nodes that changed since the last call, to be looked at on next use (most changes, a pod without
        NUMA or device annotations, leave every NUMA fact as it was), and bring the policy-label and amplification
        rows up to date (`_sync_flags`). Every entry point that reads a node's memo or those rows calls it first."""
        changed = self._changes.changes(index)
        if changed is None:
            self._dirty.update(index.names)
        elif changed:
            names = index.names
            for i in changed:
                self._dirty.add(names[i])
        else:
            return
        self._sync_flags(index, changed)

    @staticmethod
    def _fingerprint(node: NodeInfo) -> tuple[object, ...]:
        """Everything NUMA usage, the hints and the NUMA-path scores depend on: the Node, NRT and Device objects and
        the pods' resource-status and device-allocated annotations."""
        held = []
        for k, p in node.pods.items():
            ann = (p.get("metadata") or {}).get("annotations") or {}
            st, dev = ann.get(ANNOTATION_RESOURCE_STATUS), ann.get(ANNOTATION_DEVICE_ALLOCATED)
            if st is not None or dev is not None:
                held.append((k, st, dev))
        return id(node.obj), id(getattr(node, "nrt", None)), id(node.device), tuple(held)

    def _revalidate(self, node: NodeInfo) -> None:
        self._dirty.discard(node.name)
        index = self._row_index[0]
        version = index.version(node) if index is not None else None
        if version is not None and self._checked.get(node.name) == version:
            return  # back in the state the memo was checked at (NodeIndex.revert): nothing to look at
        self._checked[node.name] = version
        fp = self._fingerprint(node)
        if self._fp.get(node.name) != fp:
            self._fp[node.name] = fp
            self._usage.pop(node.name, None)
            self._scores.pop(node.name, None)
            return
        for memo in self._scores.get(node.name, {}).values():
            if memo.get("node_level"):
                memo.pop("score", None)  # scored over the node's requested/allocatable, which may have moved

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
        if (self.plain_shortcuts and not (s.policy or s.bind or s.problem) and not _policy_label(node)
                and ratio_text(node.obj) is None):
            # a plain pod on a node with neither a NUMA policy label nor an amplification: what follows passes it
            # without recording an affinity or reading any memo
            self._affinity.pop((key(pod), node.name), None)
            return None
        self._track(node_index(cluster))
        self._affinity.pop((key(pod), node.name), None)
        why = s.problem or self._amplified_why(s, node)
        if why:
            return why
        why, aligned, mask = self._decide(pod, node)
        if why is None and aligned:
            self._affinity[(key(pod), node.name)] = mask
        return why

    def _amplified_why(self, s: PodNUMA, node: NodeInfo) -> str | None:
        """filterAmplifiedCPUs: on a node amplifying CPU, the pod's cpu (amplified when it binds CPUs) must fit
        allocatable − requested with the node's cpuset-bound CPUs counted amplified. Not memoised: it moves with
        every pod placed on the node."""
        if s.cpu <= 0:
            return None
        ratio = cpu_ratio(node.obj)
        if ratio is None:
            return ERR_INVALID_CPU_AMPLIFICATION_RATIO
        if ratio <= 1:
            return None
        request = amplify(s.cpu, ratio) if s.bind else s.cpu
        requested = amplified_cpuset_milli(node.requested.get(CPU, 0), len(self.usage(node).cpus) * 1000, ratio)
        return ERR_INSUFFICIENT_AMPLIFIED_CPU if request > node.allocatable.get(CPU, 0) - requested else None

    def _numa_view(self, node: NodeInfo, topo: NodeTopology
                   ) -> tuple[dict[int, dict[str, int]], dict[int, dict[str, int]]]:
        """(each NUMA node's resources, what is used of them): amplified by the node's ratios (amplifyNUMANodeResources)
        with the cpuset-bound CPUs of a NUMA node counted amplified (getAvailableNUMANodeResources)."""
        used = self.usage(node)
        if ratio_text(node.obj) is None:
            return topo.numa, used.numa
        try:
            ratios = node_ratios(node.obj)
        except AnnotationError:
            return topo.numa, used.numa  # Filter refuses the node to pods asking cpu
        capacity = {i: amplify_resources(res, ratios) for i, res in topo.numa.items()}
        ratio = ratios.get(CPU, 0.0)
        if ratio <= 1:
            return capacity, used.numa
        bound: dict[int, int] = {}
        for c in used.cpus:
            info = topo.cpus.get(c)
            if info is not None:
                bound[info.node] = bound.get(info.node, 0) + 1000
        counted = {i: res | {CPU: res.get(CPU, 0) - bound.get(i, 0) + amplify(bound.get(i, 0), ratio)}
                   for i, res in used.numa.items()}
        return capacity, counted

    def _decide(self, pod: JSON, node: NodeInfo) -> tuple[str | None, bool, frozenset[int] | None]:
        """(reason or None, whether a NUMA policy applied, the merged hint's NUMA nodes) — Filter without state."""
        s = self.spec(pod)
        if s.problem:
            return s.problem, False, None
        if not s.policy and not s.bind and not node.labels.get(LABEL_NUMA_TOPOLOGY_POLICY):
            return None, False, None
        topo = self.topology(node)
        policy = node_policy(node.labels, topo)
        if policy and s.policy and policy != s.policy:
            return ERR_NOT_MATCH_NUMA_TOPOLOGY, False, None
        policy = s.policy or policy
        bind_policy = ""
        if s.bind:
            bind_policy, why = self._bind_policy(s, node, topo)
            if why:
                return why, False, None
        if policy and policy != BEST_EFFORT and (not topo.has_nrt or not topo.numa):
            return ERR_MISSING_NUMA_RESOURCES, False, None
        if not policy or not topo.numa:
            if s.bind and take_cpus(topo.cpus, self._free_cpus(node, topo, None), s.cpu // 1000, bind_policy) is None:
                return ERR_NOT_ENOUGH_CPUS, False, None
            return None, False, None
        exclusive = s.exclusive or (REQUIRED if s.policy else "")
        providers = self._hints(pod, s, node, topo, bind_policy)
        best, admit, reasons = merge(policy, sorted(topo.numa), providers, exclusive, self.usage(node).status)
        if not admit:
            return ", ".join(reasons), False, None
        return None, True, best.mask

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
        capacity, used = self._numa_view(node, topo)
        out: dict[str, list[Hint] | None] = {}

        def amount(r: str, want: int) -> list[Hint]:
            def total(m: frozenset[int]) -> int:
                return sum(capacity[i].get(r, 0) for i in m)

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

    # ---- Score ----------------------------------------------------------------------------------------------

    def _shape(self, pod: JSON) -> int:
        """What the score depends on in the pod: pods of one shape score alike on a node until the node changes."""
        if pod is not self._shape_of[0]:
            meta = pod.get("metadata") or {}
            ann = tuple(sorted((k, str(v)) for k, v in (meta.get("annotations") or {}).items()
                               if k.startswith("scheduling.koordinator.sh/")))
            labels = tuple(sorted((str(k), str(v)) for k, v in (meta.get("labels") or {}).items()))
            shape = (tuple(sorted(pod_requests(pod).items())), self.spec(pod), ann, labels,
                     (pod.get("spec") or {}).get("priority"))
            self._shape_of = (pod, self._shape_ids.setdefault(shape, len(self._shape_ids)))
        return self._shape_of[1]

    def _cached(self, pod: JSON, node: NodeInfo) -> dict[Any, Any]:
        """This node's memo for pods of this shape: {"why": filter reason, "score": score}, until the node changes."""
        shape = self._shape(pod)
        if node.name in self._dirty:
            self._revalidate(node)
        per = self._scores.get(node.name)
        if per is None:
            self.usage(node)  # registers the watch that forgets this node's memo when it changes
            per = self._scores[node.name] = {}
        memo = per.get(shape)
        if memo is None:
            memo = per[shape] = {}
        return memo

    def prefilter_vector(self, pod: JSON, index: NodeIndex) -> BoolArray | None:
        """Exactly where `filter` passes: only the nodes where a NUMA policy or CPU binding applies are decided
        (memoised per pod shape), a plain pod passes every node without a policy label."""
        s = self.spec(pod)
        self._track(index)
        plain = not (s.policy or s.bind or s.problem)
        amplified = self._amplified_rows if s.cpu > 0 and not s.problem else []
        if plain and not self._policy_rows and not amplified:
            return None
        n = len(index)
        out = np.ones(n, dtype=np.bool_)
        rows = self._policy_rows if plain else range(n)
        for i in rows:
            node = index.nodes[i]
            memo = self._cached(pod, node)
            if "why" not in memo:
                memo["why"] = self._decide(pod, node)[0]
            out[i] = memo["why"] is None
        for i in amplified:
            out[i] = out[i] and self._amplified_why(s, index.nodes[i]) is None
        return out

    # -- kept between cycles by the framework (scheduler.vectorcache): rows are memoised per pod shape already --
    # A plain pod (no NUMA policy, no CPU binding, nothing invalid) while no node carries a NUMA policy label is
    # decided by less than its whole shape: its Filter refuses only on amplified nodes, by its cpu alone; its score
    # is the node-level strategy over its requests (amplified nodes included, see `_score`).
    def prefilter_shape(self, pod: JSON, index: NodeIndex) -> Hashable:
        self.sync(index)
        s = self.spec(pod)
        if self.plain_shortcuts and not (s.policy or s.bind or s.problem or self._policy_rows):
            return "plain", s.cpu if self._amplified_rows else 0
        return self._shape(pod)

    def score_shape(self, pod: JSON, index: NodeIndex) -> Hashable:
        self.sync(index)
        s = self.spec(pod)
        if self.plain_shortcuts and not (s.policy or s.bind or s.problem or self._policy_rows):
            requests = pod_requests(pod)
            return "plain", tuple(requests.get(r, 0) for r, _ in self.resources), any(requests.values())
        return self._shape(pod)

    def prefilter_rows(self, pod: JSON, index: NodeIndex, rows: Rows) -> BoolArray:
        s = self.spec(pod)
        plain = not (s.policy or s.bind or s.problem)
        if plain and not self._policy_set and (s.cpu <= 0 or not self._amplified_set):
            return np.ones(len(index) if isinstance(rows, slice) else len(rows), dtype=np.bool_)  # as below
        amplified = self._amplified_set if s.cpu > 0 and not s.problem else set()
        picked: list[int] = list(range(len(index))[rows]) if isinstance(rows, slice) else rows.tolist()
        out = np.ones(len(picked), dtype=np.bool_)
        for j, i in enumerate(picked):
            exact = not plain or i in self._policy_set
            if not exact and i not in amplified:
                continue
            node = index.nodes[i]
            if exact:
                memo = self._cached(pod, node)
                if "why" not in memo:
                    memo["why"] = self._decide(pod, node)[0]
                out[j] = memo["why"] is None
            if i in amplified:
                out[j] = out[j] and self._amplified_why(s, node) is None
        return out

    def score_rows(self, pod: JSON, index: NodeIndex, rows: Rows) -> IntArray:
        requests = pod_requests(pod)
        picked: list[int] = list(range(len(index))[rows]) if isinstance(rows, slice) else rows.tolist()
        if not any(requests.values()):
            return np.zeros(len(picked), dtype=np.int64)
        s = self.spec(pod)
        out = self._node_level_rows(requests, len(index), rows)
        plain = not (s.policy or s.bind or s.problem)
        amplified = self._amplified_set if requests.get(CPU, 0) > 0 and plain else set()
        for j, i in enumerate(picked):
            if not plain or i in self._policy_set or i in amplified:
                out[j] = self._memo_score(pod, index.nodes[i])
        return out

    def score(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> int:
        """Upstream Score: the strategy over the NUMA nodes the pod would get (a NUMA policy applies), else over
        the node; 0 for a pod asking nothing, or where the NUMA allocation fails (upstream degrades to 0)."""
        self._track(node_index(cluster))
        return self._memo_score(pod, node)

    def _memo_score(self, pod: JSON, node: NodeInfo) -> int:
        memo = self._cached(pod, node)
        if "score" not in memo:
            memo["score"], memo["node_level"] = self._score(pod, node)
        return int(memo["score"])

    def _score(self, pod: JSON, node: NodeInfo) -> tuple[int, bool]:
        """(score, whether it is over the whole node)."""
        requests = pod_requests(pod)
        if not any(requests.values()):
            return 0, False
        s = self.spec(pod)
        if s.bind and not self.topology(node).cpu_topology_valid():
            return 0, False
        why, aligned, mask = self._decide(pod, node)
        if why is not None:
            return 0, False  # infeasible here: never chosen (and upstream scores a failed allocation 0)
        ratio = cpu_ratio(node.obj) or 1.0
        if s.bind and ratio > 1:  # getResourceOptions: a cpuset pod's cpu counts amplified
            requests = requests | {CPU: amplify(requests.get(CPU, 0), ratio)}
        if aligned:
            topo = self.topology(node)
            got = self._allocate(s, node, topo, mask, True, *self._preferred(pod, node))
            if got is None:
                return 0, False
            chosen, split = got
            if split:  # scored over the NUMA nodes the pod gets (calculateAllocatableAndRequested)
                capacity, used_numa = self._numa_view(node, topo)
                alloc: dict[str, int] = {}
                req: dict[str, int] = {}
                for i in split:
                    for r, v in capacity.get(i, {}).items():
                        alloc[r] = alloc.get(r, 0) + v
                    for r, v in used_numa.get(i, {}).items():
                        req[r] = req.get(r, 0) + v
                if chosen:  # **[quirk]** upstream counts every CPU bound on the node here, whatever its NUMA node
                    req[CPU] = amplify(len(self.usage(node).cpus) * 1000, ratio)
                return strategy_score(self.most, self.resources, req, alloc, requests), False
        # no NUMA policy: the node's requested/allocatable, its cpuset-bound CPUs counted amplified
        # (scoreWithAmplifiedCPUs)
        requested = node.requested
        if ratio > 1 and requests.get(CPU, 0) > 0:
            bound = len(self.usage(node).cpus) * 1000
            requested = requested | {CPU: requested.get(CPU, 0) - bound + amplify(bound, ratio)}
        return strategy_score(self.most, self.resources, requested, node.allocatable, requests), True

    def score_vector(self, pod: JSON, index: NodeIndex) -> IntArray:
        """Exactly `score` for every node: the node-level strategy as numpy columns (kept per request shape between
        cycles, recomputed for the rows that changed), and `score` itself on the nodes where a NUMA policy or CPU
        binding makes it depend on the NUMA allocation."""
        n = len(index)
        requests = pod_requests(pod)
        if not any(requests.values()):
            return np.zeros(n, dtype=np.int64)
        s = self.spec(pod)
        self.sync(index)
        shape = tuple((r, requests.get(r, 0)) for r, _ in self.resources)
        node_level: IntArray = by_rows(self._row_cache, index.versions, shape,
                                       lambda rows: self._node_level_rows(requests, n, rows))
        exact: Any = self._policy_rows if not (s.policy or s.bind or s.problem) else range(n)
        if self._amplified_rows and requests.get(CPU, 0) > 0 and not isinstance(exact, range):
            exact = sorted(set(exact) | set(self._amplified_rows))
        if not exact:
            return node_level  # the cache's own array: the framework only reads it
        out = node_level.copy()
        for i in exact:
            out[i] = self._memo_score(pod, index.nodes[i])
        return out

    def _node_level_rows(self, requests: dict[str, int], n: int, rows: Any) -> IntArray:
        """strategy_score over the node's requested/allocatable for the given rows (vector form)."""
        if isinstance(rows, np.ndarray) and rows.size <= _FEW_ROWS:  # a cycle's placement: numpy costs more here
            nodes = self._row_index[0].nodes if self._row_index[0] is not None else []
            return np.array([strategy_score(self.most, self.resources, nodes[i].requested, nodes[i].allocatable,
                                            requests) for i in rows.tolist()], dtype=np.int64)
        c = self._columns
        acc: Any = 0
        wsum: Any = 0
        for r, w in self.resources:
            want = requests.get(r, 0)
            if want == 0 and r not in (CPU, MEMORY, "ephemeral-storage"):
                continue
            alloc = c.alloc[r][rows]
            acc = acc + allocation_score(c.req[r][rows] + want, alloc, self.most) * w
            wsum = wsum + (alloc > 0) * w
        if isinstance(wsum, int):  # nothing scored
            none: IntArray = np.zeros(n, dtype=np.int64)[rows]
            return none
        out: IntArray = np.where(wsum > 0, acc // np.maximum(wsum, 1), 0).astype(np.int64)
        return out

    def sync(self, index: NodeIndex) -> None:
        """Bring the columns, the policy-label rows and the score cache up to date (the framework's prepare and every
        vector call)."""
        mark = (index, index.epoch, index.log_start + len(index.log), self.resources)
        if self._synced == mark:
            return  # no row changed since (every change extends the index's log), nor the resources scored
        if self._row_index[0] is not index or self._row_index[1] != index.epoch:
            self._row_cache.clear()  # rows were reassigned
            self._row_index = (index, index.epoch)
        self._columns.sync(index, [r for r, _ in self.resources], False)
        self._track(index)
        self._synced = mark

    def _sync_flags(self, index: NodeIndex, changed: list[int] | None) -> None:
        """Rows whose node has a NUMA policy label (the only nodes where a plain pod's score is per NUMA node), and
        rows whose node carries a resource amplification annotation (where a plain pod's filter and score count
        cpuset-bound CPUs amplified); `changed`: the rows `_track` found changed (None: every row)."""
        if changed is None:
            self._policy_set, self._amplified_set = set(), set()
            for i, nd in enumerate(index.nodes):  # one pass: a cold start's cost
                if nd.labels.get(LABEL_NUMA_TOPOLOGY_POLICY):
                    self._policy_set.add(i)
                if ratio_text(nd.obj) is not None:
                    self._amplified_set.add(i)
        else:
            moved = _flag_rows(self._policy_set, changed, lambda i: bool(
                index.nodes[i].labels.get(LABEL_NUMA_TOPOLOGY_POLICY)))
            moved_amplified = _flag_rows(self._amplified_set, changed,
                                         lambda i: ratio_text(index.nodes[i].obj) is not None)
            if not (moved or moved_amplified):
                return
        self._policy_rows = sorted(self._policy_set)
        self._amplified_rows = sorted(self._amplified_set)

    # ---- Reserve --------------------------------------------------------------------------------------------

    def reserve(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> dict[str, str]:
        s = self.spec(pod)
        k = (key(pod), node.name)
        if k not in self._affinity and not s.bind:
            return {}
        self._track(node_index(cluster))
        if k not in self._affinity:
            why = self.filter(pod, node, cluster)
            if why is not None:
                raise Unschedulable(why)
        topo = self.topology(node)
        aligned = k in self._affinity
        got = self._allocate(s, node, topo, self._affinity.get(k), aligned, *self._preferred(pod, node))
        if got is None:
            raise Unschedulable(self._bind_policy(s, node, topo)[1] or ERR_NOT_ENOUGH_CPUS)
        chosen, split = got
        if not chosen and not split and not aligned:
            return {}
        # `{}` for an aligned pod asking no cpu/memory (upstream ResourceStatus: every field omitempty)
        return {ANNOTATION_RESOURCE_STATUS: encode_resource_status(chosen, split)}

    def _allocate(self, s: PodNUMA, node: NodeInfo, topo: NodeTopology, mask: frozenset[int] | None,
                  aligned: bool = True, prefer: frozenset[int] | None = None, restricted: bool = False
                  ) -> tuple[list[int], dict[int, dict[str, int]]] | None:
        """(the cpuset, cpu and memory per NUMA node) the pod gets inside `mask`; None when no cpuset fits. CPUs in
        `prefer` (an owner's reservation) are taken when they are enough, as upstream's default reservation policy;
        only they when the reservation is `restricted`."""
        chosen: list[int] = []
        if s.bind:
            bind_policy, why = self._bind_policy(s, node, topo)
            got = None
            if not why:
                free = self._free_cpus(node, topo, mask)
                strategy = node.labels.get(LABEL_NUMA_ALLOCATE_STRATEGY, "")
                if prefer:
                    got = take_cpus(topo.cpus, free & prefer, s.cpu // 1000, bind_policy, strategy)
                if got is None and not (prefer and restricted):
                    got = take_cpus(topo.cpus, free, s.cpu // 1000, bind_policy, strategy)
            if got is None:
                return None
            chosen = got
        return chosen, (self._split(s, node, topo, mask, chosen) if aligned and topo.numa else {})

    def _split(self, s: PodNUMA, node: NodeInfo, topo: NodeTopology, mask: frozenset[int] | None,
               chosen: list[int]) -> dict[int, dict[str, int]]:
        """cpu (milli) and memory (bytes) per NUMA node of the affinity: the chosen CPUs' nodes, else filled node by
        node; nodes given nothing are left out."""
        nodes = sorted(mask) if mask else sorted(topo.numa)
        capacity, used = self._numa_view(node, topo)
        per: dict[int, dict[str, int]] = {i: {} for i in nodes}
        if chosen:
            for c in chosen:
                i = topo.cpus[c].node
                per.setdefault(i, {})[CPU] = per.get(i, {}).get(CPU, 0) + 1000
        for r, want in ((CPU, 0 if chosen else s.cpu), (MEMORY, s.memory)):
            for i in nodes:
                if want <= 0:
                    break
                free = max(capacity.get(i, {}).get(r, 0) - used.get(i, {}).get(r, 0), 0)
                take = min(want, free) if i != nodes[-1] else want
                if take > 0:
                    per[i][r] = per[i].get(r, 0) + take
                    want -= take
        return {i: r for i, r in per.items() if r}

    def unreserve(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> None:
        self._affinity.pop((key(pod), node.name), None)


def _policy_label(node: NodeInfo) -> bool:
    """The node carries a NUMA topology policy label (NodeInfo.labels without the copy)."""
    return bool(((node.obj.get("metadata") or {}).get("labels") or {}).get(LABEL_NUMA_TOPOLOGY_POLICY))


def _flag_rows(rows: set[int], changed: Any, flagged: Callable[[int], bool]) -> bool:
    """Bring `rows` up to date for the changed rows; whether it moved."""
    moved = False
    for i in changed:
        if flagged(i):
            moved = moved or i not in rows
            rows.add(i)
        elif i in rows:
            rows.discard(i)
            moved = True
    return moved
