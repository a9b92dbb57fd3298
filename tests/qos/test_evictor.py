"""Carrying evictions out: the Eviction API path against the API double (Events, UID cache, metrics), the kill path
on a real cgroup v1 hierarchy with a real process, standalone reporting, and a simulated node over its memory
threshold end to end."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import kmock
import pytest
import yaml

from apis.client.kubeapi import KubeClient, KubeConfig
from koordlet.agent import Agent
from koordlet.config import Config, EvictConfig, parse_feature_gates
from koordlet.events import EventRecorder
from koordlet.exporter import render_text
from koordlet.health import Health
from koordlet.host.driver import CgroupDriver, K8sQoS, container_dir, pod_dir
from koordlet.host.paths import HostPaths
from koordlet.qos import memoryevict
from koordlet.qos.eviction import Eviction, EvictionPlan, message
from koordlet.qos.evictor import EvictionStats, Evictor, kill_cgroup
from koordlet.qos.evictstrategy import EvictStrategy, strategies
from koordlet.qos.manager import plan_json
from koordlet.states.model import PodMeta
from koordlet.states.pods import PodsDirSource, pod_meta
from koordlet.tables import plan_table

from conftest import real_v1_root
from kubedouble import PDBS, emulate_eviction
from simhost import SimCgroup, SimHost, make_pod

NODE = "test-node"
GI = 1024**3


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def be(name: str, priority: int = 100, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return make_pod(name, f"uid-{name}", "BestEffort", namespace="batch",
                    labels={"koordinator.sh/qosClass": "BE", **(labels or {})}, priority=priority)


def meta(raw: dict[str, Any]) -> PodMeta:
    return pod_meta(raw, CgroupDriver.CGROUPFS, Health())


def plan_of(pods: list[PodMeta], credits: list[float], need: float) -> EvictionPlan:
    return EvictionPlan("BEMemoryEvict", need, tuple(Eviction(p, "BEMemoryEvict", c, message=message(
        "BEMemoryEvict", p.name)) for p, c in zip(pods, credits, strict=True)))


def api_evictor(km: kmock.KubernetesEmulator, clock: Clock, stats: EvictionStats | None = None) -> Evictor:
    post = KubeClient(KubeConfig(server=str(km.url))).post
    health = Health()
    return Evictor(node_name=NODE, paths=HostPaths.under("/nonexistent"), cgroup_version=1, health=health,
                   stats=stats or EvictionStats(), events=EventRecorder(health, NODE, post), post=post,
                   only_evict_by_api=True, standalone=False, clock=clock)


@pytest.fixture
def km(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    for res in ("v1/pods", "v1/events", PDBS):
        kmock.resources[res] = {}
    emulate_eviction(kmock)
    return kmock


def store(km: kmock.KubernetesEmulator, *raws: dict[str, Any]) -> None:
    for raw in raws:
        km.objects["v1/pods", raw["metadata"]["namespace"], raw["metadata"]["name"]] = raw


def evictions_sent(km: kmock.KubernetesEmulator) -> list[dict[str, Any]]:
    return [r.data for r in km if r.method.value == "POST" and r.url.path.endswith("/eviction")]


def events_sent(km: kmock.KubernetesEmulator) -> list[dict[str, Any]]:
    return [r.data for r in km if r.method.value == "POST" and r.url.path.endswith("/events")]


# ---- the Eviction API path ---------------------------------------------------------------------------------------


async def test_api_path_evicts_in_order_until_released(km: kmock.KubernetesEmulator) -> None:
    """Test_killAndEvictBEPodsReleaseWithEvictionAPIOnly: 18 cores from 16-core pods: two Evictions, the third
    pod untouched; each with the UID precondition, a Warning Event in upstream's words and the metrics."""
    raws = [be("pod-be-3-priority10", 10), be("pod-be-2-priority100"), be("pod-be-1-priority100")]
    store(km, *raws)
    stats, clock = EvictionStats(), Clock()
    evictor = api_evictor(km, clock, stats)
    result = await asyncio.to_thread(evictor.carry_out, plan_of([meta(r) for r in raws], [16000] * 3, 18000))
    assert [e.pod.name for e in result.evicted] == ["pod-be-3-priority10", "pod-be-2-priority100"]
    assert result.credited == 32000
    sent = evictions_sent(km)
    assert [b["metadata"]["name"] for b in sent] == ["pod-be-3-priority10", "pod-be-2-priority100"]
    assert sent[0] == {"apiVersion": "policy/v1", "kind": "Eviction",
                       "metadata": {"name": "pod-be-3-priority10", "namespace": "batch"},
                       "deleteOptions": {"preconditions": {"uid": "uid-pod-be-3-priority10"}}}
    assert km.objects["v1/pods", "batch", "pod-be-3-priority10"].raw["metadata"].get("deletionTimestamp")
    assert not km.objects["v1/pods", "batch", "pod-be-1-priority100"].raw["metadata"].get("deletionTimestamp")
    ev = events_sent(km)[0]
    assert ev["reason"] == "evictPodSuccess" and ev["type"] == "Warning"
    assert ev["source"] == {"component": "koordlet-qosManager", "host": NODE}
    assert ev["involvedObject"]["name"] == "pod-be-3-priority10" and ev["involvedObject"]["kind"] == "Pod"
    assert ev["message"] == ("evict Pod:batch/pod-be-3-priority10, reason: evicted, message: trigger by koordlet "
                             "feature EvictBEPodByNodeMemoryUsage, kill pod: pod-be-3-priority10")
    assert evictor.is_evicted("uid-pod-be-3-priority10") and not evictor.is_evicted("uid-pod-be-1-priority100")
    total, detail = stats.snapshot()
    assert total == {"evicted": 2}
    assert detail == {("batch", "pod-be-3-priority10", "evicted"): 1, ("batch", "pod-be-2-priority100", "evicted"): 1}


