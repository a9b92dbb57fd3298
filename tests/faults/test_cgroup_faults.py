"""Cgroup files that refuse writes, or are not files, and hostile pods: the QoS pass writes nowhere but where it should.

Issue #23, defect 7 (cgroup half). The agent runs over real v1 cgroups (benchmarks.churn.ChurnNode: BE, LS and LSR
pods, NodeSLO enabling CPU QoS, memory QoS, BE CPU suppress, CPU burst; BatchResource and CPUSetAllocator on), or
a simulated host where a file must become a directory.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.churn import ChurnNode, churn_node
from benchmarks.collection import SUBSYSTEMS
from koordlet.qos.executor import Executor, Result
from koordlet.qos.model import Plan, Write

from conftest import require

V1 = Path("/sys/fs/cgroup")
GATES = "CgroupReconcile=true,CPUSchedLatency=false"


def _have_v1() -> bool:
    return os.geteuid() == 0 and all((V1 / s / "cgroup.procs").exists() for s in (*SUBSYSTEMS, "cpuset"))


def _first_pass(node: ChurnNode) -> list[Result]:
    """A collection (two ticks: rates) and the first QoS pass over the pods as they are on disk now."""
    agent = node.agent
    agent.sync_pods()
    for _ in range(2):
        node.now += 1
        node.mono_ns += 1_000_000_000
        agent.collect(node.now, node.mono_ns)
    return node.qos.reconcile(agent.qos_state())


@contextmanager
def read_only(path: Path) -> Iterator[None]:
    """A read-only bind mount of the file over itself: the one thing that makes root's write fail on cgroupfs
    (mode bits do not stop root, and cgroupfs has no immutable attribute)."""
    subprocess.run(["mount", "--bind", str(path), str(path)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(path)], check=True)
        yield
    finally:
        subprocess.run(["umount", str(path)], check=True)


def test_a_read_only_cgroup_file_is_a_counted_skip_and_the_other_pods_are_written() -> None:
    """Fault: one BE pod's cpu.cfs_quota_us is a read-only bind mount (EROFS for root too). Invariant: the pass
    completes, that write is an error counted under EROFS, every other planned write of the pass is carried out
    (the other BE pod's quota included), and the next pass tries the file again."""
    require(_have_v1(), "needs root and the cgroup v1 cpu, cpuacct, memory, blkio, cpuset hierarchies")
    with churn_node(4, 1, gates=GATES) as node:
        node.agent.sync_pods()
        be = [p for p in node.agent.state.pods() if p.koord_qos == "BE"]
        assert len(be) == 2
        victim = Path(node.root / "cpu" / be[0].cgroup_dir / "cpu.cfs_quota_us")
        other = Path(node.root / "cpu" / be[1].cgroup_dir / "cpu.cfs_quota_us")
        with read_only(victim.resolve()):
            before = victim.read_text()
            try:
                victim.write_text("12345")
            except OSError as e:
                assert e.errno == 30  # EROFS: the fault is real
            results = _first_pass(node)
            again = node.qos.reconcile(node.agent.qos_state())
            assert victim.read_text() == before
        by_path: dict[str, Result] = {}
        for r in results:  # the first pass's own result (a resctrl mount plans a second time)
            by_path.setdefault(r.write.path, r)
        assert by_path[str(victim)].result == "error" and "EROFS" in by_path[str(victim)].detail
        assert node.agent.health.cgroup_write_errors["EROFS"] >= 1
        assert node.agent.health.skipped[("write", "EROFS")] >= 1
        assert by_path[str(other)].result == "written" and other.read_text().strip() == by_path[str(other)].write.value
        failed = [r for r in results if r.result not in ("written", "unchanged", "cached")]
        assert {r.write.path for r in failed} == {str(victim)}, failed
        retried = {r.result for r in again if r.write.path == str(victim)}
        assert retried == {"error"}  # tried again, not taken as cached


def test_a_cgroup_file_replaced_by_a_directory_is_skipped(tmp_path: Path) -> None:
    """Fault: in a simulated host, a pod's cpu.shares and another's cpu.cfs_quota_us are directories. Invariant:
    apply does not raise, those writes are skipped as errors (counted), the directories are untouched, and the other
    writes of the plan are carried out."""
    root = tmp_path / "cgroup"
    files = {"a/cpu.shares": "2", "a/cpu.cfs_quota_us": "-1", "b/cpu.shares": "2", "b/cpu.cfs_quota_us": "-1"}
    for rel, text in files.items():
        (root / "cpu" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "cpu" / rel).write_text(text + "\n")
    for rel in ("a/cpu.shares", "b/cpu.cfs_quota_us"):
        (root / "cpu" / rel).unlink()
        (root / "cpu" / rel / "inner").mkdir(parents=True)
    from koordlet.health import Health
    from koordlet.host.paths import HostPaths

    health = Health()
    ex = Executor(HostPaths.under(str(tmp_path)).with_overrides(cgroup_root=str(root)), 1, health)
    writes = [Write(str(root / "cpu" / rel), value, "test", resource=rel.split("/")[1])
              for rel, value in (("a/cpu.shares", "512"), ("a/cpu.cfs_quota_us", "50000"), ("b/cpu.shares", "256"),
                                 ("b/cpu.cfs_quota_us", "20000"))]
    results = ex.apply(Plan(writes=writes))
    assert [r.result for r in results] == ["error", "written", "written", "error"]
    assert health.cgroup_write_errors["EISDIR"] == 2
    assert (root / "cpu/a/cpu.cfs_quota_us").read_text() == "50000" and (root / "cpu/b/cpu.shares").read_text() == "256"
    assert (root / "cpu/a/cpu.shares/inner").is_dir() and (root / "cpu/b/cpu.cfs_quota_us/inner").is_dir()
    assert [r.result for r in ex.apply(Plan(writes=writes))] == ["error", "cached", "cached", "error"]


# ---- no write outside the pod's own cgroup -------------------------------------------------------------------

NASTY = ["", " ", "..", "../..", "/", "/etc/passwd", "a/../../b", "x\ny", "\x00", "-1", "max", "NaN", "1e999",
         "0x10", "１", "null", "[]", "{}", "a" * 300, "../../../../proc/sys/kernel/core_pattern"]
ANNOTATIONS = ("scheduling.koordinator.sh/resource-status", "koordinator.sh/cpuQOS", "koordinator.sh/memoryQOS",
               "koordinator.sh/cpuBurst", "koordinator.sh/resctrl", "node.koordinator.sh/cpu-reserved")


def _hostile(rng: random.Random, text: str) -> Any:
    """A JSON annotation value, corrupted or not, with path-like junk where strings go."""
    docs: list[Any] = [{"cpuset": rng.choice([*NASTY, "0-1000", "0,0,0", "3-1"])},
                       {"policy": rng.choice([*NASTY, "auto", "cpuBurstOnly"]), "cpuBurstPercent": rng.choice(
                           [-1, 0, 10**30, "x"])},
                       {"enable": rng.choice([True, "yes", 1]), "minLimitPercent": rng.choice([-5, 101, 10**20, "a"])},
                       {"groupIdentity": rng.choice([-3, 2, 10**9, "../"])}, rng.choice(NASTY)]
    doc = rng.choice(docs)
    out = json.dumps(doc)
    return out if rng.random() < 0.7 else out[:rng.randrange(len(out) + 1)] + rng.choice(["", "}", "\x00", text])


def _make_hostile(node: ChurnNode, rng: random.Random) -> None:
    """Rewrite every manifest: hostile names, namespaces, labels and annotations; some containers with ids that
    would climb out; some pods with a uid that is a path (those have no cgroup, as nothing could make one)."""
    for path in sorted(node.pods_dir.glob("pod-*.json")):
        pod = json.loads(path.read_text())
        meta = pod["metadata"]
        meta["name"] = rng.choice([meta["name"], "../../" + meta["name"], meta["name"] + "/x", "a\nb"])
        meta["namespace"] = rng.choice(["bench", "..", "kube-system/../x"])
        meta["annotations"] = {**meta.get("annotations", {}),
                               **{k: _hostile(rng, rng.choice(NASTY)) for k in ANNOTATIONS if rng.random() < 0.6}}
        if rng.random() < 0.3:
            meta["labels"] = {"koordinator.sh/qosClass": rng.choice(["BE", "LSR", "LSE", "ls", "../", "SYSTEM"])}
        for status in pod["status"]["containerStatuses"]:
            if rng.random() < 0.2:
                status["containerID"] = rng.choice(["containerd://../../x", "docker://" + "/" * 3, "containerd://a/b"])
        if rng.random() < 0.15:
            meta["uid"] = rng.choice(["../../kubepods", "x/../../y", "/etc"])
        path.write_text(json.dumps(pod))


class WriteRecorder:
    """Every file this process opens for writing, every dir it makes or removes (audit events), while `on`."""

    def __init__(self) -> None:
        self.on = False
        self.paths: list[tuple[str, str]] = []
        sys.addaudithook(self._hook)  # cannot be removed; `on` gates it

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.on or not args:
            return
        if event == "open" and isinstance(args[0], str):
            mode, flags = args[1], args[2]
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                mode is None and isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR))
            if writing:
                self.paths.append(("open", args[0]))
        elif event in ("os.mkdir", "os.rmdir", "os.remove", "os.rename", "os.replace", "os.truncate"):
            self.paths.append((event, os.fsdecode(args[0])))


