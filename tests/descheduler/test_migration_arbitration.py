"""Arbitration of pending PodMigrationJobs (upstream arbitrator/sort_test.go, arbitrator_test.go restated): the
stable sorts — newest first, the pods' order, batch-Job grouping, migrating counts — and one arbitration pass
failing forbidden jobs, leaving limited ones waiting and annotating the rest; the Reservation template."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from apis.scheduling.migration import decode_job
from scheduler.descheduler.migration import arbitrator
from scheduler.descheduler.migration.jobs import MigratingJobs
from scheduler.descheduler.migration.reservation import reservation_for

from migbuild import T0, checks, owned, pmj, workload

JSON = dict[str, Any]
Validate = Callable[[str, dict[str, Any]], None]


def job(name: str, pod: JSON, created: str = "2024-04-30T00:00:00Z", **kw: Any) -> Any:
    return decode_job(pmj(name, pod, created=created, **kw))


def names(jobs: list[Any]) -> list[str]:
    return [j.name for j in jobs]


def test_newest_first_then_by_pod_order() -> None:
    """Creation time newest first orders equal pods; the pod order (lower priority first) is primary; jobs
    without a pod come first."""
    low, high = owned("low", "n1", priority=10), owned("high", "n1", priority=100)
    same1, same2 = owned("s1", "n1", priority=50), owned("s2", "n1", priority=50)
    jobs = [job("j-high", high), job("j-s-old", same1, "2024-04-30T00:00:00Z"),
            job("j-s-new", same2, "2024-04-30T01:00:00Z"), job("j-low", low), job("j-nopod", owned("gone", "n1"))]
    pod_of = {"j-high": high, "j-s-old": same1, "j-s-new": same2, "j-low": low}
    same2["metadata"]["creationTimestamp"] = same1["metadata"]["creationTimestamp"]
    got = arbitrator.sort_jobs(jobs, pod_of, lambda owner: 0)
    assert names(got) == ["j-nopod", "j-low", "j-s-new", "j-s-old", "j-high"]


def test_jobs_of_one_batch_job_are_grouped_and_most_migrating_first() -> None:
    a1, a2 = owned("a1", "n1", "job-a", kind="Job", api_version="batch/v1", priority=1), \
        owned("a2", "n1", "job-a", kind="Job", api_version="batch/v1", priority=3)
    b1 = owned("b1", "n1", "job-b", kind="Job", api_version="batch/v1", priority=2)
    x = owned("x", "n1", priority=2)
    jobs = [job("ja1", a1), job("ja2", a2), job("jb1", b1), job("jx", x)]
    pod_of = {"ja1": a1, "ja2": a2, "jb1": b1, "jx": x}
    assert names(arbitrator.sort_jobs(jobs, pod_of, lambda owner: 0)) == ["ja1", "ja2", "jb1", "jx"]
    counts = {"job-a": 0, "job-b": 2}
    assert names(arbitrator.sort_jobs(jobs, pod_of, counts.__getitem__)) == ["jb1", "ja1", "ja2", "jx"]


def test_arbitration_fails_forbidden_waits_limited_passes_the_rest() -> None:
    rs = workload("ReplicaSet", "rs-1", 10)
    ok1, ok2, third = owned("ok1", "n1"), owned("ok2", "n1"), owned("third", "n1")
    daemon = owned("ds", "n2", "ds-1", kind="DaemonSet")
    objs = [rs, ok1, ok2, third, daemon]
    jobs = [job("j1", ok1, "2024-04-30T00:00:03Z"), job("j2", ok2, "2024-04-30T00:00:02Z"),
            job("j3", third, "2024-04-30T00:00:01Z"), job("jd", daemon), job("jgone", owned("gone", "n1"))]
    f = checks([*objs, *(j.obj for j in jobs)], {"maxMigratingPerWorkload": 5})
    passed: set[str] = set()
    f.jobs = lambda: MigratingJobs(jobs, passed)
    pods = f.pods_by_key()
    pod_of = {j.name: pods[j.pod_ref.key] for j in jobs if j.pod_ref.key in pods}
    decisions = {d.job.name: d for d in arbitrator.arbitrate(jobs, pod_of, f.non_retryable, f.retryable, passed,
                                                             lambda owner: 0)}
    # the newest two pass (maxMigratingPerNode 2 counts only passed jobs while arbitrating), the third waits
    assert {n: d.outcome for n, d in decisions.items()} == {
        "jgone": "passed", "j1": "passed", "j2": "passed", "j3": "waiting", "jd": "failed"}
    assert decisions["j1"].job.obj["metadata"]["annotations"]["descheduler.koordinator.sh/passed-arbitration"] == "true"
    assert "passed-arbitration" not in str(decisions["j3"].job.obj["metadata"]["annotations"])
    failed = decisions["jd"].job.obj["status"]
    assert (failed["phase"], failed["reason"]) == ("Failed", "ForbiddenMigratePod")
    assert failed["message"] == 'Pod "default/ds" is forbidden to migrate because it does not meet the requirements'
    assert passed == {"uid-jgone", "uid-j1", "uid-j2"}
    assert "descheduler.koordinator.sh/pod-arbitrating" not in ok1["metadata"]["annotations"]  # memory only


def test_reservation_template(validate_crd: Validate) -> None:
    pod = owned("p", "n1", affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                              {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}]}}})
    j = decode_job({**pmj("job", pod), "spec": {**pmj("job", pod)["spec"], "ttl": "5m0s"}})
    r = reservation_for(j, pod, T0)
    validate_crd("scheduling.koordinator.sh_reservations.yaml", r)
    assert r["metadata"]["name"] == "uid-job"
    assert r["metadata"]["labels"] == {"app.kubernetes.io/created-by": "koord-descheduler",
                                       "scheduling.koordinator.sh/reservation-order": str(int(T0 * 1000))}
    spec = r["spec"]
    assert spec["allocateOnce"] is True and spec["ttl"] == "5m0s" and "nodeName" not in spec["template"]["spec"]
    assert spec["owners"] == [{"controller": {**pod["metadata"]["ownerReferences"][0], "namespace": "default"}}]
    terms = spec["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert all(t["matchFields"] == [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}] for t in terms)
    assert len(terms) == 2 and pod["spec"]["nodeName"] == "n1"  # the pod itself is untouched


def test_reservation_for_an_unschedulable_pending_pod_is_owned_by_the_pod(validate_crd: Validate) -> None:
    pod = owned("p", "")
    pod["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]}
    r = reservation_for(job("job", pod), pod, T0)
    validate_crd("scheduling.koordinator.sh_reservations.yaml", r)
    assert r["spec"]["owners"] == [{"object": {"uid": "uid-p", "kind": "Pod", "name": "p", "namespace": "default"}}]
    assert "affinity" not in r["spec"]["template"]["spec"] and "ttl" not in r["spec"]
