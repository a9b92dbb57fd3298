"""Collection and NodeMetric on simulated hosts (cgroup v1/v2 × systemd/cgroupfs)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from apis.core.quantity import parse_quantity
from koordlet.agent import Agent
from koordlet.config import Config
from koordlet.host.driver import K8sQoS
from koordlet.metriccache import MetricCache

from simhost import SimCgroup, SimHost, make_pod

UID_A = "11111111-2222-3333-4444-555555555555"
UID_B = "66666666-7777-8888-9999-000000000000"
SEC = 1_000_000_000
T0 = 1_800_000_000.0


def _agent(simhost: SimHost, tmp_path: Path, pods: list[dict[str, Any]], **kw: Any) -> Agent:
    pods_dir = tmp_path / "pods"
    pods_dir.mkdir(exist_ok=True)
    for p in pods:
        (pods_dir / f"{p['metadata']['name']}.yaml").write_text(yaml.safe_dump(p))  # type: ignore[index]
    cfg = Config(node_name="node-1", paths=simhost.paths, pods_dir=str(pods_dir), state_dir=str(tmp_path / "st"),
                 **kw)
    agent = Agent(cfg)
    assert agent.sync_pods()
    return agent


def _pod_cgroups(simhost: SimHost, pod: dict[str, Any], qos: K8sQoS) -> tuple[str, list[str]]:
    rel = simhost.pod_dir(qos, pod["metadata"]["uid"])
    ctrs = [simhost.container_dir(rel, cs["containerID"]) for cs in pod["status"]["containerStatuses"]]
    return rel, ctrs


def test_detects_version_and_driver(simhost: SimHost, tmp_path: Path) -> None:
    agent = _agent(simhost, tmp_path, [])
    assert agent.backend.version == simhost.version
    assert agent.state.driver() == simhost.driver


def test_pod_and_node_usage_over_ticks(simhost: SimHost, tmp_path: Path, validate_crd: Any) -> None:
    pod_a = make_pod("a", UID_A, "Burstable", containers=2, labels={"koordinator.sh/qosClass": "LS"})
    pod_b = make_pod("b", UID_B, "BestEffort", containers=1, namespace="batch")
    agent = _agent(simhost, tmp_path, [pod_b, pod_a])
    rel_a, ctr_a = _pod_cgroups(simhost, pod_a, K8sQoS.BURSTABLE)
    rel_b, ctr_b = _pod_cgroups(simhost, pod_b, K8sQoS.BESTEFFORT)
    assert rel_a in {p.cgroup_dir for p in agent.state.pods()}
    agent.advisor.cgroups.container_stride = 1  # containers every tick (the 10 s interval: test_container_interval)

    gib = 1 << 30
    for tick in range(4):
        # pod a burns 1.5 cores (0.5 + 1.0 in its containers), pod b 0.25; node is 2 cores busy.
        simhost.write_cgroup(rel_a, SimCgroup(cpu_ns=int(1.5 * SEC * tick), anon=gib, file=gib,
                                              nr_periods=10 * tick, nr_throttled=2 * tick))
        simhost.write_cgroup(ctr_a[0], SimCgroup(cpu_ns=int(0.5 * SEC * tick), anon=gib // 4))
        simhost.write_cgroup(ctr_a[1], SimCgroup(cpu_ns=int(1.0 * SEC * tick), anon=gib // 2))
        simhost.write_cgroup(rel_b, SimCgroup(cpu_ns=int(0.25 * SEC * tick), anon=gib // 8))
        simhost.write_cgroup(ctr_b[0], SimCgroup(cpu_ns=int(0.25 * SEC * tick), anon=gib // 8))
        if tick:
            simhost.busy({0: 100, 1: 100})  # CLK_TCK=100: 200 ticks in 1 s = 2 cores, all on NUMA node 0
        agent.collect(now=T0 + tick, mono_ns=tick * SEC)

    cache = agent.cache
    last = cache.last(MetricCache.key("pod_cpu_usage", pod_uid=UID_A))
    assert last is not None and last[1] == pytest.approx(1.5)
    cid = pod_a["status"]["containerStatuses"][1]["containerID"]
    assert cache.last(MetricCache.key("container_cpu_usage", container_id=cid))[1] == pytest.approx(1.0)  # type: ignore[index]
    assert cache.last(MetricCache.key("pod_cpu_throttled", pod_uid=UID_A))[1] == pytest.approx(0.2)  # type: ignore[index]
    # memory without page cache = anon only
    assert cache.last(MetricCache.key("pod_memory_usage", pod_uid=UID_A))[1] == gib  # type: ignore[index]
    assert cache.last(MetricCache.key("node_cpu_usage"))[1] == pytest.approx(2.0, rel=0.02)  # type: ignore[index]
    assert cache.last(MetricCache.key("node_numa_cpu_usage", numa_node_id="0"))[1] == pytest.approx(2.0, rel=0.02)  # type: ignore[index]
    assert cache.last(MetricCache.key("node_numa_cpu_usage", numa_node_id="1"))[1] == 0  # type: ignore[index]
    # system = node − Σ pods = 2 − 1.75
    assert cache.last(MetricCache.key("sys_cpu_usage"))[1] == pytest.approx(0.25, abs=0.05)  # type: ignore[index]

    obj = agent.build_nodemetric(now=T0 + 3)
    validate_crd("slo.koordinator.sh_nodemetrics.yaml", obj)
    status = obj["status"]
    assert [(p["namespace"], p["name"]) for p in status["podsMetric"]] == [("batch", "b"), ("default", "a")]
    a = status["podsMetric"][1]
    assert a["podUsage"]["resources"] == {"cpu": "1500m", "memory": "1Gi"}
    assert a["qos"] == "LS" and a["priority"] == "koord-prod"
    b = status["podsMetric"][0]
    assert b["qos"] == "BE" and b["priority"] == "koord-batch"
    assert b["podUsage"]["resources"]["cpu"] == "250m"
    assert status["nodeMetric"]["nodeUsage"]["resources"]["cpu"] in ("1999m", "2")
    # 3 s of samples for 5/10/30 minute windows: cold start → every percentile map is empty
    aggs = status["nodeMetric"]["aggregatedNodeUsages"]
    assert [a["duration"] for a in aggs] == ["5m0s", "10m0s", "30m0s"]
    assert all(a["usage"] == {"avg": {}, "p50": {}, "p90": {}, "p95": {}, "p99": {}} for a in aggs)
    numa = status["nodeMetric"]["numaUsages"]
    assert [n["numaNodeID"] for n in numa] == [0, 1]


def test_aggregates_after_warm_up(simhost: SimHost, tmp_path: Path, validate_crd: Any) -> None:
    agent = _agent(simhost, tmp_path, [])
    # ticks 1..199 carry node usage tick/100 cores (CLK_TCK=100, one second apart)
    for tick in range(200):
        simhost.busy({0: tick})
        agent.collect(now=T0 + tick, mono_ns=tick * SEC)
    agent.set_nodemetric_spec({"metricCollectPolicy": {"nodeAggregatePolicy": {"durations": ["5m", "100s",
                                                                                           "1h"]}}})
    obj = agent.build_nodemetric(now=T0 + 199)
    validate_crd("slo.koordinator.sh_nodemetrics.yaml", obj)
    aggs = {a["duration"]: a["usage"] for a in obj["status"]["nodeMetric"]["aggregatedNodeUsages"]}
    assert set(aggs) == {"5m0s", "1m40s", "1h0m0s"}
    # 100 s window: ticks 99..199 (101 samples); p90 index int(101 × 0.9) − 1 = 89 → tick 188
    assert aggs["1m40s"]["p90"]["resources"]["cpu"] in ("1879m", "1880m")
    # 5 min window: 198 s of samples ≥ half of 300 s → reported; p50 index int(199 × 0.5) − 1 = 98 → tick 99
    assert aggs["5m0s"]["p50"]["resources"]["cpu"] in ("989m", "990m")
    assert aggs["5m0s"]["p99"]["resources"]["cpu"] in ("1969m", "1970m")  # int(197.01) − 1 = 196 → tick 197
    # 1 h window: 198 s < 1800 s → cold start, empty maps
    # avg beside the percentiles (upstream states_nodemetric.go collectNodeAggregateMetric): mean of ticks 1..199
    # (tick 0 has no rate yet) and of ticks 99..199, in cores
    assert aggs["5m0s"]["avg"]["resources"]["cpu"] in ("999m", "1")
    assert aggs["1m40s"]["avg"]["resources"]["cpu"] in ("1489m", "1490m")
    assert aggs["1h0m0s"] == {"avg": {}, "p50": {}, "p90": {}, "p95": {}, "p99": {}}
    sys_aggs = {a["duration"]: a["usage"] for a in obj["status"]["nodeMetric"]["aggregatedSystemUsages"]}
    assert set(sys_aggs["5m0s"]) == {"avg", "p50", "p90", "p95", "p99"}
    assert sys_aggs["5m0s"]["avg"]["resources"]["memory"] == obj["status"]["nodeMetric"]["systemUsage"]["resources"][
        "memory"]  # no pods: system memory is node memory, constant over the run


def _one_pod_collected(simhost: SimHost, tmp_path: Path) -> tuple[Agent, str]:
    """An agent over one Guaranteed pod with its cgroups, after a first tick; the pod's cgroup dir."""
    pod_a = make_pod("a", UID_A, "Guaranteed")
    agent = _agent(simhost, tmp_path, [pod_a])
    rel, ctrs = _pod_cgroups(simhost, pod_a, K8sQoS.GUARANTEED)
    simhost.write_cgroup(rel, SimCgroup(cpu_ns=0))
    simhost.write_cgroup(ctrs[0], SimCgroup(cpu_ns=0))
    agent.collect(now=T0, mono_ns=0)
    return agent, rel