async def test_cached_uids_are_passed_over_without_credit_for_two_minutes(km: kmock.KubernetesEmulator) -> None:
    """v1.7: a pod evicted less than 2 minutes ago is skipped and credits nothing; the next candidate goes."""
    raws = [be("a", 1), be("b", 2), be("c", 3)]
    store(km, *raws)
    clock = Clock()
    evictor = api_evictor(km, clock)
    pods = [meta(r) for r in raws]
    await asyncio.to_thread(evictor.carry_out, plan_of(pods, [10, 10, 10], 5))
    again = await asyncio.to_thread(evictor.carry_out, plan_of(pods, [10, 10, 10], 5))
    assert [e.pod.name for e in again.evicted] == ["b"]
    clock.now += 120  # the TTL is over: "a" may be picked again
    third = await asyncio.to_thread(evictor.carry_out, plan_of(pods, [10, 10, 10], 5))
    assert [e.pod.name for e in third.evicted] == ["a"]
    assert [b["metadata"]["name"] for b in evictions_sent(km)] == ["a", "b", "a"]


async def test_refused_eviction_posts_fail_event_and_takes_the_next(km: kmock.KubernetesEmulator) -> None:
    """A PodDisruptionBudget refuses the first victim (429): evictPodFail with the error, no credit, no cache."""
    raws = [be("guarded", 1, labels={"app": "guarded"}), be("free", 2)]
    store(km, *raws)
    km.objects[PDBS, "batch", "pdb"] = {"metadata": {"name": "pdb", "namespace": "batch"},
                                        "spec": {"selector": {"matchLabels": {"app": "guarded"}}},
                                        "status": {"disruptionsAllowed": 0}}
    evictor = api_evictor(km, Clock())
    result = await asyncio.to_thread(evictor.carry_out, plan_of([meta(r) for r in raws], [10, 10], 5))
    assert [e.pod.name for e in result.evicted] == ["free"]
    events = events_sent(km)
    assert [e["reason"] for e in events] == ["evictPodFail", "evictPodSuccess"]
    assert events[0]["message"].startswith("evict Pod:batch/guarded, reason: evicted, message: trigger by koordlet "
                                           "feature EvictBEPodByNodeMemoryUsage, kill pod: guarded, error HTTP 429")
    assert not evictor.is_evicted("uid-guarded")


