"""Kubernetes resource quantities ("100m", "1Gi", "1e3"): parsing, and the canonical strings Go clients write."""

from __future__ import annotations

import functools
import math
import re
from decimal import ROUND_HALF_UP, ROUND_UP, Context, Decimal, InvalidOperation, localcontext

from apis.core.errors import QuantityError

# Grammar of k8s.io/apimachinery/pkg/api/resource/quantity.go:
#   <signedNumber><suffix>, suffix = binarySI | decimalSI | decimalExponent.
_NUMBER = re.compile(r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(.*)", re.DOTALL)
_EXPONENT = re.compile(r"[eE]([+-]?[0-9]+)")
_BINARY_SUFFIXES = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}  # powers of 1024
_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_BY_EXPONENT = {exp: suffix for suffix, exp in _DECIMAL_SUFFIXES.items()}
_BINARY_BY_POWER = {power: suffix for suffix, power in _BINARY_SUFFIXES.items()}
_NANO = Decimal("1e-9")
_MAX_DIGITS = 100  # longest number and largest power of ten accepted: far beyond any real quantity
_CONTEXT = Context(prec=200)

BINARY_SI = "BinarySI"
DECIMAL_SI = "DecimalSI"
DECIMAL_EXPONENT = "DecimalExponent"


def parse_quantity(value: str | int | float) -> Decimal:
    """The exact value of a quantity; raises QuantityError when it is not one."""
    return _parse(value)[0]


def parse_measured(value: str | int | float) -> Decimal:
    """parse_quantity for a value measured now (a usage the agent reported): not kept in the cache, whose few
    repeated quantities (requests, limits) such values, rarely the same twice, would only push out."""
    return _parse_cached.__wrapped__(type(value).__name__, value)[0]


def quantity_format(value: str | int | float) -> str:
    """Which serialisation family a quantity was written in (BinarySI, DecimalSI or DecimalExponent)."""
    return _parse(value)[1]


def canonical_quantity(value: str | int | float) -> str:
    """The string a Go client would write back for this quantity (e.g. "1000M" -> "1G", "1024Ki" -> "1Mi")."""
    amount, fmt = _parse(value)
    if fmt == BINARY_SI:
        return _canonical_binary(amount)
    return _canonical_decimal(amount, exponent_form=fmt == DECIMAL_EXPONENT)


def milli_value(value: object) -> int:
    """Quantity.MilliValue (rounded up) of a field read from a manifest; QuantityError when absent or not a
    quantity (the caller decides whether that skips the object or refuses it)."""
    if not isinstance(value, str | int | float):
        raise QuantityError(f"{value!r} is not a Kubernetes quantity")
    return math.ceil(parse_quantity(value) * 1000)


def format_milli(milli: int) -> str:
    """Canonical DecimalSI form of a milli-value, as resource.NewMilliQuantity(milli, DecimalSI) prints it.

    1500 -> "1500m", 2000 -> "2" (Kubernetes drops the suffix when the value is whole), 0 -> "0".
    """
    return _canonical_decimal(Decimal(int(milli)).scaleb(-3))


def format_cpu_milli(cores: float) -> str:
    """A CPU amount in cores, rounded half-up to the nearest millicore: 1.5 -> "1500m", 2.0 -> "2"."""
    if not math.isfinite(cores):
        raise QuantityError(f"cpu amount {cores!r} is not a finite number")
    milli = (Decimal(repr(cores)) * 1000).quantize(Decimal(1), rounding=ROUND_HALF_UP)
    return format_milli(int(milli))


def format_bytes(n: int) -> str:
    """Canonical BinarySI form of a byte count, as resource.NewQuantity(n, BinarySI) prints it.

    The largest binary suffix dividing exactly ("1536Ki", "32Gi"), else the plain integer ("1500"); below 1024 in
    magnitude Kubernetes switches to DecimalSI, so 1000 prints as "1k" and 512 as "512".
    """
    return _canonical_binary(Decimal(int(n)))


