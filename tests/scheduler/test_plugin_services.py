"""`koord-sched run`'s ports as v0.7's diagnosis text uses them: the debug flags on the health port (10251), the plugin
services alone on their own port (10252), NodeNUMAResource's cpuTopologyOptions and availableCPUs among them,
answering from the cluster as the last cycle saw it; /apis/v1/ answers 503 on a candidate that does not lead, and
the secure port serves the same over TLS."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import kmock
import pytest
from test_extender_tls import make_cert
from test_numa import LSR, STATUS, node, nrt, pod

from apis.client.kubeapi import KubeClient, KubeConfig
from apis.extension.resource_status import parse_cpuset
from scheduler import debug
from scheduler.cli import parser, profile, start_servers
from scheduler.framework import Scheduler
from scheduler.leaderelection import LeaderElector, LeaseConfig
from scheduler.runner import SecondaryScheduler
from scheduler.services import DiagnosisServer
from scheduler.tlsserve import server_context

from kubedouble import emulate_binding

NAME = "koord-py"
NRT = "topology.node.k8s.io/v1alpha1/noderesourcetopologies"
PLUGINS = "/apis/v1/plugins"


@pytest.fixture
def km(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    for res in ("v1/nodes", "v1/pods", NRT):
        kmock.resources[res] = {}
    kmock.objects["v1/nodes", None, "n1"] = node("n1", 16, "128Gi")
    topology = nrt("n1")  # 16 CPUs: 2 NUMA nodes of 4 cores × 2 threads; the kubelet keeps CPU 15
    topology["metadata"]["annotations"]["kubelet.koordinator.sh/cpu-manager-policy"] = json.dumps(
        {"policy": "static", "reservedCPUs": "15"})
    kmock.objects[NRT, None, "n1"] = topology
    emulate_binding(kmock)
    return kmock


def pending(name: str, cpu: str) -> dict[str, Any]:
    p = pod(name, {"cpu": cpu, "memory": "1Gi"}, {}, LSR)
    p["spec"]["schedulerName"] = NAME
    p["metadata"]["uid"] = f"uid-{name}"
    return p


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str, method: str = "GET", body: bytes | None = None, ctx: ssl.SSLContext | None = None
        ) -> tuple[int, Any]:
    req = urllib.request.Request(url, data=body, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as resp:
            text = resp.read().decode()
            status = resp.status
    except urllib.error.HTTPError as e:
        text, status = e.read().decode(), e.code
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def cpus_of(km: kmock.KubernetesEmulator, name: str) -> set[int]:
    status = json.loads(km.objects["v1/pods", "default", name].raw["metadata"]["annotations"][STATUS])
    return set(parse_cpuset(status["cpuset"]))


def servers_of(runner: SecondaryScheduler, elector: LeaderElector | None, *extra: str) -> list[DiagnosisServer]:
    health, services = free_port(), free_port()
    ns = parser().parse_args(["run", f"--addr=127.0.0.1:{health}", "--bind-address=127.0.0.1",
                              f"--services-port={services}", *extra])
    ns.tls = server_context(ns)
    return start_servers(ns, runner, elector)


async def test_the_services_port_answers_cpu_topology_options_from_the_live_cluster(
        km: kmock.KubernetesEmulator) -> None:
    km.objects["v1/pods", "default", "a"] = pending("a", "4")
    runner = SecondaryScheduler(KubeClient(KubeConfig(server=str(km.url))), NAME,
                                lambda c: Scheduler(c, profile(None)))
    await asyncio.to_thread(runner.run_once)
    servers = servers_of(runner, None)
    try:
        health, services = (f"http://127.0.0.1:{s.server_address[1]}" for s in servers)
        assert [s.api.services_only for s in servers] == [False, True]
        await asyncio.to_thread(check_services, km, runner, health, services)
    finally:
        for s in servers:
            s.shutdown()
            s.server_close()


def check_services(km: kmock.KubernetesEmulator, runner: SecondaryScheduler, health: str, services: str) -> None:
    status, listed = get(f"{services}/apis/v1/__services__")
    assert status == 200
    for path in ("NodeNUMAResources/cpuTopologyOptions/:nodeName", "NodeNUMAResource/:nodeName/cpuTopologyOptions",
                 "NodeNUMAResource/:nodeName/availableCPUs", "ElasticQuota/quotas"):
        assert f"{PLUGINS}/{path}" in listed["GET"]
    # v0.7's text, as written
    status, opts = get(f"{services}{PLUGINS}/NodeNUMAResources/cpuTopologyOptions/n1")
    assert status == 200
    topo = opts["cpuTopology"]
    assert (topo["numCPUs"], topo["numCores"], topo["numNodes"], topo["numSockets"]) == (16, 8, 2, 2)
    # upstream's builder keys cores and NUMA nodes by socket: CPU 12 is core 4 of socket 1, NUMA node 1
    assert topo["cpuDetails"]["12"] == {"cpuID": 12, "coreID": 1 << 16 | 4, "nodeID": 1 << 16 | 1, "socketID": 1,
                                        "refCount": 0, "exclusivePolicy": ""}
    assert opts["reservedCPUs"] == "15" and opts["policy"]["policy"] == "static" and opts["maxRefCount"] == 1
    # the kubelet's reserved CPU is taken out of its NUMA node's cpu
    assert opts["numaNodeResources"] == [{"node": 0, "resources": {"cpu": "8", "memory": "64Gi"}},
                                         {"node": 1, "resources": {"cpu": "7", "memory": "64Gi"}}]
    assert get(f"{services}{PLUGINS}/NodeNUMAResource/n1/cpuTopologyOptions") == (200, opts)  # v1.7's order
    held = cpus_of(km, "a")
    status, avail = get(f"{services}{PLUGINS}/NodeNUMAResource/n1/availableCPUs")
    assert status == 200 and {int(c) for c in avail["allocated"]} == held and len(held) == 4
    assert all(v["refCount"] == 1 for v in avail["allocated"].values())
    assert set(parse_cpuset(avail["availableCPUs"])) == set(range(15)) - held  # CPU 15 is the kubelet's
    # a second pod bound: the next cycle's state is what the services answer
    km.objects["v1/pods", "default", "b"] = pending("b", "2")
    runner.run_once()
    status, after = get(f"{services}{PLUGINS}/NodeNUMAResources/availableCPUs/n1")
    assert {int(c) for c in after["allocated"]} == held | cpus_of(km, "b") and len(after["allocated"]) == 6
    assert get(f"{services}{PLUGINS}/NodeNUMAResource/ghost/availableCPUs")[0] == 404
    # the services port serves the services only; the health port serves them and the debug flags
    assert get(f"{services}/debug/flags/s", "PUT", b"3")[0] == 404
    assert get(f"{services}/metrics")[0] == 404
    try:
        assert get(f"{health}/debug/flags/s", "PUT", b"3") == (200, "successfully set debugTopNScores to 3\n")
        assert debug.top_n_scores == 3
    finally:
        debug.top_n_scores = 0
    assert get(f"{health}/healthz") == (200, "ok")
    assert get(f"{health}{PLUGINS}/NodeNUMAResources/cpuTopologyOptions/n1") == (200, opts)


async def test_a_candidate_that_does_not_lead_answers_503_and_the_secure_port_serves_tls(
        km: kmock.KubernetesEmulator, tmp_path: Path) -> None:
    runner = SecondaryScheduler(KubeClient(KubeConfig(server=str(km.url))), NAME,
                                lambda c: Scheduler(c, profile(None)))
    await asyncio.to_thread(runner.run_once)
    elector = LeaderElector(KubeClient(KubeConfig(server=str(km.url))), LeaseConfig())
    cert, key = make_cert(tmp_path, "koord-sched")
    secure = free_port()
    servers = servers_of(runner, elector, f"--secure-port={secure}", f"--tls-cert-file={cert}",
                         f"--tls-private-key-file={key}")
    try:
        await asyncio.to_thread(check_leader_gate, elector, servers, cert)
    finally:
        for s in servers:
            s.shutdown()
            s.server_close()


def check_leader_gate(elector: LeaderElector, servers: list[DiagnosisServer], cert: Path) -> None:
    health, secure, services = servers
    assert (health.scheme, secure.scheme, services.scheme) == ("http", "https", "http")
    ctx = ssl.create_default_context(cafile=str(cert))
    urls = [f"{s.scheme}://127.0.0.1:{s.server_address[1]}" for s in servers]
    for url in urls:
        status, body = get(f"{url}/apis/v1/__services__", ctx=ctx)
        assert (status, body) == (503, {"message": "the instance is not leader"})
    assert get(f"{urls[0]}/healthz") == (200, "ok")  # the probes pass while it waits for the Lease
    assert get(f"{urls[1]}/healthz", ctx=ctx) == (200, "ok")
    elector.leading = True
    for url in urls:
        status, body = get(f"{url}{PLUGINS}/NodeNUMAResources/cpuTopologyOptions/n1", ctx=ctx)
        assert status == 200 and body["cpuTopology"]["numCPUs"] == 16


async def test_debug_flag_f_logs_each_filter_failure(km: kmock.KubernetesEmulator,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    """PUT /debug/flags/f (frameworkext's DebugFiltersSetter, a Go bool): each node a Filter refuses is logged with
    the plugin and its reason."""
    km.objects["v1/pods", "default", "big"] = pending("big", "64")
    # every cycle retries the pod (the queue's hints would hold it back until an event that could help it)
    runner = SecondaryScheduler(KubeClient(KubeConfig(server=str(km.url))), NAME,
                                lambda c: Scheduler(c, profile(None)), queueing_hints=False)
    servers = servers_of(runner, None)
    health = f"http://127.0.0.1:{servers[0].server_address[1]}"
    try:
        listed = await asyncio.to_thread(get, f"{health}/debug/flags")
        assert listed == (200, "/debug/flags/\nflags:\nf\ns\nv\n")
        assert await asyncio.to_thread(get, f"{health}/debug/flags/f", "PUT", b"maybe") == (
            400, 'failed set debugFilterFailure maybe: strconv.ParseBool: parsing "maybe": invalid syntax\n')
        with caplog.at_level(logging.INFO, logger="scheduler.framework"):
            await asyncio.to_thread(runner.run_once)  # off: nothing said
            assert not [r for r in caplog.records if r.getMessage().startswith("Failed to filter")]
            assert await asyncio.to_thread(get, f"{health}/debug/flags/f", "PUT", b"true") == (
                200, "successfully set debugFilterFailure to true\n")
            await asyncio.to_thread(runner.run_once)
        [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Failed to filter")]
        assert line.startswith('Failed to filter for Pod "default/big" on Node "n1", failedPlugin: NodeResourcesFit,')
        assert "Insufficient cpu" in line
    finally:
        debug.filter_failure = False
        for s in servers:
            s.shutdown()
            s.server_close()
