"""NRI runtime faults: a runtime that drops the connection during registration, and one that sends garbage on every
call. The plugin stays up, answers fail-open, and its log stays readable."""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
import struct
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "nri"))

from test_plugin_session import build_agent

from koordlet.host.paths import HostPaths


def _paths(tmp_path: Path) -> HostPaths:
    return HostPaths.under(str(tmp_path / "node"))


@pytest.mark.parametrize("how", ["at-once", "after-the-request", "reset"])
async def test_a_runtime_closing_during_registration_leaves_no_unretrieved_failure(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, how: str) -> None:
    """Fault: the runtime accepts, then closes (at once, after reading our RegisterPlugin, or with a TCP-style reset)
    ~dozens of times in a row. Holds: the plugin keeps retrying, counts each failed registration, and asyncio never
    reports 'Future exception was never retrieved' (a failure nobody looked at)."""
    sock_path = tmp_path / "nri.sock"
    accepted = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        accepted += 1
        if how == "after-the-request":
            await reader.read(64)
        if how == "reset":
            raw = writer.get_extra_info("socket")
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.close()

    server = await asyncio.start_unix_server(serve, path=str(sock_path))
    agent = build_agent(_paths(tmp_path), sock_path)
    caplog.set_level(logging.ERROR, logger="asyncio")
    task = asyncio.ensure_future(agent.conn.run(agent.stop))
    try:
        for _ in range(200):
            await asyncio.sleep(0.02)
            if accepted >= 20:
                break
    finally:
        agent.stop.set()
        await asyncio.wait_for(task, 5)
        server.close()
        await server.wait_closed()
    gc.collect()
    await asyncio.sleep(0)
    assert accepted >= 20
    assert agent.sample("koordlet_nri_connection_attempts_total", result="register_failed") + \
        agent.sample("koordlet_nri_connection_attempts_total", result="refused") >= 19
    unretrieved = [r for r in caplog.records if "never retrieved" in r.getMessage()]
    assert unretrieved == []


async def test_garbage_on_every_call_is_one_error_line_a_minute_and_every_call_counted(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Fault: 500 CreateContainer calls whose payload does not decode. Holds: each is answered with an empty
    adjustment (fail-open) and counted as an error; the log says so once (not 500 ERROR lines)."""
    agent = build_agent(_paths(tmp_path), tmp_path / "unused.sock")
    handle = agent.plugin.methods()["CreateContainer"]
    caplog.set_level(logging.ERROR, logger="koordlet.nri.plugin")
    for _ in range(500):
        reply = await handle(b"\xff\xff\xff\xff garbage", None)
        assert reply == b""  # an empty CreateContainerResponse: no adjustment, the container still starts
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR and r.name == "koordlet.nri.plugin"]
    assert len(errors) == 1 and "cannot decode" in errors[0].getMessage()
    assert agent.sample("koordlet_nri_calls_total", method="CreateContainer", outcome="error") == 500


async def test_the_stream_ending_while_a_request_is_being_sent_leaves_no_unretrieved_failure(
        caplog: pytest.LogCaptureFixture) -> None:
    """Fault: the runtime closes while our RegisterPlugin is still being written (the send blocks, the read side sees
    EOF, then the send fails). Holds: the call fails with TtrpcClosedError, and the reply future the stream's end
    failed is not left with an exception nobody retrieved (asyncio would log it, once per dropped connection)."""
    from koordlet.nri.ttrpc import TtrpcClient, TtrpcClosedError

    reader = asyncio.StreamReader()
    release = asyncio.Event()

    async def send(data: bytes) -> None:
        await release.wait()
        raise ConnectionResetError("the runtime went away")

    caplog.set_level(logging.ERROR, logger="asyncio")
    client = TtrpcClient(reader, send)
    calling = asyncio.ensure_future(client.call("nri.pkg.api.v1alpha1.Runtime", "RegisterPlugin", b"", timeout=5))
    await asyncio.sleep(0)  # the call is waiting on its send
    reader.feed_eof()
    await client.run()  # EOF: the pending call is failed
    release.set()
    with pytest.raises(TtrpcClosedError):
        await calling
    del calling
    gc.collect()
    await asyncio.sleep(0)
    assert [r for r in caplog.records if "never retrieved" in r.getMessage()] == []
