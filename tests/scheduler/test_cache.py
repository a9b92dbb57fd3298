"""The cluster cache (scheduler.cache) under `koord-sched run` and the extender, kmock as the API server: a steady
`run` cycle makes no list request, changes arrive by watch, a bound pod is counted on its node before the watch
shows it, and one malformed object of any kind is skipped and counted while the others are used (issue #24)."""

from __future__ import annotations

import asyncio
import copy
import itertools
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import kmock
import pytest

from apis.client.kubeapi import KubeClient, KubeConfig
from scheduler import malformed
from scheduler.cli import profile
from scheduler.extender import ClusterSource, Extender
from scheduler.framework import Scheduler
from scheduler.runner import SecondaryScheduler

from gpu_cluster import DEVICES, node, seed
from kubedouble import NM, driver_client

NAME = "koord-py"
RESERVATIONS = "scheduling.koordinator.sh/v1alpha1/reservations"
QUOTAS = "scheduling.sigs.k8s.io/v1alpha1/elasticquotas"
EXTRA = (RESERVATIONS, QUOTAS, "scheduling.sigs.k8s.io/v1alpha1/podgroups",
         "scheduling.koordinator.sh/v1alpha1/clusternetworktopologies", "scheduling.k8s.io/v1/priorityclasses",
         "policy/v1/poddisruptionbudgets", "topology.node.k8s.io/v1alpha1/noderesourcetopologies", "v1/configmaps")