RECORDER: WriteRecorder | None = None


def test_no_write_outside_the_pods_own_cgroup_with_hostile_pods() -> None:
    """Fault: 12 pods on real cgroups, every manifest rewritten 8 times with hostile names, namespaces, labels,
    annotations (resource-status, cpuQOS, memoryQOS, cpuBurst, resctrl, cpu-reserved: corrupt JSON, path-like
    strings, absurd numbers), container ids and uids that climb out; a pass after each. Invariant: every file the
    process opens for writing during the passes (and every dir it makes or removes) is in the cgroup dir of a listed
    pod (its own files or its containers'), directly in a kube-QoS dir (kubepods, burstable, besteffort), or the
    executor's audit log in the state dir, and some were written (the features did write)."""
    global RECORDER
    require(_have_v1(), "needs root and the cgroup v1 cpu, cpuacct, memory, blkio, cpuset hierarchies")
    RECORDER = RECORDER or WriteRecorder()
    rng = random.Random(23)
    written = recorded = 0
    with churn_node(12, 2, gates=GATES) as node:
        root = os.path.normpath(node.root)
        state_dir = os.path.normpath(node.agent.config.state_dir)
        qos_dirs = {"kubepods", "kubepods/burstable", "kubepods/besteffort"}
        for round_ in range(8):
            if round_:
                _make_hostile(node, rng)
            node.agent.sync_pods()
            pods = node.agent.state.pods()
            pod_dirs = tuple(os.path.join(p.cgroup_dir, "") for p in pods)
            RECORDER.paths.clear()
            RECORDER.on = True
            try:
                results = _first_pass(node)
            finally:
                RECORDER.on = False
            written += sum(r.result == "written" for r in results)
            recorded += sum(p.startswith(os.path.join(str(node.root), "")) for _, p in RECORDER.paths)
            for event, path in RECORDER.paths:
                real = os.path.normpath(path)
                if real.startswith(os.path.join(state_dir, "")) or real == state_dir:
                    assert (event in ("os.mkdir", "open") and "audit" in real) or real == state_dir, (event, path)
                    continue
                rel = os.path.relpath(os.path.dirname(real), root).split("/", 1)
                assert real.startswith(os.path.join(root, "")) and len(rel) == 2, (event, path)
                where = rel[1]
                assert where in qos_dirs or os.path.join(where, "").startswith(pod_dirs), \
                    f"{event} {path}: not in a listed pod's cgroup or a QoS dir"
    assert written > 0 and recorded >= written  # the features wrote, and the recorder saw those writes
