"""The shape of a Kubernetes object as both programs hold it (decoded JSON), and typed reads of its metadata."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

JSON = dict[str, Any]
"""A decoded JSON object that its holder may build or change (a request body, a patch, a status)."""

JSONMapping = Mapping[str, Any]
"""A decoded JSON object only read: a field of an object from the API server, a file or a flag. Its values are
still untrusted JSON; a reader that only passes them on to validators should take `Mapping[str, object]`."""


def as_object(value: object) -> JSONMapping:
    """`value` if it is a JSON object, else an empty one: a field of the wrong type reads as absent."""
    return value if isinstance(value, dict) else {}


def as_objects(value: object) -> list[JSONMapping]:
    """The JSON objects of `value` if it is a list (other items left out), else an empty list."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def annotate(obj: JSON, annotations: Mapping[str, str]) -> None:
    """Add `annotations` to the object's metadata.annotations, made when absent or null (an API server reads a null
    map as empty)."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = obj["metadata"] = {}
    held = meta.get("annotations")
    if not isinstance(held, dict):
        held = meta["annotations"] = {}
    held.update(annotations)
