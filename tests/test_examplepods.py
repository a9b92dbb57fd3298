"""`make run`'s first minute: example pods with real cgroups (root) or quietly without, and the start-up banner."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from koordlet import examplepods
from koordlet.agent import Agent
from koordlet.banner import Seen, banner, base_url
from koordlet.config import Config, NriConfig, parse_feature_gates
from koordlet.examplepods import unavailable_reason
from koordlet.health import Health
from koordlet.host.cgtree import V1_SUBSYSTEMS, CgroupTree
from koordlet.host.driver import CgroupDriver, K8sQoS, container_dir, pod_dir
from koordlet.host.paths import HostPaths

from conftest import real_v1_root, require, rmtree_cgroup
from simhost import SimHost

KOORDLET = [sys.executable, "-m", "koordlet"]
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _example_pods() -> list[dict[str, Any]]:
    return [yaml.safe_load(p.read_text()) for p in sorted((EXAMPLES / "pods").glob("*.yaml"))]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _get_text(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return str(r.read().decode())
    except OSError:
        return ""


def _get_json(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return json.loads(r.read())
    except OSError:
        return None


def _wait_for(fn: Callable[[], Any], timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := fn():
            return value
        time.sleep(0.2)
    raise AssertionError("condition not met in time")


# -- the tree builder ----------------------------------------------------------------------------------------

def test_tree_removes_exactly_what_it_made_deepest_first(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    for sub in ("cpu", "memory"):
        (root / sub / "kubepods").mkdir(parents=True)  # the host's own parent: must survive
    tree = CgroupTree(root, 1, ("cpu", "memory", "blkio"))  # blkio is not mounted here: skipped
    assert tree.bases == [root / "cpu", root / "memory"]
    tree.mkdir("kubepods/podA/c1")
    (root / "cpu" / "kubepods" / "podB").mkdir()  # left over by a killed run: adopted with own=True
    tree.mkdir("kubepods/podB", own=True)
    assert tree.procs_files("kubepods/podA/c1") == [root / s / "kubepods/podA/c1/cgroup.procs" for s in ("cpu",
                                                                                                          "memory")]
    assert tree.remove() == []
    for sub in ("cpu", "memory"):
        assert sorted(p.name for p in (root / sub).rglob("*")) == ["kubepods"]


@pytest.mark.parametrize("bad", ["", "/abs/dir", "kubepods/../../etc"])
def test_tree_refuses_dirs_outside_the_hierarchy(tmp_path: Path, bad: str) -> None:
    tree = CgroupTree(tmp_path, 2)
    with pytest.raises(ValueError):
        tree.mkdir(bad)
    assert list(tmp_path.iterdir()) == []


def test_tree_reports_what_it_could_not_remove(tmp_path: Path) -> None:
    tree = CgroupTree(tmp_path, 2)
    tree.mkdir("a/b")
    (tmp_path / "a" / "b" / "file").write_text("x")  # a plain dir with content: rmdir fails
    failed = tree.remove()
    assert len(failed) == 2 and str(tmp_path / "a" / "b") in failed[0]


# -- when example cgroups cannot be made -----------------------------------------------------------------------

def test_unavailable_reasons(tmp_path: Path) -> None:
    sim = Config(node_name="n", paths=HostPaths.under(str(tmp_path)), host_root=str(tmp_path), pods_dir="p")
    assert "simulated node" in (unavailable_reason(sim, euid=0) or "")
    here = Config(node_name="n", paths=HostPaths.under("/").with_overrides(cgroup_root=str(tmp_path)),
                  host_root="/", pods_dir="p")
    assert unavailable_reason(here, euid=1000) == "not running as root"
    if os.access(str(tmp_path), os.W_OK) and shutil.which("sleep"):
        assert unavailable_reason(here, euid=0) is None


def test_a_failure_half_way_leaves_nothing_behind(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    if os.geteuid() != 0:
        pytest.skip("start() refuses without root before it makes anything")
    root = tmp_path / "cgroup"
    (root / "cpu").mkdir(parents=True)
    (root / "memory").mkdir()
    (root / "memory" / "kubepods.slice").write_text("")  # a file where a dir must go: mkdir fails in memory/
    cfg = Config(node_name="n", paths=HostPaths.under("/").with_overrides(cgroup_root=str(root)), host_root="/",
                 pods_dir=str(EXAMPLES / "pods"))
    assert examplepods.start(cfg, Health()) is None
    assert list((root / "cpu").iterdir()) == []  # what was made in cpu/ before the failure is gone again
    assert "making them failed" in caplog.text


def test_without_cgroups_the_example_pods_do_not_warn(tmp_path: Path) -> None:
    """A simulated node cannot get real cgroups: one line says so, no warning per pod, the banner still shows."""
    host = SimHost(tmp_path / "host", 1, CgroupDriver.CGROUPFS).setup()
    port = _free_port()
    proc = subprocess.Popen(
        [*KOORDLET, "run", "--host-root", str(host.root), "--pods-dir", str(EXAMPLES / "pods"),
         "--example-pods-cgroups", "--nodeslo", str(EXAMPLES / "nodeslo.yaml"), "--node-name", "quiet",
         "--state-dir", str(tmp_path / "state"), "--addr", f"127.0.0.1:{port}",
         "--collect-res-used-interval", "0.2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: _get_json(f"http://127.0.0.1:{port}/apis/slo.koordinator.sh/v1alpha1/nodemetrics/quiet"))
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "example pods run without cgroups (--host-root" in err
    assert "pods        2 (no cgroups: usage not collected)" in err
    skips = [ln for ln in err.splitlines() if "skipping" in ln and ("spark-executor-1" in ln or "web-0" in ln
                                                                      or "nginx-host" in ln)]
    assert skips == []


def test_example_pods_cgroups_needs_a_pods_dir() -> None:
    done = subprocess.run([*KOORDLET, "run", "--host-root", "/", "--example-pods-cgroups"], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 2 and "--example-pods-cgroups needs --pods-dir" in done.stderr


# -- the banner --------------------------------------------------------------------------------------------------

def test_banner_names_what_was_found_and_the_urls(tmp_path: Path) -> None:
    host = SimHost(tmp_path / "host", 2, CgroupDriver.SYSTEMD).setup()
    pods_dir = tmp_path / "pods"
    shutil.copytree(EXAMPLES / "pods", pods_dir)
    cfg = Config(node_name="n1", paths=host.paths, host_root=str(host.root), addr=":9400", pods_dir=str(pods_dir),
                 state_dir=str(tmp_path / "state"), feature_gates=parse_feature_gates("RDMADevices=true"))
    agent = Agent(cfg)
    agent.sync_pods()
    lines = banner(agent, Seen(devices=3, cgroup_pods=["batch/spark-executor-1", "default/web-0"]))
    text = "\n".join(lines)
    assert lines[0].startswith("koordlet ") and "node n1" in lines[0] and "cgroup v2, systemd driver" in lines[0]
    assert "pods        2 (example cgroups, a sleeping process each: batch/spark-executor-1, default/web-0)" in text
    assert "devices     3 found" in text
    assert "metrics     http://localhost:9400/metrics" in text
    assert (f"NRI         plugin 00-koordlet_nri on {host.root}/var/run/nri/nri.sock (hooks: GroupIdentity, "
            "CPUSetAllocator, BatchResource;") in text
    assert "http://localhost:9400/apis/topology.node.k8s.io/v1alpha1/noderesourcetopologies/n1" in text
    assert "run-queue   per-pod CPU wait" in text
    assert "http://localhost:9400/apis/slo.koordinator.sh/v1alpha1/nodemetrics/n1" in text
    assert "http://localhost:9400/apis/scheduling.koordinator.sh/v1alpha1/devices/n1" in text
    off = Agent(Config(node_name="n1", paths=host.paths, pods_dir=str(pods_dir), state_dir=str(tmp_path / "s")))
    off_text = "\n".join(banner(off, Seen(devices=None, cgroup_pods=None)))
    assert "devices     off" in off_text and "/devices/n1" not in off_text
    no_nri = Agent(Config(node_name="n1", paths=host.paths, pods_dir=str(pods_dir), state_dir=str(tmp_path / "s"),
                          nri=NriConfig(enabled=False)))
    assert "  NRI         off (--enable-nri-runtime-hook=false)" in banner(no_nri, Seen(None, None))


def test_base_url() -> None:
    assert base_url(":9316") == "http://localhost:9316"
    assert base_url("0.0.0.0:1") == "http://localhost:1"
    assert base_url("10.0.0.5:9316") == "http://10.0.0.5:9316"


# -- the real thing ------------------------------------------------------------------------------------------------

def _example_dirs(driver: CgroupDriver) -> dict[str, list[str]]:
    """Pod dir → its containers' dirs, as the agent lays them out."""
    out = {}
    for pod in _example_pods():
        qos = K8sQoS(pod["status"]["qosClass"])
        prel = pod_dir(driver, qos, pod["metadata"]["uid"])
        out[prel] = [container_dir(driver, prel, c["containerID"]) for c in pod["status"]["containerStatuses"]]
    return out


