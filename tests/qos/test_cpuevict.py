"""BECPUEvict: upstream's cpu_evict_test.go cases restated (release amount, victim order, config validity), facts
from the metric cache, and the chart's no-op."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from apis.extension.numa_aware import CPUInfo
from apis.slo.decode import nodeslo_config
from apis.slo.types import NodeSLOSpec, ResourceThresholdStrategy
from koordlet.health import Health
from koordlet.host.driver import CgroupDriver
from koordlet.metriccache import MetricCache
from koordlet.qos import cpuevict
from koordlet.qos.cpuevict import BEWindow, CPUFacts
from koordlet.qos.state import QoSState
from koordlet.states.cpupools import CPUTopology
from koordlet.states.model import PodMeta
from koordlet.states.pods import pod_meta

from simhost import SimHost, make_pod

T0 = 1_700_000_000_000


def be_pod(name: str, request: int, priority: int | None, qos: str = "BE") -> PodMeta:
    """mockBEPodForCPUEvict: one container requesting (and limited to) `request` batch-cpu."""
    raw = make_pod(name, f"uid-{name}", labels={"koordinator.sh/qosClass": qos}, priority=priority)
    res = {"kubernetes.io/batch-cpu": str(request)}
    raw["spec"]["containers"][0]["resources"] = {"requests": res, "limits": res}  # type: ignore[index]
    return pod_meta(raw, CgroupDriver.CGROUPFS, Health())


def node(batch_cpu: str | None = "30000") -> dict[str, Any]:
    alloc = {"cpu": "60", "memory": "120Gi", **({"kubernetes.io/batch-cpu": batch_cpu} if batch_cpu else {})}
    return {"metadata": {"name": "test-node"}, "status": {"capacity": dict(alloc), "allocatable": alloc}}


def slo(**cfg: Any) -> NodeSLOSpec:
    return nodeslo_config({"resourceUsedThresholdWithBE": {"enable": True, **cfg}})


def state(pods: list[PodMeta], nodeslo: dict[str, Any], node_obj: dict[str, Any] | None = None,
          cache: MetricCache | None = None, present: bool = True) -> QoSState:
    host = SimHost(Path("/nonexistent"), 1, CgroupDriver.CGROUPFS)
    return QoSState(host.paths, 1, CgroupDriver.CGROUPFS, pods, nodeslo, [], present, cache=cache,
                    node=node() if node_obj is None else node_obj)


# Test_CPUEvict_calculateMilliRelease: lower 30, upper 40, window 60 s, collect interval 1 s.
BASE = {"cpuEvictBESatisfactionLowerPercent": 30, "cpuEvictBESatisfactionUpperPercent": 40}
USAGE_50 = {**BASE, "cpuEvictBEUsageThresholdPercent": 50}
BY_ALLOCATABLE = {**USAGE_50, "cpuEvictPolicy": "evictByAllocatable"}


def w(count: int, limit: float, used: float, request: float) -> BEWindow:
    return BEWindow(usage=used, request=request, real_limit=limit, count=count)


@pytest.mark.parametrize(("cfg", "avg", "last", "batch", "expect"), [
    pytest.param(BASE, w(0, 0, 0, 0), w(0, 0, 0, 0), "30000", 0, id="avg-query-empty"),
    pytest.param(BASE, w(10, 0, 0, 0), w(0, 0, 0, 0), "30000", 0, id="avg-count-not-enough"),
    pytest.param(BASE, w(59, 0, 20000, 0), w(0, 0, 0, 0), "30000", 0, id="avg-real-limit-zero"),
    pytest.param(BASE, w(59, 20000, 10000, 0), w(0, 0, 0, 0), "30000", 0, id="avg-usage-not-enough"),
    pytest.param(BASE, w(59, 20000, 19000, 0), w(0, 0, 0, 0), "30000", 0, id="avg-request-zero"),
    pytest.param(BASE, w(59, 20000, 19000, 40000), w(0, 0, 0, 0), "30000", 0, id="satisfaction-enough"),
    pytest.param(BASE, w(59, 10000, 9500, 50000), w(1, 0, 0, 0), "30000", 0, id="current-invalid"),
    pytest.param(BASE, w(59, 10000, 9500, 50000), w(1, 10000, 5000, 50000), "30000", 0,
                 id="current-usage-not-enough"),
    pytest.param(BASE, w(59, 10000, 9500, 50000), w(1, 14000, 13000, 50000), "30000", 6000, id="avg>current"),
    pytest.param(BASE, w(59, 13000, 12000, 50000), w(1, 11000, 10000, 50000), "30000", 7000, id="avg<current"),
    pytest.param(USAGE_50, w(59, 20000, 9000, 0), w(0, 0, 0, 0), "30000", 0, id="usage50-avg-not-enough"),
    pytest.param(USAGE_50, w(59, 10000, 6000, 50000), w(1, 10000, 4000, 50000), "30000", 0,
                 id="usage50-current-not-enough"),
    pytest.param(USAGE_50, w(59, 10000, 6000, 50000), w(1, 14000, 8000, 50000), "30000", 6000,
                 id="usage50-avg>current"),
    pytest.param(USAGE_50, w(59, 10000, 6000, 50000), w(1, 10000, 4000, 50000), "8000", 0,
                 id="small-allocatable-but-real-limit-policy"),
    pytest.param(BY_ALLOCATABLE, w(59, 10000, 6000, 50000), w(1, 10000, 4000, 50000), "8000", 12000,
                 id="by-allocatable-small"),
    pytest.param(BY_ALLOCATABLE, w(59, 10000, 6000, 50000), w(1, 10000, 4000, 50000), "0", 20000 - 1,
                 id="by-allocatable-zero"),
])
def test_upstream_release(cfg: dict[str, Any], avg: BEWindow, last: BEWindow, batch: str, expect: int) -> None:
    s = state([be_pod("be", 50000, 1)], slo(**cfg), node(batch))
    facts = CPUFacts(60_000, 60, 1, avg, last, cpuevict._batch_allocatable(s))
    plan = cpuevict.plan(s, facts)
    assert plan.need == expect
    assert (plan.evictions != []) == (expect > 0)


@pytest.mark.parametrize(("cfg", "valid"), [
    ({}, False),  # test_nil
    ({"cpuEvictBESatisfactionLowerPercent": 0, "cpuEvictBESatisfactionUpperPercent": 50}, False),
    ({"cpuEvictBESatisfactionLowerPercent": 61, "cpuEvictBESatisfactionUpperPercent": 80}, False),
    ({"cpuEvictBESatisfactionLowerPercent": 30, "cpuEvictBESatisfactionUpperPercent": 100}, False),
    ({"cpuEvictBESatisfactionLowerPercent": 40, "cpuEvictBESatisfactionUpperPercent": 30}, False),
    ({"cpuEvictBESatisfactionLowerPercent": 30, "cpuEvictBESatisfactionUpperPercent": 40}, True),
    ({"cpuEvictBESatisfactionLowerPercent": 60, "cpuEvictBESatisfactionUpperPercent": 60}, True),
])
def test_satisfaction_config_valid(cfg: dict[str, Any], valid: bool) -> None:
    """Test_isSatisfactionConfigValid; an invalid config skips the round with upstream's reason."""
    assert isinstance(cpuevict.check_config(slo(**cfg).resource_used_threshold_with_be), tuple) == valid
    plan = cpuevict.plan(state([be_pod("be", 50000, 1)], slo(**cfg)),
                         CPUFacts(60_000, 60, 1, w(59, 10000, 9500, 50000), w(1, 10000, 9500, 50000)))
    assert (plan.skip is None) == valid
    if not valid:
        assert plan.skip is not None and plan.skip.startswith("invalid config: CPUEvictBESatisfaction")


