"""The one error every decoder in apis/extension and apis/scheduling raises on a malformed annotation or label."""

from __future__ import annotations

from apis.core.errors import InvalidInput


class AnnotationError(InvalidInput):
    """A Koordinator annotation or label value is malformed; `path` names the bad field inside it ("" = the whole)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path  # e.g. llc.schemata.range
        self.message = message
