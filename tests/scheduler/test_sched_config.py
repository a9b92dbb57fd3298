"""--config as kube-scheduler reads it: profiles, per-point enable/disable, weights, typed and defaulted args,
one-line refusals (exit 2), and the release texts' KubeSchedulerConfiguration snippets (tests/scheduler/seeds)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.cli import main, profile, simulate
from scheduler.cluster import build_cluster
from scheduler.config import ConfigError, SchedulerConfig, load_config, parse_config
from scheduler.config.args import DEVICE_SCORING_RESOURCES, ScoringStrategy
from scheduler.config.plugins import PLUGINS, RUN
from scheduler.config.repair import load_text
from scheduler.deviceshare.plugin import DeviceShare
from scheduler.framework import Scheduler
from scheduler.plugins.fitplus import NodeResourcesFitPlus
from scheduler.plugins.loadaware import LoadAware
from scheduler.plugins.scarce import ScarceResourceAvoidance
from scheduler.registry import REGISTRY, build
from scheduler.reservation.plugin import ReservationPlugin

from chartconfig import chart_config, in_chart, without
from conftest import agent_device

SEEDS = Path(__file__).parent / "seeds"
ALLOCATED = "scheduling.koordinator.sh/device-allocated"

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


def profile_of(**plugins: Any) -> dict[str, Any]:
    return {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "profiles": [{"schedulerName": "koord-scheduler", **plugins}]}


def koord(*plugin_config: dict[str, Any]) -> dict[str, Any]:
    """The chart's plugins with these pluginConfig entries (and no other)."""
    return chart_config(pluginConfig=list(plugin_config))


KOORD_PLUGINS = {"Coscheduling", "Reservation", "DeviceShare", "NodeNUMAResource", "LoadAwareScheduling",
                 "ElasticQuota", "SchedulingHint"}


def names(plugins: list[Any]) -> list[str]:
    return [p.name for p in plugins]


def test_defaults_when_absent() -> None:
    cfg = load_config(None)
    # koord-scheduler's scheduler-config.yaml order (Reservation after DeviceShare, score weight 5000)
    # then kube-scheduler's default score plugins we run, at kube's weights
    assert cfg.points["score"] == ["LoadAwareScheduling", "NodeNUMAResource", "DeviceShare", "Reservation",
                                   "Coscheduling", "TaintToleration", "NodeAffinity", "PodTopologySpread",
                                   "InterPodAffinity", "ImageLocality"]
    assert (cfg.weights["TaintToleration"], cfg.weights["NodeAffinity"]) == (3, 2)
    assert (cfg.weights["PodTopologySpread"], cfg.weights["InterPodAffinity"]) == (2, 2)
    assert cfg.weights["NodeNUMAResource"] == 1
    numa = cfg.plugin_args("NodeNUMAResource")  # upstream v1 defaults
    assert (numa.scoring_type, numa.scoring_resources) == ("LeastAllocated", (("cpu", 1), ("memory", 1)))
    assert cfg.points["filter"] == ["NodeResourcesFit", "LoadAwareScheduling", "NodeNUMAResource", "DeviceShare",
                                    "Reservation", "NodeUnschedulable", "NodeName", "TaintToleration",
                                    "NodeAffinity", "NodePorts", "PodTopologySpread", "InterPodAffinity"]
    assert cfg.points["reserve"] == ["LoadAwareScheduling", "NodeNUMAResource", "DeviceShare", "Reservation",
                                     "ElasticQuota", "Coscheduling"]
    assert cfg.weight("Reservation") == 5000
    # upstream's shipped config binds with Reservation first (reserve pods), then DefaultBinder (every other pod)
    assert cfg.points["queueSort"] == ["PrioritySort"] and cfg.points["bind"] == ["Reservation", "DefaultBinder"]
    # a file's profile starts from kube-scheduler's default plugins instead: none of Koordinator's
    kube = parse_config({})
    assert kube.points["score"] == ["TaintToleration", "NodeAffinity", "NodeResourcesFit", "VolumeBinding",
                                    "PodTopologySpread", "InterPodAffinity", "NodeResourcesBalancedAllocation",
                                    "ImageLocality"]
    assert kube.points["bind"] == ["DefaultBinder"] and kube.points["postFilter"] == ["DefaultPreemption"]
    assert not KOORD_PLUGINS & {n for names in kube.points.values() for n in names}
    assert cfg.plugin_args("LoadAwareScheduling").usage_thresholds == {"cpu": 65, "memory": 95}
    made = profile(None)
    filters, scorers = made.filters, made.scorers
    assert [type(p) for p in filters if p.name == "LoadAwareScheduling"] == [LoadAware]
    assert [s.weight for s in scorers if s.name == "LoadAwareScheduling"] == [1]


