"""apis/core/labelselector: metav1.LabelSelector and labels.Parse, parsed and matched."""

from __future__ import annotations

import pytest

from apis.core.labelselector import SelectorError, parse_label_selector, parse_selector_string


def test_match_labels_and_expressions() -> None:
    sel = parse_label_selector({"matchLabels": {"app": "web"}, "matchExpressions": [
        {"key": "tier", "operator": "In", "values": ["a", "b"]}, {"key": "canary", "operator": "DoesNotExist"},
        {"key": "zone", "operator": "NotIn", "values": ["x"]}, {"key": "team", "operator": "Exists"}]})
    assert sel.matches({"app": "web", "tier": "a", "team": "t"})
    assert sel.matches({"app": "web", "tier": "b", "team": "t", "zone": "y"})
    assert not sel.matches({"app": "web", "tier": "c", "team": "t"})
    assert not sel.matches({"app": "web", "tier": "a", "team": "t", "canary": ""})
    assert not sel.matches({"app": "web", "tier": "a", "team": "t", "zone": "x"})
    assert not sel.matches({"app": "web", "tier": "a"})
    assert parse_label_selector({}).matches({}) and parse_label_selector({}).empty


@pytest.mark.parametrize(("raw", "words"), [
    ({"matchLabels": {"test/a/b/c": "1"}}, "at most one '/'"),
    ({"matchLabels": {"-bad": "1"}}, "invalid label key"),
    ({"matchLabels": {"k": "not a value"}}, "invalid label value"),
    ({"matchExpressions": [{"key": "k", "operator": "Gt", "values": ["1"]}]}, "not a valid label selector operator"),
    ({"matchExpressions": [{"key": "k", "operator": "In"}]}, "can't be empty"),
    ({"matchExpressions": [{"key": "k", "operator": "Exists", "values": ["a"]}]}, "must be empty"),
    ({"matchLabel": {}}, "unknown field"),
    ("app=web", "must be an object"),
])
def test_refused(raw: object, words: str) -> None:
    with pytest.raises(SelectorError, match=words):
        parse_label_selector(raw)


def test_string_form() -> None:
    sel = parse_selector_string("app=web, tier in (a, b),zone!=x,!canary,team")
    assert sel.matches({"app": "web", "tier": "b", "team": "t"})
    assert not sel.matches({"app": "web", "tier": "b", "team": "t", "zone": "x"})
    assert not sel.matches({"app": "web", "tier": "b"})
    assert parse_selector_string("").empty
    assert parse_selector_string("a==b").matches({"a": "b"})
    assert parse_selector_string("a notin (b)").matches({})
    for bad in ("a in b", "a=b,,c", "a/b/c=d", "in (x)"):
        with pytest.raises(SelectorError):
            parse_selector_string(bad)
