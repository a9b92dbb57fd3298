"""The pod (anti-)affinity terms of the pods already on nodes, by term: which nodes hold how many pods stating it.

InterPodAffinity asks, for an incoming pod, which existing pods' terms match it (their required anti-affinity
forbids domains; their affinity and preferences score them). The same Deployment's pods state the same term, so the
terms are kept once each with the nodes holding them, updated from the node index's changes (a placement re-reads
one node's pods), and an incoming pod judges each distinct term once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from apis.core.labelselector import SelectorError
from apis.core.objects import JSON
from apis.core.podaffinity import AffinityTerm, PodAffinity, has_pod_affinity, pod_affinity
from scheduler.cluster import NodeInfo, subset_changes
from scheduler.nodeindex import NodeIndex, Tracker

ANTI_REQUIRED, AFFINITY_REQUIRED, AFFINITY_PREFERRED, ANTI_PREFERRED = "anti", "affinity", "preferred", \
    "preferred-anti"
Stated = tuple[str, int, AffinityTerm]  # (role, weight, term)

_MEMO_LIMIT = 1 << 16
_parsed: dict[int, tuple[JSON, PodAffinity | None]] = {}  # id(pod) → (pod, its terms; None: unreadable)


def _affinity(pod: JSON) -> PodAffinity | None:
    hit = _parsed.get(id(pod))
    if hit is not None and hit[0] is pod:
        return hit[1]
    try:
        got: PodAffinity | None = pod_affinity(pod)
    except SelectorError:
        got = None  # the API server admitted it; a term we cannot read is left out
    if len(_parsed) >= _MEMO_LIMIT:
        _parsed.clear()
    _parsed[id(pod)] = (pod, got)
    return got


def stated(pod: JSON) -> Iterator[Stated]:
    """Every term the pod states, with its role and weight (required terms: weight 1)."""
    if not has_pod_affinity(pod):
        return
    a = _affinity(pod)
    if a is None:
        return
    yield from ((ANTI_REQUIRED, 1, t) for t in a.required_anti)
    yield from ((AFFINITY_REQUIRED, 1, t) for t in a.required_affinity)
    yield from ((AFFINITY_PREFERRED, w.weight, w.term) for w in a.preferred_affinity)
    yield from ((ANTI_PREFERRED, w.weight, w.term) for w in a.preferred_anti)


STATING = "pod-affinity"  # NodeInfo.pods_where: the node's pods stating pod (anti-)affinity
_NO_TERMS: Counter[Stated] = Counter()  # shared by every node none of whose pods states a term: never changed


def _node_terms(node: NodeInfo) -> Counter[Stated]:
    stating = node.pods_where(STATING, has_pod_affinity)
    return Counter(s for p in stating.values() for s in stated(p)) if stating else _NO_TERMS


class ExistingTerms:
    """`by_term[(role, weight, term)]` maps node rows to how many of their pods state it."""

    def __init__(self) -> None:
        self._tracker = Tracker()
        self._rows: list[Counter[Stated]] = []
        self.by_term: dict[Stated, dict[int, int]] = {}
        self.roles: Counter[str] = Counter()  # role → how many (term, node) entries
        # the index, its epoch and cluster.subset_changes() as of the last refresh
        self._stamp: tuple[NodeIndex | None, int, int] = (None, -1, -1)

    def _add(self, row: int, terms: Counter[Stated], sign: int) -> None:
        for s, n in terms.items():
            nodes = self.by_term.setdefault(s, {})
            left = nodes.get(row, 0) + sign * n
            if left:
                nodes[row] = left
            else:
                nodes.pop(row, None)
            if not nodes:
                del self.by_term[s]
            self.roles[s[0]] += sign

    def refresh(self, index: NodeIndex) -> ExistingTerms:
        stamp = self._stamp
        if stamp[0] is index and stamp[1] == index.epoch and stamp[2] == subset_changes():
            return self  # no node's pods stating terms changed (the rows changed since are read later)
        changed = self._tracker.changes(index)
        if changed is None:
            self.by_term, self.roles = {}, Counter()
            self._rows = [_node_terms(n) for n in index.nodes]
            for i, terms in enumerate(self._rows):
                if terms:
                    self._add(i, terms, 1)
        else:
            for i in changed:
                new = _node_terms(index.nodes[i])
                old = self._rows[i]
                if new is not old and new != old:
                    self._add(i, old, -1)
                    self._add(i, new, 1)
                    self._rows[i] = new
        self._stamp = (index, index.epoch, subset_changes())
        return self

    def has(self, *roles: str) -> bool:
        counts = self.roles
        return any(counts.get(r, 0) > 0 for r in roles)
