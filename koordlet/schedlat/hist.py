"""Pure aggregation of run-queue waits: log2 histograms, per-pod running totals, window deltas and quantiles."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# The kernel side counts a wait of v µs (integer) in slot bpf_log2l(v): slot 0 holds v = 0, slot i ≥ 1 holds
# 2^(i-1) ≤ v < 2^i; waits past the last slot are counted in it.
SLOTS = 32


def slot_upper_seconds(i: int) -> float:
    """The exclusive upper bound of slot i in seconds (slot 0: below 1 µs)."""
    return (1 << i) * 1e-6


def slot_lower_seconds(i: int) -> float:
    return 0.0 if i == 0 else (1 << (i - 1)) * 1e-6


@dataclass(frozen=True, slots=True)
class Totals:
    """Run-queue waits of one pod since it was first seen: `hist` is None where only sum and count are known
    (schedstat)."""

    count: int
    sum_ns: int
    hist: tuple[int, ...] | None = None

    def minus(self, before: Totals | None) -> Totals:
        """The waits between `before` and this reading (a pod first seen now counts from zero)."""
        if before is None:
            return self
        hist = None
        if self.hist is not None and before.hist is not None:
            hist = tuple(max(a - b, 0) for a, b in zip(self.hist, before.hist, strict=True))
        return Totals(max(self.count - before.count, 0), max(self.sum_ns - before.sum_ns, 0), hist)

    def plus(self, other: Totals) -> Totals:
        hist = None
        if self.hist is not None and other.hist is not None:
            hist = tuple(a + b for a, b in zip(self.hist, other.hist, strict=True))
        return Totals(self.count + other.count, self.sum_ns + other.sum_ns, hist)

    @property
    def mean_seconds(self) -> float | None:
        return self.sum_ns / self.count / 1e9 if self.count else None


ZERO_HIST = Totals(0, 0, (0,) * SLOTS)


def quantile(hist: Sequence[int], q: float) -> float | None:
    """The q-quantile (0..1) of a slot histogram, interpolated linearly inside its slot as Prometheus'
    histogram_quantile does; None for an empty histogram."""
    total = sum(hist)
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for i, n in enumerate(hist):
        if n and seen + n >= rank:
            lo, hi = slot_lower_seconds(i), slot_upper_seconds(i)
            return lo + (hi - lo) * max(rank - seen, 0.0) / n
        seen += n
    return slot_upper_seconds(len(hist) - 1)


def cumulative_buckets(hist: Sequence[int], bounds: Sequence[int]) -> list[tuple[float, int]]:
    """(upper bound in seconds, waits below it) at the slot indices `bounds` (ascending), for a Prometheus
    histogram: slot i's waits are all below 2^i µs, so each bucket is exact."""
    out: list[tuple[float, int]] = []
    running, j = 0, 0
    for b in bounds:
        while j <= b and j < len(hist):
            running += hist[j]
            j += 1
        out.append((slot_upper_seconds(b), running))
    return out
