"""CPU and throttling rates of many cgroups at once, from their cumulative counters and the previous read of each."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from koordlet.collectors.usage import Floats, Int64s, UsageId

# Previous counters are kept this many ticks after a cgroup was last read (upstream: TTL = 20 × interval).
PREV_TTL_TICKS = 20
Rows = npt.NDArray[np.intp]
_Prev = tuple[int, int, int, int, int]  # monotonic ns, CPU ns, periods, throttled periods, tick of one read
_EXACT = 2**53  # ints up to this convert to float64 exactly


class Rates:
    """The previous read of each target, a column per counter (row i: target i of the current list), and of
    targets that left the list within the TTL (a pod briefly missing from a list keeps its rate)."""

    def __init__(self) -> None:
        self._ids: list[UsageId] = []
        self._valid = np.zeros(0, dtype=bool)
        self._prev = np.zeros((5, 0), dtype=np.int64)  # rows as in _Prev
        self._parked: dict[UsageId, _Prev] = {}

    def retarget(self, ids: Sequence[UsageId]) -> None:
        """Follow a new target list: each target keeps its previous read, wherever it was."""
        for i in np.flatnonzero(self._valid).tolist():
            self._parked[self._ids[i]] = tuple(self._prev[:, i].tolist())  # type: ignore[assignment]
        self._ids = list(ids)
        self._valid = np.zeros(len(ids), dtype=bool)
        self._prev = np.zeros((5, len(ids)), dtype=np.int64)
        for i, id_ in enumerate(ids):
            prev = self._parked.get(id_)
            if prev is not None:
                self._valid[i] = True
                self._prev[:, i] = prev
        for id_ in ids:
            self._parked.pop(id_, None)

    def update(self, rows: Rows, now_ns: int, tick: int, cpu_ns: Int64s, periods: Int64s,
               throttled: Int64s) -> tuple[Floats, Floats]:
        """CPU cores and throttled share of `rows` read now (NaN without a previous read; CPU also NaN when the
        counter went back, a recreated cgroup, until the next tick); these reads become the previous ones."""
        valid = self._valid[rows]
        prev_ns, prev_cpu, prev_periods, prev_throttled, _ = self._prev[:, rows]
        rated = valid & (now_ns > prev_ns)
        delta_cpu = cpu_ns - prev_cpu
        cpu = np.full(len(rows), np.nan)
        ok = rated & (delta_cpu >= 0)
        cpu[ok] = _divide(delta_cpu[ok], now_ns - prev_ns[ok])
        delta_periods = periods - prev_periods
        share = np.zeros(len(rows))
        some = delta_periods > 0
        share[some] = _divide((throttled - prev_throttled)[some], delta_periods[some])
        share[~rated] = np.nan
        self._valid[rows] = True
        prev = self._prev
        prev[0, rows], prev[1, rows], prev[2, rows], prev[3, rows], prev[4, rows] = (
            now_ns, cpu_ns, periods, throttled, tick)
        return cpu, share

    def expire(self, tick: int) -> None:
        """Forget reads older than the TTL (checked every PREV_TTL_TICKS ticks, as upstream's cleanup)."""
        horizon = tick - PREV_TTL_TICKS
        self._valid &= self._prev[4] > horizon
        self._parked = {k: v for k, v in self._parked.items() if v[4] > horizon}

    def remembered(self) -> int:
        return int(self._valid.sum()) + len(self._parked)


def _divide(num: Int64s, den: Int64s) -> Floats:
    """num / den as Python divides ints: correctly rounded. int64 arrays divide as float64, which is the same
    while both sides are within 2**53 (a CPU delta of 104 days); beyond, the quotient is taken from the ints."""
    out: Floats = num / den
    big = (np.abs(num) > _EXACT) | (np.abs(den) > _EXACT)
    if big.any():
        for i in np.flatnonzero(big).tolist():
            out[i] = int(num[i]) / int(den[i])
    return out
