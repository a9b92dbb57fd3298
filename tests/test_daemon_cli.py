"""The `koordlet` command end to end: one-shot NodeMetric, and the daemon over HTTP on a simulated node."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from koordlet.daemon import next_tick
from koordlet.host.driver import CgroupDriver, K8sQoS

from simhost import SimCgroup, SimHost, make_pod

KOORDLET = [sys.executable, "-m", "koordlet"]
UID_A = "aaaaaaaa-0000-4000-8000-000000000001"
UID_B = "bbbbbbbb-0000-4000-8000-000000000002"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _populate(simhost: SimHost, pods_dir: Path, pods: list[dict[str, Any]], qos: K8sQoS) -> None:
    pods_dir.mkdir(exist_ok=True)
    for p in pods:
        rel = simhost.pod_dir(qos, p["metadata"]["uid"])
        simhost.write_cgroup(rel, SimCgroup(cpu_ns=10**9, anon=1 << 20))
        for cs in p["status"]["containerStatuses"]:
            simhost.write_cgroup(simhost.container_dir(rel, cs["containerID"]), SimCgroup(anon=1 << 19))
        (pods_dir / f"{p['metadata']['name']}.yaml").write_text(yaml.safe_dump(p))


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return int(r.status), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _wait_for(fn: Any, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = fn()
            if last:
                return last
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        time.sleep(0.1)
    raise AssertionError(f"condition not met in {timeout}s (last: {last!r})")


def test_version() -> None:
    out = subprocess.run([*KOORDLET, "version"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("koordlet ")


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_nodemetric_subcommand_prints_a_valid_object(tmp_path: Path, fmt: str, validate_crd: Any) -> None:
    host = SimHost(tmp_path / "host", 2, CgroupDriver.SYSTEMD).setup()
    _populate(host, tmp_path / "pods", [make_pod("a", UID_A, "Burstable")], K8sQoS.BURSTABLE)
    out = subprocess.run(
        [*KOORDLET, "nodemetric", "--host-root", str(host.root), "--pods-dir", str(tmp_path / "pods"),
         "--node-name", "sim-1", "--window", "1.1", "--collect-res-used-interval", "0.5", "-o", fmt],
        capture_output=True, text=True, timeout=60, check=True)
    obj = json.loads(out.stdout) if fmt == "json" else yaml.safe_load(out.stdout)
    validate_crd("slo.koordinator.sh_nodemetrics.yaml", obj)
    assert obj["metadata"]["name"] == "sim-1"
    assert [p["name"] for p in obj["status"]["podsMetric"]] == ["a"]
    assert obj["status"]["podsMetric"][0]["podUsage"]["resources"] == {"cpu": "0", "memory": "1Mi"}


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[dict[str, Any]]:
    host = SimHost(tmp_path / "host", 2, CgroupDriver.CGROUPFS).setup()
    pods_dir = tmp_path / "pods"
    _populate(host, pods_dir, [make_pod("a", UID_A, "Burstable", containers=2),
                               make_pod("b", UID_B, "Burstable", namespace="ns2")], K8sQoS.BURSTABLE)
    (pods_dir / "garbage.yaml").write_text("{{{ not yaml")
    (pods_dir / "nouid.yaml").write_text(yaml.safe_dump({"kind": "Pod", "metadata": {"name": "x"}}))
    (pods_dir / "svc.yaml").write_text(yaml.safe_dump({"kind": "Service", "metadata": {"name": "s"}}))
    nodeslo = tmp_path / "nodeslo.yaml"
    nodeslo.write_text(yaml.safe_dump({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO",
                                       "metadata": {"name": "sim-2"}, "spec": {"resourceQOSStrategy": {
                                           "beClass": {"cpuQOS": {"enable": True, "groupIdentity": 7}}}}}))
    port = _free_port()
    state = tmp_path / "state"
    proc = subprocess.Popen(
        [*KOORDLET, "run", "--host-root", str(host.root), "--pods-dir", str(pods_dir), "--nodeslo", str(nodeslo),
         "--node-name", "sim-2", "--state-dir", str(state), "--addr", f"127.0.0.1:{port}",
         "--collect-res-used-interval", "0.2", "--kubelet-sync-interval", "0.3", "--psi-collector-interval", "0.2",
         "--feature-gates", "PSICollector=true"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        yield {"proc": proc, "base": base, "pods_dir": pods_dir, "state": state, "host": host}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_daemon_serves_reports_and_stops_cleanly(daemon: dict[str, Any], validate_crd: Any) -> None:
    base, proc = daemon["base"], daemon["proc"]
    _wait_for(lambda: _get(base + "/readyz")[0] == 200)
    assert _get(base + "/healthz")[0] == 200

    metrics = _wait_for(lambda: (t := _get(base + "/metrics")[1].decode()) and f'pod_uid="{UID_B}"' in t
                        and "\nkoordlet_node_used_cpu_cores{" in t and t)
    for name in ("koordlet_start_time", "koordlet_node_used_cpu_cores", "koordlet_node_used_memory_bytes",
                 "koordlet_pod_psi", "koordlet_container_psi", "koordlet_agent_loop_duration_seconds_bucket"):
        assert f"\n{name}{{" in metrics, name
    # bad input is counted, not fatal
    assert 'koordlet_agent_skipped_items_total{kind="manifest",reason="unparsable"}' in metrics
    assert 'koordlet_agent_skipped_items_total{kind="pod",reason="malformed"}' in metrics
    assert 'koordlet_agent_skipped_items_total{kind="nodeslo",reason="invalid"}' in metrics
    assert _get(base + "/internal-metrics")[1].count(b"koordlet_pod_psi{") == 0
    assert _get(base + "/external-metrics")[1].count(b"koordlet_pod_psi{") > 0

    nm_url = base + "/apis/slo.koordinator.sh/v1alpha1/nodemetrics/sim-2"
    _code, body = _wait_for(lambda: (r := _get(nm_url))[0] == 200 and r)
    obj = json.loads(body)
    validate_crd("slo.koordinator.sh_nodemetrics.yaml", obj)
    assert _get(base + "/apis/slo.koordinator.sh/v1alpha1/nodemetrics/other")[0] == 404
    state_file = daemon["state"] / "slo.koordinator.sh/nodemetrics/sim-2.json"
    _wait_for(state_file.exists)
    validate_crd("slo.koordinator.sh_nodemetrics.yaml", json.loads(state_file.read_text()))

    # a deleted pod's series disappear with the pod
    (daemon["pods_dir"] / "b.yaml").unlink()
    _wait_for(lambda: f'pod_uid="{UID_B}"' not in _get(base + "/metrics")[1].decode())
    assert f'pod_uid="{UID_A}"' in _get(base + "/metrics")[1].decode()

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
    log = proc.stdout.read()
    assert log.count("garbage.yaml") == 1, "a bad manifest is logged once, not per sync"
    assert "Traceback" not in log



def test_a_failing_loop_logs_once_and_keeps_running(tmp_path: Path) -> None:
    """A host root whose /proc/stat is garbage: the collect loop fails every tick, logs once, stays up."""
    host = SimHost(tmp_path / "host", 1, CgroupDriver.CGROUPFS).setup()
    (host.root / "proc/stat").write_text("cpu garbage\n")
    port = _free_port()
    proc = subprocess.Popen(
        [*KOORDLET, "run", "--host-root", str(host.root), "--pods-dir", str(tmp_path), "--node-name", "bad",
         "--state-dir", str(tmp_path / "state"), "--addr", f"127.0.0.1:{port}", "--collect-res-used-interval",
         "0.1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        text = _wait_for(lambda: (t := _get(base + "/metrics")[1].decode())
                         and 'kind="loop",reason="collect"' in t and t)
        count = float(next(ln for ln in text.splitlines()
                           if ln.startswith('koordlet_agent_skipped_items_total{kind="loop",reason="collect"}'))
                      .rsplit(" ", 1)[1])
        time.sleep(1.0)
        assert _get(base + "/readyz")[0] == 503  # never collected: not ready, but alive
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    log = proc.stdout.read() if proc.stdout else ""
    assert count >= 1
    assert log.count("collect loop failed") == 1


def test_qos_reconciles_right_after_a_pod_change(tmp_path: Path) -> None:
    """A new BE pod is idled on the next pod sync, not only on the next reconcile tick."""
    host = SimHost(tmp_path / "host", 1, CgroupDriver.CGROUPFS).setup()
    (host.cgroup_root() / "cpu/kubepods/cpu.idle").write_text("0\n")
    pods_dir = tmp_path / "pods"
    pods_dir.mkdir()
    slo = tmp_path / "nodeslo.yaml"
    slo.write_text(yaml.safe_dump({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO",
                                   "metadata": {"name": "q"},
                                   "spec": {"resourceQOSStrategy": {"beClass": {"cpuQOS": {"enable": True}}}}}))
    port = _free_port()
    proc = subprocess.Popen(
        [*KOORDLET, "run", "--host-root", str(host.root), "--pods-dir", str(pods_dir), "--nodeslo", str(slo),
         "--node-name", "q", "--state-dir", str(tmp_path / "state"), "--addr", f"127.0.0.1:{port}",
         "--kubelet-sync-interval", "0.2", "--reconcile-interval-seconds", "3600"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: _get(f"http://127.0.0.1:{port}/readyz")[0] == 200)
        pod = make_pod("batch", UID_B, "BestEffort", labels={"koordinator.sh/qosClass": "BE"})
        rel = host.pod_dir(K8sQoS.BESTEFFORT, UID_B)
        host.write_cgroup(rel, SimCgroup())
        idle = host.cgroup_root() / "cpu" / rel / "cpu.idle"
        idle.write_text("0\n")
        (host.cgroup_root() / "cpu" / rel / "cpu.shares").write_text("2\n")
        (pods_dir / "batch.yaml").write_text(yaml.safe_dump(pod))
        _wait_for(lambda: idle.read_text().strip() == "1", timeout=10)  # the hourly tick never came
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0


def test_loops_fall_on_one_grid_so_their_rounds_share_wakeups() -> None:
    """Daemon loops run at phase + n × interval: a 1 s and a 3 s loop started together meet every 3 s, and a round
    that overran its interval skips the grid points it missed instead of running late ones back to back."""
    assert next_tick(100.0, 1.0, 100.2) == 101.0
    assert next_tick(100.0, 1.0, 101.0) == 102.0  # strictly later
    assert next_tick(100.0, 3.0, 100.05) == 103.0
    ones = {next_tick(100.0, 1.0, t - 1e-9) for t in range(101, 110)}
    threes = {next_tick(100.0, 3.0, t - 1e-9) for t in range(101, 110, 3)}
    assert threes <= ones
    assert next_tick(100.0, 1.0, 103.7) == 104.0  # after an overrun from 101 to 103.7: next at 104, not 102
