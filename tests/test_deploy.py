"""deploy/daemonset.yaml stays in step with the CLI: every arg parses, env and probes match what we serve."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from koordlet.cli import config_from_args, parse_args

MANIFEST = Path(__file__).resolve().parents[1] / "deploy" / "daemonset.yaml"


def _daemonset() -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    [ds] = [d for d in docs if d["kind"] == "DaemonSet"]
    return ds


def test_manifest_args_are_accepted_by_the_cli() -> None:
    ds = _daemonset()
    [ctr] = ds["spec"]["template"]["spec"]["containers"]
    assert ctr["command"][-1] == "run"
    ns = parse_args(["run", *ctr["args"]])
    cfg = config_from_args(ns, env={"NODE_NAME": "n1"}, isdir=lambda _: True)  # the pod has its mounts
    assert cfg.paths.cgroup_root == "/host-cgroup/" and cfg.paths.sys_root == "/host-sys/"
    assert cfg.gate("PSICollector") and cfg.listen == ("0.0.0.0", 9316)
    assert not cfg.standalone
    # the NRI plugin dials the runtime's socket through the host /var/run mount; device nodes come from the
    # privileged container's /dev, which is the host's
    assert cfg.nri.enabled and cfg.nri.socket(cfg.paths) == "/host-var-run/nri/nri.sock"
    assert cfg.paths.dev_root.rstrip("/") == "/dev"


def test_manifest_mounts_cover_every_host_root() -> None:
    spec = _daemonset()["spec"]["template"]["spec"]
    [ctr] = spec["containers"]
    mounts = {m["mountPath"].rstrip("/") for m in ctr["volumeMounts"]}
    assert {"/host-cgroup", "/host-sys", "/host-sys-fs", "/host-var-run", "/host-run", "/var/lib/kubelet", "/dev",
            "/usr/local/vgpu/containers"} <= mounts
    assert spec["hostPID"] is True  # /proc/ is read as the host's
    env = {e["name"]: e for e in ctr["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    probes = {ctr["livenessProbe"]["httpGet"]["path"], ctr["readinessProbe"]["httpGet"]["path"]}
    assert probes == {"/healthz", "/readyz"}


# --- every manifest, offline against the Kubernetes OpenAPI schemas ---------------------------------------------

DEPLOY = MANIFEST.parent
K8S_VERSION = "1.30.0"  # the oldest Kubernetes koordinator v1.7 supports; its schemas ship in kubernetes-validate


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _all_objects() -> list[tuple[str, dict[str, Any]]]:
    # deploy/chart/ holds a patch and a Helm plugin, not objects (tests/test_deploy_chart.py renders it);
    # deploy/prometheus/ Prometheus' own files and their promtool tests
    return [(str(p.relative_to(DEPLOY)), d) for p in sorted(DEPLOY.rglob("*.yaml"))
            if p.name != "kustomization.yaml" and p.relative_to(DEPLOY).parts[0] not in ("prometheus", "chart")
            for d in _docs(p)]


def test_every_kubernetes_object_is_valid_against_the_openapi_schemas() -> None:
    import kubernetes_validate

    kinds = set()
    for where, obj in _all_objects():
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # not a Kubernetes type: its own schema below
        kinds.add(obj["kind"])
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            raise AssertionError(f"{where}: {obj['kind']}/{obj['metadata']['name']}: {e.message} at "
                                 f"{'.'.join(map(str, e.path))}") from None
    # no Namespace: koordinator-system is koord-manager's too; deleting our manifests must not delete it
    assert kinds == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "DaemonSet",
                     "Service", "Deployment", "ConfigMap"}  # the last two: deploy/scheduler/


def test_a_broken_manifest_is_caught() -> None:
    """The validation is real: a typo'd field and a wrong type fail it."""
    import kubernetes_validate

    ds = _daemonset()
    ds["spec"]["template"]["spec"]["hostPid"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, K8S_VERSION, strict=True)
    ds = _daemonset()
    ds["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "9316"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, K8S_VERSION, strict=True)


# prometheus-operator's ServiceMonitor (monitoring.coreos.com/v1), the fields we use, restated from its CRD;
# unknown fields are rejected like the strict validation above
_LABEL_SELECTOR = {"type": "object", "additionalProperties": False, "properties": {
    "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
    "matchExpressions": {"type": "array"}}}
_RELABEL = {"type": "object", "additionalProperties": False, "properties": {
    "sourceLabels": {"type": "array", "items": {"type": "string", "pattern": "^[a-zA-Z_][a-zA-Z0-9_]*$"}},
    "targetLabel": {"type": "string"}, "regex": {"type": "string"}, "replacement": {"type": "string"},
    "separator": {"type": "string"}, "modulus": {"type": "integer"},
    "action": {"enum": ["replace", "keep", "drop", "hashmod", "labelmap", "labeldrop", "labelkeep", "lowercase",
                        "uppercase", "keepequal", "dropequal"]}}}
SERVICE_MONITOR_SCHEMA = {
    "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"], "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {"const": "ServiceMonitor"},
        "metadata": {"type": "object", "required": ["name", "namespace"]},
        "spec": {"type": "object", "required": ["selector", "endpoints"], "additionalProperties": False, "properties": {
            "jobLabel": {"type": "string"}, "selector": _LABEL_SELECTOR,
            "namespaceSelector": {"type": "object", "additionalProperties": False, "properties": {
                "any": {"type": "boolean"}, "matchNames": {"type": "array", "items": {"type": "string"}}}},
            "endpoints": {"type": "array", "items": {"type": "object", "additionalProperties": False, "properties": {
                "port": {"type": "string"}, "path": {"type": "string"}, "scheme": {"enum": ["http", "https"]},
                "interval": {"type": "string", "pattern": "^(0|(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"},
                "honorLabels": {"type": "boolean"}, "relabelings": {"type": "array", "items": _RELABEL},
                "metricRelabelings": {"type": "array", "items": _RELABEL}}}}}}}}


