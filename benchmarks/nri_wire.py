"""NRI wire baseline: the Go runtime peer calls an echo method over mux + ttrpc into our TtrpcServer.

The Go peer (tests/nri/gopeer/, Debian's ttrpc 1.1.1 with an NRI-like mux) plays containerd: it makes n sequential
calls on ConnID 1 and measures p50/p99 round trips and calls per second itself; the Python side is our Mux and
TtrpcServer with a handler that returns the request payload. This is the floor any NRI hook adds to container
creation; the NRI benchmark reuses `build_gopeer`, `GoRuntime` and `plugin_connection`.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from base64 import b64decode, b64encode
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from koordlet.nri.mux import PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN, Mux
from koordlet.nri.ttrpc import Handler, TtrpcClient, TtrpcServer

GOPEER_SOURCE = Path(__file__).resolve().parents[1] / "tests" / "nri" / "gopeer"
PLUGIN_SERVICE = "nri.pkg.api.v1alpha1.Plugin"


def build_gopeer() -> Path:
    """The Go peer, built once per source hash into the temp dir (the same cache tests/nri/gopeer.py uses)."""
    go = shutil.which("go")
    if go is None:
        raise SystemExit("nri_wire: needs `go` and golang-github-containerd-ttrpc-dev (make installs them as root)")
    digest = hashlib.sha256()
    for path in sorted(GOPEER_SOURCE.glob("*.go")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    cache = Path(tempfile.gettempdir()) / f"koordlet-gopeer-{digest.hexdigest()[:16]}"
    binary = cache / "gopeer"
    if not binary.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, GO111MODULE="off", GOPATH=f"{cache / 'gopath'}:/usr/share/gocode",
                   GOCACHE=str(cache / "gocache"), GOFLAGS="", CGO_ENABLED="0")
        partial = cache / f"gopeer.{os.getpid()}"
        subprocess.run([go, "build", "-o", str(partial), "."], cwd=GOPEER_SOURCE, env=env, check=True)
        partial.replace(binary)
    return binary


class GoRuntime:
    """The Go peer in `runtime` mode (containerd's side): JSON-line commands, replies by id, events in order."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self._next_id = 0
        self._replies: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._reading = asyncio.create_task(self._read())

    @classmethod
    @asynccontextmanager
    async def start(cls, socket_path: Path) -> AsyncIterator[GoRuntime]:
        proc = await asyncio.create_subprocess_exec(str(build_gopeer()), "runtime", "-socket", str(socket_path),
                                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, limit=64 << 20)
        peer = cls(proc)
        try:
            await peer.event("listening")
            yield peer
        finally:
            assert proc.stdin is not None
            proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), 5)
            except TimeoutError:
                proc.kill()
                await proc.wait()
            peer._reading.cancel()

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            msg = json.loads(line)
            if "payload" in msg:
                msg["payload"] = b64decode(msg["payload"] or "")
            if "event" in msg:
                self.events.put_nowait(msg)
            elif (future := self._replies.pop(msg["id"], None)) is not None:
                future.set_result(msg)

    async def command(self, **fields: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self._next_id += 1
        if isinstance(fields.get("payload"), bytes):
            fields["payload"] = b64encode(fields["payload"]).decode()
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._replies[self._next_id] = future
        self.proc.stdin.write(json.dumps({"id": self._next_id, **fields}).encode() + b"\n")
        await self.proc.stdin.drain()
        return await future

    async def event(self, name: str, timeout: float = 10.0) -> dict[str, Any]:
        """The next event of that name; earlier events of other names are discarded."""
        async with asyncio.timeout(timeout):
            while (msg := await self.events.get())["event"] != name:
                pass
        return msg


@asynccontextmanager
async def plugin_connection(socket_path: Path, methods: Mapping[str, Handler]) -> AsyncIterator[TtrpcClient]:
    """Our plugin side: connect, serve `methods` as the Plugin service on ConnID 1; yields the Runtime client."""
    reader, writer = await asyncio.open_unix_connection(str(socket_path))
    mux = Mux(reader, writer)
    plugin_in, plugin_out = mux.channel(PLUGIN_SERVICE_CONN)
    client = TtrpcClient(*mux.channel(RUNTIME_SERVICE_CONN))
    tasks = [asyncio.create_task(mux.run()), asyncio.create_task(client.run()),
             asyncio.create_task(TtrpcServer({PLUGIN_SERVICE: methods}).serve(plugin_in, plugin_out))]
    try:
        yield client
    finally:
        mux.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _echo(payload: bytes, deadline: float | None) -> bytes:
    return payload


async def echo_baseline(sizes: list[int], n: int) -> list[tuple[int, dict[str, Any], float]]:
    """(payload size, the Go peer's bench reply, our process CPU µs per call) per size."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        socket_path = Path(tmp) / "nri.sock"
        async with GoRuntime.start(socket_path) as peer, plugin_connection(socket_path, {"CreateContainer": _echo}):
            await peer.event("connected")
            for size in sizes:
                payload = os.urandom(size)
                await peer.command(op="bench", call="CreateContainer", payload=payload, n=50, timeout_ms=2000)
                cpu = time.process_time()
                reply = await peer.command(op="bench", call="CreateContainer", payload=payload, n=n,
                                           timeout_ms=2000)
                rows.append((size, reply, (time.process_time() - cpu) / n * 1e6))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=2000, help="sequential calls per payload size")
    ap.add_argument("--sizes", default="100,2048,65536", help="payload bytes, comma-separated")
    args = ap.parse_args()
    rows = asyncio.run(echo_baseline([int(s) for s in args.sizes.split(",")], args.n))
    print(f"NRI wire echo baseline: Go runtime peer → mux + ttrpc → our TtrpcServer, {args.n} sequential calls")
    print(f"{'payload B':>9}  {'p50 µs':>7}  {'p99 µs':>7}  {'calls/s':>8}  {'py CPU µs/call':>14}  errors")
    failed = False
    for size, reply, cpu_us in rows:
        print(f"{size:>9}  {reply['p50_us']:>7.0f}  {reply['p99_us']:>7.0f}  {reply['calls_per_s']:>8.0f}  "
              f"{cpu_us:>14.0f}  {reply['errors']}")
        failed |= reply["errors"] > 0
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
