"""Choosing a cpuset for a CPU-bound pod (upstream nodenumaresource/cpu_accumulator.go, in the small).

FullPCPUs takes whole physical cores (every hyper-thread of a core), SpreadByPCPUs one hyper-thread per core
first and a core's siblings only when every core already gave one. Both go NUMA node by NUMA node in the order of
the pod's NUMA affinity, then socket, then core id, so a pod fills as few NUMA nodes as it can. With a NUMA
allocate strategy (the node's `numa-allocate-strategy` label) the NUMA nodes are taken in upstream's order
instead: MostAllocated the one with the fewest free CPUs first, LeastAllocated the most, then its socket's free
CPUs the same way, then the NUMA node id.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from apis.extension.numa_aware import NUMA_ALLOCATE_STRATEGIES, NUMA_MOST_ALLOCATED, CPUInfo

FULL_PCPUS, SPREAD_BY_PCPUS = "FullPCPUs", "SpreadByPCPUs"
ERR_NOT_ENOUGH_CPUS = "not enough cpus available to satisfy request"


def _cores(free: Iterable[CPUInfo]) -> dict[tuple[int, int, int], list[int]]:
    cores: dict[tuple[int, int, int], list[int]] = {}
    for c in sorted(free, key=lambda c: (c.node, c.socket, c.core, c.id)):
        cores.setdefault((c.node, c.socket, c.core), []).append(c.id)
    return cores


def _by_strategy(cores: dict[tuple[int, int, int], list[int]], whole_only: bool, per_core: dict[tuple[int, int], int],
                 strategy: str, socket_of: dict[int, int]) -> dict[tuple[int, int, int], list[int]]:
    """`cores` with their NUMA nodes reordered by their free CPUs (only whole free cores' when `whole_only`, as
    upstream counts for FullPCPUs), then their socket's."""
    node_free: Counter[int] = Counter()
    socket_free: Counter[int] = Counter()
    for (node, socket, core), ids in cores.items():
        if not whole_only or len(ids) == per_core[(socket, core)]:
            node_free[node] += len(ids)
            socket_free[socket] += len(ids)
    sign = 1 if strategy == NUMA_MOST_ALLOCATED else -1
    order = sorted({node for node, _, _ in cores},
                   key=lambda n: (sign * node_free[n], sign * socket_free[socket_of[n]], n))
    rank = {n: i for i, n in enumerate(order)}
    return dict(sorted(cores.items(), key=lambda item: (rank[item[0][0]], item[0])))


def take_cpus(cpus: dict[int, CPUInfo], available: set[int], count: int, policy: str,
              strategy: str = "") -> list[int] | None:
    """`count` CPUs out of `available` by `policy`, or None when they cannot be found; `strategy` (MostAllocated,
    LeastAllocated; anything else: none) orders the NUMA nodes they are taken from."""
    if count <= 0:
        return []
    per_core: dict[tuple[int, int], int] = {}
    for c in cpus.values():
        per_core[(c.socket, c.core)] = per_core.get((c.socket, c.core), 0) + 1
    cores = _cores(cpus[i] for i in available if i in cpus)
    if strategy in NUMA_ALLOCATE_STRATEGIES and len({node for node, _, _ in cores}) > 1:
        cores = _by_strategy(cores, policy == FULL_PCPUS, per_core, strategy, {c.node: c.socket for c in cpus.values()})
    out: list[int] = []
    if policy == FULL_PCPUS:
        for (_, socket, core), ids in cores.items():
            if len(ids) == per_core[(socket, core)] and len(out) + len(ids) <= count:
                out.extend(ids)
            if len(out) == count:
                return sorted(out)
        return None
    rounds = max((len(ids) for ids in cores.values()), default=0)
    for r in range(rounds):
        for ids in cores.values():
            if r < len(ids):
                out.append(ids[r])
                if len(out) == count:
                    return sorted(out)
    return None
