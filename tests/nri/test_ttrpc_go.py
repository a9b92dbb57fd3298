"""ttrpc conformance against Go's ttrpc (Debian 1.1.1) on a plain Unix socket: our client → Go server, Go client →
our server."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from koordlet.nri.ttrpc import (
    DEADLINE_EXCEEDED,
    HEADER,
    MAX_DATA,
    REQUEST,
    RESOURCE_EXHAUSTED,
    UNIMPLEMENTED,
    UNKNOWN,
    TtrpcClient,
    TtrpcClosedError,
    TtrpcError,
    TtrpcServer,
    frame,
    stream_send,
)
from koordlet.pb import ttrpc_pb2

from gopeer import GoPeer, gopeer_bin  # noqa: F401

ECHO = "koordlet.test.Echo"


# ---- our client → Go server ----

@asynccontextmanager
async def go_server(binary: Path, path: Path) -> AsyncIterator[GoPeer]:
    async with GoPeer.start(binary, "ttrpc", "-listen", str(path)) as peer:
        await peer.event("listening")
        yield peer


@asynccontextmanager
async def our_client(path: Path) -> AsyncIterator[TtrpcClient]:
    reader, writer = await asyncio.open_unix_connection(str(path))
    client = TtrpcClient(reader, stream_send(writer))
    reading = asyncio.create_task(client.run())
    try:
        yield client
    finally:
        writer.close()
        await asyncio.gather(reading, return_exceptions=True)


async def raw_exchange(path: Path, data: bytes) -> tuple[int, int, int, int, bytes]:
    """Send raw bytes on a fresh connection, read back one ttrpc message: (length, stream, type, flags, body)."""
    reader, writer = await asyncio.open_unix_connection(str(path))
    try:
        writer.write(data)
        await writer.drain()
        header = await asyncio.wait_for(reader.readexactly(10), 10)
        length, stream, msg_type, flags = HEADER.unpack(header)
        return length, stream, msg_type, flags, await reader.readexactly(length)
    finally:
        writer.close()


def request_of_size(size: int, service: str = ECHO, method: str = "Echo") -> bytes:
    """A serialized Request of exactly `size` bytes (the payload is padded to fit)."""
    payload_len = size - len(ttrpc_pb2.Request(service=service, method=method).SerializeToString()) - 1
    while True:
        data = ttrpc_pb2.Request(service=service, method=method, payload=b"x" * payload_len).SerializeToString()
        if len(data) == size:
            return data
        payload_len -= len(data) - size


@pytest.mark.parametrize("size", [0, 1, 10 << 10, 3 << 20])
async def test_our_client_echo(gopeer_bin: Path, tmp_path: Path, size: int) -> None:
    payload = os.urandom(size)
    async with go_server(gopeer_bin, tmp_path / "s"), our_client(tmp_path / "s") as client:
        assert await client.call(ECHO, "Echo", payload, timeout=10) == payload


@pytest.mark.parametrize("code", [1, 3, 5, 8, 9, 12, 13, 14])
async def test_our_client_gets_go_status(gopeer_bin: Path, tmp_path: Path, code: int) -> None:
    async with go_server(gopeer_bin, tmp_path / "s"), our_client(tmp_path / "s") as client:
        with pytest.raises(TtrpcError) as err:
            await client.call(ECHO, "Fail", bytes([code]))
        assert (err.value.code, err.value.message) == (code, "failed")
        assert await client.call(ECHO, "Echo", b"still fine") == b"still fine"


async def test_our_client_unknown_service_and_method(gopeer_bin: Path, tmp_path: Path) -> None:
    async with go_server(gopeer_bin, tmp_path / "s"), our_client(tmp_path / "s") as client:
        with pytest.raises(TtrpcError) as err:
            await client.call("koordlet.test.Nope", "Echo", b"")
        assert (err.value.code, err.value.message) == (UNIMPLEMENTED, "service koordlet.test.Nope")
        with pytest.raises(TtrpcError) as err:
            await client.call(ECHO, "RunPodSandbox", b"")
        assert (err.value.code, err.value.message) == (UNIMPLEMENTED, "method RunPodSandbox")


async def test_our_client_timeout_then_more_calls(gopeer_bin: Path, tmp_path: Path) -> None:
    async with go_server(gopeer_bin, tmp_path / "s"), our_client(tmp_path / "s") as client:
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await client.call(ECHO, "Sleep", b"2000", timeout=0.2)
        assert time.monotonic() - started < 1.5
        # the Go server's late DEADLINE_EXCEEDED reply for that stream is dropped, later calls match their replies
        await asyncio.sleep(0.1)
        assert await client.call(ECHO, "Echo", b"after", timeout=5) == b"after"


async def test_go_server_honours_our_timeout_nano(gopeer_bin: Path, tmp_path: Path) -> None:
    """timeout_nano reaches the Go handler's context: a 200 ms budget for a 2 s sleep answers DEADLINE_EXCEEDED."""
    request = ttrpc_pb2.Request(service=ECHO, method="Sleep", payload=b"2000", timeout_nano=200_000_000)
    async with go_server(gopeer_bin, tmp_path / "s"):
        started = time.monotonic()
        reply = await raw_exchange(tmp_path / "s", frame(1, REQUEST, request.SerializeToString()))
        _, stream, msg_type, _, body = reply
        assert time.monotonic() - started < 1.5
    response = ttrpc_pb2.Response.FromString(body)
    assert (stream, msg_type, response.status.code) == (1, 2, DEADLINE_EXCEEDED)