def test_chart_nodeslo_is_a_no_op() -> None:
    """Under the chart NodeSLO (enable true, no satisfaction percents) nothing can happen."""
    chart = nodeslo_config({"resourceUsedThresholdWithBE": {
        "enable": True, "cpuSuppressThresholdPercent": 65, "cpuSuppressPolicy": "cpuset",
        "memoryEvictThresholdPercent": 70, "cpuEvictPolicy": "evictByRealLimit"}})
    plan = cpuevict.plan(state([be_pod("be", 50000, 1)], chart),
                         CPUFacts(60_000, 60, 1, w(59, 10000, 9500, 50000), w(1, 10000, 9500, 50000)))
    assert plan.skip == ("invalid config: CPUEvictBESatisfactionLowerPercent or CPUEvictBESatisfactionUpperPercent "
                         "not config")
    assert plan.candidates == ()


@pytest.mark.parametrize(("nodeslo", "present"), [(nodeslo_config(None), False),
                                                  (nodeslo_config({"resourceUsedThresholdWithBE": BASE}), True)])
def test_nodeslo_gate(nodeslo: dict[str, Any], present: bool) -> None:
    plan = cpuevict.plan(state([be_pod("be", 50000, 1)], nodeslo, present=present),
                         CPUFacts(60_000, 60, 1, w(59, 10000, 9500, 50000), w(1, 10000, 9500, 50000)))
    assert plan.skip is not None and ("NodeSLO" in plan.skip) and plan.candidates == ()


def test_victim_order_and_credit() -> None:
    """Test_getPodEvictInfoAndSort and Test_killAndEvictBEPodsRelease(WithEvictionAPIOnly): lower priority first,
    then higher use/request; non-BE pods are not candidates; 18 cores are released by two 16-core pods."""
    lsr = be_pod("pod_lsr", 16000, 1, qos="LSR")
    ls = be_pod("pod_ls", 16000, 1, qos="LS")
    pods = [lsr, ls, be_pod("pod_be_1_priority100", 16000, 100), be_pod("pod_be_2_priority100", 16000, 100),
            be_pod("pod_be_3_priority10", 16000, 10)]
    used = {"uid-pod_lsr": 12.0, "uid-pod_ls": 12.0, "uid-pod_be_1_priority100": 3.0,
            "uid-pod_be_2_priority100": 4.0, "uid-pod_be_3_priority10": 4.0}
    victims = cpuevict.victims(pods, used)
    assert [v.pod.name for v in victims] == ["pod_be_3_priority10", "pod_be_2_priority100", "pod_be_1_priority100"]
    assert [v.credit for v in victims] == [16000.0] * 3
    plan = cpuevict.plan(state(pods, slo(**BASE)),
                         CPUFacts(60_000, 60, 1, w(59, 10000, 9500, 50000), w(1, 10000, 9500, 50000),
                                  pod_cpu=used))
    assert plan.need == 10000 and [e.pod.name for e in plan.evictions] == ["pod_be_3_priority10"]
    plan = replace(plan, need=18000)
    assert [e.pod.name for e in plan.evictions] == ["pod_be_3_priority10", "pod_be_2_priority100"]
    assert plan.evictions[0].message == ("trigger by koordlet feature EvictBEPodByBECPUSatisfaction, kill pod: "
                                         "pod_be_3_priority10")


