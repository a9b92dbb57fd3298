"""Our mux + ttrpc as the plugin side of an NRI connection, against the Go peer playing containerd's side (its mux is
NRI-like: a frame larger than the reader's buffer is an ENOMEM error, 256 queued frames per ConnID at most)."""

from __future__ import annotations

import asyncio
import os
import stat
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from koordlet.nri.mux import MAX_SAFE_SEND, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN, Mux
from koordlet.nri.ttrpc import REQUEST, TtrpcClient, TtrpcClosedError, TtrpcServer, frame
from koordlet.pb import nri_pb2 as api
from koordlet.pb import ttrpc_pb2

from gopeer import GoPeer, gopeer_bin  # noqa: F401

PLUGIN = "nri.pkg.api.v1alpha1.Plugin"
RUNTIME = "nri.pkg.api.v1alpha1.Runtime"
MUX_HEADER = struct.Struct(">II")


@dataclass
class PluginSide:
    """What a plugin runs on one connection: the mux, a Plugin server on ConnID 1, a Runtime client on ConnID 2."""

    mux: Mux
    client: TtrpcClient
    tasks: list[asyncio.Task[None]]
    requests: list[tuple[str, bytes]] = field(default_factory=list)


@asynccontextmanager
async def plugin_side(path: Path) -> AsyncIterator[PluginSide]:
    reader, writer = await asyncio.open_unix_connection(str(path))
    mux = Mux(reader, writer)
    plugin_in, plugin_out = mux.channel(PLUGIN_SERVICE_CONN)
    runtime_in, runtime_out = mux.channel(RUNTIME_SERVICE_CONN)
    client = TtrpcClient(runtime_in, runtime_out)
    side = PluginSide(mux, client, [])

    async def configure(payload: bytes, deadline: float | None) -> bytes:
        side.requests.append(("Configure", payload))
        return api.ConfigureResponse(events=0x8D).SerializeToString()

    async def echo(payload: bytes, deadline: float | None) -> bytes:
        side.requests.append(("CreateContainer", payload))
        return payload

    server = TtrpcServer({PLUGIN: {"Configure": configure, "CreateContainer": echo}})
    side.tasks += [asyncio.create_task(mux.run()), asyncio.create_task(server.serve(plugin_in, plugin_out)),
                   asyncio.create_task(client.run())]
    try:
        yield side
    finally:
        mux.close()
        for task in side.tasks:
            task.cancel()
        await asyncio.gather(*side.tasks, return_exceptions=True)


@asynccontextmanager
async def runtime(binary: Path, path: Path) -> AsyncIterator[GoPeer]:
    async with GoPeer.start(binary, "runtime", "-socket", str(path)) as peer:
        await peer.event("listening")
        yield peer


def register_request() -> bytes:
    return api.RegisterPluginRequest(plugin_name="koordlet_nri", plugin_idx="00").SerializeToString()


async def test_register_configure_update(gopeer_bin: Path, tmp_path: Path) -> None:
    sock = tmp_path / "run" / "nri" / "nri.sock"
    async with runtime(gopeer_bin, sock) as peer, plugin_side(sock) as side:
        await peer.event("connected")
        assert await side.client.call(RUNTIME, "RegisterPlugin", register_request(), timeout=5) == b""
        registered = await peer.event("RegisterPlugin")
        assert registered["payload"] == register_request()

        configure = api.ConfigureRequest(runtime_name="containerd", runtime_version="2.1.0",
                                         registration_timeout=5000, request_timeout=2000)
        reply = await peer.command(call="Configure", payload=configure.SerializeToString(), timeout_ms=2000)
        assert (reply["code"], reply["payload"]) == (0, b"\x10\x8d\x01")
        assert api.ConfigureResponse.FromString(reply["payload"]).events == 0x8D
        assert side.requests == [("Configure", configure.SerializeToString())]

        resources = api.LinuxResources(cpu=api.LinuxCPU(shares=api.OptionalUInt64(value=512)))
        update = api.UpdateContainersRequest(update=[
            api.ContainerUpdate(container_id="c1", linux=api.LinuxContainerUpdate(resources=resources))])
        assert await side.client.call(RUNTIME, "UpdateContainers", update.SerializeToString(), timeout=5) == b""
        got = api.UpdateContainersRequest.FromString((await peer.event("UpdateContainers"))["payload"])
        assert got == update
        # the parent directory was created private, as the runtime does
        assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
    assert peer.pending_events("mux_error") == []