async def test_our_client_many_concurrent_calls(gopeer_bin: Path, tmp_path: Path) -> None:
    async with go_server(gopeer_bin, tmp_path / "s"), our_client(tmp_path / "s") as client:
        payloads = [os.urandom(i * 37 % 5000) + i.to_bytes(4, "big") for i in range(500)]
        replies = await asyncio.gather(*(client.call(ECHO, "Echo", p, timeout=20) for p in payloads))
        assert replies == payloads
        # concurrent slow calls overlap on the Go side: 10 × 300 ms well under 3 s
        started = time.monotonic()
        await asyncio.gather(*(client.call(ECHO, "Sleep", b"300", timeout=5) for _ in range(10)))
        assert time.monotonic() - started < 2.0


async def test_our_client_fails_pending_calls_at_eof(gopeer_bin: Path, tmp_path: Path) -> None:
    async with go_server(gopeer_bin, tmp_path / "s") as peer, our_client(tmp_path / "s") as client:
        pending = asyncio.ensure_future(client.call(ECHO, "Sleep", b"5000", timeout=10))
        await asyncio.sleep(0.2)
        await peer.close()  # the Go server closes its connections
        with pytest.raises(TtrpcClosedError, match="closed the connection"):
            await pending
        with pytest.raises(TtrpcClosedError):
            await client.call(ECHO, "Echo", b"")


async def test_our_client_refuses_oversized_locally(gopeer_bin: Path, tmp_path: Path) -> None:
    async with go_server(gopeer_bin, tmp_path / "s"), our_client(tmp_path / "s") as client:
        with pytest.raises(TtrpcError) as err:
            await client.call(ECHO, "Echo", b"x" * MAX_DATA)
        assert err.value.code == RESOURCE_EXHAUSTED
        assert await client.call(ECHO, "Echo", b"ok") == b"ok"


async def test_go_server_data_limit(gopeer_bin: Path, tmp_path: Path) -> None:
    """Spec §7.19 against Go: 4 194 304 bytes of data pass, 4 194 305 are discarded and answered
    RESOURCE_EXHAUSTED on their stream, and the connection goes on."""
    async with go_server(gopeer_bin, tmp_path / "s"):
        reader, writer = await asyncio.open_unix_connection(str(tmp_path / "s"))
        try:
            at_limit, over = request_of_size(MAX_DATA), request_of_size(MAX_DATA + 1)
            writer.write(frame(1, REQUEST, at_limit) + frame(3, REQUEST, over)
                         + frame(5, REQUEST, ttrpc_pb2.Request(service=ECHO, method="Echo", payload=b"next")
                                 .SerializeToString()))
            await writer.drain()
            replies = {}
            for _ in range(3):
                length, stream, _, _, = HEADER.unpack(await asyncio.wait_for(reader.readexactly(10), 20))
                replies[stream] = ttrpc_pb2.Response.FromString(await reader.readexactly(length))
        finally:
            writer.close()
    assert replies[1].payload == ttrpc_pb2.Request.FromString(at_limit).payload
    assert replies[3].status.code == RESOURCE_EXHAUSTED
    assert replies[5].payload == b"next"


# ---- Go client → our server ----

async def py_echo(payload: bytes, deadline: float | None) -> bytes:
    return payload


async def py_fail(payload: bytes, deadline: float | None) -> bytes:
    raise TtrpcError(payload[0], "failed")


async def py_sleep(payload: bytes, deadline: float | None) -> bytes:
    await asyncio.sleep(int(payload) / 1000)
    return b""


async def py_crash(payload: bytes, deadline: float | None) -> bytes:
    raise RuntimeError("handler bug")


