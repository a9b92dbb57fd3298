"""Network-topology-aware gang placement: the tree, offer slots, binpack, MustGather and job-level preemption."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from scheduler.cluster import Cluster, build_cluster
from scheduler.framework import Profile, Scheduler
from scheduler.gang.planner import plan_jobs
from scheduler.gang.topology import NetworkTopologySpec, NoCandidate, TopologyError, build_tree, place_pods
from scheduler.plugins.fit import NodeResourcesFit

CNT_CRD = "scheduling.koordinator.sh_clusternetworktopologies.yaml"
PG_CRD = "scheduling.sigs.k8s.io_podgroups.yaml"
SPINE, BLOCK = "network.topology.nvidia.com/spine", "network.topology.nvidia.com/block"
# the Koordinator network-topology user manual: 12 nodes of 8 CPU / 32 GiB
LAYOUT = {"spine-0": {"block-0": [0, 1, 2], "block-1": [3, 4]}, "spine-1": {"block-2": [5, 6], "block-3": [7, 8]},
          "spine-2": {"block-4": [9, 10, 11]}}


def cnt() -> dict[str, Any]:
    return {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "ClusterNetworkTopology",
            "metadata": {"name": "default"},
            "spec": {"networkTopologySpec": [
                {"labelKey": [SPINE], "topologyLayer": "SpineLayer"},
                {"labelKey": [BLOCK], "parentTopologyLayer": "SpineLayer", "topologyLayer": "BlockLayer"},
                {"parentTopologyLayer": "BlockLayer", "topologyLayer": "NodeTopologyLayer"}]}}


def nodes() -> list[dict[str, Any]]:
    out = []
    for spine, blocks in LAYOUT.items():
        for block, ids in blocks.items():
            out += [{"apiVersion": "v1", "kind": "Node",
                     "metadata": {"name": f"node-{i}", "labels": {SPINE: spine, BLOCK: block}},
                     "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}} for i in ids]
    return out


def whole_node_pod(name: str, *, group: str | None = None, index: int | None = None, node: str | None = None,
                   priority_class: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default", "labels": {}, "annotations": {}}
    if group:
        meta["labels"]["pod-group.scheduling.sigs.k8s.io"] = group
    if index is not None:
        meta["annotations"]["gang.scheduling.koordinator.sh/network-topology-index"] = str(index)
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "8", "memory": "32Gi"}}}]}
    if node:
        spec["nodeName"] = node
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
            "status": {"phase": "Running" if node else "Pending"}}


def podgroup(name: str, min_member: int, gather: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default", "annotations": {
                "gang.scheduling.koordinator.sh/network-topology-spec": json.dumps({"gatherStrategy": gather})}},
            "spec": {"minMember": min_member, "scheduleTimeoutSeconds": 300}}


def priority_classes() -> list[dict[str, Any]]:
    return [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high-priority"},
             "value": 1000000}, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                 "metadata": {"name": "low-priority"}, "value": 1000}]


def sched(cluster: Cluster) -> Scheduler:
    return Scheduler(cluster, Profile([NodeResourcesFit()], [], []))


def test_tree_status_matches_the_manual(validate_crd: Callable[[str, dict[str, Any]], None]) -> None:
    c = build_cluster([cnt(), *nodes()])
    tree = build_tree(c.topologies[0], {n: i.labels for n, i in c.nodes.items()})
    status = tree.status()
    obj = {**cnt(), "status": {"detailStatus": status}}
    validate_crd(CNT_CRD, obj)
    assert status[0] == {"topologyInfo": {"topologyLayer": "ClusterTopologyLayer", "topologyName": ""},
                         "childTopologyLayer": "SpineLayer", "childTopologyNames": ["spine-0", "spine-1", "spine-2"],
                         "nodeNum": 12}
    spine0 = next(s for s in status if s["topologyInfo"]["topologyName"] == "spine-0")
    assert spine0["childTopologyNames"] == ["block-0", "block-1"] and spine0["nodeNum"] == 5
    block0 = next(s for s in status if s["topologyInfo"]["topologyName"] == "block-0")
    assert block0["childTopologyLayer"] == "NodeTopologyLayer" and "childTopologyNames" not in block0
    assert block0["nodeNum"] == 3 and block0["parentTopologyInfo"]["topologyName"] == "spine-0"
    # the manual's example output lists the domains depth first (upstream makeStatus)
    assert [s["topologyInfo"]["topologyName"] for s in status] == [
        "", "spine-0", "block-0", "block-1", "spine-1", "block-2", "block-3", "spine-2", "block-4"]


def test_tree_virtual_block_and_dropped_nodes() -> None:
    labels = {"a": {SPINE: "s1"}, "b": {BLOCK: "b1"}, "c": {SPINE: "s1", BLOCK: "b1"}}
    tree = build_tree(cnt(), labels)
    assert sorted(tree.leaves) == ["a", "c"]  # b has no spine: dropped; a gets a virtual block named after it
    assert [repr(d) for d in tree.layer_domains("BlockLayer")] == ["BlockLayer/a", "BlockLayer/b1"]
    broken = cnt()
    broken["spec"]["networkTopologySpec"].pop(1)
    with pytest.raises(TopologyError):
        build_tree(broken, labels)


def test_prefer_gather_binpacks_into_spine_1(validate_crd: Callable[[str, dict[str, Any]], None]) -> None:
    pg = podgroup("topology-demo-job", 4, [{"layer": "BlockLayer", "strategy": "PreferGather"},
                                           {"layer": "SpineLayer", "strategy": "PreferGather"}])
    validate_crd(PG_CRD, pg)
    validate_crd(CNT_CRD, cnt())
    c = build_cluster([cnt(), pg, *nodes()])
    pods = [whole_node_pod(f"training-pod-{i}", group="topology-demo-job", index=i) for i in (3, 1, 0, 2)]
    placements, preemptions = plan_jobs(sched(c), pods)
    got = {p.pod: p.node for p in placements}
    assert got == {"default/training-pod-0": "node-5", "default/training-pod-1": "node-6",
                   "default/training-pod-2": "node-7", "default/training-pod-3": "node-8"}
    assert preemptions == []
    assert placements[0].annotations["internal.scheduling.koordinator.sh/bind-gang-group-id"] == \
        "default/topology-demo-job"


def test_must_gather_preempts_the_pod_on_node_5() -> None:
    pg = podgroup("high-priority-training", 4, [{"layer": "SpineLayer", "strategy": "MustGather"}])
    low = [whole_node_pod(f"low-priority-pod-{i}", node=f"node-{i}", priority_class="low-priority") for i in (0, 1, 5)]
    c = build_cluster([cnt(), pg, *nodes(), *priority_classes(), *low])
    pods = [whole_node_pod(f"hp-training-pod-{i}", group="high-priority-training", index=i,
                           priority_class="high-priority") for i in range(4)]
    placements, preemptions = plan_jobs(sched(c), pods)
    assert all(p.node is None for p in placements)
    assert placements[0].reason.startswith(
        "0/12 nodes are available: no candidate topology nodes can accommodate job, desiredOfferSlot: 4, "
        "topology topologyNode SpineLayer/spine-0: 3;topology topologyNode SpineLayer/spine-1: 3;"
        "topology topologyNode SpineLayer/spine-2: 3")
    assert preemptions == [{"pods": [f"default/hp-training-pod-{i}" for i in range(4)],
                            "victims": ["default/low-priority-pod-5"],
                            "nominatedNodes": {f"default/hp-training-pod-{i}": f"node-{i + 5}" for i in range(4)}}]
    assert "default/low-priority-pod-5" not in c.nodes["node-5"].pods
    assert "default/low-priority-pod-0" in c.nodes["node-0"].pods
    assert pods[0]["status"]["nominatedNodeName"] == "node-5"


def test_must_gather_without_preemption_or_priority_stays_pending() -> None:
    pg = podgroup("job", 4, [{"layer": "SpineLayer", "strategy": "MustGather"}])
    low = [whole_node_pod(f"low-{i}", node=f"node-{i}", priority_class="low-priority") for i in (0, 1, 5)]
    c = build_cluster([cnt(), pg, *nodes(), *priority_classes(), *low])
    pods = [whole_node_pod(f"w-{i}", group="job", index=i, priority_class="low-priority") for i in range(4)]
    placements, preemptions = plan_jobs(sched(c), pods)
    assert all(p.node is None for p in placements) and preemptions == []
    assert "preemption: no potential victims" in placements[0].reason
    c2 = build_cluster([cnt(), pg, *nodes(), *priority_classes(), *low])
    pods = [whole_node_pod(f"w-{i}", group="job", index=i, priority_class="high-priority") for i in range(4)]
    placements, preemptions = plan_jobs(sched(c2), pods, enable_preemption=False)
    assert all(p.node is None for p in placements) and preemptions == []
    assert sum(len(n.pods) for n in c2.nodes.values()) == 3  # nothing left assumed


def test_prefer_gather_spills_across_spines_when_needed() -> None:
    c = build_cluster([cnt(), podgroup("big", 6, []), *nodes()])
    pods = [whole_node_pod(f"p-{i}", group="big", index=i) for i in range(6)]
    placements, _ = plan_jobs(sched(c), pods)
    # no spine holds 6: the root gives the roomiest spine first, then the next
    assert [p.node for p in placements] == ["node-0", "node-1", "node-2", "node-3", "node-4", "node-5"]


def test_place_pods_multiples_and_message() -> None:
    tree = build_tree(cnt(), {n["metadata"]["name"]: n["metadata"]["labels"] for n in nodes()})
    slots = {f"node-{i}": 1 for i in range(12)}
    spec = NetworkTopologySpec.parse(json.dumps({"gatherStrategy": [
        {"layer": "BlockLayer", "strategy": "MustGather", "podCountMultiple": 2},
        {"layer": "SpineLayer", "strategy": "MustGather"}]}), tree.layers)
    assert spec.must_gather_layer == "BlockLayer" and spec.multiples == {"BlockLayer": 2}
    domain, allotted = place_pods(tree, spec, 2, slots)
    assert repr(domain) == "BlockLayer/block-4" and allotted == [("node-10", 1), ("node-11", 1)]
    with pytest.raises(NoCandidate, match=r"desiredOfferSlot: 3, topology topologyNode BlockLayer/block-0: 2;"
                                          r".*; podCountMultiple constraints: BlockLayer=2"):
        place_pods(tree, spec, 3, slots)


def test_place_pods_prefers_existing_selector_pods() -> None:
    tree = build_tree(cnt(), {n["metadata"]["name"]: n["metadata"]["labels"] for n in nodes()})
    slots = {f"node-{i}": 1 for i in range(12)}
    domain, allotted = place_pods(tree, NetworkTopologySpec(), 2, slots, existing={"node-10": 1})
    assert repr(domain) == "BlockLayer/block-4" and allotted[0] == ("node-10", 1)
    domain, _ = place_pods(tree, NetworkTopologySpec(), 2, slots)
    assert repr(domain) == "BlockLayer/block-2"  # tightest: 2-node block under the tightest spine
