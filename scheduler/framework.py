"""The framework: a profile's plugins resolved per extension point once, and the scheduling cycle over them.

`Profile` sorts the plugins into the extension points they implement (scheduler.interfaces' Protocols) when it is
made; nothing is looked up on a plugin at call time. `Cycle` is one pod's cycle: begin (the cycle hooks), prefilter,
filter and score per node, reserve (unreserve in reverse when a later plugin refuses), assume, end. `simulate`,
`run`, the extender and the gang planner all go through it; `Scheduler.release` undoes assumed pods (Permit's
reject and the binder's rollback: scheduler.binder).

`Cycle.run` does not run every filter on every node: it ranks the nodes passing every vector prefilter by total
score (ties by name), runs the exact filters on the best one and reserves there, moving down the ranking on
failure. Only when no node takes the pod are the remaining nodes filtered one by one, so the reasons stay exact.
"""

from __future__ import annotations

import gc
import logging
import time
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import TypeVar

import numpy as np

from apis.core.errors import InvalidInput
from apis.core.objects import JSON, annotate
from scheduler import debug
from scheduler.cluster import Cluster, NodeInfo, cycle_requests, key, pod_requests
from scheduler.gang.model import pod_priority
from scheduler.gang.queuesort import QueueState, priority_order
from scheduler.interfaces import (
    BindPlugin,
    CyclePlugin,
    FilterPlugin,
    NormalizeScorePlugin,
    Placement,
    Plugin,
    PostFilterPlugin,
    PreBindPlugin,
    PreFilterNodesPlugin,
    PreFilterPlugin,
    PreScorePlugin,
    QueuePlugin,
    QueueSortPlugin,
    ReservePlugin,
    ScorePlugin,
    SyncPlugin,
    Unschedulable,
    VectorFilterPlugin,
    VectorScorePlugin,
)
from scheduler.metrics import ERROR_STATUS, SchedulerMetrics
from scheduler.nodeindex import BoolArray, IntArray, NodeIndex, node_index
from scheduler.quiet import Plan, Plans
from scheduler.vectorcache import Kept, Timings, VectorCache

log = logging.getLogger(__name__)

P = TypeVar("P")


def invalid_pod(pod: JSON) -> str | None:
    """Why a pod cannot be considered at all (malformed requests), or None."""
    try:
        pod_requests(pod)
    except InvalidInput as e:
        return f"invalid pod: {e}"
    except (AttributeError, TypeError) as e:
        return f"invalid pod: malformed spec ({e})"
    return None


class Profile:
    """One profile's plugins per extension point, resolved once: the Filter, Score and Reserve lists as configured,
    the queueSort plugin and the Bind list (None / empty: the file order, every pod bound), plugins enabled at
    PreFilter alone (SchedulingHint), and every other hook from the plugins (each once, in profile order) that
    implement it."""

    def __init__(self, filters: Iterable[FilterPlugin] = (), scorers: Iterable[ScorePlugin] = (),
                 reservers: Iterable[ReservePlugin] = (), *, queue_sort: QueueSortPlugin | None = None,
                 binders: Iterable[BindPlugin] = (), prefilter_only: Iterable[Plugin] = ()) -> None:
        self.filters = tuple(filters)
        self.scorers = tuple(scorers)
        self.reservers = tuple(reservers)
        self.queue_sort = queue_sort
        self.binders = tuple(binders)
        plugins: tuple[Plugin, ...] = tuple(dict.fromkeys([*prefilter_only, *self.filters, *self.scorers,
                                                           *self.reservers]))
        self.plugins = plugins
        self.by_name: dict[str, Plugin] = {}
        for p in plugins:
            self.by_name.setdefault(p.name, p)
        # the vector stage, aligned with `filters` and `scorers` (None: the plugin has no vector hook)
        self.filter_vectors = tuple(f if isinstance(f, VectorFilterPlugin) else None for f in self.filters)
        self.score_vectors = tuple(s if isinstance(s, VectorScorePlugin) else None for s in self.scorers)
        self.normalizers = tuple(s if isinstance(s, NormalizeScorePlugin) else None for s in self.scorers)
        # per scorer, a uniform raw score → its normalized value (NormalizeScore is a function of its arguments)
        self.uniform_normalized: tuple[dict[int, int], ...] = tuple({} for _ in self.scorers)
        self.prescorers = tuple(s for s in self.scorers if isinstance(s, PreScorePlugin))
        self.prefilters = tuple(p for p in plugins if isinstance(p, PreFilterPlugin))
        self.node_narrowers = tuple(p for p in plugins if isinstance(p, PreFilterNodesPlugin))
        self.cycle_hooks = tuple(p for p in plugins if isinstance(p, CyclePlugin))
        self.post_filters = tuple(p for p in plugins if isinstance(p, PostFilterPlugin))
        self.prebinders = tuple(p for p in plugins if isinstance(p, PreBindPlugin))
        self.queue = tuple(p for p in plugins if isinstance(p, QueuePlugin))
        self.syncers = tuple(p for p in plugins if isinstance(p, SyncPlugin))
        self.plans = Plans(self)  # the vector cycle's hooks once the plugins quiet about a pod are left out


