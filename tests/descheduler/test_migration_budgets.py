"""Per-workload budgets and object limiters (upstream controllers/migration/util/util_test.go, filter_test.go
TestFilterExpectedReplicas and the object-limiter cases of controller_test.go), and workload lookup through owner
references (controllerfinder)."""

from __future__ import annotations

import pytest

from apis.core.objects import JSON
from scheduler.descheduler.config.migration_args import ObjectLimiter
from scheduler.descheduler.migration import budget
from scheduler.descheduler.migration.objectlimiter import ObjectLimiters, Subject, TokenBucket
from scheduler.descheduler.migration.scale import Served, group_version_path, served_kinds
from scheduler.descheduler.migration.workload import controller_of, find

from migbuild import owned, workload


@pytest.mark.parametrize(("replicas", "value", "want"), [
    (6, "80%", 4), (6, "150%", 6), (6, 5, 5), (6, 7, 6), (6, None, 2), (50, "0%", 1), (6, 0, 1),
    (3, None, 1), (4, None, 2), (10, None, 2), (11, None, 1), (50, None, 5), (0, None, 0)])
def test_max_unavailable(replicas: int, value: int | str | None, want: int) -> None:
    assert budget.max_unavailable(replicas, value) == want == budget.max_migrating(replicas, value)


def test_max_unavailable_refuses_a_string_that_is_no_percent() -> None:
    with pytest.raises(ValueError):
        budget.max_unavailable(6, "half")


@pytest.mark.parametrize(("replicas", "migrating", "unavailable", "refused"), [
    (1, None, None, True), (100, "100%", "100%", True), (100, "10%", "10%", False), (100, None, None, False),
    (2, None, None, False), (6, 6, None, True), (6, None, 6, True), (0, None, None, True)])
def test_expected_replicas(replicas: int, migrating: str | int | None, unavailable: str | int | None,
                           refused: bool) -> None:
    assert budget.expected_replicas_refused(replicas, migrating, unavailable) is refused


def test_limiter_burst() -> None:
    assert [budget.limiter_burst(b) for b in (-1, 0, 1, 3)] == [1, 1, 1, 3]


def test_token_bucket_refills_at_its_rate_up_to_burst() -> None:
    b = TokenBucket(rate=10, burst=2, tokens=2, at=0)
    assert b.allow(0) and b.allow(0) and not b.allow(0.05)
    assert b.tokens_at(0.1) == pytest.approx(1.0) and b.allow(0.1)
    assert b.tokens_at(10) == 2


def workload_limiter(per_second: int, burst: int = 0) -> ObjectLimiters:
    return ObjectLimiters({"workload": ObjectLimiter(duration=1.0, max_migrating=per_second, burst=burst)})


def test_workload_limiter_blocks_then_frees() -> None:
    """10 a second: one eviction blocks the workload 10ms later, frees it after 100ms; other workloads, and pods
    without a controller, are never limited by it."""
    lim = workload_limiter(10)
    pod = Subject("rs-1", "default")
    lim.track(pod, lambda kind, limiter: 10, now=100.0)
    assert lim.exceeded(pod, 100.01)
    assert not lim.exceeded(pod, 100.1)
    assert not lim.exceeded(Subject("rs-2", "default"), 100.01)
    lim.track(Subject("", "default"), lambda kind, limiter: 10, now=100.0)
    assert not lim.exceeded(Subject("", "default"), 100.0)


def test_burst_two_leaves_a_token_after_one_eviction() -> None:
    lim = workload_limiter(10, burst=2)
    pod = Subject("rs-1", "default")
    lim.track(pod, lambda kind, limiter: 10, now=0.0)
    assert not lim.exceeded(pod, 0.01)
    lim.track(pod, lambda kind, limiter: 10, now=0.01)
    assert lim.exceeded(pod, 0.02)


def test_zero_max_migrating_is_not_tracked_and_entries_expire() -> None:
    lim = ObjectLimiters({"workload": ObjectLimiter(duration=60.0), "namespace": ObjectLimiter(duration=60.0,
                                                                                                max_migrating=1)})
    pod = Subject("rs-1", "ns")
    lim.track(pod, lambda kind, limiter: 0 if kind == "workload" else 1, now=0.0)
    assert ("workload", "rs-1") not in lim.buckets and lim.exceeded(pod, 1.0)
    assert not lim.exceeded(Subject("rs-9", "other"), 1.0)
    assert not lim.exceeded(pod, 90.0)  # dropped 1.5 × 60s after the last tracking (the bucket refilled anyway)
    assert ("namespace", "ns") not in lim.buckets


def test_a_zero_duration_limiter_is_off() -> None:
    lim = ObjectLimiters({"workload": ObjectLimiter(duration=0.0, max_migrating=1)})
    pod = Subject("rs-1", "default")
    lim.track(pod, lambda kind, limiter: 1, now=0.0)
    assert not lim.exceeded(pod, 0.0)


# ---- workload lookup ----

def test_replica_set_controlled_by_a_deployment_stands_for_it() -> None:
    dep = workload("Deployment", "dep-1", 5, selector={"matchLabels": {"app": "a"}})
    rs_owner = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "dep-1", "uid": "dep-1", "controller": True}
    rs1 = workload("ReplicaSet", "rs-1", 3, owner=rs_owner, labels={"app": "a"})
    rs2 = workload("ReplicaSet", "rs-2", 2, owner=rs_owner, labels={"app": "a"})
    rs3 = workload("ReplicaSet", "rs-3", 2, owner=rs_owner, labels={"app": "other"})
    pods = [owned("a", "n1", "rs-1"), owned("b", "n1", "rs-2"), owned("c", "n1", "rs-3"),
            owned("d", "n1", "rs-1", namespace="elsewhere")]
    objects = {"Deployment": [dep], "ReplicaSet": [rs1, rs2, rs3]}
    w = controller_of(pods[0], objects)
    assert w is not None and (w.kind, w.name, w.replicas) == ("Deployment", "dep-1", 5)
    assert [p["metadata"]["name"] for p in w.pods(pods)] == ["a", "b"]


