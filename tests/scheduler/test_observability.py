"""What `koord-sched run` and `extender` report: the ClusterNetworkTopology's status.detailStatus (written back as
upstream's tree manager does) and kube-scheduler's metrics on the HTTP port (kmock as the API server, real sockets)."""

from __future__ import annotations

import asyncio
import copy
import json
import urllib.request
from collections.abc import Callable
from typing import Any

import kmock
import pytest

from apis.client.kubeapi import KubeClient, KubeConfig
from scheduler.cli import profile
from scheduler.cluster import Cluster
from scheduler.framework import Scheduler
from scheduler.metrics import SchedulerMetrics
from scheduler.runner import SecondaryScheduler
from scheduler.services import DiagnosisAPI, DiagnosisServer

from gpu_cluster import pod as _pod
from gpu_cluster import seed

NAME = "koord-py"
PODGROUPS = "scheduling.sigs.k8s.io/v1alpha1/podgroups"
CNT = "scheduling.koordinator.sh/v1alpha1/clusternetworktopologies"
CNT_CRD = "scheduling.koordinator.sh_clusternetworktopologies.yaml"


def cnt() -> dict[str, Any]:
    return {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "ClusterNetworkTopology",
            "metadata": {"name": "default", "resourceVersion": "1"},
            "spec": {"networkTopologySpec": [
                {"labelKey": ["spine"], "topologyLayer": "SpineLayer"},
                {"labelKey": ["block"], "parentTopologyLayer": "SpineLayer", "topologyLayer": "BlockLayer"},
                {"parentTopologyLayer": "BlockLayer", "topologyLayer": "NodeTopologyLayer"}]}}


