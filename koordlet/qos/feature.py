"""The QoS feature interface the manager runs each pass: facts read, a pure plan, and what the plan hands back."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from koordlet.health import Health
from koordlet.qos.cpusuppress import SuppressStatus
from koordlet.qos.model import Capability, Plan, Report
from koordlet.qos.state import QoSState
from koordlet.qos.steady import SteadyFacts

F = TypeVar("F")


@dataclass(frozen=True)
class FeatureResult:
    """What one feature's plan hands the manager: its writes and errors, and the status it decided (read by the
    exporter through the manager; no planner writes into an object another thread reads)."""

    plan: Plan
    suppress: SuppressStatus | None = None  # BE CPU suppress: koordlet_be_suppress_*


@dataclass(frozen=True)
class Prepared:
    """A feature's facts for this pass, what they say about the host, and the plan they lead to (not yet made).

    The manager compares `facts` with the last pass's (same pods and NodeSLO: SteadyFacts.inputs): equal facts give
    the last result again without calling `plan`, since planners are pure functions of (state, facts)."""

    facts: object
    reports: tuple[Report, ...]
    plan: Callable[[], FeatureResult]


class QoSFeature(Protocol):
    """One QoS feature: `prepare` reads its host facts (raising stops only this feature, for this pass)."""

    @property
    def name(self) -> str: ...

    def prepare(self, state: QoSState, steady: SteadyFacts) -> Prepared: ...


class PlannedFeature(ABC, Generic[F]):
    """A feature as read_facts then a pure plan over facts of type F; `reports` says what the facts tell about the
    kernel (none by default)."""

    name: str

    @abstractmethod
    def read_facts(self, state: QoSState, steady: SteadyFacts) -> F: ...

    @abstractmethod
    def plan(self, state: QoSState, facts: F) -> FeatureResult: ...

    def reports(self, facts: F) -> tuple[Report, ...]:
        return ()

    def prepare(self, state: QoSState, steady: SteadyFacts) -> Prepared:
        facts = self.read_facts(state, steady)
        return Prepared(facts, self.reports(facts), lambda: self.plan(state, facts))


def record(health: Health, reports: Iterable[Report]) -> None:
    """A feature's reports into the agent's health: capabilities (metric, a missing one logged once) and notices."""
    for report in reports:
        if isinstance(report, Capability):
            health.capability(report.name, report.supported, report.detail, fallback=report.fallback)
        else:
            health.once(report.key, logging.INFO, "%s", report.text)
