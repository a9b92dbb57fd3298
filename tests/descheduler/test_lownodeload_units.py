"""LowNodeLoad's parts restated from upstream's unit tests: the anomaly detector (utils/anomaly/
basic_detector_test.go), the pod order and scorers (utils/sorter/pod_test.go, scorer_test.go), and the
filterRealAbnormalNodes cases (low_node_load_test.go) through the plugin's detector caches."""

from __future__ import annotations

from typing import Any

from scheduler.descheduler.plugins.lownodeload.anomaly import ANOMALY, OK, BasicDetector, Counter, DetectorCache
from scheduler.descheduler.plugins.lownodeload.sorting import node_score, pod_score, sort_pods

GI = 1024**3


def test_basic_detector() -> None:
    """TestBasicDetector: anomaly at 2 consecutive abnormal marks, normal at 1; the anomaly expires after the
    timeout; counters clear on each state change."""
    d = BasicDetector("test", 3.0, abnormalities=1, normalities=0, now=0.0)
    assert d.current(0.0) == OK
    assert d.mark(True, 0.0) == OK
    assert d.mark(False, 0.0) == OK
    assert d.counter == Counter(total_detects=2, total_normalities=1, total_abnormalities=1,
                                consecutive_normalities=0, consecutive_abnormalities=1)
    assert d.mark(False, 0.0) == ANOMALY
    assert d.mark(True, 0.0) == OK
    d.mark(False, 1.0)
    d.mark(False, 1.0)
    assert d.current(1.0) == ANOMALY
    assert d.current(4.5) == OK  # 3s after entering Anomaly
    assert d.mark(False, 4.5) == OK
    assert d.mark(False, 4.5) == ANOMALY
    assert d.counter == Counter()


def test_basic_detector_custom_normal_condition() -> None:
    """TestBasicDetectorWithCustomNormalCondition: back to OK only after 3 normal marks."""
    d = BasicDetector("test", 3.0, abnormalities=1, normalities=2, now=0.0)
    assert [d.mark(False, 0.0), d.mark(False, 0.0)] == [OK, ANOMALY]
    assert [d.mark(True, 0.0), d.mark(True, 0.0), d.mark(True, 0.0)] == [ANOMALY, ANOMALY, OK]
    assert [d.mark(False, 0.0), d.mark(False, 0.0)] == [OK, ANOMALY]
    d.reset(0.0)
    assert d.current(0.0) == OK and d.counter == Counter()


def test_detector_timeout_default_and_cache_expiry() -> None:
    d = BasicDetector("n", None, abnormalities=0, normalities=3, now=0.0)
    assert d.mark(False, 0.0) == ANOMALY
    assert d.current(59.0) == ANOMALY and d.current(60.5) == OK  # nil timeout: 60s
    cache = DetectorCache(300.0)
    cache.set("n", d, 0.0)
    assert cache.get("n", 299.0) is d and cache.get("n", 300.5) is None
    forever = DetectorCache(0.0)
    forever.set("n", d, 0.0)
    assert forever.get("n", 1e9) is d


def pod(name: str, priority: int, koord_qos: str, k8s_qos: str, created: str = "2024-01-01T00:00:00Z",
        **annotations: str) -> dict[str, Any]:
    """upstream's makePod: namespace default, the koord QoS label, status.qosClass, spec.priority."""
    return {"metadata": {"name": name, "namespace": "default", "labels": {"koordinator.sh/qosClass": koord_qos},
                         "annotations": dict(annotations), "creationTimestamp": created},
            "spec": {"nodeName": "test-node", "priority": priority}, "status": {"qosClass": k8s_qos}}


PROD_MAX, PROD_MIN, BATCH_MAX, BATCH_MIN = 9999, 9000, 5999, 5000
LATER = "2024-01-01T00:01:00Z"
DELETION, EVICTION = "controller.kubernetes.io/pod-deletion-cost", "scheduling.koordinator.sh/eviction-cost"


