"""ttrpc unary calls over any byte stream: framing, a concurrent server and a client (containerd/ttrpc wire format)."""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Awaitable, Callable, Mapping

from google.protobuf.message import DecodeError

from koordlet.pb import ttrpc_pb2

log = logging.getLogger(__name__)

# Frame header (channel.go): data length, stream ID (both uint32 big-endian), message type, flags.
HEADER = struct.Struct(">IIBB")
HEADER_LEN = HEADER.size
MAX_DATA = 4 << 20  # larger data is discarded by the receiver and answered with RESOURCE_EXHAUSTED
REQUEST, RESPONSE, DATA = 1, 2, 3

# Status codes, gRPC numbering (spec §2.4).
OK = 0
CANCELLED = 1
UNKNOWN = 2
INVALID_ARGUMENT = 3
DEADLINE_EXCEEDED = 4
NOT_FOUND = 5
ALREADY_EXISTS = 6
PERMISSION_DENIED = 7
RESOURCE_EXHAUSTED = 8
FAILED_PRECONDITION = 9
OUT_OF_RANGE = 11
UNIMPLEMENTED = 12
INTERNAL = 13
UNAVAILABLE = 14

Send = Callable[[bytes], Awaitable[None]]
# A unary handler: the request payload and the absolute deadline in event-loop time (loop.time()), or None when
# the caller set none; returns the reply payload or raises TtrpcError for a status.
Handler = Callable[[bytes, float | None], Awaitable[bytes]]


