"""apis.client.backoff and apis.client.listwatch against client-go's reflector rules, with scripted list/watch calls."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from apis.client.backoff import REFLECTOR, BackoffPolicy, ExponentialBackoff
from apis.client.kubeapi import Gone, Unreachable
from apis.client.listwatch import SHORT_WATCH, list_and_watch
from apis.core.errors import ApiError


class FakeClock:
    """Time moves only when a loop waits (or a scripted watch says it lived)."""

    def __init__(self) -> None:
        self.t = 0.0
        self.waits: list[float] = []

    def now(self) -> float:
        return self.t

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        self.waits.append(seconds)
        self.t += seconds
        return stop.is_set()


def test_reflector_policy_is_client_gos() -> None:
    assert BackoffPolicy(initial=0.8, cap=30.0, factor=2.0, jitter=1.0, reset_after=120.0) == REFLECTOR


def test_waits_double_to_the_cap_with_jitter_up_to_one_step() -> None:
    clock = FakeClock()
    low = ExponentialBackoff(REFLECTOR, clock=clock.now, rand=lambda: 0.0)
    high = ExponentialBackoff(REFLECTOR, clock=clock.now, rand=lambda: 0.999)
    lows = [low.next() for _ in range(9)]
    highs = [high.next() for _ in range(9)]
    assert lows == pytest.approx([0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0, 30.0])
    assert highs == pytest.approx([2 * d for d in lows], rel=1e-3)


def test_backoff_resets_only_after_two_quiet_minutes() -> None:
    clock = FakeClock()
    b = ExponentialBackoff(REFLECTOR, clock=clock.now, rand=lambda: 0.0)
    for _ in range(6):
        clock.t += 59.0  # failures a minute apart: never quiet for 2 minutes
        b.next()
    assert b.next() == pytest.approx(30.0)
    clock.t += 119.0
    assert b.next() == pytest.approx(30.0)
    clock.t += 121.0
    assert b.next() == pytest.approx(0.8)


def test_min_waits_within() -> None:
    assert REFLECTOR.min_waits_within(0.7) == 0
    assert REFLECTOR.min_waits_within(2.4) == 2  # 0.8 + 1.6
    assert REFLECTOR.min_waits_within(50.4) == 6  # ... + 25.6
    assert REFLECTOR.min_waits_within(50.4 + 95) == 9  # then 30 s each
    with pytest.raises(ValueError):
        BackoffPolicy(initial=0.0, cap=1.0)


class Script:
    """Scripted API: `watches` is a list of (events, then) — `then` an exception to raise after the events, or a
    number of seconds the watch lived before ending normally."""

    def __init__(self, clock: FakeClock, stop: threading.Event, watches: list[tuple[list[str], Any]],
                 list_errors: list[Exception] | None = None) -> None:
        self.clock, self.stop = clock, stop
        self.watches = watches
        self.list_errors = list(list_errors or [])
        self.calls: list[str] = []
        self.events: list[str] = []

    def list(self) -> str:
        self.calls.append("list")
        if self.list_errors:
            raise self.list_errors.pop(0)
        return "10"

    def watch(self, rv: str | None) -> Iterator[dict[str, Any]]:
        self.calls.append(f"watch@{rv}")
        if not self.watches:
            self.stop.set()
            return
        events, then = self.watches.pop(0)
        for rv_ in events:
            yield {"type": "MODIFIED", "object": {"metadata": {"resourceVersion": rv_}}}
        if isinstance(then, Exception):
            raise then
        self.clock.t += then

    def run(self) -> None:
        def on_event(event: dict[str, Any]) -> None:
            self.events.append(event["object"]["metadata"]["resourceVersion"])

        list_and_watch(self.stop, self.list, self.watch, on_event, clock=self.clock, on_error=lambda e, w: None)


def _script(watches: list[tuple[list[str], Any]], **kw: Any) -> tuple[Script, FakeClock]:
    clock = FakeClock()
    script = Script(clock, threading.Event(), watches, **kw)
    script.run()
    return script, clock


def test_a_watch_that_lived_is_watched_again_at_once_from_its_last_version() -> None:
    s, clock = _script([([], 300.0), (["11", "12"], 0.0)])
    assert s.calls == ["list", "watch@10", "watch@10", "watch@12"]
    assert s.events == ["11", "12"] and clock.waits == []


def test_a_very_short_watch_is_a_failure_and_lists_again() -> None:
    s, clock = _script([([], SHORT_WATCH / 2), ([], SHORT_WATCH / 2)])
    assert s.calls == ["list", "watch@10", "list", "watch@10", "list", "watch@10"]
    assert len(clock.waits) == 2 and clock.waits[1] >= 2 * REFLECTOR.initial


def test_unreachable_or_429_watch_resumes_from_its_version_after_a_wait() -> None:
    s, clock = _script([(["11"], Unreachable("reset")), ([], ApiError(429, "slow down")), (["12"], 5.0)])
    assert s.calls == ["list", "watch@10", "watch@11", "watch@11", "watch@12"]
    assert len(clock.waits) == 2


def test_gone_and_other_errors_list_again_after_a_wait() -> None:
    s, clock = _script([([], Gone("too old")), ([], ApiError(500, "etcd")), ([], 5.0)])
    assert s.calls == ["list", "watch@10", "list", "watch@10", "list", "watch@10", "watch@10"]
    assert len(clock.waits) == 2 and clock.waits[1] >= 2 * REFLECTOR.initial


def test_failed_lists_wait_and_never_watch_without_a_list() -> None:
    s, clock = _script([([], 5.0)], list_errors=[ApiError(500, "a"), Unreachable("b")])
    assert s.calls == ["list", "list", "list", "watch@10", "watch@10"]
    assert len(clock.waits) == 2


def test_a_lists_retry_after_lengthens_the_wait_up_to_twice_the_cap() -> None:
    slow, rude = ApiError(429, "slow down"), ApiError(503, "later")
    slow.retry_after, rude.retry_after = 7.0, 86400.0
    _, clock = _script([([], 5.0)], list_errors=[slow, rude])
    assert clock.waits[0] >= 7.0 and clock.waits[1] == 2 * REFLECTOR.cap


def test_stop_during_a_wait_ends_the_loop() -> None:
    stop = threading.Event()
    calls: list[str] = []

    class Stopping(FakeClock):
        def wait(self, stop_: threading.Event, seconds: float) -> bool:
            stop_.set()
            return True

    def failing_list() -> str:
        calls.append("list")
        raise ApiError(500, "x")

    list_and_watch(stop, failing_list, lambda rv: iter(()), lambda e: None, clock=Stopping(),
                   on_error=lambda e, w: None)
    assert calls == ["list"]


def test_no_watch_opens_after_a_stop_that_came_during_the_list() -> None:
    """The cache's stop() sets the event and closes the client (aborting the open watches): a watch opened after
    that would live until the server ends it."""
    stop = threading.Event()
    watches: list[str | None] = []

    def list_fn() -> str:
        stop.set()
        return "7"

    def watch_fn(rv: str | None) -> Iterator[dict[str, Any]]:
        watches.append(rv)
        return iter(())

    list_and_watch(stop, list_fn, watch_fn, lambda e: None, clock=FakeClock())
    assert watches == []

