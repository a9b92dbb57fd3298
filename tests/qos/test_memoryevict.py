"""BEMemoryEvict: upstream's memory_evict_test.go cases restated, the config checks, the NodeSLO gate, the order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from apis.slo.config import spec_from_merged
from apis.slo.decode import nodeslo_config
from koordlet.health import Health
from koordlet.host.driver import CgroupDriver
from koordlet.metriccache import MetricCache
from koordlet.qos import memoryevict
from koordlet.qos.eviction import EvictionPlan
from koordlet.qos.state import QoSState
from koordlet.states.model import PodMeta
from koordlet.states.pods import pod_meta

from simhost import SimHost, make_pod

T0 = 1_700_000_000_000
G = 10**9


def pod(name: str, qos: str | None, priority: int | None) -> PodMeta:
    labels = {"koordinator.sh/qosClass": qos} if qos else None
    return pod_meta(make_pod(name, f"uid-{name}", labels=labels, priority=priority), CgroupDriver.CGROUPFS, Health())


def node(memory: str = "120G", cpu: str = "80") -> dict[str, Any]:
    return {"metadata": {"name": "test-node"}, "status": {"capacity": {"cpu": cpu, "memory": memory},
                                                           "allocatable": {"cpu": cpu, "memory": memory}}}


def upstream_pods() -> list[PodMeta]:
    """createMemoryEvictTestPod's six pods: LSR, LS, no class and three BE."""
    return [pod("test_lsr_pod", "LSR", 1000), pod("test_ls_pod", "LS", 500), pod("test_noqos_pod", None, 100),
            pod("test_be_pod_priority100_1", "BE", 100), pod("test_be_pod_priority100_2", "BE", 100),
            pod("test_be_pod_priority120", "BE", 120)]


UPSTREAM_MEMORY = {"test_lsr_pod": 40 * G, "test_ls_pod": 30 * G, "test_noqos_pod": 10 * G,
                   "test_be_pod_priority100_1": 5 * G, "test_be_pod_priority100_2": 20 * G,
                   "test_be_pod_priority120": 10 * G}


def state(pods: list[PodMeta], cfg: dict[str, Any] | None, node_used: float | None, memory: dict[str, float],
          node_obj: dict[str, Any] | None = None, *, present: bool = True, ts: int = T0) -> QoSState:
    cache = MetricCache(lambda kind: 3600)
    if node_used is not None:
        cache.append(cache.key("node_memory_usage"), ts, node_used)
    for p in pods:
        if p.name in memory:
            cache.append(cache.key("pod_memory_usage", pod_uid=p.uid), ts, memory[p.name])
    slo = nodeslo_config({"resourceUsedThresholdWithBE": cfg} if cfg is not None else None)
    host = SimHost(Path("/nonexistent"), 1, CgroupDriver.CGROUPFS)
    return QoSState(host.paths, 1, CgroupDriver.CGROUPFS, pods, slo, [], present, cache=cache, node=node_obj)


def run(s: QoSState, now: int = T0) -> EvictionPlan:
    return memoryevict.plan(s, memoryevict.read_facts(s, collect_interval=1.0, now_ms=now))


def names(plan: EvictionPlan) -> list[str]:
    return [e.pod.name for e in plan.evictions]


# ---- Test_memoryEvict (upstream): node 120G, used 115G → 95 % ---------------------------------------------------