def test_vanished_pod_cgroup_is_skipped_not_fatal(simhost: SimHost, tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    """The usual deletion race (kubelet removes the cgroup, then the pod leaves its list): counted, logged at
    debug level as upstream's collector does (V(4)), never a warning per deleted pod."""
    caplog.set_level(logging.DEBUG, logger="koordlet")
    agent, rel = _one_pod_collected(simhost, tmp_path)
    simhost.remove_cgroup(rel)
    agent.collect(now=T0 + 1, mono_ns=SEC)
    agent.collect(now=T0 + 2, mono_ns=2 * SEC)
    assert agent.health.skipped[("pod", "cgroup-unreadable")] == 2
    gone = [r for r in caplog.records if "cgroup-unreadable" in r.getMessage()]
    assert gone and all(r.levelno == logging.DEBUG for r in gone)
    assert agent.cache.last(MetricCache.key("node_cpu_usage")) is not None
    assert agent.build_nodemetric(now=T0 + 2)["status"]["podsMetric"] == []


def test_a_pod_cgroup_that_is_there_but_unreadable_is_a_warning(simhost: SimHost, tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    """Not the deletion race: the cgroup is there and its file cannot be read (here a directory in its place)."""
    agent, rel = _one_pod_collected(simhost, tmp_path)
    root = simhost.cgroup_root()
    usage = root / rel / "cpu.stat" if simhost.version == 2 else root / "cpuacct" / rel / "cpuacct.usage"
    usage.unlink()
    usage.mkdir()
    agent.collect(now=T0 + 1, mono_ns=SEC)
    warned = [r for r in caplog.records if "cgroup-unreadable" in r.getMessage()]
    assert [r.levelno for r in warned] == [logging.WARNING]
    assert agent.health.skipped[("pod", "cgroup-unreadable")] == 1


def test_system_usage_waits_for_a_new_pods_first_rate(simhost: SimHost, tmp_path: Path) -> None:
    agent = _agent(simhost, tmp_path, [])
    for tick in range(2):
        simhost.busy({0: 100})
        agent.collect(now=T0 + tick, mono_ns=tick * SEC)
    sys_key = MetricCache.key("sys_cpu_usage")
    assert agent.cache.last(sys_key) == (int((T0 + 1) * 1000), pytest.approx(1.0))

    pod = make_pod("late", UID_A, "Guaranteed")
    (tmp_path / "pods" / "late.yaml").write_text(yaml.safe_dump(pod))
    rel, _ = _pod_cgroups(simhost, pod, K8sQoS.GUARANTEED)
    simhost.write_cgroup(rel, SimCgroup(cpu_ns=5 * SEC))
    assert agent.sync_pods()
    simhost.busy({0: 100})
    agent.collect(now=T0 + 2, mono_ns=2 * SEC)  # the pod's first read: no rate, so no system sample
    assert agent.cache.last(sys_key)[0] == int((T0 + 1) * 1000)  # type: ignore[index]
    simhost.write_cgroup(rel, SimCgroup(cpu_ns=int(5.6 * SEC)))
    simhost.busy({0: 100})
    agent.collect(now=T0 + 3, mono_ns=3 * SEC)
    assert agent.cache.last(sys_key) == (int((T0 + 3) * 1000), pytest.approx(0.4))


def test_hostile_ids_are_skipped_never_read(simhost: SimHost, tmp_path: Path) -> None:
    bad_uid = make_pod("escape", "../../../../etc", "Burstable")
    bad_cid = make_pod("ctr", UID_B, "Burstable")
    bad_cid["status"]["containerStatuses"][0]["containerID"] = "containerd://../../../x"  # type: ignore[index]
    agent = _agent(simhost, tmp_path, [bad_uid, bad_cid])
    assert [p.name for p in agent.state.pods()] == ["ctr"]
    assert agent.state.pods()[0].containers[0].cgroup_dir is None
    agent.set_nodeslo({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "metadata": {"name": "n"},
                       "spec": {"hostApplications": [{"name": "x", "cgroupPath": {"base": "CgroupRoot",
                                                                               "relativePath": "../../../etc"}}]}})
    agent.collect(now=T0, mono_ns=0)
    assert agent.health.skipped[("pod", "malformed")] == 1
    assert agent.health.skipped[("container", "bad-container-id")] == 1
    assert agent.health.skipped[("hostapp", "bad-cgroup-dir")] == 1


def test_numa_system_memory_is_the_nodes_minus_the_pods(simhost: SimHost, tmp_path: Path, validate_crd: Any) -> None:
    """numaUsages[].systemUsage.memory = the NUMA node's usage − the pods' anon memory on it (memory.numa_stat of
    the pod dirs, read every EVERY_TICKS ticks; on v1 the pod's subtree, not its own pages as upstream's `total=`)."""
    from koordlet.collectors.numamemory import EVERY_TICKS

    pod_a = make_pod("a", UID_A, "Burstable", containers=1)
    agent = _agent(simhost, tmp_path, [pod_a])
    rel_a, ctrs = _pod_cgroups(simhost, pod_a, K8sQoS.BURSTABLE)
    mib = 1 << 20
    simhost.write_cgroup(ctrs[0], SimCgroup(anon=96 * mib))
    for tick in range(EVERY_TICKS + 1):
        simhost.write_cgroup(rel_a, SimCgroup(cpu_ns=tick * SEC // 10, anon=96 * mib,
                                              numa_anon={0: 64 * mib, 1: 32 * mib}))
        simhost.busy({0: 10 * tick, 2: 5 * tick})
        agent.collect(now=T0 + tick, mono_ns=tick * SEC)
    samples = agent.cache.window(MetricCache.key("sys_numa_memory_usage", numa_node_id="0"), 0, int(T0 * 1000) * 2)[1]
    assert len(samples) == 2  # the first tick and the (EVERY_TICKS+1)-th
    obj = agent.build_nodemetric(now=T0 + EVERY_TICKS)
    validate_crd("slo.koordinator.sh_nodemetrics.yaml", obj)
    per_node_kb = simhost.mem_total_kb // 2
    node_used = (per_node_kb - (per_node_kb // 2 + 1024 + 1024)) * 1024  # MemTotal − MemFree − file pages
    by_id = {n["numaNodeID"]: n for n in obj["status"]["nodeMetric"]["numaUsages"]}
    for nid, pod_bytes in ((0, 64 * mib), (1, 32 * mib)):
        system = by_id[nid]["systemUsage"]["resources"]
        assert parse_quantity(system["memory"]) == node_used - pod_bytes
        assert "cpu" in system
