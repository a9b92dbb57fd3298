"""The MigrationController's filter (upstream arbitrator/filter_test.go restated): an existing migrating job, the
scheduler-name rule of ReservationFirst, namespace gray-scale, eviction cost, the pod constraints, expected replicas,
and the retryable limits — maxMigratingPerNode/PerNamespace/Globally, maxMigratingPerWorkload and
maxUnavailablePerWorkload — each counting other pods' migrating jobs only (≥ refuses), and skipEvictionGates."""

from __future__ import annotations

from typing import Any

import pytest

from migbuild import checks, owned, pmj, workload

JSON = dict[str, Any]
RS = workload("ReplicaSet", "rs-1", 10)


def allowed(pod: JSON, others: list[JSON], args: JSON | None = None, passed: set[str] | None = None) -> bool:
    return checks([RS, pod, *others], args, passed).filter(pod)


def test_a_plain_workload_pod_may_migrate() -> None:
    assert allowed(owned("p", "n1"), [])


@pytest.mark.parametrize(("phase", "ok"), [("", False), ("Pending", False), ("Running", False),
                                           ("Succeeded", True), ("Failed", True), ("Aborted", True)])
def test_a_pod_with_a_migrating_job_is_not_migrated_again(phase: str, ok: bool) -> None:
    pod = owned("p", "n1")
    assert allowed(pod, [pmj("j", pod, phase)]) is ok


def test_a_job_naming_the_pod_without_uid_matches_by_name() -> None:
    pod = owned("p", "n1")
    job = pmj("j", pod)
    del job["spec"]["podRef"]["uid"]
    assert not allowed(pod, [job])


def test_reservation_first_needs_one_of_the_scheduler_names() -> None:
    pod = owned("p", "n1", scheduler="default-scheduler")
    assert not allowed(pod, [])
    assert allowed(pod, [], {"schedulerNames": ["default-scheduler"]})
    assert allowed(pod, [], {"defaultJobMode": "EvictDirectly"})


@pytest.mark.parametrize(("args", "namespace", "ok"), [
    ({"namespaces": {"include": ["a"]}}, "a", True), ({"namespaces": {"include": ["a"]}}, "b", False),
    ({"namespaces": {"exclude": ["a"]}}, "a", False), ({"namespaces": {"exclude": ["a"]}}, "b", True),
    ({"namespaces": {"exclude": ["a"]}, "skipEvictionGates": ["Namespaces"]}, "a", True)])
def test_namespace_gray_scale(args: JSON, namespace: str, ok: bool) -> None:
    rs = workload("ReplicaSet", "rs-1", 10, namespace=namespace)
    pod = owned("p", "n1", namespace=namespace)
    assert checks([rs, pod], args).filter(pod) is ok


def test_eviction_cost_max_int32_never_migrates_unless_annotated() -> None:
    assert not allowed(owned("p", "n1", annotations={"scheduling.koordinator.sh/eviction-cost": "2147483647"}), [])
    assert allowed(owned("p", "n1", annotations={"scheduling.koordinator.sh/eviction-cost": "2147483646"}), [])
    assert allowed(owned("p", "n1", annotations={"scheduling.koordinator.sh/eviction-cost": "2147483647",
                                                 "descheduler.alpha.kubernetes.io/evict": ""}), [])


