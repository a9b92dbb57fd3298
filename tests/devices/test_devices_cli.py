"""`koordlet devices` and the daemon's Device report on the example nodes and on this GPU-less machine."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
NODES = ROOT / "examples" / "nodes"
KOORDLET = [sys.executable, "-m", "koordlet"]


def _devices(node: str, *extra: str) -> tuple[dict[str, Any], str]:
    args = [*KOORDLET, "devices", "--host-root", str(NODES / node), "--node-name", node, *extra]
    snapshot = NODES / node / "nvml-snapshot.json"
    if snapshot.exists():
        args += ["--nvml-snapshot", str(snapshot)]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout), out.stderr


@pytest.mark.parametrize(("node", "gpus", "rdma", "vendor"), [
    ("h800-nvlink", 8, 0, "nvidia"), ("l20-pcie", 8, 4, "nvidia"), ("ascend-910b", 8, 0, "huawei"),
    ("mlu370", 2, 0, "cambricon"),
])
def test_example_nodes(node: str, gpus: int, rdma: int, vendor: str, validate_crd: Any) -> None:
    obj, _ = _devices(node)
    validate_crd("scheduling.koordinator.sh_devices.yaml", obj)
    devices = obj["spec"]["devices"]
    assert [d["type"] for d in devices] == ["gpu"] * gpus + ["rdma"] * rdma
    assert obj["metadata"]["labels"]["node.koordinator.sh/gpu-vendor"] == vendor
    for kind in ("gpu", "rdma"):
        minors = [d["minor"] for d in devices if d["type"] == kind]
        assert minors == sorted(minors)


def test_l20_nics_share_pcie_roots_with_gpus() -> None:
    obj, _ = _devices("l20-pcie")
    gpu_roots = {d["topology"]["pcieID"] for d in obj["spec"]["devices"] if d["type"] == "gpu"}
    nics = [d for d in obj["spec"]["devices"] if d["type"] == "rdma"]
    assert {d["topology"]["pcieID"] for d in nics} == gpu_roots
    assert all(len(d["vfGroups"][0]["vfs"]) == 8 for d in nics)
    assert "scheduling.koordinator.sh/gpu-partitions" not in obj["metadata"].get("annotations", {})  # PCIe only


def test_nvlink_partitions_and_hccs_partitions() -> None:
    h800, _ = _devices("h800-nvlink")
    table = json.loads(h800["metadata"]["annotations"]["scheduling.koordinator.sh/gpu-partitions"])
    assert sorted(table, key=int) == ["1", "2", "4", "8"]
    assert [p["minors"] for p in table["4"]] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert h800["metadata"]["labels"]["node.koordinator.sh/gpu-partition-policy"] == "Prefer"
    honor, _ = _devices("h800-nvlink", "--gpu-partition-policy", "Honor")
    assert honor["metadata"]["labels"]["node.koordinator.sh/gpu-partition-policy"] == "Honor"
    ascend, _ = _devices("ascend-910b")
    hccs = json.loads(ascend["metadata"]["annotations"]["scheduling.koordinator.sh/gpu-partitions"])
    assert all(p["gpuLinkType"] == "HCCS" for group in hccs.values() for p in group)


def test_dump_then_replay_gives_the_same_device(tmp_path: Path) -> None:
    dumped = tmp_path / "nvml.json"
    first, _ = _devices("h800-nvlink", "--dump-nvml", str(dumped))
    replay = subprocess.run([*KOORDLET, "devices", "--host-root", str(NODES / "h800-nvlink"), "--node-name",
                             "h800-nvlink", "--nvml-snapshot", str(dumped)], capture_output=True, text=True,
                            timeout=60, check=True)
    assert json.loads(replay.stdout) == first


def test_gpu_less_machine_reports_an_empty_device_and_one_log_line(validate_crd: Any) -> None:
    out = subprocess.run([*KOORDLET, "devices", "--host-root", "/", "--node-name", "this-vm"],
                         capture_output=True, text=True, timeout=60, check=True)
    obj = json.loads(out.stdout)
    validate_crd("scheduling.koordinator.sh_devices.yaml", obj)
    gpus = [d for d in obj["spec"].get("devices", []) if d["type"] == "gpu"]
    assert gpus == []
    # No NVIDIA driver bound: nothing is wrong, one info line says why there are no GPUs.
    assert len(out.stderr.strip().splitlines()) == 1 and "no NVIDIA driver on this host" in out.stderr
    assert " W " not in out.stderr


def test_a_bound_nvidia_driver_without_nvml_is_a_warning() -> None:
    out = subprocess.run([*KOORDLET, "devices", "--host-root", str(NODES / "h800-nvlink"), "--node-name", "x"],
                         capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(out.stdout)["spec"].get("devices", []) == []
    assert " W " in out.stderr and "nvml-unavailable" in out.stderr


def test_daemon_serves_and_writes_the_device(tmp_path: Path, validate_crd: Any) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [*KOORDLET, "run", "--host-root", str(NODES / "l20-pcie"), "--nvml-snapshot",
         str(NODES / "l20-pcie" / "nvml-snapshot.json"), "--pods-dir", str(tmp_path), "--node-name", "l20",
         "--state-dir", str(tmp_path / "state"), "--addr", f"127.0.0.1:{port}",
         "--feature-gates", "Accelerators=true,RDMADevices=true", "--node-topology-sync-interval", "0.2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}/apis/scheduling.koordinator.sh/v1alpha1/devices/l20"
    try:
        obj = None
        for _ in range(100):
            try:
                with urllib.request.urlopen(url, timeout=1) as r:
                    obj = json.loads(r.read())
                    break
            except OSError:
                time.sleep(0.1)
        assert obj is not None, "device endpoint never answered"
        validate_crd("scheduling.koordinator.sh_devices.yaml", obj)
        assert len(obj["spec"]["devices"]) == 12
        state = tmp_path / "state/scheduling.koordinator.sh/devices/l20.json"
        assert json.loads(state.read_text()) == obj
        written = state.stat().st_mtime
        time.sleep(1.0)  # several rounds later: unchanged inventory, no rewrite
        assert state.stat().st_mtime == written
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0


def test_device_daemon_oneshot_writes_the_file(tmp_path: Path) -> None:
    """On a host without NPUs/MLUs the daemon writes an empty array (upstream does the same), atomically."""
    out = tmp_path / "infos" / "ic-device"
    out.parent.mkdir()
    done = subprocess.run([*KOORDLET, "device-daemon", "--oneshot", "--output", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text()) == []
    assert [p.name for p in out.parent.iterdir()] == ["ic-device"]  # no temp file left behind
