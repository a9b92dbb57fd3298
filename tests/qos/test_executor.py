"""The one writer: validation before any write, write on change, 60 s force, vanished cgroups, audit, dry-run."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

from koordlet.health import Health
from koordlet.host.paths import HostPaths
from koordlet.qos.executor import Executor
from koordlet.qos.model import Plan, Write

from conftest import require


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def host(tmp_path: Path) -> tuple[HostPaths, Path]:
    paths = HostPaths.under(str(tmp_path))
    d = tmp_path / "sys/fs/cgroup/cpu/kubepods/podA"
    d.mkdir(parents=True)
    (d / "cpu.shares").write_text("1024\n")
    (d / "cpu.bvt_warp_ns").write_text("0\n")
    return paths, d


def _ex(paths: HostPaths, tmp_path: Path, **kw: object) -> tuple[Executor, Clock]:
    clock = Clock()
    return Executor(paths, 1, Health(), audit_path=str(tmp_path / "state/audit/qos.jsonl"), clock=clock,
                    **kw), clock  # type: ignore[arg-type]


def test_write_on_change_cache_and_force(host: tuple[HostPaths, Path], tmp_path: Path) -> None:
    paths, d = host
    ex, clock = _ex(paths, tmp_path)
    w = Write(str(d / "cpu.bvt_warp_ns"), "-1", "cpuqos/pod", resource="cpu.bvt_warp_ns")
    assert [r.result for r in ex.apply(Plan([w]))] == ["written"]
    assert (d / "cpu.bvt_warp_ns").read_text() == "-1"
    assert [r.result for r in ex.apply(Plan([w]))] == ["cached"]
    (d / "cpu.bvt_warp_ns").write_text("2\n")  # someone else changed it
    clock.now += 61  # past the force-update window: re-read and fix it
    assert [r.result for r in ex.apply(Plan([w]))] == ["written"]
    clock.now += 61
    assert [r.result for r in ex.apply(Plan([w]))] == ["unchanged"]
    audit = [json.loads(line) for line in (tmp_path / "state/audit/qos.jsonl").read_text().splitlines()]
    assert [a["result"] for a in audit] == ["written", "written"]
    assert audit[0]["path"] == "sys/fs/cgroup/cpu/kubepods/podA/cpu.bvt_warp_ns" and audit[0]["reason"] == "cpuqos/pod"
    assert ex.health.resource_writes[("cpu.bvt_warp_ns", "written")] == 2


def test_a_held_plan_is_rewritten_after_the_force_window(host: tuple[HostPaths, Path], tmp_path: Path) -> None:
    """The same plan applied pass after pass (the short cut for an all-cached plan) still repairs a file changed
    behind its back once the oldest cached value ages out of the force window, and counts every write."""
    paths, d = host
    ex, clock = _ex(paths, tmp_path)
    warp = Write(str(d / "cpu.bvt_warp_ns"), "-1", "cpuqos/pod", resource="cpu.bvt_warp_ns")
    shares = Write(str(d / "cpu.shares"), "2", "cpuqos/pod", resource="cpu.shares")
    plan = Plan([warp, shares])
    clock.now += 40  # the executor's own once-a-window pruning (from its start) is not what repairs the files
    assert [r.result for r in ex.apply(plan)] == ["written", "written"]
    clock.now += 30
    for _ in range(3):  # the first all-cached pass holds the plan, the next ones take the short cut
        assert [(r.write, r.result) for r in ex.apply(Plan(list(plan.writes)))] == [(warp, "cached"),
                                                                                    (shares, "cached")]
    (d / "cpu.bvt_warp_ns").write_text("2\n")  # someone else changed it
    (d / "cpu.shares").write_text("7\n")
    clock.now += 29.9
    assert [r.result for r in ex.apply(plan)] == ["cached", "cached"]  # trusted within the window, as per write
    clock.now += 0.2
    assert [r.result for r in ex.apply(plan)] == ["written", "written"]
    assert (d / "cpu.bvt_warp_ns").read_text() == "-1" and (d / "cpu.shares").read_text() == "2"
    assert ex.health.resource_writes[("cpu.shares", "cached")] == 4
    assert ex.health.resource_writes[("cpu.bvt_warp_ns", "written")] == 2


def test_a_held_plan_does_not_hide_a_new_value_or_a_forgotten_file(host: tuple[HostPaths, Path],
                                                                   tmp_path: Path) -> None:
    """The short cut holds only for the very same writes over an unchanged cache: an equal plan with one value
    changed is written at once, and a file whose cached value was forgotten (its cgroup removed) is read again."""
    paths, d = host
    ex, _ = _ex(paths, tmp_path)
    warp = Write(str(d / "cpu.bvt_warp_ns"), "-1", "cpuqos/pod", resource="cpu.bvt_warp_ns")
    shares = Write(str(d / "cpu.shares"), "2", "cpuqos/pod", resource="cpu.shares")
    ex.apply(Plan([warp, shares]))
    ex.apply(Plan([warp, shares]))  # all cached: held
    changed = Write(str(d / "cpu.shares"), "3", "cpuqos/pod", resource="cpu.shares")
    repair = Write(str(d / "cpu.bvt_warp_ns"), "-1", "repair", resource="cpu.bvt_warp_ns", compare="always",
                   if_changed=changed.path)
    assert [r.result for r in ex.apply(Plan([warp, changed, repair]))] == ["cached", "written", "written"]
    assert (d / "cpu.shares").read_text() == "3"
    plan = Plan([warp, changed, repair])
    assert [r.result for r in ex.apply(plan)] == ["cached", "cached"]  # held again: the repair follows no change
    assert [r.result for r in ex.apply(plan)] == ["cached", "cached"]
    (d / "cpu.shares").write_text("9\n")
    ex.forget(str(d / "cpu.shares"))
    assert [r.result for r in ex.apply(plan)] == ["cached", "written", "written"]
    assert (d / "cpu.shares").read_text() == "3"
    assert [r.result for r in ex.apply(Plan([warp]))] == ["cached"]  # a shorter plan is not the held one


def test_a_held_head_with_a_new_tail(host: tuple[HostPaths, Path], tmp_path: Path) -> None:
    """A plan whose leading writes are the last plan's (a feature re-planned only the end): those are taken as
    cached, the rest checked one by one; a later write that re-caches a held file (one file planned twice) drops the
    held head, so the next pass checks the file again and repairs it as it would without the short cut."""
    paths, d = host
    ex, clock = _ex(paths, tmp_path)
    (d / "cpu.cfs_quota_us").write_text("-1\n")
    warp = Write(str(d / "cpu.bvt_warp_ns"), "-1", "cpuqos/pod", resource="cpu.bvt_warp_ns")
    shares = Write(str(d / "cpu.shares"), "2", "cpuqos/pod", resource="cpu.shares")

    def quota(value: str) -> Write:
        return Write(str(d / "cpu.cfs_quota_us"), value, "suppress", resource="cpu.cfs_quota_us")

    ex.apply(Plan([warp, shares, quota("-1")]))
    ex.apply(Plan([warp, shares, quota("-1")]))  # held: all three
    (d / "cpu.shares").write_text("5\n")  # behind our back: trusted within the window, as per write
    assert [r.result for r in ex.apply(Plan([warp, shares, quota("50000")]))] == ["cached", "cached", "written"]
    assert (d / "cpu.cfs_quota_us").read_text() == "50000"
    assert [r.result for r in ex.apply(Plan([warp, shares, quota("50000")]))] == ["cached", "cached", "cached"]
    again = Write(str(d / "cpu.shares"), "3", "other", resource="cpu.shares")  # the same file, another value
    assert [r.result for r in ex.apply(Plan([warp, shares, again]))] == ["cached", "cached", "written"]
    assert [r.result for r in ex.apply(Plan([warp, shares, again]))] == ["cached", "written", "written"]
    clock.now += 61
    assert [r.result for r in ex.apply(Plan([warp, shares]))] == ["unchanged", "written"]
    assert ex.health.resource_writes[("cpu.bvt_warp_ns", "cached")] == 5


def test_values_of_files_no_longer_planned_are_forgotten_after_the_window(host: tuple[HostPaths, Path],
                                                                        tmp_path: Path) -> None:
    """A pod that left keeps no cache entries past two windows: memory stays bounded under pod churn. A value still
    planned is re-read once a window and stays."""
    paths, d = host
    ex, clock = _ex(paths, tmp_path)
    gone = Write(str(d / "cpu.bvt_warp_ns"), "-1", "cpuqos/pod", resource="cpu.bvt_warp_ns")
    kept = Write(str(d / "cpu.shares"), "2", "cpuqos/pod", resource="cpu.shares")
    ex.apply(Plan([gone, kept]))
    assert set(ex._cache) == {gone.path, kept.path}
    clock.now += 30
    ex.apply(Plan([kept]))  # cached: not re-read, still dated from the first pass
    clock.now += 31
    assert [r.result for r in ex.apply(Plan([kept]))] == ["unchanged"]  # re-read after the window, dated now
    assert set(ex._cache) == {gone.path, kept.path}  # one window old: kept a while
    clock.now += 61
    assert [r.result for r in ex.apply(Plan([kept]))] == ["unchanged"]
    assert set(ex._cache) == {kept.path}  # two windows old: gone


def test_retain_drops_the_values_of_files_a_new_plan_does_not_write(host: tuple[HostPaths, Path],
                                                                    tmp_path: Path) -> None:
    """The pods changed (QoSManager calls retain with the new plan): a gone pod's values go at once, not after two
    windows, and what the plan still writes stays cached (no re-read)."""
    paths, d = host
    ex, _ = _ex(paths, tmp_path)
    gone = Write(str(d / "cpu.bvt_warp_ns"), "-1", "cpuqos/pod", resource="cpu.bvt_warp_ns")
    kept = Write(str(d / "cpu.shares"), "2", "cpuqos/pod", resource="cpu.shares")
    ex.apply(Plan([gone, kept]))
    assert ex.retain(Plan([kept])) == 1 and set(ex._cache) == {kept.path}
    assert [r.result for r in ex.apply(Plan([kept]))] == ["cached"]


@pytest.mark.parametrize(("resource", "value"), [("cpu.bvt_warp_ns", "3"), ("cpu.shares", "1"),
                                                 ("cpu.shares", "abc"), ("no.such.file", "1")])
def test_out_of_range_never_reaches_the_file(host: tuple[HostPaths, Path], tmp_path: Path, resource: str,
                                             value: str) -> None:
    paths, d = host
    ex, _ = _ex(paths, tmp_path)
    target = d / "cpu.shares"
    [r] = ex.apply(Plan([Write(str(target), value, "test", resource=resource)]))
    assert r.result == "invalid" and target.read_text() == "1024\n"


def test_paths_outside_the_roots_are_refused(host: tuple[HostPaths, Path], tmp_path: Path) -> None:
    paths, _ = host
    ex, _ = _ex(paths, tmp_path)
    outside = tmp_path / "etc-passwd"
    outside.write_text("root\n")
    results = ex.apply(Plan([Write(str(outside), "x", "evil"),
                             Write(str(tmp_path / "sys/fs/cgroup/../../../etc-passwd"), "x", "evil")]))
    assert [r.result for r in results] == ["invalid", "invalid"] and outside.read_text() == "root\n"


def test_vanished_cgroup_and_missing_file(host: tuple[HostPaths, Path], tmp_path: Path) -> None:
    paths, d = host
    ex, _ = _ex(paths, tmp_path)
    gone = Write(str(d.parent / "podGone/cpu.shares"), "2", "t", resource="cpu.shares")
    nofile = Write(str(d / "cpu.idle"), "1", "t", resource="cpu.idle")
    assert [r.result for r in ex.apply(Plan([gone, nofile]))] == ["vanished", "unsupported"]
    assert ex.health.capabilities == {"file:cpu.idle": False}


def test_dry_run_plans_without_writing(host: tuple[HostPaths, Path], tmp_path: Path) -> None:
    paths, d = host
    ex, _ = _ex(paths, tmp_path, dry_run=True)
    results = ex.apply(Plan([Write(str(d / "cpu.shares"), "2048", "t", resource="cpu.shares"),
                             Write(str(d / "cpu.shares"), "1024", "t", resource="cpu.shares"),
                             Write(str(d.parent / "new"), "", "t", op="mkdir")]))
    assert [r.result for r in results] == ["planned", "unchanged", "planned"]
    assert (d / "cpu.shares").read_text() == "1024\n" and not (d.parent / "new").exists()


def test_line_compare_mkdir_rmdir_and_tids(host: tuple[HostPaths, Path], tmp_path: Path) -> None:
    paths, d = host
    ex, _ = _ex(paths, tmp_path)
    throttle = d / "blkio.throttle.read_bps_device"
    throttle.write_text("253:0 2048\n253:16 1048576\n")
    group = tmp_path / "sys/fs/resctrl/BE"
    group.parent.mkdir(parents=True)
    results = ex.apply(Plan([
        Write(str(throttle), "253:16 1048576", "blkio", compare="line"),
        Write(str(group), "", "resctrl", op="mkdir"),
    ]))
    assert [r.result for r in results] == ["unchanged", "written"] and group.is_dir()
    (group / "tasks").write_text("")
    [r] = ex.apply(Plan([Write(str(group / "tasks"), "12 34", "resctrl", op="tids", compare="always")]))
    assert r.result == "written" and (group / "tasks").read_text() == "1234"  # one write() per id
    os.remove(group / "tasks")
    assert [r.result for r in ex.apply(Plan([Write(str(group), "", "resctrl", op="rmdir")]))] == ["written"]
    assert not group.exists()


def test_real_cgroup_v1_write_read_back(tmp_path: Path) -> None:
    require(os.geteuid() == 0 and Path("/sys/fs/cgroup/cpu/cgroup.procs").exists(), "needs root and cgroup v1 cpu")
    name = f"koordlet-test-{uuid.uuid4().hex[:8]}"
    real = Path("/sys/fs/cgroup/cpu") / name
    real.mkdir()
    try:
        root = tmp_path / "cg"
        root.mkdir()
        (root / "cpu").symlink_to(Path("/sys/fs/cgroup/cpu") / name)
        paths = HostPaths.under("/").with_overrides(cgroup_root=str(root))
        ex = Executor(paths, 1, Health())
        target = str(root / "cpu" / "cpu.shares")
        assert [r.result for r in ex.apply(Plan([Write(target, "512", "t", resource="cpu.shares")]))] == ["written"]
        assert (real / "cpu.shares").read_text().strip() == "512"
        assert [r.result for r in ex.apply(Plan([Write(target, "1", "t", resource="cpu.shares")]))] == ["invalid"]
        assert (real / "cpu.shares").read_text().strip() == "512"
    finally:
        real.rmdir()


def test_mount_is_limited_to_resctrl_and_skips_mounted(host: tuple[HostPaths, Path], tmp_path: Path) -> None:
    paths, _ = host
    ex, _ = _ex(paths, tmp_path, dry_run=True)
    target = tmp_path / "sys/fs/resctrl"
    target.mkdir(parents=True)
    results = ex.apply(Plan([Write(str(target), "resctrl", "resctrl/mount", op="mount"),
                             Write(str(target), "tmpfs", "evil", op="mount"),
                             Write("/proc", "resctrl", "x", op="mount")]))
    assert [r.result for r in results] == ["planned", "invalid", "invalid"]  # /proc is not under these roots
    real_proc = Executor(paths.with_overrides(proc_root="/proc/"), 1, Health(), dry_run=True)
    [r] = real_proc.apply(Plan([Write("/proc", "resctrl", "x", op="mount")]))
    assert r.result == "unchanged"  # something is mounted there already: never mount over it


def test_if_changed_follows_the_write_it_repairs(host: tuple[HostPaths, Path], tmp_path: Path) -> None:
    paths, d = host
    (d / "cpu.idle").write_text("1\n")
    idle = Write(str(d / "cpu.idle"), "0", "cpuqos/pod", resource="cpu.idle")
    shares = Write(str(d / "cpu.shares"), "2", "cpuqos/pod restore", resource="cpu.shares", if_changed=idle.path)
    dry, _ = _ex(paths, tmp_path, dry_run=True)
    assert [(r.write.path, r.result) for r in dry.apply(Plan([idle, shares]))] == [(idle.path, "planned"),
                                                                                   (shares.path, "planned")]
    ex, clock = _ex(paths, tmp_path)
    assert [r.result for r in ex.apply(Plan([idle, shares]))] == ["written", "written"]
    assert (d / "cpu.shares").read_text() == "2"
    (d / "cpu.shares").write_text("1024\n")  # kubelet (or a resize) owns it while the pod is not idle
    clock.now += 61
    assert [r.result for r in ex.apply(Plan([idle, shares]))] == ["unchanged"]  # idle held: shares left alone
    assert (d / "cpu.shares").read_text() == "1024\n"