def test_unset_priority_counts_as_zero() -> None:
    """[quirk] docs/decisions.md: upstream's order is no strict weak order with unset priorities; unset is 0."""
    pods = [be_pod("p5", 1000, 5), be_pod("none", 1000, None), be_pod("p0", 1000, 0)]
    used = {"uid-p5": 1.0, "uid-none": 0.2, "uid-p0": 0.5}
    assert [v.pod.name for v in cpuevict.victims(pods, used)] == ["p0", "none", "p5"]


def test_batch_request_sums_containers_and_sidecars() -> None:
    p = be_pod("be", 1000, 1)
    p.raw["spec"]["containers"].append({"name": "c2", "resources": {"requests": {"kubernetes.io/batch-cpu": "2k"}}})
    p.raw["spec"]["initContainers"] = [
        {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"kubernetes.io/batch-cpu": "500"}}},
        {"name": "init", "resources": {"requests": {"kubernetes.io/batch-cpu": "9000"}}}]
    assert cpuevict.victims([p], {})[0].credit == 1000 + 2000 + 500


def test_facts_from_the_metric_cache() -> None:
    """avg over the window W = max(interval, cpuEvictTimeWindowSeconds), "last" within two intervals."""
    cache = MetricCache(lambda kind: 3600)
    for i in range(30):  # one sample a second for 30 s, ending at T0
        ts = T0 - (29 - i) * 1000
        cache.append(cache.key("be_cpu_usage"), ts, 9000.0 + i)
        cache.append(cache.key("be_cpu_request"), ts, 50000.0)
        cache.append(cache.key("be_cpu_real_limit"), ts, 10000.0)
    cache.append(cache.key("pod_cpu_usage", pod_uid="uid-be"), T0 - 1500, 2.5)
    s = state([be_pod("be", 50000, 1)], slo(**BASE, cpuEvictTimeWindowSeconds=10), cache=cache)
    facts = cpuevict.read_facts(s, collect_interval=1.0, now_ms=T0)
    assert facts.window_seconds == 10 and facts.interval_seconds == 1 and facts.capacity_milli == 60_000
    assert facts.avg.count == 11  # [T0 − 10 s, T0] holds 11 samples
    assert facts.avg.usage == sum(9000.0 + i for i in range(19, 30)) / 11
    assert facts.last == BEWindow(9029.0, 50000.0, 10000.0, 3)
    assert facts.pod_cpu == {"uid-be": 2.5}
    assert facts.batch_allocatable == 30000.0
    plan = cpuevict.plan(s, facts)
    assert plan.need == 10000 and [e.pod.name for e in plan.evictions] == ["be"]
    # a window shorter than the interval is the interval; no samples at all → skipped, not evicted
    assert cpuevict.window_seconds(ResourceThresholdStrategy(cpu_evict_time_window_seconds=0), 1) == 1
    empty = cpuevict.read_facts(state([], slo(**BASE, cpuEvictTimeWindowSeconds=10), cache=MetricCache(
        lambda kind: 3600)), collect_interval=1.0, now_ms=T0)
    assert cpuevict.plan(s, empty).skip == "BE CPU samples not enough (0 in a 10s window)"


def test_standalone_capacity_is_the_node_infos_cpus_not_a_sysfs_read_each_round(tmp_path: Path) -> None:
    host = SimHost(tmp_path / "h", 1, CgroupDriver.CGROUPFS).setup()  # a sysfs with its own CPUs
    topology = CPUTopology(tuple(CPUInfo(i, i, 0, 0) for i in range(6)))
    base = QoSState(host.paths, 1, CgroupDriver.CGROUPFS, [], slo(), [], True)
    on_disk = cpuevict.read_facts(base, collect_interval=1, now_ms=T0, standalone=True).capacity_milli
    facts = cpuevict.read_facts(replace(base, cpu_topology=topology), collect_interval=1, now_ms=T0, standalone=True)
    assert facts.capacity_milli == 6000 != on_disk
    # an empty topology (the node info could not be read) falls back to sysfs
    empty = replace(base, cpu_topology=CPUTopology(()))
    assert cpuevict.read_facts(empty, collect_interval=1, now_ms=T0, standalone=True).capacity_milli == on_disk
