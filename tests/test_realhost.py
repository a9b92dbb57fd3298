"""Real kernel: a kubepods tree in this machine's cgroup hierarchies, a CPU burner inside a pod's container.

The trees live under a uniquely named parent in each real hierarchy and the agent's cgroup root is a directory
of symlinks to those parents, so the agent walks real cgroupfs files without touching the host's own pods.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from apis.core.quantity import parse_quantity
from koordlet.agent import Agent
from koordlet.config import Config, parse_feature_gates
from koordlet.host.cgroup import CgroupV1
from koordlet.host.driver import CgroupDriver, K8sQoS, container_dir, pod_dir
from koordlet.host.paths import HostPaths

from conftest import real_v1_root, require, rmtree_cgroup
from simhost import make_pod

pytestmark = pytest.mark.realhost

V1_ROOT = Path("/sys/fs/cgroup")
V1_SUBSYSTEMS = ("cpu", "cpuacct", "memory")
V2_ROOT = Path("/sys/fs/cgroup/unified")
BURN = "import time\nheld = bytearray(48 << 20)\nend = time.time() + 60\nwhile time.time() < end:\n    pass\n"


def _is_v1(sub: str) -> bool:
    return (V1_ROOT / sub / "cgroup.procs").exists() and not (V1_ROOT / sub / "cgroup.controllers").exists()


def _require_root() -> None:
    require(os.geteuid() == 0, "real cgroup tests need root")


@pytest.fixture
def v1_root(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """(agent cgroup root of symlinks, unique parent name) for cgroup v1 cpu/cpuacct/memory."""
    with real_v1_root(tmp_path, V1_SUBSYSTEMS) as root:
        yield root


def _burner_in(procs_files: list[Path]) -> subprocess.Popen[bytes]:
    """A CPU burner holding 48 MiB, placed in the cgroups before it execs so all its memory is charged there."""
    join = "; ".join(f"echo $$ > '{f}'" for f in procs_files)
    return subprocess.Popen(["/bin/sh", "-c", f"{join}; exec '{sys.executable}' -c '{BURN}'"])


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    proc.wait(timeout=10)


def _agent(tmp_path: Path, cgroup_root: Path, pod: dict[str, Any], gates: str = "") -> Agent:
    pods_dir = tmp_path / "pods"
    pods_dir.mkdir(exist_ok=True)
    (pods_dir / "pod.yaml").write_text(yaml.safe_dump(pod))
    paths = HostPaths.under("/").with_overrides(cgroup_root=str(cgroup_root))
    cfg = Config(node_name="real-node", paths=paths, pods_dir=str(pods_dir), state_dir=str(tmp_path / "state"),
                 feature_gates=parse_feature_gates(gates))
    agent = Agent(cfg)
    assert agent.sync_pods()
    return agent


def test_pod_cpu_usage_matches_a_real_burner(v1_root: tuple[Path, str], tmp_path: Path,
                                             validate_crd: Any) -> None:
    root, _ = v1_root
    uid = str(uuid.uuid4())
    pod = make_pod("burner", uid, "Burstable")
    cid = pod["status"]["containerStatuses"][0]["containerID"]  # type: ignore[index]
    pod_rel = pod_dir(CgroupDriver.CGROUPFS, K8sQoS.BURSTABLE, uid)
    ctr_rel = container_dir(CgroupDriver.CGROUPFS, pod_rel, cid)
    for sub in V1_SUBSYSTEMS:
        (root / sub / ctr_rel).mkdir(parents=True)
    agent = _agent(tmp_path, root, pod)
    assert agent.backend.version == 1 and agent.state.driver() == CgroupDriver.CGROUPFS

    proc = _burner_in([root / sub / ctr_rel / "cgroup.procs" for sub in V1_SUBSYSTEMS])
    try:
        ps = psutil.Process(proc.pid)
        deadline = time.monotonic() + 15  # on a loaded machine the burner's start and 48 MiB take a while
        while ps.memory_info().rss < 48 << 20 and time.monotonic() < deadline:
            time.sleep(0.1)
        # The agent reports the mean of per-tick rates; measure the process the same way, tick by tick.
        marks = []
        for _ in range(5):
            agent.collect()
            t = ps.cpu_times()
            marks.append((time.monotonic(), t.user + t.system))
            time.sleep(1.0)
        obj = agent.build_nodemetric()
    finally:
        _stop(proc)
    rates = [(c1 - c0) / (w1 - w0) for (w0, c0), (w1, c1) in itertools.pairwise(marks)]
    used = sum(rates) / len(rates)
    assert used > 0.3, "the burner did not get CPU; the machine is too loaded to measure"
    validate_crd("slo.koordinator.sh_nodemetrics.yaml", obj)
    [pm] = obj["status"]["podsMetric"]
    cpu = pm["podUsage"]["resources"]["cpu"]
    cores = int(cpu[:-1]) / 1000 if cpu.endswith("m") else float(cpu)
    assert cores == pytest.approx(used, rel=0.10)
    mem = pm["podUsage"]["resources"]["memory"]
    assert parse_quantity(mem) >= 48 << 20


def test_node_usage_reads_real_proc(tmp_path: Path) -> None:
    require(Path("/proc/stat").exists(), "no /proc")
    cfg = Config(node_name="n", paths=HostPaths.under("/"), pods_dir=str(tmp_path), state_dir=str(tmp_path))
    agent = Agent(cfg)
    agent.sync_pods()
    agent.collect()
    time.sleep(0.5)
    agent.collect()
    node = agent.advisor.latest.node
    assert node is not None and node.cpu_cores is not None
    assert 0 <= node.cpu_cores <= psutil.cpu_count() * 1.05
    vm = psutil.virtual_memory()
    assert node.memory_bytes == pytest.approx(vm.total - vm.available, rel=0.2)


def test_psi_from_real_cgroup_v2(tmp_path: Path) -> None:
    """PSI on this kernel lives in the unified (v2) hierarchy; the agent reads a pod's pressure files there."""
    _require_root()
    require((V2_ROOT / "cgroup.controllers").exists(), "no cgroup v2 hierarchy mounted")
    require((V2_ROOT / "cpu.pressure").exists(), "kernel without PSI (boot with psi=1)")
    name = f"koordlet-test-{uuid.uuid4().hex[:8]}"
    base = V2_ROOT / name
    uid = str(uuid.uuid4())
    pod = make_pod("psi", uid, "BestEffort")
    cid = pod["status"]["containerStatuses"][0]["containerID"]  # type: ignore[index]
    pod_rel = pod_dir(CgroupDriver.SYSTEMD, K8sQoS.BESTEFFORT, uid)
    ctr_rel = container_dir(CgroupDriver.SYSTEMD, pod_rel, cid)
    (base / ctr_rel).mkdir(parents=True)
    procs = []
    try:
        agent = _agent(tmp_path, base, pod, gates="PSICollector=true")
        assert agent.backend.version == 2
        procs = [_burner_in([base / ctr_rel / "cgroup.procs"]) for _ in range(3)]  # 3 burners on 2 CPUs
        time.sleep(2.5)
        agent.collect_psi()
        reading = agent.advisor.latest.psi.get(("pod", uid))
        assert reading is not None
        assert set(reading.by_resource) == {"cpu", "mem", "io"}
        assert reading.by_resource["cpu"].some[0] > 0  # contention shows up in avg10
        text = agent.metrics.render("external").decode()
        [line] = [ln for ln in text.splitlines() if ln.startswith("koordlet_pod_psi{")
                  and 'psi_resource_type="cpu"' in ln and 'psi_precision="avg10"' in ln and 'psi_degree="some"' in ln]
        assert f'pod_uid="{uid}"' in line and 'pod_name="psi"' in line
        assert f'cpu_full_supported="{str(reading.cpu_full_supported).lower()}"' in line
        assert float(line.rsplit(" ", 1)[1]) == reading.by_resource["cpu"].some[0]
    finally:
        for p in procs:
            _stop(p)
        rmtree_cgroup(base)


