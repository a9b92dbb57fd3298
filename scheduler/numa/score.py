"""NodeNUMAResource's Score arithmetic (upstream nodenumaresource/scoring.go, least_allocated.go, most_allocated.go).

The score is the scoringStrategy (LeastAllocated or MostAllocated, weighted per resource) of requested + the pod's
request over allocatable — of the whole node when no NUMA policy applies, of the NUMA nodes the pod is given when
one does. A resource whose allocatable is 0 is left out, and so is an extended resource the pod does not request.
"""

from __future__ import annotations

from collections.abc import Mapping

from apis.core.resources import CPU, MEMORY

LEAST_ALLOCATED, MOST_ALLOCATED = "LeastAllocated", "MostAllocated"
DEFAULT_RESOURCES: tuple[tuple[str, int], ...] = ((CPU, 1), (MEMORY, 1))
_NATIVE = (CPU, MEMORY, "ephemeral-storage")


def _least(requested: int, capacity: int) -> int:
    if capacity == 0 or requested > capacity:
        return 0
    return (capacity - requested) * 100 // capacity


def _most(requested: int, capacity: int) -> int:
    if capacity == 0:
        return 0
    return min(requested, capacity) * 100 // capacity


def strategy_score(most: bool, resources: tuple[tuple[str, int], ...], requested: Mapping[str, int],
                   allocatable: Mapping[str, int], pod: Mapping[str, int]) -> int:
    """resourceAllocationScorer.score: Σ weight·score(requested + pod request, allocatable) / Σ weight."""
    score = weights = 0
    for r, w in resources:
        want = pod.get(r, 0)
        if want == 0 and r not in _NATIVE:
            continue  # an extended resource the pod does not ask: not scored
        cap = allocatable.get(r, 0)
        if cap == 0:
            continue
        req = requested.get(r, 0) + want
        score += (_most(req, cap) if most else _least(req, cap)) * w
        weights += w
    return score // weights if weights else 0