def test_sort_pods() -> None:
    """TestSortPods: class, priority, kube QoS, koord QoS, deletion cost, eviction cost, usage, newest first. The
    upstream expectation's full ties (test-18/16, test-19/17) are not pinned (Go's sort is unstable)."""
    pods = [
        pod("test-1", 0, "", "BestEffort"), pod("test-10", 0, "", "Guaranteed"), pod("test-11", 0, "", "Burstable"),
        pod("test-12", 8, "", "BestEffort"), pod("test-13", 9, "", "Guaranteed"), pod("test-14", 10, "", "Burstable"),
        pod("test-5", PROD_MAX, "LSE", "Guaranteed"), pod("test-6", PROD_MAX - 1, "LSE", "Guaranteed"),
        pod("test-3", PROD_MAX - 100, "LS", "Burstable"), pod("test-9", BATCH_MIN, "BE", "Burstable"),
        pod("test-2", PROD_MIN, "LS", "Burstable"), pod("test-8", BATCH_MAX, "BE", "Burstable"),
        pod("test-15", BATCH_MIN, "BE", "BestEffort"), pod("test-16", BATCH_MIN, "BE", "BestEffort", LATER),
        pod("test-17", BATCH_MIN, "BE", "BestEffort"), pod("test-18", BATCH_MIN, "BE", "BestEffort", LATER),
        pod("test-19", BATCH_MIN, "BE", "BestEffort"),
        pod("test-20", BATCH_MIN, "BE", "BestEffort", **{DELETION: "200"}),
        pod("test-21", BATCH_MIN, "BE", "BestEffort", **{DELETION: "100"}),
        pod("test-22", BATCH_MIN, "BE", "BestEffort", **{DELETION: "200", EVICTION: "200"}),
        pod("test-23", BATCH_MIN, "BE", "BestEffort", **{DELETION: "200", EVICTION: "100"}),
        pod("test-4", PROD_MAX - 80, "LSR", "Guaranteed"), pod("test-7", PROD_MAX - 100, "LS", "Guaranteed"),
    ]
    metrics = {"default/test-16": {"cpu": 2000, "memory": 4 * GI}, "default/test-17": {"cpu": 3000, "memory": 4 * GI},
               "default/test-18": {"cpu": 3000, "memory": 5 * GI}, "default/test-19": {"cpu": 3000, "memory": 5 * GI}}
    got = [p["metadata"]["name"] for p in sort_pods(pods, {}, metrics, {"cpu": 1, "memory": 1, "pods": 1})]
    want = ["test-1", "test-12", "test-18", "test-16", "test-19", "test-17", "test-15", "test-21", "test-20",
            "test-23", "test-22", "test-9", "test-8", "test-11", "test-10", "test-13", "test-14", "test-2", "test-3",
            "test-7", "test-4", "test-6", "test-5"]
    tie = {"test-16": "a", "test-18": "a", "test-17": "b", "test-19": "b"}
    assert [tie.get(n, n) for n in got] == [tie.get(n, n) for n in want]


def test_sort_pods_by_segmented_usage_score() -> None:
    """TestSortPods2: excess {cpu 4, memory 4Gi}, weights cpu 1 memory 2: the pod closest to covering the excess
    first."""
    pods = [pod(f"test-{i}", BATCH_MIN, "BE", "BestEffort") for i in range(1, 5)]
    metrics = {"default/test-1": {"cpu": 2000, "memory": 5 * GI}, "default/test-2": {"cpu": 3000, "memory": 4 * GI},
               "default/test-3": {"cpu": 4000, "memory": 3 * GI}, "default/test-4": {"cpu": 5000, "memory": 2 * GI}}
    got = sort_pods(pods, {"cpu": 4000, "memory": 4 * GI}, metrics, {"cpu": 1, "memory": 2, "pods": 1})
    assert [p["metadata"]["name"] for p in got] == ["test-2", "test-1", "test-3", "test-4"]
    assert pod_score({"memory": 4 * GI}, {"memory": 4 * GI}, {"memory": 1}) == 2.0  # just covering: 2


def test_scorers() -> None:
    """TestResourceUsageScorer, TestResourceUsageScorerPod."""
    weights = {"cpu": 1, "memory": 1}
    assert node_score({"cpu": 500, "memory": 1024}, {"cpu": 1000, "memory": 2048}, weights) == 500
    assert node_score({"cpu": 1200}, {"cpu": 1000}, weights) == 1000  # capped at the capacity
    assert node_score({"cpu": 1200}, {"cpu": 0}, weights) == 0
    assert node_score({"cpu": 500, "memory": 1024}, {"cpu": 1000, "memory": 2048}, {"cpu": 0, "memory": 0}) == 0
    assert pod_score({"cpu": 500, "memory": 1024}, {"cpu": 1000, "memory": 2048}, {"cpu": 0, "memory": 0}) == 0
    assert pod_score({"cpu": 100}, {"cpu": 0}, {"cpu": 1}) == 0
