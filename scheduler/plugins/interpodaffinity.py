"""kube-scheduler's InterPodAffinity (v1.28 pkg/scheduler/framework/plugins/interpodaffinity).

Filter: the pod's required podAffinity (every term's topology domain on the node holds a pod matching all its
terms — or, when no pod anywhere does and the pod matches them itself, any node with every topology key), its
required podAntiAffinity (no matching pod in the term's domain) and the existing pods' required anti-affinity
against it (no such pod in a domain of the node). Score: per topology domain, +weight for each existing pod its
preferred affinity terms match, −weight for its preferred anti-affinity, and from the existing pods' terms matching
it: required affinity × hardPodAffinityWeight, preferred affinity +weight, preferred anti-affinity −weight; a
node's raw score sums its domains', normalized (min..max → 0..100) over the nodes scored.

Counts come from scheduler.plugins.podcounts / existingaffinity, kept between cycles; a pod stating no affinity on a
cluster whose pods state none costs one check of the nodes changed since the last cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from apis.core.labelselector import SelectorError
from apis.core.objects import JSON
from apis.core.podaffinity import NONE, AffinityTerm, PodAffinity, has_pod_affinity, namespace_labels, pod_affinity
from scheduler.cluster import Cluster, NodeInfo
from scheduler.nodeindex import BoolArray, IntArray, NodeIndex, node_index
from scheduler.plugins.existingaffinity import (
    AFFINITY_PREFERRED,
    AFFINITY_REQUIRED,
    ANTI_PREFERRED,
    ANTI_REQUIRED,
    ExistingTerms,
)
from scheduler.plugins.podcounts import MatchCounts, Signature, TopologyDomains, domain_sums, per_node, pod_signature
from scheduler.plugins.podmemo import ParsedPod, ScoreMemo, StampedState

REASON_AFFINITY = "node(s) didn't match pod affinity rules"
REASON_ANTI = "node(s) didn't match pod anti-affinity rules"
REASON_EXISTING_ANTI = "node(s) didn't satisfy existing pods anti-affinity rules"
NOT_SCORED = -(1 << 62)  # raw score of a node outside the nodes being scored (left out of the min)
MAX_NODE_SCORE = 100


@dataclass
class _Filter:
    affinity: BoolArray
    anti: BoolArray
    existing: BoolArray
    fits: BoolArray


class InterPodAffinity:
    name = "InterPodAffinity"

    def __init__(self, weight: int = 2, hard_pod_affinity_weight: int = 1,
                 ignore_preferred_terms_of_existing_pods: bool = False) -> None:
        self.weight = weight
        self.hard_weight = hard_pod_affinity_weight
        self.ignore_existing_preferred = ignore_preferred_terms_of_existing_pods
        self._counts = MatchCounts()
        self._domains = TopologyDomains()
        self._existing = ExistingTerms()
        self._parsed = ParsedPod[PodAffinity](pod_affinity, NONE)
        self._filtered = StampedState[_Filter | None](self._compute_filter, None)
        self._scored = ScoreMemo(self._compute_scores)
        self._roles = tuple(self._weights())  # the existing pods' roles that score a pod they match

    # -- the pod --------------------------------------------------------------------------------------------------
    def _affinity(self, pod: JSON) -> PodAffinity | SelectorError:
        return self._parsed.get(pod)

    def prefilter(self, pod: JSON, cluster: Cluster) -> str | None:
        parsed = self._affinity(pod)
        return f"invalid pod affinity: {parsed}" if isinstance(parsed, SelectorError) else None

    def quiet(self, pod: JSON, index: NodeIndex) -> int | None:
        """The pod states no pod (anti-)affinity and no existing pod's term could count for it (what Filter and
        Score check before anything else): every node passes, every raw score is 0 (scheduler.interfaces'
        QuietPlugin)."""
        a = self._affinity(pod) if has_pod_affinity(pod) else NONE  # pod_affinity's own shortcut
        if isinstance(a, SelectorError) or a:
            return None
        existing = self._existing.refresh(index)
        if not existing.by_term:
            return 0  # no pod anywhere states a term (by_term drops a term no pod states any more)
        return None if self._filters(a, existing) or self._scores(a, existing) else 0

    def _filters(self, a: PodAffinity, existing: ExistingTerms) -> bool:
        """Filter has something to check for the pod (else PreFilter's Skip: every node passes)."""
        return bool(a.required_affinity or a.required_anti or existing.has(ANTI_REQUIRED))

    def _scores(self, a: PodAffinity, existing: ExistingTerms) -> bool:
        """Score has something to count for the pod (else PreScore's Skip: 0 on every node)."""
        return a.preferred or not (self.ignore_existing_preferred or not existing.has(*self._roles))

    def sync(self, index: NodeIndex) -> None:
        """The existing pods' terms, which every pod's `quiet` reads; the nodes' labels wait for a pod with terms."""
        self._existing.refresh(index)

    def _matching(self, terms: tuple[AffinityTerm, ...], index: NodeIndex) -> IntArray:
        """Per node, how many of its pods every one of `terms` matches."""
        known = index.cluster.namespaces

        def matches(sig: Signature) -> bool:
            labels, ns_labels = dict(sig[1]), namespace_labels(sig[0], known)
            return all(t.matches(sig[0], labels, ns_labels) for t in terms)
        return self._counts.get(terms, matches, index)

    def _in_domains(self, terms: tuple[AffinityTerm, ...], key: str, index: NodeIndex) -> IntArray:
        """Per node, how many pods matching every one of `terms` its `key` domain holds (0 without the label)."""
        ids, size = self._domains.ids(key, index)
        return per_node(ids, domain_sums(ids, size, self._matching(terms, index)))

    # -- Filter ---------------------------------------------------------------------------------------------------
    def _filter(self, pod: JSON, index: NodeIndex) -> _Filter | None:
        return self._filtered.get(pod, index)

    def _compute_filter(self, pod: JSON, index: NodeIndex) -> _Filter | None:
        a = self._affinity(pod)
        existing = self._existing.refresh(index)
        if isinstance(a, SelectorError) or not self._filters(a, existing):
            return None
        n = len(index)
        ns, own, _ = pod_signature(pod)
        labels, ns_labels = dict(own), namespace_labels(ns, index.cluster.namespaces)
        affinity = np.ones(n, dtype=np.bool_)
        if a.required_affinity:
            terms = a.required_affinity
            keys = np.ones(n, dtype=np.bool_)
            exist = np.ones(n, dtype=np.bool_)
            anywhere = False
            counts = self._matching(terms, index)
            for t in terms:
                ids, size = self._domains.ids(t.topology_key, index)
                keys &= ids >= 0
                sums = domain_sums(ids, size, counts)
                anywhere = anywhere or bool(sums.any())
                exist &= per_node(ids, sums) > 0
            # the first of a group of pods with affinity to each other: no pod matches yet, the pod matches itself
            first = not anywhere and all(t.matches(ns, labels, ns_labels) for t in terms)
            affinity = keys if first else keys & exist
        anti = np.ones(n, dtype=np.bool_)
        for t in a.required_anti:
            anti &= self._in_domains((t,), t.topology_key, index) == 0
        forbidden = np.ones(n, dtype=np.bool_)
        for (role, _w, term), rows in existing.by_term.items():
            if role != ANTI_REQUIRED or not term.matches(ns, labels, ns_labels):
                continue
            ids, size = self._domains.ids(term.topology_key, index)
            held = ids[np.fromiter(rows, dtype=np.int64, count=len(rows))]
            bad = np.zeros(size + 1, dtype=np.bool_)  # the last slot: nodes without the label
            bad[held[held >= 0]] = True
            forbidden &= ~bad[ids]
        return _Filter(affinity, anti, forbidden, affinity & anti & forbidden)

    def prefilter_vector(self, pod: JSON, index: NodeIndex) -> BoolArray | None:
        state = self._filter(pod, index)
        return None if state is None else state.fits

    def filter(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> str | None:
        a = self._affinity(pod)
        if isinstance(a, SelectorError):
            return f"invalid pod affinity: {a}"
        index = node_index(cluster)
        state = self._filter(pod, index)
        row = index.pos.get(node.name)
        if state is None or row is None:
            return None
        if not state.affinity[row]:
            return REASON_AFFINITY
        if not state.anti[row]:
            return REASON_ANTI
        return None if state.existing[row] else REASON_EXISTING_ANTI

    # -- PreScore, Score, NormalizeScore --------------------------------------------------------------------------
    def prescore(self, pod: JSON, index: NodeIndex, candidates: BoolArray) -> None:
        self._scored.prescore(pod, candidates)

    def _weights(self) -> Mapping[str, int]:
        """The weight (signed) an existing pod's term of each role gives a pod it matches."""
        out = {AFFINITY_PREFERRED: 1, ANTI_PREFERRED: -1}
        if self.hard_weight > 0:
            out[AFFINITY_REQUIRED] = self.hard_weight
        return out

    def score_vector(self, pod: JSON, index: NodeIndex) -> IntArray | int:
        return self._scored.get(pod, index)

    def _compute_scores(self, pod: JSON, index: NodeIndex, candidates: BoolArray | None) -> IntArray | int:
        a = self._affinity(pod)
        if isinstance(a, SelectorError):
            return 0
        existing = self._existing.refresh(index)
        roles = self._weights()
        if not self._scores(a, existing):
            return 0  # PreScore's Skip
        per_key: dict[str, IntArray] = {}

        def add(key: str, ids: IntArray, size: int, amounts: IntArray) -> None:
            acc = per_key.get(key)
            per_key[key] = amounts if acc is None else acc + amounts

        for sign, preferred in ((1, a.preferred_affinity), (-1, a.preferred_anti)):
            for w in preferred:
                ids, size = self._domains.ids(w.term.topology_key, index)
                add(w.term.topology_key, ids, size, sign * w.weight * domain_sums(
                    ids, size, self._matching((w.term,), index)))
        ns, own, _ = pod_signature(pod)
        labels, ns_labels = dict(own), namespace_labels(ns, index.cluster.namespaces)
        for (role, weight, term), rows in existing.by_term.items():
            factor = roles.get(role)
            if factor is None or not term.matches(ns, labels, ns_labels):
                continue
            ids, size = self._domains.ids(term.topology_key, index)
            held = ids[np.fromiter(rows, dtype=np.int64, count=len(rows))]
            many = np.fromiter(rows.values(), dtype=np.int64, count=len(rows))
            keep = held >= 0
            amounts = np.zeros(size, dtype=np.int64)
            np.add.at(amounts, held[keep], many[keep] * weight * factor)  # required terms: weight 1
            add(term.topology_key, ids, size, amounts)
        if not per_key:
            return 0
        raw = np.zeros(len(index), dtype=np.int64)
        for key, amounts in per_key.items():
            raw += per_node(self._domains.ids(key, index)[0], amounts)
        if candidates is not None:
            raw[~candidates] = NOT_SCORED
        return raw

    def score(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> int:
        return self._scored.node_score(pod, node_index(cluster), node.name, 0)

    def normalize(self, scores: IntArray, top: int) -> IntArray:
        """(score − min) × 100 / (max − min) over the nodes scored, in floating point as kube; 0 when all equal."""
        out = np.zeros(len(scores), dtype=np.int64)
        if len(scores) < 2:  # one score (the framework's for PreScore's Skip): max = min
            return out
        scored = scores != NOT_SCORED
        if not scored.any():
            return out
        low = int(scores[scored].min())
        spread = top - low
        if spread > 0:
            share = (scores[scored] - low).astype(np.float64) / float(spread)
            out[scored] = np.trunc(float(MAX_NODE_SCORE) * share).astype(np.int64)
        return out
