"""The topology manager's hint merge (upstream pkg/scheduler/frameworkext/topologymanager/policy*.go), restated.

A hint is a set of NUMA nodes (None: any) that can hold one resource, `preferred` when it is among the narrowest
that could ever hold it. Providers give hints per resource; every combination (one hint per resource) is merged by
intersection; the best merged hint is preferred first, then narrowest, then the first found.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

BEST_EFFORT, RESTRICTED, SINGLE_NUMA_NODE = "BestEffort", "Restricted", "SingleNUMANode"
POLICIES = (BEST_EFFORT, RESTRICTED, SINGLE_NUMA_NODE)
REQUIRED, PREFERRED = "Required", "Preferred"
ERR_UNSATISFIED = "Unsatisfied NUMA {}"
ERR_UNALIGNED = "Unaligned NUMA Hint cause {}"
IDLE, SHARED, SINGLE = "idle", "shared", "single"  # NumaNodeStatus


@dataclass(frozen=True)
class Hint:
    mask: frozenset[int] | None
    preferred: bool
    unsatisfied: bool = False


def mask_string(mask: frozenset[int] | None) -> str:
    """k8s bitmask's String(): the bits, most significant first, zero-padded to an even width."""
    value = sum(1 << b for b in mask or ())
    width = 2
    while value >= (1 << width):
        width += 2
    return format(value, f"0{width}b")


def narrower(a: frozenset[int], b: frozenset[int]) -> bool:
    """bitmask.IsNarrowerThan: fewer bits, or as many and a smaller value."""
    if len(a) != len(b):
        return len(a) < len(b)
    return sum(1 << x for x in a) < sum(1 << x for x in b)


def _exclusive_ok(mask: frozenset[int] | None, exclusive: str, status: Mapping[int, str]) -> bool:
    """checkExclusivePolicy: with Required, a multi-NUMA hint may not touch a NUMA node held by a single-NUMA pod,
    and a single-NUMA hint may not take a NUMA node shared with multi-NUMA pods."""
    if mask is None:
        return False
    if exclusive == REQUIRED:
        if len(mask) > 1:
            return all(status.get(n, IDLE) != SINGLE for n in mask)
        return status.get(next(iter(mask)), IDLE) != SHARED
    return True


def _merge_permutation(numa: frozenset[int], perm: Sequence[Hint]) -> Hint:
    preferred, satisfied = True, True
    masks = [h.mask for h in perm if h.mask is not None]
    widest = max((len(m) for m in masks), default=0)
    for h in perm:
        if h.mask is not None and h.mask != masks[0]:
            preferred = False
        if not h.preferred:
            preferred = False
        if h.unsatisfied:
            satisfied = False
    merged = numa.intersection(*masks) if masks else numa
    satisfied = (not masks or widest == len(merged)) and satisfied
    return Hint(frozenset(merged), preferred, not satisfied)


def _filter(providers: Mapping[str, list[Hint] | None]) -> tuple[list[list[Hint]], list[str], list[str]]:
    """filterProvidersHints: None = no preference; [] = the resource fits nowhere (a reason naming it)."""
    out: list[list[Hint]] = []
    reasons: list[str] = []
    summary: list[str] = []
    for resource, hints in providers.items():
        if hints is None:
            out.append([Hint(None, True)])
        elif not hints:
            out.append([Hint(None, False, True)])
            reasons.append(ERR_UNSATISFIED.format(resource))
        else:
            preferred = " ".join(mask_string(h.mask) for h in hints if h.preferred and not h.unsatisfied)
            possible = " ".join(mask_string(h.mask) for h in hints if not h.unsatisfied)
            summary.append(f"{resource} prefer [{preferred}] among [{possible}]")
            out.append(hints)
    return out, reasons, sorted(summary)


def _best(numa: frozenset[int], filtered: list[list[Hint]], exclusive: str, status: Mapping[int, str]) -> Hint:
    best = Hint(numa, False)
    for perm in itertools.product(*filtered):
        merged = _merge_permutation(numa, perm)
        if not merged.mask:
            continue
        if not _exclusive_ok(merged.mask, exclusive, status):
            merged = Hint(merged.mask, False, merged.unsatisfied)
        if merged.preferred and not best.preferred:
            best = merged
            continue
        if not merged.preferred and best.preferred:
            continue
        if merged.mask is not None and best.mask is not None and narrower(merged.mask, best.mask):
            best = merged
    return best


def merge(policy: str, numa_nodes: Sequence[int], providers: Mapping[str, list[Hint] | None],
          exclusive: str = "", status: Mapping[int, str] | None = None) -> tuple[Hint, bool, list[str]]:
    """(best hint, admitted, reasons) of `policy` over the providers' hints per resource."""
    numa = frozenset(numa_nodes)
    st = status or {}
    filtered, reasons, summary = _filter(providers)
    if policy == BEST_EFFORT:
        best = _best(numa, filtered, exclusive, st)
        return (Hint(numa, False) if best.unsatisfied else best), True, []
    if reasons:
        return Hint(numa if policy == RESTRICTED else None, False), False, reasons
    if policy == SINGLE_NUMA_NODE:
        filtered = [[h for h in hs if h.preferred and (h.mask is None or len(h.mask) == 1)] for hs in filtered]
    best = _best(numa, filtered, exclusive, st)
    if policy == SINGLE_NUMA_NODE and best.mask == numa and len(numa) > 1:
        best = Hint(None, best.preferred)
    if not best.preferred:
        return best, False, [ERR_UNALIGNED.format((" & " if policy == RESTRICTED else ",").join(summary))]
    return best, True, []


def generate(numa_nodes: Sequence[int], fits_now: Callable[[frozenset[int]], bool],
             fits_ever: Callable[[frozenset[int]], bool]) -> list[Hint]:
    """Hints for one resource: every NUMA set it fits in now, preferred when no narrower set could ever hold it
    (upstream generateResourceHints: minAffinitySize from the NUMA nodes' totals)."""
    nodes = sorted(numa_nodes)
    masks = [frozenset(c) for k in range(1, len(nodes) + 1) for c in itertools.combinations(nodes, k)]
    smallest = min((len(m) for m in masks if fits_ever(m)), default=len(nodes))
    return [Hint(m, len(m) == smallest) for m in masks if fits_now(m)]
