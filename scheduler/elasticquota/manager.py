"""The quota tree with requests, used and runtime per quota, kept incrementally (group_quota_manager.go).

A pod joining a quota adds its requests (masked to the quota's max keys) to the quota and, as the min of request
and max, to every ancestor; a pod reserved on a node adds to `used` the same way. Runtime is computed on demand
along one quota's path from the root (`refresh_runtime`), recomputing only the calculators whose inputs changed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from apis.core.objects import JSON
from apis.scheduling.quota import DEFAULT_QUOTA, ROOT_QUOTA, SYSTEM_QUOTA
from scheduler.elasticquota.model import (
    SPECIAL,
    QuotaSpec,
    Resources,
    add,
    add_non_negative,
    equal,
    exceeded,
    is_zero,
    mask,
    resource_json,
    sub,
)
from scheduler.elasticquota.runtime import RuntimeQuotaCalculator

# apis/config/v1/defaults.go: MaxInt64/5 for cpu and memory of the default and system quotas
UNLIMITED = (2**63 - 1) // 5
DEFAULT_GROUP_MAX: Resources = {"cpu": UNLIMITED * 1000, "memory": UNLIMITED}


@dataclass
class QuotaInfo:
    name: str
    parent: str
    is_parent: bool
    allow_lent: bool
    max: Resources = field(default_factory=dict)
    min: Resources = field(default_factory=dict)
    auto_min: Resources = field(default_factory=dict)
    shared_weight: Resources = field(default_factory=dict)
    request: Resources = field(default_factory=dict)
    child_request: Resources = field(default_factory=dict)
    self_request: Resources = field(default_factory=dict)
    used: Resources = field(default_factory=dict)
    self_used: Resources = field(default_factory=dict)
    non_preemptible_request: Resources = field(default_factory=dict)
    non_preemptible_used: Resources = field(default_factory=dict)
    runtime: Resources = field(default_factory=dict)
    allocated: Resources = field(default_factory=dict)  # a leaf's used, a parent's Σ children's guaranteed
    guaranteed: Resources = field(default_factory=dict)  # max(allocated, min) (ElasticQuotaGuaranteeUsage)
    runtime_version: int = 0
    pods: dict[str, _Pod] = field(default_factory=dict)  # ns/name → requests, assigned
    namespace: str = ""

    def limited_request(self) -> Resources:
        """getLimitRequestNoLock: request capped at max where max names the resource."""
        return {k: min(v, self.max[k]) if k in self.max else v for k, v in self.request.items()}

    def summary(self, include_pods: bool = False, tree: str = "") -> JSON:
        """QuotaInfoSummary as the ElasticQuota plugin serves it (core/quota_summary.go field names)."""
        out: JSON = {
            "name": self.name, "parentName": self.parent, "isParent": self.is_parent,
            "runtimeVersion": self.runtime_version, "allowLentResource": self.allow_lent, "tree": tree,
            "max": resource_json(self.max), "min": resource_json(self.min),
            "autoScaleMin": resource_json(self.auto_min), "used": resource_json(self.used),
            "nonPreemptibleUsed": resource_json(self.non_preemptible_used),
            "request": resource_json(self.request),
            "nonPreemptibleRequest": resource_json(self.non_preemptible_request),
            "sharedWeight": resource_json(self.shared_weight), "runtime": resource_json(self.runtime),
            "childRequest": resource_json(self.child_request), "allocated": resource_json(self.allocated),
            "guaranteed": resource_json(self.guaranteed),
            "selfUsed": resource_json(self.self_used), "selfNonPreemptibleUsed": {},
            "selfRequest": resource_json(self.self_request), "selfNonPreemptibleRequest": {}}
        if include_pods:
            out["podCache"] = {k: {"isAssigned": p.assigned, "resource": resource_json(p.requests)}
                               for k, p in sorted(self.pods.items())}
        return out


@dataclass
class _Pod:
    requests: Resources
    assigned: bool = False
    non_preemptible: bool = False


class GroupQuotaManager:
    """One quota tree: the default tree (tree id "") holds the system and default quotas; another tree (label
    tree-id) has only its root and the quotas below its root quota (core/group_quota_manager.go)."""

    def __init__(self, enable_min_scale: bool = True, system_max: Mapping[str, int] | None = None,
                 default_max: Mapping[str, int] | None = None, tree_id: str = "", guarantee_usage: bool = False
                 ) -> None:
        self.tree_id = tree_id
        # ElasticQuotaGuaranteeUsage (a feature gate upstream): what a quota uses beyond its min stays its own
        self.guarantee_usage = guarantee_usage
        self.enable_min_scale = enable_min_scale
        self.total: Resources = {}
        self.total_except: Resources = {}  # without the system and default quotas' used
        self._quotas: dict[str, QuotaInfo] = {}
        # the default quota's pods accounted but not yet propagated (`defer_add`/`defer_reserve`): (Σ requests,
        # Σ non-preemptible requests, Σ used, Σ non-preemptible used, how many used changes moved total_except)
        self._deferred: tuple[Resources, Resources, Resources, Resources, list[int]] | None = None
        self.calcs: dict[str, RuntimeQuotaCalculator] = {ROOT_QUOTA: RuntimeQuotaCalculator(ROOT_QUOTA)}
        self.children: dict[str, set[str]] = {ROOT_QUOTA: set()}
        self._min_sum: dict[str, Resources] = {}  # parent → Σ children's original min (ScaleMinQuotaManager)
        self.quotas[ROOT_QUOTA] = QuotaInfo(ROOT_QUOTA, "", True, False)
        if tree_id:
            return
        for name, mx in ((SYSTEM_QUOTA, system_max), (DEFAULT_QUOTA, default_max)):
            self.quotas[name] = QuotaInfo(name, ROOT_QUOTA, False, True, max=dict(mx or DEFAULT_GROUP_MAX))

    @property
    def quotas(self) -> dict[str, QuotaInfo]:
        """Every quota of the tree by name, with the default quota's deferred pods propagated first."""
        if self._deferred is not None:
            self._settle()
        return self._quotas

    def has(self, name: str) -> bool:
        """Whether the tree holds a quota of that name (nothing deferred needs propagating for that)."""
        return name in self._quotas

    # -- tree ------------------------------------------------------------------------------------------------
    def set_quotas(self, specs: Iterable[QuotaSpec]) -> None:
        """Load validated quotas (parents before children) into an empty tree."""
        for s in specs:
            if s.name in (SYSTEM_QUOTA, DEFAULT_QUOTA):
                if s.name not in self.quotas:
                    continue
                q = self.quotas[s.name]
                q.max, q.min, q.namespace = dict(s.max) or q.max, dict(s.min), s.namespace
                q.shared_weight = dict(s.shared_weight)
                continue
            # NewQuotaInfoFromQuota: with guarantee usage no quota lends
            lent = s.allow_lent and not self.guarantee_usage
            q = QuotaInfo(s.name, s.parent, s.is_parent, lent, max=dict(s.max), min=dict(s.min),
                          auto_min=dict(s.min), shared_weight=dict(s.shared_weight), namespace=s.namespace)
            if not q.allow_lent:
                q.request = dict(q.min)  # the quota asks for its min even without pods
            self.quotas[s.name] = q
            self.children.setdefault(s.parent, set()).add(s.name)
            self.children.setdefault(s.name, set())
            self.calcs[s.name] = RuntimeQuotaCalculator(s.name)
            self.calcs[s.parent].upsert(s.name, q.limited_request(), q.auto_min, q.shared_weight, q.allow_lent)
            self._min_sum[s.parent] = add(self._min_sum.get(s.parent, {}), s.min)
            if not q.allow_lent and q.request:
                self._propagate_request(self._path(s.parent), q.limited_request(), {}, -1)
            if self.guarantee_usage:  # doUpdateOneGroupMinQuotaNoLock: min guaranteed, passed up as allocated
                self._propagate_allocated(self._path(s.name), {})
        self._update_keys()

    def _update_keys(self) -> None:
        keys: set[str] = set()
        for name, q in self.quotas.items():
            if name in SPECIAL:
                continue
            keys |= set(q.max)
            self.calcs[name].set_keys(set(q.max))
        self.calcs[ROOT_QUOTA].set_keys(keys)

    def _path(self, name: str) -> list[QuotaInfo]:
        """The quota and its ancestors up to and including the root (getCurToAllParentGroupQuotaInfoNoLock)."""
        out: list[QuotaInfo] = []
        q = self.quotas.get(name)
        while q is not None:
            out.append(q)
            if q.name == ROOT_QUOTA:
                break
            q = self.quotas.get(q.parent)
        return out

    # -- cluster total ---------------------------------------------------------------------------------------
    def set_cluster_total(self, total: Mapping[str, int]) -> None:
        self._settle()
        self.total = dict(total)
        self._update_total_except()

    def add_cluster_total(self, delta: Mapping[str, int]) -> None:
        self._settle()
        self.total = add(self.total, delta)
        self._update_total_except()

    def _update_total_except(self) -> None:
        used: Resources = {}
        for name in (DEFAULT_QUOTA, SYSTEM_QUOTA):
            if name in self.quotas:
                used = add(used, self.quotas[name].used)
        total = sub(self.total, used)
        if not equal(total, self.total_except) or total.keys() != self.total_except.keys():
            self.total_except = total
            self.calcs[ROOT_QUOTA].set_total(total)

    # -- requests and used -----------------------------------------------------------------------------------
    def _propagate_request(self, path: list[QuotaInfo], delta: Resources, np_delta: Resources, self_index: int
                           ) -> None:
        """recursiveUpdateGroupTreeWithDeltaRequest: each level passes on the change of its limited request."""
        for i, q in enumerate(path):
            old_limit = q.limited_request()
            q.request = add_non_negative(q.request, delta)
            q.non_preemptible_request = add_non_negative(q.non_preemptible_request, np_delta)
            if i == self_index:
                q.self_request = add_non_negative(q.self_request, delta)
            if q.name == ROOT_QUOTA:
                return
            q.child_request = add_non_negative(q.child_request, delta)
            real = dict(q.child_request)
            if not q.allow_lent:  # a quota that does not lend asks for at least its min
                for k, v in q.min.items():
                    real[k] = max(real.get(k, 0), v)
            q.request = real
            new_limit = q.limited_request()
            delta = {k: new_limit.get(k, 0) - old_limit.get(k, 0) for k in new_limit.keys() | old_limit.keys()}
            calc = self.calcs.get(q.parent)
            if calc is not None:
                calc.set_request(q.name, new_limit)

    def _propagate_used(self, name: str, delta: Resources, np_delta: Resources) -> None:
        for i, q in enumerate(self._path(name)):
            q.used = add_non_negative(q.used, delta)
            q.non_preemptible_used = add_non_negative(q.non_preemptible_used, np_delta)
            if i == 0:
                q.self_used = add_non_negative(q.self_used, delta)
        if self.guarantee_usage:
            self._propagate_allocated(self._path(name), mask(delta, self.calcs[ROOT_QUOTA].keys))
        if name in (SYSTEM_QUOTA, DEFAULT_QUOTA):
            self._update_total_except()

    def _propagate_allocated(self, path: list[QuotaInfo], delta: Resources) -> None:
        """recursiveUpdateGroupTreeWithDeltaAllocated: each level adds the change to its allocated, guarantees
        max(allocated, min) and passes the change of its guarantee on to its parent."""
        for q in path:
            old = q.guaranteed
            q.allocated = add_non_negative(q.allocated, delta)
            if q.name == ROOT_QUOTA:
                return
            guaranteed = dict(q.allocated)
            for k, v in q.min.items():
                guaranteed[k] = max(guaranteed.get(k, 0), v)
            q.guaranteed = guaranteed
            calc = self.calcs.get(q.parent)
            if calc is not None:
                calc.set_guarantee(q.name, guaranteed)
            delta = {k: guaranteed.get(k, 0) - old.get(k, 0) for k in guaranteed.keys() | old.keys()}
            if not any(delta.values()):
                return

    # -- the default quota's pods, propagated when the tree is next read ----------------------------------------
    def defers(self, quota: str) -> bool:
        """Whether `defer_add`/`defer_reserve` take this quota's pods: the default quota of the default tree
        without ElasticQuotaGuaranteeUsage (its path is itself and the root, it lends, and the root's runtime
        calculator does not list it)."""
        return quota == DEFAULT_QUOTA and not self.tree_id and not self.guarantee_usage

    def defer_add(self, quota: str, pod_key: str, requests: Mapping[str, int], non_preemptible: bool) -> None:
        """on_pod_add(quota, ..., assigned=False) for a quota that `defers`, its request propagated later: every
        reader of the tree (`quotas`, the runtime, any other change) propagates what was deferred first, as sums
        — every deferred change adds a non-negative amount, so the tree ends where one pod after another would
        leave it (see `_settle`)."""
        q = self._quotas[quota]
        if pod_key in q.pods:
            return
        req = mask(requests, q.max)
        q.pods[pod_key] = _Pod(req, False, non_preemptible)
        if is_zero(req):
            return  # on_pod_add propagates nothing either
        d = self._deferred
        if d is None:
            d = self._deferred = ({}, {}, {}, {}, [0])
        _add_into(d[0], req, 1)
        if non_preemptible:
            _add_into(d[1], req, 1)

    def defer_reserve(self, quota: str, pod_key: str) -> None:
        """reserve(quota, pod_key) for a quota that `defers`, its used propagated later (see `defer_add`)."""
        p = self._quotas[quota].pods.get(pod_key)
        if p is None or p.assigned:
            return
        p.assigned = True
        d = self._deferred
        if d is None:
            d = self._deferred = ({}, {}, {}, {}, [0])
        used = d[2]
        # would this change alone have moved total_except (so bumped the root calculator's version)? a positive
        # amount always does; a zero one only by bringing a resource name total_except does not have yet
        if any(p.requests.values()) or any(k not in used and k not in self.total_except for k in p.requests):
            d[4][0] += 1
        _add_into(used, p.requests, 1)
        if p.non_preemptible:
            _add_into(d[3], p.requests, 1)

    def within_max(self, quota: str, requests: Mapping[str, int], runtime: bool) -> bool:
        """For a quota that `defers`: whether its used (deferred pods included, read without propagating them) plus
        `requests` masked to its max stays within its max — its PreFilter check, its runtime being its max.
        `runtime` (enableRuntimeQuota): refresh its runtime first, as `refresh_runtime` does."""
        q = self._quotas[quota]
        if runtime and q.runtime != q.max:
            q.runtime = dict(q.max)
        d = self._deferred
        used = q.used if d is None or not d[2] else add(q.used, d[2])
        return not exceeded(add(used, mask(requests, q.max)), q.max)

    def _settle(self) -> None:
        """Propagate the deferred default-quota pods: their requests along its path as one sum (each level passes on
        the change of its limited request, which telescopes), their used as one sum, and the root calculator's
        version moved as often as the pods' changes one by one would have moved it."""
        d = self._deferred
        if d is None:
            return
        self._deferred = None
        request, np_request, used, np_used, moves = d
        if request:
            self._propagate_request(self._path(DEFAULT_QUOTA), request, np_request, 0)
        if used:
            calc = self.calcs[ROOT_QUOTA]
            before = calc.version
            self._propagate_used(DEFAULT_QUOTA, used, np_used)
            calc.version += moves[0] - (calc.version - before)

    def on_pod_add(self, quota: str, pod_key: str, requests: Mapping[str, int], assigned: bool,
                   non_preemptible: bool = False) -> None:
        """A pod of the quota appeared (pending or, on a re-list, already assigned)."""
        q = self.quotas.get(quota)
        if q is None or pod_key in q.pods:
            return
        req = mask(requests, q.max)
        q.pods[pod_key] = _Pod(req, False, non_preemptible)
        if not is_zero(req):
            self._propagate_request(self._path(quota), req, req if non_preemptible else {}, 0)
        if assigned:
            self.reserve(quota, pod_key)

    def on_pods_add(self, quota: str, pods: list[tuple[str, Mapping[str, int], bool, bool]]) -> None:
        """on_pod_add for many pods of one quota — (key, requests, assigned, non-preemptible) — with their request
        and used propagated once as sums (a re-list's bulk load): every delta is non-negative, so the tree ends
        exactly where one pod after another would leave it."""
        q = self.quotas.get(quota)
        if q is None:
            return
        masked: dict[int, Resources] = {}  # id of a requests dict → its masked copy (pods share requests dicts)
        tally: dict[tuple[int, bool, bool], int] = {}  # (id of the masked requests, assigned, non-preemptible) → pods
        keys = tuple(q.max)
        for pod_key, requests, assigned, non_preemptible in pods:
            if pod_key in q.pods:
                continue
            req = masked.get(id(requests))
            if req is None:
                req = masked[id(requests)] = {k: requests[k] for k in keys if k in requests}  # mask(requests, q.max)
            q.pods[pod_key] = _Pod(req, assigned, non_preemptible)
            shape = (id(requests), assigned, non_preemptible)
            tally[shape] = tally.get(shape, 0) + 1
        request: Resources = {}
        np_request: Resources = {}
        used: Resources = {}
        np_used: Resources = {}
        for (rid, assigned, non_preemptible), n in tally.items():
            req = masked[rid]
            _add_into(request, req, n)  # summed in place, each distinct request once
            if non_preemptible:
                _add_into(np_request, req, n)
            if assigned:
                _add_into(used, req, n)
                if non_preemptible:
                    _add_into(np_used, req, n)
        if not is_zero(request):
            self._propagate_request(self._path(quota), request, np_request, 0)
        if used:
            self._propagate_used(quota, used, np_used)

    def on_pod_delete(self, quota: str, pod_key: str) -> None:
        q = self.quotas.get(quota)
        if q is None or pod_key not in q.pods:
            return
        self.unreserve(quota, pod_key)
        p = q.pods.pop(pod_key)
        if not is_zero(p.requests):
            neg = {k: -v for k, v in p.requests.items()}
            self._propagate_request(self._path(quota), neg, neg if p.non_preemptible else {}, 0)

    def reserve(self, quota: str, pod_key: str) -> None:
        q = self.quotas.get(quota)
        p = q.pods.get(pod_key) if q is not None else None
        if p is None or p.assigned:
            return
        p.assigned = True
        self._propagate_used(quota, p.requests, p.requests if p.non_preemptible else {})

    def unreserve(self, quota: str, pod_key: str) -> None:
        q = self.quotas.get(quota)
        p = q.pods.get(pod_key) if q is not None else None
        if p is None or not p.assigned:
            return
        p.assigned = False
        neg = {k: -v for k, v in p.requests.items()}
        self._propagate_used(quota, neg, neg if p.non_preemptible else {})

    # -- runtime ----------------------------------------------------------------------------------------------
    def _scaled_min(self, total: Mapping[str, int], q: QuotaInfo) -> Resources:
        """ScaleMinQuotaManager.getScaledMinQuota: where the parent's total is below its children's min sum,
        every child's min shrinks in proportion (truncated as Go's int64(float64) does)."""
        sums = self._min_sum.get(q.parent, {})
        scaled = dict(q.min)
        for k, t in total.items():
            s = sums.get(k, 0)
            if t >= s:
                continue
            scaled[k] = 0 if t <= 0 or s <= 0 else math.trunc(float(t) * float(q.min.get(k, 0)) / float(s))
        return scaled

    def refresh_runtime(self, name: str) -> Resources:
        """The quota's runtime, masked to its max keys (RefreshRuntime); recomputes along its path only."""
        q = self.quotas.get(name)
        if q is None:
            return {}
        if name == ROOT_QUOTA:
            return dict(self.total_except)
        if name in (SYSTEM_QUOTA, DEFAULT_QUOTA):
            q.runtime = dict(q.max)
            return dict(q.max)
        path = self._path(name)
        total = self.total_except
        for i in range(len(path) - 1, -1, -1):
            qi = path[i]
            if qi.name == ROOT_QUOTA:
                continue
            calc = self.calcs[qi.parent]
            if self.enable_min_scale:
                scaled = self._scaled_min(total, qi)
                if scaled != qi.auto_min:
                    qi.auto_min = scaled
                    calc.set_min(qi.name, scaled)
            if qi.runtime_version != calc.version:
                qi.runtime.update(calc.runtime_of(qi.name))
                qi.runtime_version = calc.version
            if i >= 1:
                self.calcs[qi.name].set_total(qi.runtime)
            total = qi.runtime
        return mask(q.runtime, q.max)

    def refresh_all(self) -> None:
        """Every quota's runtime (the controller's periodic refresh of all leaf quotas reaches their parents)."""
        for name in self.quotas:
            if name not in SPECIAL and not self.children.get(name):
                self.refresh_runtime(name)
        for name in self.quotas:
            if name not in SPECIAL and self.quotas[name].runtime_version == 0:
                self.refresh_runtime(name)


def _add_into(total: Resources, more: Mapping[str, int], times: int) -> None:
    for k, v in more.items():
        total[k] = total.get(k, 0) + v * times
