"""Placement details checked against upstream's own rules: per-device scoring (deviceshare `scoring.go`), gang
"once satisfied" (coscheduling `gang_cache.go`), the Coscheduling score of network-topology-selector pods."""

from __future__ import annotations

import json
from typing import Any

from scheduler.cli import profile
from scheduler.cluster import build_cluster
from scheduler.config import parse_config
from scheduler.deviceshare.plugin import DeviceShare
from scheduler.framework import Scheduler
from scheduler.gang.planner import plan_jobs
from scheduler.gang.plugin import Coscheduling

ALLOCATED = "scheduling.koordinator.sh/device-allocated"
SELECTOR = "scheduling.koordinator.sh/network-topology-selector"


def gpu_device(name: str, gpus: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Device", "metadata": {"name": name},
            "spec": {"devices": [{"health": True, "id": f"GPU-{name}-{m}", "minor": m, "type": "gpu",
                                  "resources": {"koordinator.sh/gpu-core": "100",
                                                "koordinator.sh/gpu-memory-ratio": "100",
                                                "koordinator.sh/gpu-memory": "80Gi"}} for m in range(gpus)]}}


def node(name: str, gpus: int = 0, labels: dict[str, str] | None = None) -> dict[str, Any]:
    alloc = {"cpu": "64", "memory": "256Gi", "pods": "110"}
    if gpus:
        alloc |= {"nvidia.com/gpu": str(gpus), "koordinator.sh/gpu-core": str(100 * gpus),
                  "koordinator.sh/gpu-memory-ratio": str(100 * gpus), "koordinator.sh/gpu-memory": f"{80 * gpus}Gi"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}},
            "status": {"allocatable": alloc}}


def pod(name: str, requests: dict[str, Any], node_name: str = "", *, labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": requests}}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": labels or {},
                         "annotations": annotations or {}},
            "spec": spec, "status": {"phase": "Running" if node_name else "Pending"}}


def used_gpus(minors: list[int]) -> str:
    return json.dumps({"gpu": [{"minor": m, "resources": {"koordinator.sh/gpu-core": "100",
                                                         "koordinator.sh/gpu-memory-ratio": "100",
                                                         "koordinator.sh/gpu-memory": "80Gi"}} for m in minors]})


def test_device_score_uses_the_per_gpu_request() -> None:
    """Node a: 2 idle GPUs; node b: 8 GPUs, 2 used. `nvidia.com/gpu: 2` → a (upstream: per-GPU request on the
    node's summed totals: a = (50 + 100)/2 = 75, b = (62 + 75)/2 = 68; request × count would give a 50, b 62)."""
    busy = pod("busy", {"nvidia.com/gpu": 2}, "b", annotations={ALLOCATED: used_gpus([0, 1])})
    cluster = build_cluster([node("a", 2), gpu_device("a", 2), node("b", 8), gpu_device("b", 8), busy])
    sched = Scheduler(cluster, profile(None))
    placed = sched.schedule(pod("p", {"nvidia.com/gpu": 2}))
    assert placed.node == "a", placed
    share = sched.plugin("DeviceShare", DeviceShare)
    assert share is not None
    assert share.score(pod("q", {"nvidia.com/gpu": 2}), cluster.nodes["b"], cluster) == 68


def gang_pod(name: str, node_name: str = "") -> dict[str, Any]:
    return pod(name, {"cpu": "1"}, node_name, labels={"pod-group.scheduling.sigs.k8s.io": "job"})


def podgroup(min_member: int, policy: str | None = None) -> dict[str, Any]:
    annotations = {"gang.scheduling.koordinator.sh/match-policy": policy} if policy else {}
    return {"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "job", "namespace": "default", "annotations": annotations},
            "spec": {"minMember": min_member}}


def test_once_satisfied_after_any_bound_member() -> None:
    """minMember 3, one member already bound: the gang was satisfied once, so a single new member passes admission
    and Permit (gang_cache.go sets OnceResourceSatisfied on any bound pod) — not only once 3 are bound."""
    cluster = build_cluster([node("n1"), podgroup(3), gang_pod("w0", "n1")])
    placements, _ = plan_jobs(Scheduler(cluster, profile(None)), [gang_pod("w1")])
    assert placements[0].node == "n1", placements[0].reason


