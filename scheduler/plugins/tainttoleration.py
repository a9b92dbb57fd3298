"""kube-scheduler's TaintToleration: Filter on NoSchedule/NoExecute taints the pod does not tolerate; Score counts the
PreferNoSchedule ones, normalized in reverse (the fewest intolerable taints score 100)."""

from __future__ import annotations

import numpy as np

from apis.core.objects import JSON
from apis.core.taints import (
    NO_EXECUTE,
    NO_SCHEDULE,
    PREFER_NO_SCHEDULE,
    first_untolerated,
    node_taints,
    pod_tolerations,
    tolerated,
)
from scheduler.cluster import Cluster, NodeInfo
from scheduler.nodeindex import BoolArray, IntArray, NodeIndex
from scheduler.plugins.nodefacts import NodeFacts
from scheduler.plugins.normalize import default_normalize

_HARD = (NO_SCHEDULE, NO_EXECUTE)
Taints = tuple[tuple[str, str, str], ...]  # (key, value, effect), in the node's order


def _hard_taints(node: NodeInfo) -> Taints:
    return _taints(node)[0]


def _soft_taints(node: NodeInfo) -> Taints:
    return _taints(node)[1]


def _taints(node: NodeInfo) -> tuple[Taints, Taints]:
    """(NoSchedule/NoExecute taints, PreferNoSchedule taints) of the node."""
    hard: list[tuple[str, str, str]] = []
    soft: list[tuple[str, str, str]] = []
    for t in node_taints(node.obj):
        entry = (t["key"], str(t.get("value") or ""), str(t.get("effect") or ""))
        if entry[2] in _HARD:
            hard.append(entry)
        elif entry[2] == PREFER_NO_SCHEDULE:
            soft.append(entry)
    return tuple(hard), tuple(soft)


def _as_json(taint: tuple[str, str, str]) -> JSON:
    return {"key": taint[0], "value": taint[1], "effect": taint[2]}


def reason(taint: JSON) -> str:
    return f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value') or ''}}}"


def _prefer_tolerations(pod: JSON) -> list[JSON]:
    """getAllTolerationPreferNoSchedule: the tolerations whose effect is empty or PreferNoSchedule."""
    return [t for t in pod_tolerations(pod) if (t.get("effect") or "") in ("", PREFER_NO_SCHEDULE)]


def intolerable(soft: Taints, tolerations: list[JSON]) -> int:
    return sum(not tolerated(tolerations, _as_json(t)) for t in soft)


class TaintToleration:
    name = "TaintToleration"

    def __init__(self, weight: int = 3) -> None:
        self.weight = weight
        self._hard = NodeFacts(_hard_taints, objects_only=True)
        self._soft = NodeFacts(_soft_taints, objects_only=True)

    def sync(self, index: NodeIndex) -> None:
        self._hard.get(index)
        self._soft.get(index)

    def quiet(self, pod: JSON, index: NodeIndex) -> int | None:
        """No node has a NoSchedule, NoExecute or PreferNoSchedule taint: every node passes, every raw score is 0
        (scheduler.interfaces' QuietPlugin)."""
        self._hard.get(index)
        self._soft.get(index)
        return None if self._hard.truthy or self._soft.truthy else 0

    def filter(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> str | None:
        taint = first_untolerated(node_taints(node.obj), pod_tolerations(pod), _HARD)
        return None if taint is None else reason(taint)

    def prefilter_vector(self, pod: JSON, index: NodeIndex) -> BoolArray | None:
        facts = self._hard.get(index)
        if not self._hard.truthy:
            return None
        tolerations = pod_tolerations(pod)
        verdict: dict[Taints, bool] = {(): True}  # nodes share taint sets: each set is judged once
        ok = np.empty(len(facts), dtype=np.bool_)
        for i, hard in enumerate(facts):
            fits = verdict.get(hard)
            if fits is None:
                fits = verdict[hard] = not any(not tolerated(tolerations, _as_json(t)) for t in hard)
            ok[i] = fits
        return ok

    def score(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> int:
        """The raw count of intolerable PreferNoSchedule taints (normalize turns it into 0..100)."""
        return intolerable(_taints(node)[1], _prefer_tolerations(pod))

    def score_vector(self, pod: JSON, index: NodeIndex) -> IntArray | int:
        facts = self._soft.get(index)
        if not self._soft.truthy:
            return 0
        counts = np.zeros(len(facts), dtype=np.int64)
        tolerations = _prefer_tolerations(pod)
        seen: dict[Taints, int] = {(): 0}
        for i, soft in enumerate(facts):
            c = seen.get(soft)
            if c is None:
                c = seen[soft] = intolerable(soft, tolerations)
            counts[i] = c
        return counts

    def normalize(self, scores: IntArray, top: int) -> IntArray:
        return default_normalize(scores, top, reverse=True)
