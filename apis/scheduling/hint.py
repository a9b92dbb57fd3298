"""The scheduling hint a pod may carry (upstream apis/extension/scheduling_hint.go): the nodes to consider first."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

ANNOTATION_SCHEDULING_HINT = "scheduling.koordinator.sh/scheduling-hint"


@dataclass(frozen=True)
class SchedulingHint:
    node_names: tuple[str, ...] = ()
    extensions: Mapping[str, Any] = field(default_factory=dict)


def scheduling_hint(annotations: Mapping[str, Any]) -> SchedulingHint | None:
    """GetSchedulingHint: None when the annotation is absent; ValueError (one line) when it is not the JSON object
    `{"nodeNames": [...], "extensions": {...}}`."""
    raw = annotations.get(ANNOTATION_SCHEDULING_HINT)
    if raw is None or raw == "":
        return None
    try:
        doc = json.loads(str(raw))
    except ValueError as e:
        raise ValueError(f"{ANNOTATION_SCHEDULING_HINT}: not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{ANNOTATION_SCHEDULING_HINT}: must be a JSON object")
    names = doc.get("nodeNames")
    if names is None:
        names = []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{ANNOTATION_SCHEDULING_HINT}.nodeNames: must be a list of node names")
    extensions = doc.get("extensions")
    if extensions is not None and not isinstance(extensions, dict):
        raise ValueError(f"{ANNOTATION_SCHEDULING_HINT}.extensions: must be an object")
    return SchedulingHint(tuple(names), extensions or {})
