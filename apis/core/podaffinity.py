"""A pod's podAffinity / podAntiAffinity terms as kube-scheduler reads them (framework.AffinityTerm).

A term selects pods by labels (nil labelSelector: none) in its namespaces: the listed ones plus those whose labels
namespaceSelector matches (nil: none, `{}`: all); with neither given, the namespace of the pod that states the term.
Namespace labels are the Namespace object's, or — for a namespace koord-sched has not read — the one label the API
server puts on every namespace, kubernetes.io/metadata.name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from apis.core.labelselector import LabelSelector, SelectorError, parse_label_selector
from apis.core.objects import JSON

LABEL_NAMESPACE_NAME = "kubernetes.io/metadata.name"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def namespace_labels(namespace: str, known: Mapping[str, Mapping[str, str]]) -> Mapping[str, str]:
    """The namespace's labels: the Namespace object's when known, with the name label the API server puts on
    every namespace."""
    labels = known.get(namespace)
    return {LABEL_NAMESPACE_NAME: namespace} if not labels else {**labels, LABEL_NAMESPACE_NAME: namespace}


def selector_or_none(raw: object, where: str) -> LabelSelector | None:
    """A LabelSelector field: None where the field is null (kube's labels.Nothing(): it matches no labels)."""
    return None if raw is None else parse_label_selector(raw, where)


@dataclass(frozen=True)
class AffinityTerm:
    selector: LabelSelector | None  # None: matches no pod
    namespaces: frozenset[str]
    namespace_selector: LabelSelector | None  # None: no namespace; empty: every namespace
    topology_key: str

    def in_namespace(self, namespace: str, ns_labels: Mapping[str, str]) -> bool:
        return namespace in self.namespaces or (self.namespace_selector is not None
                                                and self.namespace_selector.matches(ns_labels))

    def matches(self, namespace: str, labels: Mapping[str, str], ns_labels: Mapping[str, str]) -> bool:
        """AffinityTerm.Matches: a pod of that namespace (with those namespace labels) and labels."""
        return self.selector is not None and self.in_namespace(namespace, ns_labels) and self.selector.matches(labels)


@dataclass(frozen=True)
class WeightedTerm:
    weight: int
    term: AffinityTerm


@dataclass(frozen=True)
class PodAffinity:
    required_affinity: tuple[AffinityTerm, ...] = ()
    required_anti: tuple[AffinityTerm, ...] = ()
    preferred_affinity: tuple[WeightedTerm, ...] = ()
    preferred_anti: tuple[WeightedTerm, ...] = ()

    @property
    def preferred(self) -> bool:
        return bool(self.preferred_affinity or self.preferred_anti)

    def __bool__(self) -> bool:
        return bool(self.required_affinity or self.required_anti or self.preferred)


NONE = PodAffinity()


def _term(raw: object, namespace: str, where: str) -> AffinityTerm:
    if not isinstance(raw, dict):
        raise SelectorError(f"{where}: must be an object")
    key = raw.get("topologyKey")
    if not isinstance(key, str) or not key:
        raise SelectorError(f"{where}.topologyKey: can not be empty")
    names = raw.get("namespaces") or []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise SelectorError(f"{where}.namespaces: must be a list of strings")
    raw_ns_selector = raw.get("namespaceSelector")
    if not names and raw_ns_selector is None:
        names = [namespace]
    return AffinityTerm(selector_or_none(raw.get("labelSelector"), f"{where}.labelSelector"), frozenset(names),
                        selector_or_none(raw_ns_selector, f"{where}.namespaceSelector"), key)


def _required(section: JSON, namespace: str, where: str) -> tuple[AffinityTerm, ...]:
    raw = section.get(REQUIRED) or []
    if not isinstance(raw, list):
        raise SelectorError(f"{where}.{REQUIRED}: must be a list")
    return tuple(_term(t, namespace, f"{where}.{REQUIRED}[{i}]") for i, t in enumerate(raw))


def _preferred(section: JSON, namespace: str, where: str) -> tuple[WeightedTerm, ...]:
    raw = section.get(PREFERRED) or []
    if not isinstance(raw, list):
        raise SelectorError(f"{where}.{PREFERRED}: must be a list")
    out = []
    for i, p in enumerate(raw):
        w = f"{where}.{PREFERRED}[{i}]"
        weight = p.get("weight") if isinstance(p, dict) else None
        if not isinstance(weight, int) or isinstance(weight, bool) or not 1 <= weight <= 100:
            raise SelectorError(f"{w}.weight: must be in the range 1-100")
        out.append(WeightedTerm(weight, _term(p.get("podAffinityTerm"), namespace, f"{w}.podAffinityTerm")))
    return tuple(out)


def has_pod_affinity(pod: JSON) -> bool:
    """Whether the pod states any podAffinity or podAntiAffinity (cheap: nothing is decoded)."""
    spec = pod.get("spec")
    affinity = spec.get("affinity") if isinstance(spec, dict) else None
    return isinstance(affinity, dict) and bool(affinity.get("podAffinity") or affinity.get("podAntiAffinity"))


def pod_affinity(pod: JSON) -> PodAffinity:
    """spec.affinity.podAffinity and podAntiAffinity; SelectorError names the field the API server would refuse."""
    if not has_pod_affinity(pod):
        return NONE
    meta = pod.get("metadata")
    namespace = str((meta.get("namespace") if isinstance(meta, dict) else None) or "default")
    affinity = pod["spec"]["affinity"]
    sections: list[JSON] = []
    for name in ("podAffinity", "podAntiAffinity"):
        raw = affinity.get(name) or {}
        if not isinstance(raw, dict):
            raise SelectorError(f"spec.affinity.{name}: must be an object")
        sections.append(raw)
    aff, anti = sections
    where_a, where_n = "spec.affinity.podAffinity", "spec.affinity.podAntiAffinity"
    return PodAffinity(_required(aff, namespace, where_a), _required(anti, namespace, where_n),
                       _preferred(aff, namespace, where_a), _preferred(anti, namespace, where_n))
