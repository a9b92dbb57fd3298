"""ClusterNetworkTopology trees and the offer-slot binpack solver for topology-aware gangs (spec §5)."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from apis.core.objects import JSON
from scheduler.cluster import Cluster

log = logging.getLogger(__name__)

CLUSTER_LAYER = "ClusterTopologyLayer"
NODE_LAYER = "NodeTopologyLayer"
PREFER_GATHER = "PreferGather"
MUST_GATHER = "MustGather"


class TopologyError(ValueError):
    """The ClusterNetworkTopology spec does not form a chain down to NodeTopologyLayer."""


@dataclass
class Domain:
    layer: str
    name: str
    parent: Domain | None = None
    children: list[Domain] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)  # every node below (a leaf: itself)
    offer_slot: int = 0
    existing: int = 0
    score: int = 0

    @property
    def is_node(self) -> bool:
        return self.layer == NODE_LAYER

    @property
    def chain(self) -> list[Domain]:
        """self, parent, grand-parent … (the ancestor walk of spec §5.3 step 7)."""
        out: list[Domain] = []
        d: Domain | None = self
        while d is not None:
            out.append(d)
            d = d.parent
        return out

    def __repr__(self) -> str:
        return f"{self.layer}/{self.name}"


@dataclass
class TopologyTree:
    layers: list[str]  # top layer first, NodeTopologyLayer last (ClusterTopologyLayer excluded)
    root: Domain
    leaves: dict[str, Domain]  # node name → its leaf

    def domains(self) -> list[Domain]:
        """Depth-first from the root (each domain before its children, children in name order): the order of
        upstream's makeStatus (tree_manager.go) and of the manual's `status.detailStatus`."""
        out: list[Domain] = []
        stack = [self.root]
        while stack:
            d = stack.pop()
            out.append(d)
            stack.extend(reversed(d.children))
        return out

    def layer_domains(self, layer: str) -> list[Domain]:
        return [d for d in self.domains() if d.layer == layer]

    def status(self) -> list[JSON]:
        """`status.detailStatus` as the scheduler maintains it: no entries for node leaves; child names sorted and
        omitted when the children are nodes."""
        out: list[JSON] = []
        for d in self.domains():
            if d.is_node:
                continue
            entry: JSON = {"topologyInfo": {"topologyLayer": d.layer, "topologyName": d.name}}
            if d.parent is not None:
                entry["parentTopologyInfo"] = {"topologyLayer": d.parent.layer, "topologyName": d.parent.name}
            child_layer = self.layers[self.layers.index(d.layer) + 1] if d.parent is not None else self.layers[0]
            entry["childTopologyLayer"] = child_layer
            if child_layer != NODE_LAYER:
                entry["childTopologyNames"] = sorted(c.name for c in d.children)
            entry["nodeNum"] = len(d.nodes)
            out.append(entry)
        return out


def layer_chain(cnt: JSON) -> list[tuple[str, list[str]]]:
    """(layer, labelKeys) from the top layer down to NodeTopologyLayer, following parentTopologyLayer."""
    specs = ((cnt.get("spec") or {}).get("networkTopologySpec")) or []
    by_parent: dict[str, JSON] = {}
    for s in specs:
        parent = str(s.get("parentTopologyLayer") or CLUSTER_LAYER)
        if parent in by_parent:
            raise TopologyError(f"two layers below {parent}")
        by_parent[parent] = s
    chain: list[tuple[str, list[str]]] = []
    current = CLUSTER_LAYER
    while current != NODE_LAYER:
        s = by_parent.get(current)
        if s is None:
            raise TopologyError(f"no layer below {current}: the chain must end at {NODE_LAYER}")
        current = str(s.get("topologyLayer"))
        chain.append((current, [str(k) for k in s.get("labelKey") or []]))
        if len(chain) > len(specs):
            raise TopologyError("cyclic parentTopologyLayer chain")
    return chain


def cluster_tree(cluster: Cluster) -> TopologyTree | None:
    """The tree of the ClusterNetworkTopology named `default` (the only one upstream reads), or None."""
    cnts = [t for t in cluster.topologies if (t.get("metadata") or {}).get("name") == "default"]
    if not cnts:
        return None
    try:
        return build_tree(cnts[0], {n: info.labels for n, info in cluster.nodes.items()})
    except TopologyError as e:
        log.warning("ClusterNetworkTopology default ignored: %s", e)
        return None


def build_tree(cnt: JSON, node_labels: Mapping[str, Mapping[str, str]]) -> TopologyTree:
    """The tree of `tree.go`: a node's name at a layer is its first non-empty label among labelKey. A node missing
    a label is dropped, except at the layer right above the nodes, where a virtual domain named after the node
    stands in."""
    chain = layer_chain(cnt)
    root = Domain(CLUSTER_LAYER, "")
    leaves: dict[str, Domain] = {}
    index: dict[tuple[int, tuple[str, ...]], Domain] = {}
    for node in sorted(node_labels):
        labels = node_labels[node]
        path: list[str] = []
        for depth, (layer, keys) in enumerate(chain):
            if layer == NODE_LAYER:
                path.append(node)
                break
            value = next((labels[k] for k in keys if labels.get(k)), None)
            if value is None and depth == len(chain) - 2:
                value = node
            if value is None:
                break
            path.append(value)
        if len(path) != len(chain):
            continue
        parent = root
        for depth, name in enumerate(path):
            ident = (depth, tuple(path[:depth + 1]))
            d = index.get(ident)
            if d is None:
                d = index[ident] = Domain(chain[depth][0], name, parent)
                parent.children.append(d)
            d.nodes.append(node)
            parent = d
        root.nodes.append(node)
        leaves[node] = parent
    for d in index.values():
        d.children.sort(key=lambda c: c.name)
    root.children.sort(key=lambda c: c.name)
    return TopologyTree([layer for layer, _ in chain], root, leaves)


@dataclass
class NetworkTopologySpec:
    must_gather_layer: str | None = None  # the deepest MustGather layer
    multiples: dict[str, int] = field(default_factory=dict)  # layer → podCountMultiple (> 1)
    rules: list[JSON] = field(default_factory=list)

    @classmethod
    def parse(cls, raw: str | None, layers: list[str]) -> NetworkTopologySpec:
        """`gang.scheduling.koordinator.sh/network-topology-spec`; invalid JSON ⇒ empty (PreferGather everywhere)."""
        spec = cls()
        try:
            doc: Any = json.loads(raw) if raw else {}
        except ValueError:
            doc = {}
        rules = doc.get("gatherStrategy") if isinstance(doc, dict) else None
        other = sorted(set(doc) - {"gatherStrategy"}) if isinstance(doc, dict) else []
        if other and raw not in _WARNED:
            # e.g. the v1.7 notes' {"topologyLayers": [...], "topologyPolicy": "BestEffort"}: not upstream's API
            _WARNED.add(str(raw))
            log.warning("network-topology-spec: %s not upstream fields (accepted: gatherStrategy); the job is "
                        "gathered as PreferGather on every layer (the smallest domain that fits)", ", ".join(other))
        for rule in rules if isinstance(rules, list) else []:
            if not isinstance(rule, dict):
                continue
            spec.rules.append(rule)
            layer = str(rule.get("layer") or "")
            multiple = rule.get("podCountMultiple")
            if isinstance(multiple, int) and multiple > 1:
                spec.multiples[layer] = multiple
            deeper = spec.must_gather_layer is None or (
                layer in layers and layers.index(layer) > layers.index(spec.must_gather_layer))
            if rule.get("strategy") == MUST_GATHER and layer in layers and deeper:
                spec.must_gather_layer = layer
        return spec


_WARNED: set[str] = set()  # network-topology-spec values already reported


NO_CLUSTER_NETWORK_TOPOLOGY = "no cluster network topology"  # upstream's ErrNoClusterNetworkTopology
NO_PLANNED_PODS = "no planned pods"  # upstream's ErrorNoPlannedNodes


class NoCandidate(Exception):
    """No topology domain can accommodate the job; the message follows upstream's wording."""


