"""What an eviction planner decides: the victims in order, what each is credited, and how much must be released.

Planners (koordlet/qos/memoryevict.py, cpuevict.py) are pure functions of a node snapshot; koordlet/qos/evictor.py
carries the plan out. Upstream: pkg/koordlet/qosmanager/plugins/util/evict.go (EvictTaskInfo, KillAndEvictPods).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from apis.core.objects import JSON
from apis.slo.types import NodeSLOSpec
from koordlet.states.model import PodMeta

REASON_EVICTED = "evicted"  # util.EvictedStr: the reason of every v1.7+ eviction, Event and metric
# v1.7 resourceexecutor reasons, named in the message ("trigger by koordlet feature <X>, kill pod: <name>")
TRIGGER = {"BEMemoryEvict": "EvictBEPodByNodeMemoryUsage", "BECPUEvict": "EvictBEPodByBECPUSatisfaction"}


def message(gate: str, pod_name: str) -> str:
    return f"trigger by koordlet feature {TRIGGER.get(gate, gate)}, kill pod: {pod_name}"


@dataclass(frozen=True)
class Eviction:
    """One victim: the pod, upstream's reason and message, and what evicting it releases (bytes or milli-CPU)."""

    pod: PodMeta
    gate: str
    credit: float
    reason: str = REASON_EVICTED
    message: str = ""

    @property
    def key(self) -> str:
        return f"{self.pod.namespace}/{self.pod.name}"

    def as_json(self) -> JSON:
        return {"pod": self.key, "uid": self.pod.uid, "feature": self.gate, "reason": self.reason,
                "message": self.message, "credit": self.credit}


@dataclass(frozen=True)
class EvictionPlan:
    """`candidates` in eviction order with their credits; the evictor takes them until what it credited reaches
    `need` (a candidate it cannot evict is passed over). `skip` says why nothing is to be done (logged once)."""

    gate: str
    need: float = 0.0
    candidates: tuple[Eviction, ...] = ()
    skip: str | None = None
    summary: str = ""  # the numbers behind `need`, for the log line of a round that evicts
    errors: tuple[str, ...] = field(default=())

    @property
    def evictions(self) -> list[Eviction]:
        """The victims if every eviction succeeds: upstream's loop, which stops once the credit reaches `need`."""
        out: list[Eviction] = []
        credited = 0.0
        for e in self.candidates:
            if credited >= self.need:
                break
            out.append(e)
            credited += e.credit
        return out


def feature_disabled(nodeslo_present: bool, nodeslo: NodeSLOSpec) -> str | None:
    """features.IsFeatureDisabled for the suppress/evict gates: why the NodeSLO leaves the strategy off, or None.
    No NodeSLO yet, or `resourceUsedThresholdWithBE.enable` missing or not true, counts as disabled."""
    if not nodeslo_present:
        return "no NodeSLO received yet"
    if not nodeslo.resource_used_threshold_with_be.enable:
        return "NodeSLO resourceUsedThresholdWithBE.enable is not true"
    return None


def spec_priority(pod: PodMeta) -> int | None:
    """`spec.priority`, None when unset (or not an integer)."""
    spec = pod.raw.get("spec")
    value = spec.get("priority") if isinstance(spec, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None