@dataclass
class Assumed:
    """A pod assumed on a node, not bound yet: a gang member waiting at Permit (upstream's WaitingPod), or a pod
    whose Binding is under way."""

    pod: JSON
    node: str
    annotations: dict[str, str] = field(default_factory=dict)
    removed: tuple[str, ...] = ()  # annotations PreBind takes off the pod (sent as null in its patch)


class _Clock:
    """Lap times of one cycle for scheduler.metrics (a no-op without metrics)."""

    def __init__(self, metrics: SchedulerMetrics | None) -> None:
        self.metrics = metrics
        self.last = self.lap = time.perf_counter() if metrics is not None else 0.0

    def plugin(self, name: str, point: str) -> None:
        if self.metrics is not None:
            now = time.perf_counter()
            self.metrics.plugin_run(name, point, now - self.last)
            self.last = now

    def took(self, name: str, point: str, seconds: float) -> None:
        """A plugin's time at a point measured elsewhere (the kept vectors' hooks)."""
        if self.metrics is not None:
            self.metrics.plugin_run(name, point, seconds)
            self.last = time.perf_counter()  # the next plugin's lap starts now

    def point(self, point: str, ok: bool = True) -> None:
        if self.metrics is not None:
            now = time.perf_counter()
            self.metrics.point(point, now - self.lap, ok)
            self.last = self.lap = now


class LazyScores(Mapping[str, int]):
    """Placement.scores from the cycle's arrays, made a dict on first use: few callers read it, and building it
    for every feasible node was a third of a cycle at 5 000 nodes. The nodes shown are those of `shown` but the
    `failed` rows, each with its total + `uniform`."""

    def __init__(self, names: np.ndarray, totals: IntArray, uniform: int, shown: BoolArray,
                 failed: tuple[int, ...]) -> None:
        # the cycle's arrays, which it no longer touches: nothing is copied until somebody reads. Arrays kept by the
        # vector cache are changed in place by a later cycle, which calls `settle` first (vectorcache.Kept.lend).
        self._names, self._totals, self._uniform, self._shown, self._failed = names, totals, uniform, shown, failed
        self._dict: dict[str, int] | None = None

    def settle(self) -> None:
        """The arrays are about to change: copies are kept instead (what each cycle copied before)."""
        if self._dict is None:
            self._totals, self._shown = self._totals.copy(), self._shown.copy()

    def _get(self) -> dict[str, int]:
        if self._dict is None:
            shown = self._shown
            if self._failed:
                shown = shown.copy()
                shown[list(self._failed)] = False
            self._dict = dict(zip(self._names[shown].tolist(), (self._totals[shown] + self._uniform).tolist(),
                                  strict=True))
        return self._dict

    def __getitem__(self, k: str) -> int:
        return self._get()[k]

    def __iter__(self) -> Iterator[str]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())


