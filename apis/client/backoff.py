"""Exponential backoff with jitter as apimachinery computes it (wait.Backoff.Step, NewExponentialBackoffManager)."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    """Waits start at `initial`, grow by `factor` up to `cap`; each is stretched by up to `jitter` times itself
    (apimachinery's Jitter: d + rand·jitter·d). `reset_after` > 0: back to `initial` once no wait was asked for
    that long (NewExponentialBackoffManager's backoffResetDuration)."""

    initial: float
    cap: float
    factor: float = 2.0
    jitter: float = 1.0
    reset_after: float = 0.0

    def __post_init__(self) -> None:
        if not (self.initial > 0 and self.cap >= self.initial and self.factor >= 1 and self.jitter >= 0
                and self.reset_after >= 0):
            raise ValueError(f"invalid backoff policy {self}")

    def min_waits_within(self, seconds: float) -> int:
        """How many waits fit in `seconds` at most (every jitter at its minimum, no reset): the ceiling on the
        attempts a loop under this policy makes in that time is this plus one."""
        n, total, d = 0, 0.0, self.initial
        while total + d <= seconds + 1e-9:
            total += d
            n += 1
            if d >= self.cap:  # every later wait is the cap: count them at once
                extra = math.floor((seconds - total) / self.cap + 1e-9)
                return n + extra
            d = min(d * self.factor, self.cap)
        return n


# client-go tools/cache/reflector.go (NewReflectorWithOptions): wait.NewExponentialBackoffManager(800ms, 30s, 2min,
# 2.0, 1.0). First wait in [0.8, 1.6) s, doubling up to the 30 s cap, so [30, 60) s between tries at worst; the
# manager starts over at 800 ms when it was not asked for a wait during 2 minutes.
REFLECTOR = BackoffPolicy(initial=0.8, cap=30.0, factor=2.0, jitter=1.0, reset_after=120.0)


class ExponentialBackoff:
    """The waits of one retrying loop under a policy (not thread-safe: one per loop)."""

    def __init__(self, policy: BackoffPolicy, *, clock: Callable[[], float] = time.monotonic,
                 rand: Callable[[], float] = random.random) -> None:
        self.policy = policy
        self._clock = clock
        self._rand = rand
        self._duration = policy.initial
        self._last = clock()  # upstream's lastBackoffStart starts at creation

    def next(self) -> float:
        """The next wait in seconds (apimachinery exponentialBackoffManagerImpl.getNextBackoff + Backoff.Step)."""
        p = self.policy
        now = self._clock()
        if p.reset_after > 0 and now - self._last > p.reset_after:
            self._duration = p.initial
        self._last = now
        d = self._duration
        self._duration = min(d * p.factor, p.cap)
        return d + self._rand() * p.jitter * d if p.jitter > 0 else d

    def reset(self) -> None:
        self._duration = self.policy.initial
