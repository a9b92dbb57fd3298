"""NodeResourcesFitPlus scoring (spec §3): per-resource Most/LeastAllocated, non-zero cpu/memory accounting."""

from __future__ import annotations

from typing import Any

import pytest

from apis.core.errors import InvalidInput
from scheduler.cluster import build_cluster
from scheduler.plugins.fitplus import FitPlusArgs, NodeResourcesFitPlus, node_nonzero, nonzero_requests

MI = 1024**2


def node(**alloc: str) -> dict[str, Any]:
    return {"kind": "Node", "metadata": {"name": "n1"}, "status": {"allocatable": alloc}}


def pod(name: str, node_name: str | None = None, **req: str) -> dict[str, Any]:
    res = {"requests": dict(req)} if req else {}
    p: dict[str, Any] = {"kind": "Pod", "metadata": {"name": name, "namespace": "d"},
                         "spec": {"containers": [{"name": "c", "resources": res}]}}
    if node_name:
        p["spec"]["nodeName"] = node_name
    return p


def args(**res: tuple[str, int]) -> FitPlusArgs:
    names = {"nvidia_com_gpu": "nvidia.com/gpu", "example_com_foo": "example.com/foo"}
    return FitPlusArgs.from_dict({"resources": {names.get(k, k): {"type": t, "weight": w}
                                                for k, (t, w) in res.items()}})


def test_least_and_most_allocated() -> None:
    c = build_cluster([node(cpu="10", memory="10Gi"), pod("a", "n1", cpu="4", memory="2Gi")])
    n = c.nodes["n1"]
    least = NodeResourcesFitPlus(args(cpu=("LeastAllocated", 1)))
    assert least.score(pod("p", cpu="1"), n, c) == 50  # (10000 − 5000)·100/10000
    most = NodeResourcesFitPlus(args(cpu=("MostAllocated", 1)))
    assert most.score(pod("p", cpu="1"), n, c) == 50
    both = NodeResourcesFitPlus(args(cpu=("MostAllocated", 3), memory=("LeastAllocated", 1)))
    # cpu most 50 ×3, memory least (10Gi − 3Gi)/10Gi = 70 ×1
    assert both.score(pod("p", cpu="1", memory="1Gi"), n, c) == (50 * 3 + 70) // 4


def test_nonzero_accounting_for_cpu_and_memory() -> None:
    assert nonzero_requests(pod("x")) == {"cpu": 100, "memory": 200 * MI}
    c = build_cluster([node(cpu="1", memory="1000Mi"), pod("a", "n1")])
    n = c.nodes["n1"]
    plugin = NodeResourcesFitPlus(args(cpu=("MostAllocated", 1)))
    # existing pod without requests counts 100m; incoming 300m ⇒ 400/1000
    assert plugin.score(pod("p", cpu="300m"), n, c) == 40


def test_extended_resources_and_edge_cases() -> None:
    c = build_cluster([node(cpu="8", **{"nvidia.com/gpu": "8"}), pod("g", "n1", **{"nvidia.com/gpu": "2"})])
    n = c.nodes["n1"]
    plugin = NodeResourcesFitPlus(args(nvidia_com_gpu=("MostAllocated", 2)))
    assert plugin.score(pod("p", **{"nvidia.com/gpu": "2"}), n, c) == 50
    assert plugin.score(pod("p", cpu="1"), n, c) == 100  # no configured resource requested
    over = NodeResourcesFitPlus(args(nvidia_com_gpu=("LeastAllocated", 1)))
    assert over.score(pod("p", **{"nvidia.com/gpu": "7"}), n, c) == 0  # req > cap
    zero = NodeResourcesFitPlus(args(cpu=("MostAllocated", 1), example_com_foo=("MostAllocated", 1)))
    assert zero.score(pod("p", cpu="4", **{"example.com/foo": "1"}), n, c) == (50 + 0) // 2  # cap 0 ⇒ 0


def test_args_validation() -> None:
    with pytest.raises(InvalidInput):
        FitPlusArgs.from_dict({"resources": {"cpu": {"type": "Balanced", "weight": 1}}})
    with pytest.raises(InvalidInput):
        FitPlusArgs.from_dict({"resource": {}})


def test_a_pod_replaced_under_its_key_counts_with_its_new_requests() -> None:
    """The node's non-zero sum follows the node's changes, not its pod count: a pod deleted and re-created under
    the same name with other requests is scored with the new ones."""
    c = build_cluster([node(cpu="10", memory="10Gi"), pod("a", "n1", cpu="1", memory="1Gi")])
    n = c.nodes["n1"]
    least = NodeResourcesFitPlus(args(cpu=("LeastAllocated", 1)))
    assert least.score(pod("p", cpu="1"), n, c) == 80  # (10000 − 2000)·100/10000
    n.remove_pod("d/a")
    n.add_pod(pod("a", "n1", cpu="6", memory="1Gi"))
    assert least.score(pod("p", cpu="1"), n, c) == 30


def test_the_non_zero_sum_keeps_only_the_pods_the_node_has() -> None:
    """Under churn (the extender's long-lived nodes) what is kept per pod is the node's pods, no more."""
    c = build_cluster([node(cpu="100", memory="100Gi")])
    n = c.nodes["n1"]
    plugin = NodeResourcesFitPlus(args(cpu=("LeastAllocated", 1)))
    for i in range(200):
        n.add_pod(pod(f"p{i}", "n1", cpu="100m"))
        plugin.score(pod("incoming", cpu="1"), n, c)
        if i >= 3:
            n.remove_pod(f"d/p{i - 3}")
    kept = n.derived("nonzero-requests", node_nonzero)
    assert set(kept.by_pod) == set(n.pods) and len(n.pods) == 3
    assert kept.total == {"cpu": 300, "memory": 3 * 200 * MI}