async def test_unknown_plugin_method_is_unimplemented(gopeer_bin: Path, tmp_path: Path) -> None:
    """What a v0.12+ runtime relies on to fall back to StateChange."""
    sock = tmp_path / "nri.sock"
    async with runtime(gopeer_bin, sock) as peer, plugin_side(sock):
        await peer.event("connected")
        reply = await peer.command(call="RunPodSandbox", payload=b"", timeout_ms=2000)
    assert (reply["code"], reply["message"]) == (12, "method RunPodSandbox")


@pytest.mark.parametrize(("size", "back"), [(10 << 10, 10 << 10), (3 << 20, 900 << 10)])
async def test_large_messages_both_directions(gopeer_bin: Path, tmp_path: Path, size: int, back: int) -> None:
    """Go → us: Go ttrpc's [4096, rest] frames reassemble; us → Go: every frame we send fits Go's 4096-byte reads
    (an oversized one would show as a mux_error event and a failed call). Our sends stay under 256 frames
    (MAX_SAFE_SEND): NRI's reader queues no more per ConnID, see koordlet/nri/mux.py."""
    sock = tmp_path / "nri.sock"
    request = api.CreateContainerRequest(
        pod=api.PodSandbox(id="p", annotations={"big": "a" * size}),
        container=api.Container(id="c", env=[f"K{i}=V" for i in range(100)])).SerializeToString()
    async with runtime(gopeer_bin, sock) as peer, plugin_side(sock) as side:
        await peer.event("connected")
        reply = await peer.command(call="Configure", payload=request, timeout_ms=20000)
        assert (reply["code"], reply["payload"]) == (0, b"\x10\x8d\x01")
        assert side.requests == [("Configure", request)]

        update = api.UpdateContainersRequest(evict=[api.ContainerEviction(container_id="c", reason="r" * back)])
        assert len(frame(1, REQUEST, update.SerializeToString())) < MAX_SAFE_SEND
        await side.client.call(RUNTIME, "UpdateContainers", update.SerializeToString(), timeout=20)
        assert (await peer.event("UpdateContainers"))["payload"] == update.SerializeToString()

        stats = await peer.command(op="stats")
        assert stats["frames"]["2"] > back // 4096 and stats["largest"]["2"] == 4096
        assert stats["frames"]["1"] == 1  # the Configure reply
    assert peer.pending_events("mux_error") == []


async def test_many_concurrent_calls_over_the_mux(gopeer_bin: Path, tmp_path: Path) -> None:
    sock = tmp_path / "nri.sock"
    async with runtime(gopeer_bin, sock) as peer, plugin_side(sock) as side:
        await peer.event("connected")
        payloads = [os.urandom(i * 131 % 9000) for i in range(200)]
        calls = [peer.command(call="CreateContainer", payload=p, timeout_ms=20000) for p in payloads]
        registering = side.client.call(RUNTIME, "RegisterPlugin", register_request(), timeout=20)
        *replies, _ = await asyncio.gather(*calls, registering)
        assert [r["payload"] for r in replies] == payloads
        assert {r["code"] for r in replies} == {0}
    assert peer.pending_events("mux_error") == []


async def test_go_runtime_splits_large_messages_at_4096(gopeer_bin: Path, tmp_path: Path) -> None:
    """Spec §7.12(c): a 10 KiB call from Go arrives as a 4096-byte frame and one with the rest."""
    sock = tmp_path / "nri.sock"
    payload = b"p" * (10 << 10)
    async with runtime(gopeer_bin, sock) as peer:
        reader, writer = await asyncio.open_unix_connection(str(sock))
        try:
            await peer.event("connected")
            calling = asyncio.ensure_future(peer.command(call="Configure", payload=payload, timeout_ms=300))
            message = len(frame(1, REQUEST, ttrpc_pb2.Request(service=PLUGIN, method="Configure", payload=payload,
                                                              timeout_nano=299_999_999).SerializeToString()))
            sizes, total = [], 0
            while total < message - 10:  # timeout_nano's varint may be a byte shorter than the estimate
                conn_id, size = MUX_HEADER.unpack(await asyncio.wait_for(reader.readexactly(8), 5))
                await reader.readexactly(size)
                assert conn_id == PLUGIN_SERVICE_CONN
                sizes.append(size)
                total += size
            assert sizes == [4096, total - 4096]
            assert abs(total - message) <= 1
            assert (await calling)["code"] == 4  # nobody answered: deadline exceeded on the Go side
        finally:
            writer.close()


