"""Facts read from the Node object alone are not recomputed for pods coming and going (NodeFacts objects_only,
NodeInfo.object_generation), and a node's pods of a kind are kept as they come and go (NodeInfo.pods_where): both
stay exactly what reading every node afresh gives, through every kind of change."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest

from apis.core.podaffinity import has_pod_affinity
from scheduler.cluster import NodeInfo, build_cluster
from scheduler.nodeindex import node_index
from scheduler.plugins import existingaffinity
from scheduler.plugins.existingaffinity import ExistingTerms
from scheduler.plugins.nodefacts import NodeFacts


def _taints(node: NodeInfo) -> tuple[str, ...]:
    return tuple(str(t.get("key")) for t in (node.obj.get("spec") or {}).get("taints") or [])


def _pod_count(node: NodeInfo) -> int:  # reads the pods: not a fact of the object
    return len(node.pods)


def _pod(rng: random.Random, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]}
    if rng.random() < 0.3:
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "a"}}, "topologyKey": "zone"}]}}
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "t"}, "spec": spec}


def _churn(seed: int, facts: list[NodeFacts[Any]], check: Any) -> None:
    """Random pod additions and removals, taints edited in place (then reported), Node objects replaced, nodes
    added and removed; `check(cluster, index)` after every step."""
    rng = random.Random(seed)
    cluster = build_cluster([{"kind": "Node", "metadata": {"name": f"n{i}"}, "spec": {},
                              "status": {"allocatable": {"cpu": "64", "pods": "110"}}} for i in range(8)])
    index = node_index(cluster)
    for f in facts:
        f.get(index)
    for step in range(300):
        names = sorted(cluster.nodes)
        node = cluster.nodes[rng.choice(names)]
        roll = rng.random()
        if roll < 0.5:
            node.add_pod(_pod(rng, f"p{step}"))
        elif roll < 0.75 and node.pods:
            node.remove_pod(rng.choice(sorted(node.pods)))
        elif roll < 0.85:
            node.obj.setdefault("spec", {})["taints"] = [{"key": f"k{step}", "effect": "NoSchedule"}]
            node.changed()  # edited in place, then reported
        elif roll < 0.92:
            node.obj = {**node.obj, "spec": {"taints": [] if rng.random() < 0.5 else [{"key": "x"}]}}
        elif roll < 0.96:
            fresh = copy.deepcopy(node.obj)
            fresh["metadata"]["name"] = f"m{step}"
            cluster.nodes[f"m{step}"] = NodeInfo(f"m{step}", fresh, {"cpu": 64000})
        elif len(names) > 2:
            cluster.nodes.pop(rng.choice(names))
        index = node_index(cluster)
        check(cluster, index)


@pytest.mark.parametrize("seed", range(3))
def test_object_facts_match_a_fresh_reading(seed: int) -> None:
    taints = NodeFacts(_taints, objects_only=True)

    def check(cluster: Any, index: Any) -> None:
        got = taints.get(index)
        assert got == [_taints(n) for n in index.nodes]
        assert taints.truthy == sum(1 for n in index.nodes if _taints(n))
        for n in index.nodes:  # the node's pods stating pod affinity, kept as they come and go
            assert dict(n.pods_where("affinity", has_pod_affinity)) == {
                k: p for k, p in n.pods.items() if has_pod_affinity(p)}
    _churn(seed, [taints], check)


def test_a_fact_of_the_pods_declared_of_the_object_goes_stale() -> None:
    """The check above can fail: a fact that reads the pods, wrongly declared objects_only, is not refreshed."""
    counts = NodeFacts(_pod_count, objects_only=True)
    stale: list[bool] = []

    def check(cluster: Any, index: Any) -> None:
        stale.append(counts.get(index) != [len(n.pods) for n in index.nodes])
    _churn(0, [counts], check)
    assert any(stale)


def test_replacing_the_pods_resets_the_kept_kinds() -> None:
    cluster = build_cluster([{"kind": "Node", "metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "8"}}}])
    node = cluster.nodes["n"]
    rng = random.Random(1)
    pods = [_pod(rng, f"p{i}") for i in range(10)]
    for p in pods[:5]:
        node.add_pod(p)
    assert set(node.pods_where("affinity", has_pod_affinity)) == {f"t/p{i}" for i in range(5)
                                                                   if has_pod_affinity(pods[i])}
    node.pods = {f"t/{p['metadata']['name']}": p for p in pods[5:]}
    assert set(node.pods_where("affinity", has_pod_affinity)) == {f"t/p{i}" for i in range(5, 10)
                                                                   if has_pod_affinity(pods[i])}


def _terms(existing: ExistingTerms) -> dict[Any, dict[int, int]]:
    return {k: dict(v) for k, v in existing.by_term.items()}


@pytest.mark.parametrize("seed", range(2))
def test_existing_terms_skip_only_while_no_stating_pod_moved(seed: int) -> None:
    """InterPodAffinity's existing terms answer at once while no node's pods stating terms changed
    (cluster.subset_changes), and always equal a fresh reading of every node."""
    kept = ExistingTerms()

    def check(cluster: Any, index: Any) -> None:
        assert _terms(kept.refresh(index)) == _terms(ExistingTerms().refresh(index))
    _churn(seed, [], check)


def test_existing_terms_without_the_counter_go_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: with the counter frozen, pods stating terms that land are missed."""
    monkeypatch.setattr(existingaffinity, "subset_changes", lambda: 0)
    kept = ExistingTerms()
    stale: list[bool] = []

    def check(cluster: Any, index: Any) -> None:
        stale.append(_terms(kept.refresh(index)) != _terms(ExistingTerms().refresh(index)))
    _churn(0, [], check)
    assert any(stale)
