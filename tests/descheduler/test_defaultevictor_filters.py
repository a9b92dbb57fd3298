"""DefaultEvictor's filters (kubernetes-sigs/descheduler v0.35.1 defaultevictor_test.go, Koordinator's
evictions_test.go matrix restated for the DefaultEvictor args), its PreEvictionFilter, and its eviction's
PodDisruptionBudget check in a simulation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scheduler.descheduler.config.common import ConfigError
from scheduler.descheduler.config.defaultevictor_args import decode_defaultevictor_args
from scheduler.descheduler.interfaces import EvictOptions, Snapshot, snapshot
from scheduler.descheduler.limiter import Limiter
from scheduler.descheduler.plugins.defaultevictor import DefaultEvictor

from deschedbuild import CRITICAL, LOCAL_VOLUME, MIRROR, NOW, config, node, node_metrics, pod, simulate

NOW_S = 1714521600.0  # NOW in unix seconds


class Handle:
    def __init__(self, snap: Snapshot) -> None:
        self._snapshot = snap

    def evictor(self) -> Any:
        raise AssertionError("not used")

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    @property
    def limiter(self) -> Limiter:
        return Limiter()

    @property
    def kube(self) -> None:
        return None  # as in `simulate`


def evictor(args: dict[str, Any], objects: list[dict[str, Any]] | None = None) -> DefaultEvictor:
    snap = snapshot(objects or [node("n1", 4000, 4000, 10), node("n2", 4000, 4000, 10)], NOW_S)
    return DefaultEvictor(decode_defaultevictor_args(args, "args"), Handle(snap))


def web_pdb(allowed: int) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}}, "status": {"disruptionsAllowed": allowed}}


EVICT = {"descheduler.alpha.kubernetes.io/evict": "true"}
PVC = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]


@pytest.mark.parametrize(("name", "p", "args", "passes"), [
    ("normal pod", pod("a", 100, 0, "n1"), {}, True),
    ("bare pod", pod("a", 100, 0, "n1", owner=None), {}, False),
    ("failed bare pod", {**pod("a", 100, 0, "n1", owner=None), "status": {"phase": "Failed"}}, {}, False),
    ("failed bare pod, evictFailedBarePods", {**pod("a", 100, 0, "n1", owner=None), "status": {"phase": "Failed"}},
     {"evictFailedBarePods": True}, True),
    ("running bare pod, evictFailedBarePods", pod("a", 100, 0, "n1", owner=None), {"evictFailedBarePods": True},
     False),
    ("DaemonSet pod", pod("a", 100, 0, "n1", owner="DaemonSet"), {}, False),
    ("DaemonSet pod, evictDaemonSetPods", pod("a", 100, 0, "n1", owner="DaemonSet"), {"evictDaemonSetPods": True},
     True),
    ("mirror pod", pod("a", 100, 0, "n1", annotations=dict(MIRROR)), {"evictDaemonSetPods": True}, False),
    ("static pod", pod("a", 100, 0, "n1", annotations={"kubernetes.io/config.source": "file"}), {}, False),
    ("terminating pod", {**pod("a", 100, 0, "n1"), "metadata": {**pod("a", 100, 0, "n1")["metadata"],
                                                                "deletionTimestamp": NOW}}, {}, False),
    ("local storage", pod("a", 100, 0, "n1", volumes=LOCAL_VOLUME), {}, False),
    ("local storage, evictLocalStoragePods", pod("a", 100, 0, "n1", volumes=LOCAL_VOLUME),
     {"evictLocalStoragePods": True}, True),
    ("system critical", pod("a", 100, 0, "n1", priority=CRITICAL), {}, False),
    ("system critical, evictSystemCriticalPods", pod("a", 100, 0, "n1", priority=CRITICAL),
     {"evictSystemCriticalPods": True}, True),
    ("priority at the threshold", pod("a", 100, 0, "n1", priority=1000), {"priorityThreshold": {"value": 1000}},
     False),
    ("priority below the threshold", pod("a", 100, 0, "n1", priority=999), {"priorityThreshold": {"value": 1000}},
     True),
    ("no priority with a threshold", pod("a", 100, 0, "n1"), {"priorityThreshold": {"value": 1000}}, True),
    ("threshold ignored once system-critical protection is off", pod("a", 100, 0, "n1", priority=5000),
     {"priorityThreshold": {"value": 1000}, "evictSystemCriticalPods": True}, True),
    ("PVC", pod("a", 100, 0, "n1", volumes=PVC), {}, True),
    ("PVC, ignorePvcPods", pod("a", 100, 0, "n1", volumes=PVC), {"ignorePvcPods": True}, False),
    ("labelSelector matching", pod("a", 100, 0, "n1", labels={"app": "web"}),
     {"labelSelector": {"matchLabels": {"app": "web"}}}, True),
    ("labelSelector not matching", pod("a", 100, 0, "n1", labels={"app": "db"}),
     {"labelSelector": {"matchLabels": {"app": "web"}}}, False),
    ("evict annotation overrides everything", pod("a", 100, 0, "n1", owner="DaemonSet", priority=CRITICAL,
                                                  annotations=dict(EVICT), volumes=LOCAL_VOLUME), {}, True),
    ("Mandatory no-eviction", pod("a", 100, 0, "n1", annotations={
        "descheduler.alpha.kubernetes.io/prefer-no-eviction": ""}), {"noEvictionPolicy": "Mandatory"}, False),
    ("Preferred no-eviction", pod("a", 100, 0, "n1", annotations={
        "descheduler.alpha.kubernetes.io/prefer-no-eviction": ""}), {"noEvictionPolicy": "Preferred"}, True),
    ("protections list: DaemonSetPods disabled", pod("a", 100, 0, "n1", owner="DaemonSet"),
     {"podProtections": {"defaultDisabled": ["DaemonSetPods"]}}, True),
    ("protections list: PodsWithPVC enabled", pod("a", 100, 0, "n1", volumes=PVC),
     {"podProtections": {"extraEnabled": ["PodsWithPVC"]}}, False),
    ("resource claims protected", pod("a", 100, 0, "n1", resourceClaims=[{"name": "gpu"}]),
     {"podProtections": {"extraEnabled": ["PodsWithResourceClaims"]}}, False),
])
def test_filter(name: str, p: dict[str, Any], args: dict[str, Any], passes: bool) -> None:
    assert evictor(args).filter(p) is passes, name


def test_priority_threshold_by_class_name() -> None:
    objects = [node("n1", 4000, 4000, 10),
               {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "gold"},
                "value": 500}]
    ev = evictor({"priorityThreshold": {"name": "gold"}}, objects)
    assert ev.filter(pod("a", 100, 0, "n1", priority=499))
    assert not ev.filter(pod("a", 100, 0, "n1", priority=500))
    missing = evictor({"priorityThreshold": {"name": "silver"}}, objects)
    assert not missing.filter(pod("a", 100, 0, "n1", priority=1))


def test_pods_without_pdb_protected() -> None:
    pdb = web_pdb(1)
    ev = evictor({"ignorePodsWithoutPDB": True}, [node("n1", 4000, 4000, 10), pdb])
    assert ev.filter(pod("a", 100, 0, "n1", labels={"app": "web"}))
    assert not ev.filter(pod("b", 100, 0, "n1", labels={"app": "db"}))


def test_min_replicas_and_min_pod_age() -> None:
    siblings = [pod(f"r{i}", 100, 0, "n1") for i in range(3)]
    objects = [node("n1", 4000, 4000, 10), *siblings]
    assert evictor({"minReplicas": 3}, objects).filter(siblings[0])
    assert not evictor({"minReplicas": 4}, objects).filter(siblings[0])
    young = {**siblings[0], "status": {"phase": "Running", "startTime": "2024-04-30T23:59:00Z"}}
    old = {**siblings[0], "status": {"phase": "Running", "startTime": "2024-04-30T22:00:00Z"}}
    ev = evictor({"minPodAge": "10m"}, objects)
    assert ev.filter(old) and not ev.filter(young) and not ev.filter(siblings[0])  # no startTime: too young


def test_pre_eviction_filter_node_fit() -> None:
    """nodeFit: another ready node (matching args nodeSelector) must fit the pod: selector, taints, resources,
    schedulable."""
    nodes = [node("n1", 4000, 4000, 10), node("n2", 1000, 4000, 10, labels={"zone": "a"}),
             node("n3", 8000, 4000, 10, unschedulable=True)]
    small, big = pod("s", 500, 0, "n1"), pod("b", 2000, 0, "n1")
    ev = evictor({"nodeFit": True}, nodes)
    assert ev.pre_eviction_filter(small) and not ev.pre_eviction_filter(big)
    assert not evictor({"nodeFit": True, "nodeSelector": "zone=b"}, nodes).pre_eviction_filter(small)
    assert evictor({"nodeFit": False}, nodes).pre_eviction_filter(big)
    tainted = [node("n1", 4000, 4000, 10), {**node("n2", 4000, 4000, 10),
                                            "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}]
    assert not evictor({"nodeFit": True}, tainted).pre_eviction_filter(small)
    tolerating = pod("t", 500, 0, "n1", tolerations=[{"key": "k", "operator": "Exists"}])
    assert evictor({"nodeFit": True}, tainted).pre_eviction_filter(tolerating)


def test_namespace_label_selector() -> None:
    ns = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default", "labels": {"team": "a"}}}]
    objects = [node("n1", 4000, 4000, 10), *ns]
    assert evictor({"namespaceLabelSelector": {"matchLabels": {"team": "a"}}}, objects).pre_eviction_filter(
        pod("a", 100, 0, "n1"))
    assert not evictor({"namespaceLabelSelector": {"matchLabels": {"team": "b"}}}, objects).pre_eviction_filter(
        pod("a", 100, 0, "n1"))


def test_eviction_honours_pod_disruption_budgets() -> None:
    pdb = web_pdb(1)
    ev = evictor({}, [node("n1", 4000, 4000, 10), pdb])
    opts = EvictOptions("LowNodeLoad", "test")
    web = [pod(f"w{i}", 100, 0, "n1", labels={"app": "web"}) for i in range(2)]
    assert ev.evict(web[0], opts) and not ev.evict(web[1], opts)
    assert ev.evict(pod("other", 100, 0, "n1"), opts)


@pytest.mark.parametrize(("args", "message"), [
    ({"priorityThreshold": {"value": 1, "name": "x"}}, "only one of priorityThreshold fields can be set"),
    ({"noEvictionPolicy": "Sometimes"}, "noEvictionPolicy"),
    ({"evictLocalStoragePods": True, "podProtections": {"extraEnabled": ["PodsWithPVC"]}},
     "cannot be used together with podProtections"),
    ({"podProtections": {"extraEnabled": ["DaemonSetPods"]}}, "not a valid pod protection"),
    ({"podProtections": {"defaultDisabled": ["DaemonSetPods", "DaemonSetPods"]}}, "duplicate protection"),
    ({"evictLocalStoragepods": True}, "unknown field"),
])
def test_args_refused(args: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        decode_defaultevictor_args(args, "args")


def test_priority_threshold_above_system_critical_refused() -> None:
    with pytest.raises(ConfigError, match="can't be greater than 2000000000"):
        evictor({"priorityThreshold": {"value": 2_000_000_001}})


def test_pdb_limits_lownodeload_evictions_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The worked example (4 evictions) with a PDB allowing one disruption over p1..p5: one eviction, the next
    candidates refused by the Eviction API's budget check cost nothing."""
    nodes = [node("n1", 4000, 3000, 9), node("n2", 4000, 3000, 10)]
    pods = [pod(f"p{i}", 400, 0, "n1", labels={"app": "web"}) for i in range(1, 9)] + [pod("p9", 400, 0, "n2")]
    pdb = web_pdb(1)
    result = simulate(tmp_path, [*nodes, *pods, *node_metrics(nodes, pods), pdb],
                      config({"cpu": 30, "pods": 30}, {"cpu": 50, "pods": 50}), capsys)
    assert len(result["evictions"]) == 1
