"""metav1.Time and metav1.MicroTime: RFC 3339 text as the API server writes it, and read back to epoch seconds."""

from __future__ import annotations

from datetime import UTC, datetime


def rfc3339(at: float) -> str:
    """metav1.Time: whole seconds, UTC, `Z`."""
    return datetime.fromtimestamp(int(at), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(at: float) -> str:
    """metav1.MicroTime: RFC 3339 with microseconds."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: object) -> float | None:
    """Epoch seconds of an RFC 3339 time; None when absent, not a string or not a time."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
