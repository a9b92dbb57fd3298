"""Typed readers for KubeSchedulerConfiguration fields: each error is one line naming the field path."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from typing import overload

from apis.core import godur
from apis.core.errors import InvalidInput
from apis.core.quantity import parse_quantity

TYPE_FIELDS = ("apiVersion", "kind")  # every args object may carry its TypeMeta


class ConfigError(InvalidInput):
    """A scheduler configuration koord-sched refuses; the message is one line naming the field."""


def suggest(word: str, choices: Iterable[str]) -> str:
    """' (did you mean X?)' for a close spelling, else ''."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    if not close:
        lowered = {c.lower().replace("-", "").replace("_", ""): c for c in choices}
        hit = lowered.get(word.lower().replace("-", "").replace("_", ""))
        close = [hit] if hit else []
    return f" (did you mean {close[0]!r}?)" if close else ""


def mapping(raw: object, where: str) -> Mapping[str, object]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: must be an object, got {type(raw).__name__} {raw!r}")
    return raw


def check_keys(raw: Mapping[str, object], accepted: Sequence[str], where: str) -> None:
    """Strict decoding as kube-scheduler's: an unknown field is an error naming it and the accepted ones."""
    for k in raw:
        if str(k) not in accepted:
            raise ConfigError(f"{where}.{k}: unknown field{suggest(str(k), accepted)}; accepted: "
                              f"{', '.join(accepted)}")


@overload
def boolean(raw: Mapping[str, object], name: str, where: str, default: bool = False) -> bool: ...


@overload
def boolean(raw: Mapping[str, object], name: str, where: str, default: None) -> bool | None: ...


def boolean(raw: Mapping[str, object], name: str, where: str, default: bool | None = False) -> bool | None:
    """true or false; `default` when absent (None: the field's absence is itself meaningful)."""
    v = raw.get(name)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise ConfigError(f"{where}.{name}: must be true or false, got {v!r}")
    return v


def integer(raw: Mapping[str, object], name: str, where: str, default: int, *, low: int | None = None,
            high: int | None = None) -> int:
    v = raw.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise ConfigError(f"{where}.{name}: must be an integer, got {v!r}")
    check_range(v, f"{where}.{name}", low, high)
    return v


def check_range(v: int, where: str, low: int | None, high: int | None) -> None:
    if (low is not None and v < low) or (high is not None and v > high):
        bounds = f"{'' if low is None else low}..{'' if high is None else high}"
        raise ConfigError(f"{where}: {v} is out of range (accepted: {bounds})")


def string(raw: Mapping[str, object], name: str, where: str, default: str = "") -> str:
    v = raw.get(name)
    if v is None:
        return default
    if not isinstance(v, str):
        raise ConfigError(f"{where}.{name}: must be a string, got {v!r}")
    return v


def choice(raw: Mapping[str, object], name: str, where: str, default: str, accepted: Sequence[str]) -> str:
    v = string(raw, name, where, default)
    if v not in accepted:
        raise ConfigError(f"{where}.{name}: {v!r} is not supported{suggest(v, accepted)}; accepted: "
                          f"{', '.join(accepted)}")
    return v


def duration(raw: Mapping[str, object], name: str, where: str, default: float, *, positive: bool = False) -> float:
    """metav1.Duration: a Go duration string ("600s", "1m30s"); a bare number is taken as seconds."""
    v = raw.get(name)
    if v is None:
        return default
    if isinstance(v, bool):
        raise ConfigError(f"{where}.{name}: must be a duration such as 600s, got {v!r}")
    if isinstance(v, int | float):
        seconds = float(v)
    else:
        try:
            seconds = godur.parse(str(v))
        except InvalidInput:
            raise ConfigError(f"{where}.{name}: {v!r} is not a duration (e.g. 600s, 1m30s)") from None
    if seconds < 0 or (positive and seconds == 0):
        raise ConfigError(f"{where}.{name}: must be {'> 0' if positive else '>= 0'}, got {v!r}")
    return seconds


def int_map(raw: Mapping[str, object], name: str, where: str, *, low: int | None = None,
            high: int | None = None) -> dict[str, int] | None:
    """A resource → integer map, or None when absent."""
    v = raw.get(name)
    if v is None:
        return None
    if not isinstance(v, Mapping):
        raise ConfigError(f"{where}.{name}: must be a map of resource name to integer, got {v!r}")
    out: dict[str, int] = {}
    for k, x in v.items():
        if isinstance(x, bool) or not isinstance(x, int):
            raise ConfigError(f"{where}.{name}.{k}: must be an integer, got {x!r}")
        check_range(x, f"{where}.{name}.{k}", low, high)
        out[str(k)] = x
    return out


def quantity_map(raw: Mapping[str, object], name: str, where: str) -> dict[str, str] | None:
    """A ResourceList (resource → quantity string), validated, or None when absent."""
    v = raw.get(name)
    if v is None:
        return None
    if not isinstance(v, Mapping):
        raise ConfigError(f"{where}.{name}: must be a map of resource name to quantity, got {v!r}")
    out: dict[str, str] = {}
    for k, x in v.items():
        try:
            q = parse_quantity(x)
        except InvalidInput:
            raise ConfigError(f"{where}.{name}.{k}: {x!r} is not a quantity") from None
        if q < 0:
            raise ConfigError(f"{where}.{name}.{k}: must not be negative, got {x!r}")
        out[str(k)] = str(x)
    return out


def string_list(raw: Mapping[str, object], name: str, where: str) -> list[str]:
    v = raw.get(name)
    if v is None:
        return []
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise ConfigError(f"{where}.{name}: must be a list of strings, got {v!r}")
    return list(v)


def object_list(raw: Mapping[str, object], name: str, where: str) -> list[Mapping[str, object]]:
    v = raw.get(name)
    if v is None:
        return []
    if not isinstance(v, list):
        raise ConfigError(f"{where}.{name}: must be a list, got {v!r}")
    return [mapping(x, f"{where}.{name}[{i}]") for i, x in enumerate(v)]
