"""The Reservation plugin: owners are served from reserved resources, everyone else sees them as used.

Upstream pkg/scheduler/plugins/reservation: before the cycle (BeforePreFilter / RestoreReservation) the matched
reservations' unallocated resources are given back to their nodes for this pod — here by taking the reserve pod
off the node, so NodeResourcesFit, DeviceShare and the rest see them free; Filter keeps a pod with
`reservation-affinity` to nodes holding a matched reservation; Score prefers them (weight 5000 as upstream's
default profile); Reserve picks the reservation and writes `reservation-allocated`; after the cycle the reserve
pod goes back with what is left (nothing for allocateOnce: the reservation is Succeeded).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from apis.core.objects import JSON, annotate
from apis.scheduling.reservation import (
    ANNOTATION_RESERVATION_ALLOCATED,
    ANNOTATION_RESERVATION_NAME,
    ANNOTATION_RESERVATION_NODE,
    ReservationAllocated,
    encode_reservation_allocated,
)
from scheduler.cluster import Cluster, NodeInfo, is_reserve_pod, key, pod_requests
from scheduler.elasticquota.model import resource_json
from scheduler.gang.model import pod_priority
from scheduler.interfaces import Handle, Placement
from scheduler.nodeindex import BoolArray, IntArray, NodeIndex, built_index
from scheduler.reservation import matching, preallocation
from scheduler.reservation.model import (
    AVAILABLE,
    DEFAULT_POLICY,
    PENDING,
    SUCCEEDED,
    Reservation,
    account,
    load,
    place,
    release,
    requests_of,
)

ERR_AFFINITY = "node(s) no reservations match reservation affinity"  # plugin.go ErrReasonReservationAffinity
ERR_POLICY_CONFLICT = "node(s) reservation allocate policy conflict"  # ErrReasonReservationAllocatePolicyConflict
ERR_NODE_NOT_MATCH = "node(s) didn't match the nodeName specified by reservation"  # ErrReasonNodeNotMatchReservation
ORDERLESS_SCORE = 10  # a serving node without reservation-order beside one with it (see _node_scores)


class _Lent:
    """A node's version `before` its reserve pods `pods` were taken off for a cycle and the version it had `after`."""

    def __init__(self, index: NodeIndex, epoch: int, before: int, after: int, pods: tuple[JSON, ...]) -> None:
        self.index, self.epoch, self.before, self.after, self.pods = index, epoch, before, after, pods
        self.generation = -1  # NodeInfo.generation once they were taken off

    def same(self, index: NodeIndex, before: int, pods: tuple[JSON, ...]) -> bool:
        return (index is self.index and index.epoch == self.epoch and before == self.before
                and len(pods) == len(self.pods) and all(a is b for a, b in zip(pods, self.pods, strict=True)))


class _Matches:
    """`PodView.eligible` per pod signature and reservation, with the reservation's state it was computed at."""

    def __init__(self, book: dict[str, Reservation], members: tuple[int, ...], order: list[Reservation],
                 kinds: frozenset[str]) -> None:
        self.book, self.members, self.order, self.kinds = book, members, order, kinds
        self.results: dict[tuple[object, ...], list[tuple[tuple[object, ...], bool] | None]] = {}


NAME = "Reservation"


