"""Per-node counts of the pods a selector matches, and nodes grouped by a topology label, kept up to date from the
node index's changes (InterPodAffinity, PodTopologySpread).

Each node's pods are summarised once per node change as signatures — (namespace, labels, terminating) with a
count — shared by every selector; a selector judges each distinct signature once. A selector's counts are kept
between cycles and only the nodes changed since (a pod placed or deleted) are counted again, so a Deployment's
next replica costs one node's recount and a few array operations, not a scan of every pod.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable, Mapping

import numpy as np

from apis.core.objects import JSON
from scheduler.cluster import NodeInfo
from scheduler.nodeindex import BoolArray, IntArray, NodeIndex, Tracker
from scheduler.plugins.nodefacts import NodeFacts

Signature = tuple[str, frozenset[tuple[str, str]], bool]  # (namespace, labels, terminating)
NodeSignatures = tuple[tuple[Signature, int], ...]
PodMatcher = Callable[[Signature], bool]

_MEMO_LIMIT = 1 << 17


def pod_signature(pod: JSON) -> Signature:
    """Read from the pod each time (a pod edited in place is never judged by its old labels)."""
    meta = pod.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    labels = meta.get("labels")
    items: frozenset[tuple[str, str]] = frozenset()
    if isinstance(labels, dict):
        try:
            items = frozenset(labels.items())
        except TypeError:  # a value that is no string: as the API server would have refused it, read as text
            items = frozenset((str(k), str(v)) for k, v in labels.items())
    return str(meta.get("namespace") or "default"), items, meta.get("deletionTimestamp") is not None


def _summarise(node: NodeInfo, last: NodeSignatures | None) -> NodeSignatures:
    return tuple(Counter(pod_signature(p) for p in node.pods.values()).items())


def node_signatures(node: NodeInfo) -> NodeSignatures:
    """The node's pods as (signature, how many), recomputed when the node changes (shared by every plugin)."""
    return node.derived("pod-signatures", _summarise)


class _Counts:
    def __init__(self, matches: PodMatcher) -> None:
        self.matches = matches
        self.tracker = Tracker()
        self.counts: IntArray = np.zeros(0, dtype=np.int64)
        self.judged: dict[Signature, bool] = {}

    def count(self, node: NodeInfo) -> int:
        judged, total = self.judged, 0
        for sig, n in node_signatures(node):
            ok = judged.get(sig)
            if ok is None:
                if len(judged) >= _MEMO_LIMIT:
                    judged.clear()
                ok = judged[sig] = self.matches(sig)
            if ok:
                total += n
        return total

    def get(self, index: NodeIndex) -> IntArray:
        changed = self.tracker.changes(index)
        if changed is None:
            self.counts = np.fromiter((self.count(n) for n in index.nodes), dtype=np.int64, count=len(index))
        else:
            for i in changed:
                self.counts[i] = self.count(index.nodes[i])
        return self.counts


class MatchCounts:
    """Per node, how many pods a matcher accepts; one kept array per matcher key (the most recent `limit`)."""

    def __init__(self, limit: int = 128) -> None:
        self.limit = limit
        self._by_key: OrderedDict[Hashable, _Counts] = OrderedDict()

    def get(self, key: Hashable, matches: PodMatcher, index: NodeIndex) -> IntArray:
        """The counts (the kept array: read it before the next call); `matches` is used when `key` is new."""
        entry = self._by_key.get(key)
        if entry is None:
            entry = self._by_key[key] = _Counts(matches)
            if len(self._by_key) > self.limit:
                self._by_key.popitem(last=False)
        else:
            self._by_key.move_to_end(key)
        return entry.get(index)


def _labels(node: NodeInfo) -> Mapping[str, str]:
    labels = (node.obj.get("metadata") or {}).get("labels")
    return dict(labels) if isinstance(labels, dict) else {}


class TopologyDomains:
    """Nodes grouped by a label's value: `ids(key)[i]` numbers node i's value (−1: no such label)."""

    def __init__(self) -> None:
        self.labels = NodeFacts(_labels, objects_only=True)
        self._ids: dict[str, tuple[int, IntArray, int]] = {}  # key → (labels version, ids, number of values)

    def ids(self, key: str, index: NodeIndex) -> tuple[IntArray, int]:
        """(the domain id of every node, how many domains)."""
        labels = self.labels.get(index)
        version = self.labels.version
        hit = self._ids.get(key)
        if hit is not None and hit[0] == version and len(hit[1]) == len(labels):
            return hit[1], hit[2]
        numbers: dict[str, int] = {}
        ids = np.fromiter((-1 if (v := lb.get(key)) is None else numbers.setdefault(v, len(numbers))
                           for lb in labels), dtype=np.int64, count=len(labels))
        self._ids[key] = (version, ids, len(numbers))
        return ids, len(numbers)


def domain_sums(ids: IntArray, size: int, counts: IntArray, rows: BoolArray | None = None) -> IntArray:
    """Per domain, the sum of `counts` over the nodes (those of `rows`) in it."""
    take = ids >= 0 if rows is None else rows & (ids >= 0)
    return np.bincount(ids[take], weights=counts[take], minlength=size).astype(np.int64)


def per_node(ids: IntArray, per_domain: IntArray) -> IntArray:
    """Each node's domain's figure (0 for a node without the label)."""
    out = np.zeros(len(ids), dtype=np.int64)
    has = ids >= 0
    out[has] = per_domain[ids[has]]
    return out
