"""Exponentially bucketed histograms whose sample weights decay with a half-life, and their checkpoints.

Upstream: pkg/util/histogram (from the Kubernetes VPA recommender): histogram_options.go (exponential buckets),
histogram.go (weights, percentiles, checkpoints scaled to MaxCheckpointWeight), decaying_histogram.go (weights
grow 2^(t/halfLife) from a reference time, renormalised when that exponent passes maxDecayExponent).
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field

from apis.core.objects import JSON

MAX_CHECKPOINT_WEIGHT = 10000
MAX_DECAY_EXPONENT = 100


@dataclass(frozen=True)
class ExponentialBuckets:
    """Bucket i starts at first × (ratio^i − 1) / (ratio − 1); the last one is open ended."""

    max_value: float
    first: float
    ratio: float
    epsilon: float
    count: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "count", math.ceil(math.log(self.max_value * (self.ratio - 1) / self.first + 1) /
                                                    math.log(self.ratio)) + 1)

    def find(self, value: float) -> int:
        if value < self.first:
            return 0
        bucket = int(math.log(value * (self.ratio - 1) / self.first + 1) / math.log(self.ratio))
        return min(bucket, self.count - 1)

    def start(self, bucket: int) -> float:
        if bucket == 0:
            return 0.0
        return self.first * (self.ratio ** bucket - 1) / (self.ratio - 1)


@dataclass(frozen=True)
class LinearBuckets:
    """Buckets of equal size (histogram_options.go NewLinearHistogramOptions); upstream's tests are written on
    these."""

    max_value: float
    size: float
    epsilon: float
    count: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "count", math.ceil(self.max_value / self.size) + 1)

    def find(self, value: float) -> int:
        return min(max(int(value / self.size), 0), self.count - 1)

    def start(self, bucket: int) -> float:
        return bucket * self.size


def _go_time(ts: float) -> str:
    """RFC 3339 with nanoseconds, as Go's time.Time marshals (UTC)."""
    whole = math.floor(ts)
    nanos = round((ts - whole) * 1e9)
    base = dt.datetime.fromtimestamp(whole, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{base}.{nanos:09d}".rstrip("0").rstrip(".") + "Z"


def parse_go_time(text: object) -> float:
    """A Go RFC 3339 time (any fraction) as a Unix timestamp; the zero time "0001-01-01T00:00:00Z" is 0."""
    s = str(text)
    if s.startswith("0001-01-01"):
        return 0.0
    head, _, frac = s.rstrip("Z").partition(".")
    offset = ""
    for sign in "+-":
        if sign in frac:
            frac, _, rest = frac.partition(sign)
            offset = sign + rest
    when = dt.datetime.fromisoformat(head + (offset or "+00:00"))
    return when.timestamp() + (float("0." + frac) if frac else 0.0)


class DecayingHistogram:
    """A histogram of (value, weight) samples where a sample at time t weighs 2^((t − reference) / halfLife)."""

    __slots__ = ("buckets", "half_life", "max_bucket", "min_bucket", "reference", "total", "weights")

    def __init__(self, buckets: ExponentialBuckets | LinearBuckets, half_life: float) -> None:
        self.buckets = buckets
        self.half_life = half_life
        n = buckets.count
        self.weights = [0.0] * n
        self.total = 0.0
        self.min_bucket, self.max_bucket = n - 1, 0
        self.reference = 0.0  # Go's zero time, rounded to the half-life grid when first shifted

    def _decay_factor(self, ts: float) -> float:
        if ts > self.reference + self.half_life * MAX_DECAY_EXPONENT:
            self._shift_reference(ts)
        return float(2.0 ** ((ts - self.reference) / self.half_life))

    def _shift_reference(self, ts: float) -> None:
        # time.Round(halfLife); Go rounds from year 1, the same grid as the Unix epoch for whole-hour half-lives
        new_ref = math.floor(ts / self.half_life + 0.5) * self.half_life
        exponent = math.floor((self.reference - new_ref) / self.half_life + 0.5)
        self._scale(math.ldexp(1.0, exponent))
        self.reference = new_ref

    def _scale(self, factor: float) -> None:
        for b in range(self.min_bucket, self.max_bucket + 1):
            self.weights[b] *= factor
        self.total *= factor
        self._update_min_max()

    def _update_min_max(self) -> None:
        eps, last = self.buckets.epsilon, self.buckets.count - 1
        while self.weights[self.min_bucket] < eps and self.min_bucket < last:
            self.min_bucket += 1
        while self.weights[self.max_bucket] < eps and self.max_bucket > 0:
            self.max_bucket -= 1

    def add(self, value: float, weight: float, ts: float) -> None:
        weight *= self._decay_factor(ts)
        b = self.buckets.find(value)
        self.weights[b] += weight
        self.total += weight
        eps = self.buckets.epsilon
        if b < self.min_bucket and self.weights[b] >= eps:
            self.min_bucket = b
        if b > self.max_bucket and self.weights[b] >= eps:
            self.max_bucket = b

    @property
    def empty(self) -> bool:
        return self.weights[self.min_bucket] < self.buckets.epsilon

    def percentile(self, p: float) -> float:
        """The start of the bucket after the one where the cumulative weight reaches p × total."""
        if self.empty:
            return 0.0
        threshold, partial = p * self.total, 0.0
        b = self.min_bucket
        while b < self.max_bucket:
            partial += self.weights[b]
            if partial >= threshold:
                break
            b += 1
        return self.buckets.start(b + 1) if b < self.buckets.count - 1 else self.buckets.start(b)

    def checkpoint(self) -> JSON:
        """HistogramCheckpoint JSON: bucket weights scaled so the largest is 10000 (empty ones left out)."""
        top = max((self.weights[b] for b in range(self.min_bucket, self.max_bucket + 1)), default=0.0)
        ratio = MAX_CHECKPOINT_WEIGHT / top if top > 0 else 0.0
        weights = {}
        for b in range(self.min_bucket, self.max_bucket + 1):
            w = math.floor(self.weights[b] * ratio + 0.5)
            if w > 0:
                weights[str(b)] = w
        out: JSON = {"referenceTimestamp": _go_time(self.reference) if self.reference else
                               "0001-01-01T00:00:00Z"}
        if weights:
            out["bucketWeights"] = weights
        if self.total:
            out["totalWeight"] = self.total
        return out

    def load(self, ckpt: JSON) -> None:
        """Add a checkpoint's weights (rescaled to its total weight); ValueError when it does not fit."""
        total = float(ckpt.get("totalWeight") or 0.0)
        if total < 0:
            raise ValueError(f"negative total weight {total}")
        raw = ckpt.get("bucketWeights") or {}
        weights = {int(b): int(w) for b, w in raw.items()}
        for b in weights:
            if not 0 <= b < self.buckets.count:
                raise ValueError(f"bucket {b} outside 0..{self.buckets.count - 1}")
        self.reference = parse_go_time(ckpt.get("referenceTimestamp", "0001-01-01T00:00:00Z"))
        s = sum(weights.values())
        if s == 0:
            return
        ratio = total / s
        for b, w in weights.items():
            self.min_bucket, self.max_bucket = min(self.min_bucket, b), max(self.max_bucket, b)
            self.weights[b] += w * ratio
        self.total += total