def test_upstream_defaults_of_every_args_type() -> None:
    """SetDefaults_* of pkg/scheduler/apis/config/v1/defaults.go on an empty args object."""
    cfg = SchedulerConfig()
    ds = cfg.plugin_args("DeviceShare")
    assert ds.scoring_strategy == ScoringStrategy("LeastAllocated", DEVICE_SCORING_RESOURCES)
    assert [n for n, _ in DEVICE_SCORING_RESOURCES] == ["koordinator.sh/gpu-memory-ratio", "koordinator.sh/gpu-memory",
                                                       "koordinator.sh/rdma", "koordinator.sh/fpga"]
    t = ds.gpu_shared_resource_templates_config
    assert (t.config_map_namespace, t.config_map_name, t.matched_resources) == (
        "koordinator-system", "gpu-shared-resource-templates", ("huawei.com/npu-core",))
    co = cfg.plugin_args("Coscheduling")
    assert (co.default_timeout, co.controller_workers, co.enable_preemption, co.aware_network_topology,
            co.default_match_policy, co.skip_check_schedule_cycle) == (600.0, 1, False, False, "once-satisfied", False)
    r = cfg.plugin_args("Reservation")
    assert (r.enable_preemption, r.min_candidate_nodes_percentage, r.min_candidate_nodes_absolute,
            r.controller_workers, r.gc_duration_seconds, r.gc_interval_seconds, r.resync_interval_seconds) == (
        False, 10, 100, 1, 86400, 60, 60)
    q = cfg.plugin_args("ElasticQuota")
    assert (q.delay_evict_time, q.revoke_pod_interval, q.quota_group_namespace, q.monitor_all_quotas,
            q.enable_check_parent_quota, q.enable_runtime_quota, q.enable_min_quota_scale,
            q.disable_default_quota_preemption, q.enable_queue_hint, q.quota_snapshot_update_interval) == (
        120.0, 1.0, "koordinator-system", False, False, True, True, True, False, 120.0)
    la = cfg.plugin_args("LoadAwareScheduling")
    assert (la.filter_expired_node_metrics, la.node_metric_expiration_seconds, la.resource_weights,
            la.estimated_scaling_factors) == (True, 180, {"cpu": 1, "memory": 1}, {"cpu": 85, "memory": 70})
    assert cfg.plugin_args("NodeResourcesFitPlus").resources == {}
    assert cfg.plugin_args("ScarceResourceAvoidance").resources == []


