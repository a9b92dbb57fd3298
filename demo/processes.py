"""Helper processes the demo stack, the benchmarks and the tests start: waiting until one answers, stopping it."""

from __future__ import annotations

import subprocess
import time
import urllib.request


def wait_answering(url: str, proc: subprocess.Popen[bytes], what: str, timeout: float = 60.0,
                   interval: float = 0.2) -> None:
    """Return once `url` answers 200; RuntimeError naming `what` when the process exits first or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(interval)
    raise RuntimeError(f"{what} not answering at {url} after {timeout:g} s")


def stop(proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    """SIGTERM, then a kill when it has not exited within `timeout`."""
    stop_all([proc], timeout)


def stop_all(procs: list[subprocess.Popen[bytes]], timeout: float = 20.0) -> None:
    """SIGTERM to each at once (they shut down side by side, not one after another), then a kill for any not
    exited within `timeout`."""
    for proc in procs:
        proc.terminate()
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
