"""The envelope every Kubernetes object must have before either program reads it, and a typed read of one field."""

from __future__ import annotations

import json

from apis.core.errors import InvalidInput
from apis.core.objects import JSON


def shape_problem(obj: object) -> str | None:
    """Why an object cannot be handled at all (no usable metadata.name, spec or status not objects), or None."""
    if not isinstance(obj, dict):
        return "not an object"
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return "metadata is not an object"
    if not isinstance(meta.get("name"), str) or not meta["name"]:
        return "metadata.name is not a non-empty string"
    if not isinstance(meta.get("namespace"), str | None):
        return "metadata.namespace is not a string"
    for field in ("spec", "status"):
        if not isinstance(obj.get(field), dict | None):
            return f"{field} is not an object"
    return None


def object_field(value: object, where: str) -> JSON:
    """`value` as an object (absent or null: empty); InvalidInput naming `where` when it is anything else."""
    if not isinstance(value, dict | None):
        raise InvalidInput(f"{where} is not an object")
    return value or {}


def list_field(value: object, where: str) -> list[JSON]:
    """`value` as a list of objects (absent or null: empty); InvalidInput naming `where` when it is anything else."""
    if not isinstance(value, list | None) or not all(isinstance(v, dict) for v in value or ()):
        raise InvalidInput(f"{where} is not a list of objects")
    return value or []


def object_ident(obj: object, unnamed: str = "<unnamed>") -> tuple[str, str]:
    """`namespace/name` (or `name`) and resourceVersion of an object, as far as it has them (for log lines that
    name a skipped object once per version)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        return unnamed, ""
    ns, name = meta.get("namespace"), meta.get("name")
    return (f"{ns}/{name}" if ns else str(name)), str(meta.get("resourceVersion") or "")


def string_maps_problem(obj: JSON) -> str | None:
    """Why `metadata.labels` or `metadata.annotations` is not what an API server holds (a map of strings; null is
    the empty map), naming the field, or None. A YAML list or number written as an annotation value is refused here
    as the API server refuses it, instead of reaching a reader that expects the annotation's text."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return None
    for field in ("labels", "annotations"):
        value = meta.get(field)
        if value is None:
            continue
        if not isinstance(value, dict):
            return f"metadata.{field} is not a map of strings"
        for name, text in value.items():
            if not isinstance(text, str):
                return f"metadata.{field}[{name!r}] is a {_yaml_kind(text)}, not a string"
    return None


def _yaml_kind(value: object) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "map"
    if value is None:
        return "null"
    return "boolean" if isinstance(value, bool) else "number"


def json_object(text: str | bytes, where: str) -> JSON:
    """`text` decoded as one JSON object; InvalidInput naming `where` when it is not JSON or not an object."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise InvalidInput(f"{where}: invalid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise InvalidInput(f"{where} must be a JSON object")
    return doc
