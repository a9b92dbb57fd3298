"""Faults against the kube-scheduler extender: malformed API objects in its lists and watches, malformed HTTP bodies,
and SIGTERM, over real HTTP with kmock as the API server (issue #23 defects 2 and 6)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import kmock
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apis.client.kubeapi import KubeClient, KubeConfig
from scheduler.cli import profile
from scheduler.extender import ClusterSource, Extender, ExtenderServer
from scheduler.framework import Scheduler

from kubedouble import driver_client

ROOT = Path(__file__).resolve().parents[2]


def node(name: str, cpu: str, memory: str = "32Gi") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}}}


def pod(name: str, cpu: Any, node_name: str = "") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "uid": f"u-{name}"},
            "spec": {"nodeName": node_name, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": "Running" if node_name else "Pending"}}


@pytest.fixture
def km(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    for res in ("v1/nodes", "v1/pods"):
        kmock.resources[res] = {}
    kmock.objects["v1/nodes", None, "n8"] = node("n8", "8")
    kmock.objects["v1/nodes", None, "other"] = node("other", "8")
    return kmock


@pytest.fixture
def ext(km: kmock.KubernetesEmulator) -> Extender:
    return Extender(ClusterSource(KubeClient(KubeConfig(server=str(km.url)))),
                    lambda c: Scheduler(c, *profile(None)))


async def eventually(check: Any, timeout: float = 4.0) -> None:
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(check):
        assert time.monotonic() < deadline, "not applied in time"
        await asyncio.sleep(0.02)


def fits(ext: Extender, p: dict[str, Any], nodes: list[str]) -> list[str]:
    return list(ext.filter({"Pod": p, "NodeNames": nodes})["NodeNames"])


async def test_malformed_pod_does_not_freeze_the_pod_watch(km: kmock.KubernetesEmulator, ext: Extender) -> None:
    """Fault: a bound Pod with requests `cpu: 1x` listed before healthy ones. Invariant: the pod watch keeps
    applying; a 7-CPU pod bound to the 8-CPU node later is counted, so a 2-CPU pod no longer fits there (the
    over-commit the issue saw); the bad pod is logged and counted once."""
    km.objects["v1/pods", "default", "bad"] = pod("bad", "1x", "other")
    await asyncio.to_thread(ext.refresh)
    ext.start_watches(timeout_seconds=5)
    try:
        await asyncio.sleep(0.3)  # the watch's list has been applied (or, before the fix, has failed)
        api = driver_client(km)
        await asyncio.to_thread(api.post, "/api/v1/namespaces/default/pods", pod("seven", "7", "n8"))
        await eventually(lambda: "default/seven" in ext.scheduler.cluster.nodes["n8"].pods)
        assert fits(ext, pod("two", "2"), ["n8"]) == []
        assert fits(ext, pod("one", "1"), ["n8"]) == ["n8"]
    finally:
        ext.stop_watches()


async def test_malformed_node_does_not_freeze_the_node_watch(km: kmock.KubernetesEmulator, watching: Extender
                                                             ) -> None:
    """Fault: a Node with allocatable `cpu: abc` appears. Invariant: the node watch keeps applying — a new Node is
    known within seconds (the issue saw ≥ 45 s); the bad node is known with its readable allocatable only."""
    api = driver_client(km)
    await asyncio.to_thread(api.post, "/api/v1/nodes", node("broken", "abc"))
    await asyncio.sleep(0.3)
    await asyncio.to_thread(api.post, "/api/v1/nodes", node("new", "4"))
    await eventually(lambda: "new" in watching.scheduler.cluster.nodes)
    assert fits(watching, pod("p", "2"), ["new"]) == ["new"]
    broken = watching.scheduler.cluster.nodes["broken"]
    assert "cpu" not in broken.allocatable and broken.allocatable["memory"] == 32 << 30
    assert fits(watching, pod("p", "1"), ["broken"]) == []  # no CPU readable: nothing that needs CPU fits


async def test_malformed_pod_on_a_node_counts_conservatively(km: kmock.KubernetesEmulator, watching: Extender,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    """Fault: a Pod bound to the 8-CPU node whose cpu request is `1x`, beside a healthy 1-CPU pod. Invariant: never
    under-counted — the unreadable cpu counts as the node's whole allocatable cpu (nothing needing CPU fits), its
    readable memory and the healthy pod count as listed; one log line per object version however often it is
    re-listed, and the malformed-objects metric counts it."""
    from scheduler.metrics import SchedulerMetrics  # here: the series is new with the fix

    def counted() -> float:
        for line in SchedulerMetrics().exposition().splitlines():
            if line.startswith('scheduler_malformed_objects_total{kind="Pod"}'):
                return float(line.split()[-1])
        return 0.0

    before = counted()
    api = driver_client(km)
    bad = pod("bad-on-n8", "1x", "n8")  # a name of its own: reports are once per object version per process
    bad["spec"]["containers"][0]["resources"]["requests"]["memory"] = "1Gi"
    with caplog.at_level(logging.WARNING):
        await asyncio.to_thread(api.post, "/api/v1/namespaces/default/pods", bad)
        await asyncio.to_thread(api.post, "/api/v1/namespaces/default/pods", pod("good", "1", "n8"))
        await eventually(lambda: {"default/bad-on-n8", "default/good"} <= set(
            watching.scheduler.cluster.nodes["n8"].pods))
        n8 = watching.scheduler.cluster.nodes["n8"]
        assert n8.requested["cpu"] == 9000 and n8.requested["memory"] == 1 << 30
        assert fits(watching, pod("tiny", "10m"), ["n8", "other"]) == ["other"]
        for _ in range(3):
            await asyncio.to_thread(watching.refresh)
        assert watching.scheduler.cluster.nodes["n8"].requested["cpu"] == 9000
    lines = [r for r in caplog.records if "default/bad-on-n8" in r.getMessage()]
    assert len(lines) == 1 and "1x" in lines[0].getMessage(), [r.getMessage() for r in lines]
    assert counted() == before + 1


async def test_shapeless_objects_are_skipped_and_the_rest_applied(km: kmock.KubernetesEmulator, ext: Extender
                                                                  ) -> None:
    """Fault: objects of the wrong shape in the lists (metadata a string, spec a list, containers a string, a
    container a number). Invariant: each is skipped or counted conservatively, every healthy one is applied, and the
    re-list does not raise."""
    km.objects["v1/pods", "default", "p1"] = {"metadata": "x", "spec": {"nodeName": "n8"}}
    km.objects["v1/pods", "default", "p2"] = {"metadata": {"name": "p2", "namespace": "default"}, "spec": ["n8"]}
    km.objects["v1/pods", "default", "p3"] = {"metadata": {"name": "p3", "namespace": "default"},
                                              "spec": {"nodeName": "other", "containers": "abc"}}
    km.objects["v1/pods", "default", "p4"] = {"metadata": {"name": "p4", "namespace": "default"},
                                              "spec": {"nodeName": "other", "containers": [5]}}
    km.objects["v1/pods", "default", "ok"] = pod("ok", "3", "n8")
    km.objects["v1/nodes", None, "weird"] = {"metadata": {"name": "weird"}, "status": "abc"}
    await asyncio.to_thread(ext.refresh)
    ext.start_watches(timeout_seconds=5)
    try:
        await eventually(lambda: "default/ok" in ext.scheduler.cluster.nodes["n8"].pods)
        api = driver_client(km)
        await asyncio.to_thread(api.post, "/api/v1/namespaces/default/pods", pod("later", "1", "n8"))
        await eventually(lambda: "default/later" in ext.scheduler.cluster.nodes["n8"].pods)
        assert ext.scheduler.cluster.nodes["n8"].requested["cpu"] == 4000
        # a structurally broken pod bound to `other` holds all of it
        assert fits(ext, pod("tiny", "10m"), ["n8", "other"]) == ["n8"]
    finally:
        ext.stop_watches()


# --- HTTP bodies ---------------------------------------------------------------------------------------------
@pytest.fixture
async def url(ext: Extender) -> AsyncIterator[str]:
    await asyncio.to_thread(ext.refresh)
    server = ExtenderServer(("127.0.0.1", 0), ext)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        await asyncio.to_thread(server.shutdown)
        server.server_close()


async def post(url: str, body: bytes) -> tuple[int, Any]:
    return await asyncio.to_thread(_post, url, body)


def _post(url: str, body: bytes) -> tuple[int, Any]:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _pod_with(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "x", "namespace": "default"}, "spec": spec}


BAD_POD_BODIES: list[Any] = [
    _pod_with(containers="abc"),
    _pod_with(containers=[5]),
    _pod_with(containers=[{"resources": "abc"}]),
    _pod_with(containers=[{"resources": {"requests": ["cpu"]}}]),
    _pod_with(containers=[{"resources": {"requests": {"cpu": "1x"}}}]),
    _pod_with(containers=[{"resources": {"requests": {"cpu": {"a": 1}}}}]),
    _pod_with(containers=[{"resources": {"requests": {"cpu": "-1"}}}]),
    _pod_with(initContainers="abc"),
    _pod_with(overhead="abc"),
    {"metadata": {"name": "x"}, "spec": "abc"},
    {"metadata": "abc"},
    "abc",
]


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
async def test_malformed_filter_and_prioritize_bodies_get_400(url: str, verb: str, caplog: pytest.LogCaptureFixture
                                                         ) -> None:
    """Fault: filter/prioritize bodies with wrong types, missing fields, invalid JSON, and Pods whose spec is
    malformed (`spec.containers` a string, …). Invariant: HTTP 400 with a one-line reason, no traceback logged."""
    bodies: list[bytes] = [b"{", b"[]", b"null", json.dumps({"NodeNames": ["n8"]}).encode(),
                           json.dumps({"Pod": _pod_with(), "NodeNames": "n8"}).encode(),
                           json.dumps({"Pod": _pod_with(), "Nodes": {"items": [{"metadata": "abc"}]}}).encode(),
                           json.dumps({"Pod": _pod_with()}).encode()]
    bodies += [json.dumps({"Pod": p, "NodeNames": ["n8"]}).encode() for p in BAD_POD_BODIES]
    with caplog.at_level(logging.DEBUG):
        for body in bodies:
            status, res = await post(f"{url}/{verb}", body)
            assert status == 400, (body, status, res)
            assert res["Error"] and "\n" not in res["Error"] and "Traceback" not in res["Error"], res
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


async def test_malformed_bind_bodies_and_pods(km: kmock.KubernetesEmulator, url: str,
                                        caplog: pytest.LogCaptureFixture) -> None:
    """Fault: bind bodies with wrong types or missing fields, and a bind of a stored pod whose spec is malformed.
    Invariant: 400 with a one-line reason for the body, an Error (no bind, no 500) for the pod, no traceback."""
    km.objects["v1/pods", "default", "broken"] = _pod_with(containers="abc") | {
        "metadata": {"name": "broken", "namespace": "default"}}
    km.objects["v1/pods", "default", "badq"] = pod("badq", "1x")
    with caplog.at_level(logging.DEBUG):
        for body in ({}, {"PodName": 5, "PodNamespace": "default", "Node": "n8"},
                     {"PodName": "x", "PodNamespace": "default", "Node": ["n8"]},
                     {"PodName": "x", "PodNamespace": "default", "Node": "n8", "PodUID": 7}):
            status, res = await post(f"{url}/bind", json.dumps(body).encode())
            assert status == 400 and res["Error"] and "\n" not in res["Error"], (body, status, res)
        for name in ("broken", "badq"):
            status, res = await post(f"{url}/bind", json.dumps({"PodName": name, "PodNamespace": "default",
                                                          "Node": "n8"}).encode())
            assert status == 200 and res["Error"] and "\n" not in res["Error"], (name, res)
            assert not km.objects["v1/pods", "default", name].raw["spec"].get("nodeName")
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                       max_size=3), max_leaves=6)
QUANTITIES = st.one_of(st.sampled_from(["1", "250m", "1x", "-1", "abc", "1Gi", "1e3", ""]), JSON_VALUES)
CONTAINERS = st.one_of(JSON_VALUES, st.lists(st.one_of(JSON_VALUES, st.fixed_dictionaries({}, optional={
    "name": JSON_VALUES, "resources": st.one_of(JSON_VALUES, st.fixed_dictionaries({}, optional={
        "requests": st.one_of(JSON_VALUES, st.dictionaries(st.sampled_from(["cpu", "memory", "pods", "x/y"]),
                                                           QUANTITIES, max_size=3))}))})), max_size=3))
PODS = st.one_of(JSON_VALUES, st.fixed_dictionaries({"metadata": st.one_of(JSON_VALUES, st.just(
    {"name": "f", "namespace": "default"}))}, optional={"spec": st.one_of(JSON_VALUES, st.fixed_dictionaries(
        {}, optional={"containers": CONTAINERS, "initContainers": CONTAINERS, "overhead": JSON_VALUES,
                      "nodeName": JSON_VALUES}))}))
BODIES = st.fixed_dictionaries({}, optional={"Pod": PODS, "NodeNames": st.one_of(JSON_VALUES, st.just(["n8"])),
                                             "Nodes": JSON_VALUES})
FUZZ_EXAMPLES = 400  # per verb


async def test_fuzzed_filter_and_prioritize_bodies_never_500(url: str, caplog: pytest.LogCaptureFixture) -> None:
    """Fault: 400 generated filter and prioritize bodies each (hypothesis: any JSON where the Pod, its spec,
    containers, resources and quantities go). Invariant: 200 or 400 with a one-line Error, never a 500 or a
    traceback in the log."""
    seen: list[int] = []

    @settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None)
    @given(body=BODIES)
    def fuzz(body: dict[str, Any]) -> None:
        for verb in ("filter", "prioritize"):
            status, res = _post(f"{url}/{verb}", json.dumps(body).encode())
            seen.append(status)
            assert status in (200, 400), (body, status, res)
            if status == 400:
                assert res["Error"] and "\n" not in res["Error"]

    with caplog.at_level(logging.WARNING):
        await asyncio.to_thread(fuzz)
    assert len(seen) >= 2 * FUZZ_EXAMPLES and 400 in seen
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


# --- SIGTERM ---------------------------------------------------------------------------------------------------
async def test_sigterm_stops_the_extender_within_a_second(km: kmock.KubernetesEmulator, tmp_path: Path) -> None:
    """Fault: SIGTERM to a running `koord-sched extender` (watches open, server listening). Invariant: it exits 0
    within a second, its watches stopped and its server closed."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "k",
        "clusters": [{"name": "k", "cluster": {"server": str(km.url)}}],
        "contexts": [{"name": "k", "context": {"cluster": "k", "user": "u"}}], "users": [{"name": "u", "user": {}}]}))
    rc, took, rest = await asyncio.to_thread(_term, kubeconfig)
    assert rc == 0, rest
    assert took < 1.0, took
    assert "Traceback" not in rest, rest


