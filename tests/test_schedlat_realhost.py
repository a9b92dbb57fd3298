"""Real kernel, as root: run-queue wait of a busy pod (more busy threads than CPUs) and an idle pod in real cgroup v1
dirs, by the bcc program, beside the kernel's own schedstat accounting and bcc's runqlat, and through the CLI."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from koordlet.agent import Agent
from koordlet.config import Config, parse_feature_gates
from koordlet.host.driver import CgroupDriver, K8sQoS, container_dir, pod_dir
from koordlet.host.paths import HostPaths
from koordlet.schedlat.btf import VMLINUX
from koordlet.schedlat.collector import RAW_CAPABILITY, Backend, SchedLatency
from koordlet.schedlat.ebpf import HOST_SLOT, EbpfBackend
from koordlet.schedlat.hist import Totals
from koordlet.schedlat.schedstat import parse_schedstat

from conftest import real_v1_root, require
from simhost import make_pod

pytestmark = pytest.mark.realhost

SUBSYSTEMS = ("cpu", "cpuacct", "memory")
THREADS = 2 * (os.cpu_count() or 1)  # more busy threads than CPUs: they wait for each other
# hashlib releases the GIL for large buffers, so the threads of one process really compete for CPUs.
BUSY = ("import hashlib, threading, time\nbuf = b'x' * (1 << 20)\ndef run():\n    end = time.time() + 60\n"
        "    while time.time() < end:\n        hashlib.sha256(buf).digest()\n"
        f"ts = [threading.Thread(target=run) for _ in range({THREADS})]\n"
        "[t.start() for t in ts]\n[t.join() for t in ts]\n")
IDLE = "import time\nend = time.time() + 60\nwhile time.time() < end:\n    time.sleep(0.05)\n"


def _require_bcc() -> None:
    require(os.geteuid() == 0, "eBPF needs root")
    # found, not imported: the agent (this process) must never import it
    require(importlib.util.find_spec("bcc") is not None,
            "the bcc module is not importable (make installs python3-bpfcc and links it into the venv)")


def _in_cgroups(procs: list[Path], code: str) -> subprocess.Popen[bytes]:
    join = "; ".join(f"echo $$ > '{f}'" for f in procs)
    return subprocess.Popen(["/bin/sh", "-c", f"{join}; exec '{sys.executable}' -c \"{code}\""])


class Node:
    """Two pods with real cgroups under a test parent: `busy` (THREADS busy threads) and `idle`."""

    def __init__(self, tmp_path: Path, root: Path) -> None:
        self.tmp_path, self.root = tmp_path, root
        self.pods_dir = tmp_path / "pods"
        self.pods_dir.mkdir()
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.uids: dict[str, str] = {}
        for name, code in (("busy", BUSY), ("idle", IDLE)):
            uid = str(uuid.uuid4())
            pod = make_pod(name, uid, "Burstable")
            cid = pod["status"]["containerStatuses"][0]["containerID"]  # type: ignore[index]
            rel = container_dir(CgroupDriver.CGROUPFS, pod_dir(CgroupDriver.CGROUPFS, K8sQoS.BURSTABLE, uid), cid)
            for sub in SUBSYSTEMS:
                (root / sub / rel).mkdir(parents=True)
            (self.pods_dir / f"{name}.yaml").write_text(yaml.safe_dump(pod))
            self.uids[name] = uid
            self.procs[name] = _in_cgroups([root / sub / rel / "cgroup.procs" for sub in SUBSYSTEMS], code)
        time.sleep(0.5)  # the threads have started

    def paths(self) -> HostPaths:
        return HostPaths.under("/").with_overrides(cgroup_root=str(self.root))

    def agent(self) -> Agent:
        cfg = Config(node_name="real-node", paths=self.paths(), pods_dir=str(self.pods_dir),
                     state_dir=str(self.tmp_path / "state"), feature_gates=parse_feature_gates("CPUSchedLatency=true"))
        agent = Agent(cfg)
        assert agent.sync_pods()
        return agent

    def tids(self, name: str) -> list[int]:
        return [int(t) for t in os.listdir(f"/proc/{self.procs[name].pid}/task")]

    def schedstat(self, name: str) -> dict[int, tuple[int, int]]:
        out = {}
        for tid in self.tids(name):
            try:
                out[tid] = parse_schedstat(Path(f"/proc/{tid}/schedstat").read_bytes())
            except OSError:
                continue
        return out

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is not None:
            proc.kill()
            proc.wait(timeout=10)

    def close(self) -> None:
        for name in list(self.procs):
            self.stop(name)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    _require_bcc()
    with real_v1_root(tmp_path, SUBSYSTEMS) as (root, _):
        n = Node(tmp_path, root)
        try:
            yield n
        finally:
            n.close()


def _by_name(agent: Agent) -> dict[str, Any]:
    assert agent.schedlat is not None
    return {r.pod.name: r for r in agent.schedlat.latest}


def test_busy_pod_waits_idle_pod_does_not_and_exited_tasks_are_reclaimed(node: Node) -> None:
    agent = node.agent()
    assert agent.schedlat is not None and agent.schedlat.wait_ready(60)
    assert agent.schedlat.source == "ebpf", agent.schedlat.reason
    agent.collect()
    time.sleep(2.0)
    agent.collect()
    rows = _by_name(agent)
    busy, idle = rows["busy"].tick, rows["idle"].tick
    assert busy.count > 100 and busy.mean_seconds is not None and busy.mean_seconds > 1e-3, busy
    assert idle.sum_ns < busy.sum_ns / 20, (idle, busy)
    backend = agent.schedlat.backend
    assert isinstance(backend, EbpfBackend)
    if os.path.exists(VMLINUX):  # the kernel's BTF gives task_struct's layout: raw tracepoints, said as such
        assert backend.attach == "raw_tracepoint", backend.attach_reason
        assert agent.health.capabilities[RAW_CAPABILITY] is True
    slot = backend._slot_of[node.uids["busy"]]
    # compiled and attached by a child that has exited: neither bcc nor its LLVM is in the agent
    with open("/proc/self/maps", encoding="utf-8") as f:
        mapped = f.read()
    assert "libbcc" not in mapped and "libLLVM" not in mapped
    assert "bcc" not in sys.modules
    # the busy threads ran, so they are placed (the main thread only sleeps in join). A thread is placed by a tick
    # after the kernel reported it, and takes its slot at its next wait: on a loaded machine one may need more
    # ticks than the two above, so tick (as the daemon does each second) for a few seconds
    deadline = time.monotonic() + 5
    while True:
        placed = backend.placed()
        seen = set(node.tids("busy")) & {t for t, s in placed.items() if s == slot}
        if len(seen) >= THREADS or time.monotonic() > deadline:
            break
        time.sleep(0.5)
        agent.collect()
    assert len(seen) >= THREADS, (seen, node.tids("busy"))
    # The tasks exit: their placements go with them (sched_process_exit); the pod leaves the list: its slot is
    # emptied and queued for reuse.
    node.stop("busy")
    assert slot not in backend.placed().values()
    (node.pods_dir / "busy.yaml").unlink()
    assert agent.sync_pods()
    agent.collect()
    assert "busy" not in _by_name(agent) and node.uids["busy"] not in backend._slot_of
    assert backend._slots.waiting()[-1] == slot and backend._read_stats(slot + 1)[slot].sum() == 0
    assert HOST_SLOT not in backend._slot_of.values()
    agent.close()


@pytest.mark.parametrize("raw", [True, False], ids=["raw-tracepoints", "classic-tracepoints"])
def test_mean_wait_agrees_with_the_kernels_schedstat_and_orders_pods_as_the_fallback(node: Node, raw: bool) -> None:
    def make(paths: HostPaths, version: int, use_bcc: bool) -> Backend:
        assert use_bcc
        return EbpfBackend(paths, version, raw=raw)

    ebpf = SchedLatency(node.paths(), 1, _health(), use_bcc=True, make=make)
    fallback = SchedLatency(node.paths(), 1, _health(), use_bcc=False)
    assert ebpf.wait_ready(60) and ebpf.source == "ebpf", ebpf.reason
    assert isinstance(ebpf.backend, EbpfBackend)
    assert ebpf.backend.attach == ("raw_tracepoint" if raw and os.path.exists(VMLINUX) else "tracepoint")
    assert fallback.wait_ready(10) and fallback.source == "schedstat"
    agent = node.agent()
    pods = agent.state.pods()
    ebpf.collect(pods, 0)
    fallback.collect(pods, 0, force=True)
    before = node.schedstat("busy")
    time.sleep(3.0)
    after = node.schedstat("busy")
    ebpf.collect(pods, 1)
    fallback.collect(pods, 1, force=True)
    peer = Totals(sum(after[t][1] - before[t][1] for t in after if t in before),
                  sum(after[t][0] - before[t][0] for t in after if t in before))
    ours = {r.pod.name: r.tick for r in ebpf.latest}
    theirs = {r.pod.name: r.tick for r in fallback.latest}
    assert ours["busy"].mean_seconds is not None and peer.mean_seconds is not None
    assert ours["busy"].mean_seconds == pytest.approx(peer.mean_seconds, rel=0.25), (ours["busy"], peer)
    assert ours["busy"].count == pytest.approx(peer.count, rel=0.25)
    # The fallback ranks the pods the same way
    assert theirs["busy"].sum_ns > theirs["idle"].sum_ns and ours["busy"].sum_ns > ours["idle"].sum_ns
    assert (theirs["busy"].mean_seconds or 0) > (theirs["idle"].mean_seconds or 0)
    ebpf.close()
    agent.close()


def _health() -> Any:
    from koordlet.health import Health

    return Health()


_RUNQLAT = "/usr/sbin/runqlat-bpfcc"
_HIST_LINE = re.compile(r"\s*(\d+) -> (\d+)\s*: (\d+)")
_TID_LINE = re.compile(r"tid = (\d+)")


def _runqlat_by_tid(text: str) -> dict[int, list[tuple[int, int, int]]]:
    """runqlat -L: (low µs, high µs, count) rows under each `tid = N` header."""
    out: dict[int, list[tuple[int, int, int]]] = {}
    current: list[tuple[int, int, int]] | None = None
    for line in text.splitlines():
        if m := _TID_LINE.search(line):
            current = out.setdefault(int(m[1]), [])
        elif current is not None and (m := _HIST_LINE.match(line)):
            current.append((int(m[1]), int(m[2]), int(m[3])))
    return out


def _hist_mean_us(rows: list[tuple[int, int, int]]) -> tuple[int, float]:
    n = sum(c for _, _, c in rows)
    return n, sum(c * (lo + hi) / 2 for lo, hi, c in rows) / max(n, 1)


def test_runqlat_over_the_same_window(node: Node) -> None:
    """bcc's runqlat (per thread, -L) beside ours on the busy pod. runqlat reads task_struct fields (pid, tgid,
    __state) with the layout of the headers bcc compiles against; where those are an older kernel's (this
    machine: Debian 6.1 headers, kernel 6.18) it reads other fields, and its thread ids are not threads at all.
    Then the test establishes that instead (it is why the agreement test above uses the kernel's schedstat)."""
    require(shutil.which(_RUNQLAT) is not None, "bpfcc-tools (runqlat) is not installed (make installs it)")
    ebpf = SchedLatency(node.paths(), 1, _health(), use_bcc=True)
    assert ebpf.wait_ready(60) and ebpf.source == "ebpf", ebpf.reason
    agent = node.agent()
    pods = agent.state.pods()
    peer = subprocess.Popen([_RUNQLAT, "-L", "3", "1"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
    time.sleep(1.5)  # runqlat compiles and attaches, then samples 3 s
    ebpf.collect(pods, 0)
    out, _ = peer.communicate(timeout=60)
    ebpf.collect(pods, 1)
    ours = {r.pod.name: r.tick for r in ebpf.latest}["busy"]
    by_tid = _runqlat_by_tid(out)
    busy = set(node.tids("busy"))
    assert by_tid, out[-2000:]
    if busy & set(by_tid):
        rows = [row for tid in busy & set(by_tid) for row in by_tid[tid]]
        _, mean_us = _hist_mean_us(rows)
        assert ours.hist is not None
        _, ours_mean_us = _hist_mean_us([((1 << i) >> 1, (1 << i) - 1, c) for i, c in enumerate(ours.hist)])
        assert ours_mean_us == pytest.approx(mean_us, rel=0.25)
    else:
        live = {int(t) for t in os.listdir("/proc") if t.isdigit()}
        assert not set(by_tid) & busy and len(set(by_tid) - live) > len(by_tid) // 2, (
            "runqlat reports thread ids, but not the busy pod's", sorted(by_tid)[:20])
    ebpf.close()
    agent.close()


def test_cli_prints_each_pod_as_json_and_table(node: Node) -> None:
    base = [sys.executable, "-m", "koordlet", "sched-latency", "--host-root", "/", "--cgroup-root-dir",
            str(node.root), "--pods-dir", str(node.pods_dir), "--window", "1.5"]
    doc = json.loads(subprocess.run([*base, "-o", "json"], capture_output=True, text=True, check=True).stdout)
    rows = {r["name"]: r for r in doc}
    assert set(rows) == {"busy", "idle"}
    busy = rows["busy"]
    assert set(busy) == {"namespace", "name", "uid", "qosClass", "source", "count", "sumSeconds", "p50Seconds",
                         "p99Seconds"}
    assert busy["source"] == "ebpf" and busy["uid"] == node.uids["busy"] and busy["count"] > 100
    assert busy["p99Seconds"] >= busy["p50Seconds"] > 0 and busy["sumSeconds"] > rows["idle"]["sumSeconds"]
    table = subprocess.run([*base, "-o", "table"], capture_output=True, text=True, check=True).stdout
    header, *lines = table.splitlines()
    assert header.split() == ["NAMESPACE", "NAME", "QOS", "SOURCE", "WAITS", "SUM(MS)", "MEAN(MS)", "P50(MS)",
                              "P99(MS)"]
    assert sorted(line.split()[1] for line in lines) == ["busy", "idle"]