async def test_uid_precondition_protects_a_recreated_pod(km: kmock.KubernetesEmulator) -> None:
    """The pod was replaced by one of the same name: the API refuses (409), nothing is evicted."""
    raw = be("web")
    store(km, {**raw, "metadata": {**raw["metadata"], "uid": "uid-new"}})
    result = await asyncio.to_thread(api_evictor(km, Clock()).carry_out, plan_of([meta(raw)], [1], 1))
    assert result.evicted == ()
    assert not km.objects["v1/pods", "batch", "web"].raw["metadata"].get("deletionTimestamp")


def test_metrics_are_go_counters_and_detail_series_expire() -> None:
    clock = Clock()
    stats = EvictionStats(clock=clock)
    agent_metrics = _metrics(stats)
    assert b"koordlet_pod_eviction" not in render_text(agent_metrics.internal)  # no series: no family, as Go
    stats.record("batch", "a", "evicted")
    stats.record("batch", "a", "evicted")
    text = render_text(agent_metrics.internal).decode()
    assert "# TYPE koordlet_pod_eviction counter\n" in text
    assert 'koordlet_pod_eviction{node="n1",reason="evicted"} 2.0\n' in text
    assert ('koordlet_pod_eviction_detail{node="n1",pod_name="a",pod_namespace="batch",reason="evicted"} 2.0\n'
            in text)
    clock.now += 301  # upstream's GCCounterVec drops a detail series 5 minutes after its last update
    text = render_text(agent_metrics.internal).decode()
    assert "koordlet_pod_eviction_detail" not in text and 'reason="evicted"} 2.0' in text


def _metrics(stats: EvictionStats) -> Any:
    from koordlet.collectors.advisor import Latest
    from koordlet.exporter import AgentMetrics
    from koordlet.metriccache import MetricCache

    return AgentMetrics("n1", Health(), Latest(), MetricCache(lambda k: 60), evictions=stats)


# ---- standalone: reported, never touched -------------------------------------------------------------------------


