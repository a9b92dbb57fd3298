"""The /metrics exposition rendered once per collection tick and shared by every scraper (plain or gzip).

A body is served while no collection tick has completed since it was rendered and it is younger than the
staleness bound (one collection interval; see docs/decisions.md). Scrapers that arrive while a render of the current
tick is under way wait for it and share it; the gzip form is compressed once per render, on first demand.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable

from koordlet.textformat import GoCounterFamily as GoCounterFamily  # its home before; importers kept

_WAIT_LIMIT = 60.0  # a render stuck this long answers its waiters 500 (their threads end) rather than hold them
GZIP_LEVEL = 1  # docs/decisions.md "Scrape cost, second pass": level 6 cost 3× the CPU of 1 for a body 6 % smaller


class Exposition:
    """One render: the text body, its gzip form (made once, when first asked for), and what it was rendered at."""

    __slots__ = ("_gzip", "_lock", "generation", "rendered_at", "text")

    def __init__(self, text: bytes, generation: int, rendered_at: float) -> None:
        self.text, self.generation, self.rendered_at = text, generation, rendered_at
        self._gzip: bytes | None = None
        self._lock = threading.Lock()

    def gzipped(self) -> bytes:
        if self._gzip is None:
            with self._lock:
                if self._gzip is None:
                    self._gzip = gzip.compress(self.text, compresslevel=GZIP_LEVEL, mtime=0)
        return self._gzip


class SharedRenderError(Exception):
    """The render this caller waited for failed (the caller that ran it raised, and logs, the error itself)."""


class _Flight:
    """A render under way: its waiters take its result (or its error) when it lands."""

    __slots__ = ("done", "error", "generation", "result")

    def __init__(self, generation: int) -> None:
        self.generation = generation
        self.done = threading.Event()
        self.result: Exposition | None = None
        self.error: BaseException | None = None


class ExpositionCache:
    """Per view (`all`, `internal`, `external`): the last render, reused while fresh, and at most one render
    in flight. `generation` changes when a collection tick completes; `max_age` is the staleness bound in seconds
    (0 renders for every scrape that does not share a render in flight)."""

    def __init__(self, render: Callable[[str], bytes], generation: Callable[[], int], max_age: Callable[[], float],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._render, self._generation, self._max_age, self._clock = render, generation, max_age, clock
        self._lock = threading.Lock()
        self._last: dict[str, Exposition] = {}
        self._flights: dict[str, _Flight] = {}

    def get(self, which: str) -> Exposition:
        """The exposition of `which`, rendered after the last tick that completed before this call (or shared
        with a render of that tick under way), never older than `max_age`. A failed render raises its error in
        the caller that ran it and SharedRenderError in those that waited for it; the next call renders again."""
        while True:
            with self._lock:
                generation = self._generation()
                last = self._last.get(which)
                if last is not None and last.generation == generation \
                        and self._clock() - last.rendered_at < self._max_age():
                    return last
                flight = self._flights.get(which)
                if flight is None:
                    flight = self._flights[which] = _Flight(generation)
                    mine = True
                else:
                    mine = False
            if mine:
                return self._fly(which, flight)
            if not flight.done.wait(_WAIT_LIMIT):
                raise SharedRenderError(f"{which}: render still under way after {_WAIT_LIMIT:g} s")
            if flight.generation == generation:  # a render of this tick: share its outcome
                if flight.error is not None:
                    raise SharedRenderError(which) from flight.error
                assert flight.result is not None
                return flight.result
            # it began before the tick this caller has seen completed: look again (one caller renders anew)

    def _fly(self, which: str, flight: _Flight) -> Exposition:
        started = self._clock()
        try:
            flight.result = Exposition(self._render(which), flight.generation, started)
            return flight.result
        except BaseException as e:
            flight.error = e
            raise
        finally:
            with self._lock:
                if flight.result is not None:
                    self._last[which] = flight.result
                del self._flights[which]
            flight.done.set()


def accepts_gzip(accept_encoding: str | None) -> bool:
    """Whether an Accept-Encoding header allows gzip (RFC 9110 §12.5.3: `gzip`, else `*`, with a q above 0)."""
    weights: dict[str, float] = {}
    for item in (accept_encoding or "").split(","):
        coding, _, params = item.partition(";")
        q = 1.0
        for param in params.split(";"):
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        weights[coding.strip().lower()] = q
    for coding in ("gzip", "x-gzip", "*"):
        if coding in weights:
            return weights[coding] > 0
    return False
