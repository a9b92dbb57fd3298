"""The scheduling cycle: filter every node, score the feasible ones, reserve on the best, explain the rest.

Plugins follow kube-scheduler's extension points in the small: `filter` returns None when the pod fits or a reason,
`score` returns 0..100 (weighted by the profile), `reserve` returns annotations to add to the pod (DeviceShare's
`device-allocated`) or raises Unschedulable, `unreserve` undoes it.

`schedule` does not run every filter on every node. Plugins may also offer `prefilter_vector(pod, index)` — a
numpy bool per node of scheduler.nodeindex.NodeIndex that is False only where their `filter` surely fails (None:
no opinion) — and `score_vector(pod, index)` — their exact `score` for every node (None: not vectorisable for this
pod, then `score` is called per node). The cycle ranks the nodes passing every prefilter by total score (ties by
name, as before), runs the exact filters on the best one and reserves there, moving down the ranking on failure.
Only when no node takes the pod are the remaining nodes filtered one by one, so the reasons stay exact.
"""

from __future__ import annotations

import gc
import logging
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from apis.core.errors import InvalidInput
from apis.core.objects import JSON
from scheduler import debug
from scheduler.cluster import PODS, Cluster, NodeInfo, cycle_requests, key, pod_requests
from scheduler.nodeindex import BoolArray, IntArray, NodeIndex, Tracker, node_index

log = logging.getLogger(__name__)


def invalid_pod(pod: JSON) -> str | None:
    """Why a pod cannot be considered at all (malformed requests), or None."""
    try:
        pod_requests(pod)
    except InvalidInput as e:
        return f"invalid pod: {e}"
    except (AttributeError, TypeError) as e:
        return f"invalid pod: malformed spec ({e})"
    return None


class Unschedulable(Exception):
    """A plugin cannot place the pod on this node (the message is the reason shown to users)."""