class TtrpcError(Exception):
    """A non-OK ttrpc status: raised by handlers to answer with it, raised by `TtrpcClient.call` on receiving one."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"ttrpc status {code}: {message}")
        self.code = code
        self.message = message


class TtrpcClosedError(ConnectionError):
    """The byte stream ended (EOF or a read error) while calls were pending, or a call came after that."""


def frame(stream_id: int, msg_type: int, data: bytes) -> bytes:
    """One ttrpc message: the 10-byte header and the data."""
    return HEADER.pack(len(data), stream_id, msg_type, 0) + data


def stream_send(writer: asyncio.StreamWriter) -> Send:
    """The `send` of a plain stream (a Unix socket without the NRI mux): write, then wait for the buffer to drain."""

    async def send(data: bytes) -> None:
        if writer.is_closing():
            raise ConnectionResetError("ttrpc: the connection is closed")
        writer.write(data)
        await writer.drain()

    return send


async def _read_message(reader: asyncio.StreamReader) -> tuple[int, int, bytes | None, int]:
    """(stream ID, type, data, length) of the next message; data is None for an oversized one, whose bytes were
    skipped. Raises asyncio.IncompleteReadError at EOF."""
    length, stream_id, msg_type, _flags = HEADER.unpack(await reader.readexactly(HEADER_LEN))
    if length <= MAX_DATA:
        return stream_id, msg_type, await reader.readexactly(length), length
    left = length
    while left:
        chunk = await reader.read(min(left, 1 << 16))
        if not chunk:
            raise asyncio.IncompleteReadError(b"", left)
        left -= len(chunk)
    return stream_id, msg_type, None, length


def _oversized(length: int) -> str:
    return f"message length {length} exceeds the maximum message size of {MAX_DATA}"


def _status_response(code: int, message: str) -> bytes:
    return ttrpc_pb2.Response(status=ttrpc_pb2.Status(code=code, message=message)).SerializeToString()


class TtrpcServer:
    """Serves unary ttrpc calls on one byte stream; each request runs in its own task, replies share one writer.

        async def echo(payload: bytes, deadline: float | None) -> bytes:
            return payload
        server = TtrpcServer({"pkg.Service": {"Echo": echo}})
        await server.serve(reader, send)  # returns at EOF; cancels the handlers still running

    A handler raises TtrpcError(code, message) to answer with that status; any other exception answers UNKNOWN
    with its text. A request's `timeout_nano` bounds its handler: past it the handler is cancelled and the reply is
    DEADLINE_EXCEEDED. The same server object may serve several streams, one `serve` each.
    """

    def __init__(self, services: Mapping[str, Mapping[str, Handler]]) -> None:
        self.services = services

    async def serve(self, reader: asyncio.StreamReader, send: Send) -> None:
        lock = asyncio.Lock()
        tasks: set[asyncio.Task[None]] = set()

        async def reply(stream_id: int, body: bytes) -> None:
            try:
                async with lock:
                    await send(frame(stream_id, RESPONSE, body))
            except (ConnectionError, OSError) as e:  # the peer went away; the read loop sees EOF next
                log.debug("ttrpc: cannot send the reply on stream %d: %s", stream_id, e)

        try:
            while True:
                try:
                    stream_id, msg_type, data, length = await _read_message(reader)
                except asyncio.IncompleteReadError:
                    return
                except (ConnectionError, OSError) as e:
                    log.debug("ttrpc server: read failed: %s", e)
                    return
                # The order of checks is Go's (server.go): size, type, decoding, stream ID parity.
                if data is None:
                    await reply(stream_id, _status_response(RESOURCE_EXHAUSTED, _oversized(length)))
                    continue
                if msg_type != REQUEST:  # ignored for forward compatibility, as Go does
                    continue
                request = ttrpc_pb2.Request()
                try:
                    request.ParseFromString(data)
                except DecodeError as e:
                    await reply(stream_id, _status_response(INVALID_ARGUMENT, f"unmarshal request error: {e}"))
                    continue
                if stream_id % 2 != 1:
                    await reply(stream_id, _status_response(
                        INVALID_ARGUMENT, "StreamID must be odd for client initiated streams"))
                    continue
                task = asyncio.create_task(self._call(stream_id, request, reply))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        finally:
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)

    async def _call(self, stream_id: int, request: ttrpc_pb2.Request,
                    reply: Callable[[int, bytes], Awaitable[None]]) -> None:
        methods = self.services.get(request.service)
        handler = None if methods is None else methods.get(request.method)
        if methods is None:
            body = _status_response(UNIMPLEMENTED, f"service {request.service}")
        elif handler is None:
            body = _status_response(UNIMPLEMENTED, f"method {request.method}")
        else:
            body = await self._run(handler, request)
        await reply(stream_id, body)

    async def _run(self, handler: Handler, request: ttrpc_pb2.Request) -> bytes:
        deadline = None
        if request.timeout_nano > 0:
            deadline = asyncio.get_running_loop().time() + request.timeout_nano / 1e9
        try:
            async with asyncio.timeout_at(deadline) as scope:
                try:
                    payload = await handler(request.payload, deadline)
                except TimeoutError:
                    if scope.expired():
                        raise
                    return _status_response(UNKNOWN, "handler raised TimeoutError")
        except TimeoutError:
            return _status_response(DEADLINE_EXCEEDED, "context deadline exceeded")
        except TtrpcError as e:
            return _status_response(e.code, e.message)
        except Exception as e:
            log.warning("ttrpc: %s/%s failed: %r", request.service, request.method, e, exc_info=True)
            return _status_response(UNKNOWN, str(e) or type(e).__name__)
        if len(payload) > MAX_DATA:  # Go's client would discard it anyway; tell it why
            return _status_response(RESOURCE_EXHAUSTED, _oversized(len(payload)))
        # An OK reply carries no status, and an empty payload no field at all (what a Go server sends).
        return ttrpc_pb2.Response(payload=payload).SerializeToString()


class TtrpcClient:
    """Unary ttrpc calls on one byte stream; `run` reads the replies and must be running while calls are made.

        client = TtrpcClient(reader, send)
        reading = asyncio.create_task(client.run())  # returns at EOF, failing pending calls
        reply = await client.call("pkg.Service", "Echo", b"payload", timeout=2.0)

    `call` raises TtrpcError for a non-OK status, TimeoutError when `timeout` passes first (the late reply is
    dropped), and TtrpcClosedError (a ConnectionError) when the stream ends before the reply.
    """

    def __init__(self, reader: asyncio.StreamReader, send: Send) -> None:
        self._reader = reader
        self._send = send
        self._lock = asyncio.Lock()
        self._next_id = 1
        self._pending: dict[int, asyncio.Future[bytes]] = {}
        self._closed: str | None = None

    @property
    def closed(self) -> bool:
        return self._closed is not None

    async def call(self, service: str, method: str, payload: bytes, timeout: float | None = None) -> bytes:
        if self._closed is not None:
            raise TtrpcClosedError(f"ttrpc: {service}/{method} not sent: {self._closed}")
        stream_id = self._next_id
        self._next_id += 2
        request = ttrpc_pb2.Request(service=service, method=method, payload=payload)
        if timeout is not None:
            request.timeout_nano = max(1, int(timeout * 1e9))
        data = request.SerializeToString()
        if len(data) > MAX_DATA:  # a Go client refuses it locally too (OversizedMessageErr)
            raise TtrpcError(RESOURCE_EXHAUSTED, _oversized(len(data)))
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._pending[stream_id] = future
        try:
            async with asyncio.timeout(timeout):
                async with self._lock:
                    await self._send(frame(stream_id, REQUEST, data))
                return await future
        except (TimeoutError, TtrpcClosedError):  # TimeoutError is an OSError: let it through as it is
            raise
        except (ConnectionError, OSError) as e:
            raise TtrpcClosedError(f"ttrpc: {service}/{method}: cannot send: {e!r}") from e
        finally:
            self._pending.pop(stream_id, None)
            if future.done() and not future.cancelled():
                future.exception()  # the stream's end failed it while the send was failing: seen, not logged

    async def run(self) -> None:
        reason = "the peer closed the connection"
        try:
            while True:
                try:
                    stream_id, msg_type, data, length = await _read_message(self._reader)
                except asyncio.IncompleteReadError:
                    return
                except (ConnectionError, OSError) as e:
                    reason = f"read failed: {e}"
                    return
                if msg_type != RESPONSE:
                    continue
                future = self._pending.pop(stream_id, None)
                if future is None or future.done():  # a call that timed out already
                    continue
                if data is None:
                    future.set_exception(TtrpcError(RESOURCE_EXHAUSTED, _oversized(length)))
                    continue
                response = ttrpc_pb2.Response()
                try:
                    response.ParseFromString(data)
                except DecodeError as e:
                    future.set_exception(TtrpcError(INTERNAL, f"cannot decode the response: {e}"))
                    continue
                if response.HasField("status") and response.status.code != OK:
                    future.set_exception(TtrpcError(response.status.code, response.status.message))
                else:
                    future.set_result(response.payload)
        except asyncio.CancelledError:
            reason = "the client was stopped"
            raise
        finally:
            self._close(reason)

    def _close(self, reason: str) -> None:
        self._closed = reason
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(TtrpcClosedError(f"ttrpc: {reason} with the call pending"))
