"""A clock for retrying loops (apis.client.listwatch.Clock) on which waits cost no real time (benchmarks.apifaults and
the fault tests under tests/faults measure request rates with it).

Each thread lives on its own timeline: `wait(s)` returns at once and moves the calling thread's clock on by s, so a
loop that backs off for minutes runs its requests in a second of real time, while the requests themselves take
their real time. A thread whose next wait would carry it past `horizon` parks there until stopped: every request
it made lies within its timeline, and the test can divide by it. Code that never asks this clock (main's loops,
which sleep on their own) runs on real time, so a rate taken over `timelines()` is honest for both.
"""

from __future__ import annotations

import threading
import time


class SkipClock:
    """Waits return at once and move the waiting thread's own timeline on; see the module's docstring."""

    def __init__(self, horizon: float = float("inf")) -> None:
        self.horizon = horizon
        self.t0 = time.monotonic()
        self._skipped: dict[int, float] = {}
        self._parked: dict[int, float] = {}  # thread → its timeline's length when it parked
        self.waits: dict[int, list[float]] = {}
        self._lock = threading.Lock()

    def now(self) -> float:
        me = threading.get_ident()
        with self._lock:
            skipped = self._skipped.setdefault(me, 0.0)
        return time.monotonic() + skipped

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        me = threading.get_ident()
        elapsed = self.now() - self.t0
        with self._lock:
            self.waits.setdefault(me, []).append(seconds)
            if elapsed + seconds > self.horizon:
                self._parked[me] = elapsed
            else:
                self._skipped[me] += seconds
        if me in self._parked:
            return stop.wait()
        return stop.is_set()

    def parked(self) -> int:
        with self._lock:
            return len(self._parked)

    def timelines(self, threads: int) -> list[float]:
        """The length of each of `threads` loops' timelines so far: a parked one's up to where it parked, a running
        one's now; loops that never asked this clock count real time."""
        real = time.monotonic() - self.t0
        with self._lock:
            known = [self._parked.get(t, real + s) for t, s in self._skipped.items()]
        return known + [real] * max(0, threads - len(known))
