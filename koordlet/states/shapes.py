"""The shape check every object the agent receives passes before it is adopted (Node, NodeMetric, Pod; a NodeSLO's
is its validating decoder, apis.slo.decode).

A malformed object is skipped where it arrives (the previous good state stays): logged once per (object,
resourceVersion) and counted in Health (`koordlet_agent_skipped_items{kind, reason="malformed"}`). What a
reader can still use in part (one bad allocatable entry, one bad container ID) is reported where it is read.
"""

from __future__ import annotations

from collections.abc import Callable

from apis.core.errors import InvalidInput
from apis.core.objects import JSON
from apis.core.shape import list_field, object_field, object_ident, shape_problem
from koordlet.health import Health

REASON = "malformed"


def _metadata_maps(obj: JSON) -> None:
    meta = object_field(obj.get("metadata"), "metadata")
    object_field(meta.get("labels"), "metadata.labels")
    object_field(meta.get("annotations"), "metadata.annotations")


def _node(obj: JSON) -> None:
    """What the agent reads of its Node: labels, annotations, allocatable/capacity, addresses, kubelet endpoint."""
    _metadata_maps(obj)
    status = object_field(obj.get("status"), "status")
    object_field(status.get("allocatable"), "status.allocatable")
    object_field(status.get("capacity"), "status.capacity")
    list_field(status.get("addresses"), "status.addresses")
    endpoints = object_field(status.get("daemonEndpoints"), "status.daemonEndpoints")
    object_field(endpoints.get("kubeletEndpoint"), "status.daemonEndpoints.kubeletEndpoint")


def nodemetric_spec_problem(spec: object) -> str | None:
    """Why a NodeMetric spec cannot be merged over the defaults (apis: its policy objects are objects), or None."""
    try:
        policy = object_field(object_field(spec, "spec").get("metricCollectPolicy"), "spec.metricCollectPolicy")
        aggregate = object_field(policy.get("nodeAggregatePolicy"), "spec.metricCollectPolicy.nodeAggregatePolicy")
    except InvalidInput as e:
        return str(e)
    if not isinstance(aggregate.get("durations"), list | None):
        return "spec.metricCollectPolicy.nodeAggregatePolicy.durations is not a list"
    return None


def _nodemetric(obj: JSON) -> None:
    why = nodemetric_spec_problem(obj.get("spec"))
    if why is not None:
        raise InvalidInput(why)


def _pod(obj: JSON) -> None:
    """What every pod reader relies on: uid, label/annotation maps, containers and their statuses as objects."""
    _metadata_maps(obj)
    if not isinstance(obj["metadata"].get("uid"), str) or not obj["metadata"]["uid"]:
        raise InvalidInput("metadata.uid is not a non-empty string")
    spec = object_field(obj.get("spec"), "spec")
    for field in ("containers", "initContainers"):
        for i, container in enumerate(list_field(spec.get(field), f"spec.{field}")):
            object_field(container.get("resources"), f"spec.{field}[{i}].resources")
    status = object_field(obj.get("status"), "status")
    for field in ("containerStatuses", "initContainerStatuses"):
        list_field(status.get(field), f"status.{field}")


_CHECKS: dict[str, Callable[[JSON], None]] = {"node": _node, "nodemetric": _nodemetric, "pod": _pod}


def problem(kind: str, obj: object) -> str | None:
    """Why `obj` cannot be adopted as a `kind` (node, nodemetric, pod) at all, or None."""
    why = shape_problem(obj)
    check = _CHECKS.get(kind)
    if why is not None or check is None:
        return why
    assert isinstance(obj, dict)
    try:
        check(obj)
    except InvalidInput as e:
        return str(e)
    return None




class ShapeGate:
    """Admits the objects that pass `problem`; each malformed one is counted each time it is met (an item skipped)
    and logged once per (kind, object, resourceVersion), so a resync of the same bad version logs nothing new."""

    def __init__(self, health: Health) -> None:
        self.health = health

    def admit(self, kind: str, obj: object) -> bool:
        why = problem(kind, obj)
        if why is None:
            return True
        self.report(kind, obj, why)
        return False

    def report(self, kind: str, obj: object, why: str) -> bool:
        """Count `obj` as a malformed `kind` skipped; True when this version is new (it was logged now)."""
        name, rv = object_ident(obj)
        return self.health.skip(kind, REASON, f"{name} (resourceVersion {rv})" if rv else name, why)
