"""deploy/monitoring/: the Grafana dashboards are what demo/dashboards.py writes, every panel query and every rule
names only families that koordlet, koord-sched or koord-descheduler export (or our recording rules) and parses;
the kustomize component adds kube-prometheus-stack's selector labels and the dashboards' ConfigMaps."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from test_deploy import SERVICE_MONITOR_SCHEMA
from test_deploy_alerts import promtool
from test_deploy_chart import kubectl

from demo import dashboards

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
MONITORING = DEPLOY / "monitoring"
RULES = DEPLOY / "prometheus" / "rules.yaml"
# Grafana's variables, as a query sees them for the check (a regex label matcher or a range)
VARIABLES = {"$__rate_interval": "1m", "$node": ".*", "$instance": ".*"}
_KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool",
             "offset", "inf", "nan"}


def substituted(expr: str) -> str:
    for name, value in sorted(VARIABLES.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(name, value)
    assert "$" not in expr, f"a Grafana variable the check does not know: {expr}"
    return expr


def metric_names(expr: str) -> set[str]:
    """The series names a PromQL expression selects: strings, label matchers, ranges and the label lists of
    by/without/on/ignoring/group_* are dropped; what remains and is not a function call, keyword or number is one."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', substituted(expr))
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\boffset\s+\w+", " ", e)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", e):
        rest = e[m.end():].lstrip()
        if m.group() in _KEYWORDS or rest.startswith("(") or re.match(r"\d", e[m.start() - 1:m.start()] or " "):
            continue
        names.add(m.group())
    return names


def exported() -> set[str]:
    """Every series name the programs can expose: the agent's families (README's metrics reference, every gate on),
    koord-sched's registry, koord-descheduler's counter; histograms as their _bucket/_sum/_count series."""
    from koordlet.reference import metric_catalogue
    from scheduler.descheduler.metrics import PODS_EVICTED
    from scheduler.metrics import SchedulerMetrics

    families = {name: kind for name, (kind, *_rest) in metric_catalogue().items()}
    for fam in SchedulerMetrics().registry.collect():
        families[fam.name + ("_total" if fam.type == "counter" else "")] = fam.type
    families[PODS_EVICTED] = "counter"  # component-base's name: no _total
    out = {"up"}  # Prometheus' own, per target
    for name, kind in families.items():
        out |= {name + s for s in ("_bucket", "_sum", "_count")} if kind == "histogram" else {name}
    return out


def rules() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def panel_queries() -> Iterator[tuple[str, str, str]]:
    """(dashboard file, panel title, expr) of every panel target in the committed JSON."""
    for path in sorted((MONITORING / "dashboards").glob("*.json")):
        for panel in json.loads(path.read_text())["panels"]:
            for target in panel.get("targets", []):
                yield path.name, panel["title"], target["expr"]


def test_committed_dashboards_are_what_the_module_writes() -> None:
    files = {p.name for p in (MONITORING / "dashboards").glob("*.json")}
    assert files == {d.file for d in dashboards.DASHBOARDS}
    for d in dashboards.DASHBOARDS:
        assert (MONITORING / "dashboards" / d.file).read_text() == dashboards.text(d), \
            f"{d.file} is stale: make docs (python -m demo.dashboards --write)"


def test_every_panel_and_rule_names_families_that_exist() -> None:
    known = exported() | {r["record"] for r in rules() if "record" in r}
    used: dict[str, set[str]] = {}
    for where, title, expr in panel_queries():
        names = metric_names(expr)
        assert names, f"{where} / {title}: no series in {expr}"
        for n in names:
            used.setdefault(n, set()).add(f"{where} / {title}")
    for r in rules():
        for n in metric_names(r["expr"]):
            used.setdefault(n, set()).add(f"rules.yaml {r.get('alert') or r.get('record')}")
    unknown = {n: sorted(w) for n, w in used.items() if n not in known}
    assert not unknown, f"queries name series nothing exports: {unknown}"
    # the families the dashboards are about are all shown somewhere
    for family in ("koordlet_node_used_cpu_cores", "koordlet_pod_memory_working_set_bytes",
                   "koordlet_be_suppress_cpu_cores",
                   "koordlet_pod_eviction", "koordlet_pod_cpu_schedule_latency_seconds_bucket",
                   "koordlet_agent_skipped_items_total", "koordlet_agent_loop_duration_seconds_bucket",
                   "scheduler_schedule_attempts_total", "koordlet_node_resource_allocatable",
                   "koordlet_device_healthy"):
        assert family in used, family


