"""Kubernetes quantities: parsing as apimachinery does, and the canonical strings Go clients write."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apis.core.errors import QuantityError
from apis.core.quantity import (
    canonical_quantity,
    format_bytes,
    format_cpu_milli,
    format_milli,
    milli_value,
    parse_quantity,
    quantity_format,
)

INT64_MAX = 2**63 - 1


@pytest.mark.parametrize(("text", "value"), [
    ("100m", Decimal("0.1")),
    ("1", Decimal(1)),
    ("2", Decimal(2)),
    ("1Ki", Decimal(1024)),
    ("1Gi", Decimal(2**30)),
    ("1.5Gi", Decimal(3 * 2**29)),
    ("1e3", Decimal(1000)),
    ("1E3", Decimal(1000)),
    ("1e-3", Decimal("0.001")),
    ("1k", Decimal(1000)),
    ("1M", Decimal(10**6)),
    ("1E", Decimal(10**18)),  # a bare E is the exa suffix, not an exponent
    ("1n", Decimal("1e-9")),
    ("1u", Decimal("1e-6")),
    ("1.1n", Decimal("2e-9")),  # rounded away from zero to whole nanos
    ("-1500m", Decimal("-1.5")),
    ("+1", Decimal(1)),
    (".5", Decimal("0.5")),
    ("5.", Decimal(5)),
    ("0", Decimal(0)),
    (" 1Gi ", Decimal(2**30)),  # JSON decoding trims surrounding spaces
    (2, Decimal(2)),  # YAML/JSON numbers
    (0.5, Decimal("0.5")),
])
def test_parse_quantity(text: str | int | float, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", [
    "", " ", "1ki", "1K", "1KiB", "abc", "1e1.5", "1 Ki", "--1", "1..2", "e3", "Ki", "0x10", "1e999", "1" * 300,
    True, None, [], {}, float("nan"), float("inf"),
])
def test_parse_quantity_rejects_garbage(text: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)  # type: ignore[arg-type]


@pytest.mark.parametrize(("value", "milli"), [("100m", 100), ("1", 1000), (2, 2000), ("0.0001", 1), ("1Ki", 1024000)])
def test_milli_value_rounds_up(value: str | int, milli: int) -> None:
    assert milli_value(value) == milli


@pytest.mark.parametrize("value", [None, True, "abc", [], {"cpu": "1"}])
def test_milli_value_refuses_what_is_not_a_quantity(value: object) -> None:
    """One policy: a missing or malformed quantity raises QuantityError, and the caller decides what it skips."""
    with pytest.raises(QuantityError):
        milli_value(value)


@pytest.mark.parametrize(("text", "fmt"), [
    ("1Gi", "BinarySI"), ("100m", "DecimalSI"), ("1e3", "DecimalExponent"), ("0.5Ki", "BinarySI"),
    ("1", "DecimalSI"),
])
def test_quantity_format(text: str, fmt: str) -> None:
    assert quantity_format(text) == fmt


@pytest.mark.parametrize(("n", "text"), [
    (0, "0"),
    (1, "1"),
    (512, "512"),
    (1000, "1k"),  # below 1024 apimachinery switches BinarySI to DecimalSI
    (1023, "1023"),
    (1024, "1Ki"),
    (1500, "1500"),
    (2000, "2000"),
    (1536 * 1024, "1536Ki"),
    (32 * 2**30, "32Gi"),
    (2**60, "1Ei"),
    (2**70, "1024Ei"),
    (-2048, "-2Ki"),
    (-1000, "-1k"),
])
def test_format_bytes(n: int, text: str) -> None:
    assert format_bytes(n) == text


@pytest.mark.parametrize(("cores", "text"), [
    (1.5, "1500m"),
    (2.0, "2"),
    (0.0, "0"),
    (0.25, "250m"),
    (0.0015, "2m"),
    (0.0025, "3m"),  # half-up, not banker's rounding
    (0.1 * 3, "300m"),
    (1000.0, "1k"),
    (-0.25, "-250m"),
])
def test_format_cpu_milli(cores: float, text: str) -> None:
    assert format_cpu_milli(cores) == text


def test_format_cpu_milli_rejects_non_finite() -> None:
    with pytest.raises(QuantityError):
        format_cpu_milli(float("nan"))


@pytest.mark.parametrize(("milli", "text"), [(1500, "1500m"), (2000, "2"), (10**6, "1k"), (0, "0"), (1, "1m")])
def test_format_milli(milli: int, text: str) -> None:
    assert format_milli(milli) == text


@pytest.mark.parametrize(("text", "canonical"), [
    ("1000M", "1G"),
    ("1024Ki", "1Mi"),
    ("1.5Gi", "1536Mi"),
    ("0.5Ki", "512"),
    ("0.1", "100m"),
    ("100m", "100m"),
    ("1200000", "1200k"),
    ("1e3", "1e3"),
    ("-0", "0"),
    ("1.1n", "2n"),
    (100, "100"),
])
def test_canonical_quantity(text: str | int, canonical: str) -> None:
    assert canonical_quantity(text) == canonical


@given(st.integers(min_value=-INT64_MAX, max_value=INT64_MAX))
def test_format_bytes_round_trips(n: int) -> None:
    assert parse_quantity(format_bytes(n)) == n


@given(st.integers(min_value=-(10**15), max_value=10**15))
def test_format_milli_round_trips(milli: int) -> None:
    assert parse_quantity(format_milli(milli)) * 1000 == milli


@given(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False))
def test_format_cpu_milli_is_within_half_a_millicore(cores: float) -> None:
    assert abs(parse_quantity(format_cpu_milli(cores)) - Decimal(repr(cores))) <= Decimal("0.0005")


_SUFFIXES = ["", "m", "k", "M", "G", "Ki", "Mi", "Gi", "n", "u", "e3", "E-2"]


@given(st.integers(min_value=-(10**12), max_value=10**12), st.integers(min_value=0, max_value=4),
       st.sampled_from(_SUFFIXES))
def test_canonical_quantity_keeps_value_and_is_idempotent(mantissa: int, decimals: int, suffix: str) -> None:
    text = str(Decimal(mantissa).scaleb(-decimals)) + suffix
    canonical = canonical_quantity(text)
    assert parse_quantity(canonical) == parse_quantity(text)
    assert canonical_quantity(canonical) == canonical
