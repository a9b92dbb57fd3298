"""A pod's node selector and node affinity as kube-scheduler matches them (component-helpers nodeaffinity).

nodeSelector: every key=value must be a node label. Required affinity: its nodeSelectorTerms are ORed, the
requirements within a term ANDed; a term with no requirement matches nothing; operators In, NotIn, Exists,
DoesNotExist, Gt, Lt on labels (Gt/Lt compare the label as an integer: a label that is not one fails), and
matchFields on `metadata.name` (In, NotIn). Preferred terms add their weight on the nodes their preference matches.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from apis.core.objects import JSON

_DECIMAL = re.compile(r"[+-]?[0-9]+")
_LABEL_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


class AffinityError(ValueError):
    """A requirement kube's parser refuses (unknown operator, wrong value count): the pod matches no node."""


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...]

    @classmethod
    def of(cls, raw: object, fields: bool = False) -> Requirement:
        if not isinstance(raw, dict) or not isinstance(raw.get("key"), str):
            raise AffinityError("a requirement without a key")
        op, values = raw.get("operator"), raw.get("values") or []
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise AffinityError(f"{raw['key']}: values must be strings")
        allowed = ("In", "NotIn") if fields else _LABEL_OPERATORS
        if op not in allowed:
            raise AffinityError(f"{raw['key']}: {op!r} is not a valid operator")
        if op in ("In", "NotIn") and not values:
            raise AffinityError(f"{raw['key']}: {op} needs values")
        if op in ("Exists", "DoesNotExist") and values:
            raise AffinityError(f"{raw['key']}: {op} takes no values")
        if op in ("Gt", "Lt") and (len(values) != 1 or _integer(values[0]) is None):
            raise AffinityError(f"{raw['key']}: {op} needs one integer value")
        if fields and raw["key"] != "metadata.name":
            raise AffinityError(f"{raw['key']}: not a supported field selector")
        return cls(raw["key"], str(op), tuple(values))

    def matches(self, labels: Mapping[str, str]) -> bool:
        op, value = self.operator, labels.get(self.key)
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        if op == "DoesNotExist":
            return value is None
        have = _integer(value) if value is not None else None
        if have is None:
            return False
        want = int(self.values[0])
        return have > want if op == "Gt" else have < want


def _integer(text: str) -> int | None:
    """Go's strconv.ParseInt(text, 10, 64): a sign and decimal digits only (Python's int also takes `1_0`, ` 1`)."""
    if _DECIMAL.fullmatch(text) is None:
        return None
    value = int(text)
    return value if -(1 << 63) <= value < (1 << 63) else None


@dataclass(frozen=True)
class Term:
    """One nodeSelectorTerm (or a preference): labels and fields ANDed; empty matches nothing."""

    labels: tuple[Requirement, ...]
    fields: tuple[Requirement, ...]

    @classmethod
    def of(cls, raw: object) -> Term:
        if not isinstance(raw, dict):
            raise AffinityError("a node selector term must be an object")
        exprs, fields = raw.get("matchExpressions") or [], raw.get("matchFields") or []
        if not isinstance(exprs, list) or not isinstance(fields, list):
            raise AffinityError("matchExpressions and matchFields are lists")
        return cls(tuple(Requirement.of(e) for e in exprs), tuple(Requirement.of(f, fields=True) for f in fields))

    def matches(self, labels: Mapping[str, str], name: str) -> bool:
        if not self.labels and not self.fields:
            return False
        return all(r.matches(labels) for r in self.labels) and all(
            r.matches({"metadata.name": name}) for r in self.fields)


@dataclass(frozen=True)
class NodeSelector:
    """Required node affinity: terms ORed (RequiredNodeAffinity also carries the pod's nodeSelector)."""

    terms: tuple[Term, ...]

    @classmethod
    def of(cls, raw: object) -> NodeSelector:
        terms = raw.get("nodeSelectorTerms") if isinstance(raw, dict) else None
        if not isinstance(terms, list):
            raise AffinityError("nodeSelectorTerms must be a list")
        return cls(tuple(Term.of(t) for t in terms))

    def matches(self, labels: Mapping[str, str], name: str) -> bool:
        return any(t.matches(labels, name) for t in self.terms)


@dataclass(frozen=True)
class Preferred:
    weight: int
    term: Term


def preferred_terms(raw: object) -> tuple[Preferred, ...]:
    """preferredDuringSchedulingIgnoredDuringExecution; a term of weight 0 counts for nothing and is dropped."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise AffinityError("preferredDuringSchedulingIgnoredDuringExecution must be a list")
    out = []
    for p in raw:
        if not isinstance(p, dict) or not isinstance(p.get("weight"), int) or isinstance(p.get("weight"), bool):
            raise AffinityError("a preferred term needs an integer weight")
        if p["weight"]:
            out.append(Preferred(p["weight"], Term.of(p.get("preference") or {})))
    return tuple(out)


@dataclass(frozen=True)
class PodNodeAffinity:
    """What a pod asks of its node's labels and name."""

    node_selector: tuple[tuple[str, str], ...] = ()
    required: NodeSelector | None = None
    preferred: tuple[Preferred, ...] = ()

    @property
    def filters(self) -> bool:
        return bool(self.node_selector) or self.required is not None

    def required_match(self, labels: Mapping[str, str], name: str) -> bool:
        if any(labels.get(k) != v for k, v in self.node_selector):
            return False
        return self.required is None or self.required.matches(labels, name)

    def preferred_score(self, labels: Mapping[str, str], name: str) -> int:
        return sum(p.weight for p in self.preferred if p.term.matches(labels, name))


def pod_node_affinity(pod: JSON) -> PodNodeAffinity:
    """spec.nodeSelector and spec.affinity.nodeAffinity; raises AffinityError on what the API server refuses."""
    raw_spec = pod.get("spec")
    spec: JSON = raw_spec if isinstance(raw_spec, dict) else {}
    selector = spec.get("nodeSelector") or {}
    if not isinstance(selector, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in selector.items()):
        raise AffinityError("spec.nodeSelector must map strings to strings")
    affinity = spec.get("affinity") or {}
    node = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    node = node or {}
    if not isinstance(node, dict):
        raise AffinityError("spec.affinity.nodeAffinity must be an object")
    raw_required = node.get("requiredDuringSchedulingIgnoredDuringExecution")
    required = NodeSelector.of(raw_required) if raw_required is not None else None
    return PodNodeAffinity(tuple(sorted(selector.items())), required,
                           preferred_terms(node.get("preferredDuringSchedulingIgnoredDuringExecution")))
