"""SchedulingHint (koord-scheduler v1.7, preFilter): a pod's `scheduling.koordinator.sh/scheduling-hint` names the
nodes it is looked at on (PreFilterResult.NodeNames when the list is not empty); an unreadable hint is an error."""

from __future__ import annotations

from apis.core.objects import JSON
from apis.scheduling.hint import scheduling_hint
from scheduler.cluster import Cluster

NAME = "SchedulingHint"


class SchedulingHint:
    name = NAME

    @staticmethod
    def _annotations(pod: JSON) -> dict[str, object]:
        return (pod.get("metadata") or {}).get("annotations") or {}

    def prefilter(self, pod: JSON, cluster: Cluster) -> str | None:
        """BeforePreFilter's parse: an invalid hint fails the pod's cycle with the reason."""
        try:
            scheduling_hint(self._annotations(pod))
        except ValueError as e:
            return f"invalid scheduling hint: {e}"
        return None

    def prefilter_nodes(self, pod: JSON) -> frozenset[str] | None:
        try:
            hint = scheduling_hint(self._annotations(pod))
        except ValueError:
            return None  # refused by prefilter
        return frozenset(hint.node_names) if hint is not None and hint.node_names else None
