"""deploy/descheduler/: koord-descheduler's Deployment, ConfigMap and RBAC render with kustomize, validate against the
Kubernetes schemas, take none of the chart's names, and stay in step with the command: the Deployment's command line
parses (upstream's binary: no subcommand), its mounted configuration is upstream's example (as the chart renders it)
with LowNodeLoad enabled and loads, leader election is on with upstream's Lease, the probes hit what `run` serves,
and the configuration drains a hot node in `simulate` through the MigrationController's PodMigrationJobs once
upstream's anomaly condition is met."""

from __future__ import annotations

import json
import socket
import subprocess
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_deploy_chart import CHART_OBJECTS, _validate, kubectl

from koordlet import __version__
from scheduler.descheduler import cli, flags
from scheduler.descheduler.config.decode import load_config
from scheduler.descheduler.config.lownodeload_args import LowNodeLoadArgs
from scheduler.descheduler.config.migration_args import MigrationControllerArgs
from scheduler.descheduler.metrics import DeschedulerMetrics
from scheduler.descheduler.serving import HealthServer, split_address

from deschedbuild import node, node_metrics, pod

ROOT = Path(__file__).resolve().parents[2]
DESCHED = ROOT / "deploy" / "descheduler"


def rendered() -> list[dict[str, Any]]:
    out = subprocess.run([kubectl(), "kustomize", str(DESCHED)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def one(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [obj] = [o for o in objs if o["kind"] == kind]
    return obj


def mounted_config(objs: list[dict[str, Any]], tmp: Path) -> tuple[Any, Path]:
    """The Deployment's parsed command line, and its --config written where the ConfigMap volume puts it (locally)."""
    dep, cm = one(objs, "Deployment"), one(objs, "ConfigMap")
    spec = dep["spec"]["template"]["spec"]
    [ctr] = spec["containers"]
    assert ctr["command"] == ["koord-descheduler"]
    ns = cli.parser().parse_args(cli.with_command(ctr["args"]))
    [mount] = ctr["volumeMounts"]
    [volume] = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == cm["metadata"]["name"]
    [item] = volume["configMap"]["items"]
    assert ns.command == "run" and ns.config == f"{mount['mountPath']}/{item['path']}"
    local = tmp / item["path"]
    local.write_text(cm["data"][item["key"]])
    return ns, local


def test_renders_valid_objects_in_the_namespace_none_with_a_chart_name() -> None:
    objs = rendered()
    assert sorted(o["kind"] for o in objs) == ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "Role",
                                               "RoleBinding", "ServiceAccount"]
    assert all(o["metadata"].get("namespace", "koordinator-system") == "koordinator-system" for o in objs)
    assert not {(o["kind"], o["metadata"]["name"]) for o in objs} & CHART_OBJECTS
    for obj in objs:
        _validate(obj)
    kust = yaml.safe_load((DESCHED / "kustomization.yaml").read_text())
    assert sorted(kust["resources"]) == sorted(p.name for p in DESCHED.glob("*.yaml") if p.name != "kustomization.yaml")
    [image] = kust["images"]
    [ctr] = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert ctr["image"] == f"{image['name']}:{image['newTag']}" and image["newTag"] == __version__
    assert image == yaml.safe_load((ROOT / "deploy" / "kustomization.yaml").read_text())["images"][0]


def test_the_command_line_runs_upstreams_example_with_leader_election(tmp_path: Path) -> None:
    objs = rendered()
    ns, local = mounted_config(objs, tmp_path)
    cfg = flags.applied(ns, load_config(str(local)))
    le = cfg.leader_election
    assert le.leader_elect and (le.resource_namespace, le.resource_name) == ("koordinator-system", "koord-descheduler")
    assert ns.leader_elect is None and not flags.not_acted_on(ns)  # the config decides; every flag is acted on
    [profile] = cfg.profiles
    assert profile.enabled("balance") == ["LowNodeLoad"] and profile.enabled("evict") == ["MigrationController"]
    assert profile.enabled("filter") == ["MigrationController"]  # upstream's default filter plugin
    migration = profile.args["MigrationController"]  # the chart's args, upstream's defaults otherwise
    assert isinstance(migration, MigrationControllerArgs)
    assert (migration.eviction_policy, migration.evict_qps, migration.evict_burst) == ("Eviction", 10, 1)
    assert migration.namespaces is not None and migration.namespaces.exclude == ("kube-system", "koordinator-system")
    assert (migration.default_job_mode, migration.scheduler_names) == ("ReservationFirst", ["koord-scheduler"])
    args = profile.args["LowNodeLoad"]
    assert isinstance(args, LowNodeLoadArgs) and cfg.descheduling_interval == 10
    pool = args.node_pools[0]
    assert (pool.low, pool.high) == ({"cpu": 45, "memory": 55}, {"cpu": 75, "memory": 80})
    dep = one(objs, "Deployment")
    assert dep["spec"]["replicas"] >= 2  # a candidate to hand over to
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == one(objs, "ServiceAccount")["metadata"]["name"]
    [ctr] = dep["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in ctr["ports"]}
    assert split_address(cfg.healthz_bind_address)[1] == ports["http-metrics"] == 10251
    assert cfg.metrics_bind_address == cfg.healthz_bind_address
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    server = HealthServer(("127.0.0.1", free), DeschedulerMetrics())
    server.start()
    try:
        for probe in (ctr["livenessProbe"], ctr["readinessProbe"]):
            assert probe["httpGet"]["port"] == ports["http-metrics"]
            with urllib.request.urlopen(f"http://127.0.0.1:{free}{probe['httpGet']['path']}", timeout=5) as r:
                assert r.status == 200
    finally:
        server.stop()


def test_the_example_drains_a_hot_node_after_upstreams_anomaly_rounds(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], validate_crd: Callable[[str, dict[str, Any]], None]
) -> None:
    """A Deployment's ten Ready pods hot on n1, eight of koord-scheduler and two of another scheduler:
    after upstream's anomaly rounds, LowNodeLoad picks n1's pods and the MigrationController turns them into
    ReservationFirst PodMigrationJobs (valid against the CRD), within maxMigratingPerNode (2), for koord-scheduler's
    pods only (its `schedulerNames` default, upstream's ReservationFirst rule)."""
    _, local = mounted_config(rendered(), tmp_path)
    nodes = [node(n, 4000, 16 << 30, 110) for n in ("n1", "n2", "n3")]
    dep_ref = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "uid-web", "controller": True,
               "blockOwnerDeletion": True}
    rs_ref = {**dep_ref, "kind": "ReplicaSet", "name": "web-5d8f", "uid": "uid-web-5d8f"}
    labels = {"app": "web", "pod-template-hash": "5d8f"}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "web", "namespace": "default", "uid": "uid-web"},
                  "spec": {"replicas": 10, "selector": {"matchLabels": {"app": "web"}}}}
    replica_set = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                   "metadata": {"name": "web-5d8f", "namespace": "default", "uid": "uid-web-5d8f", "labels": labels,
                                "ownerReferences": [dep_ref]},
                   "spec": {"replicas": 10, "selector": {"matchLabels": labels}}}
    pods = []
    for i in range(10):
        scheduler = "koord-scheduler" if i < 8 else "default-scheduler"
        p = pod(f"web-{i}" if i < 8 else f"plain-{i}", 400, 1 << 30, "n1", owner=None, labels=dict(labels),
                schedulerName=scheduler)
        p["metadata"]["ownerReferences"] = [rs_ref]
        p["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        pods.append(p)
    pods.append(pod("other", 400, 1 << 30, "n2"))
    # the default scheduler's pods use the most: LowNodeLoad would take them first, were they migratable
    busiest = {f"default/plain-{i}": {"cpu": "700m", "memory": str(1 << 30)} for i in (8, 9)}
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump_all([*nodes, deployment, replica_set, *pods,
                                                               *node_metrics(nodes, pods, usage=busiest)]))
    results = []
    for rounds in (5, 6):  # consecutiveAbnormalities 5: acted on in the 6th round in a row, not before
        capsys.readouterr()
        assert cli.main(["simulate", "--cluster", str(tmp_path / "cluster.yaml"), "--config", str(local),
                         "--rounds", str(rounds), "--now", "2024-05-01T00:00:00Z", "-o", "json"]) == 0
        results.append(json.loads(capsys.readouterr().out))
    assert results[0]["evictions"] == [] and results[0]["podMigrationJobs"] == []
    evictions, jobs = results[1]["evictions"], results[1]["podMigrationJobs"]
    assert len(evictions) == 2 and {e["node"] for e in evictions} == {"n1"}  # maxMigratingPerNode
    assert {e["plugin"] for e in evictions} == {"LowNodeLoad"}
    assert sorted(j["spec"]["podRef"]["name"] for j in jobs) == sorted(e["name"] for e in evictions)
    assert all(name.startswith("web-") for name in (e["name"] for e in evictions))  # never another scheduler's
    for job in jobs:
        assert job["spec"]["mode"] == "ReservationFirst"
        validate_crd("scheduling.koordinator.sh_podmigrationjobs.yaml", job)