@pytest.mark.parametrize(("pod", "args", "ok"), [
    (owned("p", "n1", kind="DaemonSet"), {}, False),
    (owned("p", "n1", kind=""), {}, False),
    (owned("p", "n1", kind=""), {"evictAllBarePods": True}, True),
    (owned("p", "n1", kind=""), {"skipEvictionGates": ["BarePods"]}, True),
    (owned("p", "n1", volumes=[{"name": "v", "emptyDir": {}}]), {}, False),
    (owned("p", "n1", volumes=[{"name": "v", "emptyDir": {}}]), {"evictLocalStoragePods": True}, True),
    (owned("p", "n1", priority=2_000_000_000), {}, False),
    (owned("p", "n1", priority=2_000_000_000), {"evictSystemCriticalPods": True}, True),
    (owned("p", "n1", priority=100), {"priorityThreshold": {"value": 100}}, False),
    (owned("p", "n1", priority=99), {"priorityThreshold": {"value": 100}}, True),
    (owned("p", "n1", priority=100), {"priorityThreshold": {"value": 100}, "skipEvictionGates": ["PriorityThreshold"]},
     True),
    (owned("p", "n1", volumes=[{"name": "v", "persistentVolumeClaim": {"claimName": "c"}}]), {}, True),
    (owned("p", "n1", volumes=[{"name": "v", "persistentVolumeClaim": {"claimName": "c"}}]),
     {"ignorePvcPods": True}, False),
    (owned("p", "n1"), {"labelSelector": {"matchLabels": {"app": "x"}}}, False),
    (owned("p", "n1", annotations={"descheduler.alpha.kubernetes.io/evict": "true"}, priority=2_000_000_000), {},
     True),
])
def test_pod_constraints(pod: JSON, args: JSON, ok: bool) -> None:
    assert allowed(pod, [], args) is ok


def test_priority_threshold_by_name_is_not_resolved() -> None:
    """[quirk, mirrored] evictions.go's constraints read priorityThreshold.value only: a threshold named by a
    PriorityClass (value 50 here) holds back no pod of priority 100, where the DefaultEvictor's would."""
    gold = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "gold"}, "value": 50}
    assert allowed(owned("p", "n1", priority=100), [gold], {"priorityThreshold": {"name": "gold"}})


@pytest.mark.parametrize(("replicas", "args", "ok"), [
    (1, {}, False), (1, {"skipCheckExpectedReplicas": True}, True), (1, {"skipEvictionGates": ["ExpectedReplicas"]},
                                                                     True),
    (100, {"maxMigratingPerWorkload": "100%"}, False), (100, {"maxUnavailablePerWorkload": 100}, False),
    (100, {"maxMigratingPerWorkload": "10%"}, True)])
def test_expected_replicas(replicas: int, args: JSON, ok: bool) -> None:
    pod = owned("p", "n1")
    assert checks([workload("ReplicaSet", "rs-1", replicas), pod], args).filter(pod) is ok


def test_an_owner_not_found_refuses() -> None:
    pod = owned("p", "n1", "rs-missing")
    assert not checks([pod]).filter(pod)


def migrating_on(node: str, n: int, owner: str = "rs-1", namespace: str = "default", phase: str = "Pending",
                 prefix: str = "o") -> list[JSON]:
    """n pods of `owner` on the node, with a job each."""
    out = []
    for i in range(n):
        p = owned(f"{prefix}{i}", node, owner, namespace=namespace)
        out += [p, pmj(f"j-{prefix}{i}", p, phase)]
    return out


def others_on(node: str, n: int, **kw: Any) -> list[JSON]:
    """n pods of another workload (rs-2) on the node, with a job each."""
    return migrating_on(node, n, "rs-2", **kw)


@pytest.mark.parametrize(("others", "args", "ok"), [
    (others_on("n1", 1), {}, True), (others_on("n1", 2), {}, False), (others_on("n2", 2), {}, True),
    (others_on("n1", 2, phase="Running"), {}, False), (others_on("n1", 2, phase="Succeeded"), {}, True),
    (others_on("n1", 2), {"maxMigratingPerNode": 3}, True), (others_on("n1", 5), {"maxMigratingPerNode": 0},
                                                                 True),
    (others_on("n1", 2), {"skipEvictionGates": ["MaxMigratingPerNode"]}, True)])
def test_max_migrating_per_node(others: list[JSON], args: JSON, ok: bool) -> None:
    assert allowed(owned("p", "n1"), others, {"maxMigratingPerWorkload": 5, **args}) is ok