def test_other_policies_still_count_members() -> None:
    for policy, expect in (("only-waiting", None), ("waiting-and-running", None)):
        cluster = build_cluster([node("n1"), podgroup(3, policy), gang_pod("w0", "n1")])
        placements, _ = plan_jobs(Scheduler(cluster, profile(None)), [gang_pod("w1")])
        assert placements[0].node is expect, (policy, placements[0])
    cluster = build_cluster([node("n1"), podgroup(3, "waiting-and-running"), gang_pod("w0", "n1")])
    placements, _ = plan_jobs(Scheduler(cluster, profile(None)), [gang_pod("w1"), gang_pod("w2")])
    assert [p.node for p in placements] == ["n1", "n1"]  # 2 waiting + 1 running = 3


def test_gang_without_permit_places_members_alone() -> None:
    cfg = parse_config({"profiles": [{"plugins": {"permit": {"disabled": [{"name": "Coscheduling"}]}}}]})
    cluster = build_cluster([node("n1"), podgroup(5)])
    placements, _ = plan_jobs(Scheduler(cluster, profile(cfg)), [gang_pod("w1")])
    assert placements[0].node == "n1"


def cnt() -> dict[str, Any]:
    return {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "ClusterNetworkTopology",
            "metadata": {"name": "default"},
            "spec": {"networkTopologySpec": [
                {"labelKey": ["spine"], "topologyLayer": "SpineLayer"},
                {"labelKey": ["block"], "parentTopologyLayer": "SpineLayer", "topologyLayer": "BlockLayer"},
                {"parentTopologyLayer": "BlockLayer", "topologyLayer": "NodeTopologyLayer"}]}}


def test_selector_pods_are_scored_toward_their_topology() -> None:
    """A lone pod with a network-topology-selector goes next to the pods with the same selector: the node itself
    first, then its block, then its spine (upstream sortNodesByTopology); without the selector, elsewhere."""
    layout = {"n1": ("s1", "b1"), "n2": ("s1", "b1"), "n3": ("s1", "b2"), "n4": ("s2", "b3"), "n5": ("s2", "b3")}
    objects: list[dict[str, Any]] = [cnt(), *(node(n, labels={"spine": s, "block": b}) for n, (s, b) in
                                              layout.items())]
    sel = {SELECTOR: "job-a"}
    objects.append(pod("peer", {"cpu": "64"}, "n3", annotations=sel))  # n3 is full
    cluster = build_cluster(objects)
    sched = Scheduler(cluster, profile(None))
    cos = sched.plugin("Coscheduling", Coscheduling)
    assert cos is not None and cos in sched.profile.scorers and cos.weight == 1
    ranked = cos.ranking(pod("x", {"cpu": "1"}, annotations=sel), cluster)
    assert ranked["n3"] == 100  # has a peer itself
    assert ranked["n1"] > ranked["n4"] and ranked["n2"] > ranked["n4"]  # same spine as the peer
    placed = sched.schedule(pod("x", {"cpu": "1"}, annotations=sel))
    assert placed.node in ("n1", "n2")  # n3 does not fit: the peer's spine
    assert cos.score(pod("y", {"cpu": "1"}), cluster.nodes["n1"], cluster) == 0  # no selector: no opinion


def test_coscheduling_score_weight_and_disable() -> None:
    cfg = parse_config({"profiles": [{"plugins": {"score": {"enabled": [{"name": "Coscheduling", "weight": 3}]}}}]})
    scorers = profile(cfg).scorers
    assert [s.weight for s in scorers if s.name == "Coscheduling"] == [3]
    cfg = parse_config({"profiles": [{"plugins": {"score": {"disabled": [{"name": "Coscheduling"}]}}}]})
    made = profile(cfg)
    scorers, reservers = made.scorers, made.reservers
    assert "Coscheduling" not in [s.name for s in scorers]
    assert "Coscheduling" in [r.name for r in reservers]  # the gang switches are still read from it
