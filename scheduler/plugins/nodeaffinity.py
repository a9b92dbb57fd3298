"""kube-scheduler's NodeAffinity: the pod's nodeSelector and required node affinity as a Filter (with the profile's
`addedAffinity` from NodeAffinityArgs), its preferred terms as a Score normalized by the best node."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping

import numpy as np

from apis.core.nodeaffinity import AffinityError, NodeSelector, PodNodeAffinity, Preferred, pod_node_affinity
from apis.core.objects import JSON
from scheduler.cluster import Cluster, NodeInfo
from scheduler.nodeindex import BoolArray, IntArray, NodeIndex
from scheduler.plugins.nodefacts import NodeFacts
from scheduler.plugins.normalize import default_normalize

REASON_POD = "node(s) didn't match Pod's node affinity/selector"
REASON_ENFORCED = "node(s) didn't match scheduler-enforced node affinity"
_CACHED_MASKS = 64  # distinct pod affinities whose node masks are kept (a Deployment's pods share one)


def _labels(node: NodeInfo) -> Mapping[str, str]:
    """A copy: NodeFacts tells a change by comparing with the last one, which a dict edited in place would defeat."""
    labels = (node.obj.get("metadata") or {}).get("labels")
    return dict(labels) if isinstance(labels, dict) else {}


class NodeAffinity:
    name = "NodeAffinity"

    def __init__(self, added_required: NodeSelector | None = None, added_preferred: tuple[Preferred, ...] = (),
                 weight: int = 2) -> None:
        self.weight = weight
        self.added_required = added_required
        self.added_preferred = added_preferred
        self._labels = NodeFacts(_labels, objects_only=True)
        self._masks: OrderedDict[tuple[PodNodeAffinity, bool], tuple[int, BoolArray]] = OrderedDict()
        self._parsed: tuple[JSON | None, PodNodeAffinity | AffinityError] = (None, PodNodeAffinity())

    def _affinity(self, pod: JSON) -> PodNodeAffinity | AffinityError:
        pod_seen, parsed = self._parsed
        if pod is not pod_seen:
            try:
                parsed = pod_node_affinity(pod)
            except AffinityError as e:
                parsed = e
            self._parsed = (pod, parsed)
        return parsed

    def prefilter(self, pod: JSON, cluster: Cluster) -> str | None:
        """A selector the API server would refuse fails the pod here, in one line."""
        parsed = self._affinity(pod)
        return f"invalid node affinity: {parsed}" if isinstance(parsed, AffinityError) else None

    def quiet(self, pod: JSON, index: NodeIndex) -> int | None:
        """No nodeSelector, required or preferred node affinity, the pod's or the profile's: every node passes, every
        raw score is 0 (scheduler.interfaces' QuietPlugin)."""
        if self.added_required is not None or self.added_preferred:
            return None
        spec = pod.get("spec")
        if type(spec) is dict and not spec.get("nodeSelector") and not spec.get("affinity"):
            return 0  # nothing to parse: pod_node_affinity reads these two only
        parsed = self._affinity(pod)
        return None if isinstance(parsed, AffinityError) or parsed.filters or parsed.preferred else 0

    def filter(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> str | None:
        labels = _labels(node)
        if self.added_required is not None and not self.added_required.matches(labels, node.name):
            return REASON_ENFORCED
        parsed = self._affinity(pod)
        if isinstance(parsed, AffinityError):
            return f"invalid node affinity: {parsed}"
        return None if parsed.required_match(labels, node.name) else REASON_POD

    def prefilter_vector(self, pod: JSON, index: NodeIndex) -> BoolArray | None:
        parsed = self._affinity(pod)
        if isinstance(parsed, AffinityError):
            return np.zeros(len(index), dtype=np.bool_)
        if not parsed.filters and self.added_required is None:
            return None
        labels = self._labels.get(index)
        version = self._labels.version
        cache_key = (parsed, self.added_required is not None)
        hit = self._masks.get(cache_key)
        if hit is not None and hit[0] == version:
            self._masks.move_to_end(cache_key)
            return hit[1]
        added, names = self.added_required, index.names
        mask = np.fromiter(((added is None or added.matches(lb, nm)) and parsed.required_match(lb, nm)
                            for lb, nm in zip(labels, names, strict=True)), dtype=np.bool_, count=len(labels))
        self._masks[cache_key] = (version, mask)
        if len(self._masks) > _CACHED_MASKS:
            self._masks.popitem(last=False)
        return mask

    def _preferred(self, pod: JSON) -> tuple[Preferred, ...]:
        parsed = self._affinity(pod)
        own = () if isinstance(parsed, AffinityError) else parsed.preferred
        return (*self.added_preferred, *own)

    def score(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> int:
        """The raw sum of the matching preferred terms' weights (normalize turns it into 0..100)."""
        labels = _labels(node)
        return sum(p.weight for p in self._preferred(pod) if p.term.matches(labels, node.name))

    def score_vector(self, pod: JSON, index: NodeIndex) -> IntArray | int:
        preferred = self._preferred(pod)
        if not preferred:  # PreScore's Skip: nothing to prefer
            return 0
        labels = self._labels.get(index)
        return np.fromiter((sum(p.weight for p in preferred if p.term.matches(lb, nm))
                            for lb, nm in zip(labels, index.names, strict=True)), dtype=np.int64, count=len(labels))

    def normalize(self, scores: IntArray, top: int) -> IntArray:
        return default_normalize(scores, top, reverse=False)

