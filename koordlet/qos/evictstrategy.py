"""The eviction strategies' rounds: gate and interval, cool-down, one planner pass, and skip reasons said once.

Upstream: the Run/Enabled/lastEvictTime parts of qosmanager/plugins/memoryevict and cpuevict. A round is split in
two so the daemon can plan on its event loop (the metric cache lives there) and carry the plan out in a thread
(API calls block): `plan` then, when it returned a plan, `finish` with what the evictor did.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from koordlet.config import Config
from koordlet.health import Health
from koordlet.qos import cpuevict, memoryevict
from koordlet.qos.eviction import EvictionPlan
from koordlet.qos.evictor import RoundResult
from koordlet.qos.state import QoSState

log = logging.getLogger(__name__)


class EvictionPlanner(Protocol):
    """An eviction planner (koordlet/qos/memoryevict.py, cpuevict.py: the modules themselves): one round's facts
    read and planned."""

    def plan_round(self, state: QoSState, *, collect_interval: float, now_ms: int,
                   standalone: bool) -> EvictionPlan: ...


@dataclass
class EvictStrategy:
    name: str  # upstream's strategy name (memoryEvict, CPUEvict): log lines and the daemon's loop
    gate: str
    planner: EvictionPlanner
    interval: float
    cool_down: float
    collect_interval: float
    standalone: bool
    health: Health
    last_evict: float | None = None  # monotonic; None: never (the first round may evict)
    clock: Callable[[], float] = time.monotonic
    _said: str | None = None  # the skip reason logged last

    def cooling(self) -> bool:
        return self.last_evict is not None and self.clock() < self.last_evict + self.cool_down

    def plan(self, state: QoSState, now_ms: int | None = None, *, ignore_cool_down: bool = False) -> \
            EvictionPlan | None:
        """The round's plan when there is something to evict; None otherwise (cooling, skipped, below threshold)."""
        if not ignore_cool_down and self.cooling():
            log.debug("skip %s, still in evict cool time", self.name)
            return None
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        plan = self.planner.plan_round(state, collect_interval=self.collect_interval, now_ms=now_ms,
                                       standalone=self.standalone)
        over_without_victims = plan.need > 0 and not plan.candidates
        self._say(plan.skip or (f"{plan.summary}, but there is no BE pod to evict" if over_without_victims else None))
        if plan.need <= 0 or not plan.candidates:
            return None
        log.info("%s: %s", self.name, plan.summary)
        return plan

    def finish(self, result: RoundResult) -> None:
        """A round that evicted starts the cool-down."""
        if result.evicted:
            self.last_evict = self.clock()

    def _say(self, skip: str | None) -> None:
        """A skip reason is logged when it first appears (and again after the strategy got past it), never every
        round: under the chart BECPUEvict skips every second for want of its satisfaction percents."""
        if skip == self._said:
            return
        self._said = skip
        if skip is not None:
            log.warning("%s (gate %s) skipped: %s", self.name, self.gate, skip)


def strategies(config: Config, health: Health, clock: Callable[[], float] = time.monotonic) -> list[EvictStrategy]:
    """The enabled strategies: gate on and interval > 0, and the qosmanager on at all (collect interval ≥ 1 s)."""
    evict = config.evict
    if config.collect_res_used_interval < 1:
        return []
    out = []
    if config.gate(memoryevict.GATE) and evict.memory_evict_interval_seconds > 0:
        out.append(EvictStrategy(memoryevict.STRATEGY, memoryevict.GATE, memoryevict,
                                 evict.memory_evict_interval_seconds, evict.memory_evict_cool_time_seconds,
                                 config.collect_res_used_interval, config.standalone, health, clock=clock))
    if config.gate(cpuevict.GATE) and evict.cpu_evict_interval_seconds > 0:
        # upstream initialises lastEvictTime at start: nothing is evicted in the first cool-down
        out.append(EvictStrategy(cpuevict.STRATEGY, cpuevict.GATE, cpuevict, evict.cpu_evict_interval_seconds,
                                 evict.cpu_evict_cool_time_seconds, config.collect_res_used_interval,
                                 config.standalone, health, last_evict=clock(), clock=clock))
    return out
