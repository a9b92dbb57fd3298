"""One-shot commands report what the daemon reports: `koordlet nodemetric` with GPUs from an NVML snapshot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from koordlet.host.driver import CgroupDriver, K8sQoS

from simhost import SimCgroup, SimHost, make_pod

KOORDLET = [sys.executable, "-m", "koordlet"]
H800_SNAPSHOT = Path(__file__).resolve().parents[1] / "examples/nodes/h800-nvlink/nvml-snapshot.json"
UID_A = "aaaaaaaa-0000-4000-8000-000000000001"
GIB = 1 << 30


def _gpu_node(tmp_path: Path) -> tuple[SimHost, Path, Path, dict[str, Any]]:
    """A simulated node with pod `a` whose container runs PID 4242 on the H800 example's first GPU."""
    host = SimHost(tmp_path / "host", 1, CgroupDriver.SYSTEMD).setup()
    pod = make_pod("a", UID_A, "Burstable")
    rel = host.pod_dir(K8sQoS.BURSTABLE, UID_A)
    host.write_cgroup(rel, SimCgroup(cpu_ns=10**9, anon=1 << 20))
    ctr = host.container_dir(rel, pod["status"]["containerStatuses"][0]["containerID"])
    host.write_cgroup(ctr, SimCgroup(anon=1 << 19))
    for sub in ("cpu", "cpuacct", "memory"):  # cgroup v1: every controller's copy lists the process
        (host.cgroup_root() / sub / ctr / "cgroup.procs").write_text("4242\n")
    pods_dir = tmp_path / "pods"
    pods_dir.mkdir()
    (pods_dir / "a.yaml").write_text(yaml.safe_dump(pod))
    snapshot = json.loads(H800_SNAPSHOT.read_text())
    gpu0 = snapshot["devices"][0]
    gpu0["processes"] = [{"pid": 4242, "usedGpuMemory": 10 * GIB}]
    gpu0["utilization"] = [{"pid": 4242, "smUtil": 40, "timeStamp": 1}]
    snap = tmp_path / "nvml.json"
    snap.write_text(json.dumps(snapshot))
    return host, pods_dir, snap, gpu0


def _nodemetric(host: SimHost, pods_dir: Path, snap: Path, *extra: str) -> dict[str, Any]:
    out = subprocess.run(
        [*KOORDLET, "nodemetric", "--host-root", str(host.root), "--pods-dir", str(pods_dir), "--node-name", "gpu-1",
         "--nvml-snapshot", str(snap), "--window", "1.1", "--collect-res-used-interval", "0.5", *extra],
        capture_output=True, text=True, timeout=60, check=True)
    obj: dict[str, Any] = json.loads(out.stdout)
    return obj


def test_oneshot_nodemetric_has_gpu_usage(tmp_path: Path, validate_crd: Any) -> None:
    host, pods_dir, snap, gpu0 = _gpu_node(tmp_path)
    obj = _nodemetric(host, pods_dir, snap, "--feature-gates", "Accelerators=true")
    validate_crd("slo.koordinator.sh_nodemetrics.yaml", obj)
    devices = obj["status"]["nodeMetric"]["nodeUsage"]["devices"]
    assert len(devices) == len(json.loads(H800_SNAPSHOT.read_text())["devices"])  # every GPU, busy or idle
    first = next(d for d in devices if d["id"] == gpu0["uuid"])
    assert first["minor"] == gpu0["minor"]
    assert first["resources"]["koordinator.sh/gpu-core"] == "40"
    assert first["resources"]["koordinator.sh/gpu-memory"] == "10Gi"
    [pod] = obj["status"]["podsMetric"]
    assert [(d["id"], d["resources"]["koordinator.sh/gpu-core"]) for d in pod["podUsage"]["devices"]] == [
        (gpu0["uuid"], "40")]


def test_oneshot_nodemetric_follows_the_gates_like_the_daemon(tmp_path: Path) -> None:
    host, pods_dir, snap, _ = _gpu_node(tmp_path)
    obj = _nodemetric(host, pods_dir, snap)  # Accelerators is off by default: the daemon runs no device loop
    assert "devices" not in obj["status"]["nodeMetric"]["nodeUsage"]
    assert "devices" not in obj["status"]["podsMetric"][0]["podUsage"]