class ReservationPlugin:
    name = NAME

    def __init__(self, args: object = None, weight: int = 5000, *, preemption: bool = True,
                 binds_reservations: bool = True) -> None:
        self.args = args
        self.weight = weight
        # enabled at bind ahead of DefaultBinder: the only way a reserve pod is bound (its Reservation Available)
        self.binds_reservations = binds_reservations
        # ReservationArgs.enablePreemption, effective only while the plugin is enabled at postFilter
        self.enable_preemption = bool(getattr(args, "enable_preemption", False)) and preemption
        self.book: dict[str, Reservation] = {}
        self._cluster: Cluster | None = None
        self._view: matching.PodView | None = None
        self._restored: dict[str, list[Reservation]] = {}  # node → reservations taken off it this cycle
        self._lent: dict[str, _Lent] = {}  # node → the versions around its last lending (see _lend)
        self._match_memo: _Matches | None = None
        self._serving: dict[str, Reservation] = {}  # node → the one an owner would be served from
        self._misfit: dict[str, str] = {}  # node → why its Restricted reservations cannot serve the pod
        self._scores: dict[str, int] = {}  # node → its score for the pod (see _node_scores)
        self._conflicts: frozenset[str] = frozenset()  # nodes a reservation being placed may not go to
        self._pinned = ""  # the node a reservation being placed names in its template ("": any)
        # a spec.preAllocation reservation being placed: node → the running pod it would take over (off the node
        # for the cycle), node → why it cannot go there, and the reason for every other node ("": no objection)
        self._pre: dict[str, JSON] = {}
        self._pre_refused: dict[str, str] = {}
        self._pre_default = ""
        self._pre_taken: tuple[str, JSON] | None = None  # (node, pod) the placed reserve pod took over
        self._chosen: Reservation | None = None
        # node → the devices, "cpus/<node>" → the CPUs the serving reservation holds (this cycle)
        self._held: JSON = {}
        self.preemptions: list[JSON] = []
        self._preempting = False

    # -- state ------------------------------------------------------------------------------------------------
    def bind(self, cluster: Cluster, now: float | None = None) -> None:
        """Load the cluster's Reservation objects once per cluster (idempotent)."""
        if self._cluster is cluster:
            return
        self._cluster = cluster
        self.book = load(cluster, list(getattr(cluster, "reservations", [])), time.time() if now is None else now)

    def sync(self, index: NodeIndex) -> None:
        """The framework's prepare: load the reservations now rather than in the first cycle."""
        self.bind(index.cluster)

    def add(self, obj: JSON) -> Reservation:
        """A Reservation to place (simulate's --pods), pending unless it already names a node."""
        assert self._cluster is not None
        extra = load(self._cluster, [obj])
        self.book.update(extra)
        return next(iter(extra.values()))

    def schedule_reservation(self, sched: Handle, r: Reservation) -> Placement | None:
        """Place a pending reservation as its template pod; status follows. None when it is not pending."""
        if r.phase != PENDING:
            return None
        pod = r.pod
        self._pre_taken = None
        if not self.binds_reservations:
            r.reason = ("binding rejected: no bind plugin binds reserve pods (enable Reservation at bind, ahead of "
                        "DefaultBinder)")
            r.dirty = True
            return Placement(key(pod), None, reason=r.reason)
        placed = sched.schedule(pod)
        if placed.node is None:
            r.reason = placed.reason
            r.dirty = True
            return placed
        node = sched.cluster.nodes[placed.node]
        node.remove_pod(key(pod))  # re-added by place() with the reservation's accounting
        r.node, r.phase, r.reason, r.dirty = placed.node, AVAILABLE, "", True
        r.annotations.update(placed.annotations)
        r.allocatable = {k: v for k, v in pod_requests(pod).items() if v}
        taken, self._pre_taken = self._pre_taken, None
        if taken is not None and taken[0] == placed.node:  # pre-allocated: the running pod is its first owner
            annotate(taken[1], {ANNOTATION_RESERVATION_ALLOCATED: encode_reservation_allocated(
                ReservationAllocated(r.name, r.uid))})
            account(r, taken[1])
            r.pre_allocated.append(taken[1])
            if r.phase != AVAILABLE:
                return placed
        place(r, sched.cluster)
        return placed

    def unplace(self, r: Reservation, reason: str) -> None:
        """PreBindReservation failed (the pre-allocated pod's patch): the reservation is not bound — its reserve
        pod leaves the node, the pods it took over are no longer its owners, and it is Pending with the reason,
        to be placed again in a later cycle (upstream: the error fails the reserve pod's binding cycle)."""
        cluster = self._cluster
        node = cluster.nodes.get(str(r.node)) if cluster is not None else None
        if node is not None and r.pod_key in node.pods:
            node.remove_pod(r.pod_key)
        for pod in r.pre_allocated:
            release(r, pod)
            ((pod.get("metadata") or {}).get("annotations") or {}).pop(ANNOTATION_RESERVATION_ALLOCATED, None)
        r.pre_allocated.clear()
        r.node, r.phase, r.reason, r.dirty = None, PENDING, reason, True
        r.annotations = dict((r.obj.get("metadata") or {}).get("annotations") or {})

    def binds(self, pod: JSON) -> bool:
        """Bind: a reserve pod is bound by marking its Reservation Available (schedule_reservation); Skip for every
        other pod, which DefaultBinder binds."""
        return is_reserve_pod(pod)

    # -- the cycle --------------------------------------------------------------------------------------------
    def begin_cycle(self, pod: JSON, cluster: Cluster) -> None:
        self.bind(cluster)
        self._view, self._restored, self._serving, self._chosen, self._held = None, {}, {}, None, {}
        self._misfit, self._scores, self._conflicts, self._pinned = {}, {}, frozenset(), ""
        self._pre, self._pre_refused, self._pre_default = {}, {}, ""
        if is_reserve_pod(pod):
            annotations = (pod.get("metadata") or {}).get("annotations") or {}
            self._pinned = str(annotations.get(ANNOTATION_RESERVATION_NODE) or "")
            placing = self.book.get(str(annotations.get(ANNOTATION_RESERVATION_NAME) or ""))
            if placing is not None:
                self._conflicts = self._policy_conflicts(placing)
                if placing.pre_allocation:
                    self._begin_pre_allocation(placing, cluster)
            return
        if not self.book:
            return
        v = self._view = matching.view(pod)
        if v.invalid:
            return
        order, eligible = self._matching(v, pod)
        fitting: dict[str, list[Reservation]] = {}
        node_order: dict[str, int] = {}  # node → the smallest non-zero reservation-order of those matched on it
        for r, ok in zip(order, eligible, strict=True):
            if r.phase != AVAILABLE or not r.node or r.pod_key not in cluster.nodes[r.node].pods:
                continue
            if v.ignored:
                self._restored.setdefault(r.node, []).append(r)
            elif ok:
                if r.order:
                    node_order[r.node] = min(r.order, node_order.get(r.node, r.order))
                why = r.restricted_misfit(v.requests) if r.restricted else ""
                if why:  # upstream filterWithReservations: the node fails unless another reservation fits
                    self._misfit.setdefault(r.node, why)
                    continue
                fitting.setdefault(r.node, []).append(r)
        for name, rs in fitting.items():  # upstream NominateReservation: the smallest non-zero order, else by name
            ordered = [r for r in rs if r.order]
            serving = self._serving[name] = min(ordered, key=lambda r: r.order) if ordered else rs[0]
            self._restored.setdefault(name, []).append(serving)
            self._misfit.pop(name, None)
        self._scores = self._node_scores(node_order)

    def after_prefilter(self, pod: JSON, cluster: Cluster) -> None:
        """Upstream AfterPreFilter: the matched reservations' resources go back to their nodes for the owner."""
        for name, restored in self._restored.items():
            self._lend(cluster, cluster.nodes[name], restored)

    def _node_scores(self, node_order: dict[str, int]) -> dict[str, int]:
        """Score per serving node. Upstream PreScore prefers (1000, normalized to 100) the feasible node whose matched
        reservations hold the smallest non-zero order, the other nodes scoring their reservation's MostAllocated
        share (≤ 100, ≤ 10 once normalized beside a preferred one). Scores come before filtering here, so nodes with
        an order rank by it (100, 99, … down to 11: the feasible smallest wins), the others 10 — 100 when no node
        has an order (as before)."""
        if not node_order:
            return dict.fromkeys(self._serving, 100)
        scores = dict.fromkeys(self._serving, ORDERLESS_SCORE)
        ranked = sorted((o, name) for name, o in node_order.items() if name in self._serving)
        for rank, (_o, name) in enumerate(ranked):
            scores[name] = max(100 - rank, ORDERLESS_SCORE + 1)
        return scores

    def _begin_pre_allocation(self, placing: Reservation, cluster: Cluster) -> None:
        """Upstream PreFilter/Filter/Score of a pre-allocating reserve pod (Restricted only): on each node, the
        pod it would take over is off the node for the cycle, so the fit plugins see the reservation replace it."""
        if not placing.restricted:
            self._pre_default = preallocation.ERR_UNSUPPORTED
            return
        required = preallocation.required(placing)
        for name, pods in preallocation.candidates(placing, cluster).items():
            node = cluster.nodes[name]
            got = preallocation.nominate(placing, node, pods)
            if got is None:
                if required:
                    self._pre_refused[name] = preallocation.ERR_NO_POD_FITS
                continue
            self._pre[name], self._scores[name] = got
            node.remove_pod(key(got[0]))
        if required:
            self._pre_default = preallocation.ERR_REQUIRED

    def _policy_conflicts(self, placing: Reservation) -> frozenset[str]:
        """Upstream Filter for a reserve pod: a Default-policy reservation (allocatePolicy unset) shares no node with
        a matchable reservation of another policy, nor another policy's with a Default one."""
        policy = placing.policy
        return frozenset(str(r.node) for r in self.book.values()
                         if r is not placing and r.matchable and r.policy != policy
                         and DEFAULT_POLICY in (policy, r.policy))

    def _matching(self, v: matching.PodView, pod: JSON) -> tuple[list[Reservation], list[bool]]:
        """The book by name and whether each may serve the pod, per pod signature (owner after owner of one workload
        match alike); a reservation's answer is kept while its phase, node, owner count, limit and object stay."""
        book = self.book
        members = tuple(map(id, book.values()))
        memo = self._match_memo
        if memo is None or memo.book is not book or memo.members != members:
            order = sorted(book.values(), key=lambda r: r.name)
            memo = self._match_memo = _Matches(book, members, order, frozenset().union(
                *(matching.owner_kinds(r) for r in order)))
        sig = matching.signature(pod, v, memo.kinds)
        seen = memo.results.get(sig)
        if seen is None:
            if len(memo.results) >= 64:
                memo.results.clear()
            seen = memo.results[sig] = [None] * len(memo.order)
        out: list[bool] = []
        for j, r in enumerate(memo.order):
            state = (r.phase, r.node, len(r.owners), r.pod_limit, id(r.obj))
            hit = seen[j]
            if hit is None or hit[0] != state:
                hit = seen[j] = (state, v.eligible(r, pod))
            out.append(hit[1])
        return memo.order, out

    def _lend(self, cluster: Cluster, node: NodeInfo, restored: list[Reservation]) -> None:
        """Take the reserve pods off the node for this cycle. When the node is as it was when the same reserve pods
        were last taken off it for a cycle (and put back unchanged), it is now exactly as it was then: its version
        goes back to that state's, so no plugin recomputes its rows (owner after owner, the same ~10 % of the
        nodes would otherwise be recomputed by every per-node cache twice a cycle)."""
        index = built_index(cluster)
        before = index.version(node) if index is not None else None
        pods = tuple(r.pod for r in restored)
        for r in restored:
            node.remove_pod(r.pod_key, requests_of(r, node.pods.get(r.pod_key)))
        if index is None or before is None:
            self._lent.pop(node.name, None)
            return
        memo = self._lent.get(node.name)
        if memo is not None and memo.same(index, before, pods):
            index.revert(node, memo.after)
        else:
            memo = self._lent[node.name] = _Lent(index, index.epoch, before, index.version(node) or 0, pods)
        memo.generation = node.generation

    def end_cycle(self, pod: JSON, placed: Placement | None) -> None:
        cluster = self._cluster
        if cluster is None:
            return
        for name, taken in self._pre.items():  # the running pods go back; the placed one is the reservation's
            cluster.nodes[name].add_pod(taken)
            if placed is not None and placed.node == name:
                self._pre_taken = (name, taken)
        self._pre, self._pre_refused, self._pre_default = {}, {}, ""
        chosen = self._chosen if placed is not None and placed.node is not None else None
        for name, restored in self._restored.items():
            for r in restored:
                if r is chosen:
                    account(r, pod)
                    r.dirty = True
                    if r.phase != AVAILABLE:
                        continue
                place(r, cluster)
            self._unlend(cluster.nodes[name], restored)
        self._view, self._restored, self._serving, self._chosen, self._held = None, {}, {}, None, {}
        self._scores, self._conflicts, self._pinned = {}, frozenset(), ""

    def _unlend(self, node: NodeInfo, restored: list[Reservation]) -> None:
        """The reserve pods are back: when nothing else touched the node in the cycle and they are the very objects
        taken off, the node is exactly as before the cycle and gets that version back."""
        memo = self._lent.get(node.name)
        if memo is None:
            return
        if node.generation == memo.generation + len(restored) and memo.index.epoch == memo.epoch and len(
                restored) == len(memo.pods):
            pods = node.pods
            for r, p in zip(restored, memo.pods, strict=True):
                if r.pod is not p or pods.get(r.pod_key) is not p:
                    break
            else:
                memo.index.revert(node, memo.before)
                return
        del self._lent[node.name]

    def reserved_devices(self, pod: JSON, node: NodeInfo) -> Any:
        """DeviceShare's preference for an owner on this node: the devices its matched reservation still holds
        (upstream tryAllocateFromReusable: the reservation's minors preferred, Default/Aligned policy)."""
        r = self._serving.get(node.name)
        if r is None or self._view is None or self._view.ignored:
            return None
        if node.name not in self._held:  # once per cycle: DeviceShare keys its cache on the object
            held = r.held_devices()
            self._held[node.name] = held[1] if held is not None and held[1] else None
        return self._held[node.name]

    def restricted_on(self, pod: JSON, node: NodeInfo) -> bool:
        """Whether the reservation serving the pod on this node confines it to what it reserved (Restricted)."""
        r = self._serving.get(node.name)
        return r is not None and r.restricted and self._view is not None and not self._view.ignored

    def reserved_cpus(self, pod: JSON, node: NodeInfo) -> frozenset[int] | None:
        """NodeNUMAResource's preference for an owner on this node: the CPUs its matched reservation still holds
        (upstream nodenumaresource/reservation.go: the reservation's remaining CPUs are allocated first)."""
        r = self._serving.get(node.name)
        if r is None or self._view is None or self._view.ignored:
            return None
        k = f"cpus/{node.name}"
        if k not in self._held:  # once per cycle: the score asks for every node
            held = r.held_cpus()
            self._held[k] = held[1] if held is not None and held[1] else None
        cpus: frozenset[int] | None = self._held[k]
        return cpus

    # -- extension points -------------------------------------------------------------------------------------
    def _refused(self, name: str) -> str | None:
        """Why a reservation being placed may not go to the node (its template's node, allocate policies,
        pre-allocation)."""
        if self._pinned and name != self._pinned:
            return ERR_NODE_NOT_MATCH
        if name in self._conflicts:
            return ERR_POLICY_CONFLICT
        if name in self._pre:
            return None
        return self._pre_refused.get(name) or self._pre_default or None

    def quiet(self, pod: JSON, index: NodeIndex) -> int | None:
        """After begin_cycle: no reservation pins, refuses, requires, misfits or scores anything for the pod, so
        every node passes and scores 0 (scheduler.interfaces' QuietPlugin)."""
        if (self._pinned or self._conflicts or self._pre_refused or self._pre_default or self._misfit
                or self._scores):
            return None
        v = self._view
        return None if v is not None and (v.invalid or v.required) else 0

    def filter(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> str | None:
        why = self._refused(node.name)
        if why is not None:
            return why
        v = self._view
        if v is None:
            return None
        if v.invalid:
            return v.invalid
        if node.name in self._misfit:
            return self._misfit[node.name]
        if v.required and node.name not in self._serving:
            return ERR_AFFINITY
        return None

    def prefilter_vector(self, pod: JSON, index: NodeIndex) -> BoolArray | None:
        if self._pinned or self._conflicts or self._pre_refused or self._pre_default:  # a reserve pod: every node
            return np.fromiter((self._refused(name) is None for name in index.names), dtype=np.bool_,
                               count=len(index))
        v = self._view
        if v is None or not (v.required or self._misfit) or v.invalid:
            return None
        if not v.required:
            mask = np.ones(len(index), dtype=np.bool_)
            for name in self._misfit:
                i = index.pos.get(name)
                if i is not None:
                    mask[i] = False
            return mask
        mask = np.zeros(len(index), dtype=np.bool_)
        for i, name in enumerate(index.names):
            if name in self._serving:
                mask[i] = True
        return mask

    def score(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> int:
        return self._scores.get(node.name, 0)

    def score_vector(self, pod: JSON, index: NodeIndex) -> IntArray | int:
        if not self._scores:
            return 0  # the same on every node
        out = np.zeros(len(index), dtype=np.int64)
        for name, value in self._scores.items():
            i = index.pos.get(name)
            if i is not None:
                out[i] = value
        return out

    def reserve(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> dict[str, str]:
        r = self._serving.get(node.name)
        if r is None or (self._view is not None and self._view.ignored):
            return {}
        self._chosen = r
        return {ANNOTATION_RESERVATION_ALLOCATED: encode_reservation_allocated(ReservationAllocated(r.name, r.uid))}

    def unreserve(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> None:
        """Within a cycle: nothing was accounted yet. After it (a rejected gang's members are released): the
        member is no longer an owner, its share and devices return to the reservation (Available again)."""
        self._chosen = None
        k = key(pod)
        for r in self.book.values():
            if k in r.owners and r.node == node.name:
                node.remove_pod(r.pod_key)
                release(r, pod)
                if r.phase == SUCCEEDED and not r.owners:
                    r.phase = AVAILABLE
                r.dirty = True
                place(r, cluster)

    # -- preemption inside a reservation (ReservationArgs.enablePreemption) -----------------------------------
    def post_filter(self, handle: Handle, pod: JSON) -> Placement | None:
        """An owner that does not fit may evict lower-priority owners of a matched reservation (never the
        reservation itself: upstream does not support preempting Reservations)."""
        if not self.enable_preemption or is_reserve_pod(pod) or self._preempting:
            return None
        self._preempting = True
        try:
            return self._preempt(handle, pod)
        finally:
            self._preempting = False

    def _preempt(self, sched: Handle, pod: JSON) -> Placement | None:
        v = matching.view(pod)
        if v.invalid or v.ignored:
            return None
        prio = pod_priority(pod, sched.cluster)
        for r in sorted(self.book.values(), key=lambda r: r.name):
            if r.phase != AVAILABLE or not r.node:
                continue
            node = sched.cluster.nodes[r.node]
            owners = [node.pods[k] for k in r.owners if k in node.pods]
            victims = sorted((p for p in owners if pod_priority(p, sched.cluster) < prio),
                             key=lambda p: (pod_priority(p, sched.cluster), key(p)))
            if not victims:
                continue
            limit, r.pod_limit = r.pod_limit, None  # the victims' slots are what is being freed
            ok = v.eligible(r, pod)
            r.pod_limit = limit
            if not ok:
                continue
            removed: list[JSON] = []
            for victim in victims:
                self._evict(r, node, victim)
                removed.append(victim)
                placed = sched.schedule(pod)
                if placed.node is not None:
                    self.preemptions.append({"preemptor": key(pod), "reservation": r.name, "node": r.node,
                                             "victims": [key(p) for p in removed]})
                    return placed
            for victim in reversed(removed):  # not enough: put everything back
                self._unevict(r, node, victim)
        return None

    def _evict(self, r: Reservation, node: NodeInfo, victim: JSON) -> None:
        node.remove_pod(r.pod_key)
        node.remove_pod(key(victim))
        release(r, victim)
        place(r, self._cluster) if self._cluster is not None else None

    def _unevict(self, r: Reservation, node: NodeInfo, victim: JSON) -> None:
        node.remove_pod(r.pod_key)
        node.add_pod(victim)
        account(r, victim)
        if r.phase == AVAILABLE and self._cluster is not None:
            place(r, self._cluster)

    # -- reporting ----------------------------------------------------------------------------------------------
    def report(self) -> list[JSON]:
        return [{"name": r.name, "node": r.node, "phase": r.phase, "allocated": resource_json(r.allocated),
                 "owners": sorted(r.owners), **({"reason": r.reason} if r.reason else {})}
                for r in sorted(self.book.values(), key=lambda r: r.name)]
