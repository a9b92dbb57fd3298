"""What a vector cycle still calls once the plugins quiet about its pod are left out (scheduler.interfaces'
QuietPlugin), worked out once per combination of the plugins' answers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from apis.core.objects import JSON
from scheduler.interfaces import (
    FilterPlugin,
    NormalizeScorePlugin,
    Plugin,
    PreFilterPlugin,
    PreScorePlugin,
    QuietPlugin,
    ScorePlugin,
    VectorFilterPlugin,
    VectorScorePlugin,
)
from scheduler.nodeindex import NodeIndex

MAX_PLANS = 64  # combinations of answers kept (a workload's pods give one or two)

FilterStep = tuple[int, FilterPlugin, VectorFilterPlugin | None]  # (position in the profile's filters, …)
ScoreStep = tuple[int, ScorePlugin, VectorScorePlugin | None, NormalizeScorePlugin | None]


class Steps(Protocol):
    """The profile's plugins per extension point (scheduler.framework.Profile)."""

    @property
    def plugins(self) -> Sequence[Plugin]: ...

    @property
    def prefilters(self) -> Sequence[PreFilterPlugin]: ...

    @property
    def filters(self) -> Sequence[FilterPlugin]: ...

    @property
    def filter_vectors(self) -> Sequence[VectorFilterPlugin | None]: ...

    @property
    def prescorers(self) -> Sequence[PreScorePlugin]: ...

    @property
    def scorers(self) -> Sequence[ScorePlugin]: ...

    @property
    def score_vectors(self) -> Sequence[VectorScorePlugin | None]: ...

    @property
    def normalizers(self) -> Sequence[NormalizeScorePlugin | None]: ...


def uniform_score(scorer: ScorePlugin, norm: NormalizeScorePlugin | None, raw: int) -> int:
    """The weighted, clipped share of every node's total of a scorer giving every node `raw`."""
    v = raw if norm is None else int(norm.normalize(np.array([raw], dtype=np.int64), raw)[0])
    return scorer.weight * max(0, min(100, v))


class Plan:
    """One combination of quiet answers (`quiet`: id of a quiet plugin → its raw score on every node): the hooks the
    cycle still calls, in profile order, and the quiet scorers' share of every node's total (`uniform`)."""

    def __init__(self, steps: Steps, quiet: dict[int, int]) -> None:
        self._quiet = frozenset(quiet)

        def loud(p: object) -> bool:
            return id(p) not in quiet

        self.prefilters = tuple(p for p in steps.prefilters if loud(p))
        self.filters: tuple[FilterStep, ...] = tuple(
            (j, f, vf) for j, (f, vf) in enumerate(zip(steps.filters, steps.filter_vectors, strict=True)) if loud(f))
        self.every_filter = tuple(f for f in steps.filters if loud(f))
        self.hushed_filters = tuple(f.name for f in steps.filters if not loud(f))  # for the per-plugin metrics
        self.prescorers = tuple(p for p in steps.prescorers if loud(p))
        triples = zip(steps.scorers, steps.score_vectors, steps.normalizers, strict=True)
        self.scorers: tuple[ScoreStep, ...] = tuple((j, s, vs, norm) for j, (s, vs, norm) in enumerate(triples)
                                                    if loud(s))
        self.hushed_scorers = tuple(s.name for s in steps.scorers if not loud(s))
        self.quiet_scorers = tuple(not loud(s) for s in steps.scorers)  # aligned with the profile's scorers
        self.uniform = sum(uniform_score(s, norm, quiet[id(s)])
                           for s, norm in zip(steps.scorers, steps.normalizers, strict=True) if not loud(s))
        self._narrowed: dict[int, tuple[Sequence[FilterPlugin], tuple[FilterPlugin, ...]]] = {}

    def filters_of(self, filters: Sequence[FilterPlugin] | None) -> tuple[FilterPlugin, ...]:
        """`filters` (None: the profile's every one) but the quiet ones."""
        if filters is None:
            return self.every_filter
        hit = self._narrowed.get(id(filters))
        if hit is None or hit[0] is not filters:
            hit = self._narrowed[id(filters)] = (filters, tuple(f for f in filters if id(f) not in self._quiet))
        return hit[1]


class Plans:
    """The profile's plans by the quiet plugins' answers for a pod."""

    def __init__(self, steps: Steps) -> None:
        self._steps = steps
        self._asks = tuple(p.quiet for p in steps.plugins if isinstance(p, QuietPlugin))
        self._askers = tuple(p for p in steps.plugins if isinstance(p, QuietPlugin))
        self.everything = Plan(steps, {})  # nothing left out
        self._plans: dict[tuple[int | None, ...], Plan] = {}

    def plan(self, pod: JSON, index: NodeIndex) -> Plan:
        """Every quiet plugin asked about the pod (after the cycle hooks ran), and the plan of their answers."""
        if not self._asks:
            return self.everything
        answers = tuple([ask(pod, index) for ask in self._asks])
        plan = self._plans.get(answers)
        if plan is None:
            if len(self._plans) >= MAX_PLANS:
                self._plans.clear()
            quiet = {id(p): a for p, a in zip(self._askers, answers, strict=True) if a is not None}
            plan = self._plans[answers] = Plan(self._steps, quiet) if quiet else self.everything
        return plan
