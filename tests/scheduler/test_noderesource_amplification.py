"""koord-manager's ResourceAmplification plugin in `koord-sched noderesource` and `simulate`: the ratio annotation
from `resource-amplification-config` × the node's CPU normalization ratio (restating upstream's
resourceamplification plugin_test.go: TestPluginCalculate, TestPluginNeedSyncMeta)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import kmock
import pytest
import yaml

from apis.client.kubeapi import KubeClient, KubeConfig
from scheduler.cli import main
from scheduler.noderesource.amplification import (
    AmplificationConfig,
    AmplificationStrategy,
    annotation_patch,
    desired_annotation,
    parse_amplification_config,
)
from scheduler.noderesource.controller import NodeResourceController
from scheduler.noderesource.strategy import ConfigError

RATIO = "node.koordinator.sh/resource-amplification-ratio"
NORMALIZATION = "node.koordinator.sh/cpu-normalization-ratio"
CMS = "v1/configmaps"


def node(name: str = "test-node", annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
         cpu: str = "4") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": dict(annotations or {}), "labels": dict(labels or {})},
            "status": {"allocatable": {"cpu": cpu, "memory": "16Gi", "pods": "110"},
                       "capacity": {"cpu": cpu, "memory": "16Gi", "pods": "110"}}}


def enabled(**ratios: float) -> AmplificationConfig:
    return AmplificationConfig(AmplificationStrategy(True, ratios))


def slo_config(amplification: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "slo-controller-config", "namespace": "koordinator-system"},
            "data": {"resource-amplification-config": json.dumps(amplification)}}


@pytest.mark.parametrize(("case", "config", "normalization", "want"), [
    ("calculate ratio correctly with cpu normalization", AmplificationConfig(), "1.22", '{"cpu":1.22}'),
    ("calculate ratio correctly without cpu normalization", AmplificationConfig(), None, None),
    ("calculate ratio with amplification ratio", enabled(cpu=1.1, memory=2.1), None, '{"cpu":1.10,"memory":2.10}'),
    ("both cpu normalization ratio and amplification ratio", enabled(cpu=1.5, memory=2.5), "1.20",
     '{"cpu":1.80,"memory":2.50}'),
    ("cpu normalization ratio and amplification memory ratio", enabled(memory=3.5), "1.50",
     '{"cpu":1.50,"memory":3.50}'),
    ("cpu normalization ratio and other resource type ratio", enabled(memory=3.5, storage=1.8), "1.50",
     '{"cpu":1.50,"memory":3.50,"storage":1.80}'),
    ("final cpu ratio > 1", enabled(cpu=0.8, memory=3.5, storage=1.8), "1.50",
     '{"cpu":1.20,"memory":3.50,"storage":1.80}'),
    ("disabled: the configured ratios do not count", AmplificationConfig(AmplificationStrategy(False, {"cpu": 2})),
     None, None),
])
def test_calculate(case: str, config: AmplificationConfig, normalization: str | None, want: str | None) -> None:
    annotations = {NORMALIZATION: normalization} if normalization is not None else {}
    assert desired_annotation(config, node(annotations=annotations)) == want, case


@pytest.mark.parametrize(("case", "config", "normalization", "why"), [
    ("get cpu normalization ratio failed", AmplificationConfig(), "invalid", "cpu normalization ratio"),
    ("final cpu ratio < 1 invalid", enabled(cpu=0.5, memory=3.5, storage=1.8), "1.50", "resource type cpu"),
    ("one resource amplification ratio invalid", enabled(memory=3.5, storage=0.5), "1.50", "resource type storage"),
])
def test_calculate_refusals(case: str, config: AmplificationConfig, normalization: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        desired_annotation(config, node(annotations={NORMALIZATION: normalization}))


def test_need_sync_meta() -> None:
    """Written when it appears, disappears or changes; not when it stays (empty or the same)."""
    config = enabled(cpu=1.12)
    assert annotation_patch(config, node()) == {RATIO: '{"cpu":1.12}'}  # old ratio is empty
    assert annotation_patch(config, node(annotations={RATIO: '{"cpu":1.12}'})) is None  # unchanged
    assert annotation_patch(config, node(annotations={RATIO: '{"cpu":1.23}'})) == {RATIO: '{"cpu":1.12}'}
    assert annotation_patch(AmplificationConfig(), node(annotations={RATIO: '{"cpu":1.12}'})) == {RATIO: None}
    assert annotation_patch(AmplificationConfig(), node()) is None  # remains empty


def test_config_node_configs_merge_over_the_cluster_strategy() -> None:
    config = parse_amplification_config(slo_config({
        "enable": True, "resourceAmplificationRatio": {"cpu": 1.5},
        "nodeConfigs": [{"name": "big", "nodeSelector": {"matchLabels": {"pool": "big"}},
                         "resourceAmplificationRatio": {"memory": 2}},
                        {"name": "off", "nodeSelector": {"matchLabels": {"pool": "off"}}, "enable": False}]}))
    assert desired_annotation(config, node()) == '{"cpu":1.50}'
    assert desired_annotation(config, node(labels={"pool": "big"})) == '{"cpu":1.50,"memory":2.00}'
    assert desired_annotation(config, node(labels={"pool": "off"})) is None
    assert parse_amplification_config(None) == AmplificationConfig()
    with pytest.raises(ConfigError, match=r"resourceAmplificationRatio\.cpu: want a number"):
        parse_amplification_config(slo_config({"enable": True, "resourceAmplificationRatio": {"cpu": "2"}}))


async def test_the_loop_writes_and_removes_the_annotation(kmock: kmock.KubernetesEmulator) -> None:
    for res in ("v1/nodes", "v1/pods", CMS):
        kmock.resources[res] = {}
    kmock.objects["v1/nodes", None, "n1"] = node("n1", {NORMALIZATION: "1.2"})
    kmock.objects[CMS, "koordinator-system", "slo-controller-config"] = slo_config(
        {"enable": True, "resourceAmplificationRatio": {"cpu": 1.5}})
    ctl = NodeResourceController(KubeClient(KubeConfig(server=str(kmock.url))))
    first = await asyncio.to_thread(ctl.run_once)
    assert first.annotation_writes == 1
    assert kmock.objects["v1/nodes", None, "n1"].raw["metadata"]["annotations"][RATIO] == '{"cpu":1.80}'
    assert (await asyncio.to_thread(ctl.run_once)).annotation_writes == 0
    kmock.objects[CMS, "koordinator-system", "slo-controller-config"] = slo_config({"enable": False})
    del kmock.objects["v1/nodes", None, "n1"].raw["metadata"]["annotations"][NORMALIZATION]
    assert (await asyncio.to_thread(ctl.run_once)).annotation_writes == 1
    assert RATIO not in kmock.objects["v1/nodes", None, "n1"].raw["metadata"]["annotations"]


def simulate_cpu_pods(tmp_path: Path, capsys: pytest.CaptureFixture[str], cluster: list[dict[str, Any]],
                      count: int) -> list[str | None]:
    pods = [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}", "namespace": "default"},
             "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}} for i in range(count)]
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump_all(cluster))
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all(pods))
    rc = main(["simulate", "--cluster", str(tmp_path / "cluster.yaml"), "--pods", str(tmp_path / "pods.yaml"),
               "-o", "json"])
    assert rc == 0
    return [p["node"] for p in json.loads(capsys.readouterr().out)["placements"]]


def test_simulate_gives_a_node_without_the_annotation_the_computed_one(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """`resource-amplification-config` enabled with cpu ×1.5 on a node normalised ×1.2: its 4 CPUs read as
    4 × 1.80 = 7.2, so seven 1-CPU pods fit; a node whose directory already carries a ratio keeps it."""
    config = slo_config({"enable": True, "resourceAmplificationRatio": {"cpu": 1.5}})
    placed = simulate_cpu_pods(tmp_path, capsys, [node("n1", {NORMALIZATION: "1.2"}), config], 8)
    assert placed == ["n1"] * 7 + [None]
    kept = simulate_cpu_pods(tmp_path, capsys, [node("n1", {NORMALIZATION: "1.2", RATIO: '{"cpu":1.00}'}), config], 5)
    assert kept == ["n1"] * 4 + [None]