def _term(kubeconfig: Path) -> tuple[int, float, str]:
    """Start the extender, SIGTERM it once it listens: (exit status, seconds to exit, its stderr after)."""
    proc = subprocess.Popen([sys.executable, "-m", "scheduler.cli", "extender", "--kubeconfig", str(kubeconfig),
                             "--addr", "127.0.0.1:0"], cwd=ROOT, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stderr is not None
    try:
        for line in proc.stderr:
            if "extender listening" in line:
                break
        else:
            pytest.fail(f"the extender did not start (rc {proc.wait()})")
        time.sleep(0.5)  # the watches are open
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=5)
        return rc, time.monotonic() - started, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def test_conflict_on_binding_releases_the_reservation(km: kmock.KubernetesEmulator, ext: Extender) -> None:
    """Fault: the Binding answers 409 because someone else bound the pod to `other` in between. Invariant: bind
    answers an Error (no crash, no 500), nothing stays assumed or reserved on n8 (no phantom bind), and the pod is
    counted where it really is after the next list."""
    from kubedouble import status_failure

    await asyncio.to_thread(ext.refresh)
    km.objects["v1/pods", "default", "seven"] = pod("seven", "7")

    def someone_else(request: kmock.Request) -> Any:
        km.objects["v1/pods", "default", "seven"].patch({"spec": {"nodeName": "other"},
                                                         "status": {"phase": "Running"}})
        return kmock.Response(status=409, payload=status_failure(409, "pod seven is already assigned"))

    (km ** 10)["post /api/v1/namespaces/default/pods/seven/binding"][:1] << someone_else
    res = await asyncio.to_thread(ext.bind, {"PodName": "seven", "PodNamespace": "default", "Node": "n8"})
    assert "409" in res["Error"] or "already assigned" in res["Error"], res
    assert not ext.assumed and "default/seven" not in ext.scheduler.cluster.nodes["n8"].pods
    assert fits(ext, pod("eight", "8"), ["n8"]) == ["n8"]
    await asyncio.to_thread(ext.refresh)
    assert "default/seven" in ext.scheduler.cluster.nodes["other"].pods
    assert fits(ext, pod("two", "2"), ["other"]) == []
