"""Object limiters: how often pods of one workload (or one namespace) may be migrated over a duration.

Upstream: arbitrator/filter.go and controller.go (initObjectLimiters, trackEvictedPod, filterLimitedObject) over
golang.org/x/time/rate token buckets kept in a cache whose entries expire 1.5 × the duration after the last write.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from scheduler.descheduler.config.migration_args import LIMIT_WORKLOAD, ObjectLimiter
from scheduler.descheduler.migration.budget import limiter_burst


@dataclass
class TokenBucket:
    """rate.Limiter: `rate` tokens a second up to `burst`, full when made."""

    rate: float
    burst: int
    tokens: float
    at: float

    def tokens_at(self, now: float) -> float:
        elapsed = max(0.0, round((now - self.at) * 1e9) / 1e9)  # whole nanoseconds, as Go's durations
        return min(float(self.burst), self.tokens + elapsed * self.rate)

    def set_rate(self, rate: float, now: float) -> None:
        self.tokens, self.at, self.rate = self.tokens_at(now), max(now, self.at), rate

    def allow(self, now: float) -> bool:
        """AllowN(now, 1): take a token when there is one."""
        tokens = self.tokens_at(now)
        self.at = max(now, self.at)
        if tokens < 1:
            self.tokens = tokens
            return False
        self.tokens = tokens - 1
        return True


@dataclass(frozen=True)
class Subject:
    """What the limiters key a pod by: its controller's UID ("" for none) and its namespace."""

    workload_uid: str
    namespace: str

    def key(self, kind: str) -> str:
        return self.workload_uid if kind == LIMIT_WORKLOAD else self.namespace


class ObjectLimiters:
    """The buckets of every configured limiter type with a positive duration."""

    def __init__(self, limiters: Mapping[str, ObjectLimiter]) -> None:
        self.limiters = {k: v for k, v in limiters.items() if v.duration > 0}
        self.buckets: dict[tuple[str, str], tuple[TokenBucket, float]] = {}  # (type, key) → bucket, expiry

    def exceeded(self, subject: Subject, now: float) -> bool:
        """A bucket of the pod has less than one token (a pod without a controller is not limited by workload)."""
        for kind in self.limiters:
            bucket = self._bucket(kind, subject, now)
            if bucket is not None and bucket.tokens_at(now) < 1:
                return True
        return False

    def track(self, subject: Subject, max_migrating: Callable[[str, ObjectLimiter], int], now: float) -> None:
        """One pod evicted: take a token from each of its buckets, made (or re-rated) at max_migrating / duration
        tokens a second. A type whose max_migrating is 0 is not tracked (docs/decisions.md: upstream stops tracking
        every type left in its map's random order)."""
        for kind, limiter in self.limiters.items():
            key = subject.key(kind)
            if not key:
                continue
            n = max_migrating(kind, limiter)
            if n <= 0:
                continue
            rate = n / limiter.duration
            bucket = self._bucket(kind, subject, now)
            if bucket is None:
                bucket = TokenBucket(rate, limiter_burst(limiter.burst), 0.0, now)
                bucket.tokens = float(bucket.burst)
            elif bucket.rate != rate:
                bucket.set_rate(rate, now)
            bucket.allow(now)
            self.buckets[(kind, key)] = (bucket, now + 1.5 * limiter.duration)

    def _bucket(self, kind: str, subject: Subject, now: float) -> TokenBucket | None:
        key = subject.key(kind)
        entry = self.buckets.get((kind, key)) if key else None
        if entry is None:
            return None
        if now >= entry[1]:
            del self.buckets[(kind, key)]
            return None
        return entry[0]

