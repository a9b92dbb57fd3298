"""Runtime quota of one parent's children: min first, the rest by shared weight up to request.

(pkg/scheduler/plugins/elasticquota/core/runtime_quota_calculator.go)
One RuntimeQuotaCalculator per parent quota (the root's for the top level). Its inputs per child and resource are
the limited request (min(request, max)), the (auto-scaled) min, the shared weight and allow-lent; its total is the
parent's runtime (the cluster total for the root). Any input change bumps `version`; runtimes are recomputed
lazily, once per version, for all children of this parent only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.elasticquota.model import Resources


@dataclass
class _Child:
    request: Resources = field(default_factory=dict)  # limited request (min(request, max))
    min: Resources = field(default_factory=dict)  # the auto-scaled min
    weight: Resources = field(default_factory=dict)
    allow_lent: bool = True
    guarantee: Resources = field(default_factory=dict)  # ElasticQuotaGuaranteeUsage: max(allocated, min)


def redistribute(total: int, names: list[str], request: list[int], minimum: list[int], weight: list[int],
                 allow_lent: list[bool]) -> list[int]:
    """One resource of one parent (quotaTree.redistribution): a child whose request is within its min gets its
    request (its min when it does not lend); the others get min plus a share of what is left, by shared weight,
    capped at their request, iterated until nothing is left or everyone is satisfied."""
    n = len(names)
    runtime = [0] * n
    hungry: list[int] = []
    left = total
    for i in range(n):
        if request[i] > minimum[i]:
            hungry.append(i)
            runtime[i] = minimum[i]
        else:
            runtime[i] = request[i] if allow_lent[i] else minimum[i]
        left -= runtime[i]
    while left > 0 and hungry:
        total_weight = sum(weight[i] for i in hungry)
        if total_weight <= 0:
            break
        deltas = _hamilton(left, total_weight, hungry, names, weight)
        still: list[int] = []
        left = 0
        for i, d in zip(hungry, deltas, strict=True):
            runtime[i] += d
            if runtime[i] < request[i]:
                still.append(i)
            else:
                left += runtime[i] - request[i]
                runtime[i] = request[i]
        hungry = still
    return runtime


def _hamilton(total: int, total_weight: int, idx: list[int], names: list[str], weight: list[int]) -> list[int]:
    """Largest-remainder split of `total` by weight (computeHamiltonDeltas): floors first, the remainder one by
    one to the largest remainders, ties by quota name; weights ≤ 0 get nothing."""
    deltas = [0] * len(idx)
    rems: list[tuple[int, str, int]] = []
    given = 0
    for j, i in enumerate(idx):
        w = weight[i]
        if w <= 0:
            continue
        q, r = divmod(w * total, total_weight)
        deltas[j] = q
        given += q
        rems.append((-r, names[i], j))
    residual = total - given
    if residual > 0:
        rems.sort()
        for _, _, j in rems[:residual]:
            deltas[j] += 1
    return deltas


class RuntimeQuotaCalculator:
    def __init__(self, tree: str) -> None:
        self.tree = tree  # the parent quota's name
        self.version = 1
        self.keys: set[str] = set()
        self.total: Resources = {}
        self.children: dict[str, _Child] = {}
        self._computed = 0  # version the cached runtimes belong to
        self._runtime: dict[str, Resources] = {}

    def _bump(self) -> None:
        self.version += 1

    def set_keys(self, keys: set[str]) -> None:
        if keys != self.keys:
            self.keys = set(keys)
            self._bump()

    def set_total(self, total: Resources) -> None:
        # upstream bumps the version on every call; equal inputs give equal runtimes, so only real changes do here
        if total != self.total:
            self.total = dict(total)
            self._bump()

    def upsert(self, name: str, request: Resources, minimum: Resources, weight: Resources, allow_lent: bool) -> None:
        c = self.children.get(name)
        if c is None:
            self.children[name] = _Child(dict(request), dict(minimum), dict(weight), allow_lent)
            self._bump()
            return
        changed = False
        for attr, value in (("request", request), ("min", minimum), ("weight", weight)):
            if getattr(c, attr) != value:
                setattr(c, attr, dict(value))
                changed = True
        if c.allow_lent != allow_lent:
            c.allow_lent, changed = allow_lent, True
        if changed:
            self._bump()

    def set_request(self, name: str, request: Resources) -> None:
        c = self.children.get(name)
        if c is not None and c.request != request:
            c.request = dict(request)
            self._bump()

    def set_min(self, name: str, minimum: Resources) -> None:
        c = self.children.get(name)
        if c is not None and c.min != minimum:
            c.min = dict(minimum)
            self._bump()

    def set_guarantee(self, name: str, guarantee: Resources) -> None:
        c = self.children.get(name)
        if c is not None and c.guarantee != guarantee:
            c.guarantee = dict(guarantee)
            self._bump()

    def remove(self, name: str) -> None:
        if self.children.pop(name, None) is not None:
            self._bump()

    def runtime_of(self, name: str) -> Resources:
        if self._computed != self.version:
            self._compute()
        return self._runtime.get(name, {})

    def _compute(self) -> None:
        names = list(self.children)
        kids = [self.children[n] for n in names]
        lent = [c.allow_lent for c in kids]
        out: dict[str, Resources] = {n: {} for n in names}
        for key in self.keys:
            rt = redistribute(self.total.get(key, 0), names, [c.request.get(key, 0) for c in kids],
                              # a guarantee above min counts as min (quotaTree.redistribution)
                              [max(c.min.get(key, 0), c.guarantee.get(key, 0)) for c in kids],
                              [c.weight.get(key, 0) for c in kids], lent)
            for n, v in zip(names, rt, strict=True):
                out[n][key] = v
        self._runtime = out
        self._computed = self.version
