"""Upstream's Helm chart, unchanged: our agent started with the chart's exact koordlet container (v1.5-v1.7)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import podroot
import pytest
import yaml

CHARTS = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "upstream-chart"
VERSIONS = ("v1.5.0", "v1.6.0", "v1.7.0")
# An API server that is down: nothing listens in the container's own network namespace.
KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"""


def chart_daemonset(version: str) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all((CHARTS / f"koordlet-{version}.yaml").read_text()) if d]
    return next(d for d in docs if d["kind"] == "DaemonSet")


def _can_build_pod_roots() -> str | None:
    if os.geteuid() != 0:
        return "needs root (mount namespaces and bind mounts)"
    for tool in ("unshare", "nsenter", "chroot", "ip"):
        if subprocess.run(["which", tool], capture_output=True).returncode:
            return f"needs {tool}"
    return None


@pytest.fixture
def pod_roots_possible() -> None:
    why = _can_build_pod_roots()
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the chart drop-in test: {why}")
        pytest.skip(why)


@pytest.mark.parametrize("version", VERSIONS)
def test_chart_container_runs_unchanged(version: str, tmp_path: Path, pod_roots_possible: None) -> None:
    """Exactly the chart's command and args, its mounts, NODE_NAME and a kubeconfig whose API server is down: the
    agent stays up, serves /metrics and /healthz, keeps retrying the API server, and logs no flag error."""
    ds = chart_daemonset(version)
    spec = ds["spec"]["template"]["spec"]
    ctr = next(c for c in spec["containers"] if c["name"] == "koordlet")
    assert ctr["command"] == ["/koordlet"]
    env = {e["name"]: "n1" for e in ctr.get("env", []) if e["name"] == "NODE_NAME"}
    assert env == {"NODE_NAME": "n1"}, "the chart sets NODE_NAME from the downward API"
    proc = podroot.start(ctr, spec["volumes"], tmp_path, {**env, "KUBECONFIG": "/tmp/kubeconfig"},
                         files={"/tmp/kubeconfig": KUBECONFIG})
    try:
        deadline = time.monotonic() + 30
        health = metrics = (0, "")
        while time.monotonic() < deadline and proc.poll() is None:
            health = podroot.http_get(proc, "http://127.0.0.1:9316/healthz")
            metrics = podroot.http_get(proc, "http://127.0.0.1:9316/metrics")
            if health[0] == 200 and "koordlet_node_used_cpu_cores" in metrics[1]:
                break
            time.sleep(0.5)
        time.sleep(4)  # a few more API rounds, all refused
        assert proc.poll() is None, "the agent exited"
        assert health[0] == 200
        assert metrics[0] == 200
        assert 'koordlet_start_time' in metrics[1] or "koordlet_node_used_cpu_cores" in metrics[1]
        # every flag the chart passes is accepted; the proxy-mode hook server endpoint is said to have no effect
        assert 'koordlet_agent_setting_without_effect{kind="flag",name="runtime-hooks-host-endpoint"} 1.0' in \
            metrics[1]
    finally:
        proc.terminate()
        try:
            out = proc.communicate(timeout=15)[0].decode()
        except subprocess.TimeoutExpired:
            proc.kill()
            out = proc.communicate()[0].decode()
    for bad in ("flag provided but not defined", "invalid value", "Traceback", "unrecognized feature gate"):
        assert bad not in out, out
    assert "koordlet 0.1.0 on node n1 (cluster)" in out
    assert "-runtime-hooks-host-endpoint=/var/run/koordlet/koordlet.sock accepted" in out
    assert "Connection refused" in out, "the API server was tried"
    assert "stopping" in out, "SIGTERM stops the agent cleanly"
