"""deploy/daemonset.yaml stays in step with the CLI: every arg parses, env and probes match what we serve."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from koordlet.cli import build_parser, config_from_args, normalize_argv

MANIFEST = Path(__file__).resolve().parents[1] / "deploy" / "daemonset.yaml"


def _daemonset() -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    [ds] = [d for d in docs if d["kind"] == "DaemonSet"]
    return ds


def test_manifest_args_are_accepted_by_the_cli() -> None:
    ds = _daemonset()
    [ctr] = ds["spec"]["template"]["spec"]["containers"]
    assert ctr["command"][-1] == "run"
    ns = build_parser().parse_args(normalize_argv(["run", *ctr["args"]]))
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
