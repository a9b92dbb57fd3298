"""A pod's topologySpreadConstraints as the API server validates them and kube-scheduler v1.28 reads them.

Defaults as kube's filterTopologySpreadConstraints: minDomains 1, nodeAffinityPolicy Honor, nodeTaintsPolicy Ignore;
matchLabelKeys adds key=value (the pod's own label values) to the labelSelector.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from apis.core.labelselector import LabelSelector, Requirement, SelectorError
from apis.core.objects import JSON
from apis.core.podaffinity import selector_or_none

DO_NOT_SCHEDULE, SCHEDULE_ANYWAY = "DoNotSchedule", "ScheduleAnyway"
HONOR, IGNORE = "Honor", "Ignore"
LABEL_HOSTNAME = "kubernetes.io/hostname"


@dataclass(frozen=True)
class SpreadConstraint:
    max_skew: int
    topology_key: str
    when_unsatisfiable: str
    selector: LabelSelector | None  # None: matches no pod
    min_domains: int = 1
    node_affinity_policy: str = HONOR
    node_taints_policy: str = IGNORE


def with_labels(selector: LabelSelector | None, extra: Mapping[str, str]) -> LabelSelector | None:
    """key=value requirements added to the selector (kube's mergeLabelSetWithSelector; a nil selector stays one)."""
    if selector is None or not extra:
        return selector
    added = tuple(Requirement(k, "In", frozenset((v,))) for k, v in sorted(extra.items()))
    return LabelSelector(tuple(dict.fromkeys((*added, *selector.requirements))))


def matches(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    return selector is not None and selector.matches(labels)


def _positive(raw: Mapping[str, object], name: str, where: str, default: int | None = None) -> int:
    value = raw.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise SelectorError(f"{where}.{name}: must be greater than zero")
    return value


def _policy(raw: Mapping[str, object], name: str, where: str, default: str) -> str:
    value = raw.get(name)
    if value is None:
        return default
    if value not in (HONOR, IGNORE):
        raise SelectorError(f"{where}.{name}: {value!r} is not one of Honor, Ignore")
    return str(value)


def spread_constraint(raw: object, labels: Mapping[str, object], where: str) -> SpreadConstraint:
    """One constraint (`labels`: the pod's, for matchLabelKeys)."""
    if not isinstance(raw, dict):
        raise SelectorError(f"{where}: must be an object")
    key = raw.get("topologyKey")
    if not isinstance(key, str) or not key:
        raise SelectorError(f"{where}.topologyKey: can not be empty")
    when = raw.get("whenUnsatisfiable")
    if when not in (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY):
        raise SelectorError(f"{where}.whenUnsatisfiable: {when!r} is not one of DoNotSchedule, ScheduleAnyway")
    min_domains = 1
    if raw.get("minDomains") is not None:
        min_domains = _positive(raw, "minDomains", where)
        if when != DO_NOT_SCHEDULE:
            raise SelectorError(f"{where}.minDomains: can only use minDomains if whenUnsatisfiable=DoNotSchedule")
    selector = selector_or_none(raw.get("labelSelector"), f"{where}.labelSelector")
    keys = raw.get("matchLabelKeys") or []
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise SelectorError(f"{where}.matchLabelKeys: must be a list of strings")
    own = {k: str(labels[k]) for k in keys if isinstance(labels.get(k), str)}
    return SpreadConstraint(_positive(raw, "maxSkew", where), key, str(when), with_labels(selector, own),
                            min_domains, _policy(raw, "nodeAffinityPolicy", where, HONOR),
                            _policy(raw, "nodeTaintsPolicy", where, IGNORE))


def spread_constraints(pod: JSON) -> tuple[SpreadConstraint, ...]:
    """spec.topologySpreadConstraints, in order; SelectorError names the field the API server would refuse."""
    spec = pod.get("spec")
    raw = spec.get("topologySpreadConstraints") if isinstance(spec, dict) else None
    if not raw:
        return ()
    if not isinstance(raw, list):
        raise SelectorError("spec.topologySpreadConstraints: must be a list")
    meta = pod.get("metadata")
    labels = meta.get("labels") if isinstance(meta, dict) else None
    own: Mapping[str, object] = labels if isinstance(labels, dict) else {}
    return tuple(spread_constraint(c, own, f"spec.topologySpreadConstraints[{i}]") for i, c in enumerate(raw))
