"""apis/core/labelselector's forms for callers that only match: a nil selector and one that does not convert
select nothing, `{}` everything, and fields Go's lenient decoding drops are dropped (colocation and amplification
nodeConfigs, ElasticQuotaProfile, Reservation owners, DeviceShare hints, PodDisruptionBudgets use them)."""

from __future__ import annotations

import pytest

from apis.core.labelselector import SelectorError, decoded_label_selector, selector_or_nothing

WEB = {"app": "web", "zone": "a"}


def test_nil_selects_nothing_and_empty_everything() -> None:
    assert selector_or_nothing(None) is None
    empty = selector_or_nothing({})
    assert empty is not None and empty.matches({}) and empty.matches(WEB)


@pytest.mark.parametrize("raw", [
    {"matchLabels": {"app": "web"}},
    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]},
    {"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["b"]}, {"key": "app", "operator": "Exists"},
                          {"key": "canary", "operator": "DoesNotExist"}]},
    {"matchLabels": {"app": "web"}, "someFutureField": True},  # dropped as Go's json.Unmarshal drops it
])
def test_valid_selectors_match_as_kubernetes(raw: object) -> None:
    sel = selector_or_nothing(raw)
    assert sel is not None and sel.matches(WEB)
    assert not sel.matches({"app": "db", "zone": "c", "canary": "1"})


@pytest.mark.parametrize("raw", [
    "app=web",  # not an object
    {"matchExpressions": [{"key": "zone", "operator": "Bogus", "values": ["a"]}]},
    {"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": []}]},  # NotIn needs values
    {"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["web"]}]},  # Exists takes none
    {"matchExpressions": ["zone"]},
    {"matchLabels": {"bad key!": "web"}},
    {"matchLabels": {"app": 1}},
])
def test_a_selector_that_does_not_convert_selects_nothing(raw: object) -> None:
    assert selector_or_nothing(raw) is None
    with pytest.raises(SelectorError):
        decoded_label_selector(raw)


def test_decoded_selector_names_the_field() -> None:
    with pytest.raises(SelectorError, match=r"^gpu\.selector\.matchExpressions\[0\]\.operator: "):
        decoded_label_selector({"matchExpressions": [{"key": "k", "operator": "Near"}]}, "gpu.selector")