def test_overrides(tmp_path: Path) -> None:
    path = tmp_path / "sched.yaml"
    path.write_text(YAML)
    cfg = load_config(str(path))
    # kube-scheduler's default scores at their weights, then the file's
    assert cfg.weights == {"TaintToleration": 3, "NodeAffinity": 2, "NodeResourcesFit": 1, "VolumeBinding": 1,
                           "PodTopologySpread": 2, "InterPodAffinity": 2, "NodeResourcesBalancedAllocation": 1,
                           "ImageLocality": 1, "LoadAwareScheduling": 3, "NodeResourcesFitPlus": 2,
                           "ScarceResourceAvoidance": 1}
    la = cfg.plugin_args("LoadAwareScheduling")
    assert la.usage_thresholds == {"cpu": 70} and la.node_metric_expiration_seconds == 300
    assert la.aggregated is not None and la.aggregated.usage_aggregated_duration == 300
    assert cfg.plugin_args("NodeResourcesFitPlus").resources["nvidia.com/gpu"].type == "MostAllocated"
    made = profile(cfg)
    filters, scorers = made.filters, made.scorers
    by_name = {s.name: s for s in scorers}
    assert isinstance(by_name["LoadAwareScheduling"], LoadAware) and by_name["LoadAwareScheduling"].weight == 3
    assert isinstance(by_name["NodeResourcesFitPlus"], NodeResourcesFitPlus)
    assert isinstance(by_name["ScarceResourceAvoidance"], ScarceResourceAvoidance)
    # named at score only: LoadAwareScheduling scores and does not filter (upstream builds it at the points named)
    assert by_name["LoadAwareScheduling"] not in filters and "LoadAwareScheduling" not in names(made.reservers)
    cfg = parse_config(chart_config(enable={"score": [{"name": "NodeResourcesFitPlus", "weight": 2}]}))
    made = profile(cfg)
    share = next(s for s in made.scorers if s.name == "LoadAwareScheduling")
    assert share in made.filters  # the same instance filters and scores


def test_disabling_at_one_point_disables_it_there_only() -> None:
    cfg = parse_config(chart_config(plugins={"score": {"disabled": [{"name": "*"}]}}))
    plugins = build(cfg)
    assert plugins.scorers == ()
    assert "DeviceShare" in names(plugins.filters) and "DeviceShare" in names(plugins.reservers)
    # a kube-scheduler default disabled at one point runs at its others
    cfg = parse_config(profile_of(plugins={"filter": {"disabled": [{"name": "TaintToleration"}]}}))
    plugins = build(cfg)
    assert "TaintToleration" not in names(plugins.filters) and "TaintToleration" in names(plugins.scorers)
    # `disabled` removes defaults only: a plugin the file enables at that point stays
    cfg = parse_config(chart_config(plugins={"filter": {"disabled": [{"name": "LoadAwareScheduling"}], "enabled": [
        {"name": "LoadAwareScheduling"}]}}))
    assert "LoadAwareScheduling" in cfg.points["filter"]
    cfg = parse_config(profile_of(plugins={"multiPoint": {"disabled": [{"name": "*"}]},
                                           "queueSort": {"enabled": [{"name": "PrioritySort"}]},
                                           "bind": {"enabled": [{"name": "DefaultBinder"}]},
                                           "score": {"enabled": [{"name": "NodeResourcesFitPlus"}]}}))
    plugins = build(cfg)
    assert names(plugins.scorers) == ["NodeResourcesFitPlus"] and plugins.filters == ()
    quota = next(r for r in plugins.reservers if r.name == "ElasticQuota") if "ElasticQuota" in names(
        plugins.reservers) else None
    assert quota is None
    cfg = parse_config(without(chart_config(), "preFilter", "ElasticQuota"))
    quota = next(r for r in build(cfg).reservers if r.name == "ElasticQuota")
    assert not quota.check and quota.account


