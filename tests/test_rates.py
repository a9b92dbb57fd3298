"""Rates of a whole tick at once equal the per-cgroup rule (previous read per id, TTL 20 ticks); the tick as a map."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from koordlet.collectors.rates import PREV_TTL_TICKS, Rates
from koordlet.collectors.usage import CgroupUsage, TickUsage

IDS = [("pod", "a"), ("pod", "b"), ("container", "c"), ("container", "d"), ("hostapp", "e"), ("pod", "f")]


class _PerId:
    """The rule as the collector applied it cgroup by cgroup before the columns."""

    def __init__(self) -> None:
        self.prev: dict[tuple[str, str], tuple[int, int, int, int, int]] = {}

    def read(self, id_: tuple[str, str], now: int, tick: int, cpu_ns: int, periods: int,
             throttled: int) -> tuple[float | None, float | None]:
        prev = self.prev.get(id_)
        self.prev[id_] = (now, cpu_ns, periods, throttled, tick)
        if prev is None or now <= prev[0]:
            return None, None
        delta = cpu_ns - prev[1]
        cpu = delta / (now - prev[0]) if delta >= 0 else None
        dp = periods - prev[2]
        return cpu, (throttled - prev[3]) / dp if dp > 0 else 0.0

    def expire(self, tick: int) -> None:
        self.prev = {k: v for k, v in self.prev.items() if v[4] > tick - PREV_TTL_TICKS}


step = st.one_of(
    st.tuples(st.just("targets"), st.permutations(IDS).flatmap(lambda p: st.integers(0, len(p)).map(lambda k: p[:k]))),
    st.tuples(st.just("tick"), st.integers(0, 3 * 10**9), st.lists(
        st.tuples(st.booleans(), st.integers(0, 2**62), st.integers(0, 10**6), st.integers(0, 10**6)),
        min_size=len(IDS), max_size=len(IDS))),
)


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(step, max_size=70))
def test_rates_follow_the_per_cgroup_rule(steps: list[tuple[object, ...]]) -> None:
    rates, ref = Rates(), _PerId()
    targets: list[tuple[str, str]] = []
    rates.retarget(targets)
    now = tick = 0
    for s in steps:
        if s[0] == "targets":
            targets = list(s[1])  # type: ignore[call-overload]
            rates.retarget(targets)
            continue
        _, dt, reads = s
        now += dt  # type: ignore[operator]
        tick += 1
        rows = [i for i, (read, *_rest) in enumerate(reads[:len(targets)]) if read]  # type: ignore[index]
        counters = [reads[i][1:] for i in rows]  # type: ignore[index]
        cpu, share = rates.update(np.array(rows, dtype=np.intp), now, tick,
                                  *(np.array([c[j] for c in counters], dtype=np.int64) for j in range(3)))
        for k, i in enumerate(rows):
            want_cpu, want_share = ref.read(targets[i], now, tick, *counters[k])
            got_cpu, got_share = float(cpu[k]), float(share[k])
            assert (None if math.isnan(got_cpu) else got_cpu) == want_cpu
            assert (None if math.isnan(got_share) else got_share) == want_share
        if tick % PREV_TTL_TICKS == 0:
            rates.expire(tick)
            ref.expire(tick)
    if not targets or len(set(targets)) == len(targets):
        assert rates.remembered() == len(ref.prev)


def test_tick_usage_maps_the_rows_read_by_id() -> None:
    index = {("pod", "a"): 0, ("container", "c"): 1, ("pod", "gone"): 2}
    usage = TickUsage(index, np.array([True, True, False]), np.array([0.5, np.nan, np.nan]),
                      np.array([10, 20, 0], dtype=np.int64), np.array([11, 21, 0], dtype=np.int64),
                      np.array([0.25, np.nan, np.nan]))
    assert dict(usage) == {("pod", "a"): CgroupUsage(0.5, 10, 11, 0.25),
                           ("container", "c"): CgroupUsage(None, 20, 21, None)}
    assert usage.get(("pod", "gone")) is None and ("pod", "gone") not in usage and len(usage) == 2
    assert type(usage[("pod", "a")].memory) is int
    assert TickUsage.empty() == {}
