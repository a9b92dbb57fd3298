"""`koord-sched run` carries out job-level preemption against kmock: Eviction API, nominations, bind after."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import kmock
import pytest

from apis.client.kubeapi import KubeClient, KubeConfig
from scheduler.cli import profile
from scheduler.cluster import Cluster
from scheduler.framework import Scheduler
from scheduler.runner import SecondaryScheduler

from chartconfig import chart_config
from kubedouble import PDBS, emulate_binding, emulate_eviction

NAME = "koord-py"
PODGROUPS = "scheduling.sigs.k8s.io/v1alpha1/podgroups"
QUOTAS = "scheduling.sigs.k8s.io/v1alpha1/elasticquotas"


def node(name: str, cpu: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "metadata": {"name": name},
            "status": {"allocatable": {"cpu": str(cpu), "memory": "64Gi", "pods": "110"}}}


def pod(name: str, cpu: int, priority: int, node_name: str = "", gang: str = "", labels: dict[str, str] | None = None,
        **spec: Any) -> dict[str, Any]:
    lab = dict(labels or {})
    if gang:
        lab["pod-group.scheduling.sigs.k8s.io"] = gang
    return {"apiVersion": "v1", "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}",
                                             "labels": lab, "creationTimestamp": "2024-01-01T00:00:00Z"},
            "spec": {"nodeName": node_name, "schedulerName": NAME, "priority": priority,
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": str(cpu)}}}], **spec},
            "status": {"phase": "Running" if node_name else "Pending"}}


@pytest.fixture
def km(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    for res in ("v1/nodes", "v1/pods", PODGROUPS, PDBS, QUOTAS):
        kmock.resources[res] = {}
    for n in ("n1", "n2"):
        kmock.objects["v1/nodes", None, n] = node(n, 4)
    emulate_binding(kmock)
    emulate_eviction(kmock)
    return kmock


def add(km: kmock.KubernetesEmulator, *pods: dict[str, Any]) -> None:
    for p in pods:
        km.objects["v1/pods", "default", p["metadata"]["name"]] = p


def runner(km: kmock.KubernetesEmulator, tmp_path: Path, preemption: bool = True) -> SecondaryScheduler:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(json.dumps(chart_config(pluginConfig=[
        {"name": "Coscheduling", "args": {"enablePreemption": preemption}}])))

    def make(cluster: Cluster) -> Scheduler:
        return Scheduler(cluster, profile(str(cfg)))

    return SecondaryScheduler(KubeClient(KubeConfig(server=str(km.url))), NAME, make, enable_preemption=preemption)


def stored(km: kmock.KubernetesEmulator, name: str) -> dict[str, Any]:
    raw: dict[str, Any] = km.objects["v1/pods", "default", name].raw
    return raw


def posts(km: kmock.KubernetesEmulator, sub: str) -> list[str]:
    return [r.url.path.split("/")[-2] for r in km if r.method.value == "POST" and r.url.path.endswith("/" + sub)]


def low_pods() -> list[dict[str, Any]]:
    return [pod("low-a", 4, 1, "n1", labels={"app": "a"}), pod("low-b", 2, 1, "n2", labels={"app": "b"}),
            pod("low-c", 2, 1, "n2", labels={"app": "c"})]


def job(n: int = 2, cpu: int = 4, **spec: Any) -> list[dict[str, Any]]:
    return [pod(f"hp{i}", cpu, 100, gang="job", **spec) for i in range(n)]


async def test_victims_evicted_nominated_then_gang_bound(km: kmock.KubernetesEmulator, tmp_path: Path) -> None:
    km.objects[PODGROUPS, "default", "job"] = {"metadata": {"name": "job", "namespace": "default"},
                                               "spec": {"minMember": 2}}
    add(km, *low_pods(), *job())
    r = runner(km, tmp_path)
    placements = await asyncio.to_thread(r.run_once)
    assert all(p.node is None and "preempting 3 pod(s)" in p.reason for p in placements)
    assert sorted(posts(km, "eviction")) == ["low-a", "low-b", "low-c"]
    assert posts(km, "binding") == []
    nominated = {n: stored(km, n)["status"].get("nominatedNodeName") for n in ("hp0", "hp1")}
    assert sorted(nominated.values()) == ["n1", "n2"]
    victim = stored(km, "low-a")
    assert victim["metadata"].get("deletionTimestamp")
    [cond] = [c for c in victim["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert cond["reason"] == "PreemptionByScheduler" and "preemptor: default/job" in cond["message"]

    # victims still terminating: no second preemption, no bind
    placements = await asyncio.to_thread(r.run_once)
    assert all("terminating pod on the nominated node" in p.reason for p in placements)
    assert len(posts(km, "eviction")) == 3 and posts(km, "binding") == []

    for v in ("low-a", "low-b", "low-c"):  # the kubelet finishes them
        km.objects["v1/pods", "default", v].delete()
    placements = await asyncio.to_thread(r.run_once)
    assert sorted(p.node or "" for p in placements) == ["n1", "n2"]
    assert sorted(posts(km, "binding")) == ["hp0", "hp1"]


async def test_pdb_blocks_a_victim_and_nothing_is_evicted(km: kmock.KubernetesEmulator, tmp_path: Path) -> None:
    km.objects[PDBS, "default", "keep-a"] = {"metadata": {"name": "keep-a", "namespace": "default"},
                                             "spec": {"selector": {"matchLabels": {"app": "a"}}},
                                             "status": {"disruptionsAllowed": 0}}
    add(km, *low_pods(), *job(labels={"pod-group.scheduling.sigs.k8s.io": "job"}))
    km.objects[PODGROUPS, "default", "job"] = {"metadata": {"name": "job", "namespace": "default"},
                                               "spec": {"minMember": 2}}
    placements = await asyncio.to_thread(runner(km, tmp_path).run_once)
    assert all(p.node is None for p in placements)
    assert "preemption: no potential victims" in placements[0].reason or "not helpful" in placements[0].reason
    assert posts(km, "eviction") == [] and posts(km, "binding") == []
    assert not stored(km, "hp0")["status"].get("nominatedNodeName")


async def test_pdb_budget_spent_in_plan(km: kmock.KubernetesEmulator, tmp_path: Path) -> None:
    # one disruption allowed for app=b|c pods: low-b and low-c cannot both go, so hp1 has no node
    for name, app in (("keep-b", "b"), ("keep-c", "c")):
        km.objects[PDBS, "default", name] = {"metadata": {"name": name, "namespace": "default"},
                                             "spec": {"selector": {"matchLabels": {"app": app}}},
                                             "status": {"disruptionsAllowed": 0 if app == "c" else 1}}
    km.objects[PODGROUPS, "default", "job"] = {"metadata": {"name": "job", "namespace": "default"},
                                               "spec": {"minMember": 2}}
    add(km, *low_pods(), *job())
    placements = await asyncio.to_thread(runner(km, tmp_path).run_once)
    assert all(p.node is None for p in placements)
    assert posts(km, "eviction") == []


async def test_gang_that_cannot_fit_evicts_nothing(km: kmock.KubernetesEmulator, tmp_path: Path) -> None:
    km.objects[PODGROUPS, "default", "job"] = {"metadata": {"name": "job", "namespace": "default"},
                                               "spec": {"minMember": 3}}
    add(km, *low_pods(), *job(3))
    placements = await asyncio.to_thread(runner(km, tmp_path).run_once)
    assert all(p.node is None and "preemption not helpful" in p.reason for p in placements)
    assert posts(km, "eviction") == [] and not stored(km, "hp0")["status"].get("nominatedNodeName")


async def test_preemption_policy_never_and_priority(km: kmock.KubernetesEmulator, tmp_path: Path) -> None:
    km.objects[PODGROUPS, "default", "job"] = {"metadata": {"name": "job", "namespace": "default"},
                                               "spec": {"minMember": 2}}
    add(km, *low_pods(), *job(preemptionPolicy="Never"))
    placements = await asyncio.to_thread(runner(km, tmp_path).run_once)
    assert "not eligible due to preemptionPolicy=Never." in placements[0].reason
    assert posts(km, "eviction") == []
    # equal priority is no victim
    for p in job():
        p["spec"]["priority"] = 1
        add(km, p)
    placements = await asyncio.to_thread(runner(km, tmp_path).run_once)
    assert "no potential victims" in placements[0].reason and posts(km, "eviction") == []


async def test_preemption_off_by_default(km: kmock.KubernetesEmulator, tmp_path: Path) -> None:
    km.objects[PODGROUPS, "default", "job"] = {"metadata": {"name": "job", "namespace": "default"},
                                               "spec": {"minMember": 2}}
    add(km, *low_pods(), *job())
    placements = await asyncio.to_thread(runner(km, tmp_path, preemption=False).run_once)
    assert all(p.node is None and "preemption" not in p.reason for p in placements)
    assert posts(km, "eviction") == []


async def test_evictor_reports_pdb_refusal_and_falls_back_to_delete(km: kmock.KubernetesEmulator) -> None:
    from scheduler.eviction import Evictor

    km.objects[PDBS, "default", "keep-a"] = {"metadata": {"name": "keep-a", "namespace": "default"},
                                             "spec": {"selector": {"matchLabels": {"app": "a"}}},
                                             "status": {"disruptionsAllowed": 0}}
    add(km, *low_pods())
    ev = Evictor(KubeClient(KubeConfig(server=str(km.url))), NAME)
    why = await asyncio.to_thread(ev.evict, stored(km, "low-a"), "default/job", "default/hp0")
    assert why is not None and "refused by its PodDisruptionBudget" in why
    assert not stored(km, "low-a")["metadata"].get("deletionTimestamp")
    assert await asyncio.to_thread(ev.evict, stored(km, "low-b"), "default/job", "default/hp0") is None
    assert stored(km, "low-b")["metadata"].get("deletionTimestamp")


async def test_evictor_deletes_without_eviction_subresource(kmock: kmock.KubernetesEmulator) -> None:
    import kmock as lib

    from scheduler.eviction import Evictor

    kmock.resources["v1/pods"] = {}
    kmock.objects["v1/pods", "default", "low-c"] = pod("low-c", 2, 1, "n2")
    kmock["post", lib.resource("v1/pods"), lib.subresource("eviction")] << lib.Response(
        status=405, payload={"kind": "Status", "code": 405, "message": "method not allowed"})
    kmock["patch", lib.resource("v1/pods"), lib.subresource("status")] << (
        lambda request: kmock.objects["v1/pods", "default", "low-c"].raw)
    ev = Evictor(KubeClient(KubeConfig(server=str(kmock.url))), NAME)
    victim = kmock.objects["v1/pods", "default", "low-c"].raw
    assert await asyncio.to_thread(ev.evict, victim, "default/job", "default/hp0") is None
    assert any(r.method.value == "DELETE" and r.url.path.endswith("/pods/low-c") for r in kmock)
