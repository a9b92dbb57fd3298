"""Upstream's loadaware/utilization_util_test.go restated: usage percentages, node order, the order of pods on an
overloaded node, no targets → no filtering, and a target that would exceed its thresholds refused with its usage
unchanged."""

from __future__ import annotations

import math
from typing import Any

from scheduler.cluster import NodeInfo
from scheduler.descheduler.config.lownodeload_args import default_args
from scheduler.descheduler.plugins.lownodeload import usage as u
from scheduler.descheduler.plugins.lownodeload.plugin import LowNodeLoad, TargetRoom
from scheduler.descheduler.plugins.lownodeload.sorting import excess_and_weights, sort_nodes, sort_pods

GI = 1 << 30
CAPACITY = {"cpu": 32000, "memory": 32 * GI, "pods": 110}


def node_usage(name: str, used: dict[str, int], capacity: dict[str, int] | None = None,
               labels: dict[str, str] | None = None, high: dict[str, int] | None = None) -> u.NodeUsage:
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}},
                           "status": {"allocatable": {k: str(v) if k != "cpu" else f"{v}m"
                                                      for k, v in (capacity or CAPACITY).items()}}}
    nu = u.NodeUsage(NodeInfo(name, obj, dict(capacity or CAPACITY)), dict(capacity or CAPACITY), [], [], dict(used),
                     {}, {})
    nu.thresholds.high = dict(high or {})
    return nu


def test_resource_usage_percentages() -> None:
    n = node_usage("n", {"cpu": 1220, "memory": 3038982964, "pods": 11},
                   {"cpu": 1930, "memory": 3287692 * 1024, "pods": 29})
    got = {r: math.floor(v) for r, v in u.usage_percents(n, prod=False).items()}
    assert got == {"cpu": 63, "memory": 90, "pods": 37}


def test_sort_nodes_by_usage_descending() -> None:
    n1 = node_usage("node1", {"cpu": 1730, "memory": 3038982964, "pods": 25})
    n2 = node_usage("node2", {"cpu": 1220, "memory": 3038982964, "pods": 11})
    n3 = node_usage("node3", {"cpu": 1530, "memory": 5038982964, "pods": 20})
    ordered = sort_nodes([n1, n2, n3], {"cpu": 1, "memory": 1, "pods": 1}, prod=False)
    assert [n.name for n in ordered] == ["node3", "node1", "node2"]


def test_sort_pods_on_one_overloaded_node() -> None:
    """Only cpu is over its threshold (30 of 20 cores): pods by how well they cover the 10-core excess."""
    src = node_usage("node0", {"cpu": 30000, "memory": 998244353}, high={"cpu": 20000, "memory": 27487790694})
    metrics = {"ns/pod1": {"cpu": 1000, "memory": 27487790694}, "ns/pod2": {"cpu": 3000, "memory": 27487790694},
               "ns/pod3": {"cpu": 2000, "memory": 1}, "ns/pod4": {"cpu": 4000, "memory": 1}}
    pods = [{"metadata": {"name": f"pod{i}", "namespace": "ns"}, "spec": {"nodeName": "node0"}} for i in range(1, 5)]
    excess, weights = excess_and_weights(src.usage, src.thresholds.high, {"cpu": 1, "memory": 1})
    assert excess == {"cpu": 10000} and weights == {"cpu": 1}
    assert [p["metadata"]["name"] for p in sort_pods(pods, excess, metrics, weights)] == ["pod4", "pod2", "pod3",
                                                                                            "pod1"]


class CountingHandle:
    def __init__(self) -> None:
        self.filter_calls = 0

    def evictor(self) -> CountingHandle:
        return self

    def filter(self, pod: dict[str, Any]) -> bool:
        self.filter_calls += 1
        return True

    def evict(self, pod: dict[str, Any], options: Any) -> bool:
        raise AssertionError("eviction should not be attempted when there are no target nodes")


def test_balance_skips_when_no_target_nodes() -> None:
    handle = CountingHandle()
    plugin = LowNodeLoad(default_args(), handle)  # type: ignore[arg-type]
    src = node_usage("source-node", {"cpu": 2500}, high={"cpu": 3000})
    src.all_pods = [{"metadata": {"name": "test-pod", "namespace": "default"}, "spec": {"nodeName": "source-node"}}]
    plugin.balance_pass(plugin.args.node_pools[0], [src], [], {"cpu": 0}, False, lambda n, p: "", 0.0)
    assert handle.filter_calls == 0


def test_target_exceeding_its_threshold_is_refused_and_unchanged() -> None:
    """TestPodFitsAnyNodeWithThreshold: the node matches the pod's affinity, but 1 + 1.5 cores > 2."""
    target = node_usage("test-node-1", {"cpu": 1000, "memory": 2_000_000_000}, labels={"test-node-type": "A"},
                        high={"cpu": 2000, "memory": 3_000_000_000})
    pod = {"metadata": {"name": "test-pod-1", "namespace": "default"},
           "spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
               "nodeSelectorTerms": [{"matchExpressions": [{"key": "test-node-type", "operator": "In",
                                                            "values": ["A"]}]}]}}}}}
    room = TargetRoom([target], prod=False)
    assert not room.place(pod, {"cpu": 1500, "memory": 1_500_000_000})
    assert target.usage == {"cpu": 1000, "memory": 2_000_000_000}
    assert room.place(pod, {"cpu": 900, "memory": 900_000_000})  # one that fits stays added
    assert target.usage == {"cpu": 1900, "memory": 2_900_000_000}
    assert not room.place(pod, {"cpu": 200, "memory": 1})
