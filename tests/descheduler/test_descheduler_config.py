"""DeschedulerConfiguration decoding, defaults and validation: upstream's apis/config tests (defaults_test.go,
validation_test.go, validation_loadaware_test.go, validation_pluginargs_test.go) restated, and the command's
refusals (exit 2, one line naming the field)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scheduler.descheduler.config.common import ConfigError
from scheduler.descheduler.config.decode import load_config, parse_config, parse_text
from scheduler.descheduler.config.lownodeload_args import DEFAULT_POOL, LowNodeLoadArgs
from scheduler.descheduler.config.migration_args import MigrationControllerArgs

from deschedbuild import config, refused

HEAD = {"apiVersion": "descheduler/v1alpha2", "kind": "DeschedulerConfiguration"}


def lownodeload(args: dict[str, Any]) -> LowNodeLoadArgs:
    cfg = parse_config({**HEAD, "profiles": [{"name": "p", "pluginConfig": [{"name": "LowNodeLoad", "args": args}]}]})
    got = cfg.profiles[0].args["LowNodeLoad"]
    assert isinstance(got, LowNodeLoadArgs)
    return got


def migration(args: dict[str, Any]) -> MigrationControllerArgs:
    cfg = parse_config({**HEAD, "profiles": [{"name": "p", "pluginConfig": [
        {"name": "MigrationController", "args": args}]}]})
    got = cfg.profiles[0].args["MigrationController"]
    assert isinstance(got, MigrationControllerArgs)
    return got


def test_defaults_of_an_empty_file() -> None:
    cfg = load_config(None)
    assert [p.name for p in cfg.profiles] == ["koord-descheduler"]
    assert cfg.profiles[0].plugins == {"deschedule": [], "balance": [], "evict": ["MigrationController"],
                                       "filter": ["MigrationController"]}
    assert isinstance(cfg.profiles[0].args["MigrationController"], MigrationControllerArgs)  # defaulted args added
    le = cfg.leader_election
    assert (le.leader_elect, le.lease_duration, le.renew_deadline, le.retry_period, le.resource_lock,
            le.resource_namespace, le.resource_name) == (True, 15, 10, 2, "leases", "koordinator-system",
                                                         "koord-descheduler")
    assert (cfg.client_connection.qps, cfg.client_connection.burst) == (50, 100)
    assert cfg.healthz_bind_address == cfg.metrics_bind_address == "0.0.0.0:10251"
    assert cfg.descheduling_interval == 0 and cfg.dry_run is False
    assert cfg.max_pods_per_node is cfg.max_pods_per_namespace is cfg.max_pods_total is None


@pytest.mark.parametrize(("given", "want"), [("127.0.0.1", "127.0.0.1:10251"), (":9000", "0.0.0.0:9000"),
                                             ("localhost:8080", "localhost:8080")])
def test_bind_address_defaulting(given: str, want: str) -> None:
    assert parse_config({**HEAD, "healthzBindAddress": given}).healthz_bind_address == want


def test_plugin_merge_as_upstream() -> None:
    cfg = parse_config({**HEAD, "profiles": [{"name": "a", "plugins": {
        "balance": {"enabled": [{"name": "LowNodeLoad"}]},
        "evict": {"disabled": [{"name": "*"}], "enabled": [{"name": "DefaultEvictor"}]},
        "filter": {"enabled": [{"name": "DefaultEvictor"}, {"name": "MigrationController"}]}}}]})
    plugins = cfg.profiles[0].plugins
    assert plugins["balance"] == ["LowNodeLoad"]
    assert plugins["evict"] == ["DefaultEvictor"]
    assert plugins["filter"] == ["MigrationController", "DefaultEvictor"]  # a re-listed default keeps its place
    assert set(cfg.profiles[0].args) == {"LowNodeLoad", "DefaultEvictor", "MigrationController"}


def test_lownodeload_defaults_and_default_pool() -> None:
    """TestSetDefaults_LowNodeLoadArgs: nodeFit true, expiration 180, cache 5m, anomaly {1m, 5, 3}, weights 1
    for cpu, memory and every low/high key (pods too); the top level is pool 0."""
    a = lownodeload({"lowThresholds": {"cpu": 30, "pods": 20}, "highThresholds": {"cpu": 60, "pods": 50}})
    assert (a.node_fit, a.node_metric_expiration_seconds, a.detector_cache_timeout) == (True, 180, 300)
    pool = a.node_pools[0]
    assert pool.name == DEFAULT_POOL
    assert pool.resource_weights == {"cpu": 1, "memory": 1, "pods": 1}
    an = pool.anomaly
    assert (an.timeout, an.consecutive_abnormalities, an.consecutive_normalities) == (60, 5, 3)


def test_weights_at_or_below_zero_on_threshold_keys_become_one() -> None:
    a = lownodeload({"lowThresholds": {"cpu": 30}, "highThresholds": {"cpu": 60},
                     "resourceWeights": {"cpu": 0, "memory": 3, "nvidia.com/gpu": 0}})
    assert a.node_pools[0].resource_weights == {"cpu": 1, "memory": 3, "nvidia.com/gpu": 0}


def test_anomaly_condition_defaulting_is_an_else_if() -> None:
    """abnormalities 0 → 5; only when abnormalities is set does normalities 0 → 3; both 0 is refused."""
    a = lownodeload({"anomalyCondition": {"consecutiveAbnormalities": 0, "consecutiveNormalities": 2}})
    an = a.node_pools[0].anomaly
    assert (an.consecutive_abnormalities, an.consecutive_normalities) == (5, 2)
    a = lownodeload({"anomalyCondition": {"consecutiveAbnormalities": 4}})
    assert a.node_pools[0].anomaly.consecutive_normalities == 3
    assert a.node_pools[0].anomaly.timeout is None  # absent: the detector waits 60s
    with pytest.raises(ConfigError, match=r"nodePools\[0\]\.anomalyDetectionThresholds\.consecutiveNormalities"):
        lownodeload({"anomalyCondition": {"consecutiveAbnormalities": 0, "consecutiveNormalities": 0}})


def test_node_pools_inherit_from_the_top_level() -> None:
    """TestSetDefaults_LowNodeLoadNodePoolsUseDefaultArgsFromLowNodeLoadArgs."""
    a = lownodeload({"lowThresholds": {"cpu": 30}, "highThresholds": {"cpu": 60},
                     "prodLowThresholds": {"cpu": 20}, "prodHighThresholds": {"cpu": 40},
                     "anomalyCondition": {"consecutiveAbnormalities": 7, "consecutiveNormalities": 2},
                     "nodePools": [{"name": "gpu", "nodeSelector": {"matchLabels": {"pool": "gpu"}},
                                    "highThresholds": {"cpu": 80},
                                    "anomalyCondition": {"consecutiveNormalities": 9}}]})
    top, pool = a.node_pools
    assert pool.low is top.low and pool.prod_low is top.prod_low and pool.prod_high is top.prod_high
    assert pool.high == {"cpu": 80}
    assert pool.resource_weights == top.resource_weights
    assert (pool.anomaly.consecutive_abnormalities, pool.anomaly.consecutive_normalities) == (7, 9)


@pytest.mark.parametrize(("number", "ok"), [(10, True), (5, True), (0, True), (-1, False), (-10, False)])
def test_number_of_nodes(number: int, ok: bool) -> None:
    if ok:
        assert lownodeload({"numberOfNodes": number}).number_of_nodes == number
    else:
        with pytest.raises(ConfigError, match=r"numberOfNodes: Invalid value: .*: must be greater than or equal to 0"):
            lownodeload({"numberOfNodes": number})


@pytest.mark.parametrize(("include", "exclude", "ok"), [
    ([], [], True), (["a"], [], True), ([], ["b"], True), (["a"], ["b"], False), (["a", "c"], ["b"], False)])
def test_evictable_namespaces(include: list[str], exclude: list[str], ok: bool) -> None:
    args = {"evictableNamespaces": {"include": include, "exclude": exclude}}
    if ok:
        lownodeload(args)
    else:
        with pytest.raises(ConfigError, match="only one of Include/Exclude namespaces can be set"):
            lownodeload(args)


@pytest.mark.parametrize(("high", "low", "ok"), [(100, 90, True), (0, 0, True), (0, -1, False), (100, -10, False),
                                                 (-10, -100, False), (120, 50, True), (120, 120, True)])
def test_pool_thresholds(high: int, low: int, ok: bool) -> None:
    """TestValidateLowLoadUtilizationArgs_NodePoolThresholds: negatives refused, above 100 accepted."""
    args = {"nodePools": [{"name": "p", "highThresholds": {"cpu": high}, "lowThresholds": {"cpu": low}}]}
    if ok:
        lownodeload(args)
    else:
        with pytest.raises(ConfigError, match=r"nodePools\[1\]\..*Thresholds\[cpu\]: .*percentage must be"):
            lownodeload(args)


@pytest.mark.parametrize(("args", "message"), [
    ({"lowThresholds": {"cpu": 60}, "highThresholds": {"cpu": 50}},
     "low percentage must be less than or equal to highThresholds"),
    ({"highThresholds": {"cpu": 50}, "prodHighThresholds": {"cpu": 60}},
     "node percentage must be greater than or equal to prodHighThresholds"),
    ({"prodLowThresholds": {"cpu": 60}, "prodHighThresholds": {"cpu": 50}},
     "low percentage must be less than or equal to prodHighThresholds"),
    ({"nodeMetricExpirationSeconds": 0}, "nodeMetricExpiredSeconds should be a positive value"),
    ({"podSelectors": [{"name": "a", "selector": {"matchExpressions": [{"key": "k", "operator": "Bogus"}]}}]},
     "not a valid label selector operator"),
])
def test_lownodeload_validation(args: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        lownodeload(args)


def test_migration_controller_defaults() -> None:
    m = migration({})
    assert (m.max_concurrent_reconciles, m.max_migrating_per_node, m.default_job_mode, m.default_job_ttl,
            m.scheduler_names, m.evict_qps, m.evict_burst, m.eviction_policy) == (
        1, 2, "ReservationFirst", 300, ["koord-scheduler"], 10, 1, "Eviction")
    assert set(m.object_limiters) == {"workload"} and m.object_limiters["workload"].duration == 300
    assert (m.arbitration.enabled, m.arbitration.interval) == (True, 0.5)
    assert migration({"evictQPS": "2.5"}).evict_qps == 2.5


@pytest.mark.parametrize(("args", "message"), [
    ({"evictQPS": 0}, "evictQPS must be greater than 0"),
    ({"evictQPS": "abc"}, "evictQPS must be greater than 0"),  # a string that does not parse reads 0
    ({"evictBurst": 0}, "evictBurst must be greater than 0"),
    ({"labelSelector": {"matchLabels": {"test/a/b/c": "123"}}}, "invalid label key"),
    ({"maxConcurrentReconciles": -1}, "maxConcurrentReconciles should be greater than or equal to 1"),
    ({"defaultJobMode": "unsupportedMode"}, "defaultJobMode must be ReservationFirst or EvictDirectly"),
    ({"defaultJobTTL": "-10m"}, "defaultJobTTL should be positive or zero"),
    ({"skipEvictionGates": ["NoSuchGate"]}, "unknown eviction gate"),
    ({"maxMigratingPerNamespace": -1}, "maxMigratingPerNamespace should be greater or equal 0"),
    ({"maxMigratingGlobally": -1}, "maxMigratingGlobally should be greater or equal 0"),
    ({"maxMigratingPerNode": -1}, "maxMigratingPerNode should be greater or equal 0"),
    ({"maxUnavailablePerWorkload": "abc"}, "maxUnavailablePerWorkload is invalid, err:"),
    ({"namespaces": {"include": ["a"], "exclude": ["b"]}}, "only one of Include/Exclude namespaces can be set"),
])
def test_migration_controller_validation(args: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        migration(args)


@pytest.mark.parametrize("value", [0, 10, 100, -1, "10%", "0%"])
def test_per_workload_values_accepted(value: int | str) -> None:
    """Negative integers pass (upstream does not check the value), for both per-workload fields
    (TestValidateMigrationControllerArgs_MaxMigratingPerWorkload, _MaxUnavailablePerWorkload)."""
    assert migration({"maxMigratingPerWorkload": value}).max_migrating_per_workload == value
    assert migration({"maxUnavailablePerWorkload": value}).max_unavailable_per_workload == value


@pytest.mark.parametrize(("cfg", "names"), [
    ({**HEAD, "profiles": [{"name": "profile-1"}, {"name": "profile-1"}]}, "profiles[1].name: Duplicate value"),
    ({**HEAD, "healthzBindAddress": "0.0.0.0:111:222"}, "healthzBindAddress"),
    ({**HEAD, "metricsBindAddress": "0.0.0.0:111:222"}, "metricsBindAddress"),
    ({**HEAD, "nodeSelector": {"matchLabels": {"test/a/b/c/d": "test"}}}, "config.nodeSelector.matchLabels"),
    ({**HEAD, "profiles": [{"name": "test", "pluginConfig": [{"name": "test", "args": {}},
                                                              {"name": "test", "args": {}}]}]},
     "pluginConfig[1]: Duplicate value: 'test'"),
    ({**HEAD, "profiles": [{"name": "a"}, {}]}, "profiles[1].name: Required value"),
    ({**HEAD, "deschedulingInterval": "ten seconds"}, "config.deschedulingInterval"),
    ({**HEAD, "maxNoOfPodsToEvictPerNode": -1}, "config.maxNoOfPodsToEvictPerNode"),
    ({**HEAD, "dryrun": True}, "config.dryrun: unknown field (did you mean 'dryRun'?)"),
    ({**HEAD, "profiles": [{"name": "a", "pluginConfig": [{"name": "LowNodeLoad", "args": {"nodefit": True}}]}]},
     "args.nodefit: unknown field (did you mean 'nodeFit'?)"),
    ({**HEAD, "profiles": [{"name": "a", "pluginConfig": [{"name": "LowNodeLoad", "args": {
        "kind": "MigrationControllerArgs"}}]}]}, "were not of type LowNodeLoadArgs"),
    ({**HEAD, "leaderElection": {"leaseDuration": "5s", "renewDeadline": "10s"}},
     "LeaseDuration must be greater than RenewDeadline"),
    ({"apiVersion": "descheduler/v1alpha1", "kind": "DeschedulerConfiguration"}, "apiVersion/kind must be"),
])
def test_configuration_refused(cfg: dict[str, Any], names: str, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(tmp_path, cfg, capsys)
    assert line.startswith("koord-descheduler: invalid --config: ")
    assert names in line


def test_duplicate_keys_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = "apiVersion: descheduler/v1alpha2\nkind: DeschedulerConfiguration\ndryRun: true\ndryRun: false\n"
    assert 'line 4: duplicate field "dryRun"' in refused(tmp_path, text, capsys)


@pytest.mark.parametrize("plugin", ["RemovePodsViolatingNodeTaints", "HighNodeUtilization", "ScaleDownBinPack"])
def test_upstream_plugins_not_built_are_refused_by_name(plugin: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    cfg = config({"cpu": 30}, {"cpu": 50})
    cfg["profiles"][0]["plugins"]["deschedule"] = {"enabled": [{"name": plugin}]}
    line = refused(tmp_path, cfg, capsys)
    assert f"plugin {plugin!r} is not built by koord-descheduler; supported: DefaultEvictor, LowNodeLoad" in line


@pytest.mark.parametrize(("plugins", "message"), [
    ({"evict": {"disabled": [{"name": "*"}], "enabled": [{"name": "DefaultEvictor"}, {"name": "DefaultEvictor"}]}},
     "already registered"),
    ({"deschedule": {"enabled": [{"name": "LowNodeLoad"}]}}, 'plugin "LowNodeLoad" does not extend deschedule'),
    ({"balance": {"enabled": [{"name": "NoSuchPlugin"}]}}, 'Balance "NoSuchPlugin" does not exist'),
])
def test_framework_errors(plugins: dict[str, Any], message: str, tmp_path: Path,
                          capsys: pytest.CaptureFixture[str]) -> None:
    cfg = config({"cpu": 30}, {"cpu": 50}, balance=False)
    cfg["profiles"][0]["plugins"].update(plugins)
    assert message in refused(tmp_path, cfg, capsys)


def test_configmap_holding_the_file() -> None:
    """Upstream's config/manager/descheduler-config.yaml shape: the file under koord-descheduler-config."""
    inner = ("apiVersion: descheduler/v1alpha2\nkind: DeschedulerConfiguration\ndeschedulingInterval: 10s\n"
             "profiles:\n- name: koord-descheduler\n  plugins:\n    balance:\n      enabled:\n"
             "      - name: LowNodeLoad\n")
    text = ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: descheduler-config}\ndata:\n"
            "  koord-descheduler-config: |\n" + "".join(f"    {line}\n" for line in inner.splitlines()))
    cfg = parse_text(text)
    assert cfg.descheduling_interval == 10 and cfg.profiles[0].plugins["balance"] == ["LowNodeLoad"]
