"""LowNodeLoad end to end through `simulate`: consecutive abnormalities over rounds, NodeMetric staleness,
raw-allocatable capacity, numberOfNodes, node pools with selectors, podSelectors, the eviction reason
(TestOverUtilizedEvictionReason), evicted pods leaving later rounds, and a round with too few nodes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from deschedbuild import config, evicted, node, node_metrics, pod, protected_pods, simulate

GI = 1024**3
LOW, HIGH = {"cpu": 30, "pods": 30}, {"cpu": 50, "pods": 50}
POOL = "__default_node_pool__"


def worked_example(**metric_kw: Any) -> list[dict[str, Any]]:
    nodes = [node("n1", 4000, 3000, 9), node("n2", 4000, 3000, 10), node("n3", 4000, 3000, 10, unschedulable=True)]
    pods = [*(pod(f"p{i}", 400, 0, "n1") for i in range(1, 6)), *protected_pods(400, 0, "n1"), pod("p9", 400, 0, "n2")]
    return [*nodes, *pods, *node_metrics(nodes, pods, **metric_kw)]


@pytest.mark.parametrize(("abnormalities", "rounds", "expected", "count"), [
    (2, 2, 0, 2), (2, 3, 4, 0), (5, 5, 0, 5), (5, 6, 4, 0)])
def test_consecutive_abnormalities(abnormalities: int, rounds: int, expected: int, count: int, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    """consecutiveAbnormalities N ≥ 2: the node is confirmed hot on the (N+1)-th consecutive round."""
    cfg = config(LOW, HIGH, anomalyCondition={"consecutiveAbnormalities": abnormalities}, top={
        "deschedulingInterval": "10s"})
    result = simulate(tmp_path, worked_example(), cfg, capsys, rounds=rounds)
    assert len(result["evictions"]) == expected
    row = result["nodes"][POOL]["n1"]
    assert row["class"] == "high" and row["abnormalities"] == count


def test_anomaly_expires_after_its_timeout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With evictions impossible (no room on targets), the confirmed node stays in Anomaly only `timeout`."""
    nodes = [node("n1", 4000, 3000, 9), node("n2", 4000, 3000, 10)]
    pods = [*(pod(f"p{i}", 400, 0, "n1", owner="DaemonSet") for i in range(1, 9)), pod("p9", 400, 0, "n2")]
    objects = [*nodes, *pods, *node_metrics(nodes, pods)]
    cfg = config(LOW, HIGH, anomalyCondition={"consecutiveAbnormalities": 2, "timeout": "15s"},
                 top={"deschedulingInterval": "10s"})
    assert simulate(tmp_path, objects, cfg, capsys, rounds=3, now="2024-05-01T00:00:00Z")["nodes"][POOL]["n1"][
        "anomaly"] is True
    # nodeMetricExpirationSeconds keeps the metric fresh over the rounds (180s default: 18 rounds of 10s)
    late = simulate(tmp_path, objects, cfg, capsys, rounds=5)["nodes"][POOL]["n1"]
    assert late["anomaly"] is False


