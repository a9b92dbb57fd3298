"""NUMA placement against the API double: `run` lists NodeResourceTopologies and patches resource-status before the
Binding; the extender watches them, so a node's NUMA facts follow the agent's updates."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import kmock
import pytest
from test_numa import LSR, SPEC, STATUS, node, nrt, pod

from apis.client.kubeapi import KubeClient, KubeConfig
from apis.extension.resource_status import resource_status
from scheduler.cli import profile
from scheduler.cluster import Cluster
from scheduler.extender import ClusterSource, Extender
from scheduler.framework import Scheduler
from scheduler.runner import SecondaryScheduler

from kubedouble import driver_client, emulate_binding

NAME = "koord-py"
NRT = "topology.node.k8s.io/v1alpha1/noderesourcetopologies"
SINGLE = {SPEC: json.dumps({"numaTopologyPolicy": "SingleNUMANode"})}


def make(cluster: Cluster) -> Scheduler:
    return Scheduler(cluster, profile(None))


@pytest.fixture
def km(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    for res in ("v1/nodes", "v1/pods", NRT):
        kmock.resources[res] = {}
    kmock.objects["v1/nodes", None, "n1"] = node("n1", 16, "128Gi")
    emulate_binding(kmock)
    return kmock


def pending(name: str, cpu: str, annotations: dict[str, str], bind: bool = True) -> dict[str, Any]:
    """An LSR pod (a cpuset is chosen for it) or, with bind=False, a plain one."""
    p = pod(name, {"cpu": cpu, "memory": "8Gi"}, annotations, LSR if bind else {})
    p["spec"]["schedulerName"] = NAME
    p["metadata"]["uid"] = f"uid-{name}"
    return p


async def test_run_places_a_single_numa_pod_with_resource_status_before_the_bind(
        km: kmock.KubernetesEmulator, validate_crd: Any) -> None:
    validate_crd("topology.node.k8s.io_noderesourcetopologies.yaml", nrt("n1"))
    km.objects[NRT, None, "n1"] = nrt("n1")
    km.objects["v1/pods", "default", "p"] = pending("p", "4", SINGLE)
    runner = SecondaryScheduler(KubeClient(KubeConfig(server=str(km.url))), NAME, make)
    placements = await asyncio.to_thread(runner.run_once)
    assert [(p.pod, p.node, p.reason) for p in placements] == [("default/p", "n1", "")]
    calls = [(q.method.value, q.url.path, q.body) for q in km if q.url.path.startswith("/api/v1/namespaces")]
    [patch_at] = [i for i, c in enumerate(calls) if c[0] == "PATCH" and c[1].endswith("/pods/p")]
    [bind_at] = [i for i, c in enumerate(calls) if c[1].endswith("/pods/p/binding")]
    assert patch_at < bind_at
    annotations = json.loads(calls[patch_at][2])["metadata"]["annotations"]
    st = resource_status(annotations)  # decoded as the agent's CPUSetAllocator decodes it
    assert sorted(st.cpus()) == [0, 1, 8, 9]  # FullPCPUs: two whole cores of NUMA node 0
    assert [n.node for n in st.numa_node_resources] == [0]
    assert json.loads(annotations[STATUS])["numaNodeResources"] == [
        {"node": 0, "resources": {"cpu": "4", "memory": "8Gi"}}]


async def test_run_without_the_nrt_refuses_single_numa_node(km: kmock.KubernetesEmulator) -> None:
    km.objects["v1/pods", "default", "p"] = pending("p", "4", SINGLE, bind=False)
    runner = SecondaryScheduler(KubeClient(KubeConfig(server=str(km.url))), NAME, make)
    [placement] = await asyncio.to_thread(runner.run_once)
    assert placement.node is None and "node(s) missing NUMA resources" in placement.reason


async def test_run_without_the_nrt_crd_still_schedules(kmock: kmock.KubernetesEmulator) -> None:
    for res in ("v1/nodes", "v1/pods"):
        kmock.resources[res] = {}
    kmock.objects["v1/nodes", None, "n1"] = node("n1", 16, "128Gi")
    kmock.objects["v1/pods", "default", "p"] = pending("p", "4", {}, bind=False)
    emulate_binding(kmock)
    runner = SecondaryScheduler(KubeClient(KubeConfig(server=str(kmock.url))), NAME, make)
    [placement] = await asyncio.to_thread(runner.run_once)
    assert placement.node == "n1"


@pytest.fixture
async def watching(km: kmock.KubernetesEmulator) -> AsyncIterator[Extender]:
    ext = Extender(ClusterSource(KubeClient(KubeConfig(server=str(km.url)))), make)
    await asyncio.to_thread(ext.refresh)
    ext.start_watches(timeout_seconds=5)
    try:
        yield ext
    finally:
        ext.stop_watches()


async def _eventually(check: Any, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await asyncio.to_thread(check):
        assert asyncio.get_running_loop().time() < deadline, "the watch did not deliver in time"
        await asyncio.sleep(0.02)


async def test_extender_follows_nrt_objects(km: kmock.KubernetesEmulator, watching: Extender) -> None:
    api = driver_client(km)
    p = pending("p", "4", SINGLE, bind=False)
    assert watching.filter({"Pod": p, "NodeNames": ["n1"]})["FailedNodes"] == {
        "n1": "node(s) missing NUMA resources"}
    await asyncio.to_thread(api.post, "/apis/topology.node.k8s.io/v1alpha1/noderesourcetopologies", nrt("n1"))
    await _eventually(lambda: watching.scheduler.cluster.nodes["n1"].nrt is not None)
    assert watching.filter({"Pod": p, "NodeNames": ["n1"]})["NodeNames"] == ["n1"]
    big = pending("big", "10", SINGLE, bind=False)  # 8 CPUs per NUMA node: never on one
    assert "n1" in watching.filter({"Pod": big, "NodeNames": ["n1"]})["FailedNodes"]
    await asyncio.to_thread(api.request, "DELETE",
                            "/apis/topology.node.k8s.io/v1alpha1/noderesourcetopologies/n1")
    await _eventually(lambda: watching.scheduler.cluster.nodes["n1"].nrt is None)
    assert watching.filter({"Pod": p, "NodeNames": ["n1"]})["FailedNodes"] == {
        "n1": "node(s) missing NUMA resources"}
