"""Strict readers for DeschedulerConfiguration fields, each refusal one line naming the field path.

The readers both configurations share (boolean, string, string_list, mapping, check_keys, ConfigError) are
scheduler.config.fields', re-exported here; those below read what only the descheduler has, or as its Go types
decode (an integer of a Go integer type, a duration string only).

Go's decoding is the model: a JSON type that does not fit the Go field is an error (a string where a number is
wanted, a negative `uint`), `metav1.Duration` is a Go duration string, a LabelSelector must convert.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from apis.core import godur
from apis.core.errors import InvalidInput
from apis.core.labelselector import LabelSelector, SelectorError, parse_label_selector
from scheduler.config.fields import TYPE_FIELDS, ConfigError, boolean, check_keys, mapping, string, string_list

__all__ = ["ConfigError", "Namespaces", "PriorityThreshold", "args_object", "boolean", "check_keys", "duration",
           "integer", "mapping", "member", "namespaces", "percentages", "priority_threshold", "selector", "string",
           "string_list"]

INT32 = (-(2**31), 2**31 - 1)
UINT32 = (0, 2**32 - 1)
INT64 = (-(2**63), 2**63 - 1)
UINT = (0, 2**64 - 1)


@dataclass(frozen=True)
class Namespaces:
    """`{include: [...], exclude: [...]}` (upstream Namespaces)."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    def allows(self, namespace: str) -> bool:
        if self.include and namespace not in self.include:
            return False
        return namespace not in self.exclude


@dataclass(frozen=True)
class PriorityThreshold:
    """`{value, name}`: a priority value, or the PriorityClass whose value it is."""

    value: int | None = None
    name: str = ""


@dataclass
class Problems:
    """Validation errors collected as upstream's field.ErrorList; `raise_first` reports the first one."""

    items: list[str] = field(default_factory=list)

    def invalid(self, path: str, value: object, message: str) -> None:
        self.items.append(f"{path}: Invalid value: {_show(value)}: {message}")

    def raise_first(self) -> None:
        if self.items:
            raise ConfigError(self.items[0])


def _show(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, str):
        return f'"{value}"'
    return str(value)


def integer(raw: Mapping[str, object], name: str, where: str, bounds: tuple[int, int] = INT32) -> int | None:
    """An integer of a Go integer type (bounds), None when absent."""
    v = raw.get(name)
    if v is None:
        return None
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ConfigError(f"{where}.{name}: must be an integer, got {v!r}")
    if not bounds[0] <= v <= bounds[1]:
        kind = "a non-negative integer" if bounds[0] == 0 else "an integer"
        raise ConfigError(f"{where}.{name}: must be {kind} of at most {bounds[1]}, got {v!r}")
    return v


def duration(raw: Mapping[str, object], name: str, where: str) -> float | None:
    """metav1.Duration: a Go duration string ("10s", "1m30s", "-5m"); seconds, None when absent."""
    v = raw.get(name)
    if v is None:
        return None
    if not isinstance(v, str):
        raise ConfigError(f"{where}.{name}: must be a duration string such as 10s or 5m, got {v!r}")
    try:
        return godur.parse(v)
    except InvalidInput:
        raise ConfigError(f"{where}.{name}: {v!r} is not a duration (e.g. 10s, 1m30s)") from None


def selector(raw: Mapping[str, object], name: str, where: str) -> LabelSelector | None:
    v = raw.get(name)
    if v is None:
        return None
    try:
        return parse_label_selector(v, f"{where}.{name}")
    except SelectorError as e:
        raise ConfigError(str(e)) from None


def member(raw: Mapping[str, object], name: str, where: str,
           keys: Sequence[str] | None = None) -> tuple[Mapping[str, object], str] | None:
    """The object at `name` and its field path, None when absent; with `keys`, strictly those fields."""
    v = raw.get(name)
    if v is None:
        return None
    at = f"{where}.{name}"
    m = mapping(v, at)
    if keys is not None:
        check_keys(m, keys, at)
    return m, at


def namespaces(raw: Mapping[str, object], name: str, where: str) -> Namespaces | None:
    got = member(raw, name, where, ("include", "exclude"))
    if got is None:
        return None
    m, at = got
    return Namespaces(tuple(string_list(m, "include", at)), tuple(string_list(m, "exclude", at)))


def priority_threshold(raw: Mapping[str, object], name: str, where: str) -> PriorityThreshold | None:
    got = member(raw, name, where, ("value", "name"))
    if got is None:
        return None
    m, at = got
    return PriorityThreshold(integer(m, "value", at), string(m, "name", at))


def percentages(raw: Mapping[str, object], name: str, where: str) -> dict[str, float] | None:
    """ResourceThresholds: resource name → percentage (a JSON number), None when absent."""
    got = member(raw, name, where)
    if got is None:
        return None
    m, at = got
    out: dict[str, float] = {}
    for k, x in m.items():
        if isinstance(x, bool) or not isinstance(x, int | float):
            raise ConfigError(f"{at}.{k}: must be a number (a percentage), got {x!r}")
        out[str(k)] = float(x)
    return out


def weights(raw: Mapping[str, object], name: str, where: str) -> dict[str, int] | None:
    """resource name → int64 weight, None when absent."""
    got = member(raw, name, where)
    if got is None:
        return None
    m, at = got
    return {str(k): int(integer(m, str(k), at, INT64) or 0) for k in m}


def args_object(raw: object, where: str, fields: Sequence[str]) -> Mapping[str, object]:
    """A plugin's args: an object holding only its `fields` and its TypeMeta."""
    m = mapping(raw, where)
    check_keys(m, (*TYPE_FIELDS, *fields), where)
    return m
