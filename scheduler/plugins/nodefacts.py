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
    the nodes whose fact is non-empty, so a plugin with nothing to look at answers without walking the nodes.

    `objects_only`: `compute` reads the Node object alone (`obj`: labels, taints, images), never its pods, so the
    pods coming and going change nothing — `get` answers at once while the index's `object_changes` stays, and
    recomputes only the rows whose NodeInfo.object_generation moved."""

    def __init__(self, compute: Callable[[NodeInfo], T], *, objects_only: bool = False) -> None:
        self._compute = compute
        self._tracker = Tracker()
        self._facts: list[T] = []
        self.version = 0
        self.truthy = 0
        self._objects_only = objects_only
        self._objects: list[int] = []  # per row, the object_generation its fact is of (objects_only)
        self._stamp: tuple[NodeIndex | None, int, int] = (None, -1, -1)  # index, epoch, object_changes

    def get(self, index: NodeIndex) -> list[T]:
        objects_only = self._objects_only
        if objects_only:
            stamp = self._stamp
            if stamp[0] is index and stamp[1] == index.epoch and stamp[2] == index.object_changes:
                return self._facts
        changed = self._tracker.changes(index)
        if changed is None:
            self._facts = [self._compute(n) for n in index.nodes]
            self._objects = [n.object_generation for n in index.nodes]
            self.truthy = sum(1 for f in self._facts if f)
            self.version += 1
        elif changed:
            facts, nodes, compute, seen = self._facts, index.nodes, self._compute, self._objects
            different = False
            for i in changed:
                node = nodes[i]
                if objects_only:
                    objects = node.object_generation
                    if objects == seen[i]:
                        continue  # only its pods changed
                    seen[i] = objects
                new = compute(node)
                old = facts[i]
                if new != old:
                    facts[i] = new
                    self.truthy += bool(new) - bool(old)
                    different = True
            if different:
                self.version += 1
        if objects_only:
            self._stamp = (index, index.epoch, index.object_changes)
        return self._facts