@pytest.mark.parametrize(("cfg", "used", "expect"), [
    # test_memory_under_evict_line: 80G of 120G is 66 % < 80 %
    ({"enable": True, "memoryEvictThresholdPercent": 80}, 80 * G, []),
    # MemoryEvictThresholdPercent_sort_by_priority_and_usage_82: lower 80 → release 18G
    ({"enable": True, "memoryEvictThresholdPercent": 82}, 115 * G, ["test_be_pod_priority100_2"]),
    # MemoryEvictThresholdPercent_80: lower 78 → release 20.4G
    ({"enable": True, "memoryEvictThresholdPercent": 80}, 115 * G,
     ["test_be_pod_priority100_2", "test_be_pod_priority100_1"]),
    # MemoryEvictThresholdPercent_50: lower 48 → 56.4G, more than all BE pods hold
    ({"enable": True, "memoryEvictThresholdPercent": 50}, 115 * G,
     ["test_be_pod_priority100_2", "test_be_pod_priority100_1", "test_be_pod_priority120"]),
    # MemoryEvictLowerPercent_80 with threshold 82 → 18G
    ({"enable": True, "memoryEvictThresholdPercent": 82, "memoryEvictLowerPercent": 80}, 115 * G,
     ["test_be_pod_priority100_2"]),
    # MemoryEvictLowerPercent_78 → 20.4G
    ({"enable": True, "memoryEvictThresholdPercent": 82, "memoryEvictLowerPercent": 78}, 115 * G,
     ["test_be_pod_priority100_2", "test_be_pod_priority100_1"]),
    # MemoryEvictLowerPercent_74 → 25.2G: 20G + 5G falls short by 0.2G, so the priority-120 pod goes too
    ({"enable": True, "memoryEvictThresholdPercent": 82, "memoryEvictLowerPercent": 74}, 115 * G,
     ["test_be_pod_priority100_2", "test_be_pod_priority100_1", "test_be_pod_priority120"]),
])
def test_upstream_cases(cfg: dict[str, Any], used: float, expect: list[str]) -> None:
    plan = run(state(upstream_pods(), cfg, used, UPSTREAM_MEMORY, node()))
    assert plan.skip is None
    assert names(plan) == expect
    if expect:
        pct = int(used) * 100 // (120 * G)
        lower = cfg.get("memoryEvictLowerPercent", cfg["memoryEvictThresholdPercent"] - 2)
        assert plan.need == 120 * G * (pct - lower) // 100


def test_need_is_capacity_times_percent_over_lower() -> None:
    plan = run(state(upstream_pods(), {"enable": True, "memoryEvictThresholdPercent": 82}, 115 * G, UPSTREAM_MEMORY,
                     node()))
    assert plan.need == 18 * G  # ⌊115·100/120⌋ = 95; 120G × (95 − 80) / 100
    assert [e.credit for e in plan.candidates] == [20 * G, 5 * G, 10 * G]  # every BE pod, in order
    assert all(e.gate == "BEMemoryEvict" and e.reason == "evicted" for e in plan.candidates)
    assert plan.candidates[0].message == ("trigger by koordlet feature EvictBEPodByNodeMemoryUsage, kill pod: "
                                          "test_be_pod_priority100_2")


# ---- generateConfigCheck (BEMemoryEvict) and the run-time checks -------------------------------------------------


@pytest.mark.parametrize(("cfg", "error"), [
    ({}, "threshold percent is nil"),
    ({"memoryEvictThresholdPercent": -1}, "threshold percent(-1) should equal or greater than 0"),
    ({"memoryEvictThresholdPercent": 80}, None),
    ({"memoryEvictThresholdPercent": 80, "memoryEvictLowerPercent": 90},
     "lower percent(90) should less than threshold percent(80)"),
    ({"memoryEvictThresholdPercent": 80, "memoryEvictLowerPercent": 80},
     "lower percent(80) should less than threshold percent(80)"),
    ({"memoryEvictThresholdPercent": 80, "memoryEvictLowerPercent": 70}, None),
])
def test_config_check(cfg: dict[str, Any], error: str | None) -> None:
    unmerged = spec_from_merged({"resourceUsedThresholdWithBE": cfg})  # no default threshold
    got = memoryevict.check_config(unmerged.resource_used_threshold_with_be)
    assert (got if isinstance(got, str) else None) == error
    plan = run(state(upstream_pods(), {"enable": True, **cfg}, 115 * G, UPSTREAM_MEMORY, node()))
    if "memoryEvictThresholdPercent" not in cfg:  # the merged NodeSLO defaults it to 70 (the chart's case)
        assert plan.skip is None and plan.need == 120 * G * (95 - 68) // 100
    elif error:
        assert plan.skip == f"invalid config: {error}" and plan.evictions == []
    else:
        assert plan.skip is None and plan.evictions


@pytest.mark.parametrize(("cfg", "present", "why"), [
    (None, False, "no NodeSLO received yet"),
    ({"memoryEvictThresholdPercent": 50}, True, "enable is not true"),  # enable missing
    ({"enable": False, "memoryEvictThresholdPercent": 50}, True, "enable is not true"),
])
def test_nodeslo_gate(cfg: dict[str, Any] | None, present: bool, why: str) -> None:
    plan = run(state(upstream_pods(), cfg, 115 * G, UPSTREAM_MEMORY, node(), present=present))
    assert plan.skip is not None and why in plan.skip
    assert plan.evictions == []