def test_enabling_a_default_reconfigures_it_in_place() -> None:
    """kube-scheduler's framework: a default named at a point takes its weight from there and runs first (the
    re-configured ones), then the other defaults, then the file's own plugins."""
    cfg = parse_config(profile_of(plugins={"score": {"enabled": [{"name": "NodeAffinity", "weight": 5},
                                                                 {"name": "DeviceShare"}]}}))
    assert cfg.points["score"] == ["NodeAffinity", "TaintToleration", "NodeResourcesFit", "VolumeBinding",
                                   "PodTopologySpread", "InterPodAffinity", "NodeResourcesBalancedAllocation",
                                   "ImageLocality", "DeviceShare"]
    assert (cfg.weights["NodeAffinity"], cfg.weights["DeviceShare"], cfg.weights["TaintToleration"]) == (5, 1, 3)
    cfg = parse_config(profile_of(plugins={"multiPoint": {"enabled": [{"name": "DeviceShare", "weight": 4}]}}))
    assert cfg.weights["DeviceShare"] == 4
    assert all(cfg.enabled_at("DeviceShare", p) for p in ("preFilter", "filter", "score", "reserve", "preBind"))
    cfg = parse_config(profile_of(plugins={"multiPoint": {"enabled": [{"name": "TaintToleration", "weight": 7}]}}))
    assert cfg.weights["TaintToleration"] == 7 and cfg.points["score"][0] == "TaintToleration"
    cfg = parse_config(profile_of(plugins={"score": {"enabled": [{"name": "NodeResourcesBalancedAllocation",
                                                                  "weight": 0}]}}))
    assert cfg.weights["NodeResourcesBalancedAllocation"] == 1  # weight 0/absent means 1, as kube-scheduler


def test_deviceshare_args_reach_the_scorer(tmp_path: Path) -> None:
    """The crash of issue #15: a DeviceShare pluginConfig entry; MostAllocated bin-packs GPU pods."""
    cfg = parse_config(koord({"name": "DeviceShare", "args": {
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "DeviceShareArgs",
        "scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "koordinator.sh/gpu-core", "weight": 2},
                                                                   {"name": "koordinator.sh/gpu-memory-ratio",
                                                                    "weight": 1}]}}}))
    share = next(p for p in build(cfg).scorers if p.name == "DeviceShare")
    assert share.scorer.most and share.scorer.weights == {"koordinator.sh/gpu-core": 2,
                                                          "koordinator.sh/gpu-memory-ratio": 1}
    assert share.args is cfg.plugin_args("DeviceShare")
    only_type = parse_config(koord({"name": "DeviceShare", "args": {"scoringStrategy": {"type": "MostAllocated"}}}))
    assert only_type.plugin_args("DeviceShare").scoring_strategy.resources == DEVICE_SCORING_RESOURCES
    cluster = build_cluster(gpu_cluster_objects())
    spread = simulate(cluster, [gpu_pod(f"p{i}") for i in range(2)], parse_config(koord()))
    cluster = build_cluster(gpu_cluster_objects())
    packed = simulate(cluster, [gpu_pod(f"p{i}") for i in range(2)], only_type)
    assert len({p["node"] for p in spread["placements"]}) == 2
    assert len({p["node"] for p in packed["placements"]}) == 1


