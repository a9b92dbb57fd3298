"""One malformed API object isolated: reported once per object version (a log line and a count), never raised."""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from typing import Any

log = logging.getLogger("scheduler.malformed")

# kind → malformed object versions met by this process; exported as scheduler_malformed_objects_total{kind}.
skipped: Counter[str] = Counter()
_told: OrderedDict[tuple[str, str, str], None] = OrderedDict()
_TOLD_MAX = 4096  # object versions remembered; an older one reported again after that is harmless


def _ident(obj: Any) -> tuple[str, str]:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        return "?", ""
    ns, name = meta.get("namespace"), meta.get("name")
    return (f"{ns}/{name}" if ns else str(name)), str(meta.get("resourceVersion") or "")


def report(kind: str, obj: Any, reason: str, what: str = "skipped") -> None:
    """Log `kind obj: what: reason` once per (object, resourceVersion) and count it."""
    name, rv = _ident(obj)
    told = (kind, name, rv)
    if told in _told:
        _told.move_to_end(told)
        return
    _told[told] = None
    if len(_told) > _TOLD_MAX:
        _told.popitem(last=False)
    skipped[kind] += 1
    log.warning("malformed %s %s%s: %s: %s", kind, name, f" (resourceVersion {rv})" if rv else "", what, reason)


def shape_problem(obj: Any) -> str | None:
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
