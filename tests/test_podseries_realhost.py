"""Real kernel, as root: `koordlet run` on a pod of real cgroup v1 dirs (a CPU burner under a CFS quota, page cache
written inside it), its /metrics read as Prometheus reads it: cAdvisor-style counters and working set."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from koordlet.host.driver import CgroupDriver, K8sQoS, container_dir, pod_dir

from conftest import real_v1_root
from simhost import make_pod

pytestmark = pytest.mark.realhost

SUBSYSTEMS = ("cpu", "cpuacct", "memory")
# 48 MiB held, 8 MiB of page cache written from inside the cgroup, then a busy loop
BURN = ("import time\nheld = bytearray(48 << 20)\nopen({cache!r}, 'wb').write(bytes(8 << 20))\n"
        "end = time.time() + 60\nwhile time.time() < end:\n    pass\n")


@pytest.fixture
def v1_root(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    with real_v1_root(tmp_path, SUBSYSTEMS) as root:
        yield root


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def _kv(path: Path) -> dict[str, int]:
    return {k: int(v) for k, v in (line.split() for line in path.read_text().splitlines())}


def test_counters_and_working_set_of_a_real_pod_through_koordlet_run(v1_root: tuple[Path, str],
                                                                     tmp_path: Path) -> None:
    root, _ = v1_root
    uid = str(uuid.uuid4())
    pod = make_pod("burner", uid, "Burstable", namespace="jobs")
    cid = pod["status"]["containerStatuses"][0]["containerID"]  # type: ignore[index]
    pod_rel = pod_dir(CgroupDriver.CGROUPFS, K8sQoS.BURSTABLE, uid)
    ctr_rel = container_dir(CgroupDriver.CGROUPFS, pod_rel, cid)
    for sub in SUBSYSTEMS:
        (root / sub / ctr_rel).mkdir(parents=True)
    (root / "cpu" / ctr_rel / "cpu.cfs_quota_us").write_text("20000\n")  # 0.2 core: throttled every period
    pods_dir = tmp_path / "pods"
    pods_dir.mkdir()
    (pods_dir / "pod.yaml").write_text(yaml.safe_dump(pod))
    join = "; ".join(f"echo $$ > '{root / s / ctr_rel / 'cgroup.procs'}'" for s in SUBSYSTEMS)
    burn = BURN.format(cache=str(tmp_path / "cached"))
    burner = subprocess.Popen(["/bin/sh", "-c", f"{join}; exec '{sys.executable}' -c \"{burn}\""])
    port = _free_port()
    agent = subprocess.Popen(
        [sys.executable, "-m", "koordlet", "run", "--host-root", "/", "--cgroup-root-dir", str(root),
         "--pods-dir", str(pods_dir), "--state-dir", str(tmp_path / "state"), "--node-name", "real",
         "--addr", f"127.0.0.1:{port}", "--collect-res-used-interval", "0.5"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        deadline, got = time.monotonic() + 20, {}
        while time.monotonic() < deadline:
            time.sleep(0.5)
            try:
                got = _scrape(url)
            except OSError:
                continue
            if got.get("koordlet_container_cpu_cfs_throttled_periods_total") and \
                    got.get("koordlet_container_memory_working_set_bytes"):
                break
        cpu_first = got["koordlet_container_cpu_usage_seconds_total"][0][1]
        pod_cpu_first = got["koordlet_pod_cpu_usage_seconds_total"][0][1]
        time.sleep(1.5)
        after = _scrape(url)
        mem = root / "memory" / ctr_rel
        want_ws = int((mem / "memory.usage_in_bytes").read_text()) - _kv(mem / "memory.stat")["total_inactive_file"]
        usage_s = int((root / "cpuacct" / ctr_rel / "cpuacct.usage").read_text()) / 1e9
        throttled = _kv(root / "cpu" / ctr_rel / "cpu.stat")
    finally:
        agent.kill()
        agent.wait(timeout=10)
        burner.kill()
        burner.wait(timeout=10)

    [(labels, cpu)] = after["koordlet_container_cpu_usage_seconds_total"]
    assert labels == {"node": "real", "namespace": "jobs", "pod": "burner", "uid": uid, "container": "c0"}
    # a counter: never back, never past the kernel's figure read after it (a container is read every 10 s, so it
    # may not have moved in 1.5 s; the pod, read every tick, has)
    assert cpu_first <= cpu <= usage_s
    [(_, pod_cpu)] = after["koordlet_pod_cpu_usage_seconds_total"]
    assert pod_cpu_first < pod_cpu
    assert pod_cpu >= cpu  # the pod's cgroup holds the container's
    [(_, ws)] = after["koordlet_container_memory_working_set_bytes"]
    assert ws >= 48 << 20
    assert ws == pytest.approx(want_ws, rel=0.05)  # usage − total_inactive_file, read ~now by the scrape
    [(_, periods)] = after["koordlet_container_cpu_cfs_throttled_periods_total"]
    [(_, seconds)] = after["koordlet_container_cpu_cfs_throttled_seconds_total"]
    assert 0 < periods <= throttled["nr_throttled"] and 0 < seconds <= throttled["throttled_time"] / 1e9
