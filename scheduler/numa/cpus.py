"""Choosing a cpuset for a CPU-bound pod (upstream nodenumaresource/cpu_accumulator.go, in the small).

FullPCPUs takes whole physical cores (every hyper-thread of a core), SpreadByPCPUs one hyper-thread per core
first and a core's siblings only when every core already gave one. Both go NUMA node by NUMA node in the order of
the pod's NUMA affinity, then socket, then core id, so a pod fills as few NUMA nodes as it can.
"""

from __future__ import annotations

from collections.abc import Iterable

from apis.extension.numa_aware import CPUInfo

FULL_PCPUS, SPREAD_BY_PCPUS = "FullPCPUs", "SpreadByPCPUs"
ERR_NOT_ENOUGH_CPUS = "not enough cpus available to satisfy request"


def _cores(free: Iterable[CPUInfo]) -> dict[tuple[int, int, int], list[int]]:
    cores: dict[tuple[int, int, int], list[int]] = {}
    for c in sorted(free, key=lambda c: (c.node, c.socket, c.core, c.id)):
        cores.setdefault((c.node, c.socket, c.core), []).append(c.id)
    return cores


def take_cpus(cpus: dict[int, CPUInfo], available: set[int], count: int, policy: str) -> list[int] | None:
    """`count` CPUs out of `available` by `policy`, or None when they cannot be found."""
    if count <= 0:
        return []
    per_core: dict[tuple[int, int], int] = {}
    for c in cpus.values():
        per_core[(c.socket, c.core)] = per_core.get((c.socket, c.core), 0) + 1
    cores = _cores(cpus[i] for i in available if i in cpus)
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
