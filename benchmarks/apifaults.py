"""API requests/s of the agent's and the extender's watchers while the API server fails every watch, beside the
ceiling client-go's reflector backoff allows them (apis.client.backoff.REFLECTOR) and the count of watchers.

The API server is an in-process HTTP double (stdlib ThreadingHTTPServer, real sockets and JSON) that lists empty
collections and answers every watch 500, or closes every watch at once (200, no event), or answers every list 500.
Ten watchers run against it: the agent's 3 (Node, NodeSLO, NodeMetric of its node) and the extender's 7. First in
real time for REAL_S seconds with the client as deployed (20 qps); then each fault on a SkipClock
(benchmarks/skipclock.py: waits cost no real time) over a 10-minute timeline per watcher, where the backoff has
reached its cap. The ceiling is the most requests the backoff lets through in the same time (every jitter at its
minimum): the old loops' rate cannot be run beside it any more; issue #23 measured them at ~20 req/s (watches 500)
and ~41 req/s (closed at once) for 10 watchers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import tempfile
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from apis.client.backoff import REFLECTOR
from apis.client.kubeapi import KubeClient, KubeConfig
from apis.client.listwatch import REAL_CLOCK, Clock
from benchmarks.skipclock import SkipClock
from koordlet.agent import Agent
from koordlet.cluster import ClusterLink
from koordlet.config import Config
from koordlet.host.paths import HostPaths
from scheduler.cli import profile
from scheduler.cluster import Cluster
from scheduler.extender import SOURCES, ClusterSource, Extender
from scheduler.framework import Scheduler

AGENT_WATCHERS = 3
WATCHERS = AGENT_WATCHERS + len(SOURCES)
REAL_S = 30.0
HORIZON_S = 600.0
FAULTS = {"watch-500": "every watch answered 500", "watch-closed": "every watch closed at once",
          "list-500": "every list answered 500"}


class FaultyApi:
    """Counts lists and watches; answers them as `fault` says."""

    def __init__(self, fault: str) -> None:
        self.fault = fault
        self.lists = self.watches = 0
        self._lock = threading.Lock()

    def handle(self, path: str) -> tuple[int, bytes]:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query)
        watch = query.get("watch") == ["true"]
        with self._lock:
            if watch:
                self.watches += 1
            else:
                self.lists += 1
        if (watch and self.fault == "watch-500") or (not watch and self.fault == "list-500"):
            return 500, json.dumps({"kind": "Status", "code": 500, "message": "etcd is sad"}).encode()
        if watch:  # watch-closed, and list-500 never gets here
            return 200, b""
        return 200, json.dumps({"kind": "List", "items": [], "metadata": {"resourceVersion": "1"}}).encode()


def _serve(api: FaultyApi) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def do_GET(self) -> None:
            code, out = api.handle(self.path)
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


async def _run(fault: str, clock: Clock, seconds: float, qps: float, state_dir: str) -> FaultyApi:
    """The ten watchers against the double until `seconds` of real time pass (or, on a SkipClock, until every
    watcher parked at its horizon)."""
    api = FaultyApi(fault)
    server = _serve(api)
    kube = KubeConfig(server=f"http://127.0.0.1:{server.server_address[1]}", qps=qps)
    agent = Agent(Config(node_name="bench", paths=HostPaths.under("/"), state_dir=state_dir))  # reads only
    link = ClusterLink(agent.config, kube, KubeClient(kube), agent)
    link.clock = clock

    def make(cluster: Cluster) -> Scheduler:
        return Scheduler(cluster, *profile(None))

    ext = Extender(ClusterSource(KubeClient(kube)), make)
    ext.clock = clock
    try:
        link.start_watches(agent)
        ext.start_watches()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if isinstance(clock, SkipClock) and clock.parked() >= WATCHERS:
                break
            await asyncio.sleep(0.05)
    finally:
        link.close()
        ext.stop_watches()
        server.shutdown()
        server.server_close()
        agent.close()
    return api


def _ceiling(timelines: list[float], per_attempt: int) -> int:
    return sum(per_attempt * (REFLECTOR.min_waits_within(t) + 1) for t in timelines)


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__).parse_args(argv)
    logging.disable(logging.WARNING)  # each failure logs a line; this run makes hundreds
    rows: list[tuple[str, str, int, float, float, bool]] = []
    with tempfile.TemporaryDirectory(prefix="koordlet-apifaults-") as tmp:
        started = time.monotonic()
        api = asyncio.run(_run("watch-500", REAL_CLOCK, REAL_S, 20.0, tmp))
        elapsed = time.monotonic() - started
        made = api.lists + api.watches
        limit = _ceiling([elapsed] * WATCHERS, 2)
        rows.append((f"{FAULTS['watch-500']}, real time", f"{elapsed:.0f} s", made, made / elapsed,
                     limit / elapsed, made <= limit))
        for fault, text in FAULTS.items():
            clock = SkipClock(HORIZON_S)
            api = asyncio.run(_run(fault, clock, 20.0, 0.0, tmp))
            timelines = clock.timelines(WATCHERS)
            span = sum(timelines) / len(timelines)
            made = api.lists + api.watches
            limit = _ceiling(timelines, 1 if fault == "list-500" else 2)
            rows.append((text, f"{span:.0f} s", made, made / span, limit / span, made <= limit))
    steady = WATCHERS * 2 / REFLECTOR.cap
    print(f"API requests while the API server fails: {WATCHERS} watchers (agent {AGENT_WATCHERS}, extender "
          f"{len(SOURCES)}), backoff {REFLECTOR.initial:g} s doubling to [{REFLECTOR.cap:g}, {2 * REFLECTOR.cap:g}) s")
    w = max(len(r[0]) for r in rows)
    print(f"{'fault':<{w}}  {'timeline':>8}  {'requests':>8}  {'req/s':>6}  {'client-go ceiling':>17}  result")
    for text, span_s, made, rate, ceiling, ok in rows:
        print(f"{text:<{w}}  {span_s:>8}  {made:>8}  {rate:>6.2f}  {ceiling:>13.2f} /s  {'ok' if ok else 'MISS'}")
    print(f"once capped: at most {steady:.2f} req/s for {WATCHERS} watchers (a list and a watch per "
          f"{REFLECTOR.cap:g} s each); the old loops, per issue #23: ~20 req/s (watches 500), ~41 (closed at once)")
    return 0 if all(r[5] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
