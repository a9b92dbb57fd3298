"""deploy/chart/, our koordlet under Koordinator's own chart: rendered over the chart v1.5-v1.7 output (shared/
fixtures), it changes the koordlet container's image and adds bcc's two read-only mounts, nothing else; the Helm
post-renderer does the same on stdin. deploy/ (standalone) never names a chart object nor the namespace."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import CRD_DIR, require

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
OVERLAY = DEPLOY / "chart"
POST_RENDER = OVERLAY / "post-render"
CHART = CRD_DIR.parent / "fixtures" / "upstream-chart"
VERSIONS = ("v1.5.0", "v1.6.0", "v1.7.0")
K8S_VERSION = "1.30.0"  # as tests/test_deploy.py
# What the overlay adds: the node's kernel headers for bcc, read-only at the same paths as deploy/daemonset.yaml
ADDED_MOUNTS = {"/lib/modules", "/usr/src"}
# Every object the chart v1.5-v1.7 templates name, besides those in the fixtures (koordinator-sh/charts
# versions/v1.X.0/templates/*.yaml and rbac/*.yaml at a1963c5d; CRDs left out): ours must not take these names.
CHART_OBJECTS = {
    ("ServiceAccount", "koordlet"), ("ClusterRole", "koordlet-role"), ("ClusterRoleBinding", "koordlet-rolebinding"),
    ("Service", "koordlet-service"), ("ServiceMonitor", "koordlet-service-monitor"), ("DaemonSet", "koordlet"),
    ("DaemonSet", "koord-device-daemon"), ("Deployment", "koord-manager"), ("Deployment", "koord-scheduler"),
    ("Deployment", "koord-descheduler"), ("ServiceAccount", "koord-manager"), ("ServiceAccount", "koord-scheduler"),
    ("ServiceAccount", "koord-descheduler"), ("ClusterRole", "koord-manager-role"),
    ("ClusterRole", "koord-scheduler-role"), ("ClusterRole", "koord-descheduler-role"),
    ("ClusterRoleBinding", "koord-manager-rolebinding"), ("ClusterRoleBinding", "koord-scheduler-rolebinding"),
    ("ClusterRoleBinding", "koord-scheduler-rolebinding-custom"),
    ("ClusterRoleBinding", "koord-scheduler-rolebinding-volume"),
    ("ClusterRoleBinding", "koord-descheduler-rolebinding"), ("Role", "koord-leader-election-role"),
    ("RoleBinding", "koord-leader-election-rolebinding"), ("Service", "koordinator-webhook-service"),
    ("Secret", "koordinator-webhook-certs"), ("ConfigMap", "koord-scheduler-config"),
    ("ConfigMap", "koord-descheduler-config"), ("ConfigMap", "slo-controller-config"),
    ("ConfigMap", "gpu-shared-resource-templates"),
}


def kubectl() -> str:
    path = os.environ.get("KUBECTL") or shutil.which("kubectl")
    require(path is not None, "kubectl is not installed (scripts/install.sh dev installs Debian's kubernetes-client)")
    assert path is not None
    return path


def _docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def chart_render(version: str) -> str:
    """What `helm template` hands a post-renderer: the koordlet DaemonSet and the chart's ConfigMaps of a version."""
    files = [CHART / f"{name}-{version}.yaml" for name in ("koordlet", "slo-controller-config",
                                                             "koord-scheduler-config")]
    require(all(f.is_file() for f in files), f"chart fixtures not found in {CHART} (shared/ beside the checkout)")
    return "".join(f.read_text() for f in files)


def post_render(stdin: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(POST_RENDER), *args], input=stdin, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "KUBECTL": kubectl(), **(env or {})})


