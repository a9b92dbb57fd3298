"""Node taints and pod tolerations as the API server and kube-scheduler read them (core/v1 helpers' ToleratesTaint)."""

from __future__ import annotations

from apis.core.objects import JSON

NO_SCHEDULE, PREFER_NO_SCHEDULE, NO_EXECUTE = "NoSchedule", "PreferNoSchedule", "NoExecute"
# the taint a cordoned node (spec.unschedulable) stands for; NodeUnschedulable lets a pod tolerating it through
TAINT_NODE_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"


def node_taints(node: JSON) -> list[JSON]:
    """spec.taints, the well-formed entries only (an object with a string key)."""
    spec = node.get("spec")
    taints = spec.get("taints") if isinstance(spec, dict) else None
    return [t for t in taints if isinstance(t, dict) and isinstance(t.get("key"), str)] if isinstance(
        taints, list) else []


def node_unschedulable(node: JSON) -> bool:
    spec = node.get("spec")
    return isinstance(spec, dict) and spec.get("unschedulable") is True


def pod_tolerations(pod: JSON) -> list[JSON]:
    spec = pod.get("spec")
    tolerations = spec.get("tolerations") if isinstance(spec, dict) else None
    return [t for t in tolerations if isinstance(t, dict)] if isinstance(tolerations, list) else []


def tolerates(toleration: JSON, taint: JSON) -> bool:
    """ToleratesTaint: the effect (empty: all), the key (empty with Exists: all) and, for Equal (the default
    operator), the value must match."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


def tolerated(tolerations: list[JSON], taint: JSON) -> bool:
    return any(tolerates(t, taint) for t in tolerations)


def first_untolerated(taints: list[JSON], tolerations: list[JSON], effects: tuple[str, ...]) -> JSON | None:
    """The first taint with one of `effects` no toleration tolerates (FindMatchingUntoleratedTaint), or None."""
    for taint in taints:
        if taint.get("effect") in effects and not tolerated(tolerations, taint):
            return taint
    return None
