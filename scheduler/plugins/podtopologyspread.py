"""kube-scheduler's PodTopologySpread (v1.28 pkg/scheduler/framework/plugins/podtopologyspread).

Filter (whenUnsatisfiable DoNotSchedule): a node lacking a constraint's topology key is refused; otherwise the pods
the constraint's selector matches in the node's domain (+1 if the pod matches it itself) minus the smallest count of
any eligible domain (0 while fewer than minDomains domains are eligible) must not exceed maxSkew. Eligible nodes
have every constraint's key and pass its inclusion policies (nodeAffinityPolicy Honor: the pod's nodeSelector and
required node affinity; nodeTaintsPolicy Honor: its NoSchedule/NoExecute taints tolerated). Score (ScheduleAnyway):
per constraint, the matching pods in the node's domain (on the node itself for kubernetes.io/hostname) × log(number
of domains among the scored nodes + 2) + maxSkew − 1, summed and rounded; nodes lacking a key are not scored (0);
normalized so the fewest matching pods score 100. Only pods of the pod's namespace, not terminating, are counted.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from apis.core.labelselector import LabelSelector, SelectorError
from apis.core.nodeaffinity import AffinityError, PodNodeAffinity, pod_node_affinity
from apis.core.objects import JSON
from apis.core.taints import NO_EXECUTE, NO_SCHEDULE, first_untolerated, node_taints, pod_tolerations
from apis.core.topologyspread import (
    DO_NOT_SCHEDULE,
    HONOR,
    LABEL_HOSTNAME,
    SCHEDULE_ANYWAY,
    SpreadConstraint,
    matches,
    spread_constraints,
)
from scheduler.cluster import Cluster, NodeInfo
from scheduler.nodeindex import BoolArray, FloatArray, IntArray, NodeIndex, node_index
from scheduler.plugins.podcounts import (
    MatchCounts,
    Signature,
    TopologyDomains,
    domain_sums,
    per_node,
    pod_signature,
)
from scheduler.plugins.podmemo import ParsedPod, ScoreMemo, StampedState

REASON = "node(s) didn't match pod topology spread constraints"
REASON_LABEL = REASON + " (missing required label)"
NOT_SCORED = -1  # kube's invalidScore: a node ignored (lacking a key) or not being scored
MAX_NODE_SCORE = 100
_NO_DOMAIN = 2**31 - 1  # criticalPaths' initial MatchNum: no eligible domain, nothing to be skewed against
_CACHED_MASKS = 32


@dataclass
class _Filter:
    missing: list[BoolArray]  # per constraint: the node lacks its key
    skewed: list[BoolArray]  # per constraint: placing the pod there exceeds maxSkew
    fits: BoolArray


class PodTopologySpread:
    name = "PodTopologySpread"

    def __init__(self, weight: int = 2) -> None:
        self.weight = weight
        self._counts = MatchCounts()
        self._domains = TopologyDomains()
        self._affinity_masks: OrderedDict[tuple[PodNodeAffinity, int], BoolArray] = OrderedDict()
        self._parsed = ParsedPod[tuple[SpreadConstraint, ...]](spread_constraints, ())
        self._filtered = StampedState[_Filter | None](self._compute_filter, None)
        self._scored = ScoreMemo(self._compute_scores)

    # -- the pod --------------------------------------------------------------------------------------------------
    def _constraints(self, pod: JSON) -> tuple[SpreadConstraint, ...] | SelectorError:
        return self._parsed.get(pod)

    def _of(self, pod: JSON, when: str) -> tuple[SpreadConstraint, ...]:
        got = self._constraints(pod)
        return () if isinstance(got, SelectorError) else tuple(c for c in got if c.when_unsatisfiable == when)

    def prefilter(self, pod: JSON, cluster: Cluster) -> str | None:
        parsed = self._constraints(pod)
        return f"invalid topology spread constraints: {parsed}" if isinstance(parsed, SelectorError) else None

    def quiet(self, pod: JSON, index: NodeIndex) -> int | None:
        """No spread constraint: every node passes, and Score is skipped (NOT_SCORED on every node;
        scheduler.interfaces' QuietPlugin)."""
        return NOT_SCORED if self._constraints(pod) == () else None

    def _matching(self, pod: JSON, selector: LabelSelector | None, index: NodeIndex) -> IntArray:
        """countPodsMatchSelector per node: the pod's namespace, not terminating; an empty selector counts none."""
        ns = pod_signature(pod)[0]
        if selector is None or selector.empty:
            return np.zeros(len(index), dtype=np.int64)

        def counted(sig: Signature) -> bool:
            return sig[0] == ns and not sig[2] and selector.matches(dict(sig[1]))
        return self._counts.get((ns, selector), counted, index)

    def _keys_present(self, constraints: tuple[SpreadConstraint, ...], index: NodeIndex) -> BoolArray:
        has = np.ones(len(index), dtype=np.bool_)
        for c in constraints:
            has &= self._domains.ids(c.topology_key, index)[0] >= 0
        return has

    def _node_affinity(self, pod: JSON, index: NodeIndex) -> BoolArray:
        """The nodes the pod's nodeSelector and required node affinity accept (a selector that does not parse:
        every node; NodeAffinity refuses the pod anyway)."""
        try:
            parsed = pod_node_affinity(pod)
        except AffinityError:
            return np.ones(len(index), dtype=np.bool_)
        if not parsed.filters:
            return np.ones(len(index), dtype=np.bool_)
        labels = self._domains.labels.get(index)
        key = (parsed, self._domains.labels.version)
        hit = self._affinity_masks.get(key)
        if hit is not None and len(hit) == len(index):
            return hit
        mask = np.fromiter((parsed.required_match(lb, nm) for lb, nm in zip(labels, index.names, strict=True)),
                           dtype=np.bool_, count=len(index))
        self._affinity_masks[key] = mask
        if len(self._affinity_masks) > _CACHED_MASKS:
            self._affinity_masks.popitem(last=False)
        return mask

    def _included(self, pod: JSON, c: SpreadConstraint, index: NodeIndex, memo: dict[str, BoolArray]) -> BoolArray:
        """matchNodeInclusionPolicies over every node."""
        ok = np.ones(len(index), dtype=np.bool_)
        if c.node_affinity_policy == HONOR:
            if "affinity" not in memo:
                memo["affinity"] = self._node_affinity(pod, index)
            ok &= memo["affinity"]
        if c.node_taints_policy == HONOR:
            if "taints" not in memo:
                tolerations = pod_tolerations(pod)
                memo["taints"] = np.fromiter(
                    (first_untolerated(node_taints(n.obj), tolerations, (NO_SCHEDULE, NO_EXECUTE)) is None
                     for n in index.nodes), dtype=np.bool_, count=len(index))
            ok &= memo["taints"]
        return ok

    # -- Filter ---------------------------------------------------------------------------------------------------
    def _filter(self, pod: JSON, index: NodeIndex) -> _Filter | None:
        return self._filtered.get(pod, index)

    def _compute_filter(self, pod: JSON, index: NodeIndex) -> _Filter | None:
        constraints = self._of(pod, DO_NOT_SCHEDULE)
        if not constraints:
            return None
        n = len(index)
        eligible = self._keys_present(constraints, index)
        memo: dict[str, BoolArray] = {}
        # per key, each node's count from the last constraint (of that key) including it, as kube's per-node map
        count_by_key: dict[str, IntArray] = {}
        included_by_key: dict[str, BoolArray] = {}
        for c in constraints:
            included = eligible & self._included(pod, c, index, memo)
            counts = self._matching(pod, c.selector, index)
            k = c.topology_key
            before = count_by_key.get(k, np.zeros(n, dtype=np.int64))
            count_by_key[k] = np.where(included, counts, before)
            included_by_key[k] = included_by_key.get(k, np.zeros(n, dtype=np.bool_)) | included
        own = dict(pod_signature(pod)[1])
        missing: list[BoolArray] = []
        skewed: list[BoolArray] = []
        fits = np.ones(n, dtype=np.bool_)
        for c in constraints:
            k = c.topology_key
            ids, size = self._domains.ids(k, index)
            included = included_by_key[k]
            in_domain = domain_sums(ids, size, count_by_key[k], included)
            eligible_domain = np.bincount(ids[included & (ids >= 0)], minlength=size) > 0
            domains = int(eligible_domain.sum())
            least = int(in_domain[eligible_domain].min()) if domains else _NO_DOMAIN
            if domains < c.min_domains:
                least = 0
            itself = 1 if matches(c.selector, own) else 0
            absent = ids < 0
            over = ~absent & (per_node(ids, in_domain) + itself - least > c.max_skew)
            missing.append(absent)
            skewed.append(over)
            fits &= ~absent & ~over
        return _Filter(missing, skewed, fits)

    def prefilter_vector(self, pod: JSON, index: NodeIndex) -> BoolArray | None:
        state = self._filter(pod, index)
        return None if state is None else state.fits

    def filter(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> str | None:
        if isinstance(self._constraints(pod), SelectorError):
            return self.prefilter(pod, cluster)
        index = node_index(cluster)
        state = self._filter(pod, index)
        row = index.pos.get(node.name)
        if state is None or row is None:
            return None
        for absent, over in zip(state.missing, state.skewed, strict=True):
            if absent[row]:
                return REASON_LABEL
            if over[row]:
                return REASON
        return None

    # -- PreScore, Score, NormalizeScore --------------------------------------------------------------------------
    def prescore(self, pod: JSON, index: NodeIndex, candidates: BoolArray) -> None:
        self._scored.prescore(pod, candidates)

    def score_vector(self, pod: JSON, index: NodeIndex) -> IntArray | int:
        return self._scored.get(pod, index)

    def _compute_scores(self, pod: JSON, index: NodeIndex, candidates: BoolArray | None) -> IntArray | int:
        # a pod without constraints would get kube's default ones only through its Services / ReplicaSets /
        # StatefulSets, which koord-sched does not read (docs/decisions.md): PreScore's Skip
        constraints = self._of(pod, SCHEDULE_ANYWAY)
        if not constraints:
            return NOT_SCORED
        n = len(index)
        eligible = self._keys_present(constraints, index)  # requireAllTopologies: the pod states its constraints
        filtered = np.ones(n, dtype=np.bool_) if candidates is None else candidates
        scored = filtered & eligible
        memo: dict[str, BoolArray] = {}
        in_domain: dict[str, IntArray] = {}
        for c in constraints:
            if c.topology_key == LABEL_HOSTNAME:
                continue
            ids, size = self._domains.ids(c.topology_key, index)
            counted = eligible & self._included(pod, c, index, memo)
            got = domain_sums(ids, size, self._matching(pod, c.selector, index), counted)
            before = in_domain.get(c.topology_key)
            in_domain[c.topology_key] = got if before is None else before + got
        total: FloatArray = np.zeros(n, dtype=np.float64)
        sized: set[str] = set()  # kube counts a domain for the first constraint of its key only
        for c in constraints:
            if c.topology_key == LABEL_HOSTNAME:
                size = int(scored.sum())
                matched = self._matching(pod, c.selector, index)
            else:
                ids, _ = self._domains.ids(c.topology_key, index)
                size = 0 if c.topology_key in sized else len(np.unique(ids[scored]))
                sized.add(c.topology_key)
                matched = per_node(ids, in_domain[c.topology_key])
            total = total + (matched.astype(np.float64) * math.log(size + 2) + float(c.max_skew - 1))
        raw = np.floor(total + 0.5).astype(np.int64)  # math.Round (the totals are never negative)
        raw[~scored] = NOT_SCORED
        return raw

    def score(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> int:
        return self._scored.node_score(pod, node_index(cluster), node.name, NOT_SCORED)

    def normalize(self, scores: IntArray, top: int) -> IntArray:
        """100 × (max + min − score) / max over the nodes scored (all 100 when max is 0); the others 0."""
        if len(scores) == 1:  # one score (the framework's for PreScore's Skip, or one node): max = min
            return np.array([0 if scores[0] == NOT_SCORED else MAX_NODE_SCORE], dtype=np.int64)
        scored = scores != NOT_SCORED
        out = np.zeros(len(scores), dtype=np.int64)
        if not scored.any():
            return out
        low, high = int(scores[scored].min()), max(top, 0)
        if high == 0:
            out[scored] = MAX_NODE_SCORE
        else:
            out[scored] = MAX_NODE_SCORE * (high + low - scores[scored]) // high
        return out