@dataclass
class Scheduler:
    """A profile over a cluster: the extension points as a public API, and `schedule` for one pod's whole cycle."""

    cluster: Cluster
    profile: Profile
    metrics: SchedulerMetrics | None = None  # recorded only when set (run, extender)
    vectors: VectorCache = field(init=False, repr=False, compare=False)  # the opted-in plugins' kept vectors

    def __post_init__(self) -> None:
        p = self.profile
        self.vectors = VectorCache(p.filters, p.scorers, p.normalizers)

    def plugin(self, name: str, kind: type[P]) -> P | None:
        """The profile's plugin of that name (None when the profile has none); TypeError when it is not a `kind`."""
        p = self.profile.by_name.get(name)
        if p is None:
            return None
        if not isinstance(p, kind):
            raise TypeError(f"plugin {name} is a {type(p).__name__}, not a {kind.__name__}")
        return p

    def cycle(self, pod: JSON) -> Cycle:
        """One cycle for the pod; enter it (`with`) to run the begin/end hooks around what is done in it."""
        return Cycle(self, pod)

    # -- extension points outside a cycle (the queue, informer events, PreBind, Bind) ------------------------------
    def order(self, pods: list[JSON], state: QueueState | None = None) -> list[JSON]:
        """The pending pods in the queueSort plugin's order (PrioritySort's for a profile made without one)."""
        qs = self.profile.queue_sort
        if qs is None:
            return priority_order(pods, lambda p: pod_priority(p, self.cluster), state)
        return qs.order(pods, self.cluster, state)

    def binder(self, pod: JSON) -> str | None:
        """The bind plugin that binds the pod: the first not to Skip it (None: every one skipped; a profile made
        without a Bind list binds every pod)."""
        if not self.profile.binders:
            return "DefaultBinder"
        return next((b.name for b in self.profile.binders if b.binds(pod)), None)

    def admit_pending(self, pods: list[JSON]) -> None:
        """Tell plugins which pods are waiting (ElasticQuota counts their requests), as an informer would."""
        for p in self.profile.queue:
            p.add_pending(pods, self.cluster)

    def forget(self, pod: JSON) -> None:
        """The pod was deleted or evicted: plugins drop what they account for it beyond its node."""
        for p in self.profile.queue:
            p.forget(pod)

    def prebind_patches(self, pod_key: str) -> tuple[dict[str, str], dict[str, str]]:
        """Pod labels and Node annotations plugins want written before the pod's Binding (DeviceShare's device
        plugin adapters: HAMi's vgpu-node label, Cambricon's node lock); handed out once per reservation."""
        labels: dict[str, str] = {}
        node_annotations: dict[str, str] = {}
        for p in self.profile.prebinders:
            got = p.prebind_patches(pod_key)
            if got is not None:
                labels.update(got.labels)
                node_annotations.update(got.node_annotations)
        return labels, node_annotations

    # -- the plugins of one extension point (a cycle's steps; the gang planner's dry runs call filter alone) ------
    def prefilter(self, pod: JSON) -> str | None:
        """The first PreFilter rejection (a node-independent reason), or None."""
        got = self.prefilter_by(pod)
        return None if got is None else got[1]

    def prefilter_by(self, pod: JSON, prefilters: Sequence[PreFilterPlugin] | None = None) -> tuple[str, str] | None:
        """The first PreFilter rejection as (plugin, reason), or None (`prefilters`: those of them, in profile
        order)."""
        for p in self.profile.prefilters if prefilters is None else prefilters:
            why = p.prefilter(pod, self.cluster)
            if why is not None:
                return p.name, str(why)
        return None

    def prefilter_nodes(self, pod: JSON) -> frozenset[str] | None:
        """The only nodes PreFilter leaves to look at (the intersection of every plugin's), None for all."""
        allowed: frozenset[str] | None = None
        for p in self.profile.node_narrowers:
            names = p.prefilter_nodes(pod)
            if names is not None:
                allowed = names if allowed is None else allowed & names
        return allowed

    def filter(self, pod: JSON, node: NodeInfo) -> str | None:
        """Every Filter on one node: the first reason it fails, or None."""
        got = self.filter_by(pod, node)
        return None if got is None else got[1]

    def filter_by(self, pod: JSON, node: NodeInfo,
                  filters: Sequence[FilterPlugin] | None = None) -> tuple[str, str] | None:
        """Every Filter on one node (or those of `filters`, in profile order): (plugin, reason) of the first that
        fails, or None."""
        for f in self.profile.filters if filters is None else filters:
            try:
                why = f.filter(pod, node, self.cluster)
            except Unschedulable as e:
                why = str(e)
            if why is not None:
                if debug.filter_failure:  # frameworkext's debugFilterFailure line
                    log.info('Failed to filter for Pod "%s" on Node "%s", failedPlugin: %s, reason: %s', key(pod),
                             node.name, f.name, why)
                return f.name, why
        return None

    def scores(self, pod: JSON, nodes: Sequence[NodeInfo]) -> list[int]:
        """The weighted total of every Score on each of `nodes` (each plugin's scores normalized over these nodes
        where it normalizes, then clamped to 0..100), as kube-scheduler scores the nodes that passed Filter."""
        return self.weighted_scores(pod, nodes)[0]

    def weighted_scores(self, pod: JSON, nodes: Sequence[NodeInfo]) -> tuple[list[int], int]:
        """`scores`, and the summed weight of the plugins that gave some node more than 0 (the extender's scale: a
        plugin scoring every node 0 changes no ranking)."""
        if self.profile.prescorers:
            index = node_index(self.cluster)
            candidates = np.zeros(len(index), dtype=np.bool_)
            candidates[[index.pos[n.name] for n in nodes if n.name in index.pos]] = True
            for p in self.profile.prescorers:
                p.prescore(pod, index, candidates)
        totals = np.zeros(len(nodes), dtype=np.int64)
        active = 0
        for s, norm in zip(self.profile.scorers, self.profile.normalizers, strict=True):
            raw = np.fromiter((s.score(pod, n, self.cluster) for n in nodes), dtype=np.int64, count=len(nodes))
            if norm is not None and len(nodes):
                raw = norm.normalize(raw, int(raw.max()))
            clipped = np.clip(raw, 0, 100)
            totals += s.weight * clipped
            active += s.weight if clipped.any() else 0
        return [int(t) for t in totals], active

    def reserve(self, pod: JSON, node: NodeInfo) -> dict[str, str]:
        """Every Reserve in order; the annotations they add. When one refuses (Unschedulable, raised on) the ones
        done are unreserved in reverse."""
        done: list[ReservePlugin] = []
        annotations: dict[str, str] = {}
        try:
            for r in self.profile.reservers:
                annotations.update(r.reserve(pod, node, self.cluster))
                done.append(r)
        except Unschedulable:
            self._unreserve(done, pod, node)
            raise
        return annotations

    def unreserve(self, pod: JSON, node: NodeInfo, keep: Collection[str] = ()) -> None:
        """Every Unreserve in reverse, but those of the plugins named in `keep`."""
        self._unreserve([r for r in self.profile.reservers if r.name not in keep], pod, node)

    def _unreserve(self, reservers: Sequence[ReservePlugin], pod: JSON, node: NodeInfo) -> None:
        for r in reversed(reservers):
            r.unreserve(pod, node, self.cluster)

    def release(self, assumed: Sequence[Assumed]) -> None:
        """Undo assumed pods, last first (Permit's reject, a failed Binding): Unreserve, off the node, nodeName and
        the reserved annotations dropped."""
        for a in reversed(assumed):
            node = self.cluster.nodes.get(a.node)
            if node is not None:
                self.unreserve(a.pod, node)
                node.remove_pod(key(a.pod))
            (a.pod.get("spec") or {}).pop("nodeName", None)
            annotations = (a.pod.get("metadata") or {}).get("annotations") or {}
            for k in a.annotations:
                annotations.pop(k, None)

    def prepare(self, freeze: bool = True) -> None:
        """Build every plugin's per-node state now rather than in the first cycle (optional; like a cache sync).

        The cyclic GC is paused meanwhile and, with `freeze`, the loaded heap (cluster and caches) is moved to
        the permanent generation afterwards (gc.freeze, O(1)): otherwise every full collection triggered by the
        hundreds of thousands of objects allocated here rescans the whole cluster, which was most of a cold
        start. A long-running caller that later drops this cluster calls gc.unfreeze() so its cycles can go."""
        enabled = gc.isenabled()
        gc.disable()
        try:
            index = node_index(self.cluster)
            for p in self.profile.syncers:
                p.sync(index)
        finally:
            if freeze:
                gc.freeze()
            if enabled:
                gc.enable()

    # -- one whole cycle ----------------------------------------------------------------------------------------
    def schedule(self, pod: JSON, *, attempt: bool = True) -> Placement:
        """One cycle; on success the pod is assumed on the node (its annotations included). Then PostFilter for a
        pod no node took (preemption), which may place it.

        `Placement.scores` holds the nodes that passed the vector prefilters and were not found infeasible.
        `attempt`: count the attempt in scheduler_schedule_attempts_total (the gang planner counts its members
        itself, once Permit decided for their group)."""
        with self.cycle(pod) as cycle, cycle_requests(pod):
            placed = cycle.run(attempt)
        if placed.node is None:
            for p in self.profile.post_filters:
                got = p.post_filter(self, pod)
                if got is not None:
                    return got
        return placed

    def unschedulable(self, pod: JSON, reasons: Mapping[str, int], plugins: Iterable[str] = ()) -> Placement:
        """kube-scheduler's FitError: the reasons by how many nodes gave each; `plugins` the ones that gave them."""
        summary = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))
        return Placement(key(pod), None, reason=f"0/{len(self.cluster.nodes)} nodes are available: {summary}."
                         if summary else f"0/{len(self.cluster.nodes)} nodes are available.",
                         plugins=frozenset(plugins))


