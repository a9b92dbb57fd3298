"""`koordlet run` as an NRI plugin: it finds the runtime's socket under --host-root, registers, and adjusts a GPU
container that no pod source knows (pods come from the runtime), while its own loops keep running."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

from test_hooks_devices import ascend_node

from apis.extension.device_allocated import ANNOTATION_DEVICE_ALLOCATED
from koordlet.host.driver import CgroupDriver
from koordlet.pb import nri_pb2 as api

from gopeer import GoPeer, gopeer_bin  # noqa: F401
from simhost import SimHost


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def create_through_the_daemon(gopeer_bin: Path, tmp_path: Path, host: SimHost, gpus: list[int],
                                    *flags: str) -> tuple[api.ContainerAdjustment, str, str]:
    """Run `koordlet run --host-root` with `flags`, register it with the Go runtime, send one CreateContainer for a
    pod allocated `gpus`; the adjustment, the daemon's /metrics, and its log."""
    nri_socket = host.root / "var/run/nri/nri.sock"  # <var-run-root>/nri/nri.sock under --host-root
    pods_dir = tmp_path / "pods"
    pods_dir.mkdir()
    port = _free_port()
    async with GoPeer.start(gopeer_bin, "runtime", "-socket", str(nri_socket)) as peer:
        await peer.event("listening")
        proc = subprocess.Popen(
            [sys.executable, "-m", "koordlet", "run", "--host-root", str(host.root), "--pods-dir", str(pods_dir),
             "--node-name", "nri-1", "--state-dir", str(tmp_path / "state"), "--addr", f"127.0.0.1:{port}",
             *flags], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            await peer.event("connected", timeout=30)
            reg = api.RegisterPluginRequest.FromString((await peer.event("RegisterPlugin"))["payload"])
            assert (reg.plugin_name, reg.plugin_idx) == ("koordlet_nri", "00")
            reply = await peer.command(call="Configure", payload=api.ConfigureRequest(
                runtime_name="containerd", runtime_version="1.7.27").SerializeToString(), timeout_ms=2000)
            assert reply["code"] == 0 and api.ConfigureResponse.FromString(reply["payload"]).events == 0x48D
            pod = api.PodSandbox(id="s1", uid="u-1", name="train", namespace="ml", annotations={
                ANNOTATION_DEVICE_ALLOCATED: json.dumps({"gpu": [{"minor": m} for m in gpus]})})
            request = api.CreateContainerRequest(pod=pod, container=api.Container(id="c1", pod_sandbox_id="s1",
                                                                                  name="main"))
            reply = await peer.command(call="CreateContainer", payload=request.SerializeToString(), timeout_ms=2000)
            assert reply["code"] == 0, reply
            adjust = api.CreateContainerResponse.FromString(reply["payload"]).adjust
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                metrics = r.read().decode()
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=15)
        log = proc.stdout.read() if proc.stdout else ""
        assert code == 0, log
        assert "registered as 00-koordlet_nri" in log and "Traceback" not in log
        return adjust, metrics, log


async def test_the_daemon_registers_and_adjusts(gopeer_bin: Path, tmp_path: Path) -> None:
    host = SimHost(tmp_path / "host", 1, CgroupDriver.CGROUPFS).setup()
    adjust, metrics, _ = await create_through_the_daemon(gopeer_bin, tmp_path, host, [2, 3],
                                                         "--feature-gates", "GPUEnvInject=true")
    assert [(kv.key, kv.value) for kv in adjust.env] == [("NVIDIA_VISIBLE_DEVICES", "2,3")]
    assert "\nkoordlet_nri_connected 1.0\n" in metrics
    assert 'koordlet_nri_calls_total{method="CreateContainer",outcome="ok"} 1.0' in metrics


async def test_ascend_cards_with_our_xpu_flag(gopeer_bin: Path, tmp_path: Path) -> None:
    """--runtime-hooks-xpu-device-inject (ours): the cards' nodes with the host's mode and owner, on the wire."""
    host = SimHost(tmp_path / "host", 1, CgroupDriver.CGROUPFS).setup()
    ascend_node(host.root)
    adjust, _, _ = await create_through_the_daemon(gopeer_bin, tmp_path, host, [3],
                                                   "--runtime-hooks-xpu-device-inject")
    assert [(kv.key, kv.value) for kv in adjust.env] == [("ASCEND_VISIBLE_DEVICES", "3")]
    assert [(d.path, d.type, d.major, d.minor, d.file_mode.value, d.uid.value, d.gid.value)
            for d in adjust.linux.devices] == [
        ("/dev/davinci_manager", "c", 235, 0, 0o660, 0, 0), ("/dev/hisi_hdc", "c", 237, 0, 0o660, 1000, 1000),
        ("/dev/devmm_svm", "c", 238, 0, 0o660, 0, 0), ("/dev/davinci3", "c", 236, 3, 0o660, 0, 0)]
