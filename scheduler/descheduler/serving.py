"""`koord-descheduler run`'s insecure port (upstream server.go newHealthzAndMetricsHandler on healthzBindAddress and
metricsBindAddress, 0.0.0.0:10251 by default): `/healthz` (also `/livez`, `/readyz`), failing when this process
leads and its Lease has gone unrenewed past the lease duration plus client-go's 20 s watchdog, and `/metrics`."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from scheduler.descheduler.metrics import CONTENT_TYPE, DeschedulerMetrics

log = logging.getLogger("koord-descheduler")
HEALTH_PATHS = ("/healthz", "/livez", "/readyz")
WATCHDOG_TIMEOUT = 20.0  # seconds (upstream: leaderelection.NewLeaderHealthzAdaptor(20 * time.Second))


def split_address(addr: str) -> tuple[str, int]:
    """`0.0.0.0:10251`, `:10251`, `[::]:10251` → (host, port); ValueError in one line otherwise."""
    host, sep, port = addr.rpartition(":")
    try:
        if not sep:
            raise ValueError
        return host.strip("[]"), int(port)
    except ValueError:
        raise ValueError(f"invalid bind address {addr!r} (want host:port)") from None


class _Handler(BaseHTTPRequestHandler):
    server: HealthServer
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path in HEALTH_PATHS or path.startswith("/healthz/"):
            problem = self.server.healthy()
            self._send(200 if problem is None else 500, "text/plain; charset=utf-8",
                       b"ok" if problem is None else f"[-]leaderElection failed: {problem}\n".encode())
        elif path == "/metrics":
            self._send(200, CONTENT_TYPE, self.server.metrics.exposition())
        else:
            self._send(404, "text/plain; charset=utf-8", b"404 page not found\n")

    def _send(self, status: int, ctype: str, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)


class HealthServer(ThreadingHTTPServer):
    """`healthy()` is None when fine, else why not."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], metrics: DeschedulerMetrics,
                 healthy: Callable[[], str | None] = lambda: None) -> None:
        super().__init__(address, _Handler)
        self.metrics = metrics
        self.healthy = healthy

    def start(self) -> threading.Thread:
        t = threading.Thread(target=self.serve_forever, name="healthz", daemon=True)
        t.start()
        return t

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
