"""Whole NRI sessions: our plugin (connection, mux, ttrpc, handlers, real hooks and executor) against the Go peer
playing containerd's side over a real Unix socket: register, configure, a 1 000-container split Synchronize, pods
and containers with GPU / GPU+RDMA / HAMi-core / no allocation, broken input, a raising hook, runtime restart and a
runtime that is absent at start."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from test_hooks_allocation import fixture_annotation
from test_hooks_devices import rdma_node
from test_hooks_qos import build_resctrl

from apis.extension.device_allocated import ANNOTATION_DEVICE_ALLOCATED
from apis.slo.decode import nodeslo_config
from apis.slo.types import NodeSLOSpec
from koordlet.events import EventRecorder
from koordlet.health import Health
from koordlet.host.driver import CgroupDriver
from koordlet.host.paths import HostPaths
from koordlet.nri.connection import Backoff, NriConnection
from koordlet.nri.hooks import stages
from koordlet.nri.hooks.facts import NodeFactsReader
from koordlet.nri.metrics import NriMetrics
from koordlet.nri.plugin import SUBSCRIBED, NriPlugin, event_mask
from koordlet.nri.runner import StageRunner
from koordlet.nri.ttrpc import UNIMPLEMENTED
from koordlet.pb import nri_pb2 as api
from koordlet.qos.executor import Executor

from gopeer import GoPeer, gopeer_bin  # noqa: F401

GATES = {"GPUEnvInject": True, "RDMADeviceInject": True}
UID = "0d9c4b1e-7a53-4f5e-9b1a-3c2d1e0f9a87"


@dataclass
class Agent:
    """The plugin side as the daemon wires it (koordlet.nri.wiring), on a simulated node."""

    conn: NriConnection
    plugin: NriPlugin
    health: Health
    registry: CollectorRegistry
    stop: asyncio.Event
    posted: list[tuple[str, dict[str, Any]]]  # Events as they would be POSTed to the API server

    def sample(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels) or 0.0


def build_agent(paths: HostPaths, socket: Path, gates: dict[str, bool] | None = None,
                nodeslo: NodeSLOSpec | None = None) -> Agent:
    health, registry, posted = Health(), CollectorRegistry(), []
    metrics = NriMetrics("node-1", registry)
    executor = Executor(paths, 1, health)
    facts = NodeFactsReader(paths, 1, CgroupDriver.CGROUPFS, lambda: nodeslo, health)
    runner = StageRunner(facts, stages.HookOptions(gates=dict(GATES if gates is None else gates)), executor,
                         EventRecorder(health, "node-1", lambda path, obj: posted.append((path, obj))), metrics)
    plugin = NriPlugin(runner, metrics)
    conn = NriConnection(str(socket), plugin, metrics, backoff=Backoff(0.05, 2.0, 0.1, 0.2), connect_timeout=2.0)
    return Agent(conn, plugin, health, registry, asyncio.Event(), posted)


@contextlib.asynccontextmanager
async def running(agent: Agent) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.ensure_future(agent.conn.run(agent.stop))
    try:
        yield task
    finally:
        agent.stop.set()
        await asyncio.wait_for(task, 5)


async def registered(peer: GoPeer) -> api.RegisterPluginRequest:
    await peer.event("connected")
    event = await peer.event("RegisterPlugin")
    return api.RegisterPluginRequest.FromString(event["payload"])


async def call(peer: GoPeer, method: str, request: Any, reply_type: Any) -> Any:
    reply = await peer.command(call=method, payload=request.SerializeToString(), timeout_ms=2000)
    assert (reply["code"], reply["message"]) == (0, ""), reply
    return reply_type.FromString(reply["payload"])


async def configure(peer: GoPeer) -> api.ConfigureResponse:
    return await call(peer, "Configure", api.ConfigureRequest(runtime_name="containerd", runtime_version="2.1.0",
                                                              registration_timeout=5000, request_timeout=2000),
                      api.ConfigureResponse)


def pod_msg(uid: str = UID, name: str = "trainer", annotations: dict[str, str] | None = None,
            labels: dict[str, str] | None = None) -> api.PodSandbox:
    pod = api.PodSandbox(id=f"sandbox-{uid[:8]}", name=name, uid=uid, namespace="team-a",
                         annotations=annotations or {}, labels=labels or {})
    pod.linux.cgroup_parent = f"/kubepods/burstable/pod{uid}"
    return pod


def create_request(pod: api.PodSandbox, name: str = "main") -> api.CreateContainerRequest:
    return api.CreateContainerRequest(pod=pod, container=api.Container(id=f"{pod.id}-{name}", pod_sandbox_id=pod.id,
                                                                       name=name, env=["PATH=/usr/bin"]))


def expected(env: dict[str, str] | None = None, devices: list[tuple[str, int, int]] = (),  # type: ignore[assignment]
             mounts: list[str] = ()) -> api.ContainerAdjustment:  # type: ignore[assignment]
    adj = api.ContainerAdjustment()
    for k, v in (env or {}).items():
        adj.env.add(key=k, value=v)
    for m in mounts:
        adj.mounts.add(destination=m, source=m, type="bind", options=["rbind"])
    for path, major, minor in devices:
        d = adj.linux.devices.add(path=path, type="c", major=major, minor=minor)
        d.file_mode.value = 0o666
    return adj


@pytest.fixture
def socket_path(tmp_path: Path) -> Path:
    return tmp_path / "run" / "nri" / "nri.sock"


async def test_a_whole_session(gopeer_bin: Path, tmp_path: Path, socket_path: Path,
                               caplog: pytest.LogCaptureFixture) -> None:
    paths = rdma_node(tmp_path / "node")
    agent = build_agent(paths, socket_path, dict(GATES, GroupIdentity=False))
    async with GoPeer.start(gopeer_bin, "runtime", "-socket", str(socket_path)) as peer, running(agent):
        reg = await registered(peer)
        assert (reg.plugin_name, reg.plugin_idx) == ("koordlet_nri", "00")
        assert (await configure(peer)).events == event_mask(SUBSCRIBED) == 0x48D

        # 1 000 existing containers in four parts: every non-final answer is {more: true} with no updates.
        pods = [pod_msg(f"{i:08d}-0000-4000-8000-000000000000", f"p{i}") for i in range(250)]
        containers = [api.Container(id=f"c{i}", pod_sandbox_id=pods[i % 250].id, name=f"c{i}") for i in range(1000)]
        for part in range(4):
            req = api.SynchronizeRequest(pods=pods[part * 63:(part + 1) * 63] if part < 3 else pods[189:],
                                         containers=containers[part * 250:(part + 1) * 250], more=part < 3)
            reply = await call(peer, "Synchronize", req, api.SynchronizeResponse)
            assert (reply.more, list(reply.update)) == (part < 3, [])
        assert (len(agent.plugin.view.pods), len(agent.plugin.view.containers)) == (250, 1000)

        # GPU + RDMA VF, from the annotation koord-scheduler wrote on a real node.
        gpu_rdma = pod_msg(annotations={ANNOTATION_DEVICE_ALLOCATED: fixture_annotation()})
        reply = await call(peer, "CreateContainer", create_request(gpu_rdma), api.CreateContainerResponse)
        assert reply.adjust == expected({"NVIDIA_VISIBLE_DEVICES": "0"},
                                        [("/dev/infiniband/rdma_cm", 10, 57), ("/dev/infiniband/uverbs2", 231, 194)])
        assert (list(reply.update), list(reply.evict)) == ([], [])

        # GPU only, HAMi-core with a shared GPU, and no allocation at all.
        gpu = pod_msg(uid="1" + UID[1:], annotations={ANNOTATION_DEVICE_ALLOCATED: json.dumps(
            {"gpu": [{"minor": 1}, {"minor": 0}]})})
        reply = await call(peer, "CreateContainer", create_request(gpu), api.CreateContainerResponse)
        assert reply.adjust == expected({"NVIDIA_VISIBLE_DEVICES": "1,0"})
        hami = pod_msg(uid="2" + UID[1:], labels={"koordinator.sh/gpu-isolation-provider": "HAMi-core"},
                       annotations={ANNOTATION_DEVICE_ALLOCATED: json.dumps({"gpu": [{"minor": 0, "resources": {
                           "koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory": "16Gi",
                           "koordinator.sh/gpu-memory-ratio": "50"}}]})})
        reply = await call(peer, "CreateContainer", create_request(hami), api.CreateContainerResponse)
        assert reply.adjust == expected(
            {"NVIDIA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_MEMORY_LIMIT": str(16 << 30), "CUDA_DEVICE_SM_LIMIT": "50",
             "LD_PRELOAD": "/usr/local/vgpu/libvgpu.so"}, mounts=["/usr/local/vgpu/libvgpu.so", "/tmp/vgpulock"])
        plain = pod_msg(uid="3" + UID[1:])
        reply = await call(peer, "CreateContainer", create_request(plain), api.CreateContainerResponse)
        assert not reply.HasField("adjust") and reply == api.CreateContainerResponse()

        # A malformed annotation: the container is created without that hook's adjustment, no error status.
        broken = pod_msg(uid="4" + UID[1:], name="broken", annotations={ANNOTATION_DEVICE_ALLOCATED: '{"gpu": [{'})
        with caplog.at_level(logging.WARNING):
            reply = await call(peer, "CreateContainer", create_request(broken), api.CreateContainerResponse)
        assert reply == api.CreateContainerResponse()
        assert any("team-a/broken" in r.getMessage() and ANNOTATION_DEVICE_ALLOCATED in r.getMessage()
                   for r in caplog.records)
        [(path, event)] = agent.posted
        assert path == "/api/v1/namespaces/team-a/events"
        assert (event["involvedObject"]["name"], event["involvedObject"]["uid"], event["reason"]) == (
            "broken", "4" + UID[1:], "RuntimeHookFailed")
        assert event["message"].startswith(f"annotations[{ANNOTATION_DEVICE_ALLOCATED}]")
        assert agent.sample("koordlet_nri_calls_total", method="CreateContainer", outcome="hook_failed") == 1
        assert agent.sample("koordlet_nri_calls_total", method="CreateContainer", outcome="ok") == 4
        assert agent.sample("koordlet_runtime_hook_invoked_duration_milliseconds_count", node="node-1",
                            hook="gpu env inject", stage="PreCreateContainer", status="failed") == 1

        # Bytes that do not decode: still no error status (that would fail the container), an empty answer.
        reply = await peer.command(call="CreateContainer", payload=b"\x0a\xff", timeout_ms=2000)
        assert (reply["code"], reply["payload"]) == (0, b"")
        assert agent.sample("koordlet_nri_calls_total", method="CreateContainer", outcome="error") == 1

        # Pod lifecycle through StateChange (NRI <= 0.11) and the dedicated RPCs (>= 0.12) alike.
        await call(peer, "StateChange", api.StateChangeEvent(event=api.REMOVE_POD_SANDBOX, pod=pods[0]), api.Empty)
        await call(peer, "RemovePodSandbox", api.RemovePodSandboxRequest(pod=pods[1]), api.RemovePodSandboxResponse)
        assert pods[0].id not in agent.plugin.view.pods and pods[1].id not in agent.plugin.view.pods
        assert not [c for c in agent.plugin.view.containers.values() if c.sandbox_id in (pods[0].id, pods[1].id)]

        # Methods we do not implement answer UNIMPLEMENTED, which NRI >= 0.12 takes as "use StateChange".
        reply = await peer.command(call="PostStartContainer", payload=b"", timeout_ms=2000)
        assert (reply["code"], reply["message"]) == (UNIMPLEMENTED, "method PostStartContainer")
        assert agent.conn.connected and agent.sample("koordlet_nri_connected") == 1


async def test_a_hook_that_raises_does_not_stop_the_others(gopeer_bin: Path, tmp_path: Path,
                                                         socket_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = rdma_node(tmp_path / "node")
    hooks = stages.STAGES[stages.PRE_CREATE_CONTAINER]

    def explode(call: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setitem(stages.STAGES, stages.PRE_CREATE_CONTAINER, tuple(
        stages.Hook(h.name, h.enabled, explode) if h.name == "gpu env inject" else h for h in hooks))
    agent = build_agent(paths, socket_path)
    async with GoPeer.start(gopeer_bin, "runtime", "-socket", str(socket_path)) as peer, running(agent):
        await registered(peer)
        await configure(peer)
        pod = pod_msg(annotations={ANNOTATION_DEVICE_ALLOCATED: fixture_annotation()})
        reply = await call(peer, "CreateContainer", create_request(pod), api.CreateContainerResponse)
        assert reply.adjust == expected(devices=[("/dev/infiniband/rdma_cm", 10, 57),
                                                 ("/dev/infiniband/uverbs2", 231, 194)])


async def test_runtime_restart_and_a_runtime_absent_at_start(gopeer_bin: Path, tmp_path: Path,
                                                            socket_path: Path) -> None:
    agent = build_agent(HostPaths.under(str(tmp_path / "node")), socket_path)
    async with running(agent):
        await asyncio.sleep(0.3)  # no socket yet: the agent keeps retrying, nothing else waits on it
        assert not agent.conn.connected
        assert agent.sample("koordlet_nri_connection_attempts_total", result="no_socket") >= 2
        async with GoPeer.start(gopeer_bin, "runtime", "-socket", str(socket_path)) as peer:
            await registered(peer)
            await configure(peer)
            for restart in range(2):  # containerd restarts: the connection drops, the plugin comes back
                assert (await peer.command(op="drop"))["ok"]
                await peer.event("disconnected")
                await registered(peer)
                assert (await configure(peer)).events == 0x48D
                assert agent.conn.sessions == restart + 3 - 1
            # Only one connection at a time: no second registration arrived meanwhile.
            assert peer.pending_events("RegisterPlugin") == [] and peer.pending_events("connected") == []
            reply = await call(peer, "CreateContainer", create_request(pod_msg()), api.CreateContainerResponse)
            assert reply == api.CreateContainerResponse()
        # The runtime went away for good (socket removed): the agent keeps running and retrying.
        await asyncio.sleep(0.3)
        assert not agent.conn.connected and agent.sample("koordlet_nri_connected") == 0


@pytest.mark.parametrize(("config", "mask"), [
    ("events: [RunPodSandbox, createcontainer]", 0x9),
    ("events: ['pod,container']", 0x7FF),
    ("events: [all]", 0x7FF),
    ("events: [NoSuchEvent]", 0x48D),  # refused: koordlet's own subscription, and a log line
    ("{{ not yaml", 0x48D),
    ("someOtherKey: 1", 0x48D),
])
async def test_plugin_config_from_the_runtime_replaces_the_events(gopeer_bin: Path, tmp_path: Path,
                                                                  socket_path: Path, config: str, mask: int) -> None:
    agent = build_agent(HostPaths.under(str(tmp_path / "node")), socket_path)
    async with GoPeer.start(gopeer_bin, "runtime", "-socket", str(socket_path)) as peer, running(agent):
        await registered(peer)
        reply = await call(peer, "Configure", api.ConfigureRequest(config=config), api.ConfigureResponse)
        assert reply.events == mask


async def test_pod_level_qos_through_the_wire(gopeer_bin: Path, tmp_path: Path, socket_path: Path) -> None:
    """RunPodSandbox creates the pod's resctrl group and writes its bvt through the executor, before any container;
    CreateContainer then names the group as the RDT class; RemovePodSandbox removes it."""
    root = tmp_path / "node"
    paths = build_resctrl(root)
    cpu = root / "sys/fs/cgroup/cpu"
    (cpu / "kubepods").mkdir(parents=True)
    (cpu / "kubepods/cpu.bvt_warp_ns").write_text("0\n")
    pod_cg = cpu / f"kubepods/besteffort/pod{UID}"
    pod_cg.mkdir(parents=True)
    (pod_cg / "cpu.bvt_warp_ns").write_text("0\n")
    (root / "proc/sys/kernel").mkdir(parents=True)
    (root / "proc/sys/kernel/sched_group_identity_enabled").write_text("1\n")
    slo = nodeslo_config({"resourceQOSStrategy": {"beClass": {"cpuQOS": {"enable": True}}}})
    agent = build_agent(paths, socket_path, {"Resctrl": True, "GroupIdentity": True}, nodeslo=slo)
    pod = pod_msg(labels={"koordinator.sh/qosClass": "BE"},
                  annotations={"node.koordinator.sh/resctrl": '{"llc":{"schemata":{"range":[20,80]}}}'})
    pod.linux.cgroup_parent = f"/kubepods/besteffort/pod{UID}"
    group = root / f"sys/fs/resctrl/koordlet-{UID}"
    async with GoPeer.start(gopeer_bin, "runtime", "-socket", str(socket_path)) as peer, running(agent):
        await registered(peer)
        await configure(peer)
        await call(peer, "StateChange", api.StateChangeEvent(event=api.RUN_POD_SANDBOX, pod=pod), api.Empty)
        assert group.is_dir()  # a plain dir here: no kernel makes its schemata file, so that write is skipped
        assert (pod_cg / "cpu.bvt_warp_ns").read_text() == "-1"
        reply = await call(peer, "CreateContainer", create_request(pod), api.CreateContainerResponse)
        expect = api.ContainerAdjustment()
        expect.linux.resources.rdt_class.value = f"koordlet-{UID}"
        assert reply.adjust == expect
        await call(peer, "RemovePodSandbox", api.RemovePodSandboxRequest(pod=pod), api.RemovePodSandboxResponse)
        assert not group.exists()


async def test_batch_resources_through_the_wire(gopeer_bin: Path, tmp_path: Path, socket_path: Path,
                                                caplog: pytest.LogCaptureFixture) -> None:
    """BatchResource (on by default): RunPodSandbox writes the BE pod's shares, quota and memory limit at its cgroup
    dir; CreateContainer and UpdateContainer carry the container's in the adjustment and the update; an LS pod with
    the same annotation gets nothing; a malformed annotation is an empty answer (never an error status), a log line,
    an Event and the hook's failed metric."""
    root = tmp_path / "node"
    paths = HostPaths.under(str(root))
    pod_cg = {sub: root / f"sys/fs/cgroup/{sub}/kubepods/besteffort/pod{UID}" for sub in ("cpu", "memory")}
    for d in pod_cg.values():
        d.mkdir(parents=True)
    (pod_cg["cpu"] / "cpu.shares").write_text("2\n")
    (pod_cg["cpu"] / "cpu.cfs_quota_us").write_text("-1\n")
    (pod_cg["memory"] / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    agent = build_agent(paths, socket_path, {})
    spec = {"containers": {"main": {"requests": {"kubernetes.io/batch-cpu": "2000",
                                                 "kubernetes.io/batch-memory": "1Gi"},
                                    "limits": {"kubernetes.io/batch-cpu": "4000",
                                               "kubernetes.io/batch-memory": "2Gi"}}}}
    be = pod_msg(labels={"koordinator.sh/qosClass": "BE"},
                 annotations={"node.koordinator.sh/extended-resource-spec": json.dumps(spec)})
    be.linux.cgroup_parent = f"/kubepods/besteffort/pod{UID}"
    want = api.ContainerAdjustment()
    want.linux.resources.cpu.shares.value = 2048
    want.linux.resources.cpu.quota.value = 400_000
    want.linux.resources.memory.limit.value = 2 << 30
    async with GoPeer.start(gopeer_bin, "runtime", "-socket", str(socket_path)) as peer, running(agent):
        await registered(peer)
        await configure(peer)
        await call(peer, "RunPodSandbox", api.RunPodSandboxRequest(pod=be), api.RunPodSandboxResponse)
        assert (pod_cg["cpu"] / "cpu.shares").read_text() == "2048"
        assert (pod_cg["cpu"] / "cpu.cfs_quota_us").read_text() == "400000"
        assert (pod_cg["memory"] / "memory.limit_in_bytes").read_text() == str(2 << 30)
        reply = await call(peer, "CreateContainer", create_request(be), api.CreateContainerResponse)
        assert reply.adjust == want
        req = api.UpdateContainerRequest(pod=be, container=create_request(be).container)
        reply = await call(peer, "UpdateContainer", req, api.UpdateContainerResponse)
        assert [(u.container_id, u.linux.resources) for u in reply.update] == [
            (f"{be.id}-main", want.linux.resources)]

        ls = pod_msg(uid="6" + UID[1:], labels={"koordinator.sh/qosClass": "LS"},
                     annotations={"node.koordinator.sh/extended-resource-spec": json.dumps(spec)})
        reply = await call(peer, "CreateContainer", create_request(ls), api.CreateContainerResponse)
        assert reply == api.CreateContainerResponse()

        broken = pod_msg(uid="7" + UID[1:], name="broken", labels={"koordinator.sh/qosClass": "BE"},
                         annotations={"node.koordinator.sh/extended-resource-spec": '{"containers": {'})
        with caplog.at_level(logging.WARNING):
            reply = await call(peer, "CreateContainer", create_request(broken), api.CreateContainerResponse)
            update = await call(peer, "UpdateContainer",
                                api.UpdateContainerRequest(pod=broken, container=create_request(broken).container),
                                api.UpdateContainerResponse)
        assert reply == api.CreateContainerResponse() and list(update.update) == []
        assert any("team-a/broken" in r.getMessage() and "extended-resource-spec" in r.getMessage()
                   for r in caplog.records)
        assert [(e["involvedObject"]["name"], e["reason"]) for _, e in agent.posted][:1] == [
            ("broken", "RuntimeHookFailed")]
        assert agent.sample("koordlet_runtime_hook_invoked_duration_milliseconds_count", node="node-1",
                            hook="BatchResource", stage="PreCreateContainer", status="failed") == 1
        assert agent.sample("koordlet_nri_calls_total", method="CreateContainer", outcome="hook_failed") == 1
        assert agent.sample("koordlet_nri_calls_total", method="CreateContainer", outcome="error") == 0
