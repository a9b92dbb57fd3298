"""Faults against `koord-sched run`: malformed objects in the cluster and 409 Conflicts on its pod patches and
Bindings, with kmock as the API server over real HTTP (issue #23 defect 7, the scheduler half)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import kmock
import pytest

from apis.client.kubeapi import KubeClient, KubeConfig
from scheduler.cli import profile
from scheduler.framework import Scheduler
from scheduler.runner import SecondaryScheduler

from kubedouble import status_failure

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scheduler"))  # the scheduler tests' GPU cluster
from gpu_cluster import ALLOCATED, seed

NAME = "koord-py"
RESERVATIONS = "scheduling.koordinator.sh/v1alpha1/reservations"
QUOTAS = "scheduling.sigs.k8s.io/v1alpha1/elasticquotas"
PRIORITY_CLASSES = "scheduling.k8s.io/v1/priorityclasses"


def pod(name: str, requests: dict[str, Any], node: str = "", ours: bool = True) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "annotations": {},
                         "creationTimestamp": "2024-01-01T00:00:00Z"},
            "spec": {"nodeName": node, "schedulerName": NAME if ours else "default-scheduler",
                     "containers": [{"name": "c", "resources": {"requests": requests}}]},
            "status": {"phase": "Running" if node else "Pending"}}


@pytest.fixture
def km(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    seed(kmock, (RESERVATIONS, QUOTAS, PRIORITY_CLASSES))

    def status(request: kmock.Request) -> Any:  # PodScheduled conditions: accept and echo
        return kmock.objects["v1/pods", request.namespace, str(request.name)].raw

    kmock["patch", kmock.resource("v1/pods"), kmock.subresource("status")] << status
    return kmock


@pytest.fixture
def runner(km: kmock.KubernetesEmulator) -> SecondaryScheduler:
    return SecondaryScheduler(KubeClient(KubeConfig(server=str(km.url))), NAME,
                              lambda c: Scheduler(c, *profile(None)), write_topology_status=False)


def bindings(km: kmock.KubernetesEmulator) -> list[str]:
    return [r.url.path.split("/")[-2] for r in km if r.method.value == "POST" and r.url.path.endswith("/binding")]


def node_of(km: kmock.KubernetesEmulator, name: str) -> str:
    return str(km.objects["v1/pods", "default", name].raw["spec"].get("nodeName") or "")


async def test_run_schedules_healthy_pods_beside_malformed_objects(km: kmock.KubernetesEmulator,
                                                                    runner: SecondaryScheduler) -> None:
    """Fault: a Node with `cpu: abc`, a Pod bound to gpu-b with `cpu: 1x`, a Pod whose metadata is a string, a
    Reservation and an ElasticQuota with unreadable specs, a PriorityClass whose value is a string, and a pending pod
    of ours with `cpu: 1x`. Invariant: every cycle completes; the healthy pending pods are bound (the malformed
    bound pod holds all of gpu-b's CPU, so they go elsewhere); the malformed pending pod is not bound."""
    km.objects["v1/nodes", None, "broken"] = {"metadata": {"name": "broken"},
                                              "status": {"allocatable": {"cpu": "abc", "memory": "1Ti"}}}
    km.objects["v1/pods", "default", "bad-bound"] = pod("bad-bound", {"cpu": "1x"}, "gpu-b", ours=False)
    km.objects["v1/pods", "default", "shapeless"] = {"metadata": "abc", "spec": {"schedulerName": NAME}}
    km.objects[RESERVATIONS, None, "bad-r"] = {"metadata": {"name": "bad-r", "uid": "u-r"},
                                               "spec": {"template": {"spec": {"containers": "abc"}},
                                                        "owners": "abc"}}
    km.objects[QUOTAS, "default", "bad-q"] = {"metadata": {"name": "bad-q", "namespace": "default"},
                                              "spec": {"max": {"cpu": "abc"}, "min": "abc"}}
    km.objects[PRIORITY_CLASSES, None, "bad-pc"] = {"metadata": {"name": "bad-pc"}, "value": "abc"}
    km.objects["v1/pods", "default", "bad-pending"] = pod("bad-pending", {"cpu": "1x"})
    for name in ("h1", "h2"):
        km.objects["v1/pods", "default", name] = pod(name, {"cpu": "40"})
    for _ in range(2):
        await asyncio.to_thread(runner.run_once)
    assert {node_of(km, "h1"), node_of(km, "h2")} <= {"gpu-a", "cpu-only"}
    assert not node_of(km, "bad-pending")
    assert sorted(bindings(km)) == ["h1", "h2"]


def gpu_pod(name: str) -> dict[str, Any]:
    return pod(name, {"nvidia.com/gpu": 1})


async def test_conflict_on_pod_patch_binds_nothing_then_retries(km: kmock.KubernetesEmulator,
                                                                 runner: SecondaryScheduler) -> None:
    """Fault: 409 Conflict on the device-allocated PATCH of a pending pod. Invariant: no crash, no Binding posted
    that cycle (no phantom bind), the pod is retried and bound once next cycle with its annotation."""
    km.objects["v1/pods", "default", "g"] = gpu_pod("g")
    km["patch /api/v1/namespaces/default/pods/g"][:1] << 409 << status_failure(409, "the object has been modified")
    placements = await asyncio.to_thread(runner.run_once)
    assert [p.node for p in placements] == [None] and "modified" in placements[0].reason
    assert bindings(km) == [] and not node_of(km, "g")
    assert [f.unit for f in runner.failures] == ["default/g"]
    await asyncio.to_thread(runner.run_once)
    assert bindings(km) == ["g"] and node_of(km, "g") in ("gpu-a", "gpu-b")
    assert json.loads(km.objects["v1/pods", "default", "g"].raw["metadata"]["annotations"][ALLOCATED])["gpu"]
    await asyncio.to_thread(runner.run_once)
    assert bindings(km) == ["g"]  # bound once


async def test_conflict_on_binding_when_bound_elsewhere(km: kmock.KubernetesEmulator,
                                                        runner: SecondaryScheduler) -> None:
    """Fault: the pod is bound by someone else between our list and our Binding, which answers 409. Invariant: no
    crash; our device annotation is taken back; the pod stays where the other binder put it (no lost or phantom
    bind) and the next cycle counts it there and does not bind it again."""
    km.objects["v1/pods", "default", "g"] = gpu_pod("g")

    def someone_else(request: kmock.Request) -> Any:
        km.objects["v1/pods", "default", "g"].patch({"spec": {"nodeName": "cpu-only"}})
        return kmock.Response(status=409, payload=status_failure(409, "pod g is already assigned to node cpu-only"))

    (km ** 10)["post /api/v1/namespaces/default/pods/g/binding"][:1] << someone_else
    placements = await asyncio.to_thread(runner.run_once)
    assert placements[0].node is None and [f.unit for f in runner.failures] == ["default/g"]
    assert node_of(km, "g") == "cpu-only"
    assert ALLOCATED not in (km.objects["v1/pods", "default", "g"].raw["metadata"].get("annotations") or {})
    assert await asyncio.to_thread(runner.run_once) == []
    assert runner.scheduler is not None and "default/g" in runner.scheduler.cluster.nodes["cpu-only"].pods
    assert bindings(km) == ["g"]  # our one refused try


async def test_conflict_on_second_gang_binding(km: kmock.KubernetesEmulator, runner: SecondaryScheduler) -> None:
    """Fault: 409 on the Binding of the second member of a two-pod gang. Invariant: the first member stays bound
    (there is no unbind), the second is rolled back (annotation removed, not bound), no crash; the next cycle binds
    the second member once."""
    from test_runner import PODGROUPS, member, podgroup

    km.resources[PODGROUPS] = {}
    km.objects[PODGROUPS, "default", "job"] = podgroup("job", 2)
    for i in range(2):
        km.objects["v1/pods", "default", f"m{i}"] = member(f"m{i}", 1, created=f"2024-01-01T00:00:0{i}Z")
    (km ** 10)["post /api/v1/namespaces/default/pods/m1/binding"][:1] << 409 << status_failure(409, "conflict")
    await asyncio.to_thread(runner.run_once)
    assert node_of(km, "m0") and not node_of(km, "m1")
    assert ALLOCATED not in (km.objects["v1/pods", "default", "m1"].raw["metadata"].get("annotations") or {})
    assert runner.failures and runner.failures[0].bound == ["default/m0"]
    await asyncio.to_thread(runner.run_once)
    await asyncio.to_thread(runner.run_once)
    assert sorted(bindings(km)) == ["m0", "m1", "m1"] and node_of(km, "m1")
