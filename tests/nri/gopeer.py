"""The Go ttrpc/NRI test peer (tests/nri/gopeer/): built once per source hash, driven over JSON lines.

    from gopeer import GoPeer, gopeer_bin  # noqa: F401  (gopeer_bin is the session fixture)

    async def test_x(gopeer_bin: Path, tmp_path: Path) -> None:
        async with GoPeer.start(gopeer_bin, "runtime", "-socket", str(tmp_path / "nri.sock")) as peer:
            await peer.event("listening")
            ...connect a plugin...
            await peer.event("connected")
            reply = await peer.command(call="Configure", payload=b"...", timeout_ms=2000)
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections import defaultdict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from conftest import require

SOURCE = Path(__file__).resolve().parent / "gopeer"
GOPATH_SYSTEM = "/usr/share/gocode"  # Debian's golang-*-dev packages install their sources here
TTRPC_SOURCE = Path(GOPATH_SYSTEM) / "src/github.com/containerd/ttrpc"


@functools.cache
def build() -> Path:
    """The peer binary, built unless a binary of the same sources is cached (under the temp dir)."""
    go = shutil.which("go")
    require(go is not None and TTRPC_SOURCE.is_dir(),
            "the Go NRI peer needs `go` and Debian's ttrpc sources (apt-get install golang-go "
            "golang-github-containerd-ttrpc-dev; `make test` does it as root)")
    assert go is not None
    digest = hashlib.sha256()
    for path in sorted(SOURCE.glob("*.go")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    cache = Path(tempfile.gettempdir()) / f"koordlet-gopeer-{digest.hexdigest()[:16]}"
    binary = cache / "gopeer"
    if binary.is_file():
        return binary
    cache.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, GO111MODULE="off", GOPATH=f"{cache / 'gopath'}:{GOPATH_SYSTEM}",
               GOCACHE=str(cache / "gocache"), GOFLAGS="", CGO_ENABLED="0")
    partial = cache / f"gopeer.{os.getpid()}"
    out = subprocess.run([go, "build", "-o", str(partial), "."], cwd=SOURCE, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"go build of the test peer failed:\n{out.stderr}"
    partial.replace(binary)  # atomic: a concurrent run sees the whole binary or none
    return binary


@pytest.fixture(scope="session")
def gopeer_bin() -> Path:
    return build()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class GoPeer:
    """A running peer: `command(...)` sends one JSON command and awaits the reply with its id; `event(name)` awaits
    the next event of that name (events are queued per name, none is lost). Payloads are bytes on this side,
    base64 on the wire; a reply's "payload" comes back decoded."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self._next_id = 0
        self._replies: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._events: defaultdict[str, asyncio.Queue[dict[str, Any]]] = defaultdict(asyncio.Queue)
        self._reader = asyncio.create_task(self._read())

    @classmethod
    @contextlib.asynccontextmanager
    async def start(cls, binary: Path, *args: str) -> AsyncIterator[GoPeer]:
        proc = await asyncio.create_subprocess_exec(str(binary), *args, stdin=subprocess.PIPE,
                                                    stdout=subprocess.PIPE, limit=64 << 20)
        peer = cls(proc)
        try:
            yield peer
        finally:
            await peer.close()

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            msg = json.loads(line)
            if "payload" in msg:
                msg["payload"] = base64.b64decode(msg.get("payload") or "")
            if "event" in msg:
                self._events[msg["event"]].put_nowait(msg)
            else:
                future = self._replies.pop(msg["id"], None)
                if future is not None and not future.done():
                    future.set_result(msg)
        for future in self._replies.values():
            if not future.done():
                future.set_exception(EOFError(f"the Go peer exited (code {await self.proc.wait()})"))

    async def command(self, timeout: float = 30.0, **fields: Any) -> dict[str, Any]:
        """Send {"id": <new>, **fields} (a bytes "payload" is base64-encoded) and return the reply."""
        assert self.proc.stdin is not None
        self._next_id += 1
        cmd_id = self._next_id
        if isinstance(fields.get("payload"), bytes):
            fields["payload"] = b64(fields["payload"])
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._replies[cmd_id] = future
        self.proc.stdin.write(json.dumps({"id": cmd_id, **fields}).encode() + b"\n")
        await self.proc.stdin.drain()
        return await asyncio.wait_for(future, timeout)

    async def event(self, name: str, timeout: float = 10.0) -> dict[str, Any]:
        return await asyncio.wait_for(self._events[name].get(), timeout)

    def pending_events(self, name: str) -> list[dict[str, Any]]:
        """The events of that name received and not yet awaited, taken from the queue."""
        queue, out = self._events[name], []
        while not queue.empty():
            out.append(queue.get_nowait())
        return out

    async def close(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.is_closing():
            self.proc.stdin.close()  # the peer exits at EOF on stdin, removing its socket
        try:
            await asyncio.wait_for(self.proc.wait(), 5)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader
