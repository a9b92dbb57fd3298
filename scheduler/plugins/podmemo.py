"""What a vector plugin keeps of the pod being scheduled: its parsed terms, Filter's state and Score's vector."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from apis.core.labelselector import SelectorError
from apis.core.objects import JSON
from scheduler.nodeindex import BoolArray, IntArray, NodeIndex

T = TypeVar("T")
Stamp = tuple[int, int, int]


def index_stamp(index: NodeIndex) -> Stamp:
    """Changes whenever a node of the index changes (a pod placed or removed, a label edited)."""
    return id(index), index.epoch, index.log_start + len(index.log)


class ParsedPod(Generic[T]):
    """The last pod's parse (or the SelectorError it raised), read again only for another pod object."""

    def __init__(self, parse: Callable[[JSON], T], nothing: T) -> None:
        self._parse = parse
        self._last: tuple[JSON | None, T | SelectorError] = (None, nothing)

    def get(self, pod: JSON) -> T | SelectorError:
        seen, parsed = self._last
        if pod is not seen:
            try:
                parsed = self._parse(pod)
            except SelectorError as e:
                parsed = e
            self._last = (pod, parsed)
        return parsed


class StampedState(Generic[T]):
    """The last pod's state over an index, computed again when the pod or a node of the index changes."""

    def __init__(self, compute: Callable[[JSON, NodeIndex], T], nothing: T) -> None:
        self._compute = compute
        self._last: tuple[JSON | None, Stamp, T] = (None, (0, 0, 0), nothing)

    def get(self, pod: JSON, index: NodeIndex) -> T:
        stamp = index_stamp(index)
        seen, when, state = self._last
        if pod is seen and when == stamp:
            return state
        state = self._compute(pod, index)
        self._last = (pod, stamp, state)
        return state


ScoreCompute = Callable[[JSON, NodeIndex, "BoolArray | None"], "IntArray | int"]


class ScoreMemo:
    """PreScore's candidates for the pod, and Score's last vector per pod, index stamp and candidates (the
    candidates only while they are the pod's and cover the index)."""

    def __init__(self, compute: ScoreCompute) -> None:
        self._compute = compute
        self._candidates: tuple[JSON | None, BoolArray | None] = (None, None)
        self._scored: tuple[JSON | None, Stamp, int, IntArray | int] = (None, (0, 0, 0), 0, 0)

    def prescore(self, pod: JSON, candidates: BoolArray) -> None:
        self._candidates = (pod, candidates)

    def get(self, pod: JSON, index: NodeIndex) -> IntArray | int:
        stamp = index_stamp(index)
        seen, cand = self._candidates
        candidates = cand if pod is seen and cand is not None and len(cand) == len(index) else None
        s_pod, s_when, s_cand, s_got = self._scored
        if s_pod is pod and s_when == stamp and s_cand == id(candidates):
            return s_got
        got = self._compute(pod, index, candidates)
        self._scored = (pod, stamp, id(candidates), got)
        return got

    def node_score(self, pod: JSON, index: NodeIndex, node: str, missing: int) -> int:
        """One node's score from the vector (a uniform int as it is); `missing` for a node outside the index."""
        got = self.get(pod, index)
        if isinstance(got, int):
            return got
        row = index.pos.get(node)
        return missing if row is None else int(got[row])