@pytest.mark.parametrize(("update_time", "args", "expected"), [
    ("2024-04-30T23:57:00Z", {}, 0),  # 180s old: expired
    ("2024-04-30T23:57:01Z", {}, 4),
    ("2024-04-30T23:57:00Z", {"nodeMetricExpirationSeconds": 600}, 4),
    (None, {}, 0),  # no updateTime: expired
])
def test_node_metric_staleness(update_time: str | None, args: dict[str, Any], expected: int, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    result = simulate(tmp_path, worked_example(update_time=update_time), config(LOW, HIGH, **args), capsys)
    assert len(result["evictions"]) == expected
    if expected == 0:
        assert result["nodes"][POOL]["n1"]["class"] is None  # not measured


def test_null_node_metric_is_not_measured(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    objects = worked_example()
    for o in objects:
        if o["kind"] == "NodeMetric" and o["metadata"]["name"] == "n1":
            o["status"]["nodeMetric"] = None
    result = simulate(tmp_path, objects, config(LOW, HIGH), capsys)
    assert result["evictions"] == [] and result["nodes"][POOL]["n1"]["class"] is None


@pytest.mark.parametrize(("annotation", "expected"), [
    (None, 0), ('{"cpu":"4","memory":"3000","pods":"9"}', 3), ("{not json", 0)])
def test_raw_allocatable_is_the_capacity(annotation: str | None, expected: int, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Thresholds are percentages of node.koordinator.sh/raw-allocatable when valid, else status.allocatable
    (Test_GetNodeRawAllocatableForDescheduler): n1 amplified to 8 cores reads 40% used; its raw 4 cores 80%, and three
    evictions bring it to 50%."""
    objects = worked_example()
    n1 = objects[0]
    n1["status"]["allocatable"]["cpu"] = "8"
    if annotation is not None:
        n1["metadata"]["annotations"] = {"node.koordinator.sh/raw-allocatable": annotation}
    result = simulate(tmp_path, objects, config({"cpu": 30}, {"cpu": 50}), capsys)
    assert len(result["evictions"]) == expected


@pytest.mark.parametrize(("number", "expected"), [(0, 4), (1, 0)])
def test_number_of_nodes(number: int, expected: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Act only when the low nodes are more than numberOfNodes (one low node here)."""
    result = simulate(tmp_path, worked_example(), config(LOW, HIGH, numberOfNodes=number), capsys)
    assert len(result["evictions"]) == expected


def test_node_pools_with_selectors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each pool classifies its own nodes with its own thresholds; evictions move load within a pool."""
    nodes = [node("a1", 4000, 3000, 20, labels={"pool": "a"}), node("a2", 4000, 3000, 20, labels={"pool": "a"}),
             node("b1", 4000, 3000, 20, labels={"pool": "b"}), node("b2", 4000, 3000, 20, labels={"pool": "b"})]
    pods = [*(pod(f"a1-{i}", 400, 0, "a1") for i in range(6)), *(pod(f"b1-{i}", 400, 0, "b1") for i in range(6))]
    pools = [{"name": "a", "nodeSelector": {"matchLabels": {"pool": "a"}},
              "lowThresholds": {"cpu": 20}, "highThresholds": {"cpu": 50}},
             {"name": "b", "nodeSelector": {"matchLabels": {"pool": "b"}},
              "lowThresholds": {"cpu": 20}, "highThresholds": {"cpu": 70}}]
    result = simulate(tmp_path, [*nodes, *pods, *node_metrics(nodes, pods)], config(nodePools=pools), capsys)
    assert {e["node"] for e in result["evictions"]} == {"a1"}
    assert len(result["evictions"]) == 1  # 2400m → 2000m: at 50% a1 is no longer above its high threshold
    assert result["nodes"]["a"]["a1"]["class"] == "high" and result["nodes"]["b"]["b1"]["class"] == "prodLow"
    assert set(result["nodes"]["a"]) == {"a1", "a2"}
    assert set(result["nodes"][POOL]) == {"a1", "a2", "b1", "b2"}  # the default pool (no thresholds) sees all


def test_pod_selectors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes = [node("n1", 4000, 3000, 9), node("n2", 4000, 3000, 10)]
    pods = [*(pod(f"p{i}", 400, 0, "n1", labels={"tier": "web" if i % 2 else "db"}) for i in range(1, 9)),
            pod("p9", 400, 0, "n2")]
    selectors = [{"name": "web", "selector": {"matchLabels": {"tier": "web"}}}]
    result = simulate(tmp_path, [*nodes, *pods, *node_metrics(nodes, pods)],
                      config(LOW, HIGH, podSelectors=selectors), capsys)
    assert evicted(result) and all(int(name[1:]) % 2 for name in evicted(result))


RAW = '{"cpu":96,"memory":"512Gi"}'


def big_node(name: str) -> dict[str, Any]:
    n = node(name, 96000, 512 * GI, 110)
    n["metadata"]["annotations"] = {"node.koordinator.sh/raw-allocatable": RAW}
    return n


@pytest.mark.parametrize(("usage", "prod_usage", "args", "want"), [
    ((64, 32), None, {}, "node is overutilized, node cpu usage(66.67%)>threshold(50.00%)"),
    ((64, 400), None, {}, "node is overutilized, node cpu usage(66.67%)>threshold(50.00%), "
                          "node memory usage(78.12%)>threshold(50.00%)"),
    ((46, 250), (45, 200), {"prodLowThresholds": {"cpu": 10, "memory": 10},
                            "prodHighThresholds": {"cpu": 40, "memory": 40}},
     "node is overutilized, prod cpu usage(46.88%)>threshold(40.00%)"),
    ((46, 250), (45, 250), {"prodLowThresholds": {"cpu": 10, "memory": 10},
                            "prodHighThresholds": {"cpu": 40, "memory": 40}},
     "node is overutilized, prod cpu usage(46.88%)>threshold(40.00%), prod memory usage(48.83%)>threshold(40.00%)"),
])
def test_over_utilized_eviction_reason(usage: tuple[int, int], prod_usage: tuple[int, int] | None,
                                       args: dict[str, Any], want: str, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """TestOverUtilizedEvictionReason: the overused resources in name order, usage and threshold percentages of
    the raw allocatable; the first eviction's reason is the node's state before it."""
    nodes = [big_node("hot"), big_node("cold")]
    prod_cpu, prod_mem = prod_usage or usage
    n = 9
    pods = [pod(f"prod-{i}", 100, 0, "hot") for i in range(n)]
    metric = {f"default/prod-{i}": {"cpu": f"{prod_cpu * 1000 // n}m", "memory": str(prod_mem * GI // n)}
              for i in range(n)}
    rest_cpu, rest_mem = usage[0] * 1000 - prod_cpu * 1000 // n * n, usage[1] * GI - prod_mem * GI // n * n
    pods.append(pod("batch", 100, 0, "hot", labels={"koordinator.sh/priority-class": "koord-batch"}))
    metric["default/batch"] = {"cpu": f"{rest_cpu}m", "memory": str(rest_mem)}
    cfg = config({"cpu": 10, "memory": 10}, {"cpu": 50, "memory": 50}, **args)
    result = simulate(tmp_path, [*nodes, *pods, *node_metrics(nodes, pods, usage=metric)], cfg, capsys)
    assert result["evictions"] and result["evictions"][0]["reason"] == want


def test_evicted_pods_leave_later_rounds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A pod is evicted at most once: its usage leaves the node, so the later rounds find n1 no longer hot."""
    result = simulate(tmp_path, worked_example(), config(LOW, HIGH), capsys, rounds=3)
    assert sorted(evicted(result)) == ["p1", "p2", "p3", "p4"]
    assert result["nodes"][POOL]["n1"]["class"] == "prodLow"  # between its thresholds; prod ones all 100%


def test_too_few_ready_nodes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    objects = worked_example()
    for o in objects:
        if o["kind"] == "Node" and o["metadata"]["name"] != "n1":
            o["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    result = simulate(tmp_path, objects, config(LOW, HIGH), capsys)
    assert result["evictions"] == []
    assert result["errors"] == [{"round": 1, "error": "the cluster size is 0 or 1 meaning eviction causes service "
                                                      "disruption or degradation"}]


def test_paused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = simulate(tmp_path, worked_example(), config(LOW, HIGH, paused=True), capsys)
    assert result == {"evictions": [], "nodes": {}}


def two_nodes() -> list[dict[str, Any]]:
    """n1: 60% cpu, 50% memory; n2: 10% cpu, 10% memory."""
    nodes = [node("n1", 4000, 10 * GI, 20), node("n2", 4000, 10 * GI, 20)]
    pods = [*(pod(f"p{i}", 400, GI * 5 // 6, "n1") for i in range(6)), pod("q", 400, GI, "n2")]
    return [*nodes, *pods, *node_metrics(nodes, pods)]


@pytest.mark.parametrize(("low", "high", "n1_class"), [
    ({"cpu": 20}, {"cpu": 90, "memory": 10}, "prodLow"),  # memory only high: completed to 100%, never hot
    ({"cpu": 20, "memory": 90}, {"cpu": 90}, "high"),  # memory only low: high stays 0%, any use is hot
])
def test_a_resource_in_one_threshold_map_only(low: dict[str, float], high: dict[str, float], n1_class: str,
                                              tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """[quirk, mirrored] newThresholds completes the maps from the low one: a resource missing from it gets 100%
    in both (overwriting a high threshold given alone); one missing from the high map keeps no high threshold,
    read as 0% — n1 is hot by its memory, and no target has room for any memory either, so nothing moves."""
    result = simulate(tmp_path, two_nodes(), config(low, high), capsys)
    assert result["nodes"][POOL]["n1"]["class"] == n1_class and result["nodes"][POOL]["n2"]["class"] == "bothLow"
    assert result["evictions"] == []


def test_a_pool_without_a_selector_sees_the_nodes_an_earlier_pool_acted_on(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """[quirk, mirrored] filterNodes skips the nodes earlier pools took as sources only for a pool with a
    selector: pool b (no selector) classifies n1 again after pool a acted on it, pool c (a selector) does not see
    it."""
    nodes = [node(n, 4000, 10 * GI, 20, labels={"pool": "x"}) for n in ("n1", "n2")]
    pods = [*(pod(f"p{i}", 400, 0, "n1") for i in range(6)), pod("q", 400, 0, "n2")]
    thresholds = {"lowThresholds": {"cpu": 20}, "highThresholds": {"cpu": 50}}
    pools = [{"name": "a", "nodeSelector": {"matchLabels": {"pool": "x"}}, **thresholds},
             {"name": "b", **thresholds},
             {"name": "c", "nodeSelector": {"matchLabels": {"pool": "x"}}, **thresholds}]
    result = simulate(tmp_path, [*nodes, *pods, *node_metrics(nodes, pods)], config(nodePools=pools), capsys)
    assert result["nodes"]["a"]["n1"]["class"] == "high" and result["nodes"]["b"]["n1"]["class"] == "high"
    assert set(result["nodes"]["c"]) == {"n2"}
    assert {e["node"] for e in result["evictions"]} == {"n1"}
