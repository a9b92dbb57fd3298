"""The scheduler's PodView over a raw pod: one view per pod object, so each annotation is decoded once, not per
plugin."""

from __future__ import annotations

from collections.abc import Mapping

from apis.core.objects import JSON
from apis.extension.pod import AnnotationCache

# Views are kept by the pod object's identity (each holds its pod, so an id is not reused while its view lives);
# past this many the map starts afresh, so pods the cluster dropped are let go.
MAX_VIEWS = 1 << 16

_EMPTY: Mapping[str, object] = {}


class SchedPod:
    """A raw pod read as a PodView; its annotations' decoded values live in `decoded`, checked against their text."""

    __slots__ = ("decoded", "raw")

    def __init__(self, raw: JSON) -> None:
        self.raw = raw
        self.decoded = AnnotationCache()

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


_views: dict[int, SchedPod] = {}


def pod_view(pod: JSON) -> SchedPod:
    """The one view of this pod object (the same for every plugin, cycle after cycle, while the object lives)."""
    view = _views.get(id(pod))
    if view is None or view.raw is not pod:
        if len(_views) >= MAX_VIEWS:
            _views.clear()
        view = _views[id(pod)] = SchedPod(pod)
    return view
