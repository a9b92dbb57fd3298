"""TtrpcServer, TtrpcClient and Mux behaviour beyond the spec's byte facts, over real socket pairs."""

from __future__ import annotations

import asyncio
import os
import random

import pytest
from test_wire_bytes import MUX_HEADER, read_frame, read_mux_frame, running, serve_raw, socket_pair

from koordlet.nri.mux import MAX_RECV_PAYLOAD, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN, Mux
from koordlet.nri.ttrpc import (
    DATA,
    DEADLINE_EXCEEDED,
    HEADER,
    INVALID_ARGUMENT,
    OK,
    REQUEST,
    RESPONSE,
    UNKNOWN,
    TtrpcClient,
    TtrpcClosedError,
    TtrpcServer,
    frame,
    stream_send,
)
from koordlet.pb import ttrpc_pb2

SVC = "koordlet.test.Unit"


def request(method: str, payload: bytes = b"", timeout_nano: int = 0) -> bytes:
    return ttrpc_pb2.Request(service=SVC, method=method, payload=payload,
                             timeout_nano=timeout_nano).SerializeToString()


def status(raw: bytes) -> tuple[int, str]:
    response = ttrpc_pb2.Response.FromString(raw[10:])
    return response.status.code, response.status.message


async def test_handler_overrunning_its_deadline_is_cancelled() -> None:
    seen: dict[str, object] = {}

    async def slow(payload: bytes, deadline: float | None) -> bytes:
        seen["remaining"] = None if deadline is None else deadline - asyncio.get_running_loop().time()
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            seen["cancelled"] = True
            raise
        return b""

    started = asyncio.get_running_loop().time()
    reply = await serve_raw({SVC: {"Slow": slow}}, frame(1, REQUEST, request("Slow", timeout_nano=100_000_000)))
    assert asyncio.get_running_loop().time() - started < 1
    assert status(reply) == (DEADLINE_EXCEEDED, "context deadline exceeded")
    assert seen["cancelled"] is True
    assert isinstance(seen["remaining"], float) and 0.05 < seen["remaining"] <= 0.1


async def test_handler_errors() -> None:
    async def timeout_inside(payload: bytes, deadline: float | None) -> bytes:
        assert deadline is None
        raise TimeoutError

    async def crash(payload: bytes, deadline: float | None) -> bytes:
        raise KeyError("k")

    services = {SVC: {"TimeoutInside": timeout_inside, "Crash": crash}}
    assert status(await serve_raw(services, frame(1, REQUEST, request("TimeoutInside"))))[0] == UNKNOWN
    assert status(await serve_raw(services, frame(1, REQUEST, request("Crash")))) == (UNKNOWN, "'k'")
    code, message = status(await serve_raw(services, frame(1, REQUEST, b"\xff\xff\xff")))
    assert code == INVALID_ARGUMENT and message.startswith("unmarshal request error")


async def test_ok_reply_has_no_status_and_other_types_are_ignored() -> None:
    async def echo(payload: bytes, deadline: float | None) -> bytes:
        return payload

    # a Response and a Data message to a server are skipped; the request after them is answered
    raw = await serve_raw({SVC: {"Echo": echo}}, frame(1, RESPONSE, b"") + frame(3, DATA, b"zz")
                          + frame(5, REQUEST, request("Echo", b"abc")))
    assert raw == bytes.fromhex("00 00 00 05 00 00 00 05 02 00 12 03") + b"abc"


async def test_concurrent_handlers_replies_whole_on_the_mux() -> None:
    """Handlers finishing in random order with 20 KiB replies: every reply arrives whole on its stream."""
    async def jitter(payload: bytes, deadline: float | None) -> bytes:
        await asyncio.sleep(random.random() / 50)
        return payload * 5000

    async with socket_pair() as ((r, w), (their_r, their_w)):
        mux = Mux(r, w)
        async with running(mux.run(), TtrpcServer({SVC: {"J": jitter}}).serve(*mux.channel(PLUGIN_SERVICE_CONN))):
            n = 60
            data = b"".join(frame(2 * i + 1, REQUEST, request("J", i.to_bytes(4, "big"))) for i in range(n))
            their_w.write(MUX_HEADER.pack(1, len(data)) + data)  # one big frame: our reader takes any size
            stream, replies = b"", {}
            started = asyncio.get_running_loop().time()
            while len(replies) < n:
                got = await read_mux_frame(their_r)
                assert MUX_HEADER.unpack(got[:8])[0] == PLUGIN_SERVICE_CONN and len(got) <= 8 + 4096
                stream += got[8:]
                while len(stream) >= 10 and len(stream) >= 10 + HEADER.unpack(stream[:10])[0]:
                    length, sid, _, _ = HEADER.unpack(stream[:10])
                    replies[sid] = ttrpc_pb2.Response.FromString(stream[10:10 + length]).payload
                    stream = stream[10 + length:]
            assert asyncio.get_running_loop().time() - started < 1.0  # concurrent: not 60 × 10 ms in a row
    assert replies == {2 * i + 1: i.to_bytes(4, "big") * 5000 for i in range(n)}