def _live_pids(procs: Path) -> list[int]:
    return [int(x) for x in procs.read_text().split()]


@pytest.mark.realhost
def test_make_run_gives_the_example_pods_real_cgroups(tmp_path: Path) -> None:
    """`koordlet run` as `make run` starts it, against a unique cgroup parent: the example pods get cgroups with a
    sleeping process each, the NodeMetric reports them, nothing warns and nothing counts as skipped (prediction's
    first rounds included), SIGTERM removes everything."""
    with real_v1_root(tmp_path, V1_SUBSYSTEMS) as (root, _):
        port = _free_port()
        node = "first-minute"
        proc = subprocess.Popen(
            [*KOORDLET, "run", "--host-root", "/", "--cgroup-root-dir", str(root), "--pods-dir",
             str(EXAMPLES / "pods"), "--example-pods-cgroups", "--nodeslo", str(EXAMPLES / "nodeslo.yaml"),
             "--state-dir", str(tmp_path / "state"), "--node-name", node, "--addr", f"127.0.0.1:{port}",
             "--feature-gates", "Accelerators=true,RDMADevices=true,PSICollector=true",
             "--prediction-training-interval", "1s"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        base = f"http://127.0.0.1:{port}"
        try:
            nm = _wait_for(lambda: (o := _get_json(f"{base}/apis/slo.koordinator.sh/v1alpha1/nodemetrics/{node}"))
                           and len(o["status"].get("podsMetric") or []) == 2 and o)
            _wait_for(lambda: "koordlet_node_predicted_resource_reclaimable{" in _get_text(f"{base}/metrics"))
            assert "koordlet_agent_skipped_items_total{" not in _get_text(f"{base}/metrics")
            dirs = _example_dirs(CgroupDriver.SYSTEMD)  # no kubepods dir and no kubelet: systemd, as the agent
            sleepers = set()
            for pod_rel, ctr_rels in dirs.items():
                for sub in V1_SUBSYSTEMS:
                    assert (root / sub / pod_rel).is_dir()
                    for ctr in ctr_rels:
                        pids = _live_pids(root / sub / ctr / "cgroup.procs")
                        assert len(pids) == 1
                        assert Path(f"/proc/{pids[0]}/cmdline").read_bytes().split(b"\0")[:2] == [b"sleep",
                                                                                                   b"infinity"]
                        sleepers.add(pids[0])
            assert len(sleepers) == sum(len(c) for c in dirs.values())
            assert (root / "cpu" / "host-latency-sensitive" / "nginx-host").is_dir()  # the NodeSLO's host app
            assert {p["name"] for p in nm["status"]["podsMetric"]} == {"web-0", "spark-executor-1"}
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert [ln for ln in err.splitlines() if " W " in ln or " E " in ln] == []
        assert f"metrics     {base}/metrics" in err
        assert f"{base}/apis/slo.koordinator.sh/v1alpha1/nodemetrics/{node}" in err
        assert f"{base}/apis/scheduling.koordinator.sh/v1alpha1/devices/{node}" in err
        for sub in V1_SUBSYSTEMS:
            assert [p.name for p in (root / sub).iterdir() if p.is_dir()] == []  # kubepods.slice & co. are gone
        for pid in sleepers:
            assert not Path(f"/proc/{pid}").exists()


@pytest.mark.realhost
def test_example_cgroups_in_a_real_cgroup_v2_tree(tmp_path: Path) -> None:
    """v2: the pods' dirs in the unified tree, the sleeper in the container (leaf) dir, all gone after stop()."""
    require(os.geteuid() == 0, "real cgroup tests need root")
    unified = next((p for p in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified"))
                    if (p / "cgroup.controllers").exists()), None)
    require(unified is not None, "no cgroup v2 hierarchy mounted")
    assert unified is not None
    base = unified / f"koordlet-test-{uuid.uuid4().hex[:8]}"
    base.mkdir()
    cfg = Config(node_name="v2", paths=HostPaths.under("/").with_overrides(cgroup_root=str(base)), host_root="/",
                 pods_dir=str(EXAMPLES / "pods"))
    made = None
    try:
        made = examplepods.start(cfg, Health())
        assert made is not None and sorted(made.names) == ["batch/spark-executor-1", "default/web-0"]
        for pod_rel, ctr_rels in _example_dirs(CgroupDriver.SYSTEMD).items():
            assert _live_pids(base / pod_rel / "cgroup.procs") == []  # v2: processes only in leaves
            for ctr in ctr_rels:
                [pid] = _live_pids(base / ctr / "cgroup.procs")
                assert Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep\0infinity")
        made.stop()
        assert [p for p in base.iterdir() if p.is_dir()] == []
    finally:
        if made is not None:
            made.stop()
        rmtree_cgroup(base)