@pytest.mark.parametrize(("expr", "names"), [
    ('sum by (node, reason) (increase(koordlet_pod_eviction{node=~"$node", reason!="x"}[$__rate_interval]))',
     {"koordlet_pod_eviction"}),
    ("histogram_quantile(0.99, sum by (le) (rate(a_bucket[5m]))) / on (pod) group_left (qos) b", {"a_bucket", "b"}),
    ('time() - koordlet_typo_seconds{instance=~"$node"} > 180 and c offset 1h', {"koordlet_typo_seconds", "c"}),
    ("absent(up{job=\"koordlet\"})", {"up"}),
])
def test_the_name_check_finds_every_series(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names
    assert "koordlet_typo_seconds" not in exported()


def test_every_panel_query_parses(tmp_path: Path) -> None:
    """promtool parses each query (Grafana's variables substituted) as a recording rule's expression."""
    exprs = [substituted(expr) for _, _, expr in panel_queries()]
    doc = {"groups": [{"name": "panels", "rules": [{"record": f"panel_{i}", "expr": e}
                                                    for i, e in enumerate(exprs)]}]}
    (tmp_path / "panels.yaml").write_text(yaml.safe_dump(doc))
    out = subprocess.run([promtool(), "check", "rules", str(tmp_path / "panels.yaml")], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_dashboards_are_grafana_models() -> None:
    uids = set()
    for path in sorted((MONITORING / "dashboards").glob("*.json")):
        d = json.loads(path.read_text())
        uids.add(d["uid"])
        variables = {v["name"]: v for v in d["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
        ids = [p["id"] for p in d["panels"]]
        assert len(ids) == len(set(ids)), path.name
        cells = set()
        for panel in d["panels"]:
            g = panel["gridPos"]
            assert g["x"] >= 0 and g["x"] + g["w"] <= 24, (path.name, panel["title"])
            for x in range(g["x"], g["x"] + g["w"]):  # no two panels overlap
                assert (x, g["y"]) not in cells, (path.name, panel["title"])
                cells.add((x, g["y"]))
            if panel["type"] == "row":
                continue
            assert panel["datasource"]["uid"] == "${datasource}"
            refs = [t["refId"] for t in panel["targets"]]
            assert refs and len(refs) == len(set(refs))
            used = set(re.findall(r"\$(\w+)", " ".join(t["expr"] for t in panel["targets"])))
            assert used - {"__rate_interval"} <= set(variables), (path.name, panel["title"])
    assert len(uids) == len(dashboards.DASHBOARDS)


# --- the kustomize component ----------------------------------------------------------------------------------

def _render(tmp_path: Path, extra: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """A user's kustomization: the agent's manifests plus the component (paths relative, as kustomize wants)."""
    user = tmp_path / "user"
    user.mkdir()
    kust: dict[str, Any] = {"resources": [os.path.relpath(DEPLOY, user)],
                            "components": [os.path.relpath(MONITORING, user)], **(extra or {})}
    (user / "kustomization.yaml").write_text(yaml.safe_dump(kust))
    out = subprocess.run([kubectl(), "kustomize", str(user)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def test_component_labels_the_monitors_for_kube_prometheus_stack(tmp_path: Path) -> None:
    objs = _render(tmp_path)
    monitoring = {(o["kind"], o["metadata"]["name"]): o for o in objs
                  if o["apiVersion"].startswith("monitoring.coreos.com/")}
    # the objects are deploy/servicemonitor/'s, the label added and nothing else changed
    shipped = {(d["kind"], d["metadata"]["name"]): d for p in (DEPLOY / "servicemonitor").glob("*.yaml")
               for d in yaml.safe_load_all(p.read_text()) if d}
    assert set(monitoring) == set(shipped) == {
        ("ServiceMonitor", "koordlet-py"), ("PrometheusRule", "koordlet-py"), ("PrometheusRule", "koordlet-py-dcgm"),
        ("ServiceMonitor", "koord-sched")}
    for key, obj in monitoring.items():
        assert obj["metadata"]["labels"] == {**shipped[key]["metadata"]["labels"], "release": "kube-prometheus-stack"}
        assert {**obj, "metadata": shipped[key]["metadata"]} == shipped[key]
    assert {o["kind"] for o in objs} >= {"DaemonSet", "Service"}  # the user's resources are kept


def test_koord_sched_service_monitor_scrapes_its_metrics_port() -> None:
    [sm] = yaml.safe_load_all((DEPLOY / "servicemonitor" / "koord-sched.yaml").read_text())
    jsonschema.validate(sm, SERVICE_MONITOR_SCHEMA)
    [svc] = yaml.safe_load_all((DEPLOY / "scheduler" / "service.yaml").read_text())
    [deployment] = yaml.safe_load_all((DEPLOY / "scheduler" / "deployment.yaml").read_text())
    assert sm["metadata"]["namespace"] == svc["metadata"]["namespace"]
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    [endpoint] = sm["spec"]["endpoints"]
    port = next(p for p in svc["spec"]["ports"] if p["name"] == endpoint["port"])
    tmpl = deployment["spec"]["template"]
    [ctr] = tmpl["spec"]["containers"]
    assert {"name": port["targetPort"], "containerPort": port["port"]}.items() <= next(
        c for c in ctr["ports"] if c["name"] == port["targetPort"]).items()
    assert endpoint["path"] == tmpl["metadata"]["annotations"]["prometheus.io/path"]
    assert str(port["port"]) == tmpl["metadata"]["annotations"]["prometheus.io/port"]


def test_component_ships_each_dashboard_to_grafanas_sidecar(tmp_path: Path) -> None:
    import kubernetes_validate

    maps = [o for o in _render(tmp_path) if o["kind"] == "ConfigMap"]
    files = {}
    for cm in maps:
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert cm["metadata"]["namespace"] == "koordinator-system"
        kubernetes_validate.validate(cm, "1.30.0", strict=True)
        [(name, body)] = cm["data"].items()
        files[name] = body
    assert files == {p.name: p.read_text() for p in (MONITORING / "dashboards").glob("*.json")}


def test_another_release_name_is_one_patch(tmp_path: Path) -> None:
    patch = {"target": {"group": "monitoring.coreos.com"},
             "patch": '[{"op": "replace", "path": "/metadata/labels/release", "value": "monitoring"}]'}
    objs = _render(tmp_path, {"patches": [patch]})
    releases = [o["metadata"]["labels"].get("release") for o in objs
                if o["apiVersion"].startswith("monitoring.coreos.com/")]
    assert releases == ["monitoring"] * 4  # two ServiceMonitors, two PrometheusRules


def test_servicemonitor_directory_still_applies_with_kubectl_f() -> None:
    """deploy/servicemonitor/ is also a kustomize base (for the component); its file is named `Kustomization` so
    that `kubectl apply -f deploy/servicemonitor/` (which reads *.yaml, *.yml, *.json) does not see it."""
    d = DEPLOY / "servicemonitor"
    assert not list(d.glob("kustomization.y*ml")) and (d / "Kustomization").is_file()
    out = subprocess.run([kubectl(), "kustomize", str(d)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    kinds = sorted(o["kind"] for o in yaml.safe_load_all(out.stdout) if o)
    assert kinds == sorted(o["kind"] for p in d.glob("*.yaml") for o in yaml.safe_load_all(p.read_text()) if o)
