"""A pod's requests and limits by Kubernetes' rules (k8s.io/component-helpers resource.PodRequests, PodLimits).

Amounts are integers in the units kube-scheduler counts: cpu in millicores (Quantity.MilliValue), every other
resource in whole units (Quantity.Value), both rounded up once, after the exact sum. A quantity or resource map that
cannot be read raises QuantityError; whether that skips the pod or refuses it is the caller's decision.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from apis.core.errors import QuantityError
from apis.core.quantity import parse_quantity

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
HUGEPAGES_PREFIX = "hugepages-"
RESTART_ALWAYS = "Always"  # an init container with this restartPolicy is a sidecar (restartable init container)

ResourceList = dict[str, int]  # resource name → amount (cpu in millicores, everything else in whole units)
Rename = Callable[[dict[str, Any]], dict[str, Any]]  # a caller's renaming of one container's resource map

_NANO = 10**9  # quantity.go keeps every value to a whole nano unit, so sums in nano units are exact
_NANO_PER_MILLI = 10**6
_EMPTY: Mapping[str, Any] = {}
_Nanos = dict[str, int]


def pod_requests(pod: Mapping[str, Any], *, non_missing: Mapping[str, int] | None = None,
                 rename: Rename | None = None) -> ResourceList:
    """resource.PodRequests: the regular containers' sum, at least each init container's (with the sidecars
    started before it), sidecars counted with the regular containers, pod-level requests in place of the
    containers' for cpu, memory and hugepages, plus spec.overhead. A container's missing requests are its limits
    (the API server's defaulting); `non_missing` fills what is still missing per container (kube-scheduler's
    100m/200Mi), `rename` rewrites each container's resource names before they count."""
    spec = _spec(pod)
    fill = _fill_nanos(non_missing) if non_missing else None
    total = _aggregate(spec, "requests", fill, rename)
    pod_level = spec.get("resources")
    if pod_level:
        pod_level = _map(pod_level, "spec.resources")
        requests = _quantities(pod_level.get("requests"), "spec.resources.requests", None)
        limits = _quantities(pod_level.get("limits"), "spec.resources.limits", None)
        for name, value in requests.items():
            if _pod_level(name):
                total[name] = value
        if limits:  # the API server's defaulting of pod-level requests (KEP-2837)
            containers = _aggregate(spec, "requests", None, rename) if fill else total
            for name, value in limits.items():
                if _pod_level(name) and name not in requests and (name not in containers or _hugepages(name)):
                    total[name] = value
    overhead = spec.get("overhead")
    if overhead:
        for name, value in _quantities(overhead, "spec.overhead", rename).items():
            total[name] = total.get(name, 0) + value
    return _scaled(total)


def pod_limits(pod: Mapping[str, Any], *, rename: Rename | None = None) -> ResourceList:
    """resource.PodLimits: the containers' limits aggregated as requests are (sidecars and init maxima),
    pod-level limits in their place for cpu, memory and hugepages when pod-level resources are set, and
    spec.overhead added to each limit that is present and not zero."""
    spec = _spec(pod)
    total = _aggregate(spec, "limits", None, rename)
    pod_level = _map(spec.get("resources"), "spec.resources")
    if pod_level:
        requests = _quantities(pod_level.get("requests"), "spec.resources.requests", None)
        limits = _quantities(pod_level.get("limits"), "spec.resources.limits", None)
        if any(_pod_level(name) for name in (*requests, *limits)):
            total.update((name, value) for name, value in limits.items() if _pod_level(name))
    for name, value in _quantities(spec.get("overhead"), "spec.overhead", rename).items():
        if total.get(name):
            total[name] += value
    return _scaled(total)