def by_id(objs: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    out = {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in objs}
    assert len(out) == len(objs), "duplicate objects"
    return out


def _validate(obj: dict[str, Any]) -> None:
    import kubernetes_validate

    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        raise AssertionError(f"{obj['kind']}/{obj['metadata']['name']}: {e.message} at "
                             f"{'.'.join(map(str, e.path))}") from None


def _our_daemonset() -> dict[str, Any]:
    [ds] = [d for d in _docs((DEPLOY / "daemonset.yaml").read_text()) if d["kind"] == "DaemonSet"]
    return ds


def expected(chart_ds: dict[str, Any], image: str) -> dict[str, Any]:
    """The chart's DaemonSet as the overlay should leave it: the image, and deploy/daemonset.yaml's bcc mounts and
    volumes appended (the same objects, so the two manifests stay in step); nothing else."""
    ours = _our_daemonset()["spec"]["template"]["spec"]
    [our_ctr] = ours["containers"]
    mounts = [m for m in our_ctr["volumeMounts"] if m["mountPath"] in ADDED_MOUNTS]
    names = {m["name"] for m in mounts}
    volumes = [v for v in ours["volumes"] if v["name"] in names]
    assert len(mounts) == len(volumes) == len(ADDED_MOUNTS)
    ds = copy.deepcopy(chart_ds)
    spec = ds["spec"]["template"]["spec"]
    [ctr] = spec["containers"]
    ctr["image"] = image
    ctr["volumeMounts"] += mounts
    spec["volumes"] += volumes
    return ds


@pytest.mark.parametrize("version", VERSIONS)
def test_overlay_changes_only_the_image_and_adds_the_bcc_mounts(version: str) -> None:
    rendered = chart_render(version)
    out = post_render(rendered)
    assert out.returncode == 0, out.stderr
    before, after = by_id(_docs(rendered)), by_id(_docs(out.stdout))
    assert before.keys() == after.keys() and len(before) == 3
    key = ("DaemonSet", "koordinator-system", "koordlet")
    for k in before.keys() - {key}:
        assert after[k] == before[k], k  # the chart's ConfigMaps exactly as rendered
    assert after[key] == expected(before[key], "localhost/koordlet:0.1.0")
    # the chart's command line stays: our image has the agent at /koordlet and takes upstream's flags
    [ctr] = after[key]["spec"]["template"]["spec"]["containers"]
    assert ctr["command"] == ["/koordlet"] and ctr["args"][0] == "-addr=:9316"
    # the additions clash with none of the chart's names or paths, and every object still validates
    spec = after[key]["spec"]["template"]["spec"]
    assert len({v["name"] for v in spec["volumes"]}) == len(spec["volumes"])
    assert len({m["mountPath"] for m in ctr["volumeMounts"]}) == len(ctr["volumeMounts"])
    assert {m["name"] for m in ctr["volumeMounts"]} <= {v["name"] for v in spec["volumes"]}
    assert all(m.get("readOnly") for m in ctr["volumeMounts"] if m["mountPath"] in ADDED_MOUNTS)
    for obj in after.values():
        _validate(obj)


def test_the_image_tag_follows_the_package_version() -> None:
    from koordlet import __version__

    [_, replace, *_] = yaml.safe_load((OVERLAY / "koordlet-patch.yaml").read_text())
    assert replace == {"op": "replace", "path": "/spec/template/spec/containers/0/image",
                       "value": f"localhost/koordlet:{__version__}"}  # what `make image` tags


@pytest.mark.parametrize(("image", "want"), [
    ("registry.example:5000/team/koordlet:0.2.0", "registry.example:5000/team/koordlet:0.2.0"),
    ("registry.example/koordlet", "registry.example/koordlet:0.1.0"),  # the tag defaults to ours
    ("registry.example/koordlet@sha256:" + "a" * 64, "registry.example/koordlet@sha256:" + "a" * 64),
])
def test_post_renderer_takes_the_image_as_argument_or_environment(image: str, want: str) -> None:
    rendered = chart_render("v1.7.0")
    for out in (post_render(rendered, image), post_render(rendered, env={"KOORDLET_IMAGE": image})):
        assert out.returncode == 0, out.stderr
        [ds] = [d for d in _docs(out.stdout) if d["kind"] == "DaemonSet"]
        assert ds["spec"]["template"]["spec"]["containers"][0]["image"] == want


def test_post_renderer_follows_the_charts_namespace_and_keeps_every_other_object() -> None:
    """installation.namespace may be any; objects the chart renders that we do not touch pass through."""
    docs = _docs(chart_render("v1.6.0"))
    for d in docs:
        d["metadata"]["namespace"] = "koord"
    other = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "koord-device-daemon",
             "namespace": "koord"}, "spec": copy.deepcopy(docs[0]["spec"])}
    rendered = yaml.safe_dump_all([*docs, other])
    out = post_render(rendered)
    assert out.returncode == 0, out.stderr
    after = by_id(_docs(out.stdout))
    assert after[("DaemonSet", "koord", "koordlet")] == expected(docs[0], "localhost/koordlet:0.1.0")
    assert after[("DaemonSet", "koord", "koord-device-daemon")] == other


