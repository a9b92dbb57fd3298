"""The extension points' types: what a plugin implements (one Protocol per hook), what it may ask of the framework.

The framework (scheduler.framework) resolves a profile's plugins against these once (`Profile`); plugins import
only this module of the framework, so they sit below it (upstream pkg/scheduler/framework/interface.go, with
koord-scheduler's frameworkext additions: the begin/end-cycle transformers and the vector stage).

`filter` returns None when the pod fits or a reason, `score` returns 0..100 (weighted by the profile), `reserve`
returns annotations to add to the pod (DeviceShare's `device-allocated`) or raises Unschedulable, `unreserve`
undoes it. Vector hooks: `prefilter_vector(pod, index)` is a numpy bool per node of scheduler.nodeindex.NodeIndex,
False only where the plugin's `filter` surely fails (None: no opinion); `score_vector(pod, index)` is the exact
`score` of every node (None: not vectorisable for this pod, `score` is then called per node; an int: the same
score for every node, which spares an array per node when a plugin has nothing to tell the nodes apart).

Incremental vector hooks (opt-in, scheduler.vectorcache): a placement changes one node, so a plugin whose vector
for a pod depends only on a few facts of the pod (its *shape*) and on each node's own state lets the framework keep
its vector between cycles and recompute only the rows of nodes that changed since (NodeIndex versions). It offers
`prefilter_shape(pod, index)` / `score_shape(pod, index)`: a hashable key such that two pods with equal keys get the
same value on every node whose NodeIndex version did not move — anything else the value depends on (a clock, a
ConfigMap, cluster-wide facts) goes into the key — or None when this pod's vector must be computed whole (then
`prefilter_vector`/`score_vector` is called as usual). The shape call is made first in every cycle and brings the
plugin's own per-node state up to date; state that changes without the node reporting it must be announced with
`NodeIndex.touch`. Then `prefilter_rows(pod, index, rows)` / `score_rows(pod, index, rows)` answer for the given
rows only (`rows` an int array, or `slice(None)` for every row): exactly `prefilter_vector(...)[rows]` (True where
it has no opinion) and `score_vector(...)[rows]`. A normalizing scorer's vector is not kept (its normalization
depends on every feasible node). A kept filter whose `prefilter_rows` is exactly `filter(...) is None` on every
row (not merely False where it surely fails) says so with a class attribute `exact_rows = True`: the framework then
does not run its `filter` on a node whose kept row was computed at the node's current NodeIndex version (the node
chosen from the kept rank; any other node, or one changed since, is filtered as usual).

Quiet plugins (opt-in, scheduler.quiet): most pods give most plugins nothing to say (no affinity, no spread
constraints, no host ports, no taints or reservations in the cluster). Such a plugin offers `quiet(pod, index)`,
asked in the vector cycle after the cycle hooks ran: an int only when, for this pod and the cluster as it is now, its
PreFilter admits the pod, its Filter passes every node and its Score is that int (the raw score, before
NormalizeScore) on every node — None otherwise, and then every hook is called as usual. For a quiet plugin the
vector cycle calls none of prefilter, prefilter_vector, filter, prescore, score_vector or score_shape/score_rows;
Reserve, Unreserve and the cycle hooks are called as always.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from apis.core.objects import JSON
from scheduler.cluster import Cluster, NodeInfo
from scheduler.gang.queuesort import QueueState
from scheduler.nodeindex import BoolArray, IntArray, NodeIndex, Rows


class Unschedulable(Exception):
    """A plugin cannot place the pod on this node (the message is the reason shown to users)."""


@dataclass
class Placement:
    """A cycle's outcome for one pod: the node (None: not placed, with the reason) and the annotations reserved."""

    pod: str
    node: str | None
    annotations: dict[str, str] = field(default_factory=dict)
    reason: str = ""
    scores: Mapping[str, int] = field(default_factory=dict)  # node → total, for explanations
    # not placed: the plugins that rejected it at PreFilter/Filter (kube-scheduler's UnschedulablePlugins, which
    # pick the cluster events that requeue it: scheduler.queue); empty when none is to blame (any event)
    plugins: frozenset[str] = frozenset()
    # placed: annotations PreBind takes off the pod (Coscheduling's stale bind-gang pairs)
    removed: tuple[str, ...] = ()

    def as_json(self) -> JSON:
        return {"pod": self.pod, "node": self.node, "annotations": self.annotations,
                **({"removedAnnotations": list(self.removed)} if self.removed else {}),
                **({"reason": self.reason} if self.node is None else {})}