@pytest.mark.parametrize(("node_obj", "why"), [
    (None, "Node object is not known"),  # test_node_nil (a cluster without the Node yet)
    (node(memory="0"), "should greater than 0"),  # test_node_memorycapacity_invalid
])
def test_no_capacity(node_obj: dict[str, Any] | None, why: str) -> None:
    plan = run(state(upstream_pods(), {"enable": True, "memoryEvictThresholdPercent": 80}, 115 * G, UPSTREAM_MEMORY,
                     node_obj))
    assert plan.skip is not None and why in plan.skip and plan.evictions == []


def test_stale_or_missing_node_sample_is_skipped() -> None:
    """test_nodeMetric_nil; and "last" means within two collection intervals."""
    cfg = {"enable": True, "memoryEvictThresholdPercent": 80}
    assert run(state(upstream_pods(), cfg, None, UPSTREAM_MEMORY, node())).skip == "no recent node memory sample"
    stale = state(upstream_pods(), cfg, 115 * G, UPSTREAM_MEMORY, node(), ts=T0 - 2001)
    assert run(stale).skip == "no recent node memory sample"
    assert names(run(state(upstream_pods(), cfg, 115 * G, UPSTREAM_MEMORY, node(), ts=T0 - 2000)))


# ---- victims -----------------------------------------------------------------------------------------------------


def test_ls_pods_are_never_chosen_even_when_be_pods_fall_short() -> None:
    """Only `koordinator.sh/qosClass=BE` pods: not LS/LSR/LSE/SYSTEM, nor a kube-BestEffort pod without the label,
    however much they use and however low their priority."""
    pods = [pod("ls", "LS", 1), pod("lse", "LSE", 1), pod("system", "SYSTEM", 1), pod("unlabelled", None, 1),
            pod("be", "BE", 9000)]
    mem = {"ls": 50 * G, "lse": 50 * G, "system": 50 * G, "unlabelled": 50 * G, "be": 1 * G}
    plan = run(state(pods, {"enable": True, "memoryEvictThresholdPercent": 10}, 115 * G, mem, node()))
    assert [e.pod.name for e in plan.candidates] == ["be"]
    assert names(plan) == ["be"]


def test_order_priority_then_memory_then_name() -> None:
    pods = [pod("a-zero", "BE", 5), pod("b-zero", "BE", 5), pod("small", "BE", 5), pod("big", "BE", 5),
            pod("low-prio", "BE", 1), pod("high-prio", "BE", 9)]
    mem = {"small": 1 * G, "big": 3 * G, "low-prio": 1, "high-prio": 50 * G}
    plan = run(state(pods, {"enable": True, "memoryEvictThresholdPercent": 10}, 115 * G, mem, node()))
    assert [e.pod.name for e in plan.candidates] == ["low-prio", "big", "small", "b-zero", "a-zero", "high-prio"]
    # a pod without a sample is still evicted, credited 0
    assert [e.credit for e in plan.candidates][3:5] == [0.0, 0.0]


def test_unset_priority_counts_as_zero() -> None:
    """[quirk] docs/decisions.md: without a priority a pod sorts as priority 0 (a strict weak order)."""
    pods = [pod("p5-big", "BE", 5), pod("none-small", "BE", None), pod("p0-mid", "BE", 0)]
    mem = {"p5-big": 9 * G, "none-small": 1 * G, "p0-mid": 2 * G}
    plan = run(state(pods, {"enable": True, "memoryEvictThresholdPercent": 10}, 115 * G, mem, node()))
    assert [e.pod.name for e in plan.candidates] == ["p0-mid", "none-small", "p5-big"]


def test_standalone_capacity_is_memtotal(tmp_path: Path) -> None:
    host = SimHost(tmp_path, 1, CgroupDriver.CGROUPFS, mem_total_kb=100 * 1024 * 1024).setup()
    s = state(upstream_pods(), {"enable": True, "memoryEvictThresholdPercent": 80}, 90 * 1024**3, UPSTREAM_MEMORY)
    s = QoSState(host.paths, 1, CgroupDriver.CGROUPFS, s.pods, s.nodeslo, [], True, cache=s.cache)
    assert memoryevict.read_facts(s, collect_interval=1, now_ms=T0).capacity_error is not None  # a cluster: skip
    facts = memoryevict.read_facts(s, collect_interval=1, now_ms=T0, standalone=True)
    assert facts.capacity == 100 * 1024**3
    plan = memoryevict.plan(s, facts)
    assert plan.need == 100 * 1024**3 * (90 - 78) // 100
    assert names(plan) == ["test_be_pod_priority100_2"]
