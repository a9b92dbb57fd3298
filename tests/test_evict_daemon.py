"""The eviction strategies in the running daemon: a standalone node over its memory threshold reports (never
kills) its BE victims in upstream's order, once per cool-down; the chart's BECPUEvict stays quiet."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from koordlet.host.driver import CgroupDriver, K8sQoS

from simhost import SimCgroup, SimHost, make_pod

GI = 1024**3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _metrics(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            return str(r.read().decode())
    except OSError:
        return ""


def _wait_for(fn: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if got := fn():
            return got
        time.sleep(0.1)
    raise AssertionError(f"condition not met in {timeout}s")


def test_standalone_daemon_reports_memory_evictions(tmp_path: Path) -> None:
    # 100 GiB node, 75 GiB used: 75 % >= 70 %, release 7 GiB (down to 68 %) -> the 4 and 3 GiB BE pods
    host = SimHost(tmp_path / "host", 2, CgroupDriver.CGROUPFS, mem_total_kb=100 * 1024 * 1024,
                   mem_available_kb=25 * 1024 * 1024).setup()
    pods_dir = tmp_path / "pods"
    pods_dir.mkdir()
    for i, (name, gib, qos) in enumerate((("be-4g", 4, "BE"), ("be-3g", 3, "BE"), ("be-2g", 2, "BE"),
                                          ("ls-40g", 40, "LS"))):
        uid = f"{i:08d}-0000-4000-8000-000000000000"
        k8s = K8sQoS.BESTEFFORT if qos == "BE" else K8sQoS.BURSTABLE
        pod = make_pod(name, uid, k8s.value, labels={"koordinator.sh/qosClass": qos}, priority=100)
        host.write_cgroup(host.pod_dir(k8s, uid), SimCgroup(cpu_ns=10**9, anon=gib * GI))
        (pods_dir / f"{name}.yaml").write_text(yaml.safe_dump(pod))
    slo = tmp_path / "nodeslo.yaml"
    slo.write_text(yaml.safe_dump({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO",
                                   "metadata": {"name": "sim"}, "spec": {"resourceUsedThresholdWithBE": {
                                       "enable": True, "cpuSuppressThresholdPercent": 65,
                                       "cpuSuppressPolicy": "cpuset", "memoryEvictThresholdPercent": 70,
                                       "cpuEvictPolicy": "evictByRealLimit"}}}))
    port, state = _free_port(), tmp_path / "state"
    proc = subprocess.Popen(
        [sys.executable, "-m", "koordlet", "run", "--host-root", str(host.root), "--pods-dir", str(pods_dir),
         "--nodeslo", str(slo), "--node-name", "sim", "--state-dir", str(state), "--addr", f"127.0.0.1:{port}",
         "--kubelet-sync-interval", "0.3",
         "--feature-gates", "BECPUEvict=true,BEMemoryEvict=true,CgroupReconcile=true"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        records = state / "evictions.jsonl"
        _wait_for(lambda: records.exists() and len(records.read_text().splitlines()) >= 2, timeout=20)
        text = _wait_for(lambda: (t := _metrics(port)) and "koordlet_pod_eviction{" in t and t)
        assert 'koordlet_pod_eviction{node="sim",reason="reported"}' in text
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    log = proc.stdout.read() if proc.stdout else ""
    first = [json.loads(line)["involvedObject"]["name"] for line in records.read_text().splitlines()][:2]
    assert first == ["be-4g", "be-3g"]
    assert "would evict pod default/be-4g" in log and "would evict pod default/be-2g" not in log
    assert "ls-40g" not in records.read_text()
    assert "Traceback" not in log
    # the host's pods were left alone: their cgroups are still there
    assert (host.cgroup_root() / host.pod_dir(K8sQoS.BESTEFFORT, "00000000-0000-4000-8000-000000000000")).is_dir()
