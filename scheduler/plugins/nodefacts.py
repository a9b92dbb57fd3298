"""One fact per node of the index (its taints, labels, host ports, …), recomputed only for the rows that changed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from scheduler.cluster import NodeInfo
from scheduler.nodeindex import NodeIndex, Tracker

T = TypeVar("T")


class NodeFacts(Generic[T]):
    """`get(index)[i]` is `compute(index.nodes[i])` as of the index's last change to node i. A node changes with
    every pod placed on it, its facts seldom: `version` grows only when a fact is different, and `truthy` counts
    the nodes whose fact is non-empty, so a plugin with nothing to look at answers without walking the nodes."""

    def __init__(self, compute: Callable[[NodeInfo], T]) -> None:
        self._compute = compute
        self._tracker = Tracker()
        self._facts: list[T] = []
        self.version = 0
        self.truthy = 0

    def get(self, index: NodeIndex) -> list[T]:
        changed = self._tracker.changes(index)
        if changed is None:
            self._facts = [self._compute(n) for n in index.nodes]
            self.truthy = sum(1 for f in self._facts if f)
            self.version += 1
        elif changed:
            facts, nodes, compute = self._facts, index.nodes, self._compute
            different = False
            for i in changed:
                new = compute(nodes[i])
                old = facts[i]
                if new != old:
                    facts[i] = new
                    self.truthy += bool(new) - bool(old)
                    different = True
            if different:
                self.version += 1
        return self._facts
