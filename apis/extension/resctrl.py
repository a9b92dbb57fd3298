"""`node.koordinator.sh/resctrl`: a pod's own L3 cache ways and memory bandwidth, its name and typed decoder."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from apis.extension.errors import AnnotationError

# Upstream: apis/extension/resctrl.go (ResctrlConfig, AnnotationResctrl).

ANNOTATION_RESCTRL = "node.koordinator.sh/resctrl"
_INT64 = (-(2**63), 2**63 - 1)


@dataclass(frozen=True)
class ResctrlConfig:
    """apis/extension/resctrl.go ResctrlConfig, validated: ranges 0 <= start < end <= 100, percents 1..100."""

    llc_range: tuple[int, int] | None = None
    llc_per_cache: tuple[tuple[int, tuple[int, int]], ...] = ()
    mb_percent: int | None = None
    mb_per_cache: tuple[tuple[int, int], ...] = ()


class _Obj:
    """A JSON object as its key/value pairs in order (Go matches keys case-insensitively, so no dict)."""

    __slots__ = ("pairs",)

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        self.pairs = pairs


def _fold(name: str) -> str:
    # Go's encoding/json folds keys like this (so "ſ" matches "s" and the Kelvin sign matches "k")
    return "".join(c.upper().lower() if len(c.upper()) == 1 else c.lower() for c in name)


def _member(obj: _Obj, name: str, path: str, kind: str) -> Any:
    """The value for a Go struct field: keys matched case-insensitively; for an object every match is decoded into
    the same struct (merged), otherwise the last non-null match wins; null leaves the field unset (None)."""
    folded = _fold(name)
    values = [v for k, v in obj.pairs if _fold(k) == folded and v is not None]
    if kind == "object":
        pairs: list[tuple[str, Any]] = []
        for v in values:
            if not isinstance(v, _Obj):
                raise AnnotationError(path, f"must be an object, not {_json_kind(v)}")
            pairs += v.pairs
        return _Obj(pairs) if values else None
    return values[-1] if values else None


def _json_kind(v: Any) -> str:
    if isinstance(v, _Obj):
        return "an object"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, list):
        return "an array"
    if isinstance(v, str):
        return "a string"
    return f"the number {v!r}" if isinstance(v, int | float) else "null"


def _int(v: Any, path: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise AnnotationError(path, f"must be an integer, not {_json_kind(v)}")
    if not _INT64[0] <= v <= _INT64[1]:
        raise AnnotationError(path, f"{v} overflows a Go int")
    return v


def _optional_int(v: Any, path: str) -> int:
    return 0 if v is None else _int(v, path)  # an absent Go int is 0


def _array(v: Any, path: str) -> list[Any]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise AnnotationError(path, f"must be an array, not {_json_kind(v)}")
    return v


def _range(v: Any, path: str, *, required: bool) -> tuple[int, int] | None:
    items = [_int(x, f"{path}[{i}]") for i, x in enumerate(_array(v, path))]
    if not items and not required:
        return None
    if len(items) != 2:
        raise AnnotationError(path, f"must be [start, end], got {len(items)} numbers")
    start, end = items
    if start < 0 or end > 100 or end <= start:
        raise AnnotationError(path, f"[{start}, {end}] is not 0 <= start < end <= 100")
    return start, end


def _percent(v: Any, path: str) -> int:
    p = _int(v, path)
    if not 1 <= p <= 100:
        raise AnnotationError(path, f"{p} is not in [1, 100]")
    return p


def decode_resctrl(text: str) -> ResctrlConfig:
    """Decode and validate `node.koordinator.sh/resctrl`; AnnotationError names the bad field.

    Keys match case-insensitively as Go's encoding/json does (upstream tests write `cacheid`, the proposal `LLC`);
    unknown keys are ignored; numbers must be integers; `null` means unset. Where upstream silently ignores an
    entry (a range that is not two numbers, a per-cache entry without a value) or writes an out-of-range value,
    we report the field instead."""

    def _reject(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    try:
        doc = json.loads(text, object_pairs_hook=_Obj, parse_constant=_reject)
    except (ValueError, RecursionError) as e:  # RecursionError: nested deeper than the interpreter's stack
        raise AnnotationError("", f"invalid JSON: {e}") from None
    if doc is None:
        return ResctrlConfig()
    if not isinstance(doc, _Obj):
        raise AnnotationError("", f"must be a JSON object, not {_json_kind(doc)}")
    llc = _member(doc, "llc", "llc", "object") or _Obj([])
    mb = _member(doc, "mb", "mb", "object") or _Obj([])
    llc_schemata = _member(llc, "schemata", "llc.schemata", "object") or _Obj([])
    mb_schemata = _member(mb, "schemata", "mb.schemata", "object") or _Obj([])

    # llc.schemata.percent and mb.schemata.range exist in the Go type but are never used: type-checked only
    unused_percent = _member(llc_schemata, "percent", "llc.schemata.percent", "value")
    if unused_percent is not None:
        _int(unused_percent, "llc.schemata.percent")
    _array(_member(mb_schemata, "range", "mb.schemata.range", "value"), "mb.schemata.range")

    llc_range = _range(_member(llc_schemata, "range", "llc.schemata.range", "value"), "llc.schemata.range",
                       required=False)
    raw_percent = _member(mb_schemata, "percent", "mb.schemata.percent", "value")
    mb_percent = None
    if raw_percent is not None and _int(raw_percent, "mb.schemata.percent") != 0:  # 0 = unset (omitempty)
        mb_percent = _percent(raw_percent, "mb.schemata.percent")

    llc_per: dict[int, tuple[int, int]] = {}
    path = "llc.schemataPerCache"
    for i, entry in enumerate(_array(_member(llc, "schemataPerCache", path, "value"), path)):
        at = f"{path}[{i}]"
        if entry is None:
            entry = _Obj([])  # Go decodes null into the zero element
        if not isinstance(entry, _Obj):
            raise AnnotationError(at, f"must be an object, not {_json_kind(entry)}")
        cache_id = _optional_int(_member(entry, "cacheID", f"{at}.cacheID", "value"), f"{at}.cacheID")
        rng = _range(_member(entry, "range", f"{at}.range", "value"), f"{at}.range", required=True)
        assert rng is not None
        llc_per[cache_id] = rng
    mb_per: dict[int, int] = {}
    path = "mb.schemataPerCache"
    for i, entry in enumerate(_array(_member(mb, "schemataPerCache", path, "value"), path)):
        at = f"{path}[{i}]"
        if entry is None:
            entry = _Obj([])
        if not isinstance(entry, _Obj):
            raise AnnotationError(at, f"must be an object, not {_json_kind(entry)}")
        cache_id = _optional_int(_member(entry, "cacheID", f"{at}.cacheID", "value"), f"{at}.cacheID")
        mb_per[cache_id] = _percent(_optional_int(_member(entry, "percent", f"{at}.percent", "value"),
                                                  f"{at}.percent"), f"{at}.percent")
    return ResctrlConfig(llc_range, tuple(llc_per.items()), mb_percent, tuple(mb_per.items()))
