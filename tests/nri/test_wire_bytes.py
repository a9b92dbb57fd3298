"""Spec §7 (items 1–15 and 19), byte for byte: messages from the generated classes, frames from our ttrpc and mux
code over real socket pairs, read back raw on the other end."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from apis.core.errors import InvalidInput
from koordlet.config import check_nri_identity
from koordlet.nri.mux import PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN, Mux
from koordlet.nri.ttrpc import (
    HEADER,
    INVALID_ARGUMENT,
    MAX_DATA,
    REQUEST,
    RESOURCE_EXHAUSTED,
    RESPONSE,
    Handler,
    TtrpcClient,
    TtrpcError,
    TtrpcServer,
    frame,
    stream_send,
)
from koordlet.pb import nri_pb2 as api
from koordlet.pb import ttrpc_pb2

PLUGIN = "nri.pkg.api.v1alpha1.Plugin"
RUNTIME = "nri.pkg.api.v1alpha1.Runtime"
MUX_HEADER = struct.Struct(">II")
Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]

REGISTER = bytes.fromhex("0a0c") + b"koordlet_nri" + bytes.fromhex("1202") + b"00"
REGISTER_REQUEST = (bytes.fromhex("0a1c") + b"nri.pkg.api.v1alpha1.Runtime" + bytes.fromhex("120e") + b"RegisterPlugin"
                    + bytes.fromhex("1a12") + REGISTER)


@asynccontextmanager
async def socket_pair() -> AsyncIterator[tuple[Stream, Stream]]:
    a, b = socket.socketpair()
    ours, theirs = await asyncio.open_unix_connection(sock=a), await asyncio.open_unix_connection(sock=b)
    try:
        yield ours, theirs
    finally:
        ours[1].close()
        theirs[1].close()


@asynccontextmanager
async def running(*coros: object) -> AsyncIterator[None]:
    tasks = [asyncio.ensure_future(c) for c in coros]  # type: ignore[call-overload]
    try:
        yield
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    """One raw ttrpc message (header included) from a plain stream."""
    header = await asyncio.wait_for(reader.readexactly(10), 5)
    return header + await reader.readexactly(HEADER.unpack(header)[0])


async def read_mux_frame(reader: asyncio.StreamReader) -> bytes:
    header = await asyncio.wait_for(reader.readexactly(8), 5)
    return header + await reader.readexactly(MUX_HEADER.unpack(header)[1])


async def serve_raw(services: dict[str, dict[str, Handler]], request: bytes) -> bytes:
    """Our server on one end of a socket pair; `request` (raw bytes) in, the first raw reply out."""
    async with socket_pair() as ((r, w), (their_r, their_w)), running(TtrpcServer(services).serve(r, stream_send(w))):
        their_w.write(request)
        await their_w.drain()
        return await read_frame(their_r)


async def empty(payload: bytes, deadline: float | None) -> bytes:
    return b""


async def configure(payload: bytes, deadline: float | None) -> bytes:
    return api.ConfigureResponse(events=0x8D).SerializeToString()


async def echo(payload: bytes, deadline: float | None) -> bytes:
    return payload


def test_01_register_plugin_request() -> None:
    data = api.RegisterPluginRequest(plugin_name="koordlet_nri", plugin_idx="00").SerializeToString()
    assert data == bytes.fromhex("0a 0c 6b 6f 6f 72 64 6c 65 74 5f 6e 72 69 12 02 30 30") == REGISTER
    assert len(data) == 18


async def test_02_ttrpc_request_frame() -> None:
    async with socket_pair() as ((r, w), (their_r, their_w)):
        client = TtrpcClient(r, stream_send(w))
        async with running(client.run()):
            call = asyncio.ensure_future(client.call(RUNTIME, "RegisterPlugin", REGISTER))
            sent = await read_frame(their_r)
            assert sent[:10] == bytes.fromhex("00 00 00 42 00 00 00 01 01 00")
            assert sent[10:] == REGISTER_REQUEST and len(sent[10:]) == 66
            their_w.write(frame(1, RESPONSE, b""))
            assert await call == b""

            # with a 5 s deadline: field 4 (timeout_nano) is appended, length 0x48
            call = asyncio.ensure_future(client.call(RUNTIME, "RegisterPlugin", REGISTER, timeout=5.0))
            sent = await read_frame(their_r)
            assert sent[:10] == bytes.fromhex("00 00 00 48 00 00 00 03 01 00")
            assert sent[10:76] == REGISTER_REQUEST and sent[76] == 0x20
            assert 4.9e9 < ttrpc_pb2.Request.FromString(sent[10:]).timeout_nano <= 5e9
            their_w.write(frame(3, RESPONSE, b""))
            await call
    # Go's bytes for its ≈4.99999 s remainder decode to the same field
    go = REGISTER_REQUEST + bytes.fromhex("20 e6 86 97 d0 12")
    request = ttrpc_pb2.Request.FromString(go)
    assert 4.9999e9 < request.timeout_nano < 5e9
    assert request.SerializeToString() == go


async def test_03_request_on_the_mux() -> None:
    async with socket_pair() as ((r, w), (their_r, their_w)):
        mux = Mux(r, w)
        client = TtrpcClient(*mux.channel(RUNTIME_SERVICE_CONN))
        async with running(mux.run(), client.run()):
            call = asyncio.ensure_future(client.call(RUNTIME, "RegisterPlugin", REGISTER))
            sent = await read_mux_frame(their_r)
            assert sent[:8] == bytes.fromhex("00 00 00 02 00 00 00 4c")
            assert sent[8:] == bytes.fromhex("00 00 00 42 00 00 00 01 01 00") + REGISTER_REQUEST
            assert len(sent) == 84
            their_w.write(MUX_HEADER.pack(2, 10) + frame(1, RESPONSE, b""))
            assert await call == b""


async def test_04_empty_reply() -> None:
    request = frame(1, REQUEST, REGISTER_REQUEST)
    assert await serve_raw({RUNTIME: {"RegisterPlugin": empty}}, request) == bytes.fromhex(
        "00 00 00 00 00 00 00 01 02 00")
    async with socket_pair() as ((r, w), (their_r, their_w)):
        mux = Mux(r, w)
        async with running(mux.run(), TtrpcServer({RUNTIME: {"RegisterPlugin": empty}}).serve(
                *mux.channel(RUNTIME_SERVICE_CONN))):
            their_w.write(MUX_HEADER.pack(2, len(request)) + request)
            assert await read_mux_frame(their_r) == bytes.fromhex(
                "00 00 00 02 00 00 00 0a  00 00 00 00 00 00 00 01 02 00")
    # a body holding an empty status (0a 00) is success too
    async with socket_pair() as ((r, w), (their_r, their_w)):
        client = TtrpcClient(r, stream_send(w))
        async with running(client.run()):
            call = asyncio.ensure_future(client.call(RUNTIME, "RegisterPlugin", REGISTER))
            await read_frame(their_r)
            their_w.write(frame(1, RESPONSE, bytes.fromhex("0a 00")))
            assert await call == b""


async def test_05_configure_response() -> None:
    assert api.ConfigureResponse(events=0x8D).SerializeToString() == bytes.fromhex("10 8d 01")
    request = frame(1, REQUEST, ttrpc_pb2.Request(service=PLUGIN, method="Configure").SerializeToString())
    expected = bytes.fromhex("00 00 00 05 00 00 00 01 02 00 12 03 10 8d 01")
    assert await serve_raw({PLUGIN: {"Configure": configure}}, request) == expected
    async with socket_pair() as ((r, w), (their_r, their_w)):
        mux = Mux(r, w)
        async with running(mux.run(), TtrpcServer({PLUGIN: {"Configure": configure}}).serve(
                *mux.channel(PLUGIN_SERVICE_CONN))):
            their_w.write(MUX_HEADER.pack(1, len(request)) + request)
            assert await read_mux_frame(their_r) == bytes.fromhex("00 00 00 01 00 00 00 0f") + expected


def test_06_configure_request() -> None:
    data = api.ConfigureRequest(runtime_name="containerd", runtime_version="2.1.0", registration_timeout=5000,
                                request_timeout=2000).SerializeToString()
    assert data == (bytes.fromhex("12 0a") + b"containerd" + bytes.fromhex("1a 05") + b"2.1.0"
                    + bytes.fromhex("20 88 27 28 d0 0f"))
    assert len(data) == 25


async def test_07_unknown_method_and_service() -> None:
    request = ttrpc_pb2.Request(service=PLUGIN, method="RunPodSandbox").SerializeToString()
    reply = await serve_raw({PLUGIN: {"Configure": configure}}, frame(1, REQUEST, request))
    assert reply[10:] == bytes.fromhex("0a 18 08 0c 12 14") + b"method RunPodSandbox"
    request = ttrpc_pb2.Request(service="nri.pkg.api.v1alpha1.Nope", method="X").SerializeToString()
    reply = await serve_raw({PLUGIN: {"Configure": configure}}, frame(1, REQUEST, request))
    status = ttrpc_pb2.Response.FromString(reply[10:]).status
    assert (status.code, status.message) == (12, "service nri.pkg.api.v1alpha1.Nope")


async def test_08_even_stream_id() -> None:
    request = ttrpc_pb2.Request(service=PLUGIN, method="Configure").SerializeToString()
    reply = await serve_raw({PLUGIN: {"Configure": configure}}, frame(8, REQUEST, request))
    message = b"StreamID must be odd for client initiated streams"
    assert reply[4:10] == bytes.fromhex("00 00 00 08 02 00")
    assert reply[10:] == bytes([0x0a, len(message) + 4, 0x08, INVALID_ARGUMENT, 0x12, len(message)]) + message


def test_09_event_masks() -> None:
    def mask(*events: int) -> int:
        return sum(1 << (e - 1) for e in events)

    assert mask(api.RUN_POD_SANDBOX, api.REMOVE_POD_SANDBOX, api.CREATE_CONTAINER, api.UPDATE_CONTAINER) == 0x8D
    assert (1 << (api.LAST - 1)) - 1 == 0x3FFF  # NRI >= 0.10
    assert (1 << (api.UPDATE_POD_SANDBOX - 1)) - 1 == 0x07FF  # LAST was 12 up to 0.9
    assert api.ConfigureResponse(events=0).SerializeToString() == b""  # "all events" travels as nothing


def test_10_create_container_response() -> None:
    response = api.CreateContainerResponse(adjust=api.ContainerAdjustment(
        env=[api.KeyValue(key="NVIDIA_VISIBLE_DEVICES", value="0,1")],
        linux=api.LinuxContainerAdjustment(devices=[api.LinuxDevice(
            path="/dev/infiniband/uverbs0", type="c", major=231, minor=192,
            file_mode=api.OptionalFileMode(value=0o666))])))
    expected = (bytes.fromhex("0a 4a 22 1d 0a 16") + b"NVIDIA_VISIBLE_DEVICES" + bytes.fromhex("12 03") + b"0,1"
                + bytes.fromhex("32 29 0a 27 0a 17") + b"/dev/infiniband/uverbs0" + bytes.fromhex("12 01") + b"c"
                + bytes.fromhex("18 e7 01 20 c0 01 2a 03 08 b6 03"))
    assert response.SerializeToString() == expected
    assert len(expected) == 76


def test_11_removal_markers_travel_as_plain_keys() -> None:
    adjust = api.ContainerAdjustment(annotations={"-foo": ""}, env=[api.KeyValue(key="-FOO")],
                                     linux=api.LinuxContainerAdjustment(devices=[api.LinuxDevice(path="-/dev/foo")]))
    data = adjust.SerializeToString()
    assert data.startswith(bytes.fromhex("12")) and bytes.fromhex("0a 04") + b"-foo" in data  # annotations entry
    assert bytes.fromhex("22 06 0a 04") + b"-FOO" in data  # env: KeyValue key
    assert bytes.fromhex("0a 0b 0a 09") + b"-/dev/foo" in data  # linux.devices[0].path
    assert api.ContainerAdjustment.FromString(data) == adjust


async def test_12_mux_frames_we_send_and_reassembly() -> None:
    """(a)/(b): our frames carry at most 4096 bytes; (c): [4096, rest] from a Go sender reassembles; (d): frames for
    ConnIDs nobody opened (7, 0) are dropped."""
    async with socket_pair() as ((r, w), (their_r, their_w)):
        mux = Mux(r, w)
        _, send = mux.channel(RUNTIME_SERVICE_CONN)
        for size, cuts in [(1, [1]), (4096, [4096]), (4097, [4096, 1]), (6066, [4096, 1970]),
                           (10_000, [4096, 4096, 1808]), (3 * 4096, [4096] * 3)]:
            data = bytes(range(256)) * (size // 256) + bytes(size % 256)
            await send(data)
            frames = [await read_mux_frame(their_r) for _ in cuts]
            assert [MUX_HEADER.unpack(f[:8]) for f in frames] == [(2, n) for n in cuts]
            assert b"".join(f[8:] for f in frames) == data

    big = b"q" * 10_000
    request = frame(1, REQUEST, ttrpc_pb2.Request(service=PLUGIN, method="Echo", payload=big).SerializeToString())
    async with socket_pair() as ((r, w), (their_r, their_w)):
        mux = Mux(r, w)
        async with running(mux.run(), TtrpcServer({PLUGIN: {"Echo": echo}}).serve(*mux.channel(PLUGIN_SERVICE_CONN))):
            their_w.write(MUX_HEADER.pack(7, 5) + b"junk!" + MUX_HEADER.pack(0, 3) + b"abc"
                          + MUX_HEADER.pack(1, 4096) + request[:4096]
                          + MUX_HEADER.pack(7, 0)
                          + MUX_HEADER.pack(1, len(request) - 4096) + request[4096:])
            reply = b""
            while len(reply) < 10 or len(reply) < 10 + HEADER.unpack(reply[:10])[0]:
                reply += (await read_mux_frame(their_r))[8:]
            assert ttrpc_pb2.Response.FromString(reply[10:]).payload == big


@pytest.mark.parametrize(("index", "ok"), [("00", True), ("99", True), ("0", False), ("100", False), ("a1", False)])
def test_13_plugin_index(index: str, ok: bool) -> None:
    if ok:
        check_nri_identity("koordlet_nri", index)
    else:
        with pytest.raises(InvalidInput):
            check_nri_identity("koordlet_nri", index)


@pytest.mark.parametrize(("name", "ok"), [("koordlet_nri", True), ("a.b+c-d", True), ("koordlet nri", False),
                                          ("", False)])
def test_13_plugin_name(name: str, ok: bool) -> None:
    if ok:
        check_nri_identity(name, "00")
    else:
        with pytest.raises(InvalidInput):
            check_nri_identity(name, "00")


def test_14_split_sync_reply() -> None:
    assert api.SynchronizeResponse(more=True).SerializeToString() == bytes.fromhex("10 01")
    assert api.SynchronizeRequest(more=True).SerializeToString() == bytes.fromhex("18 01")


def test_15_configure_timeouts_are_milliseconds() -> None:
    assert api.ConfigureRequest(registration_timeout=5000).SerializeToString() == bytes.fromhex("20 88 27")
    assert api.ConfigureRequest(request_timeout=2000).SerializeToString() == bytes.fromhex("28 d0 0f")


def request_of_size(size: int) -> bytes:
    """A serialized Request of exactly `size` bytes."""
    payload_len = size - 32
    while True:
        data = ttrpc_pb2.Request(service=PLUGIN, method="Echo", payload=b"x" * payload_len).SerializeToString()
        if len(data) == size:
            return data
        payload_len -= len(data) - size


async def test_19_data_limit() -> None:
    """4 194 304 bytes of data pass; 4 194 305 are discarded and answered RESOURCE_EXHAUSTED on their stream; the
    connection goes on; every header we send starts with 00."""
    at_limit, over = request_of_size(MAX_DATA), request_of_size(MAX_DATA + 1)
    async with socket_pair() as ((r, w), (their_r, their_w)), running(
            TtrpcServer({PLUGIN: {"Echo": echo}}).serve(r, stream_send(w))):
        their_w.write(frame(1, REQUEST, at_limit) + frame(3, REQUEST, over)
                      + frame(5, REQUEST, ttrpc_pb2.Request(service=PLUGIN, method="Echo", payload=b"next")
                              .SerializeToString()))
        replies = {}
        for _ in range(3):
            raw = await read_frame(their_r)
            assert raw[0] == 0
            replies[HEADER.unpack(raw[:10])[1]] = ttrpc_pb2.Response.FromString(raw[10:])
    assert replies[1].payload == ttrpc_pb2.Request.FromString(at_limit).payload
    assert replies[3].status.code == RESOURCE_EXHAUSTED
    assert replies[5].payload == b"next"


async def test_19_oversized_reply_from_a_handler_or_the_peer() -> None:
    async def huge(payload: bytes, deadline: float | None) -> bytes:
        return b"h" * (MAX_DATA + 1)

    request = frame(1, REQUEST, ttrpc_pb2.Request(service=PLUGIN, method="Huge").SerializeToString())
    reply = await serve_raw({PLUGIN: {"Huge": huge}}, request)
    assert ttrpc_pb2.Response.FromString(reply[10:]).status.code == RESOURCE_EXHAUSTED

    async with socket_pair() as ((r, w), (their_r, their_w)):
        client = TtrpcClient(r, stream_send(w))
        async with running(client.run()):
            call = asyncio.ensure_future(client.call(PLUGIN, "X", b""))
            await read_frame(their_r)
            their_w.write(HEADER.pack(MAX_DATA + 1, 1, RESPONSE, 0) + bytes(MAX_DATA + 1))
            with pytest.raises(TtrpcError) as err:
                await call
            assert err.value.code == RESOURCE_EXHAUSTED
            call = asyncio.ensure_future(client.call(PLUGIN, "X", b""))
            await read_frame(their_r)
            their_w.write(frame(3, RESPONSE, ttrpc_pb2.Response(payload=b"fine").SerializeToString()))
            assert await call == b"fine"
