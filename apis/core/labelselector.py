"""metav1.LabelSelector as the API server validates it and LabelSelectorAsSelector matches it.

A nil selector matches nothing, an empty one (`{}`) everything. matchLabels are key=value requirements,
matchExpressions In/NotIn (values required), Exists/DoesNotExist (no values); all ANDed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from apis.core.errors import InvalidInput

_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


class SelectorError(InvalidInput):
    """A label selector the API server refuses (unknown operator, wrong values); the message names the field."""


@dataclass(frozen=True)
class LabelRequirement:
    key: str
    operator: str
    values: frozenset[str]

    def matches(self, labels: Mapping[str, object]) -> bool:
        op, value = self.operator, labels.get(self.key)
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        return value is None  # DoesNotExist


@dataclass(frozen=True)
class LabelSelector:
    """`nothing`: a nil selector (labels.Nothing); otherwise its requirements ANDed (none: everything)."""

    requirements: tuple[LabelRequirement, ...] = ()
    nothing: bool = False

    @property
    def everything(self) -> bool:
        """labels.Selector.Empty(): no requirement at all (a nil selector is not empty: it matches nothing)."""
        return not self.nothing and not self.requirements

    def matches(self, labels: Mapping[str, object]) -> bool:
        return not self.nothing and all(r.matches(labels) for r in self.requirements)

    def with_labels(self, extra: Mapping[str, str]) -> LabelSelector:
        """The selector with key=value requirements added (kube's mergeLabelSetWithSelector: Nothing stays Nothing)."""
        if self.nothing or not extra:
            return self
        added = tuple(LabelRequirement(k, "In", frozenset((v,))) for k, v in sorted(extra.items()))
        return LabelSelector(tuple(dict.fromkeys((*added, *self.requirements))))


NOTHING = LabelSelector(nothing=True)
EVERYTHING = LabelSelector()


def label_selector(raw: object, where: str) -> LabelSelector:
    """Decode a LabelSelector found at `where` (None: NOTHING); SelectorError names the field that is wrong."""
    if raw is None:
        return NOTHING
    if not isinstance(raw, dict):
        raise SelectorError(f"{where}: must be an object")
    reqs: list[LabelRequirement] = []
    labels = raw.get("matchLabels") or {}
    if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise SelectorError(f"{where}.matchLabels: must map strings to strings")
    reqs += [LabelRequirement(k, "In", frozenset((v,))) for k, v in sorted(labels.items())]
    exprs = raw.get("matchExpressions") or []
    if not isinstance(exprs, list):
        raise SelectorError(f"{where}.matchExpressions: must be a list")
    for i, e in enumerate(exprs):
        w = f"{where}.matchExpressions[{i}]"
        if not isinstance(e, dict) or not isinstance(e.get("key"), str) or not e["key"]:
            raise SelectorError(f"{w}.key: required")
        op, values = e.get("operator"), e.get("values") or []
        if op not in _OPERATORS:
            raise SelectorError(f"{w}.operator: {op!r} is not a valid selector operator")
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise SelectorError(f"{w}.values: must be a list of strings")
        if op in ("In", "NotIn") and not values:
            raise SelectorError(f"{w}.values: must be specified when `operator` is 'In' or 'NotIn'")
        if op in ("Exists", "DoesNotExist") and values:
            raise SelectorError(f"{w}.values: may not be specified when `operator` is 'Exists' or 'DoesNotExist'")
        reqs.append(LabelRequirement(e["key"], str(op), frozenset(values)))
    return LabelSelector(tuple(dict.fromkeys(reqs)))
