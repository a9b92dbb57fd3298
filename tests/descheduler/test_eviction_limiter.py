"""The per-round eviction caps (upstream evictions/eviction_limiter_test.go), and end to end:
maxNoOfPodsToEvictPerNode/PerNamespace/Total over LowNodeLoad's worked example (TestMaxEvictionTotal), the
framework dry run (evict plugin skipped, limiter still counting) and LowNodeLoad's own dry run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scheduler.descheduler.limiter import (
    PER_NAMESPACE_REACHED,
    PER_NODE_REACHED,
    TOTAL_REACHED,
    Limiter,
)

from deschedbuild import config, node, node_metrics, pod, protected_pods, simulate


def p(namespace: str, name: str, node_name: str) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name}, "spec": {"nodeName": node_name}}


@pytest.mark.parametrize(("limits", "seq", "allowed", "nodes", "namespaces", "total"), [
    ((None, None, None), [p("default", "pod-1", "node-1"), p("kube-system", "pod-2", "node-2")], [True, True],
     {"node-1": 1, "node-2": 1}, {"default": 1, "kube-system": 1}, 2),
    ((1, None, None), [p("default", "pod-1", "node-1"), p("default", "pod-2", "node-1")], [True, False],
     {"node-1": 1}, {"default": 1}, 1),
    ((None, 1, None), [p("default", "pod-1", "node-1"), p("default", "pod-2", "node-2")], [True, False],
     {"node-1": 1, "node-2": 0}, {"default": 1}, 1),
    ((None, None, 2), [p("default", "pod-1", "node-1"), p("default", "pod-2", "node-1"),
                       p("kube-system", "pod-3", "node-2")], [True, True, False],
     {"node-1": 2, "node-2": 0}, {"default": 2, "kube-system": 0}, 2),
    ((1, 1, 2), [p("default", "pod-1", "node-1"), p("default", "pod-2", "node-1"), p("default", "pod-3", "node-2"),
                 p("kube-system", "pod-4", "node-1")], [True, False, False, False], {"node-1": 1}, {"default": 1}, 1),
])
def test_limiter_table(limits: tuple[int | None, int | None, int | None], seq: list[dict[str, Any]],
                       allowed: list[bool], nodes: dict[str, int], namespaces: dict[str, int], total: int) -> None:
    limiter = Limiter(*limits)
    for pod_, want in zip(seq, allowed, strict=True):
        ok = limiter.allowed(pod_) is None
        assert ok is want
        if ok:
            limiter.done(pod_)
    assert {n: limiter.node_count(n) for n in nodes} == nodes
    assert {ns: limiter.namespace_count(ns) for ns in namespaces} == namespaces
    assert limiter.total() == total


def test_refusals_name_the_cap_and_reset_clears() -> None:
    limiter = Limiter(1, 5, 10)
    limiter.done(p("a", "x", "n1"))
    assert limiter.allowed(p("a", "y", "n1")) == PER_NODE_REACHED
    assert limiter.node_limit_exceeded("n1") and not limiter.node_limit_exceeded("n2")
    assert Limiter(None, 1).allowed(p("a", "y", "n1")) is None
    ns = Limiter(None, 1)
    ns.done(p("a", "x", "n1"))
    assert ns.allowed(p("a", "y", "n2")) == PER_NAMESPACE_REACHED and ns.namespace_limit_exceeded("a")
    tot = Limiter(None, None, 1)
    tot.done(p("a", "x", "n1"))
    assert tot.allowed(p("b", "y", "n2")) == TOTAL_REACHED
    tot.reset()
    assert tot.allowed(p("b", "y", "n2")) is None and tot.total() == 0
    unbound = Limiter(0)  # a pod without a node is not held to the per-node cap
    assert unbound.allowed(p("a", "x", "")) is None


def worked_example() -> list[dict[str, Any]]:
    nodes = [node("n1", 4000, 3000, 9), node("n2", 4000, 3000, 10), node("n3", 4000, 3000, 10, unschedulable=True)]
    pods = [*(pod(f"p{i}", 400, 0, "n1", namespace="a" if i <= 2 else "b") for i in range(1, 6)),
            *protected_pods(400, 0, "n1"), pod("p9", 400, 0, "n2")]
    return [*nodes, *pods, *node_metrics(nodes, pods)]


@pytest.mark.parametrize(("top", "expected"), [
    ({}, 4),
    ({"maxNoOfPodsToEvictTotal": 1}, 1),  # TestMaxEvictionTotal
    ({"maxNoOfPodsToEvictPerNode": 2}, 2),
    ({"maxNoOfPodsToEvictPerNamespace": 1}, 2),  # one of namespace a, one of namespace b
    ({"dryRun": True}, 4),  # the evict plugin is skipped; the limiter and the record still count
    ({"dryRun": True, "maxNoOfPodsToEvictTotal": 3}, 3),
])
def test_caps_end_to_end(top: dict[str, Any], expected: int, tmp_path: Path,
                         capsys: pytest.CaptureFixture[str]) -> None:
    result = simulate(tmp_path, worked_example(), config({"cpu": 30, "pods": 30}, {"cpu": 50, "pods": 50}, top=top),
                      capsys)
    assert len(result["evictions"]) == expected
    if "maxNoOfPodsToEvictPerNamespace" in top:
        assert sorted(e["namespace"] for e in result["evictions"]) == ["a", "b"]


def test_lownodeload_dry_run_evicts_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """LowNodeLoadArgs.dryRun: no Evict call at all (budgets still spent)."""
    result = simulate(tmp_path, worked_example(),
                      config({"cpu": 30, "pods": 30}, {"cpu": 50, "pods": 50}, dryRun=True), capsys)
    assert result["evictions"] == []
    assert result["nodes"]["__default_node_pool__"]["n1"]["class"] == "high"
