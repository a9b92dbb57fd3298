"""koord-descheduler's `--feature-gates` read as component-base reads Koordinator's gate (pkg/features/features.go):
upstream's defaults, AllAlpha/AllBeta over their stage with a named gate winning, Go booleans, and the gates on for
a feature this program lacks."""

from __future__ import annotations

import pytest

from scheduler.descheduler.config.features import parse_feature_gates


def test_defaults_are_upstreams() -> None:
    gates = parse_feature_gates("")
    assert not gates.enabled("DisablePVCReservation") and gates.enabled("PodMutatingWebhook")
    assert not gates.enabled("PriorityTransformer") and gates.not_built_on() == []


@pytest.mark.parametrize("text, pvc, transformer", [
    ("DisablePVCReservation=true", True, False),
    (" DisablePVCReservation = True ,", True, False),  # trimmed, empty segments skipped
    ("AllBeta=true", True, False),  # DisablePVCReservation is beta
    ("AllAlpha=true", False, True),  # the transformers are alpha
    ("AllBeta=true,DisablePVCReservation=false", False, False),  # the named gate wins, in either order
    ("DisablePVCReservation=0,AllBeta=1", False, False),
    ("AllAlpha=true,PriorityTransformer=f", False, False),
])
def test_groups_and_named_gates(text: str, pvc: bool, transformer: bool) -> None:
    gates = parse_feature_gates(text)
    assert gates.enabled("DisablePVCReservation") is pvc and gates.enabled("PriorityTransformer") is transformer


def test_gates_on_for_a_feature_not_built() -> None:
    lacking = parse_feature_gates("AllAlpha=true,ReplaceResourcesTransformer=false").not_built_on()
    assert [line.split(":")[0] for line in lacking] == ["PriorityTransformer=true", "PreemptionPolicyTransformer=true"]


@pytest.mark.parametrize("text, message", [
    ("NoSuchGate=true", "unrecognized feature gate: NoSuchGate"),
    ("disablepvcreservation=true", "unrecognized feature gate: disablepvcreservation"),  # case matters
    ("DisablePVCReservation=yes", "invalid value of DisablePVCReservation=yes"),  # strconv.ParseBool
    ("DisablePVCReservation", "malformed pair, expect string=bool"),
])
def test_refused_in_one_line(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as got:
        parse_feature_gates(text)
    assert "\n" not in str(got.value) and str(got.value).startswith("--feature-gates: ")
