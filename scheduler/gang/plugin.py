"""The Coscheduling plugin's per-pod part: its Score for pods carrying a network-topology-selector.

Upstream `coscheduling/core/network_topology_workflow.go` (PreScore, sortNodesByTopology, Score) and the plugin's
NormalizeScore (DefaultNormalizeScore, reversed): candidate nodes are ranked by the pods already there with the same
selector — compared at the node, then its parent domain, and so on up — then by the fewest offer slots (one per
node) up the same chain, then by name; the first node scores 100, the last 0. The gang parts (admission, Permit,
job preemption) live in planner.py and read their switches from here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from apis.core.objects import JSON
from apis.scheduling.gang import ANNOTATION_NETWORK_TOPOLOGY_SELECTOR, MATCH_POLICY_ONCE_SATISFIED
from scheduler.cluster import Cluster, NodeInfo
from scheduler.gang.model import collect_gangs, gang_groups, gang_id_of, pod_priority
from scheduler.gang.queuesort import QueueState, coscheduling_order
from scheduler.gang.topology import Domain, NetworkTopologySpec, TopologyTree, aggregate, cluster_tree
from scheduler.nodeindex import IntArray, NodeIndex

NAME = "Coscheduling"


def _selector(pod: JSON) -> str:
    return str(((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_NETWORK_TOPOLOGY_SELECTOR) or "")


class Coscheduling:
    """Settings of the gang planner (which extension points run, CoschedulingArgs) and the topology Score."""

    name = NAME

    def __init__(self, args: object = None, weight: int = 1, *, admission: bool = True, permit: bool = True,
                 prebind: bool = True, preemption: bool = True, aware_network_topology: bool = True,
                 topology_manager: bool = True,
                 match_policy: str = MATCH_POLICY_ONCE_SATISFIED) -> None:
        self.args = args
        self.weight = weight
        self.admission, self.permit, self.preemption = admission, permit, preemption
        # PreBind writes (or removes) the bind-gang annotations only where the profile enables it there: the v1.7
        # chart does not, v1.8's does (coscheduling.go PreBind)
        self.prebind = prebind
        self.aware_network_topology = aware_network_topology
        # --enable-network-topology-manager: without the manager no tree snapshot exists and a gang carrying a
        # network-topology-spec is refused (framework_extender_factory.go, coscheduling/core/core.go)
        self.topology_manager = topology_manager
        self.match_policy = match_policy
        self._tree: tuple[tuple[int, int, int], TopologyTree | None] | None = None
        self._ranked: tuple[Any, dict[str, int]] | None = None  # (pod, node → score) of the current pod

    def order(self, pods: list[JSON], cluster: Cluster, state: QueueState | None = None) -> list[JSON]:
        """queueSort (v1.5/v1.6 enable Coscheduling there): its Less over the pending pods."""
        groups = gang_groups(collect_gangs(pods, cluster))
        return coscheduling_order(pods, lambda p: pod_priority(p, cluster), state,
                                  lambda p: groups[str(gang_id_of(p))].id if gang_id_of(p) in groups else "")

    def tree(self, cluster: Cluster) -> TopologyTree | None:
        """The manager's snapshot of ClusterNetworkTopology `default`; None without the manager or the object."""
        if not self.topology_manager:
            return None
        stamp = (id(cluster), id(cluster.topologies[0]) if cluster.topologies else 0,
                 getattr(cluster.nodes, "version", len(cluster.nodes)))
        if self._tree is None or self._tree[0] != stamp:
            self._tree = (stamp, cluster_tree(cluster))
        return self._tree[1]

    def ranking(self, pod: JSON, cluster: Cluster) -> dict[str, int]:
        """node → normalised score (0..100) for a pod with a selector; empty without one or without a tree."""
        if self._ranked is not None and self._ranked[0] is pod:
            return self._ranked[1]
        selector = _selector(pod)
        tree = self.tree(cluster) if selector else None
        scores: dict[str, int] = {}
        if tree is not None:
            existing = {name: sum(1 for p in info.pods.values() if _selector(p) == selector)
                        for name, info in cluster.nodes.items() if name in tree.leaves}
            aggregate(tree, NetworkTopologySpec(), dict.fromkeys(tree.leaves, 1), existing, {})

            def rank(leaf: Domain) -> tuple[tuple[int, ...], tuple[int, ...], str]:
                chain = leaf.chain[:-1]  # up to, not including, the cluster root (the same for every node)
                return tuple(-d.existing for d in chain), tuple(d.offer_slot for d in chain), leaf.name

            ordered = sorted(tree.leaves.values(), key=rank)
            top = max(len(ordered) - 1, 1)
            scores = {leaf.name: 100 - 100 * i // top for i, leaf in enumerate(ordered)}
        self._ranked = (pod, scores)
        return scores

    def quiet(self, pod: JSON, index: NodeIndex) -> int | None:
        """No network-topology selector: every node scores 0 (scheduler.interfaces' QuietPlugin)."""
        return None if _selector(pod) else 0

    def score(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> int:
        return self.ranking(pod, cluster).get(node.name, 0) if _selector(pod) else 0

    def score_vector(self, pod: JSON, index: NodeIndex) -> IntArray | int:
        if not _selector(pod):
            return 0  # the same on every node
        ranked = self.ranking(pod, index.cluster)
        return np.array([ranked.get(name, 0) for name in index.names], dtype=np.int64)

    def reserve(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> dict[str, str]:
        return {}  # the gang bookkeeping of Reserve/Permit is the planner's (whole units)

    def unreserve(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> None:
        return None
