"""Host facts that change only with the pods, the NodeSLO or the kernel's set-up, kept between reconcile passes.

A steady pass (nothing changed) must not re-read what cannot have changed: the block device inventory, the CPU's
resctrl capabilities, the kernel's CPU QoS interfaces, the pod dirs on disk. Everything kept here is dropped at once
when the pods or the NodeSLO differ from the previous pass, or when the executor's force-update window
(`--resource-force-update-seconds`) has elapsed since it was read, so a kept fact is never older than what the
executor itself trusts without reading the file. Facts that writes depend on for their value (current file content,
resctrl tasks) are not kept: they are read every pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from apis.core.objects import JSON
from koordlet.qos.state import QoSState
from koordlet.states.model import PodMeta

T = TypeVar("T")


class SteadyFacts:
    def __init__(self, window: float, clock: Callable[[], float]) -> None:
        self.window = window
        self.clock = clock
        self.generation = 0  # bumped whenever the kept facts are dropped
        # bumped when they are dropped for another reason than the window (pods, NodeSLO or host roots changed, or
        # drop()): between two passes of one `inputs`, a planner given equal facts plans the same
        self.inputs = 0
        self._dropped = True
        self._facts: JSON = {}
        self._since: float | None = None
        self._pods: Sequence[PodMeta] = ()
        self._rest: tuple[object, ...] = ()

    def begin(self, state: QoSState) -> bool:
        """Start a pass: keep the facts when the node's inputs are those of the last pass and the window has not
        elapsed, else drop them. Returns whether they were kept."""
        now = self.clock()
        rest = (state.paths, state.cgroup_version, state.driver, state.nodeslo_present, state.nodeslo,
                state.host_apps)
        same_inputs = not self._dropped and rest == self._rest and same_pods(state.pods, self._pods)
        kept = same_inputs and self._since is not None and now - self._since < self.window
        if not kept:
            self._facts.clear()
            self._since = now
            self.generation += 1
            if not same_inputs:
                self.inputs += 1
            self._dropped = False
        self._pods, self._rest = tuple(state.pods), rest  # a copy: a list changed in place must still differ
        return kept

    def get(self, key: str, read: Callable[[], T]) -> T:
        """The kept value of `key`, read (and kept) when there is none."""
        if key in self._facts:
            value: T = self._facts[key]
            return value
        value = read()
        self._facts[key] = value
        return value

    def drop(self) -> None:
        """Forget everything (the next pass reads and plans afresh)."""
        self._facts.clear()
        self._since = None
        self._dropped = True


def same_pods(a: Sequence[PodMeta], b: Sequence[PodMeta]) -> bool:
    """Whether two pod lists describe the same pods, to the last field of the raw objects (a changed annotation,
    label, phase or container state counts); identical pod objects short-cut the comparison (PodMeta is frozen, and
    nothing changes a raw pod in place)."""
    return len(a) == len(b) and all(x is y or (x == y and x.raw == y.raw) for x, y in zip(a, b, strict=True))