@pytest.mark.parametrize(("kind", "api_version", "replicas", "want"), [
    ("StatefulSet", "apps/v1", 3, 3), ("StatefulSet", "apps/v1", None, 1),
    ("CloneSet", "apps.kruise.io/v1alpha1", 7, 7),
    ("StatefulSet", "apps.kruise.io/v1beta1", 4, 4), ("ReplicationController", "v1", 2, 2),
    ("ReplicaSet", "apps/v1", 6, 6), ("Rollout", "example.io/v1", 9, 9), ("Rollout", "example.io/v1", None, 0)])
def test_workload_kinds_and_replicas(kind: str, api_version: str, replicas: int | None, want: int) -> None:
    obj = workload(kind, "w-1", replicas, api_version=api_version)
    pod = owned("p", "n1", "w-1", kind=kind, api_version=api_version)
    w = controller_of(pod, {kind: [obj]})
    assert w is not None and w.replicas == want and w.pods([pod]) == [pod]


def test_group_must_match_and_uid_must_agree() -> None:
    kruise = workload("StatefulSet", "w-1", 3, api_version="apps.kruise.io/v1beta1")
    assert controller_of(owned("p", "n1", "w-1", kind="StatefulSet"), {"StatefulSet": [kruise]}) is None
    ref = {"apiVersion": "apps.kruise.io/v1beta1", "kind": "StatefulSet", "name": "w-1", "uid": "other"}
    assert find(ref, "default", {"StatefulSet": [kruise]}) is None
    assert controller_of(owned("bare", "n1", kind=""), {}) is None


# ---- owners of other kinds through their scale subresource (run's ScaleReader) ----

def _scale(uid: str, replicas: int | None, selector: str | None) -> JSON:
    scale: JSON = {"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": {"name": uid, "uid": uid},
                   "spec": {} if replicas is None else {"replicas": replicas}, "status": {}}
    if selector is not None:
        scale["status"]["selector"] = selector
    return scale


@pytest.mark.parametrize(("selector", "members"), [
    ("app=a", {"rs-a"}), ("", {"rs-a", "rs-b"}),  # an empty selector is labels.Everything (upstream)
    ("app=none", {"ro-1"})])  # no ReplicaSet of its own: the pods it owns itself
def test_an_owner_of_another_kind_is_its_scale(selector: str, members: set[str]) -> None:
    asked: list[tuple[str, str, str, str]] = []

    def scales(api_version: str, kind: str, namespace: str, name: str) -> JSON | None:
        asked.append((api_version, kind, namespace, name))
        return _scale("ro-1", 6, selector)

    ro = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "name": "ro-1", "uid": "ro-1", "controller": True}
    rss = [workload("ReplicaSet", "rs-a", 3, owner=ro, labels={"app": "a"}),
           workload("ReplicaSet", "rs-b", 3, owner=ro, labels={"app": "b"}),
           workload("ReplicaSet", "rs-c", 3, labels={"app": "a"})]  # not its own
    w = find(ro, "default", {"ReplicaSet": rss}, scales)
    assert w is not None and (w.kind, w.group, w.replicas, w.uid) == ("Rollout", "argoproj.io", 6, "ro-1")
    assert w.owner_uids == members and asked == [("argoproj.io/v1alpha1", "Rollout", "default", "ro-1")]


def test_a_scale_of_another_uid_or_a_bad_selector_is_no_workload_and_known_kinds_never_ask() -> None:
    ro = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "name": "ro-1", "uid": "ro-1"}
    assert find(ro, "default", {}, lambda *_: _scale("other", 6, "")) is None
    assert find(ro, "default", {}, lambda *_: _scale("ro-1", 6, "app in a")) is None
    assert find(ro, "default", {}, lambda *_: None) is None
    w = find(ro, "default", {}, lambda *_: _scale("ro-1", None, None))
    assert w is not None and w.replicas == 0  # Scale.spec.replicas absent: 0

    def never(*_: str) -> JSON | None:
        raise AssertionError("a kind read through its own object was asked for its scale")

    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs-1", "uid": "rs-1"}
    assert find(rs, "default", {}, never) is None  # not in the view: not found, as before
    # simulate: an object of that kind in the cluster directory is read first
    w = find(ro, "default", {"Rollout": [workload("Rollout", "ro-1", 4, api_version="argoproj.io/v1alpha1")]}, never)
    assert w is not None and w.replicas == 4


def test_discovery_maps_a_kind_to_its_resource_and_sees_its_scale() -> None:
    listed = {"kind": "APIResourceList", "groupVersion": "apps.kruise.io/v1alpha1", "resources": [
        {"name": "uniteddeployments/scale", "kind": "Scale", "group": "autoscaling", "version": "v1"},
        {"name": "uniteddeployments", "kind": "UnitedDeployment"},
        {"name": "daemonsets", "kind": "DaemonSet"}, {"name": "daemonsets/status", "kind": "DaemonSet"}]}
    assert served_kinds(listed) == {"UnitedDeployment": Served("uniteddeployments", True),
                                    "DaemonSet": Served("daemonsets", False)}
    assert (group_version_path("v1"), group_version_path("apps.kruise.io/v1alpha1")) == (
        "/api/v1", "/apis/apps.kruise.io/v1alpha1")
