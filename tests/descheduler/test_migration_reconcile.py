"""The PodMigrationJob lifecycle (upstream controllers/migration/controller_test.go restated) over a fake API:
EvictDirectly and ReservationFirst to success, timeouts and the scavenger's ages, missing pods and reservations,
a reservation on the pod's own node or expired, the controller-wide eviction rate, the evict-policy label, the
object limiter holding a job back, and paused or finished jobs left alone. Every job written is valid against the
CRD, every Reservation against its CRD."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from apis.core.errors import ApiError
from apis.scheduling import migration as m
from scheduler.descheduler.config.migration_args import decode_migration_args
from scheduler.descheduler.migration.reconcile import REQUEUE, Outcome, Reconciler, scavengeable

from migbuild import T0, owned, placed, pmj

JSON = dict[str, Any]
Validate = Callable[[str, dict[str, Any]], None]
CREATED = "2024-05-01T00:00:00Z"  # T0


class FakeAPI:
    def __init__(self, validate: Validate, pods: list[JSON]) -> None:
        self.validate = validate
        self.pods = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in pods}
        self.reservations: dict[str, JSON] = {}
        self.evictions: list[tuple[str, str, str]] = []
        self.events: list[tuple[str, str, str]] = []
        self.updates = 0
        self.fail_evict = False

    def get_pod(self, namespace: str, name: str) -> JSON | None:
        return self.pods.get(f"{namespace}/{name}")

    def get_reservation(self, name: str) -> JSON | None:
        return self.reservations.get(name)

    def create_reservation(self, obj: JSON) -> JSON:
        self.validate("scheduling.koordinator.sh_reservations.yaml", obj)
        name = obj["metadata"]["name"]
        if name not in self.reservations:
            self.reservations[name] = {**copy.deepcopy(obj), "metadata": {**obj["metadata"], "uid": f"uid-r-{name}"}}
        return self.reservations[name]

    def delete_reservation(self, name: str) -> None:
        self.reservations.pop(name, None)

    def evict_pod(self, pod: JSON, policy: str, delete_options: Mapping[str, object] | None,
                  soft_eviction: str) -> None:
        if self.fail_evict:
            raise ApiError(429, "Cannot evict pod as it would violate the pod's disruption budget.")
        self.evictions.append((pod["metadata"]["name"], policy, soft_eviction))

    def update_job(self, obj: JSON) -> None:
        self.validate("scheduling.koordinator.sh_podmigrationjobs.yaml", obj)
        self.updates += 1

    def event(self, obj: JSON, type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason, message))


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


def setup(validate: Validate, args: JSON | None = None, *, mode: str = "", ttl: str = "5m0s",
          limited: bool = False) -> tuple[Reconciler, FakeAPI, JSON, Clock, list[str]]:
    pod = owned("p", "n1")
    api = FakeAPI(validate, [pod])
    job = pmj("job", pod, created=CREATED)
    job["spec"].update({"ttl": ttl, **({"mode": mode} if mode else {})})
    job["spec"]["podRef"].pop("uid")
    job["metadata"]["annotations"] = {"koordinator.sh/evict-reason": "hot node", "koordinator.sh/evict-trigger":
                                      "LowNodeLoad"}
    clock = Clock()
    tracked: list[str] = []
    r = Reconciler(decode_migration_args(args or {}, "args"), api, limited=lambda p: limited,
                   evicted=lambda p: tracked.append(p["metadata"]["name"]), now=clock)
    return r, api, job, clock, tracked


def test_evict_directly_to_success(validate_crd: Validate) -> None:
    r, api, job, clock, tracked = setup(validate_crd, mode="EvictDirectly")
    assert r.reconcile(job) == Outcome(REQUEUE)
    assert job["status"]["phase"] == "Running" and job["spec"]["podRef"]["uid"] == "uid-p"
    assert [e[:2] for e in api.evictions] == [("p", "Eviction")] and tracked == ["p"]
    cond = job["status"]["conditions"][0]
    assert (cond["type"], cond["status"], cond["reason"]) == ("Eviction", "False", "Evicting")
    assert cond["message"] == 'Pod "default/p" evicted from node "n1" by the reason "hot node"'
    assert ("Normal", "Descheduled", 'Pod evicted from node "n1" by the reason "hot node"') in api.events
    assert r.reconcile(job) == Outcome(REQUEUE) and len(api.evictions) == 1  # still evicting: no second eviction
    del api.pods["default/p"]
    clock.t += 5
    assert r.reconcile(job) == Outcome()
    assert (job["status"]["phase"], job["status"]["status"], job["status"]["message"]) == (
        "Succeeded", "Complete", 'Pod "default/p" has been evicted')
    assert ("Normal", "EvictComplete", 'Pod "default/p" has been evicted') in api.events
    assert r.reconcile(job) == Outcome() and len(api.evictions) == 1  # finished: left alone


def test_reservation_first_to_success(validate_crd: Validate) -> None:
    r, api, job, _, _ = setup(validate_crd)
    job["metadata"]["uid"] = "job-uid"
    assert r.reconcile(job) == Outcome(0.0)
    ref = job["spec"]["reservationOptions"]["reservationRef"]
    assert ref == {"kind": "Reservation", "apiVersion": "scheduling.koordinator.sh/v1alpha1", "name": "job-uid",
                   "uid": "uid-r-job-uid"}
    reservation = api.reservations["job-uid"]
    assert reservation["spec"]["ttl"] == "5m0s" and api.evictions == []
    assert r.reconcile(job) == Outcome(REQUEUE)  # not placed yet
    reservation["status"] = placed("n2")
    assert r.reconcile(job) == Outcome(REQUEUE)
    assert job["status"]["nodeName"] == "n2" and [e[0] for e in api.evictions] == ["p"]
    assert ("Normal", "ReservationScheduled", 'Assigned Reservation "job-uid" to node "n2"') in api.events
    del api.pods["default/p"]
    assert r.reconcile(job) == Outcome(REQUEUE)
    assert job["status"]["reason"] == "WaitForPodBindReservation"
    new = owned("p-new", "n2", ready=False)
    api.pods["default/p-new"] = new
    reservation["status"]["currentOwners"] = [{"namespace": "default", "name": "p-new", "uid": "uid-p-new"}]
    assert r.reconcile(job) == Outcome(REQUEUE) and job["status"]["reason"] == "WaitForBoundPodReady"
    new["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    assert r.reconcile(job) == Outcome()
    st = job["status"]
    assert (st["phase"], st["status"], st["message"]) == ("Succeeded", "Complete",
                                                         'Bind Pod "default/p-new" in Reservation "job-uid"')
    assert st["podRef"] == {"namespace": "default", "name": "p-new", "uid": "uid-p-new"}
    types = {c["type"]: c["status"] for c in st["conditions"]}
    assert types == {"ReservationCreated": "True", "ReservationScheduled": "True", "Eviction": "True",
                     "PodBoundReservation": "True", "ReservationBound": "True", "BoundPodReady": "True"}
    validate_crd("scheduling.koordinator.sh_podmigrationjobs.yaml", job)


@pytest.mark.parametrize(("status", "reason"), [
    (placed("n1"), "ForbiddenMigratePod"),
    ({"phase": "Failed", "conditions": [{"type": "Ready", "status": "False", "reason": "Expired"}]},
     "ReservationExpired"),
    ({"phase": "Available"}, "Unschedulable"),
    # IsReservationScheduled: a nodeName alone is not enough, the Scheduled=True/Scheduled condition is needed
    ({"phase": "Available", "nodeName": "n2", "conditions": [{"type": "Ready", "status": "True",
                                                              "reason": "Available"}]}, "Unschedulable"),
    ({**placed("n2"), "phase": "Succeeded"}, "ForbiddenMigratePod"),
])
def test_reservation_outcomes_that_fail_the_job(status: JSON, reason: str, validate_crd: Validate) -> None:
    r, api, job, _, _ = setup(validate_crd)
    r.reconcile(job)
    api.reservations["uid-job"]["status"] = status
    assert r.reconcile(job) == Outcome()
    assert (job["status"]["phase"], job["status"]["reason"]) == ("Failed", reason)
    assert api.evictions == []


def test_an_unschedulable_reservation_is_reported_and_waited_for(validate_crd: Validate) -> None:
    r, api, job, _, _ = setup(validate_crd)
    r.reconcile(job)
    api.reservations["uid-job"]["status"] = {"phase": "Pending", "conditions": [
        {"type": "Scheduled", "status": "False", "reason": "Unschedulable", "message": "0/2 nodes are available"}]}
    assert r.reconcile(job) == Outcome(REQUEUE)
    assert job["status"]["phase"] == "Running"
    assert ("Warning", "Unschedulable", "0/2 nodes are available") in api.events


def test_timeout_deletes_the_reservation(validate_crd: Validate) -> None:
    r, api, job, clock, _ = setup(validate_crd)
    r.reconcile(job)
    clock.t = T0 + 299
    assert r.reconcile(job) == Outcome(REQUEUE)
    clock.t = T0 + 300
    assert r.reconcile(job) == Outcome()
    assert (job["status"]["phase"], job["status"]["reason"], job["status"]["message"]) == (
        "Failed", "Timeout", "Abort job caused by timeout")
    assert api.reservations == {}


def test_missing_pod_and_missing_reservation(validate_crd: Validate) -> None:
    r, api, job, _, _ = setup(validate_crd)
    api.pods.clear()
    assert r.reconcile(job) == Outcome()
    assert job["status"]["message"] == 'Abort job caused by missing Pod "default/p"'
    r, api, job, _, _ = setup(validate_crd)
    r.reconcile(job)
    api.reservations.clear()
    r.reconcile(job)
    assert (job["status"]["phase"], job["status"]["reason"]) == ("Failed", "MissingReservation")


def test_eviction_rate_is_controller_wide(validate_crd: Validate) -> None:
    """evictQPS 10, evictBurst 1: a second job evicting at the same instant waits for a token."""
    r, api, job, clock, _ = setup(validate_crd, mode="EvictDirectly")
    api.pods["default/q"] = owned("q", "n1")
    other = pmj("other", api.pods["default/q"], created=CREATED)
    other["spec"]["mode"] = "EvictDirectly"
    assert r.reconcile(job) == Outcome(REQUEUE)
    assert r.reconcile(other) == Outcome(1.0, "TooManyEvictions")
    clock.t += 0.11  # a token a tenth of a second
    assert r.reconcile(other) == Outcome(REQUEUE) and [e[0] for e in api.evictions] == ["p", "q"]


def test_policy_label_and_soft_eviction(validate_crd: Validate) -> None:
    r, api, job, _, _ = setup(validate_crd, {"evictionPolicy": "SoftEviction"}, mode="EvictDirectly")
    r.reconcile(job)
    _, policy, soft = api.evictions[0]
    assert policy == "SoftEviction"
    assert json.loads(soft) == {"timestamp": "2024-05-01T00:00:00Z", "initiator": "LowNodeLoad",
                                "reason": "hot node"}
    r, api, job, _, _ = setup(validate_crd, mode="EvictDirectly")
    api.pods["default/p"]["metadata"]["labels"] = {"koordinator.sh/evict-policy": "Delete"}
    r.reconcile(job)
    assert api.evictions[0][1] == "Delete"


def test_a_failed_eviction_is_retried(validate_crd: Validate) -> None:
    r, api, job, _, tracked = setup(validate_crd, mode="EvictDirectly")
    counted: list[tuple[str, str, str, str]] = []
    r.counted = lambda *series: counted.append(series)
    api.fail_evict = True
    out = r.reconcile(job)
    assert out.requeue == 1.0 and "disruption budget" in out.error and tracked == []
    assert api.events[-1][:2] == ("Warning", "Evicting")
    api.fail_evict = False
    r.bucket.tokens = r.bucket.burst  # the controller-wide rate, spent by the tries above
    r.reconcile(job)
    assert [c[:2] for c in counted] == [("error", "LowNodeLoad"), ("success", "LowNodeLoad")]


def test_object_limiter_holds_the_job_unless_annotated(validate_crd: Validate) -> None:
    r, api, job, _, _ = setup(validate_crd, mode="EvictDirectly", limited=True)
    assert r.reconcile(job) == Outcome(REQUEUE) and api.evictions == []
    job["metadata"]["annotations"]["descheduler.alpha.kubernetes.io/evict"] = "true"
    assert r.reconcile(job) == Outcome(REQUEUE) and len(api.evictions) == 1


@pytest.mark.parametrize("change", [{"spec": {"paused": True}}, {"status": {"phase": "Aborted"}},
                                    {"status": {"phase": "Failed"}}])
def test_paused_and_finished_jobs_are_left_alone(change: JSON, validate_crd: Validate) -> None:
    r, api, job, _, _ = setup(validate_crd)
    for k, v in change.items():
        job.setdefault(k, {}).update(v)
    assert r.reconcile(job) == Outcome() and api.updates == 0 and api.events == []


def test_scavenger_ages() -> None:
    pod = owned("p", "n1")
    with_ttl = m.decode_job({**pmj("a", pod, created=CREATED), "spec": {"podRef": {}, "ttl": "15m"}})
    assert not scavengeable(with_ttl, T0 + 19 * 60) and scavengeable(with_ttl, T0 + 20 * 60)
    no_ttl = m.decode_job(pmj("b", pod, created=CREATED))
    assert not scavengeable(no_ttl, T0 + 29 * 60) and scavengeable(no_ttl, T0 + 30 * 60)


def test_a_pending_pod_migrates_without_eviction(validate_crd: Validate) -> None:
    """An unschedulable pending pod: its Reservation is owned by the pod itself; the job waits for the pod to be
    scheduled (no eviction), and is aborted if another pod took the reservation."""
    for other_took_it in (False, True):
        r, api, job, _, _ = setup(validate_crd)
        pod = api.pods["default/p"]
        pod["spec"].pop("nodeName")
        pod["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]}
        r.reconcile(job)
        reservation = api.reservations["uid-job"]
        assert reservation["spec"]["owners"][0]["object"]["uid"] == "uid-p"
        reservation["status"] = placed("n2")
        if other_took_it:
            reservation["status"]["currentOwners"] = [{"namespace": "default", "name": "x", "uid": "uid-x"}]
            assert r.reconcile(job) == Outcome() and job["status"]["reason"] == "ForbiddenMigratePod"
            continue
        assert r.reconcile(job) == Outcome(REQUEUE) and job["status"]["reason"] == "Unschedulable"
        pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
        assert r.reconcile(job) == Outcome()
        assert (job["status"]["phase"], job["status"]["message"]) == ("Succeeded",
                                                                      'Assign Pod "default/p" to node "n2"')
        assert api.evictions == []