def test_standalone_reports_only(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    stats = EvictionStats()
    evictor = Evictor(node_name=NODE, paths=HostPaths.under(str(tmp_path)), cgroup_version=1, health=Health(),
                      stats=stats, events=EventRecorder(Health(), NODE), post=None, only_evict_by_api=False,
                      standalone=True, state_dir=str(tmp_path / "state"))
    pods = [meta(be("a", 1)), meta(be("b", 2))]
    with caplog.at_level(logging.WARNING):
        result = evictor.carry_out(plan_of(pods, [10, 10], 15))
    assert [e.pod.name for e in result.evicted] == ["a", "b"] and evictor.mode == "report"
    assert "standalone: would evict pod batch/a" in caplog.text
    records = [json.loads(line) for line in (tmp_path / "state" / "evictions.jsonl").read_text().splitlines()]
    assert [r["involvedObject"]["name"] for r in records] == ["a", "b"]
    assert records[0]["message"] == ("evict Pod:batch/a, reason: evicted, message: trigger by koordlet feature "
                                     "EvictBEPodByNodeMemoryUsage, kill pod: a")
    assert stats.snapshot()[0] == {"reported": 2}


# ---- the kill path ----------------------------------------------------------------------------------------------


def test_kill_path_kills_a_real_process_in_a_real_cgroup(tmp_path: Path) -> None:
    """only-evict-by-api=false: the running container's tasks get SIGKILL (cgroup v1: each pid of cgroup.procs);
    the walk stops at the first container that is not running, as upstream's KillContainers."""
    with real_v1_root(tmp_path, ("cpu",)) as (root, _):
        raw = make_pod("victim", "uid-victim", "BestEffort", containers=3, namespace="batch",
                       labels={"koordinator.sh/qosClass": "BE"})
        statuses = raw["status"]["containerStatuses"]  # type: ignore[index]
        statuses[1]["state"] = {"terminated": {"exitCode": 0}}  # c1 not running: c2 must be left alone
        pod_rel = pod_dir(CgroupDriver.CGROUPFS, K8sQoS.BESTEFFORT, "uid-victim")
        procs = []
        for cs in statuses:
            rel = container_dir(CgroupDriver.CGROUPFS, pod_rel, cs["containerID"])
            (root / "cpu" / rel).mkdir(parents=True)
            proc = subprocess.Popen(["sleep", "300"])
            (root / "cpu" / rel / "cgroup.procs").write_text(str(proc.pid))
            procs.append(proc)
        bystander = subprocess.Popen(["sleep", "300"])  # in no pod cgroup
        try:
            paths = HostPaths.under("/").with_overrides(cgroup_root=str(root))
            evictor = Evictor(node_name=NODE, paths=paths, cgroup_version=1, health=Health(), stats=EvictionStats(),
                              events=EventRecorder(Health(), NODE, lambda p, o: None), post=lambda p, o: None,
                              only_evict_by_api=False, standalone=False)
            assert evictor.mode == "kill"
            result = evictor.carry_out(plan_of([meta(raw)], [1], 1))
            assert [e.pod.name for e in result.evicted] == ["victim"]
            assert procs[0].wait(timeout=10) == -9
            time.sleep(0.2)
            assert procs[1].poll() is None and procs[2].poll() is None and bystander.poll() is None
            assert evictor.stats.snapshot()[0] == {"evicted": 1}
            assert not evictor.is_evicted("uid-victim")  # the kill path caches nothing (picked again later)
            # a pid written into a cgroup's procs file that /proc places elsewhere is never signalled
            fake = root / "cpu" / pod_rel / "fake"
            fake.mkdir()
            assert kill_cgroup(paths, 1, f"{pod_rel}/fake") == 0
        finally:
            for p in [*procs, bystander]:
                p.kill()
                p.wait()


def test_kill_refuses_a_proc_root_that_is_not_this_hosts(tmp_path: Path) -> None:
    host = SimHost(tmp_path, 1, CgroupDriver.CGROUPFS).setup()
    rel = "kubepods/besteffort/podx/c"
    (host.cgroup_root() / "cpu" / rel).mkdir(parents=True)
    (host.cgroup_root() / "cpu" / rel / "cgroup.procs").write_text(f"{os.getpid()}\n")
    (tmp_path / "proc" / str(os.getpid())).mkdir(parents=True)
    (tmp_path / "proc" / str(os.getpid()) / "cgroup").write_text(f"4:cpu,cpuacct:/{rel}\n")
    with pytest.raises(OSError, match="not this host's /proc"):
        kill_cgroup(host.paths, 1, rel)


# ---- a simulated node over its memory threshold, end to end ---------------------------------------------------------


async def test_simulated_node_evicts_be_pods_in_order_down_to_the_lower_threshold(
        km: kmock.KubernetesEmulator, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """100 GiB node, 75 GiB used (75 % ≥ the chart's 70 %): 7 GiB must go (down to 68 %). BE pods use 4, 3, 2 and
    1 GiB at priority 100 and 5 GiB at priority 200; an LS pod uses 40 GiB. Evicted: the 4 and 3 GiB pods; the
    2 GiB pod would pass 68 % already. The LS pod is never touched."""
    host = SimHost(tmp_path / "host", 1, CgroupDriver.CGROUPFS, mem_total_kb=100 * 1024 * 1024,
                   mem_available_kb=25 * 1024 * 1024).setup()
    pods_dir = tmp_path / "pods"
    pods_dir.mkdir()
    usage = {"be-4g": (4, 100, "BE"), "be-3g": (3, 100, "BE"), "be-2g": (2, 100, "BE"), "be-1g": (1, 100, "BE"),
             "be-5g-prio200": (5, 200, "BE"), "ls-40g": (40, 1, "LS")}
    raws = []
    for name, (gib, prio, qos) in usage.items():
        raw = make_pod(name, f"uid-{name}", "BestEffort" if qos == "BE" else "Burstable", namespace="batch",
                       labels={"koordinator.sh/qosClass": qos}, priority=prio)
        k8s = K8sQoS.BESTEFFORT if qos == "BE" else K8sQoS.BURSTABLE
        host.write_cgroup(host.pod_dir(k8s, f"uid-{name}"), SimCgroup(cpu_ns=10**9, anon=gib * GI))
        (pods_dir / f"{name}.yaml").write_text(yaml.safe_dump(raw))
        raws.append(raw)
    store(km, *raws)
    slo = tmp_path / "nodeslo.yaml"
    slo.write_text(yaml.safe_dump({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO",
                                   "metadata": {"name": NODE}, "spec": {"resourceUsedThresholdWithBE": {
                                       "enable": True, "cpuSuppressThresholdPercent": 65,
                                       "cpuSuppressPolicy": "cpuset", "memoryEvictThresholdPercent": 70,
                                       "cpuEvictPolicy": "evictByRealLimit"}}}))
    # a cluster agent (no --pods-dir): the pods come from a directory here instead of kubelet
    cfg = Config(node_name=NODE, paths=host.paths, host_root=str(host.root),
                 nodeslo_file=str(slo), state_dir=str(tmp_path / "state"),
                 feature_gates=parse_feature_gates("BECPUEvict=true,BEMemoryEvict=true,CgroupReconcile=true,"
                                                   "Accelerators=true"),
                 evict=EvictConfig(only_evict_by_api=True))
    agent = Agent(cfg)
    assert agent.sync_pods(PodsDirSource(str(pods_dir), agent.health)) and agent.load_nodeslo_file()
    agent.state.set_node({"metadata": {"name": NODE}, "status": {"capacity": {"cpu": "4", "memory": "100Gi"}}})
    agent.collect()
    [memory, cpu] = agent.evict_strategies
    assert (memory.gate, memory.cool_down, cpu.gate, cpu.cool_down) == ("BEMemoryEvict", 4, "BECPUEvict", 20)
    plan = memory.plan(agent.qos_state())
    assert plan is not None and plan.need == 100 * GI * (75 - 68) // 100
    assert [e.pod.name for e in plan.candidates] == ["be-4g", "be-3g", "be-2g", "be-1g", "be-5g-prio200"]
    post = KubeClient(KubeConfig(server=str(km.url))).post
    result = await asyncio.to_thread(agent.evictor(post).carry_out, plan)
    memory.finish(result)
    assert [b["metadata"]["name"] for b in evictions_sent(km)] == ["be-4g", "be-3g"]
    assert memory.cooling()  # 4 s from a round that evicted
    assert memory.plan(agent.qos_state()) is None
    # `koordlet plan` shows the same victims beside the writes
    dry = agent.qos_manager(dry_run=True)
    holder: list[Any] = []
    results = dry.reconcile(agent.qos_state(), report=holder.append)
    shown = plan_json(results, holder[0], dry.executor)
    assert [e["pod"] for e in shown["evictions"]] == ["batch/be-4g", "batch/be-3g"]
    assert shown["evictions"][0]["reason"] == "evicted" and shown["evictions"][0]["feature"] == "BEMemoryEvict"
    assert "batch/be-4g" in plan_table(shown) and "EvictBEPodByNodeMemoryUsage" in plan_table(shown)
    # BECPUEvict under the chart: cooling for its first 20 s, then a no-op that says so once
    assert cpu.plan(agent.qos_state()) is None
    cpu.last_evict = None
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        for _ in range(5):
            assert cpu.plan(agent.qos_state()) is None
    assert caplog.text.count("CPUEvict (gate BECPUEvict) skipped: invalid config: CPUEvictBESatisfactionLowerPercent "
                             "or CPUEvictBESatisfactionUpperPercent not config") == 1


def test_strategies_follow_gates_intervals_and_collect_interval(tmp_path: Path) -> None:
    base = Config(node_name=NODE, paths=HostPaths.under(str(tmp_path)),
                  feature_gates=parse_feature_gates("BECPUEvict=true,BEMemoryEvict=true"))
    clock = Clock()
    got = strategies(base, Health(), clock)
    assert [(s.name, s.interval, s.cool_down, s.last_evict) for s in got] == [
        ("memoryEvict", 1, 4, None), ("CPUEvict", 1, 20, 1000.0)]  # CPU's cool-down starts at start
    assert strategies(replace(base, feature_gates=parse_feature_gates("")), Health()) == []
    assert [s.name for s in strategies(replace(base, evict=EvictConfig(memory_evict_interval_seconds=0)),
                                       Health())] == ["CPUEvict"]
    assert [s.name for s in strategies(replace(base, evict=EvictConfig(cpu_evict_interval_seconds=-1)),
                                       Health())] == ["memoryEvict"]
    assert strategies(replace(base, collect_res_used_interval=0.5), Health()) == []  # qosmanager off


def test_cool_down_from_the_last_round_that_evicted() -> None:
    from koordlet.qos.evictor import RoundResult

    clock = Clock()
    s = EvictStrategy("memoryEvict", "BEMemoryEvict", memoryevict, 1, 4, 1, False, Health(), clock=clock)
    assert not s.cooling()  # the first round may evict
    s.finish(RoundResult())
    assert not s.cooling()  # a round that evicted nothing does not start it
    s.finish(RoundResult((Eviction(meta(be("a")), "BEMemoryEvict", 1),), 1))
    assert s.cooling()
    clock.now += 3.9
    assert s.cooling()
    clock.now += 0.1
    assert not s.cooling()


def test_one_pod_failing_unexpectedly_does_not_stop_the_round() -> None:
    sent: list[str] = []

    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        if body.get("kind") == "Eviction" and body["metadata"]["name"] == "a":
            raise RuntimeError("boom")
        sent.append(path)
        return {}

    health = Health()
    evictor = Evictor(node_name=NODE, paths=HostPaths.under("/nonexistent"), cgroup_version=1, health=health,
                      stats=EvictionStats(), events=EventRecorder(health, NODE, post), post=post,
                      only_evict_by_api=True, standalone=False)
    result = evictor.carry_out(plan_of([meta(be("a", 1)), meta(be("b", 2))], [10, 10], 5))
    assert [e.pod.name for e in result.evicted] == ["b"]
    assert health.skipped[("eviction", "failed")] == 1
    assert sent[0] == "/api/v1/namespaces/batch/pods/b/eviction"


def test_over_threshold_without_be_pods_is_said_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from apis.slo.decode import nodeslo_config
    from koordlet.metriccache import MetricCache
    from koordlet.qos.state import QoSState

    cache = MetricCache(lambda kind: 3600)
    now = int(time.time() * 1000)
    cache.append(cache.key("node_memory_usage"), now, 90 * GI)
    s = QoSState(HostPaths.under(str(tmp_path)), 1, CgroupDriver.CGROUPFS, [meta(make_pod("ls", "uid-ls"))],
                 nodeslo_config({"resourceUsedThresholdWithBE": {"enable": True}}), [], True, cache=cache,
                 node={"status": {"capacity": {"memory": "100Gi"}}})
    strategy = EvictStrategy("memoryEvict", "BEMemoryEvict", memoryevict, 1, 4, 1, False, Health())
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert strategy.plan(s, now) is None
    assert caplog.text.count("but there is no BE pod to evict") == 1