def test_service_monitor_selects_the_service_on_the_metrics_port() -> None:
    import jsonschema

    [sm] = _docs(DEPLOY / "servicemonitor" / "servicemonitor.yaml")
    jsonschema.validate(sm, SERVICE_MONITOR_SCHEMA)
    [svc] = _docs(DEPLOY / "service.yaml")
    assert sm["metadata"]["namespace"] == svc["metadata"]["namespace"] == "koordinator-system"
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    [port] = svc["spec"]["ports"]
    assert [e["port"] for e in sm["spec"]["endpoints"]] == [port["name"]] and port["port"] == 9316
    assert svc["spec"]["selector"].items() <= _daemonset()["spec"]["template"]["metadata"]["labels"].items()
    [ctr] = _daemonset()["spec"]["template"]["spec"]["containers"]
    assert {"name": port["targetPort"], "containerPort": 9316} in ctr["ports"]


def test_prometheus_rule_carries_the_rules_file_groups() -> None:
    """prometheus-operator users get the same recording rules as a plain Prometheus (deploy/prometheus/rules.yaml,
    checked by promtool and queried end to end in test_e2e_prometheus.py)."""
    [rule] = _docs(DEPLOY / "servicemonitor" / "prometheusrule.yaml")
    [sm] = _docs(DEPLOY / "servicemonitor" / "servicemonitor.yaml")
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert rule["metadata"]["namespace"] == sm["metadata"]["namespace"]
    assert rule["metadata"]["labels"] == sm["metadata"]["labels"]
    assert rule["spec"]["groups"] == yaml.safe_load((DEPLOY / "prometheus" / "rules.yaml").read_text())["groups"]


def test_kustomization_applies_every_cluster_manifest() -> None:
    kust = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert sorted(kust["resources"]) == sorted(p.name for p in DEPLOY.glob("*.yaml") if p.name != "kustomization.yaml")
    [image] = kust["images"]
    [ctr] = _daemonset()["spec"]["template"]["spec"]["containers"]
    assert ctr["image"] == f"{image['name']}:{image['newTag']}"
    from koordlet import __version__

    assert image["newTag"] == __version__  # what `make image` tags


# --- what the pod needs on a node -----------------------------------------------------------------------------------

def _tolerates(tolerations: list[dict[str, Any]], taint: dict[str, str]) -> bool:
    """Kubernetes' ToleratesTaint (k8s.io/api core/v1 toleration.go)."""
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        if t.get("key") and t["key"] != taint["key"]:
            continue
        op = t.get("operator", "Equal")
        if op == "Exists" or (op == "Equal" and t.get("value", "") == taint.get("value", "")):
            return True
    return False