def _parse(value: str | int | float) -> tuple[Decimal, str]:
    # A cluster repeats the same few quantities everywhere; the type is part of the key (True == 1, 1 == 1.0).
    if not isinstance(value, str | int | float):
        _as_text(value)  # raises QuantityError (and keeps unhashable garbage away from the cache)
    return _parse_cached(type(value).__name__, value)


@functools.lru_cache(maxsize=8192)
def _parse_cached(_kind: str, value: str | int | float) -> tuple[Decimal, str]:
    text = _as_text(value)
    match = _NUMBER.fullmatch(text)
    if match is None:
        raise QuantityError(f"{value!r} is not a Kubernetes quantity")
    number, suffix = match.groups()
    if len(number) > _MAX_DIGITS:
        raise QuantityError(f"quantity {value!r} is out of range")
    with localcontext(_CONTEXT):
        amount, fmt = _apply_suffix(Decimal(number), suffix, value)
        amount = _round_to_nano(amount, value)
    if fmt == BINARY_SI and 0 < abs(amount) < 1:
        fmt = DECIMAL_SI  # quantity.go: sub-unit binary values are kept as DecimalSI
    return amount, fmt


def _round_to_nano(amount: Decimal, original: object) -> Decimal:
    """quantity.go rounds every value away from zero to a whole nano unit."""
    exponent = amount.as_tuple().exponent
    if not isinstance(exponent, int) or exponent >= -9:
        return amount
    try:
        return amount.quantize(_NANO, rounding=ROUND_UP)
    except InvalidOperation as e:
        raise QuantityError(f"quantity {original!r} is out of range") from e


def _as_text(value: str | int | float) -> str:
    # bool is an int subclass, but `true` is never a quantity.
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise QuantityError(f"{value!r} is not a Kubernetes quantity")
    return value.strip() if isinstance(value, str) else str(value)


def _apply_suffix(number: Decimal, suffix: str, original: object) -> tuple[Decimal, str]:
    if suffix in _BINARY_SUFFIXES:
        return number * (Decimal(1024) ** _BINARY_SUFFIXES[suffix]), BINARY_SI
    if suffix in _DECIMAL_SUFFIXES:
        return number.scaleb(_DECIMAL_SUFFIXES[suffix]), DECIMAL_SI
    exponent = _EXPONENT.fullmatch(suffix)
    if exponent is None:
        raise QuantityError(f"{original!r} is not a Kubernetes quantity (unknown suffix {suffix!r})")
    power = int(exponent.group(1))
    if abs(power) > _MAX_DIGITS:
        raise QuantityError(f"quantity {original!r} is out of range")
    return number.scaleb(power), DECIMAL_EXPONENT


def _canonical_binary(amount: Decimal) -> str:
    # quantity.go CanonicalizeBytes: BinarySI only for whole values with |v| >= 1024, otherwise DecimalSI.
    if abs(amount) < 1024 or amount != amount.to_integral_value():
        return _canonical_decimal(amount)
    mantissa, power = int(amount), 0
    while power < 6 and mantissa % 1024 == 0:
        mantissa //= 1024
        power += 1
    return f"{mantissa}{_BINARY_BY_POWER.get(power, '')}"


def _canonical_decimal(amount: Decimal, exponent_form: bool = False) -> str:
    """Mantissa times a power of ten that is a multiple of three, with the matching suffix ("1500m", "2k", "1e3")."""
    if amount == 0:
        return "0"
    sign, digits, exponent = amount.as_tuple()
    assert isinstance(exponent, int)  # finite by construction
    mantissa = int("".join(map(str, digits)))
    while mantissa % 10 == 0:
        mantissa //= 10
        exponent += 1
    while exponent % 3 != 0:
        mantissa *= 10
        exponent -= 1
    text = ("-" if sign else "") + str(mantissa)
    if exponent_form:
        return text + (f"e{exponent}" if exponent else "")
    if exponent > 18:  # beyond "E": keep the value exact with a larger mantissa
        text += "0" * (exponent - 18)
        exponent = 18
    return text + _DECIMAL_BY_EXPONENT[exponent]
