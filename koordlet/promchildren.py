"""Labelled Prometheus children kept by label values: on a hot path `labels()` costs more than the observation."""

from __future__ import annotations

from typing import Any


class LabelledChildren:
    """`child(metric, *labels)` is `metric.labels(*labels)`, looked up once per distinct label values."""

    def __init__(self) -> None:
        self._children: dict[tuple[str, ...], Any] = {}

    def __call__(self, metric: Any, *labels: str) -> Any:
        key = (metric._name, *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child