def containers_key(pod: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """All that pod_requests and pod_limits read of a pod with regular containers only (no init containers,
    pod-level resources or overhead): per container its requests' and limits' items, as a key for remembering
    them per pod shape; None for any other pod (read on its own). The key may hold values that are not strings
    (or not hashable): remember only keys that `strings_only` passes — no other key equals one of them."""
    spec = pod.get("spec")
    if type(spec) is not dict or spec.get("initContainers") or spec.get("resources") or spec.get("overhead"):
        return None
    containers = spec.get("containers")
    if type(containers) is not list:
        return None
    parts: list[object] = []
    for c in containers:
        if type(c) is not dict:
            return None
        res = c.get("resources")
        if not res:
            parts.append(None)
            continue
        if type(res) is not dict:
            return None
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        if type(req) is not dict or type(lim) is not dict:
            return None
        parts.append((tuple(req.items()), tuple(lim.items())))
    return tuple(parts)


def strings_only(key: tuple[Any, ...]) -> bool:
    """Every resource name and quantity in a `containers_key` is a string."""
    return all(part is None or all(type(k) is str and type(v) is str for items in part for k, v in items)
               for part in key)


def resource_value(name: str, quantity: object) -> int:
    """One quantity in the units of a ResourceList (cpu in millicores, the rest in whole units, rounded up)."""
    if type(quantity) is str:
        return _value_cached(name == CPU, quantity)
    return _scale(name, _nanos(quantity))


@functools.lru_cache(maxsize=8192)  # device and node tables repeat the same few amounts
def _value_cached(milli: bool, text: str) -> int:
    return -(-_nanos_cached(text) // (_NANO_PER_MILLI if milli else _NANO))


# ---- aggregation (component-helpers aggregateContainerResourcesByFn) ------------------------------------------
# The happy path runs for every pod of a cluster on each change: exact dict checks first (JSON decodes to dicts),
# and the field path of an error is built only when there is one.


def _aggregate(spec: Mapping[str, Any], part: str, fill: _Nanos | None, rename: Rename | None) -> _Nanos:
    if not spec.get("initContainers"):
        plain = _plain_sum(spec.get("containers"), part, fill, rename)
        if plain is not None:
            return plain
    total: _Nanos = {}
    for i, c in enumerate(_containers(spec, "containers")):
        _add(total, _container(c, part, fill, rename, "containers", i))
    sidecars: _Nanos = {}
    init_peak: _Nanos = {}
    for i, c in enumerate(_containers(spec, "initContainers")):
        own = _container(c, part, fill, rename, "initContainers", i)
        if c.get("restartPolicy") == RESTART_ALWAYS:
            _add(total, own)  # runs beside the regular containers
            _add(sidecars, own)
            use = sidecars  # while it starts, the sidecars before it and itself run
        else:
            use = dict(sidecars)
            _add(use, own)  # runs alone but for the sidecars started before it
        _max(init_peak, use)
    _max(total, init_peak)
    return total


def _plain_sum(containers: object, part: str, fill: _Nanos | None, rename: Rename | None) -> _Nanos | None:
    """The regular containers' sum when every one is plain JSON whose `part` needs no defaulting (requests that
    list every limit), each container's missing names filled from `fill`; None sends the pod down the general
    path, which also words any error."""
    total: _Nanos = {}
    if not containers:
        return total
    if type(containers) is not list:
        return None
    try:
        for c in containers:
            if type(c) is not dict:
                return None
            resources = c.get("resources")
            if not resources:
                if fill:
                    _add(total, fill)
                continue
            if type(resources) is not dict:
                return None
            listed = resources.get(part)
            if part == "requests":
                limits = resources.get("limits")
                if limits and (type(limits) is not dict or not limits.keys() <= (listed or _EMPTY).keys()):
                    return None
            if not listed:
                if fill:
                    _add(total, fill)
                continue
            if type(listed) is not dict:
                return None
            if rename is not None:
                listed = rename(listed)
            for name, value in listed.items():
                if type(value) is not str or type(name) is not str:
                    return None
                n = _nanos_cached(value)
                if n < 0:
                    return None
                total[name] = total.get(name, 0) + n
            if fill:
                for name, value in fill.items():
                    if name not in listed:
                        total[name] = total.get(name, 0) + value
    except QuantityError:
        return None
    return total


def _container(c: Mapping[str, Any], part: str, fill: _Nanos | None, rename: Rename | None, field: str,
               index: int) -> _Nanos:
    resources = c.get("resources")
    if not resources:
        return dict(fill) if fill else {}
    try:
        if type(resources) is not dict:
            resources = _map(resources, "resources")
        listed = resources.get(part)
        if listed is None:
            listed = _EMPTY
        elif type(listed) is not dict:
            listed = _map(listed, "resources." + part)
        out = _quantities(listed, "resources." + part, rename)
        if part == "requests":  # defaulting: a limit without a request is also the request
            limits = resources.get("limits")
            if limits and type(limits) is not dict:
                limits = _map(limits, "resources.limits")
            if limits and not limits.keys() <= listed.keys():
                defaulted = {name: value for name, value in limits.items() if name not in listed}
                for name, value in _quantities(defaulted, "resources.limits", rename).items():
                    out.setdefault(name, value)
    except QuantityError as e:
        raise QuantityError(f"spec.{field}[{c.get('name', index)!r}].{e}") from None
    if fill:
        for name, value in fill.items():
            out.setdefault(name, value)
    return out


def _quantities(obj: object, where: str, rename: Rename | None) -> _Nanos:
    if not obj:
        return {}
    listed = _map(obj, where)
    if rename is not None:
        listed = rename(listed if type(listed) is dict else dict(listed))
    out: _Nanos = {}
    for name, value in listed.items():
        try:
            n = _nanos_cached(value) if type(value) is str else _nanos(value)
        except QuantityError as e:
            raise QuantityError(f"{where}.{name}: {e}") from None
        if n < 0:  # the API server refuses negative requests and limits
            raise QuantityError(f"{where}.{name}: negative quantity {value!r}")
        out[name if type(name) is str else str(name)] = n
    return out


def _nanos(value: object) -> int:
    if type(value) is str or (isinstance(value, int | float) and not isinstance(value, bool)):
        return _nanos_cached(value)  # type: ignore[arg-type]
    raise QuantityError(f"{value!r} is not a Kubernetes quantity")


@functools.lru_cache(maxsize=8192)  # a cluster repeats the same few quantities everywhere; "1" != 1 as keys
def _nanos_cached(value: str | int | float) -> int:
    sign, digits, exponent = parse_quantity(value).as_tuple()
    assert isinstance(exponent, int)  # finite, and never below -9 (quantity.go rounds to a whole nano unit)
    n: int = int("".join(map(str, digits))) * 10 ** (exponent + 9)
    return -n if sign else n


def _add(total: _Nanos, more: Mapping[str, int]) -> None:
    for name, value in more.items():
        total[name] = total.get(name, 0) + value


def _max(total: _Nanos, other: Mapping[str, int]) -> None:
    for name, value in other.items():
        if value > total.get(name, -1):
            total[name] = value


def _scale(name: str, nanos: int) -> int:
    return -(-nanos // _NANO_PER_MILLI) if name == CPU else -(-nanos // _NANO)


def _scaled(total: _Nanos) -> ResourceList:
    return {name: -(-value // (_NANO_PER_MILLI if name == CPU else _NANO)) for name, value in total.items()}


def _to_nanos(amounts: Mapping[str, int]) -> _Nanos:
    return {name: value * (_NANO_PER_MILLI if name == CPU else _NANO) for name, value in amounts.items()}


_fills: dict[tuple[tuple[str, int], ...], _Nanos] = {}  # a caller's non_missing table → it in nano units


def _fill_nanos(amounts: Mapping[str, int]) -> _Nanos:
    """_to_nanos of a caller's non_missing table, kept: callers pass the same few tables for every pod."""
    key = tuple(amounts.items())
    nanos = _fills.get(key)
    if nanos is None:
        if len(_fills) >= 16:
            _fills.clear()
        nanos = _fills[key] = _to_nanos(amounts)
    return nanos


def _pod_level(name: str) -> bool:
    """IsSupportedPodLevelResource: cpu, memory and hugepages-<size>."""
    return name in (CPU, MEMORY) or name.startswith(HUGEPAGES_PREFIX)


def _hugepages(name: str) -> bool:
    return name.startswith(HUGEPAGES_PREFIX)


def _spec(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return _map(pod.get("spec"), "spec")


def _map(obj: object, where: str) -> Mapping[str, Any]:
    if type(obj) is dict:
        return obj
    if obj is None:
        return _EMPTY
    if not isinstance(obj, Mapping):
        raise QuantityError(f"{where} is not an object")
    return obj


def _containers(spec: Mapping[str, Any], field: str) -> list[Mapping[str, Any]]:
    items = spec.get(field)
    if not items:
        return []
    if type(items) is not list:
        raise QuantityError(f"spec.{field} is not a list of objects")
    for c in items:
        if type(c) is not dict and not isinstance(c, Mapping):
            raise QuantityError(f"spec.{field} is not a list of objects")
    return items
