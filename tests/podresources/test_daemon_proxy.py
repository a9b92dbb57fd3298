"""`koordlet run --host-root DIR --pods-dir PODS --feature-gates PodResourcesProxy=true` is a complete proxy: its
socket under the var-run root, kubelet's under --var-lib-kubelet-dir's, pods from the pods dir (a pod written after
start is found at once, long before the next periodic sync), a missing kubelet never stops the agent."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import urllib.request
from pathlib import Path

import grpc
import grpc.aio
import pytest

from koordlet.host.driver import CgroupDriver
from koordlet.pb import podresources_v1_pb2 as v1

from fakekubelet import FakeKubelet, entry, pod, rdma_vfs, short_dir
from multusclient import delegates, list_once, resource_map
from simhost import SimHost

RDMA = "koordinator.sh/rdma"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _wait_for(path: Path, proc: subprocess.Popen[str], seconds: float = 30.0) -> None:
    for _ in range(int(seconds * 20)):
        if path.exists():
            return
        assert proc.poll() is None, "koordlet exited"
        await asyncio.sleep(0.05)
    raise AssertionError(f"{path} did not appear")


async def test_koordlet_run_serves_the_proxy_from_the_pods_dir() -> None:
    with short_dir() as d:
        root = Path(d)
        host = SimHost(root / "host", 1, CgroupDriver.CGROUPFS).setup()
        pods_dir = root / "pods"
        pods_dir.mkdir()
        alloc = {"rdma": [rdma_vfs("0000:09:00.0", ["0000:09:00.2"])]}
        (pods_dir / "a.json").write_text(json.dumps(pod("a", "ml", alloc)))
        (pods_dir / "bad.json").write_text(json.dumps(pod("bad", "ml", raw_annotation='{"rdma": [null]}')))
        proxy_socket = host.root / "var/run/koordlet/pod-resources/kubelet.sock"
        kubelet_socket = host.root / "var/lib/kubelet/pod-resources/kubelet.sock"
        kubelet_socket.parent.mkdir(parents=True)
        port = _free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "koordlet", "run", "--host-root", str(host.root), "--pods-dir", str(pods_dir),
             "--node-name", "pr-1", "--state-dir", str(root / "state"), "--addr", f"127.0.0.1:{port}",
             "--feature-gates", "PodResourcesProxy=true", "--enable-nri-runtime-hook=false",
             "--kubelet-sync-interval", "60s"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        kubelet = FakeKubelet(str(kubelet_socket), v1.ListPodResourcesResponse(pod_resources=[
            entry("a", "ml"), entry("bad", "ml", devices={"example.com/nic": ["n1"]})]))
        try:
            await _wait_for(proxy_socket, proc)
            assert stat.S_IMODE(proxy_socket.stat().st_mode) == 0o600
            assert stat.S_IMODE(proxy_socket.parent.stat().st_mode) == 0o700
            with pytest.raises(grpc.aio.AioRpcError) as err:  # kubelet not there yet: the agent stays up
                await list_once(str(proxy_socket))
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE and str(kubelet_socket) in str(err.value.details())
            await kubelet.start()
            got = await _listed(str(proxy_socket))
            assert resource_map(got, "ml", "a")[RDMA].device_ids == ["0000:09:00.2"]
            assert list(got.pod_resources[1].containers[0].devices) == list(
                kubelet.response.pod_resources[1].containers[0].devices)  # malformed: kubelet's devices only
            # a pod admitted after the last pod sync (the next one is a minute away)
            (pods_dir / "b.json").write_text(json.dumps(pod("b", "ml", {"rdma": [rdma_vfs("0000:0a:00.0", [
                "0000:0a:00.4", "0000:0a:00.3"])]})))
            kubelet.set_response(v1.ListPodResourcesResponse(pod_resources=[*kubelet.response.pod_resources,
                                                                             entry("b", "ml")]))
            await asyncio.sleep(0.15)  # past the List answer's max age
            got = await list_once(str(proxy_socket))
            confs = delegates(resource_map(got, "ml", "b"), [(RDMA, {"type": "sriov"}), (RDMA, {"type": "sriov"})])
            assert [c["deviceID"] for c in confs] == ["0000:0a:00.3", "0000:0a:00.4"]
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                metrics = r.read().decode()
            assert 'koordlet_pod_resources_proxy_requests_total{code="OK",method="List"}' in metrics
            assert 'koordlet_pod_resources_proxy_requests_total{code="UNAVAILABLE",method="List"}' in metrics
            assert "koordlet_pod_resources_proxy_serving 1.0" in metrics
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=20)
            await kubelet.stop()
        log = proc.stdout.read() if proc.stdout else ""
        assert code == 0, log
        assert "Traceback" not in log
        assert f"PodResources proxy on {proxy_socket}" in log  # the banner
        assert "ml/bad" in log and "rdma[0]" in log  # the malformed annotation, named
        assert not os.path.exists(proxy_socket)


async def _listed(socket_path: str, seconds: float = 10.0) -> v1.ListPodResourcesResponse:
    for _ in range(int(seconds * 20)):
        try:
            return await list_once(socket_path)
        except grpc.aio.AioRpcError as e:
            if e.code() != grpc.StatusCode.UNAVAILABLE:
                raise
            await asyncio.sleep(0.05)
    return await list_once(socket_path)
