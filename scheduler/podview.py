"""The scheduler's PodView over a raw pod, its decoded annotations shared by every view of the pod, so each
annotation is decoded once per pod, not per plugin or cycle."""

from __future__ import annotations

from collections.abc import Mapping

from apis.core.objects import JSON
from apis.extension.pod import AnnotationCache

# Decoded annotations are kept per pod (namespace, name, uid), not per object: `run` takes a new copy of every pod
# each cycle, and equal text is not decoded again; past this many pods the map starts afresh (pods the cluster
# dropped are let go).
MAX_PODS = 1 << 16

_EMPTY: Mapping[str, object] = {}


class SchedPod:
    """A raw pod read as a PodView; its annotations' decoded values live in `decoded`, checked against their text."""

    __slots__ = ("decoded", "raw")

    def __init__(self, raw: JSON, decoded: AnnotationCache | None = None) -> None:
        self.raw = raw
        self.decoded = decoded if decoded is not None else AnnotationCache()

    def _meta(self) -> Mapping[str, object]:
        meta = self.raw.get("metadata")
        return meta if isinstance(meta, dict) else _EMPTY

    def _field(self, name: str) -> str:
        value = self._meta().get(name)
        return value if isinstance(value, str) else ""

    @property
    def uid(self) -> str:
        return self._field("uid")

    @property
    def namespace(self) -> str:
        return self._field("namespace")

    @property
    def name(self) -> str:
        return self._field("name")

    @property
    def labels(self) -> Mapping[str, object]:
        value = self._meta().get("labels")
        return value if isinstance(value, dict) else _EMPTY

    @property
    def annotations(self) -> Mapping[str, object]:
        value = self._meta().get("annotations")
        return value if isinstance(value, dict) else _EMPTY


_decoded: dict[tuple[str, str, str], AnnotationCache] = {}


def pod_view(pod: JSON) -> SchedPod:
    """The pod as a PodView, sharing its decoded annotations with every earlier view of the same pod (any plugin,
    any cycle, any copy of the object)."""
    view = SchedPod(pod)
    key = (view.namespace, view.name, view.uid)
    cache = _decoded.get(key)
    if cache is None:
        if len(_decoded) >= MAX_PODS:
            _decoded.clear()
        cache = _decoded[key] = view.decoded
    else:
        view.decoded = cache
    return view
