"""Scheduler config loading (KubeSchedulerConfiguration-style YAML) and the default profile."""

from __future__ import annotations

from pathlib import Path

import pytest

from koordlet.errors import InvalidInput
from scheduler.config import SchedulerConfig, default_profile, load_config, parse_config
from scheduler.plugins.fitplus import NodeResourcesFitPlus
from scheduler.plugins.loadaware import LoadAware
from scheduler.plugins.scarce import ScarceResourceAvoidance

YAML = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: koord-scheduler
  plugins:
    score:
      enabled:
      - name: LoadAwareScheduling
        weight: 3
      - name: NodeResourcesFitPlus
        weight: 2
      - name: ScarceResourceAvoidance
        weight: 1
  pluginConfig:
  - name: LoadAwareScheduling
    args:
      usageThresholds: {cpu: 70}
      nodeMetricExpirationSeconds: 300
      enableScheduleWhenNodeMetricsExpired: true
      aggregated:
        usageThresholds: {cpu: 60}
        usageAggregationType: p95
        usageAggregatedDuration: 5m
        scoreAggregationType: p90
  - name: NodeResourcesFitPlus
    args:
      resources:
        nvidia.com/gpu: {type: MostAllocated, weight: 2}
        cpu: {type: LeastAllocated, weight: 1}
  - name: ScarceResourceAvoidance
    args:
      resources: [nvidia.com/gpu]
"""


def test_defaults_when_absent() -> None:
    cfg = load_config(None)
    assert cfg == SchedulerConfig()
    assert parse_config({}) == SchedulerConfig()
    assert cfg.loadaware.usage_thresholds == {"cpu": 65, "memory": 95}
    filters, scorers = default_profile(cfg)
    assert [type(p) for p in filters if p.name == "LoadAwareScheduling"] == [LoadAware]
    assert [s.weight for s in scorers if s.name == "LoadAwareScheduling"] == [1]


def test_overrides(tmp_path: Path) -> None:
    path = tmp_path / "sched.yaml"
    path.write_text(YAML)
    cfg = load_config(str(path))
    assert cfg.weights == {"LoadAwareScheduling": 3, "NodeResourcesFitPlus": 2, "ScarceResourceAvoidance": 1}
    la = cfg.loadaware
    assert la.usage_thresholds == {"cpu": 70} and la.node_metric_expiration_seconds == 300
    assert la.enable_schedule_when_node_metrics_expired is True
    assert la.aggregated is not None and la.aggregated.usage_aggregated_duration == 300
    assert la.aggregated.score_aggregation_type == "p90"
    assert la.resource_weights == {"cpu": 1, "memory": 1}  # defaulted
    assert cfg.fitplus.resources["nvidia.com/gpu"].type == "MostAllocated"
    assert cfg.scarce.resources == ["nvidia.com/gpu"]
    filters, scorers = default_profile(cfg)
    by_name = {s.name: s for s in scorers}
    assert isinstance(by_name["LoadAwareScheduling"], LoadAware) and by_name["LoadAwareScheduling"].weight == 3
    assert isinstance(by_name["NodeResourcesFitPlus"], NodeResourcesFitPlus)
    assert by_name["NodeResourcesFitPlus"].weight == 2
    assert isinstance(by_name["ScarceResourceAvoidance"], ScarceResourceAvoidance)
    assert by_name["LoadAwareScheduling"] in filters  # the same instance filters and scores


def test_disable() -> None:
    cfg = parse_config({"profiles": [{"plugins": {"multiPoint": {"disabled": [{"name": "*"}]},
                                                  "score": {"enabled": [{"name": "NodeResourcesFitPlus"}]}}}]})
    assert cfg.enabled == ["NodeResourcesFitPlus"]
    filters, scorers = default_profile(cfg)
    assert filters == [] and [s.name for s in scorers] == ["NodeResourcesFitPlus"]


def test_unknown_plugin_names() -> None:
    with pytest.raises(InvalidInput, match="unknown scheduler plugin 'LoadAware'"):
        parse_config({"profiles": [{"pluginConfig": [{"name": "LoadAware", "args": {}}]}]})
    with pytest.raises(InvalidInput, match="unknown scheduler plugin 'Foo'"):
        parse_config({"profiles": [{"plugins": {"score": {"enabled": [{"name": "Foo", "weight": 1}]}}}]})
    with pytest.raises(InvalidInput, match="unknown args"):
        parse_config({"profiles": [{"pluginConfig": [{"name": "LoadAwareScheduling",
                                                      "args": {"usageThreshold": {"cpu": 1}}}]}]})
    # kube-scheduler's own NodeResourcesFit is accepted (always on in scheduler.framework)
    parse_config({"profiles": [{"plugins": {"filter": {"enabled": [{"name": "NodeResourcesFit"}]}}}]})
