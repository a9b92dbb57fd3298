"""metav1.LabelSelector (matchLabels, matchExpressions) and the string form of labels.Parse, parsed once, matched.

A selector that does not convert (unknown operator, values where none are allowed or none where some are needed)
raises SelectorError naming the part; `{}` matches everything. Whether a nil selector matches all or nothing is the
caller's rule, so callers hold `LabelSelector | None`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from apis.core.errors import InvalidInput

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_TERM = re.compile(r"\s*(!?)\s*([A-Za-z0-9][-A-Za-z0-9_./]*)\s*(?:(==|!=|=|\s+in\s+|\s+notin\s+)\s*(.*?))?\s*$")


class SelectorError(InvalidInput):
    """A label selector that metav1.LabelSelectorAsSelector (or labels.Parse) refuses."""


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # one of OPERATORS
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "In":
            return present and labels[self.key] in self.values
        if self.operator == "NotIn":
            return not present or labels[self.key] not in self.values
        if self.operator == "Exists":
            return present
        return not present


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements


def key_problem(key: str) -> str | None:
    """validation.IsQualifiedName: `[prefix/]name`, the prefix a DNS subdomain, the name 63 characters at most."""
    prefix, _, name = key.rpartition("/")
    if "/" in prefix:
        return f"invalid label key {key!r}: a qualified name must have at most one '/'"
    if prefix and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        return f"invalid label key {key!r}: the prefix must be a DNS subdomain"
    if not name or len(name) > 63 or not _NAME.match(name):
        return (f"invalid label key {key!r}: name part must consist of alphanumeric characters, '-', '_' or '.', "
                "and must start and end with an alphanumeric character (at most 63)")
    return None


def value_problem(value: str) -> str | None:
    """validation.IsValidLabelValue: empty, or a name of 63 characters at most."""
    if value and (len(value) > 63 or not _NAME.match(value)):
        return f"invalid label value {value!r}: must be 63 characters or less, alphanumeric, '-', '_' or '.'"
    return None


def _checked(req: Requirement, where: str) -> Requirement:
    why = key_problem(req.key) or next((p for v in sorted(req.values) if (p := value_problem(v))), None)
    if why is not None:
        raise SelectorError(f"{where}: {why}")
    return req


def parse_label_selector(raw: object, where: str = "labelSelector") -> LabelSelector:
    """metav1.LabelSelectorAsSelector of a decoded JSON selector."""
    if not isinstance(raw, Mapping):
        raise SelectorError(f"{where}: must be an object, got {raw!r}")
    for k in raw:
        if k not in ("matchLabels", "matchExpressions"):
            raise SelectorError(f"{where}.{k}: unknown field; accepted: matchLabels, matchExpressions")
    reqs: list[Requirement] = []
    labels = raw.get("matchLabels") or {}
    if not isinstance(labels, Mapping):
        raise SelectorError(f"{where}.matchLabels: must be a map of strings")
    for k, v in labels.items():
        if not isinstance(v, str):
            raise SelectorError(f"{where}.matchLabels.{k}: must be a string, got {v!r}")
        reqs.append(_checked(Requirement(str(k), "In", frozenset([v])), f"{where}.matchLabels"))
    exprs = raw.get("matchExpressions") or []
    if not isinstance(exprs, list):
        raise SelectorError(f"{where}.matchExpressions: must be a list")
    for i, e in enumerate(exprs):
        at = f"{where}.matchExpressions[{i}]"
        if not isinstance(e, Mapping) or not isinstance(e.get("key"), str) or not e.get("key"):
            raise SelectorError(f"{at}.key: a requirement needs a key")
        op, values = e.get("operator"), e.get("values") or []
        if op not in OPERATORS:
            raise SelectorError(f"{at}.operator: {op!r} is not a valid label selector operator")
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise SelectorError(f"{at}.values: must be a list of strings")
        if op in ("In", "NotIn") and not values:
            raise SelectorError(f"{at}.values: for 'in', 'notin' operators, values set can't be empty")
        if op in ("Exists", "DoesNotExist") and values:
            raise SelectorError(f"{at}.values: values set must be empty for exists and does not exist")
        reqs.append(_checked(Requirement(e["key"], str(op), frozenset(values)), at))
    return LabelSelector(tuple(reqs))


def decoded_label_selector(raw: object, where: str = "labelSelector") -> LabelSelector:
    """parse_label_selector of a selector Go decodes without strictness (an annotation's or a ConfigMap's JSON, an
    object the API server pruned): fields other than matchLabels and matchExpressions are dropped, not refused."""
    if isinstance(raw, Mapping):
        raw = {k: raw[k] for k in ("matchLabels", "matchExpressions") if k in raw}
    return parse_label_selector(raw, where)


def selector_or_nothing(raw: object) -> LabelSelector | None:
    """A decoded JSON selector as upstream matches with it (LabelSelectorAsSelector, its error skipping the term):
    None for a nil selector or one that does not convert, which the caller takes to match nothing; `{}` matches
    everything."""
    if raw is None:
        return None
    try:
        return decoded_label_selector(raw)
    except SelectorError:
        return None


def parse_selector_string(text: str, where: str = "selector") -> LabelSelector:
    """labels.Parse: `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`, comma-separated."""
    reqs: list[Requirement] = []
    for part in _split(text):
        if not part.strip():
            if text.strip():
                raise SelectorError(f"{where}: empty requirement in {text!r}")
            continue
        m = _TERM.match(part)
        if m is None:
            raise SelectorError(f"{where}: cannot parse {part.strip()!r}")
        bang, k, op, rest = m.group(1), m.group(2), (m.group(3) or "").strip(), m.group(4)
        if bang:
            if op:
                raise SelectorError(f"{where}: cannot parse {part.strip()!r}")
            reqs.append(Requirement(k, "DoesNotExist"))
        elif not op:
            reqs.append(Requirement(k, "Exists"))
        elif op in ("in", "notin"):
            inner = (rest or "").strip()
            if not (inner.startswith("(") and inner.endswith(")")):
                raise SelectorError(f"{where}: {k} {op} needs a parenthesised set of values")
            values = frozenset(v.strip() for v in inner[1:-1].split(",") if v.strip())
            if not values:
                raise SelectorError(f"{where}: {k} {op} needs at least one value")
            reqs.append(Requirement(k, "In" if op == "in" else "NotIn", values))
        else:
            reqs.append(Requirement(k, "NotIn" if op == "!=" else "In", frozenset([(rest or "").strip()])))
    return LabelSelector(tuple(_checked(r, where) for r in reqs))


def _split(text: str) -> list[str]:
    """Commas outside parentheses separate requirements."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts
