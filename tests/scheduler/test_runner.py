"""The secondary scheduler (`koord-sched run`) against kmock as the API server, over real HTTP."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import kmock
import pytest

from apis.client.kubeapi import KubeClient, KubeConfig
from scheduler.cli import main, profile
from scheduler.cluster import Cluster, NodeInfo
from scheduler.config.profile import parse_config
from scheduler.framework import Scheduler
from scheduler.gang.queuesort import priority_order
from scheduler.runner import SecondaryScheduler

from chartconfig import chart_config
from gpu_cluster import ALLOCATED, FAIL_BINDING, GPU_NODES, seed
from gpu_cluster import pod as _pod

NAME = "koord-py"
PODGROUPS = "scheduling.sigs.k8s.io/v1alpha1/podgroups"
GANG_ID = "internal.scheduling.koordinator.sh/bind-gang-group-id"



def feasible(sched: Scheduler, pod: dict[str, Any], names: list[str] | None = None
             ) -> tuple[list[NodeInfo], dict[str, str]]:
    with sched.cycle(pod) as cycle:
        return cycle.feasible(names)

def member(name: str, gpus: int, gang: str = "job", scheduler: str = NAME, created: str = "2024-01-01T00:00:00Z",
           annotations: dict[str, str] | None = None) -> dict[str, Any]:
    pod = _pod(name, {"nvidia.com/gpu": gpus}, annotations=annotations)
    pod["metadata"]["creationTimestamp"] = created
    if gang:
        pod["metadata"]["labels"] = {"pod-group.scheduling.sigs.k8s.io": gang}
    pod["spec"]["schedulerName"] = scheduler
    return pod


def podgroup(name: str, min_member: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "metadata": {"name": name, "namespace": "default"},
            "spec": {"minMember": min_member}}


@pytest.fixture
def km(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    seed(kmock, (PODGROUPS,))

    def status(request: kmock.Request) -> Any:  # strategic merge of conditions is not emulated: accept and echo
        return kmock.objects["v1/pods", request.namespace, str(request.name)].raw

    kmock["patch", kmock.resource("v1/pods"), kmock.subresource("status")] << status
    return kmock


def add(km: kmock.KubernetesEmulator, *pods: dict[str, Any]) -> None:
    for p in pods:
        km.objects["v1/pods", "default", p["metadata"]["name"]] = p


@pytest.fixture
def runner(km: kmock.KubernetesEmulator) -> SecondaryScheduler:
    def make(cluster: Cluster) -> Scheduler:
        return Scheduler(cluster, profile(None))

    return SecondaryScheduler(KubeClient(KubeConfig(server=str(km.url))), NAME, make)


def stored(km: kmock.KubernetesEmulator, name: str) -> dict[str, Any]:
    raw: dict[str, Any] = km.objects["v1/pods", "default", name].raw
    return raw


def writes(km: kmock.KubernetesEmulator) -> list[tuple[str, str]]:
    return [(r.method.value, r.url.path) for r in km if r.method.value in ("PATCH", "POST")]


def binds(km: kmock.KubernetesEmulator) -> list[str]:
    return [p.split("/")[-2] for m, p in writes(km) if m == "POST" and p.endswith("/binding")]


async def test_binds_whole_gang_and_ignores_other_schedulers(km: kmock.KubernetesEmulator,
                                                             runner: SecondaryScheduler) -> None:
    km.objects[PODGROUPS, "default", "job"] = podgroup("job", 3)
    add(km, *(member(f"g{i}", 4, created=f"2024-01-01T00:00:0{i}Z") for i in range(3)),
        member("theirs", 1, gang="", scheduler="default-scheduler"))
    placements = await asyncio.to_thread(runner.run_once)
    assert sorted(p.pod for p in placements) == ["default/g0", "default/g1", "default/g2"]
    assert all(p.node for p in placements) and not runner.failures
    assert sorted(binds(km)) == ["g0", "g1", "g2"]
    w = writes(km)
    for i in range(3):
        patch = w.index(("PATCH", f"/api/v1/namespaces/default/pods/g{i}"))
        assert patch < w.index(("POST", f"/api/v1/namespaces/default/pods/g{i}/binding"))
    # whole gang annotated before the first Binding
    assert max(w.index(("PATCH", f"/api/v1/namespaces/default/pods/g{i}")) for i in range(3)) < min(
        i for i, (m, _) in enumerate(w) if m == "POST")
    minors: dict[str, list[int]] = {}
    for i in range(3):
        pod = stored(km, f"g{i}")
        node = pod["spec"]["nodeName"]
        assert node in GPU_NODES
        ann = pod["metadata"]["annotations"]
        assert GANG_ID not in ann  # the default profile, as v1.7's, has no Coscheduling at preBind
        minors.setdefault(node, []).extend(a["minor"] for a in json.loads(ann[ALLOCATED])["gpu"])
    for node, ms in minors.items():
        assert len(ms) == len(set(ms)) and (node != "gpu-a" or 0 not in ms)  # no GPU handed out twice
    assert not stored(km, "theirs")["spec"]["nodeName"]
    assert "theirs" not in str(w)
    # next cycle: nothing left to do, nothing rebound
    assert await asyncio.to_thread(runner.run_once) == []
    assert len(binds(km)) == 3


async def test_gang_that_cannot_fit_binds_nothing(km: kmock.KubernetesEmulator, runner: SecondaryScheduler) -> None:
    km.objects[PODGROUPS, "default", "big"] = podgroup("big", 3)
    add(km, *(member(f"b{i}", 6, gang="big") for i in range(3)))  # 3×6 GPUs, 15 free
    placements = await asyncio.to_thread(runner.run_once)
    assert [p.node for p in placements] == [None, None, None]
    assert all("GangGroup" in p.reason for p in placements)
    assert [w for w in writes(km) if not w[1].endswith("/status")] == []
    assert binds(km) == []
    status_patches = [r for r in km if r.method.value == "PATCH" and r.url.path.endswith("/status")]
    assert len(status_patches) == 3
    cond = status_patches[0].data["status"]["conditions"][0]
    assert cond["type"] == "PodScheduled" and cond["status"] == "False" and cond["reason"] == "Unschedulable"
    assert status_patches[0].headers["Content-Type"] == "application/strategic-merge-patch+json"
    for i in range(3):
        assert ALLOCATED not in stored(km, f"b{i}")["metadata"]["annotations"]
    assert runner.scheduler is not None
    assert not any(n.pods.keys() - {"default/old"} for n in runner.scheduler.cluster.nodes.values())


async def test_gang_without_enough_members_waits(km: kmock.KubernetesEmulator, runner: SecondaryScheduler) -> None:
    km.objects[PODGROUPS, "default", "job"] = podgroup("job", 3)
    add(km, member("g0", 1), member("g1", 1))
    placements = await asyncio.to_thread(runner.run_once)
    assert all(p.node is None and "child pod not collect enough" in p.reason for p in placements)
    assert binds(km) == []


async def test_binding_failure_rolls_back_unbound_members(km: kmock.KubernetesEmulator) -> None:
    """With Coscheduling at preBind (v1.8's chart) the members' bind-gang annotations go out with their patch and
    are taken off again with the rest of what the unbound members were given."""
    prebind = parse_config(chart_config(enable={"preBind": ["Coscheduling"]}))

    def make(cluster: Cluster) -> Scheduler:
        return Scheduler(cluster, profile(prebind))

    runner = SecondaryScheduler(KubeClient(KubeConfig(server=str(km.url))), NAME, make)
    km.objects[PODGROUPS, "default", "job"] = podgroup("job", 3)
    add(km, member("g0", 4, created="2024-01-01T00:00:00Z"),
        member("g1", 4, created="2024-01-01T00:00:01Z", annotations={FAIL_BINDING: ""}),
        member("g2", 4, created="2024-01-01T00:00:02Z"))
    placements = await asyncio.to_thread(runner.run_once)
    by_pod = {p.pod: p for p in placements}
    assert by_pod["default/g0"].node is not None
    assert by_pod["default/g1"].node is None and "etcd is sad" in by_pod["default/g1"].reason
    assert by_pod["default/g2"].node is None
    [failure] = runner.failures
    assert failure.unit == "default/job" and failure.bound == ["default/g0"]
    assert failure.rolled_back == ["default/g1", "default/g2"]
    assert binds(km) == ["g0", "g1"]  # g2's Binding is never attempted
    g0_node = stored(km, "g0")["spec"]["nodeName"]
    assert stored(km, "g0")["metadata"]["annotations"][GANG_ID] == "default/job"
    for name in ("g1", "g2"):
        pod = stored(km, name)
        assert not pod["spec"]["nodeName"]
        assert ALLOCATED not in pod["metadata"]["annotations"] and GANG_ID not in pod["metadata"]["annotations"]
    sched = runner.scheduler
    assert sched is not None
    on_nodes = {k: n for n, info in sched.cluster.nodes.items() for k in info.pods}
    assert on_nodes == {"default/old": "gpu-a", "default/g0": g0_node}
    # the rolled-back reservations are free again at device level: every remaining GPU can be taken
    for node, free in (("gpu-a", 7 - (4 if g0_node == "gpu-a" else 0)), ("gpu-b", 8 - (4 if g0_node == "gpu-b"
                                                                                         else 0))):
        fits, failed = feasible(sched, _pod(f"probe-{node}", {"nvidia.com/gpu": free}), [node])
        assert [n.name for n in fits] == [node], failed


async def test_order_gang_members_together() -> None:
    pods = [member("a", 1, gang="x", created="2024-01-01T00:00:01Z"),
            member("lone", 1, gang="", created="2024-01-01T00:00:02Z"),
            member("b", 1, gang="x", created="2024-01-01T00:00:03Z"),
            member("c", 1, gang="y", created="2024-01-01T00:00:00Z")]
    assert [p["metadata"]["name"] for p in priority_order(pods)] == ["c", "a", "b", "lone"]


async def test_run_loop_and_cli_once(km: kmock.KubernetesEmulator, runner: SecondaryScheduler,
                                     tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    add(km, member("lone", 1, gang=""))
    stop = threading.Event()
    thread = threading.Thread(target=runner.run, args=(stop, 0.02), daemon=True)
    thread.start()
    for _ in range(200):
        if binds(km):
            break
        await asyncio.sleep(0.02)
    stop.set()
    await asyncio.to_thread(thread.join, 5)
    assert binds(km) == ["lone"]

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "k",
        "clusters": [{"name": "k", "cluster": {"server": str(km.url).rstrip("/")}}],
        "contexts": [{"name": "k", "context": {"cluster": "k", "user": "u"}}], "users": [{"name": "u", "user": {}}]}))
    add(km, member("next", 2, gang=""))
    rc = await asyncio.to_thread(main, ["run", "--scheduler-name", NAME, "--kubeconfig", str(kubeconfig), "--once"])
    assert rc == 0
    assert "default/next" in capsys.readouterr().out and binds(km) == ["lone", "next"]