@runtime_checkable
class FilterPlugin(Protocol):
    name: str

    def filter(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> str | None: ...


@runtime_checkable
class ScorePlugin(Protocol):
    name: str
    weight: int

    def score(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> int: ...


@runtime_checkable
class ReservePlugin(Protocol):
    name: str

    def reserve(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> dict[str, str]: ...

    def unreserve(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> None: ...


@runtime_checkable
class PreFilterPlugin(Protocol):
    """A node-independent check before any node is looked at (ElasticQuota); a reason rejects the pod outright."""

    name: str

    def prefilter(self, pod: JSON, cluster: Cluster) -> str | None: ...


@runtime_checkable
class VectorFilterPlugin(Protocol):
    def prefilter_vector(self, pod: JSON, index: NodeIndex) -> BoolArray | None: ...


@runtime_checkable
class VectorScorePlugin(Protocol):
    def score_vector(self, pod: JSON, index: NodeIndex) -> IntArray | None: ...


class NodeResourcesFit:
    """kube-scheduler's NodeResourcesFit filter: every requested resource fits in allocatable − requested."""

    name = "NodeResourcesFit"

    def __init__(self) -> None:
        self._pod: JSON | None = None  # the pod of the current cycle: its requests are parsed once, not per node
        self._requests: dict[str, int] = {}
        self._tracker = Tracker()
        self._free: dict[str, IntArray] = {}  # resource → allocatable − requested per node
        self._full: BoolArray = np.zeros(0, dtype=np.bool_)  # no room for another pod

    def prefilter_vector(self, pod: JSON, index: NodeIndex) -> BoolArray:
        if pod is not self._pod:
            self._pod, self._requests = pod, pod_requests(pod)
        self.sync(index)
        ok = ~self._full
        for r, amount in self._requests.items():
            if amount > 0:
                free = self._free.get(r)
                if free is None:
                    free = self._free[r] = np.array([n.free(r) for n in index.nodes], dtype=np.int64)
                ok &= free >= amount
        return ok

    def sync(self, index: NodeIndex) -> None:
        changed = self._tracker.changes(index)
        if changed is None:
            self._free = {}
            self._full = np.array([n.free(PODS) < 1 and PODS in n.allocatable for n in index.nodes], dtype=np.bool_)
        else:
            for i in changed:
                n = index.nodes[i]
                self._full[i] = n.free(PODS) < 1 and PODS in n.allocatable
                for r, free in self._free.items():
                    free[i] = n.free(r)

    def filter(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> str | None:
        if node.free(PODS) < 1 and PODS in node.allocatable:
            return "Too many pods"
        if pod is not self._pod:
            self._pod, self._requests = pod, pod_requests(pod)
        for resource, amount in self._requests.items():
            if amount > 0 and amount > node.free(resource):
                return f"Insufficient {resource}"
        return None


class _Clock:
    """Lap times of one cycle for scheduler.metrics (a no-op without metrics)."""

    def __init__(self, metrics: Any) -> None:
        self.metrics = metrics
        self.last = self.lap = time.perf_counter() if metrics is not None else 0.0

    def plugin(self, name: str, point: str) -> None:
        if self.metrics is not None:
            now = time.perf_counter()
            self.metrics.plugin_run(name, point, now - self.last)
            self.last = now

    def point(self, point: str, ok: bool = True) -> None:
        if self.metrics is not None:
            now = time.perf_counter()
            self.metrics.point(point, now - self.lap, ok)
            self.last = self.lap = now


class LazyScores(Mapping[str, int]):
    """Placement.scores from the cycle's arrays, made a dict on first use: few callers read it, and building it
    for every feasible node was a third of a cycle at 5 000 nodes."""

    def __init__(self, names: Any, totals: IntArray, shown: BoolArray) -> None:
        # the cycle's own arrays, which it no longer touches: nothing is copied until somebody reads
        self._names, self._totals, self._shown = names, totals, shown
        self._dict: dict[str, int] | None = None

    def _get(self) -> dict[str, int]:
        if self._dict is None:
            self._dict = dict(zip(self._names[self._shown].tolist(), self._totals[self._shown].tolist(),
                                  strict=True))
        return self._dict

    def __getitem__(self, k: str) -> int:
        return self._get()[k]

    def __iter__(self) -> Iterator[str]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())


@dataclass
class Placement:
    pod: str
    node: str | None
    annotations: dict[str, str] = field(default_factory=dict)
    reason: str = ""
    scores: Mapping[str, int] = field(default_factory=dict)  # node → total, for explanations

    def as_json(self) -> dict[str, Any]:
        return {"pod": self.pod, "node": self.node, "annotations": self.annotations,
                **({"reason": self.reason} if self.node is None else {})}


@dataclass
class Scheduler:
    cluster: Cluster
    filters: list[FilterPlugin]
    scorers: list[ScorePlugin]
    reservers: list[ReservePlugin]
    metrics: Any = None  # scheduler.metrics.SchedulerMetrics: recorded only when set (run, extender)

    # -- the extension points as a public API (the extender and the gang planner use these) ---------------------
    def plugins(self) -> list[Any]:
        """Every plugin of the profile once, in profile order."""
        return list(dict.fromkeys([*self.filters, *self.scorers, *self.reservers]))

    def prefilter(self, pod: JSON) -> str | None:
        """The first PreFilter rejection (a node-independent reason), or None."""
        for p in self.plugins():
            check = getattr(p, "prefilter", None)
            if check is not None:
                why = check(pod, self.cluster)
                if why is not None:
                    return str(why)
        return None

    def admit_pending(self, pods: list[JSON]) -> None:
        """Tell plugins which pods are waiting (ElasticQuota counts their requests), as an informer would."""
        for p in self.plugins():
            add = getattr(p, "add_pending", None)
            if add is not None:
                add(pods, self.cluster)

    def forget(self, pod: JSON) -> None:
        """The pod was deleted or evicted: plugins drop what they account for it beyond its node."""
        for p in self.plugins():
            drop = getattr(p, "forget", None)
            if drop is not None:
                drop(pod)

    def prebind_patches(self, pod_key: str) -> tuple[dict[str, str], dict[str, str]]:
        """Pod labels and Node annotations plugins want written before the pod's Binding (DeviceShare's device
        plugin adapters: HAMi's vgpu-node label, Cambricon's node lock); handed out once per reservation."""
        labels: dict[str, str] = {}
        node_annotations: dict[str, str] = {}
        for p in self.plugins():
            get = getattr(p, "prebind_patches", None)
            got = get(pod_key) if get is not None else None
            if got is not None:
                labels.update(got.labels)
                node_annotations.update(got.node_annotations)
        return labels, node_annotations

    def plugin(self, name: str) -> Any | None:
        return next((p for p in self.plugins() if getattr(p, "name", None) == name), None)

    def feasible(self, pod: JSON, node_names: list[str] | None = None) -> tuple[list[NodeInfo], dict[str, str]]:
        """Nodes (all, or the named ones) the pod fits, and the reason for every other node."""
        nodes = (self.cluster.nodes.values() if node_names is None else
                 [self.cluster.nodes[n] for n in node_names if n in self.cluster.nodes])
        rejected = self.prefilter(pod)
        if rejected is not None:
            return [], {n.name: rejected for n in nodes}
        fits: list[NodeInfo] = []
        failed: dict[str, str] = {}
        for node in nodes:
            why = self._filter(pod, node)
            if why is None:
                fits.append(node)
            else:
                failed[node.name] = why
        return fits, failed

    def scores(self, pod: JSON, nodes: list[NodeInfo]) -> dict[str, int]:
        """Weighted score per node (higher is better)."""
        return {n.name: self._score(pod, n) for n in nodes}

    def reserve_on(self, pod: JSON, node_name: str) -> dict[str, str]:
        """Reserve (may raise Unschedulable) and assume the pod on the node; returns the annotations added."""
        node = self.cluster.nodes[node_name]
        annotations = self._reserve(pod, node)
        pod.setdefault("metadata", {}).setdefault("annotations", {}).update(annotations)
        self.cluster.assume(pod, node_name)
        return annotations

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
            for p in dict.fromkeys([*self.filters, *self.scorers, *self.reservers]):
                sync = getattr(p, "sync", None)
                if sync is not None:
                    sync(index)
        finally:
            if freeze:
                gc.freeze()
            if enabled:
                gc.enable()

    def schedule(self, pod: JSON) -> Placement:
        """One cycle; on success the pod is assumed on the node (its annotations included).

        `Placement.scores` holds the nodes that passed the vector prefilters and were not found infeasible.
        Plugins with `begin_cycle(pod, cluster)` / `end_cycle(pod, placement)` are told around the cycle (the
        Reservation plugin restores reserved resources for owners there); with `post_filter(scheduler, pod)` they
        may place an unschedulable pod (preemption), returning its Placement or None."""
        hooks = [p for p in self.plugins() if hasattr(p, "begin_cycle")]
        for h in hooks:
            h.begin_cycle(pod, self.cluster)
        placed: Placement | None = None
        try:
            with cycle_requests(pod):
                placed = self._timed(pod)
        finally:
            for h in hooks:
                h.end_cycle(pod, placed)
        if placed.node is None:
            for p in self.plugins():
                post = getattr(p, "post_filter", None)
                got = post(self, pod) if post is not None else None
                if isinstance(got, Placement):
                    return got
        return placed

    def _timed(self, pod: JSON) -> Placement:
        metrics = self.metrics
        if metrics is None:
            return self._cycle(pod, None)
        start = time.perf_counter()
        try:
            placed = self._cycle(pod, metrics)
        except Exception:
            metrics.attempt("error", time.perf_counter() - start)
            raise
        metrics.attempt("scheduled" if placed.node is not None else "unschedulable", time.perf_counter() - start)
        return placed

    def _cycle(self, pod: JSON, metrics: Any) -> Placement:
        problem = invalid_pod(pod)
        if problem:
            return Placement(key(pod), None, reason=problem)
        clock = _Clock(metrics)
        rejected = self.prefilter(pod)
        clock.point("PreFilter", rejected is None)
        if rejected is not None:  # kube-scheduler's FitError with a PreFilter message
            return Placement(key(pod), None, reason=f"0/{len(self.cluster.nodes)} nodes are available: {rejected}.")
        index = node_index(self.cluster)
        n = len(index)
        mask = np.ones(n, dtype=np.bool_)
        for f in self.filters:
            prefilter = getattr(f, "prefilter_vector", None)  # not isinstance(VectorFilterPlugin): 10× cheaper
            m = prefilter(pod, index) if prefilter is not None else None
            clock.plugin(f.name, "Filter")
            if m is not None:
                mask &= m
        clock.point("Filter")
        total = np.zeros(n, dtype=np.int64)
        per_plugin: list[IntArray] | None = [] if debug.top_n_scores > 0 else None
        for s in self.scorers:
            scorer = getattr(s, "score_vector", None)
            v = scorer(pod, index) if scorer is not None else None
            if v is None:
                v = np.zeros(n, dtype=np.int64)
                for i in np.flatnonzero(mask).tolist():
                    v[i] = s.score(pod, index.nodes[i], self.cluster)
            clock.plugin(s.name, "Score")
            weighted = np.minimum(v, 100)  # a fresh array: v may be a plugin's cached one (np.clip is ~3× slower)
            np.maximum(weighted, 0, out=weighted)
            if s.weight != 1:
                weighted *= s.weight
            total += weighted
            if per_plugin is not None:
                per_plugin.append(weighted)
        rank = total * max(n, 1) + (n - 1 - index.name_rank)  # best score first, then the smallest name
        rank[~mask] = -1
        failed: dict[int, str] = {}
        reasons: Counter[str] = Counter()
        clock.point("Score")
        while n:
            i = int(np.argmax(rank))
            if rank[i] < 0:
                break
            rank[i] = -1
            node = index.nodes[i]
            why = self._filter(pod, node)
            clock.point("Filter", why is None)
            if why is not None:
                failed[i] = why
                continue
            try:
                annotations = self._reserve(pod, node)
            except Unschedulable as e:
                clock.point("Reserve", False)
                reasons[str(e)] += 1
                continue
            clock.point("Reserve")
            if metrics is not None:
                metrics.reserved(annotations)
            pod.setdefault("metadata", {}).setdefault("annotations", {}).update(annotations)
            self.cluster.assume(pod, node.name)
            if failed:
                mask[list(failed)] = False
            if per_plugin is not None:
                self._log_scores(pod, index, np.flatnonzero(mask), total, per_plugin)
            return Placement(key(pod), node.name, annotations, scores=LazyScores(index.names_array, total, mask))
        # Nobody takes the pod: the reason of every node the prefilters ruled out, one by one.
        for i in np.flatnonzero(~mask).tolist():
            why = self._filter(pod, index.nodes[i])
            if why is None:  # a prefilter was wrong; never for the built-in plugins
                log.warning("%s: a vector prefilter ruled out node %s that fits", key(pod), index.names[i])
                return self._schedule_each(pod)
            failed[i] = why
        reasons.update(failed.values())
        return self._unschedulable(pod, reasons)

    def _log_scores(self, pod: JSON, index: NodeIndex, shown: Any, total: IntArray, per_plugin: list[IntArray]
                    ) -> None:
        rows = [(index.names[i], int(total[i]), [int(v[i]) for v in per_plugin]) for i in shown.tolist()]
        log.info("%s", debug.score_table(key(pod), debug.top_n_scores, [s.name for s in self.scorers], rows,
                                         len(rows)))

    def _schedule_each(self, pod: JSON) -> Placement:
        """The cycle without the vector stage: every filter on every node."""
        fits, failed = self.feasible(pod)
        reasons: Counter[str] = Counter(failed.values())
        feasible = fits
        ranked = sorted(((self._score(pod, n), n.name) for n in feasible), key=lambda t: (-t[0], t[1]))
        for _total, name in ranked:
            node = self.cluster.nodes[name]
            try:
                annotations = self._reserve(pod, node)
            except Unschedulable as e:
                reasons[str(e)] += 1
                continue
            meta = pod.setdefault("metadata", {})
            meta.setdefault("annotations", {}).update(annotations)
            self.cluster.assume(pod, name)
            return Placement(key(pod), name, annotations, scores={n: s for s, n in ranked})
        return self._unschedulable(pod, reasons)

    def _unschedulable(self, pod: JSON, reasons: Counter[str]) -> Placement:
        summary = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))
        return Placement(key(pod), None, reason=f"0/{len(self.cluster.nodes)} nodes are available: {summary}."
                         if summary else f"0/{len(self.cluster.nodes)} nodes are available.")

    def _filter(self, pod: JSON, node: NodeInfo) -> str | None:
        for f in self.filters:
            try:
                why = f.filter(pod, node, self.cluster)
            except Unschedulable as e:
                why = str(e)
            if why is not None:
                return why
        return None

    def _score(self, pod: JSON, node: NodeInfo) -> int:
        return sum(s.weight * max(0, min(100, s.score(pod, node, self.cluster))) for s in self.scorers)

    def _reserve(self, pod: JSON, node: NodeInfo) -> dict[str, str]:
        done: list[ReservePlugin] = []
        annotations: dict[str, str] = {}
        try:
            for r in self.reservers:
                annotations.update(r.reserve(pod, node, self.cluster))
                done.append(r)
        except Unschedulable:
            for r in reversed(done):
                r.unreserve(pod, node, self.cluster)
            raise
        return annotations
