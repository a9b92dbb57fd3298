"""Peak prediction: upstream's histogram cases, training from the metric cache, the Prod reclaimable predictors,
checkpoints surviving a restart, and the NodeMetric and metrics that carry the result."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from apis.core.quantity import parse_quantity
from koordlet.metriccache import MetricCache
from koordlet.prediction.histogram import DecayingHistogram, ExponentialBuckets, LinearBuckets, parse_go_time
from koordlet.prediction.predictor import node_allocatable, predict
from koordlet.prediction.server import (
    CPU_BUCKETS,
    MEMORY_BUCKETS,
    NODE_UID,
    PeakPredictServer,
    PredictionConfig,
    node_item_uid,
    training_pods,
)

HOUR = 3600.0
START = 1234567890.0
GI = 1 << 30
NOW = 1_800_000_000.0
LINEAR = LinearBuckets(10.0, 1.0, 1e-15)


# -- histograms: upstream pkg/util/histogram tests ----------------------------------------------------------------
def test_exponential_buckets() -> None:
    o = ExponentialBuckets(500.0, 40.0, 1.5, 0.001)
    assert o.count == 6
    assert [o.start(b) for b in range(6)] == [0.0, 40.0, 100.0, 190.0, 325.0, 527.5]
    assert [o.find(v) for v in (-1.0, 39.99, 40.0, 100.0, 900.0)] == [0, 0, 1, 2, 5]
    assert CPU_BUCKETS.start(1) == pytest.approx(0.025) and CPU_BUCKETS.start(CPU_BUCKETS.count - 1) > 1024 / 1.05
    assert MEMORY_BUCKETS.start(MEMORY_BUCKETS.count - 1) >= (1 << 41) / 1.05


def test_decay() -> None:
    h = DecayingHistogram(LINEAR, HOUR)
    assert all(h.percentile(p) == 0.0 for p in (-0.5, 0, 0.5, 1, 1.5))
    h.add(2, 1000, START)
    h.add(1, 1, START + 20 * HOUR)  # 2^20 times heavier than a sample 20 half-lives older
    assert h.percentile(0.999) == pytest.approx(2) and h.percentile(1.0) == pytest.approx(3)
    long_term = DecayingHistogram(LINEAR, HOUR)
    long_term.add(2, 1, START)
    long_term.add(1, 1, START + 101 * HOUR)  # past maxDecayExponent: the reference moves, old weight vanishes
    assert long_term.percentile(1.0) == pytest.approx(2)


def test_decaying_percentiles() -> None:
    h = DecayingHistogram(LINEAR, HOUR)
    for i in range(1, 5):
        h.add(float(i), float(i), START + (i - 1) * HOUR)
    expected = {0.0: 2, 0.02: 2, 0.03: 3, 0.10: 3, 0.11: 4, 0.34: 4, 0.35: 5, 1.0: 5}
    assert {p: h.percentile(p) for p in expected} == pytest.approx(expected)
    flat = DecayingHistogram(LINEAR, HOUR)
    for i in range(1, 5):
        flat.add(float(i), float(i), START)
    assert [flat.percentile(p / 10) for p in range(11)] == pytest.approx([2, 2, 3, 3, 4, 4, 4, 5, 5, 5, 5])


def test_checkpoint_round_trip() -> None:
    h = DecayingHistogram(LINEAR, HOUR)
    h.add(2, 1, START + 100 * HOUR)
    ckpt = json.loads(json.dumps(h.checkpoint()))
    assert ckpt["bucketWeights"] and ckpt["totalWeight"] and parse_go_time(ckpt["referenceTimestamp"]) == h.reference
    loaded = DecayingHistogram(LINEAR, HOUR)
    loaded.load({"totalWeight": 6.0, "bucketWeights": {"0": 1}, "referenceTimestamp": "2018-01-02T03:04:05Z"})
    assert not loaded.empty and loaded.reference == parse_go_time("2018-01-02T03:04:05Z")
    with pytest.raises(ValueError, match="outside"):
        DecayingHistogram(LINEAR, HOUR).load({"totalWeight": 1.0, "bucketWeights": {"99": 1}})


# -- training and prediction --------------------------------------------------------------------------------------
def upper(buckets: ExponentialBuckets, value: float) -> float:
    """What a single-valued histogram answers for any percentile: the end of the value's bucket."""
    b = math.floor(math.log(value * (buckets.ratio - 1) / buckets.first + 1) / math.log(buckets.ratio))
    return buckets.first * (buckets.ratio ** (b + 1) - 1) / (buckets.ratio - 1)


