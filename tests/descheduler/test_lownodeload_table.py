"""Upstream's TestLowNodeLoad (pkg/descheduler/framework/plugins/loadaware/low_node_load_test.go) restated as
end-to-end cases through `koord-descheduler simulate`: DefaultEvictor with default args as the evict and filter
plugin, LowNodeLoad with consecutiveAbnormalities 1 and nodeFit on, pod usage = pod requests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from deschedbuild import LOCAL_VOLUME, MIRROR, config, evicted, node, node_metrics, pod, protected_pods, simulate

CPU_PODS_30 = {"cpu": 30, "pods": 30}
CPU_PODS_50 = {"cpu": 50, "pods": 50}
FOO = "example.com/foo"
HIGH_PRIORITY = 10000
BATCH = {"koordinator.sh/priority-class": "koord-batch"}
SELECTOR_KEY = "datacenter"


@dataclass
class Case:
    name: str
    nodes: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    expected: int
    low: dict[str, float] = field(default_factory=lambda: dict(CPU_PODS_30))
    high: dict[str, float] = field(default_factory=lambda: dict(CPU_PODS_50))
    args: dict[str, Any] = field(default_factory=dict)
    pods_evicted: list[str] | None = None


def three_nodes(pods: tuple[int, int, int] = (9, 10, 10), n3_unschedulable: bool = True,
                **n1: Any) -> list[dict[str, Any]]:
    return [node("n1", 4000, 3000, pods[0], **n1), node("n2", 4000, 3000, pods[1]),
            node("n3", 4000, 3000, pods[2], unschedulable=n3_unschedulable)]


def standard(first_five: Callable[[int], dict[str, Any]] | None = None, memory: int = 0,
             p9: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """p1..p5 on n1 (ReplicaSet pods unless `first_five` builds them), the three protected pods on n1, p9 on n2."""
    five = [first_five(i) if first_five else pod(f"p{i}", 400, memory, "n1") for i in range(1, 6)]
    return [*five, *protected_pods(400, memory, "n1"), p9 or pod("p9", 400, memory, "n2")]


CASES = [
    Case("no evictable pods", three_nodes(),
         [*(pod(f"p{i}", 400, 0, "n1", owner="DaemonSet") for i in range(1, 5)),
          pod("p5", 400, 0, "n1", owner="Pod", annotations=dict(MIRROR), volumes=LOCAL_VOLUME),
          pod("p6", 400, 0, "n1", owner=None, namespace="kube-system", priority=2_000_000_000),
          pod("p9", 400, 0, "n2")], 0),
    Case("without priorities", three_nodes(), standard(), 4),
    Case("without priorities, but excluding namespaces", three_nodes(),
         standard(lambda i: pod(f"p{i}", 400, 0, "n1", owner=None, namespace="namespace1")), 0,
         args={"evictableNamespaces": {"exclude": ["namespace1"]}}),
    Case("without priorities, but include only default namespace", three_nodes(),
         standard(lambda i: pod(f"p{i}", 400, 0, "n1") if i <= 2 else
                  pod(f"p{i}", 400, 0, "n1", owner=None, namespace=f"namespace{i}")), 2,
         args={"evictableNamespaces": {"include": ["default"]}}, pods_evicted=["p1", "p2"]),
    Case("without priorities stop when memory capacity is depleted", three_nodes(),
         standard(memory=300, p9=pod("p9", 400, 2100, "n2")), 3),
    Case("with priorities", three_nodes(),
         [*(pod(f"p{i}", 400, 0, "n1", priority=HIGH_PRIORITY) for i in range(1, 5)),
          pod("p5", 400, 0, "n1", priority=0),
          pod("p6", 400, 0, "n1", owner="DaemonSet", priority=HIGH_PRIORITY),
          pod("p7", 400, 0, "n1", owner="Pod", priority=0, annotations=dict(MIRROR), volumes=LOCAL_VOLUME),
          pod("p8", 400, 0, "n1", owner=None, namespace="kube-system", priority=2_000_000_000),
          pod("p9", 400, 0, "n2")], 4),
    Case("without priorities evicting best-effort pods only", three_nodes(),
         standard(lambda i: pod(f"p{i}", 400, 0, "n1", best_effort=i != 3)), 4,
         pods_evicted=["p1", "p2", "p4", "p5"]),
    Case("with extended resource", [node("n1", 4000, 3000, 9, extended={FOO: 8}),
                                    node("n2", 4000, 3000, 10, extended={FOO: 8}),
                                    node("n3", 4000, 3000, 10, unschedulable=True)],
         [*(pod(f"p{i}", 0, 0, "n1", extended={FOO: 1}) for i in range(1, 6)),
          pod("p6", 0, 0, "n1", owner="Pod", extended={FOO: 1}),
          pod("p7", 0, 0, "n1", owner="Pod", extended={FOO: 1}, annotations=dict(MIRROR), volumes=LOCAL_VOLUME),
          pod("p8", 0, 0, "n1", owner=None, namespace="kube-system", priority=2_000_000_000, extended={FOO: 1}),
          pod("p9", 0, 0, "n2", extended={FOO: 1})], 3,
         low={"pods": 30, FOO: 30}, high={"pods": 50, FOO: 50}),
    Case("with extended resource in some of nodes",
         [node("n1", 4000, 3000, 9, extended={FOO: 8}), node("n2", 4000, 3000, 10),
          node("n3", 4000, 3000, 10, unschedulable=True)],
         [pod("p1", 0, 0, "n1", extended={FOO: 1}), pod("p9", 0, 0, "n2")], 0,
         low={"pods": 30, FOO: 30}, high={"pods": 50, FOO: 50}),
    Case("without priorities, but only other node is unschedulable",
         [node("n1", 4000, 3000, 9), node("n2", 4000, 3000, 10, unschedulable=True)],
         standard()[:-1], 0),
    Case("without priorities, but only other node doesn't match pod node selector for p4 and p5",
         [node("n1", 4000, 3000, 9), node("n2", 4000, 3000, 10, labels={SELECTOR_KEY: "east"})],
         standard(lambda i: pod(f"p{i}", 400, 0, "n1") if i <= 3 else
                  pod(f"p{i}", 400, 0, "n1", owner="Pod", nodeSelector={SELECTOR_KEY: "west"}))[:-1], 3),
    Case("without priorities, but only other node doesn't match pod node affinity for p4 and p5",
         [node("n1", 4000, 3000, 9), node("n2", 4000, 3000, 10, labels={SELECTOR_KEY: "east"})],
         standard(lambda i: pod(f"p{i}", 400, 0, "n1") if i <= 3 else
                  pod(f"p{i}", 400, 0, "n1", owner="Pod", affinity={"nodeAffinity": {
                      "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
                          {"key": SELECTOR_KEY, "operator": "In", "values": ["west"]}]}]}}}),
                  p9=pod("p9", 0, 0, "n2")), 3),
    Case("deviation thresholds", three_nodes(), standard(), 2, low={"cpu": 5, "pods": 5},
         high={"cpu": 5, "pods": 5}, args={"useDeviationThresholds": True}),
    Case("node && prod thresholds, node under thresholds, but prod over thresholds", three_nodes(),
         standard(lambda i: pod(f"p{i}", 400, 0, "n1", labels=dict(BATCH) if i >= 3 else None)), 2,
         high={"cpu": 90, "pods": 90},
         args={"prodLowThresholds": {"cpu": 20, "pods": 20}, "prodHighThresholds": {"cpu": 40, "pods": 40}}),
    Case("both node and prod usage is higher than thresholds, only node usage will be evicted", three_nodes(),
         standard(lambda i: pod(f"p{i}", 400, 0, "n1", labels=dict(BATCH) if i >= 4 else None)), 1,
         high={"cpu": 70, "pods": 80},
         args={"prodLowThresholds": {"cpu": 20, "pods": 20}, "prodHighThresholds": {"cpu": 40, "pods": 40}}),
    Case("support reschedule prod pod only", three_nodes(), standard(), 4,
         low={"cpu": 0, "pods": 0}, high={"cpu": 100, "pods": 100},
         args={"prodLowThresholds": {"cpu": 30, "pods": 30}, "prodHighThresholds": {"cpu": 50, "pods": 50}}),
    Case("both low resource used by high node, prod pods don't have enough resource to rebalance",
         three_nodes(pods=(20, 20, 20), n3_unschedulable=False),
         [*(pod(f"p{i}", 400, 0, "n1") for i in (1, 2, 3, 4, 5, 16, 17)), *protected_pods(400, 0, "n1"),
          pod("p9", 400, 0, "n2"), *(pod(f"p{i}", 400, 0, "n3") for i in range(10, 16))], 5,
         low={"cpu": 30, "pods": 50}, high={"cpu": 60, "pods": 80},
         args={"prodLowThresholds": {"cpu": 20, "pods": 30}, "prodHighThresholds": {"cpu": 30, "pods": 50}}),
    Case("node is always appropriately for node usage, prod pod rebalance successful",
         three_nodes(pods=(20, 20, 20), n3_unschedulable=False),
         [*standard(), pod("p10", 400, 0, "n3"), pod("p11", 400, 0, "n3")], 3,
         low={"cpu": 0, "pods": 0}, high={"cpu": 100, "pods": 100},
         args={"useDeviationThresholds": True, "prodLowThresholds": {"cpu": 10, "pods": 10},
               "prodHighThresholds": {"cpu": 10, "pods": 10}}),
    Case("stop prod pod eviction when the node recovers to normal.",
         [node("n1", 4000, 3000, 20), node("n2", 4000, 3000, 20)], standard(), 1,
         low={"cpu": 0, "pods": 0}, high={"cpu": 100, "pods": 100},
         args={"prodLowThresholds": {"cpu": 60, "pods": 60}, "prodHighThresholds": {"cpu": 70, "pods": 70}}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_low_node_load(case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    objects = [*case.nodes, *case.pods, *node_metrics(case.nodes, case.pods)]
    result = simulate(tmp_path, objects, config(case.low, case.high, **case.args), capsys)
    assert len(result["evictions"]) == case.expected, result
    if case.pods_evicted is not None:
        assert sorted(evicted(result)) == case.pods_evicted
    assert all(e["plugin"] == "LowNodeLoad" and e["reason"].startswith("node is overutilized, ")
               for e in result["evictions"])
    protected = {"p6", "p7", "p8"}
    assert protected.isdisjoint(evicted(result))