@pytest.mark.parametrize(("doc", "message"), [
    ({"profiles": [{"pluginConfig": [{"name": "LoadAware", "args": {}}]}]},
     "profiles[0].pluginConfig[0].name: unknown plugin 'LoadAware' (did you mean 'LoadAwareScheduling'?)"),
    ({"profiles": [{"plugins": {"score": {"enabled": [{"name": "Foo", "weight": 1}]}}}]},
     'profiles[0].plugins.score.enabled[0].name: ScorePlugin "Foo" does not exist'
     " (unknown plugin); supported: "
     "NodeResourcesFit,"),
    ({"profiles": [{"pluginConfig": [{"name": "LoadAwareScheduling", "args": {}}]}]},
     "profiles[0].pluginConfig[0].name: plugin LoadAwareScheduling has a pluginConfig but is not enabled at any "
     "extension point of the profile"),
    (koord({"name": "LoadAwareScheduling", "args": {"usageThreshold": {"cpu": 1}}}),
     "profiles[0].pluginConfig[0].args.usageThreshold: unknown field (did you mean 'usageThresholds'?)"),
    (koord({"name": "DeviceShare", "args": {"scoringStrategy": {"type": "Most"}}}),
     "args.scoringStrategy.type: 'Most' is not supported; accepted: LeastAllocated, MostAllocated"),
    (koord({"name": "DeviceShare", "args": {"scoringStrategy": {
        "resources": [{"name": "koordinator.sh/gpu-core", "weight": 0}]}}}),
     "scoringStrategy.resources[0].weight: resource weight of koordinator.sh/gpu-core not in valid range (0, 100]"),
    (koord({"name": "Coscheduling", "args": {"kind": "DeviceShareArgs"}}),
     "profiles[0].pluginConfig[0].args.kind: 'DeviceShareArgs' does not match the plugin; expected CoschedulingArgs"),
    (koord({"name": "Coscheduling", "args": {"defaultTimeout": "ten"}}),
     "args.defaultTimeout: 'ten' is not a duration"),
    (koord({"name": "Coscheduling", "args": {"enablePreemption": "yes"}}),
     "args.enablePreemption: must be true or false, got 'yes'"),
    (koord({"name": "Reservation", "args": {"minCandidateNodesPercentage": 101}}),
     "args.minCandidateNodesPercentage: 101 is out of range (accepted: 0..100)"),
    (koord({"name": "ElasticQuota", "args": {"defaultQuotaGroupMax": {"cpu": "-1"}}}),
     "args.defaultQuotaGroupMax.cpu: must not be negative"),
    ({"profiles": [{"plugins": {"scores": {}}}]},
     "profiles[0].plugins.scores: unknown field (did you mean 'score'?)"),
    ({"profiles": [{"plugins": {"reserve": {"enabled": [{"name": "ElasticQuotaV2"}]}}}]},
     "ElasticQuotaV2 is not implemented by koord-sched; supported:"),
    ({"profiles": [{"plugins": {"filter": {"enabled": [{"name": "ScarceResourceAvoidance"}]}}}]},
     'plugin "ScarceResourceAvoidance" does not extend FilterPlugin plugin (it extends: score)'),
    (chart_config(plugins={"preBind": {"disabled": [{"name": "*"}]}}),
     "DeviceShare must be enabled at both reserve and preBind or at neither"),
    ({"profiles": [{"plugins": {"queueSort": {"disabled": [{"name": "*"}]}}}]},
     "plugins.queueSort: no queue sort plugin is enabled"),
    ({"profiles": [{"plugins": {"score": {"enabled": [{"name": "*"}]}}}]}, "'*' is only valid under disabled"),
    ({"apiVersion": "kubescheduler.config.k8s.io/v2"}, "apiVersion: 'kubescheduler.config.k8s.io/v2' is not supported"),
    ({"profiles": [{"schedulerName": "a"}, {"schedulerName": "a"}]}, "schedulerName 'a' is used by more than one"),
    (koord({"name": "DeviceShare"}, {"name": "DeviceShare"}), "repeated config for plugin DeviceShare"),
    ({"profiles": [{"pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {
        "type": "RequestedToCapacityRatio"}}}]}]}, "accepted: LeastAllocated, MostAllocated"),
])
def test_refusals_name_the_field(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(doc)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_upstream_kube_plugin_names() -> None:
    """Disabling kube-scheduler's plugins is always fine; the ones with our behaviour may be enabled."""
    cfg = parse_config(profile_of(plugins={
        "score": {"disabled": [{"name": "NodeResourcesBalancedAllocation"}, {"name": "ImageLocality"}]},
        "postFilter": {"enabled": [{"name": "DefaultPreemption"}]},
        "preEnqueue": {"enabled": [{"name": "SchedulingGates"}]}},
        pluginConfig=[{"name": "DefaultPreemption", "args": {"minCandidateNodesPercentage": 20}}]))
    assert cfg.plugin_args("DefaultPreemption").min_candidate_nodes_percentage == 20
    cfg = parse_config(profile_of(plugins={"score": {"enabled": [{"name": "NodeResourcesBalancedAllocation",
                                                                  "weight": 2}]}}))
    assert "NodeResourcesBalancedAllocation" in names(build(cfg).scorers)


def test_cli_exits_2_with_one_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(koord({"name": "DeviceShare", "args": {"scoringStrategy": {"type": "BinPack"}}})))
    (tmp_path / "c.yaml").write_text("")
    with caplog.at_level(logging.ERROR):
        rc = main(["simulate", "--cluster", str(tmp_path / "c.yaml"), "--pods", str(tmp_path / "c.yaml"),
                   "--config", str(bad)])
    assert rc == 2
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == [
        "invalid --config: profiles[0].pluginConfig[0].args.scoringStrategy.type: 'BinPack' is not supported; "
        "accepted: LeastAllocated, MostAllocated"]
    for args in (["run", "--scheduler-name", "x", "--once"], ["extender"]):
        proc = subprocess.run([sys.executable, "-m", "scheduler.cli", *args, "--config", str(bad),
                               "--kubeconfig", str(tmp_path / "none")], capture_output=True, text=True,
                              timeout=60, check=False)
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr and "'BinPack' is not supported" in proc.stderr
    (tmp_path / "broken.yaml").write_text("profiles: [\n")
    assert main(["simulate", "--cluster", str(tmp_path / "c.yaml"), "--pods", str(tmp_path / "c.yaml"),
                 "--config", str(tmp_path / "broken.yaml")]) == 2
    assert main(["simulate", "--cluster", str(tmp_path / "c.yaml"), "--pods", str(tmp_path / "c.yaml"),
                 "--config", str(tmp_path / "missing.yaml")]) == 2