async def test_serve_returns_at_eof_and_cancels_handlers() -> None:
    cancelled = asyncio.Event()

    async def hang(payload: bytes, deadline: float | None) -> bytes:
        try:
            await asyncio.sleep(60)
        finally:
            cancelled.set()
        return b""

    async with socket_pair() as ((r, w), (_, their_w)):
        serving = asyncio.ensure_future(TtrpcServer({SVC: {"Hang": hang}}).serve(r, stream_send(w)))
        their_w.write(frame(1, REQUEST, request("Hang")))
        await their_w.drain()
        await asyncio.sleep(0.05)
        their_w.close()
        await asyncio.wait_for(serving, 2)
        assert cancelled.is_set()


async def test_client_stream_ids_timeout_and_late_reply() -> None:
    async with socket_pair() as ((r, w), (their_r, their_w)):
        client = TtrpcClient(r, stream_send(w))
        async with running(client.run()):
            with pytest.raises(TimeoutError):
                await client.call(SVC, "A", b"", timeout=0.05)
            first = await read_frame(their_r)
            assert HEADER.unpack(first[:10])[1] == 1
            assert ttrpc_pb2.Request.FromString(first[10:]).timeout_nano == 50_000_000
            call = asyncio.ensure_future(client.call(SVC, "B", b""))
            second = await read_frame(their_r)
            assert HEADER.unpack(second[:10])[1] == 3
            assert ttrpc_pb2.Request.FromString(second[10:]).timeout_nano == 0  # no deadline: field absent
            assert b"\x20" not in second[10 + 2 + len(SVC) + 3:]
            # the late reply to stream 1 is dropped; stream 3's reply completes the call
            their_w.write(frame(1, RESPONSE, ttrpc_pb2.Response(payload=b"late").SerializeToString())
                          + frame(3, RESPONSE, ttrpc_pb2.Response(
                              status=ttrpc_pb2.Status(code=OK), payload=b"three").SerializeToString()))
            assert await call == b"three"


async def test_client_after_eof() -> None:
    async with socket_pair() as ((r, w), (their_r, their_w)):
        client = TtrpcClient(r, stream_send(w))
        reading = asyncio.ensure_future(client.run())
        call = asyncio.ensure_future(client.call(SVC, "A", b""))
        await read_frame(their_r)
        their_w.close()
        with pytest.raises(TtrpcClosedError, match="closed the connection with the call pending"):
            await call
        await reading
        assert client.closed
        with pytest.raises(TtrpcClosedError, match="not sent"):
            await client.call(SVC, "A", b"")


async def test_mux_eof_reaches_every_channel() -> None:
    async with socket_pair() as ((r, w), (_, their_w)):
        mux = Mux(r, w)
        one, _ = mux.channel(PLUGIN_SERVICE_CONN)
        two, _ = mux.channel(RUNTIME_SERVICE_CONN)
        running_mux = asyncio.ensure_future(mux.run())
        their_w.write(MUX_HEADER.pack(1, 3) + b"abc" + MUX_HEADER.pack(2, 2) + b"de" + MUX_HEADER.pack(1, 1))
        their_w.close()  # ends mid-frame: still a clean EOF for every channel
        await asyncio.wait_for(running_mux, 2)
        assert await asyncio.wait_for(one.read(), 2) == b"abc"
        assert await asyncio.wait_for(two.read(), 2) == b"de"
        late, send = mux.channel(9)
        assert late.at_eof()
        with pytest.raises(ConnectionResetError):
            await send(b"x")
    with pytest.raises(ValueError, match="reserved"):
        mux.channel(0)


async def test_mux_gives_up_on_an_impossible_frame() -> None:
    async with socket_pair() as ((r, w), (their_r, their_w)):
        mux = Mux(r, w)
        one, _ = mux.channel(PLUGIN_SERVICE_CONN)
        their_w.write(MUX_HEADER.pack(1, MAX_RECV_PAYLOAD + 1))
        await asyncio.wait_for(mux.run(), 2)
        assert await asyncio.wait_for(one.read(), 2) == b""
        assert await asyncio.wait_for(their_r.read(), 2) == b""  # we closed the trunk


async def test_mux_channels_are_independent_streams() -> None:
    """Two channels' large writes interleave on the trunk yet each reads back whole and in order."""
    async with socket_pair() as ((a_r, a_w), (b_r, b_w)):
        left, right = Mux(a_r, a_w), Mux(b_r, b_w)
        ins = [right.channel(c)[0] for c in (1, 2, 3)]
        sends = [left.channel(c)[1] for c in (1, 2, 3)]
        blobs = [[os.urandom(random.randrange(1, 30_000)) for _ in range(20)] for _ in sends]
        async with running(right.run()):
            await asyncio.gather(*(asyncio.gather(*(s(b) for b in bl)) for s, bl in zip(sends, blobs, strict=True)))
            for stream, bl in zip(ins, blobs, strict=True):
                assert await stream.readexactly(sum(map(len, bl))) == b"".join(bl)