def pod(name: str, uid: str, cpu: str, memory: str, *, qos: str = "LS", created: str = "2020-01-01T00:00:00Z",
        phase: str = "Running") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "uid": uid, "creationTimestamp": created,
                         "labels": {"koordinator.sh/qosClass": qos}},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]},
            "status": {"phase": phase}}


def fill(cache: MetricCache, now: float, series: dict[tuple[str, ...], float]) -> None:
    for second in range(60):
        for key, value in series.items():
            cache.append(key, int((now - 59 + second) * 1000), value)


def trained(tmp_path: Path, pods: list[dict[str, Any]], usage: dict[str, tuple[float, float]],
            node: tuple[float, float], rounds: int = 3) -> PeakPredictServer:
    """A server trained `rounds` times, a minute apart, on constant usage (cores, bytes) per pod uid."""
    cache = MetricCache(lambda _: 3600.0)
    server = PeakPredictServer(PredictionConfig(), cache, str(tmp_path / "ckpt"))
    key = cache.key
    for r in range(rounds):
        now = NOW + 60 * r
        series = {key("node_cpu_usage"): node[0], key("node_memory_usage"): node[1]}
        for uid, (cpu, mem) in usage.items():
            series |= {key("pod_cpu_usage", pod_uid=uid): cpu, key("pod_memory_usage", pod_uid=uid): mem}
        fill(cache, now, series)
        server.train(training_pods(pods), now)
    return server


