"""One NRI connection at a time to the runtime's socket, re-established with backoff whenever the runtime goes away.

Unlike upstream (runtimehooks/nri/server.go gives up when the socket is missing at start-up), a missing socket is
just another reason to retry: containerd may start after the agent, or have NRI switched on later. The rest of the
agent never waits on this loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from dataclasses import dataclass

from koordlet.config import check_nri_identity
from koordlet.nri.metrics import NriMetrics
from koordlet.nri.mux import PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN, Mux
from koordlet.nri.plugin import PLUGIN_SERVICE, RUNTIME_SERVICE, NriPlugin
from koordlet.nri.ttrpc import TtrpcClient, TtrpcError, TtrpcServer
from koordlet.pb import nri_pb2 as api

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with jitter (upstream: 1 s × 2, jitter 0.1). Upstream's cap is effectively unbounded;
    ours defaults to 30 s so a runtime that appears late is found within half a minute."""

    initial: float = 1.0
    factor: float = 2.0
    jitter: float = 0.1
    cap: float = 30.0

    def delay(self, attempt: int) -> float:
        base = min(self.initial * self.factor ** min(attempt, 64), self.cap)
        return base * (1 + self.jitter * random.random())


class NriConnection:
    """Keeps `plugin` registered with the runtime at `socket_path`:

        conn = NriConnection(path, plugin, metrics)
        task = asyncio.ensure_future(conn.run(stop_event))
    """

    def __init__(self, socket_path: str, plugin: NriPlugin, metrics: NriMetrics, *, name: str = "koordlet_nri",
                 index: str = "00", connect_timeout: float = 6.0, backoff: Backoff | None = None) -> None:
        check_nri_identity(name, index)
        self.socket_path = socket_path
        self.plugin = plugin
        self.metrics = metrics
        self.name, self.index = name, index
        self.connect_timeout = connect_timeout
        self.backoff = backoff or Backoff()
        self.connected = False
        self.sessions = 0  # registrations that succeeded, over the agent's life
        self._last_problem = ""

    async def run(self, stop: asyncio.Event) -> None:
        attempt = 0
        while not stop.is_set():
            started = time.monotonic()
            problem = await self._one_session(stop)
            if stop.is_set():
                return
            if time.monotonic() - started > self.connect_timeout:
                attempt = 0  # it was up for a while: start the backoff afresh
            self._say(problem)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.backoff.delay(attempt))
            attempt += 1

    def _say(self, problem: str) -> None:
        """Log a problem when it changes, not on every retry (a node without NRI retries forever); a missing socket
        is what a runtime without NRI looks like, so it is news, not a warning."""
        if problem != self._last_problem:
            level = logging.INFO if problem.startswith("socket ") else logging.WARNING
            log.log(level, "NRI: %s; retrying with backoff (up to %.0fs)", problem, self.backoff.cap)
            self._last_problem = problem

    async def _one_session(self, stop: asyncio.Event) -> str:
        """Connect, register, serve until the runtime closes; the reason it ended."""
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(self.socket_path),
                                                    self.connect_timeout)
        except FileNotFoundError:
            self.metrics.connects.labels("no_socket").inc()
            return f"socket {self.socket_path} not there (is NRI enabled in the runtime?)"
        except (OSError, TimeoutError) as e:
            self.metrics.connects.labels("refused").inc()
            return f"cannot connect to {self.socket_path}: {e}"
        mux = Mux(reader, writer)
        plugin_in, plugin_out = mux.channel(PLUGIN_SERVICE_CONN)
        runtime_in, runtime_out = mux.channel(RUNTIME_SERVICE_CONN)
        self.plugin.connection_started()
        server = TtrpcServer({PLUGIN_SERVICE: self.plugin.methods()})
        client = TtrpcClient(runtime_in, runtime_out)
        # The runtime may call Configure before our RegisterPlugin reply arrives: serve before registering.
        tasks = [asyncio.ensure_future(mux.run()), asyncio.ensure_future(server.serve(plugin_in, plugin_out)),
                 asyncio.ensure_future(client.run())]
        try:
            request = api.RegisterPluginRequest(plugin_name=self.name, plugin_idx=self.index)
            try:
                await client.call(RUNTIME_SERVICE, "RegisterPlugin", request.SerializeToString(),
                                  timeout=self.connect_timeout)
            except (TtrpcError, ConnectionError, TimeoutError) as e:
                self.metrics.connects.labels("register_failed").inc()
                return f"registration as {self.index}-{self.name} failed: {e}"
            self.metrics.connects.labels("registered").inc()
            self.connected, self._last_problem = True, ""
            self.sessions += 1
            self.metrics.connected.set(1)
            log.info("NRI: registered as %s-%s on %s", self.index, self.name, self.socket_path)
            stopping = asyncio.ensure_future(stop.wait())
            await asyncio.wait([tasks[0], stopping], return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            return "the runtime closed the connection"
        finally:
            if self.connected:
                log.info("NRI: connection to the runtime ended")
            self.connected = False
            self.metrics.connected.set(0)
            mux.close()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