SERVICES = {ECHO: {"Echo": py_echo, "Fail": py_fail, "Sleep": py_sleep, "Crash": py_crash}}


@asynccontextmanager
async def our_server(path: Path) -> AsyncIterator[TtrpcServer]:
    server = TtrpcServer(SERVICES)

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await server.serve(reader, stream_send(writer))
        finally:
            writer.close()

    unix = await asyncio.start_unix_server(on_connection, str(path))
    try:
        yield server
    finally:
        unix.close()


@asynccontextmanager
async def go_client(binary: Path, path: Path) -> AsyncIterator[GoPeer]:
    async with our_server(path), GoPeer.start(binary, "ttrpc", "-dial", str(path)) as peer:
        await peer.event("connected")
        yield peer


@pytest.mark.parametrize("size", [0, 1, 10 << 10, 3 << 20])
async def test_go_client_echo(gopeer_bin: Path, tmp_path: Path, size: int) -> None:
    payload = os.urandom(size)
    async with go_client(gopeer_bin, tmp_path / "s") as peer:
        reply = await peer.command(service=ECHO, method="Echo", payload=payload, timeout_ms=10000)
    assert (reply["code"], reply["message"], reply["payload"]) == (0, "", payload)


@pytest.mark.parametrize("code", [1, 3, 5, 8, 9, 12, 13, 14])
async def test_go_client_gets_our_status(gopeer_bin: Path, tmp_path: Path, code: int) -> None:
    async with go_client(gopeer_bin, tmp_path / "s") as peer:
        reply = await peer.command(service=ECHO, method="Fail", payload=bytes([code]))
    assert (reply["code"], reply["message"]) == (code, "failed")


async def test_go_client_handler_exception_is_unknown(gopeer_bin: Path, tmp_path: Path) -> None:
    async with go_client(gopeer_bin, tmp_path / "s") as peer:
        reply = await peer.command(service=ECHO, method="Crash", payload=b"")
    assert (reply["code"], reply["message"]) == (UNKNOWN, "handler bug")


async def test_go_client_unknown_service_and_method(gopeer_bin: Path, tmp_path: Path) -> None:
    async with go_client(gopeer_bin, tmp_path / "s") as peer:
        service = await peer.command(service="koordlet.test.Nope", method="Echo", payload=b"")
        method = await peer.command(service=ECHO, method="RunPodSandbox", payload=b"")
    assert (service["code"], service["message"]) == (UNIMPLEMENTED, "service koordlet.test.Nope")
    assert (method["code"], method["message"]) == (UNIMPLEMENTED, "method RunPodSandbox")


async def test_go_client_deadline(gopeer_bin: Path, tmp_path: Path) -> None:
    async with go_client(gopeer_bin, tmp_path / "s") as peer:
        started = time.monotonic()
        reply = await peer.command(service=ECHO, method="Sleep", payload=b"2000", timeout_ms=200)
        assert time.monotonic() - started < 1.5
        assert reply["code"] == DEADLINE_EXCEEDED
        after = await peer.command(service=ECHO, method="Echo", payload=b"after", timeout_ms=5000)
        assert after["payload"] == b"after"


async def test_go_client_many_concurrent_calls(gopeer_bin: Path, tmp_path: Path) -> None:
    async with go_client(gopeer_bin, tmp_path / "s") as peer:
        payloads = [os.urandom(i * 37 % 5000) + i.to_bytes(4, "big") for i in range(300)]
        replies = await asyncio.gather(*(peer.command(service=ECHO, method="Echo", payload=p, timeout_ms=20000)
                                         for p in payloads))
        assert [r["payload"] for r in replies] == payloads
        # our handlers run concurrently: 10 × 300 ms sleeps overlap
        started = time.monotonic()
        slow = await asyncio.gather(*(peer.command(service=ECHO, method="Sleep", payload=b"300", timeout_ms=5000)
                                      for _ in range(10)))
        assert time.monotonic() - started < 2.0
        assert {r["code"] for r in slow} == {0}


async def test_go_client_oversized_gets_resource_exhausted(gopeer_bin: Path, tmp_path: Path) -> None:
    """Go 1.1.1 sends an oversized request; we discard it, answer RESOURCE_EXHAUSTED and keep serving."""
    async with go_client(gopeer_bin, tmp_path / "s") as peer:
        reply = await peer.command(service=ECHO, method="Echo", payload=b"x" * MAX_DATA, timeout_ms=20000)
        assert reply["code"] == RESOURCE_EXHAUSTED
        after = await peer.command(service=ECHO, method="Echo", payload=b"after", timeout_ms=5000)
        assert after["payload"] == b"after"
