"""The PodMigrationJob object (apis/scheduling/migration.py): built as upstream's evict.go builds it and valid
against the CRD, decoded with a one-line refusal naming the field, and written conditions as UpdateCondition."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from apis.core.errors import InvalidInput
from apis.scheduling import migration as m

CRD = "scheduling.koordinator.sh_podmigrationjobs.yaml"
Validate = Callable[[str, dict[str, Any]], None]


def test_new_job_is_valid_against_the_crd_and_reads_back(validate_crd: Validate) -> None:
    obj = m.new_job("job-1", m.PodRef("default", "p1", "uid-p1"), mode=m.MODE_RESERVATION_FIRST, ttl=300,
                    created=1_714_521_600, annotations={"koordinator.sh/evict-reason": "hot"},
                    delete_options={"gracePeriodSeconds": 30})
    validate_crd(CRD, obj)
    assert obj["spec"]["ttl"] == "5m0s" and obj["status"] == {"phase": "Pending"}
    job = m.decode_job(obj)
    assert (job.pod_ref, job.ttl, job.mode, job.phase) == (m.PodRef("default", "p1", "uid-p1"), 300.0,
                                                            "ReservationFirst", "Pending")
    assert job.active and job.ident == "job-1"


def test_no_ttl_leaves_the_field_out(validate_crd: Validate) -> None:
    obj = m.new_job("j", m.PodRef("ns", "p"), mode=m.MODE_EVICT_DIRECTLY, ttl=0, created=0)
    validate_crd(CRD, obj)
    assert "ttl" not in obj["spec"] and m.decode_job(obj).ttl == 0


@pytest.mark.parametrize(("spec", "field"), [
    ({}, "spec.podRef: required"),
    ({"podRef": "p"}, "spec.podRef: must be an object"),
    ({"podRef": {"name": 3}}, "spec.podRef.name"),
    ({"podRef": {}, "ttl": "5 minutes"}, "spec.ttl"),
    ({"podRef": {}, "mode": "Later"}, "spec.mode"),
    ({"podRef": {}, "paused": "yes"}, "spec.paused"),
])
def test_decode_refuses_naming_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as e:
        m.decode_job({"metadata": {"name": "j"}, "spec": spec})
    assert str(e.value).startswith(field) and "\n" not in str(e.value)


@pytest.mark.parametrize(("phase", "active"), [("", True), ("Pending", True), ("Running", True),
                                               ("Succeeded", False), ("Failed", False), ("Aborted", False)])
def test_active_phases(phase: str, active: bool) -> None:
    assert m.is_active(phase) is active


def test_conditions_written_only_on_change_keeping_the_transition_time(validate_crd: Validate) -> None:
    obj = m.new_job("j", m.PodRef("ns", "p"), mode=m.MODE_RESERVATION_FIRST, ttl=60, created=0)
    assert m.set_condition(obj, m.COND_EVICTION, m.FALSE, m.REASON_EVICTING, "evicting", 10)
    assert not m.set_condition(obj, m.COND_EVICTION, m.FALSE, m.REASON_EVICTING, "evicting", 20)
    assert m.set_condition(obj, m.COND_EVICTION, m.FALSE, m.REASON_EVICTING, "still evicting", 30)
    cond = obj["status"]["conditions"][0]
    assert cond["lastTransitionTime"] == "1970-01-01T00:00:10Z" and cond["lastProbeTime"] == "1970-01-01T00:00:30Z"
    assert m.set_condition(obj, m.COND_EVICTION, m.TRUE, m.REASON_EVICT_COMPLETE, "done", 40)
    assert obj["status"]["conditions"][0]["lastTransitionTime"] == "1970-01-01T00:00:40Z"
    assert len(obj["status"]["conditions"]) == 1
    assert (obj["status"]["status"], obj["status"]["reason"], obj["status"]["message"]) == (
        "Eviction", "EvictComplete", "done")
    m.set_phase(obj, m.PHASE_SUCCEEDED)
    assert obj["status"]["status"] == "Complete"
    validate_crd(CRD, obj)
