"""Kept descriptors for the collection tick: fresh values, removed cgroups, regular files, the cap, the fd limit."""

from __future__ import annotations

import os
import resource
from pathlib import Path

import pytest

from apis.core.errors import HostReadError
from koordlet.host.files import OpenFiles, descriptor_cap, is_pseudo_fs, raise_nofile_limit

from conftest import real_v1_root


def _open_fds() -> set[str]:
    return {os.readlink(f"/proc/self/fd/{n}") for n in os.listdir("/proc/self/fd") if n.isdigit()
            and os.path.exists(f"/proc/self/fd/{n}")}


@pytest.mark.realhost
def test_kept_descriptor_reads_fresh_values_and_follows_a_recreated_cgroup(tmp_path: Path) -> None:
    with real_v1_root(tmp_path, ("memory",)) as (root, _):
        cg = root / "memory" / "pod"
        cg.mkdir()
        limit = str(cg / "memory.limit_in_bytes")
        files = OpenFiles(cap=10)
        assert int(files.read(limit)) > 1 << 40  # unlimited by default
        assert len(files) == 1
        Path(limit).write_text(str(64 << 20))
        assert int(files.read(limit)) == 64 << 20  # same descriptor, the kernel's current value
        assert len(files) == 1

        cg.rmdir()
        with pytest.raises(HostReadError):
            files.read(limit)  # ENODEV on the kept descriptor, and the path is gone
        assert len(files) == 0
        cg.mkdir()
        assert int(files.read(limit)) > 1 << 40  # the new cgroup's value, not the old one's
        assert len(files) == 1
        files.close()
        assert len(files) == 0
        cg.rmdir()


@pytest.mark.realhost
def test_proc_and_cgroup_files_are_pseudo_filesystems(tmp_path: Path) -> None:
    assert is_pseudo_fs(os.stat("/proc/stat").st_dev)
    with real_v1_root(tmp_path, ("cpuacct",)) as (root, _):
        assert is_pseudo_fs(os.stat(root / "cpuacct" / "cpuacct.usage").st_dev)
    assert not is_pseudo_fs(os.stat(tmp_path).st_dev)


def test_regular_files_are_read_afresh_not_kept(tmp_path: Path) -> None:
    """A simulated node is regular files: a kept descriptor would go on reading a deleted or replaced file."""
    f = tmp_path / "cpuacct.usage"
    f.write_text("100\n")
    files = OpenFiles(cap=10)
    assert files.read(str(f)) == b"100\n"
    assert len(files) == 0
    tmp = tmp_path / "new"
    tmp.write_text("200\n")
    tmp.replace(f)  # a new inode under the same name
    assert files.read(str(f)) == b"200\n"
    f.unlink()
    with pytest.raises(HostReadError):
        files.read(str(f))


def test_large_files_are_read_whole(tmp_path: Path) -> None:
    f = tmp_path / "big"
    payload = b"x" * 200_000
    f.write_bytes(payload)
    assert OpenFiles(cap=10).read(str(f)) == payload


@pytest.mark.realhost
def test_past_the_cap_files_are_opened_per_read_and_retain_closes_the_rest(tmp_path: Path) -> None:
    paths = ["/proc/stat", "/proc/meminfo", "/proc/loadavg"]
    before = _open_fds()
    files = OpenFiles(cap=2)
    for p in paths:
        assert files.read(p)
    assert len(files) == 2 and files.fallback_reads == 1
    assert files.read(paths[2]) and files.fallback_reads == 2  # still not kept: the cap holds
    assert _open_fds() - before == {"/proc/stat", "/proc/meminfo"}
    assert files.retain({"/proc/meminfo"}) == 1
    assert _open_fds() - before == {"/proc/meminfo"}
    files.close()
    assert _open_fds() - before == set()


def test_nofile_limit_is_raised_to_the_hard_limit_and_the_cap_stays_below_it() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        if hard != resource.RLIM_INFINITY and hard > 512:
            resource.setrlimit(resource.RLIMIT_NOFILE, (512, hard))
        new_soft, new_hard = raise_nofile_limit()
        assert new_hard == hard
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == new_soft
        assert new_soft == hard or hard == resource.RLIM_INFINITY
        assert 0 < descriptor_cap() <= new_soft // 2
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.realhost
def test_the_collector_keeps_descriptors_only_for_cgroups_it_still_reads(tmp_path: Path) -> None:
    from koordlet.collectors.cgroups import CgroupUsageCollector, Target
    from koordlet.health import Health
    from koordlet.host.cgroup import CgroupV1
    from koordlet.host.paths import HostPaths

    with real_v1_root(tmp_path, ("cpu", "cpuacct", "memory")) as (root, _):
        for d in ("a", "b"):
            for sub in ("cpu", "cpuacct", "memory"):
                (root / sub / d).mkdir()
        backend = CgroupV1(HostPaths.under("/").with_overrides(cgroup_root=str(root)))
        collector = CgroupUsageCollector(backend, Health(), OpenFiles(cap=100))
        both = [Target("pod", "a", "a", "ns/a"), Target("pod", "b", "b", "ns/b")]
        usage = collector.collect(both, 1)
        assert set(usage) == {("pod", "a"), ("pod", "b")}
        assert len(collector.files) == 6  # cpuacct.usage, memory.stat, cpu.stat of each
        usage = collector.collect(both, 1_000_000_000)
        assert usage[("pod", "a")].cpu_cores == 0.0  # an empty cgroup, read twice through kept descriptors
        collector.collect([both[0]], 2_000_000_000)  # pod b left
        assert len(collector.files) == 3
        collector.close()
        assert len(collector.files) == 0
        for d in ("a", "b"):
            for sub in ("cpu", "cpuacct", "memory"):
                (root / sub / d).rmdir()