def test_v1_memory_from_numa_stat_equals_memory_stat(v1_root: tuple[Path, str], tmp_path: Path) -> None:
    """The agent reads memory.numa_stat where the kernel has it: the same counters as memory.stat, in pages."""
    root, _ = v1_root
    paths = HostPaths.under("/").with_overrides(cgroup_root=str(root))
    numa, plain = CgroupV1(paths), CgroupV1(paths)
    require(numa.numa_stat, "this kernel has no memory.numa_stat (CONFIG_NUMA off)")
    plain.numa_stat, plain._memory_file = False, "memory.stat"  # upstream's file, for comparison
    for sub in V1_SUBSYSTEMS:
        (root / sub / "pod").mkdir()
    cache_file = tmp_path / "cached"
    # 48 MiB anon (the burner) plus page cache from writing a file inside the cgroup.
    proc = subprocess.Popen(["/bin/sh", "-c", "; ".join(f"echo $$ > '{root / s / 'pod' / 'cgroup.procs'}'"
                                                          for s in V1_SUBSYSTEMS)
                             + f"; head -c 8388608 /dev/zero > '{cache_file}'; exec '{sys.executable}' -c '{BURN}'"])
    try:
        time.sleep(1.0)
        numa.stats("pod")  # warm both paths, then compare reads taken back to back
        for _ in range(5):
            a, b = numa.stats("pod"), plain.stats("pod")
            if a.memory_usage == b.memory_usage and a.memory_with_cache == b.memory_with_cache:
                break
            time.sleep(0.2)  # the burner allocated between the two reads: read again
    finally:
        _stop(proc)
    assert numa.stat_paths("pod")[1].endswith("memory.numa_stat")
    assert a.memory_usage >= 48 << 20 and a.memory_with_cache - a.memory_usage >= 4 << 20
    assert (a.memory_usage, a.memory_with_cache) == (b.memory_usage, b.memory_with_cache)
    for sub in V1_SUBSYSTEMS:
        (root / sub / "pod").rmdir()