def test_per_node_skips_an_unbound_pod_and_never_counts_its_own_job() -> None:
    f = checks([RS, *migrating_on("n1", 3)])
    assert f.per_node(owned("p", ""), False) is None
    assert f.per_node(owned("o0", "n1"), False) is not None  # o1, o2 are 2 others
    f = checks([RS, *migrating_on("n1", 2)])
    assert f.per_node(owned("o0", "n1"), False) is None  # only o1 is another


@pytest.mark.parametrize(("others", "args", "ok"), [
    (migrating_on("n2", 1, "rs-2", namespace="default"), {"maxMigratingPerNamespace": 1}, False),
    (migrating_on("n2", 1, "rs-2", namespace="other"), {"maxMigratingPerNamespace": 1}, True),
    (migrating_on("n2", 1, "rs-2"), {"maxMigratingPerNamespace": 2}, True),
    (migrating_on("n2", 1, "rs-2"), {"maxMigratingPerNamespace": 1, "skipEvictionGates": ["MaxMigratingPerNamespace"]},
     True),
    (migrating_on("n2", 1, "rs-2", namespace="a") + migrating_on("n2", 1, "rs-2", namespace="b", prefix="x"),
     {"maxMigratingGlobally": 2}, False),
    (migrating_on("n2", 1, "rs-2", namespace="a"), {"maxMigratingGlobally": 2}, True),
    (migrating_on("n2", 3, "rs-2"), {"maxMigratingGlobally": 0}, True),
    (migrating_on("n2", 2, "rs-2"), {"maxMigratingGlobally": 2, "skipEvictionGates": ["MaxMigratingGlobally"]},
     True)])
def test_max_migrating_per_namespace_and_globally(others: list[JSON], args: JSON, ok: bool) -> None:
    assert allowed(owned("p", "n1"), others, {"maxMigratingPerWorkload": 5, "maxMigratingPerNode": 0,
                                              **args}) is ok


def test_max_migrating_per_workload() -> None:
    others = migrating_on("n2", 1)
    assert not allowed(owned("p", "n1"), others, {"maxMigratingPerWorkload": 1})
    assert allowed(owned("p", "n1"), others, {"maxMigratingPerWorkload": 2})
    assert allowed(owned("p", "n1"), migrating_on("n2", 1, owner="rs-2"), {"maxMigratingPerWorkload": 1})
    assert allowed(owned("p", "n1"), others, {"maxMigratingPerWorkload": 1,
                                              "skipEvictionGates": ["MaxMigratingPerWorkload"]})


def test_max_unavailable_per_workload_counts_unready_and_migrating_pods() -> None:
    unready = [owned("u1", "n2", ready=False)]
    args = {"maxMigratingPerWorkload": 5, "maxUnavailablePerWorkload": 2}
    assert allowed(owned("p", "n1"), unready, args)
    assert not allowed(owned("p", "n1"), [*unready, owned("u2", "n2", ready=False)], args)
    assert not allowed(owned("p", "n1"), [*unready, *migrating_on("n2", 1)], args)


def test_while_arbitrating_only_jobs_that_passed_count() -> None:
    """A Pending job counts for an arbitrating pod only once it passed arbitration; a Running one always."""
    pod = owned("p", "n1", annotations={"descheduler.koordinator.sh/pod-arbitrating": "true"})
    a, b = owned("a", "n1"), owned("b", "n1")
    args = {"maxMigratingPerWorkload": 5}
    assert allowed(pod, [a, b, pmj("ja", a), pmj("jb", b)], args)
    assert not allowed(pod, [a, b, pmj("ja", a), pmj("jb", b)], args, passed={"uid-ja", "uid-jb"})
    assert not allowed(pod, [a, b, pmj("ja", a), pmj("jb", b, "Running")], args, passed={"uid-ja"})
    plain = owned("p", "n1")
    assert not allowed(plain, [a, b, pmj("ja", a), pmj("jb", b)], args)


def test_evict_annotation_passes_the_limits_too() -> None:
    pod = owned("p", "n1", annotations={"descheduler.alpha.kubernetes.io/evict": "true"})
    assert allowed(pod, migrating_on("n1", 5), {"maxMigratingGlobally": 1})
