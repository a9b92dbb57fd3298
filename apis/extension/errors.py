"""The one error every decoder in apis/extension and apis/scheduling raises on a malformed annotation or label."""

from __future__ import annotations

import json
from typing import Any

from apis.core.errors import InvalidInput


class AnnotationError(InvalidInput):
    """A Koordinator annotation or label value is malformed; `path` names the bad field inside it ("" = the whole)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path  # e.g. llc.schemata.range
        self.message = message


def struct_fields(text: str) -> dict[str, Any] | None:
    """An annotation read as Go's json.Unmarshal reads it into a struct: the object's fields by lower-cased name
    (Go matches field names case-insensitively), None for `null`; AnnotationError for bad JSON or a non-object."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise AnnotationError("", f"invalid JSON: {e}") from None
    if doc is None:
        return None
    if not isinstance(doc, dict):
        raise AnnotationError("", "must be a JSON object")
    return {str(k).lower(): v for k, v in doc.items()}
