"""The kube-scheduler extender over real HTTP both ways: kmock as the API server, urllib as kube-scheduler."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kmock
import pytest

from apis.client.kubeapi import KubeClient, KubeConfig
from scheduler.cli import profile
from scheduler.cluster import Cluster
from scheduler.extender import ClusterSource, Extender, ExtenderServer, parse_addr
from scheduler.framework import Scheduler

from gpu_cluster import ALLOCATED, FAIL_BINDING, device, node, pod, seed
from kubedouble import driver_client

ROOT = Path(__file__).resolve().parents[2]
_device, _node, _pod = device, node, pod


@pytest.fixture
def km(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    return seed(kmock)


@pytest.fixture
def ext(km: kmock.KubernetesEmulator) -> Extender:
    def make(cluster: Cluster) -> Scheduler:
        return Scheduler(cluster, *profile(None))

    return Extender(ClusterSource(KubeClient(KubeConfig(server=str(km.url)))), make)


@pytest.fixture
def url(ext: Extender) -> Iterator[str]:
    server = ExtenderServer(("127.0.0.1", 0), ext, prefix="/extender/")
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/extender"
    finally:
        server.shutdown()
        server.server_close()


def _post(url: str, body: Any) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


async def post(url: str, body: Any) -> tuple[int, Any]:
    return await asyncio.to_thread(_post, url, body)


def add_pending(km: kmock.KubernetesEmulator, pod: dict[str, Any]) -> None:
    km.objects["v1/pods", "default", pod["metadata"]["name"]] = pod


def _bind_args(pod: dict[str, Any], node: str) -> dict[str, Any]:
    meta = pod["metadata"]
    return {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": node}


def _minors(km: kmock.KubernetesEmulator, name: str) -> list[int]:
    raw = km.objects["v1/pods", "default", name].raw["metadata"]["annotations"][ALLOCATED]
    return sorted(a["minor"] for a in json.loads(raw)["gpu"])


async def test_filter_and_prioritize(km: kmock.KubernetesEmulator, ext: Extender, url: str) -> None:
    await asyncio.to_thread(ext.refresh)
    eight = _pod("eight", {"nvidia.com/gpu": 8})
    status, res = await post(f"{url}/filter", {"Pod": eight, "Nodes": None,
                                               "NodeNames": ["gpu-a", "gpu-b", "cpu-only", "ghost"]})
    assert status == 200
    assert set(res) == {"NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
    assert res["NodeNames"] == ["gpu-b"] and res["Error"] == ""
    assert set(res["FailedNodes"]) == {"gpu-a", "cpu-only", "ghost"}  # gpu-a: minor 0 is taken by "old"
    assert "Insufficient nvidia.com/gpu" in res["FailedNodes"]["cpu-only"]
    assert "unknown" in res["FailedNodes"]["ghost"]

    one = _pod("one", {"nvidia.com/gpu": 1})
    status, prio = await post(f"{url}/prioritize", {"Pod": one, "NodeNames": ["gpu-a", "gpu-b", "ghost"]})
    assert status == 200
    assert [p["Host"] for p in prio] == ["gpu-a", "gpu-b", "ghost"]
    assert all(set(p) == {"Host", "Score"} and 0 <= p["Score"] <= 10 for p in prio)
    assert prio[2]["Score"] == 0

    # nodeCacheCapable=false: full Nodes in, full Nodes out
    nodes = {"items": [km.objects["v1/nodes", None, n].raw for n in ("gpu-b", "cpu-only")]}
    status, res = await post(f"{url}/filter", {"Pod": eight, "Nodes": nodes})
    assert status == 200 and [n["metadata"]["name"] for n in res["Nodes"]["items"]] == ["gpu-b"]


async def test_bind_patches_annotation_then_creates_binding(km: kmock.KubernetesEmulator, ext: Extender,
                                                            url: str) -> None:
    await asyncio.to_thread(ext.refresh)
    two = _pod("two", {"nvidia.com/gpu": 2})
    add_pending(km, two)
    status, res = await post(f"{url}/bind", _bind_args(two, "gpu-a"))
    assert (status, res) == (200, {"Error": ""})
    writes = [r for r in km if r.method.value in ("PATCH", "POST")]
    assert [(r.method.value, r.url.path) for r in writes] == [
        ("PATCH", "/api/v1/namespaces/default/pods/two"), ("POST", "/api/v1/namespaces/default/pods/two/binding")]
    assert writes[0].headers["Content-Type"] == "application/merge-patch+json"
    assert set(writes[0].data) == {"metadata"} and set(writes[0].data["metadata"]["annotations"]) == {ALLOCATED}
    assert writes[1].data == {"apiVersion": "v1", "kind": "Binding",
                              "metadata": {"name": "two", "namespace": "default", "uid": "uid-two"},
                              "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-a"}}
    stored = km.objects["v1/pods", "default", "two"].raw
    assert stored["spec"]["nodeName"] == "gpu-a"
    alloc = json.loads(stored["metadata"]["annotations"][ALLOCATED])
    assert list(alloc) == ["gpu"] and len(alloc["gpu"]) == 2 and 0 not in _minors(km, "two")
    for a in alloc["gpu"]:
        assert a["resources"] == {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": a["resources"][
            "koordinator.sh/gpu-memory"], "koordinator.sh/gpu-memory-ratio": "100"}
        assert a["id"].startswith("GPU-")

    # the reservation holds before any re-list: 5 GPUs are left on gpu-a ("old" has one), so 5 fit, 6 do not
    for n, fits in ((5, ["gpu-a", "gpu-b"]), (6, ["gpu-b"])):
        _, res = await post(f"{url}/filter", {"Pod": _pod(f"p{n}", {"nvidia.com/gpu": n}),
                                              "NodeNames": ["gpu-a", "gpu-b"]})
        assert res["NodeNames"] == fits
    await asyncio.to_thread(ext.refresh)  # and after it, from the annotation the API server now holds
    assert not ext.assumed
    _, res = await post(f"{url}/filter", {"Pod": _pod("p6", {"nvidia.com/gpu": 6}), "NodeNames": ["gpu-a"]})
    assert res["NodeNames"] == []


async def test_cpu_pod_binds_without_annotation(km: kmock.KubernetesEmulator, ext: Extender, url: str) -> None:
    await asyncio.to_thread(ext.refresh)
    cpu = _pod("cpu", {"cpu": "1"})
    add_pending(km, cpu)
    assert await post(f"{url}/bind", _bind_args(cpu, "cpu-only")) == (200, {"Error": ""})
    assert [r.method.value for r in km if r.method.value in ("PATCH", "POST")] == ["POST"]


async def test_bind_failure_rolls_back(km: kmock.KubernetesEmulator, ext: Extender, url: str) -> None:
    await asyncio.to_thread(ext.refresh)
    big = _pod("big", {"nvidia.com/gpu": 7}, annotations={FAIL_BINDING: ""})
    add_pending(km, big)
    status, res = await post(f"{url}/bind", _bind_args(big, "gpu-a"))
    assert status == 200 and "etcd is sad" in res["Error"]
    assert not ext.assumed
    stored = km.objects["v1/pods", "default", "big"].raw
    assert ALLOCATED not in stored["metadata"]["annotations"]  # the patch was undone
    assert not stored["spec"]["nodeName"]
    # the 7 GPUs are free again: another pod gets them on the same node
    other = _pod("other", {"nvidia.com/gpu": 7})
    add_pending(km, other)
    assert await post(f"{url}/bind", _bind_args(other, "gpu-a")) == (200, {"Error": ""})
    assert _minors(km, "other") == [1, 2, 3, 4, 5, 6, 7]


async def test_patch_failure_rolls_back(km: kmock.KubernetesEmulator, ext: Extender, url: str) -> None:
    await asyncio.to_thread(ext.refresh)
    km["patch", kmock.resource("v1/pods"), kmock.name("p")] << 403 << {"kind": "Status", "code": 403,
                                                                         "message": "forbidden"}
    p = _pod("p", {"nvidia.com/gpu": 7})
    add_pending(km, p)
    status, res = await post(f"{url}/bind", _bind_args(p, "gpu-a"))
    assert status == 200 and "forbidden" in res["Error"]
    assert [r.method.value for r in km if r.method.value == "POST"] == []  # no Binding without the annotation
    q = _pod("q", {"nvidia.com/gpu": 7})
    add_pending(km, q)
    assert await post(f"{url}/bind", _bind_args(q, "gpu-a")) == (200, {"Error": ""})


async def test_concurrent_binds_never_share_a_gpu(km: kmock.KubernetesEmulator, ext: Extender, url: str) -> None:
    await asyncio.to_thread(ext.refresh)
    pods = [_pod(f"c{i}", {"nvidia.com/gpu": 1}) for i in range(9)]
    for p in pods:
        add_pending(km, p)
    results = await asyncio.gather(*(post(f"{url}/bind", _bind_args(p, "gpu-a")) for p in pods))
    ok = [p["metadata"]["name"] for p, (_, r) in zip(pods, results, strict=True) if r["Error"] == ""]
    failed = [r["Error"] for _, r in results if r["Error"]]
    assert len(ok) == 7 and len(failed) == 2  # 8 GPUs, one held by "old"
    assert all("does not fit" in e for e in failed)
    minors = [m for name in ok for m in _minors(km, name)]
    assert sorted(minors) == [1, 2, 3, 4, 5, 6, 7]


async def test_bind_errors_are_results(km: kmock.KubernetesEmulator, ext: Extender, url: str) -> None:
    await asyncio.to_thread(ext.refresh)
    ghost = _pod("ghost", {"cpu": "1"})
    status, res = await post(f"{url}/bind", _bind_args(ghost, "gpu-a"))
    assert status == 200 and "not found" in res["Error"]
    add_pending(km, ghost)
    status, res = await post(f"{url}/bind", _bind_args(ghost, "nowhere"))
    assert status == 200 and "unknown" in res["Error"]
    args = _bind_args(ghost, "gpu-a") | {"PodUID": "someone-else"}
    assert "UID" in (await post(f"{url}/bind", args))[1]["Error"]
    assert (await post(f"{url}/bind", _bind_args(ghost, "gpu-a")))[1] == {"Error": ""}
    assert "already bound" in (await post(f"{url}/bind", _bind_args(ghost, "gpu-b")))[1]["Error"]


async def test_malformed_requests(km: kmock.KubernetesEmulator, ext: Extender, url: str) -> None:
    await asyncio.to_thread(ext.refresh)
    for verb, body in (("filter", b"{not json"), ("filter", b"[]"), ("filter", {"NodeNames": ["gpu-a"]}),
                       ("prioritize", {"Pod": _pod("x", {}), "NodeNames": "gpu-a"}),
                       ("bind", {"PodName": "x", "Node": "gpu-a"}), ("bind", b"")):
        status, res = await post(f"{url}/{verb}", body)
        assert status == 400, (verb, body)
        assert res["Error"].startswith(f"malformed {verb} request")
    status, _ = await post(url.removesuffix("/extender") + "/filter", {"Pod": _pod("x", {}), "NodeNames": []})
    assert status == 404


async def test_refresh_keeps_inflight_assumptions(km: kmock.KubernetesEmulator, ext: Extender) -> None:
    await asyncio.to_thread(ext.refresh)
    four = _pod("four", {"nvidia.com/gpu": 4})
    add_pending(km, four)
    # Bound by us, but the API server's list does not show it yet (watch/list lag).
    km["get", kmock.resource("v1/pods"), kmock.name(None)] << {"items": [
        km.objects["v1/pods", "default", "old"].raw]}
    assert await asyncio.to_thread(ext.bind, _bind_args(four, "gpu-b")) == {"Error": ""}
    ext.assumed["default/four"].bound_at = float("inf")  # as if the list below started before the bind ended
    await asyncio.to_thread(ext.refresh)
    assert "default/four" in ext.scheduler.cluster.nodes["gpu-b"].pods
    res = ext.filter({"Pod": _pod("five", {"nvidia.com/gpu": 5}), "NodeNames": ["gpu-b"]})
    assert res["NodeNames"] == []


def test_parse_addr() -> None:
    assert parse_addr(":8080") == ("", 8080)
    assert parse_addr("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_addr("[::1]:9") == ("::1", 9)
    with pytest.raises(ValueError):
        parse_addr("host:port")


# --- watches -------------------------------------------------------------------------------------------------
async def _eventually(check: Any, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await asyncio.to_thread(check):
        assert asyncio.get_running_loop().time() < deadline, "the watch did not deliver in time"
        await asyncio.sleep(0.02)


def _fits(ext: Extender, pod: dict[str, Any], nodes: list[str]) -> list[str]:
    return list(ext.filter({"Pod": pod, "NodeNames": nodes})["NodeNames"])


async def test_watch_applies_bound_and_deleted_pods(km: kmock.KubernetesEmulator, watching: Extender) -> None:
    api = driver_client(km)
    one = _pod("one", {"nvidia.com/gpu": 1})
    assert _fits(watching, one, ["gpu-b"]) == ["gpu-b"]
    every = json.dumps({"gpu": [{"minor": m, "resources": {"koordinator.sh/gpu-core": "100",
                                                            "koordinator.sh/gpu-memory-ratio": "100"}}
                                for m in range(8)]})
    # bound by someone else (kube-scheduler's own device plugin, say): created already assigned
    await asyncio.to_thread(api.post, "/api/v1/namespaces/default/pods",
                            _pod("hog", {"nvidia.com/gpu": 8}, "gpu-b", {ALLOCATED: every}))
    await _eventually(lambda: "default/hog" in watching.scheduler.cluster.nodes["gpu-b"].pods)
    assert _fits(watching, one, ["gpu-a", "gpu-b"]) == ["gpu-a"]  # no re-list in between

    await asyncio.to_thread(api.request, "DELETE", _pod_path_of("hog"))
    await _eventually(lambda: "default/hog" not in watching.scheduler.cluster.nodes["gpu-b"].pods)
    assert _fits(watching, one, ["gpu-a", "gpu-b"]) == ["gpu-a", "gpu-b"]


async def test_watch_adds_new_nodes(km: kmock.KubernetesEmulator, watching: Extender) -> None:
    api = driver_client(km)
    cpu = _pod("cpu", {"cpu": "64"})
    assert "unknown" in watching.filter({"Pod": cpu, "NodeNames": ["new"]})["FailedNodes"]["new"]
    await asyncio.to_thread(api.post, "/api/v1/nodes", _node("new", 0) | {"kind": "Node"})
    await _eventually(lambda: "new" in watching.scheduler.cluster.nodes)
    assert _fits(watching, cpu, ["new", "gpu-a"]) == ["new", "gpu-a"]
    await asyncio.to_thread(api.request, "DELETE", "/api/v1/nodes/new")
    await _eventually(lambda: "new" not in watching.scheduler.cluster.nodes)


async def test_refresh_while_watching_keeps_watched_state(km: kmock.KubernetesEmulator, watching: Extender) -> None:
    api = driver_client(km)
    await asyncio.to_thread(api.post, "/api/v1/namespaces/default/pods", _pod("c", {"cpu": "90"}, "cpu-only"))
    await _eventually(lambda: "default/c" in watching.scheduler.cluster.nodes["cpu-only"].pods)
    await asyncio.to_thread(watching.refresh)
    assert "default/c" in watching.scheduler.cluster.nodes["cpu-only"].pods
    assert _fits(watching, _pod("more", {"cpu": "10"}), ["cpu-only"]) == []


def _pod_path_of(name: str) -> str:
    return f"/api/v1/namespaces/default/pods/{name}"
