"""ElasticQuota over-use revoke (upstream quota_overuse_revoke_test.go, restated): which pods go, when a quota is
due, what `simulate` reports and what `run` evicts."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import kmock
from test_preemption_run import NAME, QUOTAS, add, posts
from test_preemption_run import km as km  # the API double with binding and eviction
from test_preemption_run import pod as run_pod

from apis.client.kubeapi import KubeClient, KubeConfig
from scheduler.cli import profile, simulate, table
from scheduler.cluster import Cluster, build_cluster, key
from scheduler.config import load_config
from scheduler.elasticquota.revoke import OverUseMonitor, pods_to_revoke
from scheduler.framework import Scheduler
from scheduler.runner import SecondaryScheduler

from chartconfig import chart_config

PREEMPTIBLE = "quota.scheduling.koordinator.sh/preemptible"


def pod(name: str, priority: int, cpu: int, mem: int, quota: str = "test1", node_name: str = "n1",
        labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default",
                         "labels": {"quota.scheduling.koordinator.sh/name": quota, **(labels or {})}},
            "spec": {"nodeName": node_name, "priority": priority, "containers": [{"name": "c", "resources": {
                "requests": {"cpu": str(cpu), "memory": str(mem)}}}]},
            "status": {"phase": "Running" if node_name else "Pending"}}


def never(_: dict[str, Any]) -> bool:
    return False


def test_revoke_list_least_important_first_then_given_back() -> None:
    # GetToRevokePodList: used cpu 90 (+1 memory) over runtime cpu 50: pods 4, 3, 2 are taken (lowest priority
    # first) until it fits, then offered back from the most important: 3 stays, 2 and 4 go
    cluster = build_cluster([])
    pods = [pod("1", 10, 20, 0), pod("2", 9, 10, 1), pod("3", 8, 20, 0), pod("4", 7, 40, 0)]
    used = {"cpu": 90_000, "memory": 1}
    got = pods_to_revoke(used, {"cpu": 50_000, "memory": 0}, pods, cluster, never)
    assert [p["metadata"]["name"] for p in got] == ["2", "4"]
    # a runtime nothing fits in: every pod taken goes
    got = pods_to_revoke(used, {"cpu": -1000, "memory": 0}, pods, cluster, never)
    assert sorted(p["metadata"]["name"] for p in got) == ["1", "2", "3", "4"]
    # a non-preemptible pod is never taken
    guarded = [*pods, pod("5", 1, 10, 0, labels={PREEMPTIBLE: "false"})]
    got = pods_to_revoke({"cpu": 100_000, "memory": 1}, {"cpu": -1000}, guarded, cluster,
                         lambda p: p["metadata"]["labels"].get(PREEMPTIBLE) == "false")
    assert "5" not in [p["metadata"]["name"] for p in got] and len(got) == 4


def test_equal_priority_the_later_started_goes_first() -> None:
    early, late = pod("early", 5, 10, 0), pod("late", 5, 10, 0)
    early["status"]["startTime"] = "2024-01-01T00:00:00Z"
    late["status"]["startTime"] = "2024-06-01T00:00:00Z"
    got = pods_to_revoke({"cpu": 20_000}, {"cpu": 10_000}, [early, late], build_cluster([]), never)
    assert [p["metadata"]["name"] for p in got] == ["late"]


def test_monitor_waits_the_delay_of_continuous_over_use() -> None:
    now = [0.0]
    m = OverUseMonitor(10.0, lambda: now[0])
    over = {"test1": ({"cpu": 2}, {"cpu": 1}), "test2": ({"cpu": 1}, {"cpu": 1})}
    assert m.due(over) == []
    now[0] = 9.0
    assert m.due(over) == []
    now[0] = 10.5
    assert m.due(over) == ["test1"]  # over for 10.5 s > 10; test2 within its runtime
    now[0] = 15.0
    assert m.due(over) == []  # its clock started again with the revoke
    now[0] = 16.0
    assert m.due({"test1": ({"cpu": 1}, {"cpu": 1})}) == []  # back within: the clock restarts
    now[0] = 26.5
    assert m.due(over) == ["test1"]  # test2 forgotten and back, never over
    zero = OverUseMonitor(0.0, lambda: now[0])
    zero.due(over)
    now[0] = 27.0
    assert zero.due({**over, "test3": ({"cpu": 5}, {"cpu": 1})}) == ["test1"]  # test3 just started being watched


def quota(name: str, mx: int, mn: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "ElasticQuota",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"max": {"cpu": str(mx), "memory": "64Gi"}, "min": {"cpu": str(mn), "memory": "0"}}}


def node(name: str, cpu: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"allocatable": {"cpu": str(cpu), "memory": "64Gi", "pods": "110"}}}


def config(tmp_path: Path, monitor: bool) -> str:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(json.dumps(chart_config(pluginConfig=[
        {"name": "ElasticQuota", "args": {"monitorAllQuotas": monitor, "delayEvictTime": "0s"}}])))
    return str(cfg)


def borrowed() -> list[dict[str, Any]]:
    # qa borrowed 9 of the 12 cpu while qb asked for nothing; qb's 2 × 4 cpu now ask for qb's min 8
    return [node("n1", 6), node("n2", 6), quota("qa", 12, 4), quota("qb", 12, 8),
            pod("qa-1", 1, 3, 0, "qa", "n1"), pod("qa-2", 2, 3, 0, "qa", "n1"), pod("qa-3", 3, 3, 0, "qa", "n2")]


def test_simulate_reports_the_pods_revoked_from_an_over_used_quota(tmp_path: Path) -> None:
    pending = [pod("qb-1", 5, 4, 0, "qb", ""), pod("qb-2", 5, 4, 0, "qb", "")]
    out = simulate(build_cluster(borrowed()), pending, config(tmp_path, True))
    # qb's request takes its min back: qa's runtime falls to 4 while it uses 9
    assert out["revocations"] == [{"quota": "qa", "used": "cpu:9,memory:0", "runtime": "cpu:4,memory:0",
                                   "pods": ["default/qa-2", "default/qa-1"]}]
    assert "revocations" not in simulate(build_cluster(borrowed()), pending, config(tmp_path, False))
    assert ("ElasticQuota qa uses cpu:9,memory:0 over its runtime cpu:4,memory:0: after delayEvictTime, revokes "
            "default/qa-2, default/qa-1") in table(out)


async def test_run_evicts_the_over_used_quota_pods_after_the_delay(km: kmock.KubernetesEmulator,
                                                                    tmp_path: Path) -> None:
    km.objects[QUOTAS, "default", "qa"] = quota("qa", 8, 2)
    km.objects[QUOTAS, "default", "qb"] = quota("qb", 8, 6)
    # n1 and n2 have 4 cpu each; qa runs 3 × 2 cpu, qb's pending 4-cpu pods ask for its min 6
    add(km, *(run_pod(f"qa-{i}", 2, i, "n1" if i < 3 else "n2",
                      labels={"quota.scheduling.koordinator.sh/name": "qa"}) for i in (1, 2, 3)),
        *(run_pod(f"qb-{i}", 4, 5, labels={"quota.scheduling.koordinator.sh/name": "qb"}) for i in (1, 2)))
    cfg = tmp_path / "config.yaml"
    cfg.write_text(json.dumps(chart_config(pluginConfig=[
        {"name": "ElasticQuota", "args": {"monitorAllQuotas": True, "delayEvictTime": "30s"}}])))

    def make(cluster: Cluster) -> Scheduler:
        return Scheduler(cluster, profile(str(cfg)))

    r = SecondaryScheduler(KubeClient(KubeConfig(server=str(km.url))), NAME, make)
    now = [100.0]
    r.clock = lambda: now[0]
    await asyncio.to_thread(r.run_once)
    assert posts(km, "eviction") == [] and r.revoked == []  # over its runtime, not yet for 30 s
    now[0] = 131.0
    await asyncio.to_thread(r.run_once)
    # qa uses 6 against a runtime of 2: qa-1 and qa-2 (the least important) are evicted, qa-3 stays
    assert sorted(posts(km, "eviction")) == ["qa-1", "qa-2"]
    assert sorted(k for _, k in r.revoked) == ["default/qa-1", "default/qa-2"]
    assert key(km.objects["v1/pods", "default", "qa-3"].raw) == "default/qa-3"


async def test_run_writes_tree_quota_status_with_guaranteed(km: kmock.KubernetesEmulator, tmp_path: Path,
                                                            validate_crd: Any) -> None:
    """Status as upstream's controller writes it, for a quota of another tree, with ElasticQuotaGuaranteeUsage."""
    tree = {"quota.scheduling.koordinator.sh/tree-id": "t1"}
    km.objects[QUOTAS, "default", "t1-root"] = {
        **quota("t1-root", 8, 8), "metadata": {
            "name": "t1-root", "namespace": "default",
            "labels": {**tree, "quota.scheduling.koordinator.sh/is-root": "true",
                       "quota.scheduling.koordinator.sh/is-parent": "true"},
            "annotations": {"quota.scheduling.koordinator.sh/total-resource": '{"cpu":"8","memory":"64Gi"}'}}}
    km.objects[QUOTAS, "default", "team"] = {
        **quota("team", 8, 2), "metadata": {
            "name": "team", "namespace": "default",
            "labels": {**tree, "quota.scheduling.koordinator.sh/parent": "t1-root"}}}
    add(km, run_pod("t-1", 3, 1, labels={"quota.scheduling.koordinator.sh/name": "team"}))
    cfg = load_config(None)
    cfg.plugin_args("ElasticQuota").guarantee_usage = True

    def make(cluster: Cluster) -> Scheduler:
        return Scheduler(cluster, profile(cfg))

    r = SecondaryScheduler(KubeClient(KubeConfig(server=str(km.url))), NAME, make)
    placements = await asyncio.to_thread(r.run_once)
    assert placements[0].node is not None
    team = km.objects[QUOTAS, "default", "team"].raw
    validate_crd("scheduling.sigs.k8s.io_elasticquotas.yaml", team)
    ann = team["metadata"]["annotations"]
    assert team["status"]["used"] == {"cpu": "3"}
    assert json.loads(ann["quota.scheduling.koordinator.sh/allocated"]) == {"cpu": "3"}
    assert json.loads(ann["quota.scheduling.koordinator.sh/guaranteed"]) == {"cpu": "3", "memory": "0"}
    root = km.objects[QUOTAS, "default", "t1-root"].raw["metadata"]["annotations"]
    assert json.loads(root["quota.scheduling.koordinator.sh/allocated"])["cpu"] == "3"
    assert json.loads(root["quota.scheduling.koordinator.sh/runtime"])["cpu"] == "8"
