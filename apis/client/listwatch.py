"""List, then watch one collection until stopped, backing off as client-go's reflector does (tools/cache/reflector.go).

Shared by the agent's watches (koordlet.cluster) and the scheduler extender's (scheduler.extender): what counts as
a failure, what waits and what resets the wait live here only.
- Every failure waits the next step of one exponential backoff (REFLECTOR: [0.8, 1.6) s doubling to [30, 60) s);
  a successful list does not reset it, the backoff manager does, once no wait was needed for 2 minutes.
- A watch that ends within a second having delivered nothing is a failure ("very short watch", reflector.go
  handleWatch), so a server that closes every watch at once is not asked again at once.
- A watch that lived ends normally (the server's timeout): watched again at once from the last resourceVersion.
- A Retry-After on a failed list lengthens that wait (up to twice the cap).
- 410 Gone, an error from the caller's handler, any other error: wait, then list again. An API server that cannot
  be reached or answers 429 when the watch opens: wait, then watch again from the same resourceVersion
  (reflector.go: isWatchErrorRetriable).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from apis.client.backoff import REFLECTOR, BackoffPolicy, ExponentialBackoff
from apis.client.kubeapi import Unreachable
from apis.core.errors import ApiError, KoordletError
from apis.core.objects import JSON

log = logging.getLogger(__name__)

SHORT_WATCH = 1.0  # reflector.go: a watch that lasted less than a second and received no items
_TOO_MANY_REQUESTS = 429


class Clock(Protocol):
    """Time for a retrying loop: `now` in seconds, `wait` until `seconds` pass or `stop` is set (True then)."""

    def now(self) -> float: ...

    def wait(self, stop: threading.Event, seconds: float) -> bool: ...


class RealClock:
    def now(self) -> float:
        return time.monotonic()

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        return stop.wait(seconds)


REAL_CLOCK = RealClock()


class VeryShortWatch(KoordletError):
    """The watch ended within SHORT_WATCH seconds without an event."""


def list_and_watch(
    stop: threading.Event,
    list_fn: Callable[[], str | None],
    watch_fn: Callable[[str | None], Iterable[JSON]],
    on_event: Callable[[JSON], None],
    *,
    backoff: BackoffPolicy = REFLECTOR,
    clock: Clock = REAL_CLOCK,
    on_error: Callable[[Exception, float], None] | None = None,
) -> None:
    """Run until `stop`: `list_fn()` lists (and applies) the collection and returns its resourceVersion;
    `watch_fn(rv)` streams the events after it, each given to `on_event`. `on_error(error, wait)` hears of each
    failure before its wait."""
    waits = ExponentialBackoff(backoff, clock=clock.now)
    rv: str | None = None
    listed = False
    while not stop.is_set():
        try:
            if not listed:
                rv = list_fn() or None
                listed = True
            if stop.is_set():  # stopped while listing: a watch opened now would outlive the close that stop came with
                return
            started, events = clock.now(), 0
            for event in watch_fn(rv):
                if stop.is_set():
                    return
                events += 1
                rv = _resource_version(event) or rv
                on_event(event)
            if events == 0 and clock.now() - started < SHORT_WATCH:
                raise VeryShortWatch("watch closed at once with no event")
        except Exception as e:
            if stop.is_set():
                return
            if not (listed and _may_resume(e)):
                listed = False
            delay = waits.next()
            if isinstance(e, ApiError) and e.retry_after:  # a list's 429/503 may say when; at most the cap's worst
                delay = max(delay, min(e.retry_after, 2 * backoff.cap))
            if on_error is not None:
                on_error(e, delay)
            else:
                log.warning("list/watch: %s; retrying in %.1fs", e, delay)
            if clock.wait(stop, delay):
                return


def _may_resume(error: Exception) -> bool:
    """A watch that failed this way may resume from the same resourceVersion (no list needed)."""
    if isinstance(error, Unreachable):
        return True
    return isinstance(error, ApiError) and error.status == _TOO_MANY_REQUESTS


def _resource_version(event: JSON) -> str:
    obj = event.get("object")
    if not isinstance(obj, dict):
        return ""
    meta = obj.get("metadata")
    return str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""
