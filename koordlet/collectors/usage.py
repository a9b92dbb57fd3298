"""What one collection tick measured of every cgroup target: a column per value, read as a mapping by usage id."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

UsageId = tuple[str, str]  # (scope, key) of a target: ("pod", uid), ("container", id), ("hostapp", name)
Bools = npt.NDArray[np.bool_]
Int64s = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]


class CgroupUsage(NamedTuple):
    """Usage of one cgroup at one tick."""

    cpu_cores: float | None  # None until two observations exist
    memory: int
    memory_with_cache: int
    throttled_ratio: float | None
    # the cumulative counters as read (reset only when the cgroup is recreated): CPU time, CFS periods, throttled
    # periods and throttled time
    cpu_ns: int = 0
    nr_periods: int = 0
    nr_throttled: int = 0
    throttled_ns: int = 0


_usage = functools.partial(tuple.__new__, CgroupUsage)  # as CgroupUsage(...), without its __new__'s overhead


class TickUsage(Mapping[UsageId, CgroupUsage]):
    """Row i is target i of the tick: `read` whether its cgroup was read, CPU cores and throttled share (NaN where
    there is no rate: a first read, a recreated cgroup, or not read), memory and the cumulative counters (`counters`:
    CPU ns, periods, throttled periods, throttled ns; one row each) as read. `fresh` marks the rows read at this
    tick; a row `read` but not fresh carries its values from the tick that last read it (a container read every few
    ticks, see cgroups.CONTAINER_INTERVAL_SECONDS). Never changed once built: the exporter's thread reads it while
    the next tick builds the next one. As a mapping, the rows with values by usage id (a repeated id: its last row),
    each built on access."""

    __slots__ = ("_lists", "counters", "cpu", "fresh", "index", "memory", "memory_with_cache", "read", "throttled")

    def __init__(self, index: Mapping[UsageId, int], read: Bools, cpu: Floats, memory: Int64s,
                 memory_with_cache: Int64s, throttled: Floats, counters: Int64s | None = None,
                 fresh: Bools | None = None) -> None:
        self.index, self.read, self.cpu, self.throttled = index, read, cpu, throttled
        self.memory, self.memory_with_cache = memory, memory_with_cache
        self.counters = np.zeros((4, len(read)), dtype=np.int64) if counters is None else counters
        self.fresh = read if fresh is None else fresh
        self._lists: tuple[list[bool], list[float], list[int], list[int], list[float], list[list[int]]] | None = None

    @classmethod
    def empty(cls) -> TickUsage:
        no_ints, no_floats = np.zeros(0, dtype=np.int64), np.zeros(0)
        return cls({}, np.zeros(0, dtype=bool), no_floats, no_ints, no_ints, no_floats)

    def _rows(self) -> tuple[list[bool], list[float], list[int], list[int], list[float], list[list[int]]]:
        """The columns as Python lists, once (a scrape reads every row)."""
        if self._lists is None:
            self._lists = (self.read.tolist(), self.cpu.tolist(), self.memory.tolist(),
                           self.memory_with_cache.tolist(), self.throttled.tolist(), self.counters.T.tolist())
        return self._lists

    def __getitem__(self, id_: UsageId) -> CgroupUsage:
        i = self.index[id_]
        read, cpu, mem, mem_cache, throttled, counters = self._rows()
        if not read[i]:
            raise KeyError(id_)
        c, t = cpu[i], throttled[i]
        return _usage((None if c != c else c, mem[i], mem_cache[i], None if t != t else t,  # NaN: no rate
                       *counters[i]))

    def __iter__(self) -> Iterator[UsageId]:
        read = self._rows()[0]
        return (id_ for id_, i in self.index.items() if read[i])

    def __len__(self) -> int:
        read = self._rows()[0]
        return sum(1 for i in self.index.values() if read[i])