@pytest.mark.parametrize("taint", [
    {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
    {"key": "huawei.com/Ascend910", "value": "true", "effect": "NoSchedule"},
    {"key": "cambricon.com/mlu", "value": "true", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/not-ready", "value": "", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unschedulable", "value": "", "effect": "NoSchedule"},
], ids=lambda t: t["key"])
def test_runs_on_gpu_npu_and_cordoned_nodes(taint: dict[str, str]) -> None:
    assert _tolerates(_daemonset()["spec"]["template"]["spec"]["tolerations"], taint)


def test_pod_is_node_critical_privileged_and_mounts_what_bcc_needs() -> None:
    spec = _daemonset()["spec"]["template"]["spec"]
    [ctr] = spec["containers"]
    assert spec["priorityClassName"] == "system-node-critical" and ctr["securityContext"]["privileged"] is True
    assert spec["hostNetwork"] is True  # kubelet on the node's address, NRI and metrics on the node
    mounts = {m["mountPath"].rstrip("/"): m for m in ctr["volumeMounts"]}
    volumes = {v["name"]: v["hostPath"]["path"].rstrip("/") for v in spec["volumes"]}
    # bcc: the node's headers at the same paths (the build link is absolute), tracepoints from tracefs
    for path in ("/lib/modules", "/usr/src", "/sys/kernel/tracing", "/sys/kernel/debug", "/var/run/koordlet"):
        assert volumes[mounts[path]["name"]] == path
    assert mounts["/lib/modules"].get("readOnly") and mounts["/usr/src"].get("readOnly")
    # kubelet's pod-resources socket sits under the kubelet dir mount
    cfg = config_from_args(parse_args(["run", *ctr["args"]]),
                           env={"NODE_NAME": "n1"}, isdir=lambda _: True)
    from koordlet.config import PodResourcesProxyConfig

    sock = PodResourcesProxyConfig.kubelet_socket(cfg.paths)
    assert any(sock.startswith(m + "/") for m in mounts), sock


def test_requests_and_limits_follow_the_benchmark() -> None:
    from apis.core.quantity import parse_quantity

    res = _daemonset()["spec"]["template"]["spec"]["containers"][0]["resources"]
    # benchmarks.daemon, 250 pods × 3 containers: 0.8–1.3 % of a core, 64–76 MiB steady; the eBPF loader child
    # peaks the container at ~175 MiB (docs in deploy/daemonset.yaml); the benchmark prints these beside its run
    assert 0.017 <= float(parse_quantity(res["requests"]["cpu"])) <= 0.1
    assert 61 << 20 <= parse_quantity(res["requests"]["memory"]) <= 128 << 20
    assert parse_quantity(res["limits"]["memory"]) >= 175 << 20
    assert parse_quantity(res["limits"]["cpu"]) > parse_quantity(res["requests"]["cpu"])


def test_scrape_annotations_point_at_the_metrics_endpoint() -> None:
    tmpl = _daemonset()["spec"]["template"]
    ann = tmpl["metadata"]["annotations"]
    [ctr] = tmpl["spec"]["containers"]
    cfg = config_from_args(parse_args(["run", *ctr["args"]]),
                           env={"NODE_NAME": "n1"}, isdir=lambda _: True)
    assert ann == {"prometheus.io/scrape": "true", "prometheus.io/port": str(cfg.listen[1]),
                   "prometheus.io/path": "/metrics"}


def test_prometheus_files_pass_promtool(tmp_path: Path) -> None:
    import shutil
    import subprocess

    from conftest import require

    require(shutil.which("promtool") is not None, "promtool (Debian's prometheus) is not installed")
    rules = DEPLOY / "prometheus" / "rules.yaml"
    out = subprocess.run(["promtool", "check", "rules", str(rules)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    # Debian's prometheus is built without Kubernetes discovery: the job as demo/ runs it, discovery replaced
    from demo.stack import local_scrape_config

    config = local_scrape_config(9316, "node-1")
    config["rule_files"] = [str(rules)]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    out = subprocess.run(["promtool", "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stdout + out.stderr