class Cycle:
    """One pod's scheduling cycle (upstream's scheduleOne with koord-scheduler's transformers): `with` runs the
    plugins' begin_cycle on entry and end_cycle (told the Placement, if one was assumed) on exit; in between,
    prefilter → filter/score per node → reserve → assume, by hand (the extender's verbs, the gang planner's
    planned nodes) or all at once (`run`)."""

    def __init__(self, sched: Scheduler, pod: JSON) -> None:
        self.sched = sched
        self.cluster = sched.cluster
        self.pod = pod
        self.placed: Placement | None = None

    def __enter__(self) -> Cycle:
        self.begin()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.end()

    def begin(self) -> None:
        hooks, metrics = self.sched.profile.cycle_hooks, self.sched.metrics
        if metrics is None:
            for h in hooks:
                h.begin_cycle(self.pod, self.cluster)
            for h in hooks:
                h.after_prefilter(self.pod, self.cluster)
            return
        # frameworkext's RunPreFilterPlugins times each transformer under its point's name (v1.6)
        for point in ("BeforePreFilter", "AfterPreFilter"):
            for h in hooks:
                start = time.perf_counter()
                try:
                    (h.begin_cycle if point == "BeforePreFilter" else h.after_prefilter)(self.pod, self.cluster)
                except Exception:
                    metrics.plugin_run(h.name, point, time.perf_counter() - start, status=ERROR_STATUS)
                    raise
                metrics.plugin_run(h.name, point, time.perf_counter() - start)

    def end(self) -> None:
        for h in self.sched.profile.cycle_hooks:
            h.end_cycle(self.pod, self.placed)

    def prefilter(self) -> str | None:
        return self.sched.prefilter(self.pod)

    def filter(self, node: NodeInfo) -> str | None:
        return self.sched.filter(self.pod, node)

    def reserve(self, node: NodeInfo) -> dict[str, str]:
        """Reserve on the node (raises Unschedulable, everything unreserved again)."""
        return self.sched.reserve(self.pod, node)

    def unreserve(self, node: NodeInfo) -> None:
        self.sched.unreserve(self.pod, node)

    def assume(self, node: NodeInfo, annotations: dict[str, str],
               scores: Mapping[str, int] | None = None) -> Placement:
        """The pod is placed: its annotations added, assumed on the node; end_cycle will be told."""
        annotate(self.pod, annotations)
        self.cluster.assume(self.pod, node.name)
        self.placed = Placement(key(self.pod), node.name, annotations, scores={} if scores is None else scores)
        return self.placed

    def place_on(self, node: NodeInfo) -> Placement:
        """PreFilter, Filter, Reserve and assume on one given node; raises Unschedulable."""
        why = self.prefilter() or self.filter(node)
        if why is not None:
            raise Unschedulable(why)
        return self.assume(node, self.reserve(node))

    def feasible(self, node_names: list[str] | None = None) -> tuple[list[NodeInfo], dict[str, str]]:
        """Nodes (all, or the named ones) the pod fits, and the reason for every other node."""
        nodes = (self.cluster.nodes.values() if node_names is None else
                 [self.cluster.nodes[n] for n in node_names if n in self.cluster.nodes])
        rejected = self.prefilter()
        allowed = self.sched.prefilter_nodes(self.pod) if rejected is None else None
        if allowed is not None:
            nodes = [n for n in nodes if n.name in allowed]
        if rejected is not None:
            return [], {n.name: rejected for n in nodes}
        fits: list[NodeInfo] = []
        failed: dict[str, str] = {}
        for node in nodes:
            why = self.filter(node)
            if why is None:
                fits.append(node)
            else:
                failed[node.name] = why
        return fits, failed

    def scores(self, nodes: list[NodeInfo]) -> dict[str, int]:
        """Weighted score per node (higher is better), normalized over these nodes."""
        return self.weighted_scores(nodes)[0]

    def weighted_scores(self, nodes: list[NodeInfo]) -> tuple[dict[str, int], int]:
        """`scores`, and the summed weight of the plugins that scored some of these nodes above 0."""
        totals, active = self.sched.weighted_scores(self.pod, nodes)
        return dict(zip((n.name for n in nodes), totals, strict=True)), active

    # -- the whole cycle ----------------------------------------------------------------------------------------
    def run(self, attempt: bool = True) -> Placement:
        """Filter, score, reserve and assume on the best node that takes the pod; the reasons when none does."""
        metrics = self.sched.metrics
        if metrics is None:
            return self._vector(None)
        start = time.perf_counter()
        try:
            placed = self._vector(metrics)
        except Exception:
            if attempt:
                metrics.attempt("error", time.perf_counter() - start)
            raise
        if attempt:
            metrics.attempt("scheduled" if placed.node is not None else "unschedulable",
                            time.perf_counter() - start)
        return placed

    def _vector(self, metrics: SchedulerMetrics | None) -> Placement:
        pod, profile = self.pod, self.sched.profile
        problem = invalid_pod(pod)
        if problem:
            return Placement(key(pod), None, reason=problem)
        clock = _Clock(metrics)
        index = node_index(self.cluster)
        # the plugins with nothing to say about this pod are left out (their per-node score table is shown whole)
        plan = profile.plans.plan(pod, index) if debug.top_n_scores <= 0 else profile.plans.everything
        rejected = self.sched.prefilter_by(pod, plan.prefilters)
        clock.point("PreFilter", rejected is None)
        if rejected is not None:  # kube-scheduler's FitError with a PreFilter message
            return Placement(key(pod), None, reason=f"0/{len(self.cluster.nodes)} nodes are available: "
                             f"{rejected[1]}.", plugins=frozenset((rejected[0],)))
        n = len(index)
        timed: Timings | None = {} if metrics is not None else None
        kept = (self.sched.vectors.kept(pod, index, timed, plan.quiet_scorers) if debug.top_n_scores <= 0
                else None)
        for (name, point), seconds in (timed or {}).items():  # the kept plugins' share, each once a cycle
            clock.took(name, point, seconds)
        # `mask` and `total` start as the cache's own arrays when it keeps some: replaced, never written in place
        if kept is not None:
            mask, total, own = kept.mask, kept.total, False
        else:
            mask, total, own = np.ones(n, dtype=np.bool_), np.zeros(n, dtype=np.int64), True
        own_total = own
        fresh = False  # some vector not in `kept` tells the nodes apart: the kept rank does not do
        allowed = self.sched.prefilter_nodes(pod)
        considered: BoolArray | None = None
        if allowed is not None:  # PreFilterResult.NodeNames: the other nodes are not looked at, nor counted
            considered = np.isin(index.names_array, list(allowed))
            mask, own, fresh = mask & considered, True, True
        for name in plan.hushed_filters if metrics is not None else ():
            clock.took(name, "Filter", 0.0)
        for j, f, vf in plan.filters:
            if kept is not None and kept.filters[j]:
                continue
            m = vf.prefilter_vector(pod, index) if vf is not None else None
            clock.plugin(f.name, "Filter")
            if m is not None:
                if own:
                    mask &= m
                else:
                    mask, own = mask & m, True
                fresh = True
        clock.point("Filter")
        for p in plan.prescorers:
            p.prescore(pod, index, mask)  # read only: it may be the cache's own array
        uniform = plan.uniform  # Σ of the scores that are the same on every node: they shift every total alike
        for name in plan.hushed_scorers if metrics is not None else ():
            clock.took(name, "Score", 0.0)
        failed: dict[int, str] = {}  # rows whose Filter failed (a normalizing score may look at some first)
        blamed: set[str] = set()  # the plugins whose Filter failed a node
        per_plugin: list[IntArray] | None = [] if debug.top_n_scores > 0 else None
        for j, s, vs, norm in plan.scorers:
            if kept is not None and kept.scorers[j]:
                continue
            v = vs.score_vector(pod, index) if vs is not None else None
            if isinstance(v, int):
                if norm is not None:
                    memo = profile.uniform_normalized[j]
                    normalized = memo.get(v)
                    if normalized is None:
                        if len(memo) >= 64:
                            memo.clear()
                        normalized = memo[v] = int(norm.normalize(np.array([v], dtype=np.int64), v)[0])
                    v = normalized
                clock.plugin(s.name, "Score")
                same = s.weight * max(0, min(100, v))
                uniform += same
                if per_plugin is not None:
                    per_plugin.append(np.full(n, same, dtype=np.int64))
                continue
            if v is None:
                v = np.zeros(n, dtype=np.int64)
                for i in np.flatnonzero(mask).tolist():
                    v[i] = s.score(pod, index.nodes[i], self.cluster)
            if norm is not None:
                v = norm.normalize(v, self._feasible_top(v, mask, failed, blamed))
            clock.plugin(s.name, "Score")
            weighted = np.minimum(v, 100)  # a fresh array: v may be a plugin's cached one (np.clip is ~3× slower)
            np.maximum(weighted, 0, out=weighted)
            if s.weight != 1:
                weighted *= s.weight
            if own_total:
                total += weighted
            else:
                total, own_total = total + weighted, True
            fresh = True
            if per_plugin is not None:
                per_plugin.append(weighted)
        if kept is None or fresh:
            rank = total * max(n, 1) + (n - 1 - index.name_rank)  # best score first, then the smallest name
            rank[~mask] = -1
            return self._place(index, rank, None, mask, total, uniform, considered, failed, blamed, per_plugin,
                               clock, metrics, kept, plan)
        saved: dict[int, int] = {}  # the kept rank's rows set to −1 as they are tried, put back after
        try:
            return self._place(index, kept.rank, saved, mask, total, uniform, considered, failed, blamed,
                               per_plugin, clock, metrics, kept, plan)
        finally:
            rank = kept.rank
            for i, value in saved.items():  # one or two rows, seldom more
                rank[i] = value

    def _place(self, index: NodeIndex, rank: IntArray, saved: dict[int, int] | None, mask: BoolArray,
               total: IntArray, uniform: int, considered: BoolArray | None, failed: dict[int, str],
               blamed: set[str], per_plugin: list[IntArray] | None, clock: _Clock,
               metrics: SchedulerMetrics | None, kept: Kept | None = None, plan: Plan | None = None) -> Placement:
        """Try the ranked nodes best first (`saved`: the rank is the cache's own, its rows' values are kept there
        before they are set to −1); the reasons of every node when none takes the pod. A node whose kept row is
        as of its current version skips the kept filters that are exact (scheduler.interfaces, exact_rows)."""
        pod, n = self.pod, len(index)
        for i in failed:
            if saved is not None and i not in saved:
                saved[i] = int(rank[i])
            rank[i] = -1
        reasons: Counter[str] = Counter()
        clock.point("Score")
        while n:
            i = int(rank.argmax())
            best = rank.item(i)
            if best < 0:
                break
            if saved is not None:
                saved[i] = best
            rank[i] = -1
            node = index.nodes[i]
            filters = None if kept is None else kept.filters_for(index, i)
            got = self.sched.filter_by(pod, node, filters if plan is None else plan.filters_of(filters))
            clock.point("Filter", got is None)
            if got is not None:
                blamed.add(got[0])
                failed[i] = got[1]
                continue
            try:
                annotations = self.reserve(node)
            except Unschedulable as e:
                clock.point("Reserve", False)
                reasons[str(e)] += 1
                continue
            clock.point("Reserve")
            if metrics is not None:
                metrics.reserved(annotations)
            scores = LazyScores(index.names_array, total, uniform, mask, tuple(failed))
            if kept is not None and (mask is kept.mask or total is kept.total):
                kept.lend(scores)  # the cache's own arrays, which a later cycle changes in place
            if per_plugin is not None:
                shown = mask.copy()
                shown[list(failed)] = False
                self._log_scores(index, np.flatnonzero(shown), total, per_plugin)
            return self.assume(node, annotations, scores)
        # Nobody takes the pod: the reason of every node the prefilters ruled out, one by one.
        for i in np.flatnonzero(~mask if considered is None else ~mask & considered).tolist():
            got = self.sched.filter_by(pod, index.nodes[i])
            if got is None:  # a prefilter was wrong; never for the built-in plugins
                log.warning("%s: a vector prefilter ruled out node %s that fits", key(pod), index.names[i])
                return self.run_each()
            blamed.add(got[0])
            failed[i] = got[1]
        reasons.update(failed.values())
        return self.sched.unschedulable(pod, reasons, blamed)

    def _feasible_top(self, raw: IntArray, mask: BoolArray, failed: dict[int, str], blamed: set[str]) -> int:
        """The largest raw score among the nodes Filter passes, as kube normalizes over them: the vector filters
        may leave a node Filter rejects, so the masked rows are tried from the highest score down (usually one
        Filter call; the rows found failing are not tried again by the cycle)."""
        if not raw.any():
            return 0
        rows = np.flatnonzero(mask)
        nodes = node_index(self.cluster).nodes
        for i in rows[np.argsort(-raw[rows], kind="stable")].tolist():
            if i in failed:
                continue
            got = self.sched.filter_by(self.pod, nodes[i])
            if got is None:
                return int(raw[i])
            blamed.add(got[0])
            failed[i] = got[1]
        return 0

    def _log_scores(self, index: NodeIndex, shown: IntArray, total: IntArray, per_plugin: list[IntArray]) -> None:
        rows = [(index.names[i], int(total[i]), [int(v[i]) for v in per_plugin]) for i in shown.tolist()]
        log.info("%s", debug.score_table(key(self.pod), debug.top_n_scores,
                                         [s.name for s in self.sched.profile.scorers], rows, len(rows)))

    def run_each(self) -> Placement:
        """The cycle without the vector stage: every filter on every node (what the vector stage must agree with)."""
        fits, failed = self.feasible()
        reasons: Counter[str] = Counter(failed.values())
        ranked = sorted(zip(self.sched.scores(self.pod, fits), (n.name for n in fits), strict=True),
                        key=lambda t: (-t[0], t[1]))
        for _total, name in ranked:
            node = self.cluster.nodes[name]
            try:
                annotations = self.reserve(node)
            except Unschedulable as e:
                reasons[str(e)] += 1
                continue
            return self.assume(node, annotations, {n: s for s, n in ranked})
        return self.sched.unschedulable(self.pod, reasons)