def test_profile_by_scheduler_name() -> None:
    doc = {"profiles": [{"schedulerName": "a"}, {"schedulerName": "b", "plugins": {"score": {
        "disabled": [{"name": "*"}]}}}]}
    assert parse_config(doc, "b").points["score"] == []
    assert parse_config(doc, "a").points["score"] != []
    assert parse_config(doc).scheduler_name == "a"


# -- the release texts' snippets (copies in tests/scheduler/seeds, as written) -----------------------------------
def seed(name: str) -> str:
    return str(SEEDS / name)


def test_seed_v16_native_noderesourcesfit() -> None:
    """kube's NodeResourcesFit with one LeastAllocated strategy over cpu, memory and nvidia.com/gpu: it scores."""
    cfg = load_config(seed("v16-noderesourcesfit.yaml"))
    fit = next(s for s in build(cfg).scorers if s.name == "NodeResourcesFit")
    assert fit.resources == (("cpu", 1), ("memory", 1), ("nvidia.com/gpu", 1)) and not fit.most
    cluster = build_cluster([cpu_node("a", 8), cpu_node("b", 8), running("x", "a", "6")])
    assert Scheduler(cluster, profile(cfg)).schedule(cpu_pod("p", "1")).node == "b"  # spread


def test_seed_v16_fitplus_packs_gpu_spreads_cpu() -> None:
    """GPU jobs pack onto GPU machines already in use (MostAllocated on nvidia.com/gpu), CPU jobs spread."""
    cfg = load_config(seed("v16-fitplus.yaml"))
    assert cfg.scheduler_name == "koord-scheduler" and cfg.weights["NodeResourcesFitPlus"] == 2
    cluster = build_cluster([*gpu_cluster_objects(), cpu_node("cpu-1", 96), cpu_node("cpu-2", 96),
                             running("busy", "cpu-1", "48")])
    sched = Scheduler(cluster, profile(cfg))
    first = sched.schedule(gpu_pod("g0"))
    second = sched.schedule(gpu_pod("g1"))
    assert first.node == second.node  # packed
    assert sched.schedule(cpu_pod("c", "1")).node == "cpu-2"


