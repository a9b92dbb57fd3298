"""One malformed API object isolated: reported once per object version (a log line and a count), never raised.

`problem(kind, obj)` is the gate every list and watch event passes (scheduler.cache): a shape no code can read, or
a field of that kind the scheduler reads that does not parse. What a plugin can still use in part (a node's one bad
allocatable entry, a bound pod's unreadable requests, a Device's one bad minor, a Reservation marked Failed) is
kept and reported where it is read."""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import Any

from apis.core.errors import InvalidInput
from apis.core.objects import JSON
from apis.core.resources import resource_value
from apis.core.shape import list_field, object_field, object_ident, shape_problem

log = logging.getLogger("scheduler.malformed")

# kind → malformed object versions met by this process; exported as scheduler_malformed_objects_total{kind}.
skipped: Counter[str] = Counter()
_told: OrderedDict[tuple[str, str, str], None] = OrderedDict()
_TOLD_MAX = 4096  # object versions remembered; an older one reported again after that is harmless



def report(kind: str, obj: object, reason: str, what: str = "skipped") -> None:
    """Log `kind obj: what: reason` once per (object, resourceVersion) and count it."""
    name, rv = object_ident(obj, "?")
    told = (kind, name, rv)
    if told in _told:
        _told.move_to_end(told)
        return
    _told[told] = None
    if len(_told) > _TOLD_MAX:
        _told.popitem(last=False)
    skipped[kind] += 1
    log.warning("malformed %s %s%s: %s: %s", kind, name, f" (resourceVersion {rv})" if rv else "", what, reason)


def _quantities(value: object, where: str) -> None:
    for name, quantity in object_field(value, where).items():
        resource_value(str(name), quantity)


def _node(obj: JSON) -> None:
    status = object_field(obj.get("status"), "status")
    object_field(status.get("allocatable"), "status.allocatable")
    object_field(status.get("capacity"), "status.capacity")


def _quota(obj: JSON) -> None:
    spec = object_field(obj.get("spec"), "spec")
    for field in ("min", "max"):
        _quantities(spec.get(field), f"spec.{field}")


def _device(obj: JSON) -> None:
    list_field(object_field(obj.get("spec"), "spec").get("devices"), "spec.devices")


def _usage(value: object, where: str) -> None:
    """Every `resources` list under a NodeMetric's status (node, pods, aggregated usages)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k == "resources":
                _quantities(v, f"{where}.resources")
            else:
                _usage(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _usage(v, f"{where}[{i}]")


def _nodemetric(obj: JSON) -> None:
    _usage(object_field(obj.get("status"), "status"), "status")


_CHECKS: dict[str, Callable[[JSON], None]] = {
    "Node": _node, "ElasticQuota": _quota, "Device": _device, "NodeMetric": _nodemetric,
}


def problem(kind: str, obj: Any) -> str | None:
    """Why `obj` cannot be used as a `kind` at all (shape_problem, then that kind's fields), or None."""
    why = shape_problem(obj)
    check = _CHECKS.get(kind)
    if why is not None or check is None:
        return why
    try:
        check(obj)
    except InvalidInput as e:
        return str(e)
    return None