class Handle(Protocol):
    """What a plugin may ask of the framework (upstream framework.Handle): the cluster and a whole cycle."""

    @property
    def cluster(self) -> Cluster: ...

    def schedule(self, pod: JSON) -> Placement: ...


@runtime_checkable
class Plugin(Protocol):
    name: str


@runtime_checkable
class PreFilterPlugin(Protocol):
    """A node-independent check before any node is looked at (ElasticQuota); a reason rejects the pod outright."""

    name: str

    def prefilter(self, pod: JSON, cluster: Cluster) -> str | None: ...


@runtime_checkable
class PreFilterNodesPlugin(Protocol):
    """A PreFilter that narrows the nodes looked at (upstream PreFilterResult.NodeNames): their names, or None for
    every node (SchedulingHint)."""

    def prefilter_nodes(self, pod: JSON) -> frozenset[str] | None: ...


@runtime_checkable
class QueueSortPlugin(Protocol):
    """queueSort: the order pending pods are taken in (the queue sorted by the plugin's Less); `state` is the queue's
    memory of the pods (scheduler.gang.queuesort.QueueState), None in `simulate`."""

    name: str

    def order(self, pods: list[JSON], cluster: Cluster, state: QueueState | None = None) -> list[JSON]: ...


@runtime_checkable
class BindPlugin(Protocol):
    """bind: whether the plugin binds this pod (False: Skip, the next bind plugin is asked). The first that does
    not skip binds it (DefaultBinder: every pod through the Binding API; Reservation: reserve pods, by marking the
    Reservation Available)."""

    name: str

    def binds(self, pod: JSON) -> bool: ...