NODE = {"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "16", "memory": "64Gi"}}}


def test_prod_reclaimable_and_peak(tmp_path: Path) -> None:
    """Prod pod A asks 4 cores / 8Gi and uses 1 / 2Gi; the batch pod does not count; the node uses 3 / 6Gi, so the
    system is 3 − 1 − 0.5 = 1.5 cores. Pod predictor: 4 − peak(1) × 1.1; priority predictor: 4 − (peak(sys) +
    peak(prod) + peak(none)) × 1.1; the smaller wins and the larger peak is reported. The priority-less class has
    no pod, and a histogram of zeros answers the end of its first bucket (0.025 cores, 5 MiB), as upstream's."""
    pods = [pod("a", "uid-a", "4", "8Gi"), pod("b", "uid-b", "2", "4Gi", qos="BE")]
    server = trained(tmp_path, pods, {"uid-a": (1.0, 2 * GI), "uid-b": (0.5, GI)}, (3.0, 6 * GI))
    out = predict(server, PredictionConfig(), NODE, pods, NOW + 120)
    pod_peak_cpu = int(int(upper(CPU_BUCKETS, 1.0) * 1000) * 1.1)
    prio_cpu = int((int(upper(CPU_BUCKETS, 1.5) * 1000) + int(upper(CPU_BUCKETS, 1.0) * 1000) + 25) * 1.1)
    prio_mem = int((int(upper(MEMORY_BUCKETS, 3 * GI)) + int(upper(MEMORY_BUCKETS, 2 * GI)) + (5 << 20)) * 1.1)
    assert out.error == "" and out.reclaimable is not None and out.peak is not None
    assert out.reclaimable == {"cpu": min(4000 - pod_peak_cpu, 4000 - prio_cpu),
                               "memory": max(min(8 * GI - int(int(upper(MEMORY_BUCKETS, 2 * GI)) * 1.1),
                                                 8 * GI - prio_mem), 0)}
    assert out.peak == {"cpu": max(pod_peak_cpu, prio_cpu), "memory": prio_mem}
    assert set(out.by_predictor) == {"podReclaimablePredictor", "priorityReclaimablePredictor", "minPredictor"}


def test_a_native_sidecar_counts_in_the_prod_request(tmp_path: Path) -> None:
    """A pod whose app asks 2 cores / 6Gi beside a native sidecar (restartPolicy Always) asking 2 cores / 2Gi asks
    4 cores / 8Gi, as Kubernetes counts it: predicted exactly as the one-container pod of the test above."""
    whole = pod("a", "uid-a", "4", "8Gi")
    split = pod("a", "uid-a", "2", "6Gi")
    split["spec"]["initContainers"] = [{"name": "proxy", "restartPolicy": "Always",
                                        "resources": {"requests": {"cpu": "2", "memory": "2Gi"}}}]
    server = trained(tmp_path, [whole], {"uid-a": (1.0, 2 * GI)}, (3.0, 6 * GI))
    expected = predict(server, PredictionConfig(), NODE, [whole], NOW + 120)
    got = predict(server, PredictionConfig(), NODE, [split], NOW + 120)
    app_only = predict(server, PredictionConfig(), NODE, [pod("a", "uid-a", "2", "6Gi")], NOW + 120)
    assert app_only.reclaimable != expected.reclaimable  # the sidecar's request matters to the answer
    assert (got.reclaimable, got.peak) == (expected.reclaimable, expected.peak)


def test_cold_start_unknown_node_and_untrained(tmp_path: Path) -> None:
    young = pod("a", "uid-a", "4", "8Gi", created="2027-01-15T00:00:00Z")  # younger than 24 h at NOW + 120
    server = trained(tmp_path, [young], {"uid-a": (1.0, 2 * GI)}, (3.0, 6 * GI))
    out = predict(server, PredictionConfig(), NODE, [young], NOW + 120)
    assert out.reclaimable == {"cpu": 0, "memory": 0}  # cold start: nothing reclaimable, the request is the peak
    assert out.peak is not None and out.peak["cpu"] >= 4000 and out.peak["memory"] >= 8 * GI
    no_node = predict(server, PredictionConfig(), None, [young], NOW + 120)
    assert no_node.reclaimable is None and no_node.peak is not None and "node is nil" in no_node.error
    empty = PeakPredictServer(PredictionConfig(), MetricCache(lambda _: 60.0), str(tmp_path / "x"))
    untrained = predict(empty, PredictionConfig(), NODE, [young], NOW)
    assert untrained.reclaimable is None and untrained.peak is None and "sys" in untrained.error


def test_checkpoints_survive_a_restart(tmp_path: Path) -> None:
    pods = [pod("a", "uid-a", "4", "8Gi")]
    server = trained(tmp_path, pods, {"uid-a": (1.0, 2 * GI)}, (3.0, 6 * GI))
    before = predict(server, PredictionConfig(), NODE, pods, NOW + 120)
    assert server.checkpoint(NOW + 120) == 8  # pod, node, sys and 5 priority classes; at most 12 a round
    assert server.checkpoint(NOW + 180) == 0  # not due again before model_checkpoint_interval
    ckpt = tmp_path / "ckpt"
    assert json.loads((ckpt / NODE_UID).read_text())["UID"] == NODE_UID
    (ckpt / "gone-pod").write_text("{}")
    (ckpt / "uid-a.tmp").write_text("half")
    (ckpt / node_item_uid("koord-free")).write_text("not json")

    restarted = PeakPredictServer(PredictionConfig(), MetricCache(lambda _: 60.0), str(ckpt))
    assert restarted.restore(["uid-a"]) == 7
    assert sorted(p.name for p in ckpt.iterdir()) == sorted(
        [NODE_UID, "uid-a", *(node_item_uid(i) for i in ("sys", "koord-prod", "koord-mid", "koord-batch", ""))])
    after = predict(restarted, PredictionConfig(), NODE, pods, NOW + 120)
    assert after.reclaimable == before.reclaimable and after.peak == before.peak
    # models not updated for model_expiration_duration are dropped with their files (after a training round)
    restarted.synced = True
    assert "uid-a" in restarted.gc(NOW + 120 + 31 * 60)
    assert not (ckpt / "uid-a").exists()


def test_bad_flags_are_refused() -> None:
    from apis.core.errors import InvalidInput

    with pytest.raises(InvalidInput, match="--prediction-training-interval"):
        PredictionConfig(training_interval=0)


# -- the agent: NodeMetric and metrics ----------------------------------------------------------------------------
def test_nodemetric_carries_the_prediction(simhost: Any, tmp_path: Path, validate_crd: Any) -> None:
    import yaml

    from koordlet.agent import Agent
    from koordlet.config import Config
    from koordlet.host.driver import K8sQoS

    from simhost import SimCgroup, make_pod

    uid = "11111111-2222-3333-4444-555555555555"
    manifest = make_pod("a", uid, "Burstable", labels={"koordinator.sh/qosClass": "LS"})
    manifest["metadata"]["creationTimestamp"] = "2020-01-01T00:00:00Z"  # type: ignore[index]
    manifest["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "4", "memory": "8Gi"}}  # type: ignore[index]
    pods_dir = tmp_path / "pods"
    pods_dir.mkdir()
    (pods_dir / "a.yaml").write_text(yaml.safe_dump(manifest))
    agent = Agent(Config(node_name="node-1", paths=simhost.paths, pods_dir=str(pods_dir),
                         state_dir=str(tmp_path / "state")))
    assert agent.sync_pods()
    rel = simhost.pod_dir(K8sQoS.BURSTABLE, uid)
    for tick in range(61):
        simhost.write_cgroup(rel, SimCgroup(cpu_ns=tick * 1_000_000_000, anon=GI))
        if tick:
            simhost.busy({0: 150})
        agent.collect(now=NOW + tick, mono_ns=tick * 1_000_000_000)
    agent.train_prediction(now=NOW + 60)
    status = agent.build_nodemetric(now=NOW + 60)["status"]
    # standalone: no Node object; the machine stands in (its CPUs and MemTotal), so no warning and a figure
    standalone = status["prodReclaimableMetric"]["resource"]["resources"]
    assert parse_quantity(standalone["cpu"]) <= len(agent.state.node_info().cpu_topology.cpus)
    assert "prodPeakMetric" in status
    agent.state.set_node({"metadata": {"name": "node-1"}, "status": {"allocatable": {"cpu": "8", "memory": "32Gi"}}})
    obj = agent.build_nodemetric(now=NOW + 60)
    validate_crd("slo.koordinator.sh_nodemetrics.yaml", obj)
    reclaimable = obj["status"]["prodReclaimableMetric"]["resource"]["resources"]
    assert set(reclaimable) == {"cpu", "memory"} and set(obj["status"]["prodPeakMetric"]["resource"]["resources"]) == {
        "cpu", "memory"}
    text = agent.metrics.render().decode()
    assert 'koordlet_node_resource_priority_reclaimable_status{node="node-1",priority="koord-prod"} 0.0' in text
    assert 'koordlet_node_predicted_resource_peak{node="node-1",predictor="minPredictor",resource="cpu",unit="core"}' \
        in text
    agent.checkpoint_prediction(now=NOW + 60)
    assert (tmp_path / "state" / "prediction-checkpoints" / uid).is_file()


@pytest.mark.parametrize(("annotation", "cpu"), [
    ('{"cpu": "20", "memory": "64Gi"}', 20000),  # the allocatable before amplification
    ("null", 8000), ("[]", 8000), ("{", 8000),  # no list, or malformed: status.allocatable
    ('{"cpu": "20", "memory": "lots"}', 8000),  # json.Unmarshal fails on one bad quantity: the whole is ignored
])
def test_node_allocatable_reads_the_raw_allocatable_annotation(annotation: str, cpu: int) -> None:
    node = {"metadata": {"annotations": {"node.koordinator.sh/raw-allocatable": annotation}},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi"}}}
    assert node_allocatable(node)["cpu"] == cpu
