"""`koord-descheduler` in a cluster, against the API double (kmock): leader election on the Lease (a second
instance stays passive until the leader gives the Lease up), and the command itself with upstream's flags and no
subcommand: /healthz and /metrics served, evictions made, a clean exit on SIGTERM with the Lease released, mistakes
refused in one line (exit 2); a plugin's own controller run beside the rounds with the live view."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import kmock
import pytest
import yaml

from apis.core.metatime import rfc3339
from scheduler.cluster import NodeInfo
from scheduler.descheduler import cli
from scheduler.descheduler.config.decode import parse_config
from scheduler.descheduler.interfaces import DESCHEDULE, Handle, PluginSpec
from scheduler.descheduler.registry import registry
from scheduler.descheduler.server import InCluster, lead_and_run, lease_config
from scheduler.leaderelection import LeaderElector

from deschedkube import CLOCK, LEASES, client, descheduler_config, evicted, seed

ROOT = Path(__file__).resolve().parents[2]
FAST_LEASE = {"leaseDuration": "2s", "renewDeadline": "1s", "retryPeriod": "50ms"}


async def until(check: Any, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


def lease(km: kmock.KubernetesEmulator) -> dict[str, Any]:
    raw: dict[str, Any] = km.objects[LEASES, "koordinator-system", "koord-descheduler"].raw
    return raw


async def test_a_second_instance_stays_passive_until_the_leader_lets_go(kmock: kmock.KubernetesEmulator) -> None:
    seed(kmock)
    cfg = descheduler_config(deschedulingInterval="100ms", leaderElection=FAST_LEASE)
    instances = [InCluster(client(kmock), parse_config(cfg), watch=False, clock=lambda: CLOCK) for _ in "ab"]
    a, b = instances
    electors = [LeaderElector(client(kmock), lease_config(r.config), ident) for r, ident in zip(instances, "ab",
                                                                                                  strict=True)]
    stops = [threading.Event(), threading.Event()]
    first = asyncio.create_task(asyncio.to_thread(lead_and_run, a, electors[0], stops[0]))
    second = None
    try:
        await until(lambda: a.rounds >= 1)
        second = asyncio.create_task(asyncio.to_thread(lead_and_run, b, electors[1], stops[1]))
        await asyncio.sleep(0.5)  # ten retry periods
        assert b.rounds == 0 and not electors[1].leading and a.rounds >= 2
        assert lease(kmock)["spec"]["holderIdentity"] == "a" and evicted(kmock)
        stops[0].set()
        assert await first == 0  # stopped, not lost: the Lease given up on the way out
        await until(lambda: b.rounds >= 1)  # no waiting out the lease duration
        assert lease(kmock)["spec"]["holderIdentity"] == "b"
        stops[1].set()
        assert await second == 0
    finally:
        for stop in stops:
            stop.set()
        await asyncio.gather(first, *([second] if second is not None else []), return_exceptions=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kubeconfig(path: Path, server: str) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "double",
        "clusters": [{"name": "double", "cluster": {"server": server}}],
        "users": [{"name": "me", "user": {}}],
        "contexts": [{"name": "double", "context": {"cluster": "double", "user": "me"}}]}))
    return path


def get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=5) as r:
        return int(r.status), r.read().decode()


async def test_the_command_serves_evicts_and_stops_cleanly_on_sigterm(kmock: kmock.KubernetesEmulator,
                                                                      tmp_path: Path) -> None:
    seed(kmock, update_time=rfc3339(time.time()))  # the command's clock is the wall clock
    port = free_port()
    cfg = descheduler_config(deschedulingInterval="1s", leaderElection=FAST_LEASE,
                             healthzBindAddress=f"127.0.0.1:{port}", metricsBindAddress=f"127.0.0.1:{port}")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    err = tmp_path / "stderr"
    argv = [sys.executable, "-m", "scheduler.descheduler.cli", f"--config={tmp_path / 'config.yaml'}",
            f"--kubeconfig={kubeconfig(tmp_path / 'kubeconfig', str(kmock.url))}", "--v=2", "--port=10251",
            "--bind-address=0.0.0.0", "--secure-port=10258", "--leader-elect=true",
            "--feature-gates=DisablePVCReservation=true, PriorityTransformer=true,PodMutatingWebhook=false"]
    with err.open("w") as fh:
        proc = await asyncio.create_subprocess_exec(*argv, cwd=ROOT, stderr=fh,
                                                    env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            await until(lambda: "round 1:" in err.read_text(), timeout=15)
            status, body = await asyncio.to_thread(get, f"http://127.0.0.1:{port}/healthz")
            assert (status, body) == (200, "ok")
            _, metrics = await asyncio.to_thread(get, f"http://127.0.0.1:{port}/metrics")
            assert 'result="success",strategy="LowNodeLoad"} 3' in metrics
            assert lease(kmock)["spec"]["holderIdentity"] and len(evicted(kmock)) == 3
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 10) == 0
        finally:
            if proc.returncode is None:
                proc.kill()
    text = err.read_text()
    assert "Traceback" not in text and not lease(kmock)["spec"]["holderIdentity"]  # released on the way out
    assert "not acted on: --bind-address=0.0.0.0 --secure-port=10258 --port=10251" in text
    # upstream's gates taken; the one on for a feature not built here said once, the others not at all
    said = [line for line in text.splitlines() if "feature gate" in line]
    assert len(said) == 1 and "PriorityTransformer=true: pods' priorities are read as they are" in said[0]


@pytest.mark.parametrize("argv, want", [
    (["--leader-elect-resource-lock=endpoints"], "resourceLock 'endpoints' is not supported (leases only)"),
    (["--config=/nonexistent.yaml"], "invalid --config: /nonexistent.yaml"),
    (["run", "--leader-elect-lease-duration=5s"], "lease duration must be greater than the renew deadline"),
    ([], "no kubeconfig"),
    (["--feature-gates=NoSuchGate=true"], "run: --feature-gates: unrecognized feature gate: NoSuchGate"),
    (["--feature-gates=DisablePVCReservation=yes"], "invalid value of DisablePVCReservation=yes"),
    (["--feature-gates=DisablePVCReservation"], "malformed pair, expect string=bool"),
])
def test_mistakes_are_one_line_and_exit_2(argv: list[str], want: str, monkeypatch: pytest.MonkeyPatch,
                                          tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for var in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cli.main(argv) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert want in line and line.startswith("koord-descheduler: ")


class Probe:
    """A deschedule plugin with a controller of its own, as the MigrationController is."""

    name = "Probe"

    def __init__(self, handle: Handle) -> None:
        self.handle = handle
        self.kinds: set[str] = set()
        self.seen = threading.Event()
        self.stopped = threading.Event()

    def deschedule(self, nodes: Sequence[NodeInfo]) -> None:
        pass

    def run_controller(self, stop: threading.Event) -> None:
        kube = self.handle.kube
        assert kube is not None
        # the first round's list fills the view one collection after another: wait for the three
        while not stop.wait(0.01) and not {"Node", "Pod", "NodeMetric"} <= self.kinds:
            self.kinds = {str(o.get("kind")) for o in kube.objects()}
        self.seen.set()
        stop.wait()
        self.stopped.set()


async def test_a_plugins_controller_runs_beside_the_rounds_until_stopped(kmock: kmock.KubernetesEmulator) -> None:
    seed(kmock)
    probes: list[Probe] = []

    def new(args: object, handle: Handle) -> Probe:
        probes.append(Probe(handle))
        return probes[-1]

    plugins = {**registry(), "Probe": PluginSpec("Probe", new, frozenset({DESCHEDULE}))}
    cfg = descheduler_config(deschedulingInterval="1h")
    cfg["profiles"][0]["plugins"]["deschedule"] = {"enabled": [{"name": "Probe"}]}
    r = InCluster(client(kmock), parse_config(cfg), watch=False, clock=lambda: CLOCK, plugins=plugins)
    stop = threading.Event()
    running = asyncio.create_task(asyncio.to_thread(r.run, stop))
    try:
        [probe] = probes
        await until(probe.seen.is_set)
        assert {"Node", "Pod", "NodeMetric"} <= probe.kinds and not probe.stopped.is_set()
    finally:
        stop.set()
        await running
    await until(probe.stopped.is_set)
