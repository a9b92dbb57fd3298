"""NRI's connection multiplexer: two byte streams over one Unix connection (containerd/nri:pkg/net/multiplex)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

# Frame header: ConnID, payload length, both uint32 big-endian; the payload follows.
HEADER = struct.Struct(">II")
HEADER_LEN = HEADER.size
PLUGIN_SERVICE_CONN = 1  # the plugin serves nri.pkg.api.v1alpha1.Plugin, the runtime calls
RUNTIME_SERVICE_CONN = 2  # the runtime serves nri.pkg.api.v1alpha1.Runtime, the plugin calls
RESERVED_CONN = 0
# Every frame we send carries at most this much: a Go reader asks for 4096 bytes (ttrpc's bufio.Reader) and fails a
# frame that does not fit its buffer with ENOMEM (spec §1.3 sender rule).
MAX_SEND_PAYLOAD = 4096
# NRI's Go reader queues at most 256 frames per ConnID and tears the whole connection down beyond that, so a write
# of more than 256 × 4096 bytes relies on the runtime's ttrpc reader keeping up (with our Go peer: always fine at
# 1.1 MB, 8 in 10 at 2 MB). NRI plugins' replies are far smaller; such a write is logged.
MAX_SAFE_SEND = 256 * MAX_SEND_PAYLOAD
# The largest frame a Go mux writes (one ttrpc header + 4 MiB of data); anything larger is a broken peer.
MAX_RECV_PAYLOAD = 10 + (4 << 20)

Send = Callable[[bytes], Awaitable[None]]


class Mux:
    """One trunk connection carrying logical byte streams, each named by a ConnID, with no control frames.

        reader, writer = await asyncio.open_unix_connection("/var/run/nri/nri.sock")
        mux = Mux(reader, writer)
        plugin_in, plugin_out = mux.channel(PLUGIN_SERVICE_CONN)    # StreamReader, async send(bytes)
        runtime_in, runtime_out = mux.channel(RUNTIME_SERVICE_CONN)
        reading = asyncio.create_task(mux.run())  # returns when the trunk ends; every channel then reads EOF
        ...
        mux.close()

    Frames for a ConnID nobody opened (0 included: it is reserved) are dropped silently. A channel's bytes arrive
    as a plain stream, so a message cut over several frames reads back whole. Open channels before `run`, or
    frames for them that arrive earlier are dropped, as in Go.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._channels: dict[int, asyncio.StreamReader] = {}
        self._ended = False

    def channel(self, conn_id: int) -> tuple[asyncio.StreamReader, Send]:
        """The reading end and the `send` of a ConnID; opening one twice gives the same reader."""
        if conn_id == RESERVED_CONN:
            raise ValueError("ConnID 0 is reserved")
        if not 0 < conn_id <= 0xFFFFFFFF:
            raise ValueError(f"ConnID {conn_id} is not a uint32")
        stream = self._channels.get(conn_id)
        if stream is None:
            stream = self._channels[conn_id] = asyncio.StreamReader()
            if self._ended:
                stream.feed_eof()

        async def send(data: bytes) -> None:
            await self.send(conn_id, data)

        return stream, send

    async def send(self, conn_id: int, data: bytes) -> None:
        """Write `data` as frames of at most 4096 payload bytes, in one go (frames of two sends never interleave)."""
        writer = self._writer
        if self._ended or writer.is_closing():
            raise ConnectionResetError("NRI mux: the connection is closed")
        size = len(data)
        if size <= MAX_SEND_PAYLOAD:
            writer.write(HEADER.pack(conn_id, size) + data)
        else:
            if size > MAX_SAFE_SEND:
                log.warning("NRI mux: a %d-byte write on ConnID %d needs %d frames; the runtime's reader queues "
                            "256 and drops the connection if it falls behind", size, conn_id,
                            -(-size // MAX_SEND_PAYLOAD))
            view = memoryview(data)
            full = HEADER.pack(conn_id, MAX_SEND_PAYLOAD)
            parts: list[bytes | memoryview] = []
            for offset in range(0, size - MAX_SEND_PAYLOAD, MAX_SEND_PAYLOAD):
                parts += (full, view[offset:offset + MAX_SEND_PAYLOAD])
            last = (size - 1) // MAX_SEND_PAYLOAD * MAX_SEND_PAYLOAD
            parts += (HEADER.pack(conn_id, size - last), view[last:])
            writer.writelines(parts)
        await writer.drain()

    async def run(self) -> None:
        """Read frames until the trunk ends, appending each payload to its channel; then close the trunk, EOF on
        every channel."""
        reader, channels = self._reader, self._channels
        try:
            while True:
                conn_id, size = HEADER.unpack(await reader.readexactly(HEADER_LEN))
                if size > MAX_RECV_PAYLOAD:
                    log.warning("NRI mux: a %d-byte frame for ConnID %d, more than a peer ever sends; closing",
                                size, conn_id)
                    return
                payload = await reader.readexactly(size)
                stream = channels.get(conn_id)
                if stream is not None:
                    stream.feed_data(payload)
        except asyncio.IncompleteReadError:
            pass
        except (ConnectionError, OSError) as e:
            log.debug("NRI mux: trunk read failed: %s", e)
        finally:
            self.close()

    def close(self) -> None:
        """Close the trunk; `run` then returns and every channel reads EOF."""
        self._writer.close()
        self._end()

    async def wait_closed(self) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            await self._writer.wait_closed()

    def _end(self) -> None:
        if self._ended:
            return
        self._ended = True
        for stream in self._channels.values():
            stream.feed_eof()
