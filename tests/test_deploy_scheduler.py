"""deploy/scheduler/: koord-sched's Deployment, upstream's v1.7 ConfigMap, Service and RBAC render with kustomize,
validate against the Kubernetes schemas, take none of the chart's names, and stay in step with the CLI: the
Deployment's command line parses, its config is the chart's unchanged and loads, the probes hit what `run`
serves."""

from __future__ import annotations

import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from test_deploy_chart import CHART, CHART_OBJECTS, VERSIONS, _validate, chart_render, kubectl

from koordlet import __version__
from scheduler import kubeflags
from scheduler.cli import parser
from scheduler.config import load_config
from scheduler.services import DiagnosisAPI, DiagnosisServer

ROOT = Path(__file__).resolve().parents[1]
SCHED = ROOT / "deploy" / "scheduler"
CHART_CONFIG = CHART / "koord-scheduler-config-v1.7.0.yaml"


def _docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def rendered() -> list[dict[str, Any]]:
    out = subprocess.run([kubectl(), "kustomize", str(SCHED)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return _docs(out.stdout)


def one(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [obj] = [o for o in objs if o["kind"] == kind]
    return obj


def test_renders_valid_objects_in_the_namespace_none_with_a_chart_name() -> None:
    objs = rendered()
    kinds = sorted(o["kind"] for o in objs)
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "Role", "RoleBinding",
                     "Service", "ServiceAccount"]
    assert all(o["metadata"].get("namespace", "koordinator-system") == "koordinator-system" for o in objs)
    chart = {(d["kind"], d["metadata"]["name"]) for v in VERSIONS for d in _docs(chart_render(v))}
    assert ("ConfigMap", "koord-scheduler-config") in chart
    assert not {(o["kind"], o["metadata"]["name"]) for o in objs} & (chart | CHART_OBJECTS)
    for obj in objs:
        _validate(obj)
    kust = yaml.safe_load((SCHED / "kustomization.yaml").read_text())
    assert sorted(kust["resources"]) == sorted(p.name for p in SCHED.glob("*.yaml") if p.name != "kustomization.yaml")
    # the image `make image` tags, the one deploy/ runs the agent from
    [image] = kust["images"]
    [ctr] = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert ctr["image"] == f"{image['name']}:{image['newTag']}" and image["newTag"] == __version__
    assert image == yaml.safe_load((ROOT / "deploy" / "kustomization.yaml").read_text())["images"][0]


def test_the_configmap_is_the_charts_v1_7_data_unchanged() -> None:
    ours = one(rendered(), "ConfigMap")
    [chart] = _docs(CHART_CONFIG.read_text())
    assert ours["data"] == chart["data"] and ours["metadata"]["name"] != chart["metadata"]["name"]


def test_the_command_line_parses_and_runs_the_mounted_config_with_leader_election(tmp_path: Path) -> None:
    objs = rendered()
    dep, cm = one(objs, "Deployment"), one(objs, "ConfigMap")
    spec = dep["spec"]["template"]["spec"]
    [ctr] = spec["containers"]
    assert ctr["command"] == ["koord-sched", "run"]
    ns = parser().parse_args([*ctr["command"][1:], *ctr["args"]])
    # the config file is where the ConfigMap volume puts its key
    [mount] = ctr["volumeMounts"]
    [volume] = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == cm["metadata"]["name"]
    [item] = volume["configMap"]["items"]
    assert ns.config == f"{mount['mountPath']}/{item['path']}"
    local = tmp_path / item["path"]
    local.write_text(cm["data"][item["key"]])
    cfg = load_config(str(local))
    assert cfg.leader_elect and (cfg.lease_namespace, cfg.lease_name) == ("koordinator-system", "koord-scheduler")
    assert ns.leader_elect is None  # nothing on the command line overrides the config's leaderElection
    assert cfg.scheduler_name == "koord-scheduler" and ns.scheduler_name is None
    # the probes and the named ports are the ones `run` serves
    assert kubeflags.diagnosis_addr(ns) == ":10251"
    ports = {p["name"]: p["containerPort"] for p in ctr["ports"]}
    assert ports["http-metrics"] == 10251 and ports["services"] == kubeflags.services_port(ns)
    with served() as port:
        for probe in (ctr["livenessProbe"], ctr["readinessProbe"]):
            assert probe["httpGet"]["port"] == ports["http-metrics"]
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{probe['httpGet']['path']}", timeout=5) as r:
                assert r.status == 200


def test_the_pods_run_as_the_rbac_service_account_behind_the_service() -> None:
    objs = rendered()
    dep, svc, sa = one(objs, "Deployment"), one(objs, "Service"), one(objs, "ServiceAccount")
    template = dep["spec"]["template"]
    assert template["spec"]["serviceAccountName"] == sa["metadata"]["name"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    assert svc["spec"]["selector"].items() <= template["metadata"]["labels"].items()
    [ctr] = template["spec"]["containers"]
    names = {p["name"] for p in ctr["ports"]}
    assert {p["targetPort"] for p in svc["spec"]["ports"]} == names
    assert dep["spec"]["replicas"] >= 2  # leader election has a candidate to hand over to


@contextmanager
def served() -> Iterator[int]:
    @contextmanager
    def nothing() -> Iterator[tuple[None, list[Any]]]:
        yield None, []

    server = DiagnosisServer(("127.0.0.1", 0), DiagnosisAPI(nothing))
    server.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