@pytest.fixture
def km(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    seed(kmock, (PODGROUPS, CNT))
    for name, (spine, block) in {"gpu-a": ("s1", "b1"), "gpu-b": ("s1", "b2"), "cpu-only": ("s2", "b3")}.items():
        kmock.objects["v1/nodes", None, name].patch({"metadata": {"labels": {"spine": spine, "block": block}}})
    kmock.objects[CNT, None, "default"] = cnt()

    def put_status(request: kmock.Request) -> Any:
        obj = kmock.objects[CNT, None, str(request.name)]
        updated = copy.deepcopy(obj.raw)
        updated["status"] = (request.data or {}).get("status")  # the status subresource ignores everything else
        obj.history.append(updated)
        return updated

    def pod_status(request: kmock.Request) -> Any:
        return kmock.objects["v1/pods", request.namespace, str(request.name)].raw

    kmock["put", kmock.resource(CNT), kmock.subresource("status")] << put_status
    kmock["patch", kmock.resource("v1/pods"), kmock.subresource("status")] << pod_status
    return kmock


@pytest.fixture
def runner(km: kmock.KubernetesEmulator) -> SecondaryScheduler:
    def make(cluster: Cluster) -> Scheduler:
        return Scheduler(cluster, profile(None))

    r = SecondaryScheduler(KubeClient(KubeConfig(server=str(km.url))), NAME, make)
    r.metrics = SchedulerMetrics(NAME)
    return r


def status_puts(km: kmock.KubernetesEmulator) -> list[dict[str, Any]]:
    return [r.data for r in km if r.method.value == "PUT" and r.url.path.endswith("/default/status")]


async def test_detail_status_written_back_once(km: kmock.KubernetesEmulator, runner: SecondaryScheduler,
                                               validate_crd: Callable[[str, dict[str, Any]], None]) -> None:
    await asyncio.to_thread(runner.run_once)
    puts = status_puts(km)
    assert len(puts) == 1
    detail = puts[0]["status"]["detailStatus"]
    validate_crd(CNT_CRD, {k: v for k, v in puts[0].items() if k != "metadata"} | {"metadata": {}})
    # depth first, as upstream's makeStatus (and the manual's example output)
    assert [(d["topologyInfo"]["topologyLayer"], d["topologyInfo"]["topologyName"]) for d in detail] == [
        ("ClusterTopologyLayer", ""), ("SpineLayer", "s1"), ("BlockLayer", "b1"), ("BlockLayer", "b2"),
        ("SpineLayer", "s2"), ("BlockLayer", "b3")]
    assert detail[0] == {"topologyInfo": {"topologyLayer": "ClusterTopologyLayer", "topologyName": ""},
                         "childTopologyLayer": "SpineLayer", "childTopologyNames": ["s1", "s2"], "nodeNum": 3}
    assert detail[1]["childTopologyNames"] == ["b1", "b2"] and detail[1]["nodeNum"] == 2
    assert detail[2] == {"topologyInfo": {"topologyLayer": "BlockLayer", "topologyName": "b1"},
                         "parentTopologyInfo": {"topologyLayer": "SpineLayer", "topologyName": "s1"},
                         "childTopologyLayer": "NodeTopologyLayer", "nodeNum": 1}
    assert km.objects[CNT, None, "default"].raw["status"]["detailStatus"] == detail
    await asyncio.to_thread(runner.run_once)
    assert len(status_puts(km)) == 1  # unchanged: no write
    km.objects["v1/nodes", None, "cpu-only"].patch({"metadata": {"labels": {"spine": "s1", "block": "b2"}}})
    await asyncio.to_thread(runner.run_once)
    assert len(status_puts(km)) == 2 and status_puts(km)[1]["status"]["detailStatus"][0]["nodeNum"] == 3


def sample(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        got = dict(kv.split("=", 1) for kv in head[len(name):].strip("{}").split(",") if "=" in kv)
        if all(got.get(k) == json.dumps(v) for k, v in labels.items()):
            return float(value)
    return 0.0


async def test_metrics_on_the_http_port(km: kmock.KubernetesEmulator, runner: SecondaryScheduler) -> None:
    for name, gpus in (("p1", 1), ("p2", 1), ("huge", 64)):
        p = _pod(name, {"nvidia.com/gpu": gpus})
        p["spec"]["schedulerName"] = NAME
        km.objects["v1/pods", "default", name] = p
    gated = _pod("gated", {"cpu": "1"})
    gated["spec"] |= {"schedulerName": NAME, "schedulingGates": [{"name": "wait"}]}
    km.objects["v1/pods", "default", "gated"] = gated
    await asyncio.to_thread(runner.run_once)
    server = DiagnosisServer(("127.0.0.1", 0), DiagnosisAPI(runner.state, runner.metrics))
    server.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        with urllib.request.urlopen(url, timeout=10) as resp:
            assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            text = resp.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    assert sample(text, "scheduler_schedule_attempts_total", result="scheduled", profile=NAME) == 2
    assert sample(text, "scheduler_schedule_attempts_total", result="unschedulable", profile=NAME) == 1
    assert sample(text, "scheduler_framework_extension_point_duration_seconds_count", extension_point="Filter",
                  status="Success", profile=NAME) >= 2
    assert sample(text, "scheduler_framework_extension_point_duration_seconds_count", extension_point="Reserve",
                  status="Success", profile=NAME) == 2
    assert sample(text, "scheduler_plugin_execution_duration_seconds_count", plugin="DeviceShare",
                  extension_point="Score", status="Success") == 3  # every attempt scores (vector stage)
    # koord-scheduler v1.6's transformer latencies: each attempt's cycle runs Reservation's BeforePreFilter and
    # AfterPreFilter once
    for point in ("BeforePreFilter", "AfterPreFilter"):
        assert sample(text, "scheduler_plugin_execution_duration_seconds_count", plugin="Reservation",
                      extension_point=point, status="Success") == 3
    assert sample(text, "scheduler_pending_pods", queue="unschedulable") == 1
    assert sample(text, "scheduler_pending_pods", queue="gated") == 1
    assert sample(text, "scheduler_device_allocations_total", device_type="gpu") == 2
    assert "scheduler_waiting_gang_group_number 0.0" in text


async def test_extender_metrics(kmock: kmock.KubernetesEmulator) -> None:
    from scheduler.extender import ClusterSource, Extender, ExtenderServer

    km = seed(kmock)
    metrics = SchedulerMetrics("koord-scheduler")
    ext = Extender(ClusterSource(KubeClient(KubeConfig(server=str(km.url)))),
                   lambda c: Scheduler(c, profile(None), metrics=metrics))
    ext.metrics = metrics
    await asyncio.to_thread(ext.refresh)
    two = _pod("two", {"nvidia.com/gpu": 2})
    km.objects["v1/pods", "default", "two"] = two
    server = ExtenderServer(("127.0.0.1", 0), ext)
    server_thread = asyncio.to_thread(server.serve_forever, 0.02)
    task = asyncio.ensure_future(server_thread)
    base = f"http://127.0.0.1:{server.server_address[1]}"

    def call() -> str:
        body = json.dumps({"PodName": "two", "PodNamespace": "default", "PodUID": "uid-two", "Node": "gpu-a"})
        req = urllib.request.Request(f"{base}/bind", data=body.encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert json.loads(resp.read()) == {"Error": ""}
        with urllib.request.urlopen(f"{base}/metrics", timeout=10) as resp:
            return resp.read().decode()

    try:
        text = await asyncio.to_thread(call)
    finally:
        server.shutdown()
        await task
        server.server_close()
    assert sample(text, "scheduler_framework_extension_point_duration_seconds_count", extension_point="Bind",
                  status="Success", profile="koord-scheduler") == 1
    assert sample(text, "scheduler_device_allocations_total", device_type="gpu") == 2


async def test_gang_pods_failing_every_cycle_count_unschedulable_attempts(km: kmock.KubernetesEmulator,
                                                                          runner: SecondaryScheduler) -> None:
    """A gang short of members is rejected before any member is tried: each member still counts one unschedulable
    attempt, as kube-scheduler counts a pod rejected at PreFilter or Permit; the gang then waits for an event that
    can help it (scheduler.queue), so the next cycle tries nothing and counts nothing."""
    for name in ("w0", "w1"):
        p = _pod(name, {"nvidia.com/gpu": 1})
        p["spec"]["schedulerName"] = NAME
        p["metadata"]["annotations"] = {"gang.scheduling.koordinator.sh/name": "train",
                                        "gang.scheduling.koordinator.sh/min-available": "3"}
        km.objects["v1/pods", "default", name] = p
    placements = await asyncio.to_thread(runner.run_once)
    assert [p.node for p in placements] == [None, None]
    assert await asyncio.to_thread(runner.run_once) == []
    assert runner.metrics is not None
    text = runner.metrics.exposition()
    assert sample(text, "scheduler_schedule_attempts_total", result="unschedulable", profile=NAME) == 2
    assert sample(text, "scheduler_schedule_attempts_total", result="scheduled", profile=NAME) == 0


def test_a_transformer_that_fails_is_timed_with_status_error() -> None:
    """frameworkext records a failing BeforePreFilter/AfterPreFilter with its status code's name."""
    sched = Scheduler(Cluster(), profile(None))
    sched.metrics = metrics = SchedulerMetrics(NAME)
    [hook] = sched.profile.cycle_hooks

    def broken(pod: dict[str, Any], cluster: Cluster) -> None:
        raise RuntimeError("lost")

    object.__setattr__(hook, "after_prefilter", broken)
    p = _pod("p", {"cpu": "1"})
    with pytest.raises(RuntimeError), sched.cycle(p):
        pass
    text = metrics.exposition()
    assert sample(text, "scheduler_plugin_execution_duration_seconds_count", plugin="Reservation",
                  extension_point="BeforePreFilter", status="Success") == 1
    assert sample(text, "scheduler_plugin_execution_duration_seconds_count", plugin="Reservation",
                  extension_point="AfterPreFilter", status="Error") == 1