def test_post_renderer_fails_rather_than_patch_another_container(tmp_path: Path) -> None:
    [ds, *rest] = _docs(chart_render("v1.7.0"))
    spec = ds["spec"]["template"]["spec"]
    spec["containers"].insert(0, {"name": "sidecar", "image": "busybox"})
    out = post_render(yaml.safe_dump_all([ds, *rest]), env={"TMPDIR": str(tmp_path)})
    assert out.returncode != 0 and out.stdout == ""
    assert not any(tmp_path.iterdir())  # its work directory is gone, on failure too
    assert "testing value /spec/template/spec/containers/0/name failed" in out.stderr


def test_post_renderer_refuses_a_malformed_image() -> None:
    out = post_render(chart_render("v1.7.0"), "registry.example/koordlet:0.1.0; rm -rf /")
    assert out.returncode == 2 and out.stdout == "" and "not an image reference" in out.stderr


def test_helm4_plugin_runs_the_post_renderer() -> None:
    """Helm 4 takes a postrenderer/v1 plugin's name; its command is the script beside it."""
    plugin = yaml.safe_load((OVERLAY / "plugin.yaml").read_text())
    assert (plugin["apiVersion"], plugin["type"], plugin["runtime"]) == ("v1", "postrenderer/v1", "subprocess")
    [cmd] = plugin["runtimeConfig"]["platformCommand"]
    script = Path(cmd["command"].replace("${HELM_PLUGIN_DIR}", str(OVERLAY)))
    assert script == POST_RENDER and os.access(script, os.X_OK)


# The chart's koordlet-role (versions/v1.5.0-v1.7.0/templates/rbac/koordlet.yaml, identical; spec dropin.md §c):
# (API groups, resources, verbs) per rule
CHART_KOORDLET_ROLE = [
    ({"config.koordinator.sh", "slo.koordinator.sh", "scheduling.koordinator.sh", "topology.node.k8s.io"}, {"*"},
     {"*"}),
    ({""}, {"configmaps", "configmaps/status"}, {"*"}),
    ({""}, {"nodes", "nodes/status", "nodes/proxy", "pods", "pods/status", "persistentvolumeclaims",
            "persistentvolumeclaims/status"}, {"patch", "update", "get", "list", "watch"}),
    ({""}, {"pods/eviction"}, {"*"}),
    ({""}, {"events"}, {"*"}),
]


def test_the_charts_koordlet_role_grants_all_our_agent_calls() -> None:
    """Under the chart the agent runs as the chart's ServiceAccount: deploy/rbac.yaml (exactly what the agent
    issues, tests/test_rbac.py) must fit in the chart's role, or the drop-in would be refused calls."""
    [role] = [d for d in _docs((DEPLOY / "rbac.yaml").read_text()) if d["kind"] == "ClusterRole"]
    needed = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
              for v in rule["verbs"]}
    assert needed
    refused = {(g, r, v) for g, r, v in needed if not any(
        g in groups and (r in resources or "*" in resources) and (v in verbs or "*" in verbs)
        for groups, resources, verbs in CHART_KOORDLET_ROLE)}
    assert not refused


# --- deploy/ on its own, beside (or instead of) the chart ------------------------------------------------------

def test_standalone_manifests_render_without_the_namespace_or_a_chart_name() -> None:
    out = subprocess.run([kubectl(), "kustomize", str(DEPLOY)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    objs = _docs(out.stdout)
    assert {o["kind"] for o in objs} == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet",
                                         "Service"}
    assert all(o["metadata"].get("namespace", "koordinator-system") == "koordinator-system" for o in objs)
    # the chart's objects: those rendered in the fixtures and the rest of its templates
    chart = {(d["kind"], d["metadata"]["name"]) for v in VERSIONS for d in _docs(chart_render(v))}
    assert ("DaemonSet", "koordlet") in chart
    ours = [*objs, *_docs((DEPLOY / "servicemonitor" / "servicemonitor.yaml").read_text()),
            *_docs((DEPLOY / "servicemonitor" / "prometheusrule.yaml").read_text()),
            *_docs((DEPLOY / "scheduler" / "rbac.yaml").read_text())]
    clashes = {(o["kind"], o["metadata"]["name"]) for o in ours} & (chart | CHART_OBJECTS)
    assert not clashes
    for obj in objs:
        _validate(obj)