def test_seed_v16_scarce_keeps_device_allocation() -> None:
    """`score.disabled: "*"`: CPU pods avoid GPU nodes. The snippet alone names no DeviceShare, so GPU pods fit on
    nvidia.com/gpu and get no devices, as upstream; in the chart's configuration they keep them (Reserve/PreBind)."""
    cfg = load_config(seed("v16-scarce.yaml"))
    assert cfg.points["score"] == ["NodeResourcesFitPlus", "ScarceResourceAvoidance"]
    assert cfg.plugin_args("NodeResourcesFitPlus").resources == {}  # enabled without args: no preference
    chart = parse_config(in_chart(yaml.safe_load((SEEDS / "v16-scarce.yaml").read_text())))
    assert chart.points["score"] == ["NodeResourcesFitPlus", "ScarceResourceAvoidance"]
    for config, devices in ((cfg, False), (chart, True)):
        cluster = build_cluster([*gpu_cluster_objects(), cpu_node("cpu-1", 96)])
        result = simulate(cluster, [cpu_pod("c", "1"), gpu_pod("g")], config)
        by = {p["pod"]: p for p in result["placements"]}
        assert by["default/c"]["node"] == "cpu-1"
        assert by["default/g"]["node"].startswith("gpu-")
        assert (ALLOCATED in by["default/g"]["annotations"]) == devices


def test_seed_v16_reservation_accepted_with_notes(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="koord-sched.config"):
        cfg = load_config(seed("v16-reservation.yaml"))
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "pluginConfigs: read as pluginConfig" in text
    assert "plugins.postFilter: a list of {enabled}/{disabled} items read as one object" in text
    assert "kubescheduler.config.k8s.io/v1beta3 read as kubescheduler.config.k8s.io/v1" in text
    assert "not implemented" not in text
    assert cfg.plugin_args("Reservation").enable_preemption is True
    # the snippet ("# ...") names Reservation at postFilter only: there alone it runs, as upstream would run it
    assert cfg.points["postFilter"] == ["Reservation"]
    assert [p for p, names in cfg.points.items() if "Reservation" in names] == ["postFilter"]
    # in the chart's configuration, as the notes mean it
    cfg = parse_config(in_chart(load_text((SEEDS / "v16-reservation.yaml").read_text(), "v16-reservation"), "1.6.0"))
    assert cfg.points["postFilter"] == ["Reservation"] and cfg.plugin_args("Reservation").enable_preemption
    made = profile(cfg)
    filters, scorers, reservers = made.filters, made.scorers, made.reservers
    resv = next(p for p in reservers if p.name == "Reservation")
    assert resv in filters and resv in scorers and resv.enable_preemption


@pytest.mark.parametrize("name", ["nt-manual-config.yaml", "nt-manual-configmap.yaml"])
def test_seed_network_topology_manual_config(name: str, caplog: pytest.LogCaptureFixture) -> None:
    """The manual's ConfigMap with its indentation lost: re-nested (logged), awareNetworkTopology and
    enablePreemption reach Coscheduling."""
    with caplog.at_level(logging.WARNING, logger="koord-sched.config"), pytest.raises(ConfigError) as refused:
        load_config(seed(name))
    assert any("indentation lost" in r.getMessage() for r in caplog.records)
    # alone, the manual's ConfigMap enables no Coscheduling: its args would have no effect (refused, one line)
    assert "plugin Coscheduling has a pluginConfig but is not enabled" in str(refused.value)
    # its pluginConfig in the chart's configuration, as the manual means it
    cfg = parse_config(in_chart(load_text((SEEDS / name).read_text(), name)))
    args = cfg.plugin_args("Coscheduling")
    assert args.aware_network_topology is True and args.enable_preemption is True
    assert args.explicit == {"awareNetworkTopology", "enablePreemption"}


def test_flush_left_that_fits_nowhere_is_refused(tmp_path: Path) -> None:
    text = (SEEDS / "nt-manual-config.yaml").read_text().replace("enablePreemption: true", "enablePreemtion: true")
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match="indentation is lost and cannot be restored unambiguously at line "
                                          "'enablePreemtion: true'"):
        load_config(str(path))


