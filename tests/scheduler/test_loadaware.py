"""LoadAwareScheduling: args, estimator, assigned-not-reported pods, filter thresholds, raw score (spec §2)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import Any

import pytest

from apis.core.errors import InvalidInput
from scheduler.cluster import Cluster, NodeInfo, build_cluster
from scheduler.framework import NodeResourcesFit, Scheduler
from scheduler.plugins.loadaware import AggregatedArgs, LoadAware, LoadAwareArgs

NOW = 1_800_000_000.0
GI = 1024**3
MI = 1024**2
CRD = "slo.koordinator.sh_nodemetrics.yaml"


def ts(t: float) -> str:
    return dt.datetime.fromtimestamp(t, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node(name: str = "n1", cpu: str = "10", memory: str = "100Gi", annotations: dict[str, str] | None = None) -> Any:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": annotations or {}},
            "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}}}


def nodemetric(name: str = "n1", cpu: str = "2", memory: str = "20Gi", age: float = 10,
               pods: list[dict[str, Any]] | None = None, aggregated: list[dict[str, Any]] | None = None,
               system: dict[str, str] | None = None) -> dict[str, Any]:
    metric: dict[str, Any] = {"nodeUsage": {"resources": {"cpu": cpu, "memory": memory}}}
    if aggregated is not None:
        metric["aggregatedNodeUsages"] = aggregated
    if system is not None:
        metric["systemUsage"] = {"resources": system}
    return {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": name},
            "spec": {"metricCollectPolicy": {"reportIntervalSeconds": 60}},
            "status": {"updateTime": ts(NOW - age), "nodeMetric": metric, "podsMetric": pods or []}}


def pod(name: str, cpu: str | None = None, memory: str | None = None, limits: dict[str, str] | None = None,
        node_name: str | None = None, labels: dict[str, str] | None = None, scheduled_at: float | None = None,
        annotations: dict[str, str] | None = None, owner: str | None = None) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    resources: dict[str, Any] = {"requests": requests} if requests else {}
    if limits:
        resources["limits"] = limits
    p: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": name, "namespace": "default", "labels": labels or {},
                                      "annotations": annotations or {}},
                         "spec": {"containers": [{"name": "c", "resources": resources}]}, "status": {}}
    if owner:
        p["metadata"]["ownerReferences"] = [{"kind": owner, "name": "x", "apiVersion": "apps/v1", "uid": "u"}]
    if node_name:
        p["spec"]["nodeName"] = node_name
        p["status"]["phase"] = "Running"
    if scheduled_at is not None:
        p["status"]["conditions"] = [{"type": "PodScheduled", "status": "True",
                                      "lastTransitionTime": ts(scheduled_at)}]
    return p


def pod_metric(name: str, cpu: str, memory: str = "1Gi", priority: str = "koord-prod") -> dict[str, Any]:
    return {"namespace": "default", "name": name, "priority": priority,
            "podUsage": {"resources": {"cpu": cpu, "memory": memory}}}


def cluster(*objs: Any) -> Cluster:
    return build_cluster(list(objs))


def plugin(**kw: Any) -> LoadAware:
    return LoadAware(LoadAwareArgs(**kw), now=lambda: NOW)


def n1(c: Cluster) -> NodeInfo:
    return c.nodes["n1"]


# ---- args ----

def test_defaults() -> None:
    a = LoadAwareArgs()
    assert a.filter_expired_node_metrics is True
    assert a.node_metric_expiration_seconds == 180
    assert a.enable_schedule_when_node_metrics_expired is False
    assert a.resource_weights == {"cpu": 1, "memory": 1}
    assert a.usage_thresholds == {"cpu": 65, "memory": 95}
    assert a.estimated_scaling_factors == {"cpu": 85, "memory": 70}
    assert a.prod_usage_thresholds == {} and a.aggregated is None and a.dominant_resource_weight == 0


def test_args_from_dict_and_validation() -> None:
    a = LoadAwareArgs.from_dict({"usageThresholds": {"cpu": 50}, "estimatedScalingFactors": {"cpu": 100},
                                 "aggregated": {"usageThresholds": {"cpu": 60}, "usageAggregationType": "p95",
                                                "usageAggregatedDuration": "5m"},
                                 "dominantResourceWeight": 2})
    assert a.usage_thresholds == {"cpu": 50}
    assert a.estimated_scaling_factors == {"cpu": 100, "memory": 70}  # missing keys filled from defaults
    assert a.resource_weights == {}  # not defaulted when dominantResourceWeight != 0
    assert a.aggregated == AggregatedArgs({"cpu": 60}, "p95", 300.0)
    with pytest.raises(InvalidInput):
        LoadAwareArgs.from_dict({"nodeMetricExpirationSeconds": 0})
    with pytest.raises(InvalidInput):
        LoadAwareArgs.from_dict({"dominantResourceWeight": 101})
    with pytest.raises(InvalidInput):
        LoadAwareArgs.from_dict({"resourceWeights": {"nvidia.com/gpu": 1}})
    with pytest.raises(InvalidInput):
        LoadAwareArgs.from_dict({"usageThreshold": {"cpu": 1}})  # typo


# ---- estimator ----

def test_estimator_defaults_without_requests() -> None:
    assert plugin().estimate(pod("p")) == {"cpu": 250, "memory": 200 * MI}


def test_estimator_scaling_and_limits() -> None:
    p = plugin()
    assert p.estimate(pod("p", "1", "1Gi")) == {"cpu": 850, "memory": round(GI * 0.7)}
    # limit above request: the limit is scaled, capped at the limit
    assert p.estimate(pod("p", "1", "1Gi", limits={"cpu": "2", "memory": "2Gi"})) == \
        {"cpu": 1700, "memory": round(2 * GI * 0.7)}
    # factor 100 with a limit: capped at the limit
    p2 = plugin(estimated_scaling_factors={"cpu": 150})
    assert p2.estimate(pod("p", "1", limits={"cpu": "1"}))["cpu"] == 1000


def test_estimator_batch_pod_uses_batch_resources() -> None:
    p = pod("b", labels={"koordinator.sh/priority-class": "koord-batch"})
    p["spec"]["containers"][0]["resources"] = {"requests": {"kubernetes.io/batch-cpu": "2000",
                                                            "kubernetes.io/batch-memory": "4Gi"}}
    assert plugin().estimate(p) == {"cpu": 1700, "memory": round(4 * GI * 0.7)}


def test_estimator_custom_annotation_only_when_allowed() -> None:
    p = pod("p", "1", annotations={"scheduling.koordinator.sh/load-estimated-scaling-factors": '{"cpu": 50}'})
    assert plugin().estimate(p)["cpu"] == 850
    assert plugin(allow_customize_estimation=True).estimate(p)["cpu"] == 500


# ---- filter ----

def test_filter_usage_threshold_rounding() -> None:
    # 6000m + 250m estimate = 62.5% → 63 ≤ 65
    c = cluster(node(), nodemetric(cpu="6"))
    assert plugin().filter(pod("p"), n1(c), c) is None
    # 6300m + 250m = 65.5% → 66 > 65
    c = cluster(node(), nodemetric(cpu="6300m"))
    assert plugin().filter(pod("p"), n1(c), c) == "node(s) cpu usage exceed threshold"
    # memory: 95% threshold
    c = cluster(node(), nodemetric(memory="96Gi"))
    assert plugin().filter(pod("p"), n1(c), c) == "node(s) memory usage exceed threshold"


def test_filter_passes_without_nodemetric_or_thresholds_or_for_daemonsets() -> None:
    c = cluster(node())
    assert plugin().filter(pod("p"), n1(c), c) is None
    hot = cluster(node(), nodemetric(cpu="10"))
    assert plugin(usage_thresholds={}).filter(pod("p"), n1(hot), hot) is None
    assert plugin().filter(pod("ds", owner="DaemonSet"), n1(hot), hot) is None


def test_filter_expired_metrics() -> None:
    c = cluster(node(), nodemetric(age=180))
    assert plugin().filter(pod("p"), n1(c), c) == "node(s) nodeMetric expired"
    assert plugin(enable_schedule_when_node_metrics_expired=True).filter(pod("p"), n1(c), c) is None
    assert plugin(filter_expired_node_metrics=False).filter(pod("p"), n1(c), c) is None
    fresh = cluster(node(), nodemetric(age=179))
    assert plugin().filter(pod("p"), n1(fresh), fresh) is None
    nm = nodemetric()
    del nm["status"]["updateTime"]
    c = cluster(node(), nm)
    assert plugin().filter(pod("p"), n1(c), c) == "node(s) nodeMetric expired"


def test_filter_prod_thresholds() -> None:
    prod_labels = {"koordinator.sh/priority-class": "koord-prod"}
    running = pod("web", "1", node_name="n1", labels=prod_labels, scheduled_at=NOW - 3600)
    c = cluster(node(), nodemetric(cpu="9", pods=[pod_metric("web", "4")]), running)
    incoming = pod("new", labels=prod_labels)
    # prod usage 4000 + 250 = 42.5% → 43
    assert plugin(prod_usage_thresholds={"cpu": 43}).filter(incoming, n1(c), c) is None
    assert plugin(prod_usage_thresholds={"cpu": 42}).filter(incoming, n1(c), c) == \
        "node(s) cpu usage exceed threshold"
    # a non-prod (BestEffort → batch) pod is judged by usageThresholds on node usage (9000+250 > 65%)
    assert plugin(prod_usage_thresholds={"cpu": 43}).filter(pod("be"), n1(c), c) == \
        "node(s) cpu usage exceed threshold"
    # prodUsageIncludeSys adds systemUsage
    c2 = cluster(node(), nodemetric(cpu="9", pods=[pod_metric("web", "4")], system={"cpu": "1"}), running)
    # 4000 + 1000 + 250 = 52.5% → 53
    assert plugin(prod_usage_thresholds={"cpu": 53}, prod_usage_include_sys=True).filter(incoming, n1(c2), c2) \
        is None
    assert plugin(prod_usage_thresholds={"cpu": 52}, prod_usage_include_sys=True).filter(incoming, n1(c2), c2) \
        == "node(s) cpu usage exceed threshold"


def aggregates(p95_5m: str | None, p95_30m: str | None) -> list[dict[str, Any]]:
    def usage(cpu: str | None) -> dict[str, Any]:
        return {"p95": {"resources": {"cpu": cpu, "memory": "10Gi"}}} if cpu else {"p95": {}}
    return [{"duration": "5m0s", "usage": usage(p95_5m)}, {"duration": "30m0s", "usage": usage(p95_30m)}]


def test_filter_aggregated_thresholds_replace_usage_thresholds() -> None:
    c = cluster(node(), nodemetric(cpu="1", aggregated=aggregates("6", "3")))
    agg5 = AggregatedArgs({"cpu": 50}, "p95", 300)
    assert plugin(aggregated=agg5).filter(pod("p"), n1(c), c) == "node(s) cpu aggregated usage exceed threshold"
    # duration absent ⇒ the longest reported window (30m: 3000+250 → 33%)
    assert plugin(aggregated=AggregatedArgs({"cpu": 50}, "p95")).filter(pod("p"), n1(c), c) is None
    # the longest *non-empty* window
    c = cluster(node(), nodemetric(cpu="1", aggregated=aggregates("6", None)))
    assert plugin(aggregated=AggregatedArgs({"cpu": 50}, "p95")).filter(pod("p"), n1(c), c) is not None
    # nothing aggregated ⇒ nodeUsage
    c = cluster(node(), nodemetric(cpu="6", aggregated=aggregates(None, None)))
    assert plugin(aggregated=AggregatedArgs({"cpu": 50}, "p95")).filter(pod("p"), n1(c), c) is not None
    # aggregated type without thresholds ⇒ ordinary usageThresholds
    c = cluster(node(), nodemetric(cpu="7", aggregated=aggregates("1", "1")))
    assert plugin(aggregated=AggregatedArgs({}, "p95")).filter(pod("p"), n1(c), c) == \
        "node(s) cpu usage exceed threshold"


def test_filter_aggregated_missing_window_falls_back_to_estimates() -> None:
    """**[quirk]** mirrored: a configured window that is not reported ⇒ Σ full estimates of assigned pods."""
    busy = [pod(f"p{i}", "2", node_name="n1", scheduled_at=NOW - 3600) for i in range(3)]  # 3 × 1700m
    c = cluster(node(), nodemetric(cpu="9", aggregated=aggregates("9", None)), *busy)
    args = AggregatedArgs({"cpu": 55}, "p95", 600)  # 10m: not reported
    assert plugin(aggregated=args).filter(pod("p"), n1(c), c) is None  # 5100 + 250 → 54%
    args = AggregatedArgs({"cpu": 53}, "p95", 600)
    assert plugin(aggregated=args).filter(pod("p"), n1(c), c) is not None


def test_node_annotation_overrides_thresholds() -> None:
    ann = {"scheduling.koordinator.sh/usage-thresholds": json.dumps({"usageThresholds": {"cpu": 30}})}
    c = cluster(node(annotations=ann), nodemetric(cpu="3"))
    assert plugin().filter(pod("p"), n1(c), c) == "node(s) cpu usage exceed threshold"  # 33% > 30
    c = cluster(node(), nodemetric(cpu="3"))
    assert plugin().filter(pod("p"), n1(c), c) is None


def test_raw_allocatable_annotation_overrides_capacity() -> None:
    ann = {"node.koordinator.sh/raw-allocatable": json.dumps({"cpu": "20"})}
    c = cluster(node(annotations=ann), nodemetric(cpu="8"))
    assert plugin().filter(pod("p"), n1(c), c) is None  # 8250/20000


# ---- assigned-but-not-reported pods ----

def test_unreported_assigned_pod_counted_fully() -> None:
    # 5000m used + assigned-not-reported pod requesting 2 cores (est 1700) + incoming 250 = 69.5% → 70 > 65
    assigned = pod("fresh", "2", node_name="n1", scheduled_at=NOW - 3600)
    c = cluster(node(), nodemetric(cpu="5"), assigned)
    assert plugin().filter(pod("p"), n1(c), c) == "node(s) cpu usage exceed threshold"
    c = cluster(node(), nodemetric(cpu="5"))
    assert plugin().filter(pod("p"), n1(c), c) is None


def test_reported_pod_counted_only_within_report_window() -> None:
    nm = nodemetric(cpu="5", age=10, pods=[pod_metric("web", "500m")])
    old = pod("web", "2", node_name="n1", scheduled_at=NOW - 3600)
    c = cluster(node(), nm, old)
    assert plugin().filter(pod("p"), n1(c), c) is None  # reported, old: already in nodeUsage
    # scheduled 30 s before the update (within reportIntervalSeconds 60): delta = 1700 − 500
    recent = pod("web", "2", node_name="n1", scheduled_at=NOW - 40)
    c = cluster(node(), nm, recent)
    assert plugin().filter(pod("p"), n1(c), c) is None  # 5000 + 1200 + 250 = 64.5% → 65 ≤ 65
    assert plugin(usage_thresholds={"cpu": 64}).filter(pod("p"), n1(c), c) == \
        "node(s) cpu usage exceed threshold"


def test_deadline_after_scheduled_keeps_pod_estimated() -> None:
    nm = nodemetric(cpu="5", age=10, pods=[pod_metric("web", "500m")])
    old = pod("web", "2", node_name="n1", scheduled_at=NOW - 600)
    c = cluster(node(), nm, old)
    p = plugin(usage_thresholds={"cpu": 64}, estimated_seconds_after_pod_scheduled=900)
    assert p.filter(pod("p"), n1(c), c) == "node(s) cpu usage exceed threshold"
    p = plugin(usage_thresholds={"cpu": 64}, estimated_seconds_after_pod_scheduled=300)
    assert p.filter(pod("p"), n1(c), c) is None


def test_assumed_pod_uses_injectable_clock() -> None:
    clock = [NOW]
    la = LoadAware(LoadAwareArgs(), now=lambda: clock[0])
    c = cluster(node(), nodemetric(cpu="5", age=10, pods=[pod_metric("x", "1")]))
    placed = pod("x", "2")
    la.reserve(placed, n1(c), c)
    c.assume(placed, "n1")
    # assumed now (after the NodeMetric update) ⇒ counted: 5000 + (1700 − 1000) + 250 = 59.5% → 60
    assert la.filter(pod("p"), n1(c), c) is None
    la2 = LoadAware(LoadAwareArgs(usage_thresholds={"cpu": 59}), now=lambda: clock[0])
    la2.reserve(placed, n1(c), c)
    assert la2.filter(pod("p"), n1(c), c) == "node(s) cpu usage exceed threshold"
    # assumed long before the update and reported ⇒ no longer a delta
    la3 = LoadAware(LoadAwareArgs(usage_thresholds={"cpu": 59}), now=lambda: NOW - 3600)
    la3.reserve(placed, n1(c), c)
    la3.now = lambda: NOW
    assert la3.filter(pod("p"), n1(c), c) is None


# ---- score ----

def test_score_formula() -> None:
    c = cluster(node(), nodemetric(cpu="2", memory="20Gi"))
    # cpu: (10000 − 2250)·100//10000 = 77; memory: (100Gi − 20Gi − 200Mi)·100//100Gi = 79
    assert plugin().score(pod("p"), n1(c), c) == (77 + 79) // 2
    assert plugin(resource_weights={"cpu": 3, "memory": 1}).score(pod("p"), n1(c), c) == (77 * 3 + 79) // 4
    # dominant resource weight: (77 + 79 + 2·77) // 4
    assert plugin(dominant_resource_weight=2).score(pod("p"), n1(c), c) == (77 + 79 + 2 * 77) // 4


def test_score_dominant_min_includes_weightless_resources() -> None:
    """**[quirk]** mirrored: a weight-0 resource the node lacks (capacity 0) drags the dominant term to 0."""
    c = cluster(node(), nodemetric(cpu="2", memory="20Gi"))
    p = plugin(dominant_resource_weight=1, resource_weights={"cpu": 1, "memory": 1},
               estimated_scaling_factors={"nvidia.com/gpu": 100})
    assert p.score(pod("p"), n1(c), c) == (77 + 79 + 0) // 3
    # only the dominant weight: resourceWeights are not defaulted then
    p = plugin(dominant_resource_weight=1)
    assert p.score(pod("p"), n1(c), c) == 77


def test_score_zero_cases() -> None:
    c = cluster(node())
    assert plugin().score(pod("p"), n1(c), c) == 0
    c = cluster(node(), nodemetric(age=500))
    assert plugin(filter_expired_node_metrics=False).score(pod("p"), n1(c), c) == 0
    c = cluster(node(), nodemetric(cpu="12"))
    assert plugin(resource_weights={"cpu": 1}).score(pod("p"), n1(c), c) == 0  # over capacity
    nm = nodemetric()
    del nm["status"]["nodeMetric"]
    c = cluster(node(), nm)
    assert plugin().score(pod("p"), n1(c), c) == 0


def test_score_aggregated_and_prod() -> None:
    c = cluster(node(), nodemetric(cpu="1", memory="20Gi", aggregated=aggregates("5", None)))
    p = plugin(resource_weights={"cpu": 1}, aggregated=AggregatedArgs(score_aggregation_type="p95"))
    assert p.score(pod("p"), n1(c), c) == (10000 - 5250) * 100 // 10000
    prod = {"koordinator.sh/priority-class": "koord-prod"}
    web = pod("web", "1", node_name="n1", labels=prod, scheduled_at=NOW - 3600)
    c = cluster(node(), nodemetric(cpu="8", pods=[pod_metric("web", "1")]), web)
    p = plugin(resource_weights={"cpu": 1}, score_according_prod_usage=True)
    assert p.score(pod("new", labels=prod), n1(c), c) == (10000 - 1250) * 100 // 10000
    assert p.score(pod("be"), n1(c), c) == (10000 - 8250) * 100 // 10000


# ---- NodeMetric fixtures are real NodeMetrics ----

def test_fixture_nodemetrics_match_crd(validate_crd: Callable[[str, dict[str, Any]], None]) -> None:
    validate_crd(CRD, nodemetric())
    validate_crd(CRD, nodemetric(pods=[pod_metric("web", "1")], aggregated=aggregates("5", None),
                                 system={"cpu": "1"}))


# ---- end to end ----

def test_scheduler_steers_away_from_hot_node_and_explains() -> None:
    c = cluster(node("hot"), node("warm"), node("cool"),
                nodemetric("hot", cpu="9"), nodemetric("warm", cpu="4"), nodemetric("cool", cpu="1"))
    la = LoadAware(LoadAwareArgs(), now=lambda: NOW)
    sched = Scheduler(c, [NodeResourcesFit(), la], [la], [la])
    placement = sched.schedule(pod("a", "500m", "1Gi"))
    assert placement.node == "cool"
    assert "hot" not in placement.scores  # filtered out
    # every node too hot ⇒ the reason says why
    c = cluster(node("hot"), node("hotter"), nodemetric("hot", cpu="9"), nodemetric("hotter", cpu="9500m"))
    la = LoadAware(LoadAwareArgs(), now=lambda: NOW)
    placement = Scheduler(c, [NodeResourcesFit(), la], [la], [la]).schedule(pod("b", "500m"))
    assert placement.node is None
    assert placement.reason == "0/2 nodes are available: 2 node(s) cpu usage exceed threshold."


def test_scheduler_counts_pods_it_just_placed() -> None:
    """Pods placed in this run are not in any NodeMetric yet: their estimates spread the next pods."""
    c = cluster(node("a"), node("b"), nodemetric("a", cpu="1"), nodemetric("b", cpu="1"))
    la = LoadAware(LoadAwareArgs(resource_weights={"cpu": 1}), now=lambda: NOW)
    sched = Scheduler(c, [la], [la], [la])
    nodes = [str(sched.schedule(pod(f"p{i}", "2")).node) for i in range(4)]
    assert sorted(nodes) == ["a", "a", "b", "b"]
