"""Go duration strings as metav1.Duration fields carry them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apis.core import godur
from apis.core.errors import InvalidInput


@pytest.mark.parametrize(("text", "seconds"), [("5m0s", 300), ("1h30m", 5400), ("1.5m", 90), ("300ms", 0.3),
                                              ("0", 0), ("-2s", -2), ("1h0m0s", 3600), ("2us", 2e-6)])
def test_parse(text: str, seconds: float) -> None:
    assert godur.parse(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "abc", "5", "5 m", "m5", "1d"])
def test_parse_rejects_what_go_rejects(text: str) -> None:
    with pytest.raises(InvalidInput):
        godur.parse(text)


@pytest.mark.parametrize(("seconds", "text"), [(300, "5m0s"), (600, "10m0s"), (1800, "30m0s"), (3600, "1h0m0s"),
                                              (90, "1m30s"), (30, "30s"), (0, "0s")])
def test_format_like_go(seconds: int, text: str) -> None:
    assert godur.format_seconds(seconds) == text


@given(st.integers(min_value=0, max_value=10**7))
def test_round_trip(seconds: int) -> None:
    assert godur.parse(godur.format_seconds(seconds)) == seconds
