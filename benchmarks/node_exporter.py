"""Debian's prometheus-node-exporter as a scrape target beside the agent: found, started with its default collectors
on a loopback port, stopped."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from demo.processes import stop, wait_answering

# Debian's package installs the binary under its package name; upstream's release tarball calls it node_exporter.
BINARIES = ("prometheus-node-exporter", "node_exporter")


def find() -> str | None:
    """The node_exporter binary on PATH, or None when neither name is installed."""
    for name in BINARIES:
        path = shutil.which(name)
        if path is not None:
            return path
    return None


@contextmanager
def running(binary: str, port: int, timeout: float = 15.0) -> Iterator[subprocess.Popen[bytes]]:
    """node_exporter with its default collectors on 127.0.0.1:`port`, once /metrics answers; stopped (SIGTERM, then
    a kill after 10 s) on leaving. Raises RuntimeError with its log's last line when it exits or never answers."""
    with tempfile.TemporaryDirectory() as tmp:
        log_path = Path(tmp) / "node_exporter.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen([binary, f"--web.listen-address=127.0.0.1:{port}"], stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT)
        try:
            try:
                wait_answering(f"http://127.0.0.1:{port}/metrics", proc, "node_exporter", timeout, interval=0.1)
            except RuntimeError as e:
                raise RuntimeError(f"{e}: {_last_line(log_path)}") from None
            yield proc
        finally:
            stop(proc, timeout=10)


def _last_line(log: Path) -> str:
    lines = log.read_text(errors="replace").strip().splitlines()
    return lines[-1] if lines else "(no output)"