@runtime_checkable
class FilterPlugin(Protocol):
    name: str

    def filter(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> str | None: ...


@runtime_checkable
class VectorFilterPlugin(Protocol):
    def prefilter_vector(self, pod: JSON, index: NodeIndex) -> BoolArray | None: ...


@runtime_checkable
class ScorePlugin(Protocol):
    name: str
    weight: int

    def score(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> int: ...


@runtime_checkable
class VectorScorePlugin(Protocol):
    def score_vector(self, pod: JSON, index: NodeIndex) -> IntArray | int | None: ...


@runtime_checkable
class IncrementalFilterPlugin(Protocol):
    """A vector filter whose mask the framework may keep between cycles (see the module docstring)."""

    def prefilter_shape(self, pod: JSON, index: NodeIndex) -> Hashable | None: ...

    def prefilter_rows(self, pod: JSON, index: NodeIndex, rows: Rows) -> BoolArray: ...


@runtime_checkable
class IncrementalScorePlugin(Protocol):
    """A vector scorer whose raw scores the framework may keep between cycles (see the module docstring)."""

    def score_shape(self, pod: JSON, index: NodeIndex) -> Hashable | None: ...

    def score_rows(self, pod: JSON, index: NodeIndex, rows: Rows) -> IntArray: ...


@runtime_checkable
class QuietPlugin(Protocol):
    """A plugin that tells in one call that it has nothing to say about a pod (see the module docstring)."""

    def quiet(self, pod: JSON, index: NodeIndex) -> int | None: ...


@runtime_checkable
class PreScorePlugin(Protocol):
    """PreScore: told, before its Score, which nodes are being scored (`candidates`, a bool per node of the index:
    those the vector filters passed, or the feasible nodes on the per-node path). InterPodAffinity and
    PodTopologySpread normalize over them; PodTopologySpread also weighs each constraint by its domains there."""

    def prescore(self, pod: JSON, index: NodeIndex, candidates: BoolArray) -> None: ...


@runtime_checkable
class NormalizeScorePlugin(Protocol):
    """ScoreExtensions.NormalizeScore: the plugin's raw scores rescaled to 0..100 against `top`, the largest raw
    score among the nodes that pass Filter (TaintToleration, NodeAffinity: only the maximum matters); its `score`
    and `score_vector` give the raw figures. A function of its arguments alone: the framework keeps what it gives
    for a uniform score."""

    def normalize(self, scores: IntArray, top: int) -> IntArray: ...


@runtime_checkable
class ReservePlugin(Protocol):
    name: str

    def reserve(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> dict[str, str]: ...

    def unreserve(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> None: ...


@runtime_checkable
class CyclePlugin(Protocol):
    """Told around every cycle (koord-scheduler's PreFilter transformers): begin_cycle is BeforePreFilter (the
    Reservation plugin matches an owner's reservations there), after_prefilter is AfterPreFilter's work (it lends
    their resources to their nodes); both run before PreFilter, which reads no node (docs/decisions.md)."""

    name: str

    def begin_cycle(self, pod: JSON, cluster: Cluster) -> None: ...

    def after_prefilter(self, pod: JSON, cluster: Cluster) -> None: ...

    def end_cycle(self, pod: JSON, placed: Placement | None) -> None: ...


@runtime_checkable
class PostFilterPlugin(Protocol):
    """May place a pod no node took (preemption), returning its Placement, or None."""

    def post_filter(self, handle: Handle, pod: JSON) -> Placement | None: ...


class PreBindPatch(Protocol):
    """Pod labels and Node annotations to write before the pod's Binding."""

    labels: dict[str, str]
    node_annotations: dict[str, str]


@runtime_checkable
class PreBindPlugin(Protocol):
    """What to write before the Binding (DeviceShare's device plugin adapters); handed out once per reservation."""

    def prebind_patches(self, pod_key: str) -> PreBindPatch | None: ...


@runtime_checkable
class QueuePlugin(Protocol):
    """Told which pods wait (ElasticQuota counts their requests) and which are gone (deleted or evicted)."""

    def add_pending(self, pods: Iterable[JSON], cluster: Cluster) -> None: ...

    def forget(self, pod: JSON) -> None: ...


@runtime_checkable
class SyncPlugin(Protocol):
    """Builds its per-node state ahead of the first cycle (Scheduler.prepare, like a cache sync)."""

    def sync(self, index: NodeIndex) -> None: ...


# -- what plugins offer each other (koord-scheduler's reservation nominator and NUMA hint providers) -------------
class ReservationLender(Protocol):
    """The Reservation plugin's answers for an owner in the current cycle: what its serving reservation on the node
    still holds (preferred by DeviceShare and NodeNUMAResource), and whether it is all the owner may get."""

    def reserved_devices(self, pod: JSON, node: NodeInfo) -> Any: ...

    def reserved_cpus(self, pod: JSON, node: NodeInfo) -> frozenset[int] | None: ...

    def restricted_on(self, pod: JSON, node: NodeInfo) -> bool: ...


class NUMAHintProvider(Protocol):
    """A plugin whose resources NodeNUMAResource aligns (DeviceShare): the requested types and the NUMA sets
    they fit in now; None when the pod asks none."""

    def numa_hints(self, pod: JSON, node: NodeInfo, numa_nodes: list[int]) -> tuple[str, list[Any]] | None: ...

    def align_numa(self, affinity: Callable[[JSON, NodeInfo], frozenset[int] | None]) -> None: ...