def pod(name: str, cpu: str, node: str = "") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}",
                         "creationTimestamp": f"2024-01-01T00:00:0{len(name) % 10}Z"},
            "spec": {"nodeName": node, "schedulerName": NAME,
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": "Running" if node else "Pending"}}


@pytest.fixture
def km(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    seed(kmock, EXTRA)

    def status(request: kmock.Request) -> Any:  # PodScheduled conditions: accept and echo
        return kmock.objects["v1/pods", request.namespace, str(request.name)].raw

    kmock["patch", kmock.resource("v1/pods"), kmock.subresource("status")] << status
    return kmock


def _runner(km: kmock.KubernetesEmulator, watch: bool) -> SecondaryScheduler:
    return SecondaryScheduler(KubeClient(KubeConfig(server=str(km.url))), NAME,
                              lambda c: Scheduler(c, profile(None)), write_topology_status=False, watch=watch)


@pytest.fixture
async def watching(km: kmock.KubernetesEmulator) -> AsyncIterator[SecondaryScheduler]:
    runner = _runner(km, watch=True)
    try:
        yield runner
    finally:
        runner.close()


def lists(km: kmock.KubernetesEmulator) -> int:
    return sum(1 for r in km if r.method == kmock.method.GET and "watch" not in r.url.query
               and r.url.path.split("/")[-1] in {"nodes", "pods", "devices", "nodemetrics", "reservations",
                                                 "elasticquotas", "podgroups", "clusternetworktopologies",
                                                 "priorityclasses", "poddisruptionbudgets", "configmaps",
                                                 "noderesourcetopologies"})


def node_of(km: kmock.KubernetesEmulator, name: str) -> str:
    return str(km.objects["v1/pods", "default", name].raw["spec"].get("nodeName") or "")


async def cycles_until(runner: SecondaryScheduler, done: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        await asyncio.to_thread(runner.run_once)
        if done():
            return
        assert time.monotonic() < deadline, "the cache did not deliver in time"
        await asyncio.sleep(0.05)


async def test_steady_cycles_make_no_list_request(km: kmock.KubernetesEmulator,
                                                  watching: SecondaryScheduler) -> None:
    """Main's `run` re-listed every collection (pending pods included) in every cycle."""
    km.objects["v1/pods", "default", "too-big"] = pod("too-big", "1000")  # pending in every cycle
    await asyncio.to_thread(watching.run_once)
    first = lists(km)
    assert first >= 12  # every collection listed once, for the cache
    for _ in range(5):  # nothing changes: the pod waits for an event (scheduler.queue), no cycle tries it
        assert await asyncio.to_thread(watching.run_once) == []
    assert lists(km) == first


async def test_added_node_and_pod_are_seen_by_the_next_cycles(km: kmock.KubernetesEmulator,
                                                              watching: SecondaryScheduler) -> None:
    await asyncio.to_thread(watching.run_once)
    api = driver_client(km)
    big = node("big", 0) | {"kind": "Node"}
    big["status"]["allocatable"]["cpu"] = "500"
    await asyncio.to_thread(api.post, "/api/v1/nodes", big)
    await asyncio.to_thread(api.post, "/api/v1/namespaces/default/pods", pod("huge", "400"))
    await cycles_until(watching, lambda: node_of(km, "huge") == "big")
    assert watching.scheduler is not None and "default/huge" in watching.scheduler.cluster.nodes["big"].pods


async def test_a_bound_pod_counts_on_its_node_before_the_watch_shows_it(km: kmock.KubernetesEmulator,
                                                                         watching: SecondaryScheduler) -> None:
    """The watch never delivers the first pod's Binding: the next cycles still count it on its node (assumed),
    so a second pod of the same size does not over-commit that node."""
    cache = watching.cache
    deliver = cache.apply

    def lagging(source: Any, op: str, obj: Any) -> None:
        if not (isinstance(obj, dict) and (obj.get("metadata") or {}).get("name") == "first"):
            deliver(source, op, obj)

    cache.apply = lagging  # type: ignore[method-assign]
    for name in ("gpu-a", "gpu-b"):  # one node left for 60 CPUs
        km.objects["v1/nodes", None, name].patch({"status": {"allocatable": {"cpu": "1"}}})
    km.objects["v1/pods", "default", "first"] = pod("first", "60")
    await asyncio.to_thread(watching.run_once)
    assert node_of(km, "first") == "cpu-only"
    api = driver_client(km)
    await asyncio.to_thread(api.post, "/api/v1/namespaces/default/pods", pod("second", "60"))
    await cycles_until(watching, lambda: any(p["metadata"]["name"] == "second" for p in watching.pending_pods))
    for _ in range(2):
        await asyncio.to_thread(watching.run_once)
    assert not node_of(km, "second")
    assert watching.scheduler is not None
    assert "default/first" in watching.scheduler.cluster.nodes["cpu-only"].pods
    assert [p["metadata"]["name"] for p in watching.pending_pods] == ["second"]


# -- one malformed object per kind ---------------------------------------------------------------------------------
VERSIONS = itertools.count(1000)


def bad_object(kind: str) -> tuple[str, str | None, dict[str, Any]]:
    """(resource, namespace, object): one malformed object of `kind`, under a new resourceVersion (malformed objects
    are reported once per version)."""
    resource, ns, obj = BAD[kind]
    obj = copy.deepcopy(obj)
    obj["metadata"]["resourceVersion"] = str(next(VERSIONS))
    return resource, ns, obj


BAD: dict[str, tuple[str, str | None, dict[str, Any]]] = {
    "Node": ("v1/nodes", None, {"metadata": {"name": "bad-node"}, "status": {"allocatable": "abc"}}),
    "Pod": ("v1/pods", "default", {"metadata": {"name": "bad-pod", "namespace": "default"},
                                   "spec": {"schedulerName": NAME, "containers": "abc"}}),
    "ElasticQuota": (QUOTAS, "default", {"metadata": {"name": "bad-q", "namespace": "default"},
                                         "spec": {"max": "abc"}}),
    "Reservation": (RESERVATIONS, None, {"metadata": {"name": "bad-r"}, "spec": {"template": "abc"}}),
    "Device": (DEVICES, None, {"metadata": {"name": "cpu-only"}, "spec": {"devices": "abc"}}),
    "NodeMetric": (NM, None, {"metadata": {"name": "cpu-only"},
                              "status": {"nodeMetric": {"nodeUsage": {"resources": {"cpu": "abc"}}}}}),
}


@pytest.mark.parametrize("kind", sorted(BAD))
async def test_run_skips_and_counts_one_malformed_object_per_kind(km: kmock.KubernetesEmulator, kind: str) -> None:
    resource, ns, bad = bad_object(kind)
    km.objects[resource, ns, bad["metadata"]["name"]] = bad
    km.objects["v1/pods", "default", "good"] = pod("good", "1")
    before = malformed.skipped[kind]
    runner = _runner(km, watch=False)
    await asyncio.to_thread(runner.run_once)
    assert node_of(km, "good") in ("gpu-a", "gpu-b", "cpu-only")
    assert malformed.skipped[kind] == before + 1


@pytest.mark.parametrize("kind", sorted(BAD))
async def test_run_watch_skips_and_counts_one_malformed_event_per_kind(km: kmock.KubernetesEmulator, kind: str,
                                                                     watching: SecondaryScheduler) -> None:
    await asyncio.to_thread(watching.run_once)
    resource, ns, bad = bad_object(kind)
    before = malformed.skipped[kind]
    api = driver_client(km)
    group = "/api/v1" if resource.startswith("v1/") else f"/apis/{resource.rsplit('/', 1)[0]}"
    plural = resource.rsplit("/", 1)[1]
    collection = f"{group}/namespaces/{ns}/{plural}" if ns else f"{group}/{plural}"
    await asyncio.to_thread(api.post, collection, dict(bad))
    await asyncio.to_thread(api.post, "/api/v1/namespaces/default/pods", pod("good", "1"))
    await cycles_until(watching, lambda: bool(node_of(km, "good")))
    deadline = time.monotonic() + 5
    while malformed.skipped[kind] != before + 1:
        assert time.monotonic() < deadline, f"{kind}: skipped {malformed.skipped[kind] - before}"
        await asyncio.to_thread(watching.run_once)
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("kind", sorted(BAD))
async def test_extender_skips_and_counts_one_malformed_object_per_kind(km: kmock.KubernetesEmulator,
                                                                       kind: str) -> None:
    resource, ns, bad = bad_object(kind)
    if kind == "Pod":  # the extender keeps assigned pods only
        bad["spec"]["nodeName"] = "cpu-only"
    km.objects[resource, ns, bad["metadata"]["name"]] = bad
    before = malformed.skipped[kind]
    ext = Extender(ClusterSource(KubeClient(KubeConfig(server=str(km.url)))),
                   lambda c: Scheduler(c, profile(None)))
    await asyncio.to_thread(ext.refresh)
    fits = ext.filter({"Pod": pod("good", "1"), "NodeNames": ["gpu-a", "gpu-b", "cpu-only"]})["NodeNames"]
    assert "gpu-a" in fits and "gpu-b" in fits
    assert malformed.skipped[kind] == before + 1