def test_aware_network_topology_false_turns_topology_off_in_run_only() -> None:
    off = parse_config(koord({"name": "Coscheduling", "args": {"awareNetworkTopology": False}}))
    cos = next(r for r in build(off, simulate=True).reservers if r.name == "Coscheduling")
    assert cos.aware_network_topology is False
    default = SchedulerConfig()
    assert next(r for r in build(default, simulate=True).reservers if r.name == "Coscheduling").aware_network_topology
    assert not next(r for r in build(default).reservers if r.name == "Coscheduling").aware_network_topology


# -- small cluster helpers ------------------------------------------------------------------------------------------
def cpu_node(name: str, cpus: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"allocatable": {"cpu": str(cpus), "memory": f"{4 * cpus}Gi", "pods": "110"}}}


def cpu_pod(name: str, cpu: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}}


def running(name: str, node: str, cpu: str) -> dict[str, Any]:
    p = cpu_pod(name, cpu)
    p["spec"]["nodeName"] = node
    p["status"] = {"phase": "Running"}
    return p


def gpu_cluster_objects() -> list[dict[str, Any]]:
    """Two 8-GPU nodes with the Device CR our agent reports (l20-pcie)."""
    out: list[dict[str, Any]] = []
    for name in ("gpu-1", "gpu-2"):
        out.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": {"allocatable": {
            "cpu": "96", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8", "koordinator.sh/gpu-core": "800",
            "koordinator.sh/gpu-memory-ratio": "800"}}})
        out.append(agent_device("l20-pcie", name))
    return out


def gpu_pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}}}]}}


def test_simulate_json_with_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump_all([cpu_node("a", 8)]))
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all([cpu_pod("p", "1")]))
    assert main(["simulate", "--cluster", str(tmp_path / "cluster.yaml"), "--pods", str(tmp_path / "pods.yaml"),
                 "--config", seed("v16-scarce.yaml"), "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["placements"][0]["node"] == "a"


def test_deviceshare_args_reach_the_plugin(tmp_path: Path) -> None:
    """gpuSharedResourceTemplatesConfig and gpuShareUnsupportedModels of a config file configure DeviceShare."""
    path = tmp_path / "sched.yaml"
    path.write_text(yaml.safe_dump(koord(yaml.safe_load("""
name: DeviceShare
args:
  apiVersion: kubescheduler.config.k8s.io/v1
  kind: DeviceShareArgs
  gpuSharedResourceTemplatesConfig:
    configMapNamespace: gpu-system
    configMapName: vnpu-templates
    matchedResources: [huawei.com/npu-core]
  gpuShareUnsupportedModels:
    - vendor: nvidia
      model: L20
"""))))
    cfg = load_config(str(path))
    [ds] = {id(p): p for p in profile(cfg).reservers if isinstance(p, DeviceShare)}.values()
    assert ds.templates.key == "gpu-system/vnpu-templates"
    assert ds.templates.matched_resources == ("huawei.com/npu-core",)
    assert ds.unsupported_models == frozenset({("nvidia", "L20")})


def test_every_implemented_plugin_has_a_factory_and_each_hook_is_resolved_once() -> None:
    """The registry makes every plugin config/plugins.py says runs here, and nothing else; the profile resolves
    each optional hook from the plugins implementing it (ElasticQuota's PreFilter, Reservation's cycle hooks)."""
    assert set(REGISTRY) == {p.name for p in PLUGINS.values() if p.status == RUN}
    made = build(SchedulerConfig())
    assert [p.name for p in made.prefilters] == ["NodeAffinity", "PodTopologySpread", "InterPodAffinity",
                                                 "ElasticQuota"]
    assert list(made.cycle_hooks) == [made.by_name["Reservation"]]
    assert list(made.prebinders) == [made.by_name["DeviceShare"]]
    assert len(made.filter_vectors) == len(made.filters) and None not in made.filter_vectors
    sched = Scheduler(build_cluster([]), made)
    assert sched.plugin("Reservation", ReservationPlugin) is not None
    with pytest.raises(TypeError):
        sched.plugin("Reservation", DeviceShare)
