"""Loop periods at start and SIGTERM while loops run behind: a typo in an interval never costs a core."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from koordlet.cli import parse_args
from koordlet.flagtable import OPTIONS
from koordlet.goflag import FlagError

# Numeric flags that take any value, each for a reason: upstream gives 0 or less a meaning, or the type bounds it.
_FREE = {
    "report-interval": "deprecated and ignored, as upstream",
    "node-topology-sync-interval": "<= 0 turns the NRT loop off (upstream)",
    "cpu-evict-interval-seconds": "<= 0 turns the strategy off (upstream)",
    "memory-evict-interval-seconds": "<= 0 turns the strategy off (upstream)",
    "pod-resources-proxy-qps": "<= 0: no limit",
    "kube-api-qps": "client-go: 0 is its default, < 0 no limit",
    "log_file_max_size": "unsigned; 0 is no limit (klog)",
}


def _numeric() -> list[str]:
    return [o.name for o in OPTIONS.values() if o.flag.kind in ("duration", "int", "float64", "uint64")
            and o.group != "cadvisor"]


def test_every_numeric_flag_is_checked_or_free_for_a_stated_reason() -> None:
    """A new period flag without a check would take 0 and spin: each numeric flag is checked or listed above."""
    unchecked = {name for name in _numeric() if OPTIONS[name].flag.check is None}
    assert unchecked == set(_FREE)


@pytest.mark.parametrize("name", [n for n in _numeric() if n not in _FREE])
def test_a_period_of_zero_or_less_is_refused_in_one_line(name: str) -> None:
    """Fault: -<period>=0 or -1 on the command line. Holds: a FlagError naming the flag (exit 2), for each flag."""
    kind = OPTIONS[name].flag.kind
    zero, negative = ("0s", "-1s") if kind == "duration" else ("0", "-1")
    refused = []
    for value in (zero, negative):
        try:
            parse_args(["run", f"-{name}={value}"])
        except FlagError as e:
            assert f"-{name}" in str(e) and "\n" not in str(e)
            refused.append(value)
    assert negative in refused  # zero is refused too where it would spin (the positive-only flags)
    if OPTIONS[name].flag.check is not None and OPTIONS[name].flag.check(0) is not None:  # type: ignore[misc]
        assert zero in refused


def test_reconcile_interval_zero_exits_2_at_once(tmp_path: Path) -> None:
    """Fault: `koordlet run --reconcile-interval-seconds 0` (it used to spin at 100 % of a core and ignore SIGTERM).
    Holds: one line naming the flag, exit 2, within seconds."""
    out = subprocess.run([sys.executable, "-m", "koordlet", "run", "--reconcile-interval-seconds", "0",
                          "--pods-dir", str(tmp_path)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "-reconcile-interval-seconds" in lines[0] and "Traceback" not in out.stderr


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_sigterm_is_honoured_while_every_loop_runs_behind(tmp_path: Path) -> None:
    """Fault: collection and QoS period far shorter than a round (1 ns), so each loop is always behind and never
    waits. Holds: the other loops and the HTTP server still run, and SIGTERM stops the agent within a second or
    two (it used to be starved: a loop that never awaited kept the event loop from ever handling the signal)."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "koordlet", "run", "--host-root", "/", "--pods-dir",
                             str(Path(__file__).resolve().parents[2] / "examples" / "pods"), "--state-dir",
                             str(tmp_path / "state"), "--node-name", "n1", "--addr", f"127.0.0.1:{port}",
                             "-collect-res-used-interval=1ns", "--reconcile-interval-seconds=1",
                             "-feature-gates=CPUSchedLatency=false"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        ready = False
        while time.monotonic() < deadline and not ready:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                    ready = r.status == 200
            except OSError:
                time.sleep(0.2)
        assert ready, "the agent never got ready"
        time.sleep(1.0)  # some rounds behind
        started = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
        took = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    assert took < 2.0, f"SIGTERM took {took:.1f} s"
