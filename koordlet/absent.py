"""Settings a user turned on whose feature this agent lacks: each said once at start and kept as a metric."""

from __future__ import annotations

from collections.abc import Mapping

from koordlet.config import FEATURE_GATES, UNIMPLEMENTED_GATES
from koordlet.flagtable import OPTIONS
from koordlet.health import Health


def absent_settings(given: Mapping[str, str], gates: Mapping[str, bool]) -> list[tuple[str, str, str]]:
    """(kind, name, what happens instead) for every flag given on the command line that has no effect here, and
    every gate that is on (by default or by -feature-gates) for a feature this agent lacks."""
    out = []
    for name, value in given.items():
        option = OPTIONS.get(name)
        if option is not None and option.absent:
            out.append(("flag", name, f"-{name}={value} accepted; {option.absent}"))
    for gate, why in UNIMPLEMENTED_GATES.items():
        if gates.get(gate, FEATURE_GATES.get(gate, False)):
            out.append(("feature-gate", gate, f"feature gate {gate}=true accepted; {why}"))
    return out


def report_absent(health: Health, given: Mapping[str, str], gates: Mapping[str, bool]) -> None:
    """Log each absent setting once (a warning for a gate: a feature the user expects is missing) and keep it for
    the exporter (koordlet_agent_setting_without_effect)."""
    for kind, name, text in absent_settings(given, gates):
        health.without_effect(kind, name, text)
