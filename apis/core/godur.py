"""Go `time.Duration` strings ("5m0s", "1h30m", "300ms") as used by metav1.Duration fields in CRs."""

from __future__ import annotations

import re

from apis.core.errors import InvalidInput

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def parse(text: str) -> float:
    """Seconds in a Go duration string; InvalidInput on anything Go's time.ParseDuration rejects."""
    s = text.strip()
    sign = -1.0 if s.startswith("-") else 1.0
    s = s.lstrip("+-")
    if s == "0":
        return 0.0
    pos, total = 0, 0.0
    for m in _PART.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if not s or pos != len(s):
        raise InvalidInput(f"invalid duration {text!r}")
    return sign * total


def format_seconds(seconds: float) -> str:
    """Go's Duration.String() for whole-second durations: 300 → "5m0s", 3600 → "1h0m0s", 30 → "30s"."""
    total = round(seconds)
    if total == 0:
        return "0s"
    sign = "-" if total < 0 else ""
    total = abs(total)
    h, rest = divmod(total, 3600)
    m, s = divmod(rest, 60)
    if h:
        return f"{sign}{h}h{m}m{s}s"
    if m:
        return f"{sign}{m}m{s}s"
    return f"{sign}{s}s"