async def test_one_big_frame_breaks_go_and_our_chunks_do_not(gopeer_bin: Path, tmp_path: Path) -> None:
    """Spec §7.12(a)/(b): a 6066-byte ttrpc message in one mux frame fails Go's read (ENOMEM); the same bytes sent
    through Mux.send (frames of at most 4096 bytes) register fine."""
    sock = tmp_path / "nri.sock"
    name = "n" * 6000
    body = ttrpc_pb2.Request(service=RUNTIME, method="RegisterPlugin", payload=api.RegisterPluginRequest(
        plugin_name=name, plugin_idx="00").SerializeToString()).SerializeToString()
    message = frame(1, REQUEST, body)
    assert len(message) > 4096
    async with runtime(gopeer_bin, sock) as peer:
        reader, writer = await asyncio.open_unix_connection(str(sock))
        await peer.event("connected")
        writer.write(MUX_HEADER.pack(RUNTIME_SERVICE_CONN, len(message)) + message)
        await writer.drain()
        error = await peer.event("mux_error")
        assert "cannot allocate memory" in error["error"]
        assert peer.pending_events("RegisterPlugin") == []
        writer.close()
        await peer.command(op="drop")
        await peer.event("disconnected")

        reader, writer = await asyncio.open_unix_connection(str(sock))
        await peer.event("connected")
        mux = Mux(reader, writer)
        _, send = mux.channel(RUNTIME_SERVICE_CONN)
        await send(message)
        registered = await peer.event("RegisterPlugin")
        assert api.RegisterPluginRequest.FromString(registered["payload"]).plugin_name == name
        mux.close()
    assert peer.pending_events("mux_error") == []


async def test_frames_for_other_conn_ids_are_ignored_by_go(gopeer_bin: Path, tmp_path: Path) -> None:
    """Spec §7.12(d), Go side: frames for ConnID 7 (and 0) are dropped and the session goes on."""
    sock = tmp_path / "nri.sock"
    async with runtime(gopeer_bin, sock) as peer, plugin_side(sock) as side:
        await peer.event("connected")
        await side.mux.send(7, b"\x00" * 5000)
        await side.mux.send(0xFFFFFFFF, b"junk")
        side.mux._writer.write(MUX_HEADER.pack(0, 3) + b"abc")  # ConnID 0 cannot be opened on our side
        await side.client.call(RUNTIME, "RegisterPlugin", register_request(), timeout=5)
        assert (await peer.event("RegisterPlugin"))["payload"] == register_request()
    assert peer.pending_events("mux_error") == []


async def test_runtime_restart_ends_the_mux_and_a_new_session_works(gopeer_bin: Path, tmp_path: Path) -> None:
    sock = tmp_path / "nri.sock"
    sock.write_bytes(b"stale")  # a leftover file: the runtime removes it before listening
    async with runtime(gopeer_bin, sock) as peer:
        async with plugin_side(sock) as side:
            await peer.event("connected")
            await side.client.call(RUNTIME, "RegisterPlugin", register_request(), timeout=5)
            await peer.command(op="drop")
            await asyncio.wait_for(side.tasks[0], 5)  # mux.run returns at trunk EOF ...
            await asyncio.wait_for(asyncio.gather(side.tasks[1], side.tasks[2]), 5)  # ... and so do server, client
            with pytest.raises(TtrpcClosedError):
                await side.client.call(RUNTIME, "RegisterPlugin", register_request(), timeout=5)
            await peer.event("disconnected")

        await peer.command(op="stop")
        assert not sock.exists()
        with pytest.raises((FileNotFoundError, ConnectionRefusedError)):
            await asyncio.open_unix_connection(str(sock))
        assert (await peer.command(op="listen"))["ok"]

        async with plugin_side(sock) as side:
            await peer.event("connected")
            await side.client.call(RUNTIME, "RegisterPlugin", register_request(), timeout=5)
            await peer.event("RegisterPlugin")
            await peer.event("RegisterPlugin")
            reply = await peer.command(call="Configure", payload=b"", timeout_ms=2000)
            assert reply["payload"] == b"\x10\x8d\x01"


async def test_pending_call_fails_when_the_runtime_goes(gopeer_bin: Path, tmp_path: Path) -> None:
    """A call nobody answers (Go drops frames for ConnID 5) fails with TtrpcClosedError when the runtime closes."""
    sock = tmp_path / "nri.sock"
    async with runtime(gopeer_bin, sock) as peer:
        reader, writer = await asyncio.open_unix_connection(str(sock))
        mux = Mux(reader, writer)
        client = TtrpcClient(*mux.channel(5))
        tasks = [asyncio.create_task(mux.run()), asyncio.create_task(client.run())]
        await peer.event("connected")
        pending = asyncio.ensure_future(client.call(RUNTIME, "RegisterPlugin", register_request(), timeout=30))
        await asyncio.sleep(0.1)
        assert not pending.done()
        await peer.command(op="drop")
        with pytest.raises(TtrpcClosedError, match="closed the connection"):
            await asyncio.wait_for(pending, 5)
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
        mux.close()