def _floor(value: int, multiple: int) -> int:
    return value - value % multiple if multiple > 1 else value


def aggregate(tree: TopologyTree, spec: NetworkTopologySpec, slots: Mapping[str, int],
               existing: Mapping[str, int], scores: Mapping[str, int]) -> None:
    def visit(d: Domain) -> None:
        if d.is_node:
            d.offer_slot = _floor(slots.get(d.name, 0), spec.multiples.get(d.layer, 1))
            d.existing, d.score = existing.get(d.name, 0), scores.get(d.name, 0)
            return
        for c in d.children:
            visit(c)
        d.offer_slot = _floor(sum(c.offer_slot for c in d.children), spec.multiples.get(d.layer, 1))
        d.existing = sum(c.existing for c in d.children)
        d.score = sum(c.score for c in d.children)
    visit(tree.root)


def _binpack_key(d: Domain) -> tuple[tuple[int, ...], tuple[int, ...], int, str]:
    chain = d.chain
    return (tuple(-x.existing for x in chain), tuple(x.offer_slot for x in chain), -d.score, d.name)


def _give(d: Domain, want: int, spec: NetworkTopologySpec, out: dict[str, int]) -> int:
    cap = _floor(min(d.offer_slot, want), spec.multiples.get(d.layer, 1))
    if cap <= 0:
        return 0
    if d.is_node:
        out[d.name] = out.get(d.name, 0) + cap
        return cap
    remaining = cap
    for c in sorted(d.children, key=lambda c: (-c.existing, -c.offer_slot, -c.score, c.name)):
        if remaining <= 0:
            break
        remaining -= _give(c, remaining, spec, out)
    return cap - remaining


def place_pods(tree: TopologyTree, spec: NetworkTopologySpec, desired: int, slots: Mapping[str, int],
               existing: Mapping[str, int] | None = None, scores: Mapping[str, int] | None = None,
               fit_error: str = "") -> tuple[Domain, list[tuple[str, int]]]:
    """`PlacePods` of network_topology_solver.go: the chosen domain and (node, pod count) in fill order.

    slots: node → OfferSlot (pods of the job that fit there alone); existing: node → pods with the same
    network-topology-selector; scores: node → Score (−preemption cost). Raises NoCandidate."""
    aggregate(tree, spec, slots, existing or {}, scores or {})
    roots = tree.layer_domains(spec.must_gather_layer) if spec.must_gather_layer else [tree.root]
    level = [d for d in roots if d.offer_slot >= desired]
    candidates = level
    while level:
        level = [c for d in level for c in d.children if c.offer_slot >= desired]
        if level:
            candidates = level
    for cand in sorted(candidates, key=_binpack_key):
        allotted: dict[str, int] = {}
        if _give(cand, desired, spec, allotted) >= desired:
            return cand, list(allotted.items())
    parts = ";".join(f"topology topologyNode {d.layer}/{d.name}: {d.offer_slot}"
                     for d in sorted(roots, key=lambda d: (d.layer, d.name)))
    msg = f"no candidate topology nodes can accommodate job, desiredOfferSlot: {desired}, {parts}"
    if fit_error:
        msg += f", {fit_error}"
    if spec.multiples:
        msg += "; podCountMultiple constraints: " + ", ".join(f"{k}={v}" for k, v in sorted(spec.multiples.items()))
    raise NoCandidate(msg)
