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

from koordlet.host.driver import CgroupDriver
from koordlet.nri.hooks.allocation import ANNOTATION_DEVICE_ALLOCATED
from koordlet.pb import nri_pb2 as api

from gopeer import GoPeer, gopeer_bin  # noqa: F401
from simhost import SimHost


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_the_daemon_registers_and_adjusts(gopeer_bin: Path, tmp_path: Path) -> None:
    host = SimHost(tmp_path / "host", 1, CgroupDriver.CGROUPFS).setup()
    nri_socket = host.root / "var/run/nri/nri.sock"  # <var-run-root>/nri/nri.sock under --host-root
    pods_dir = tmp_path / "pods"
    pods_dir.mkdir()
    port = _free_port()
    async with GoPeer.start(gopeer_bin, "runtime", "-socket", str(nri_socket)) as peer:
        await peer.event("listening")
        proc = subprocess.Popen(
            [sys.executable, "-m", "koordlet", "run", "--host-root", str(host.root), "--pods-dir", str(pods_dir),
             "--node-name", "nri-1", "--state-dir", str(tmp_path / "state"), "--addr", f"127.0.0.1:{port}",
             "--feature-gates", "GPUEnvInject=true"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            await peer.event("connected", timeout=30)
            reg = api.RegisterPluginRequest.FromString((await peer.event("RegisterPlugin"))["payload"])
            assert (reg.plugin_name, reg.plugin_idx) == ("koordlet_nri", "00")
            reply = await peer.command(call="Configure", payload=api.ConfigureRequest(
                runtime_name="containerd", runtime_version="1.7.27").SerializeToString(), timeout_ms=2000)
            assert reply["code"] == 0 and api.ConfigureResponse.FromString(reply["payload"]).events == 0x48D
            pod = api.PodSandbox(id="s1", uid="u-1", name="train", namespace="ml", annotations={
                ANNOTATION_DEVICE_ALLOCATED: json.dumps({"gpu": [{"minor": 2}, {"minor": 3}]})})
            request = api.CreateContainerRequest(pod=pod, container=api.Container(id="c1", pod_sandbox_id="s1",
                                                                                  name="main"))
            reply = await peer.command(call="CreateContainer", payload=request.SerializeToString(), timeout_ms=2000)
            assert reply["code"] == 0, reply
            adjust = api.CreateContainerResponse.FromString(reply["payload"]).adjust
            assert [(kv.key, kv.value) for kv in adjust.env] == [("NVIDIA_VISIBLE_DEVICES", "2,3")]
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                metrics = r.read().decode()
            assert "\nkoordlet_nri_connected 1.0\n" in metrics
            assert 'koordlet_nri_calls_total{method="CreateContainer",outcome="ok"} 1.0' in metrics
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=15)
        log = proc.stdout.read() if proc.stdout else ""
        assert code == 0, log
        assert "registered as 00-koordlet_nri" in log and "Traceback" not in log