@pytest.mark.realhost
def test_the_collector_follows_a_cgroup_recreated_under_its_held_descriptors(tmp_path: Path) -> None:
    from koordlet.collectors.cgroups import CgroupUsageCollector, Target
    from koordlet.health import Health
    from koordlet.host.cgroup import CgroupV1
    from koordlet.host.paths import HostPaths

    subs = ("cpu", "cpuacct", "memory")
    with real_v1_root(tmp_path, subs) as (root, _):
        for sub in subs:
            (root / sub / "a").mkdir()
        backend = CgroupV1(HostPaths.under("/").with_overrides(cgroup_root=str(root)))
        files = OpenFiles(cap=100)
        collector = CgroupUsageCollector(backend, Health(), files)
        targets = [Target("pod", "a", "a", "ns/a")]
        collector.collect(targets, 1)
        collector.collect(targets, 2)  # the second tick reads through the held descriptors
        generation = files.generation
        (root / "memory" / "a" / "memory.limit_in_bytes").write_text(str(32 << 20))
        for sub in subs:
            (root / sub / "a").rmdir()
        health = collector.health
        assert collector.collect(targets, 3) == {}  # ENODEV on the held descriptors, and the path is gone
        assert health.cgroup_read_errors["pod"] == 1
        assert files.generation > generation and len(files) == 0
        for sub in subs:
            (root / sub / "a").mkdir()
        usage = collector.collect(targets, 4)
        assert set(usage) == {("pod", "a")} and len(files) == 3  # the new cgroup, through new descriptors
        assert usage[("pod", "a")].memory == 0
        collector.collect(targets, 5)
        assert files.fallback_reads == 0
        collector.close()
        for sub in subs:
            (root / sub / "a").rmdir()


@pytest.mark.realhost
def test_the_one_map_read_and_the_row_by_row_read_give_each_cgroup_its_own_stats(tmp_path: Path) -> None:
    """Cgroups held open are read by one map of pread, the others row by row, in one tick: each target still gets
    its own cgroup's values (those backend.stats reads), and a missing or refused one is counted, not read."""
    from koordlet.collectors.cgroups import CgroupUsageCollector, Target
    from koordlet.health import Health
    from koordlet.host.cgroup import CgroupV1
    from koordlet.host.paths import HostPaths

    subs = ("cpu", "cpuacct", "memory")
    with real_v1_root(tmp_path, subs) as (root, _):
        for d in ("a", "b", "c"):
            for sub in subs:
                (root / sub / d).mkdir()
        (root / "memory" / "b" / "memory.limit_in_bytes").write_text(str(64 << 20))
        backend = CgroupV1(HostPaths.under("/").with_overrides(cgroup_root=str(root)))
        health = Health()
        collector = CgroupUsageCollector(backend, health, OpenFiles(cap=100))
        targets = [Target("pod", "a", "a", "ns/a"), Target("pod", "gone", "gone", "ns/gone", quiet=True),
                   Target("container", "b", "b", "ns/a/b"), Target("hostapp", "x", "../../x", "x"),
                   Target("container", "c", "c", "ns/a/c")]
        for tick in range(1, 4):
            usage = collector.collect(targets, tick * 1_000_000_000)
            assert set(usage) == {("pod", "a"), ("container", "b"), ("container", "c")}
            for t in (targets[0], targets[2], targets[4]):
                s = backend.stats(t.rel_dir)
                u = usage[(t.scope, t.key)]
                assert (u.memory, u.memory_with_cache) == (s.memory_usage, s.memory_with_cache)
                assert (u.cpu_cores is None) == (tick == 1) and (u.throttled_ratio is None) == (tick == 1)
        assert len(collector.files) == 9 and collector.files.fallback_reads == 0
        assert health.cgroup_read_errors["pod"] == 3 and health.cgroup_reads == 9
        assert health.skipped[("hostapp", "bad-cgroup-dir")] == 3
        collector.close()
        for d in ("a", "b", "c"):
            for sub in subs:
                (root / sub / d).rmdir()
