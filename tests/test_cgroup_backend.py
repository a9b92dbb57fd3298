"""cgroup v1/v2 backends read the same logical stats from each layout; bad files raise HostReadError."""

from __future__ import annotations

from pathlib import Path

import pytest

from apis.core.errors import HostReadError
from koordlet.host.cgroup import detect_backend, parse_psi

from simhost import SimCgroup, SimHost


def test_stats_are_identical_across_layouts(simhost: SimHost) -> None:
    backend = detect_backend(simhost.paths)
    assert backend.version == simhost.version
    simhost.write_cgroup("kubepods/x", SimCgroup(cpu_ns=123_456_000, anon=4096, file=8192, nr_periods=7,
                                                 nr_throttled=3))
    s = backend.stats("kubepods/x")
    assert (s.cpu_usage_ns, s.memory_usage, s.memory_with_cache, s.nr_periods, s.nr_throttled) == (
        123_456_000, 4096, 4096 + 8192, 7, 3)


def test_missing_or_garbage_files_raise(simhost: SimHost) -> None:
    backend = detect_backend(simhost.paths)
    with pytest.raises(HostReadError):
        backend.stats("kubepods/none")
    simhost.write_cgroup("kubepods/bad", SimCgroup())
    bad = simhost.cgroup_root() / ("kubepods/bad/cpu.stat" if simhost.version == 2 else
                                   "cpuacct/kubepods/bad/cpuacct.usage")
    bad.write_text("garbage\n")
    with pytest.raises(HostReadError):
        backend.stats("kubepods/bad")


def test_parse_psi_with_and_without_full() -> None:
    both = parse_psi(b"some avg10=1.00 avg60=2.00 avg300=3.00 total=1\nfull avg10=0.10 avg60=0.20 avg300=0.30 "
                     b"total=2\n", "x")
    assert both.some == (1.0, 2.0, 3.0) and both.full == (0.1, 0.2, 0.3)
    some_only = parse_psi(b"some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", "x")
    assert some_only.full is None
    with pytest.raises(HostReadError):
        parse_psi(b"full avg10=x\n", "x")


@pytest.mark.parametrize("data", [
    b"cache 1\ntotal_inactive_anon 10\ntotal_active_anon 20\ntotal_inactive_file 30\ntotal_active_file 40\n"
    b"total_unevictable 50\n",                                   # kernel order: one anchored split
    b"total_unevictable 50\ntotal_active_file 40\nx 1\ntotal_inactive_file 30\ntotal_active_anon 20\n"
    b"total_inactive_anon 10",                                   # shuffled, first line, no trailing newline
    b"total_inactive_anon 10\ntotal_active_anon 20\ntotal_inactive_file 30\ntotal_active_file 40\n"
    b"total_unevictable 50",                                     # the block at the head, no trailing newline
    b"total_inactive_anon 10\ntotal_active_anon 20\ntotal_inactive_file 30\nnew_key 7\ntotal_active_file 40\n"
    b"total_unevictable 50\n",                                   # a line in between: each key searched for
])
def test_int_fields_adjacent_and_shuffled(data: bytes) -> None:
    from koordlet.host.files import IntFields

    fields = IntFields(b"total_inactive_anon", b"total_active_anon", b"total_inactive_file", b"total_active_file",
                       b"total_unevictable")
    assert fields(data) == [10, 20, 30, 40, 50]


def test_int_fields_do_not_match_inside_a_longer_key() -> None:
    from koordlet.host.files import IntFields

    v1 = b"inactive_anon 1\nactive_anon 2\ntotal_inactive_anon 10\ntotal_active_anon 20\n"
    assert IntFields(b"inactive_anon", b"active_anon")(v1) == [1, 2]
    assert IntFields(b"active_anon")(b"total_active_anon 20\nactive_anon 2\n") == [2]


def test_int_fields_missing_and_garbage() -> None:
    from koordlet.host.files import IntFields

    fields = IntFields(b"nr_periods", b"nr_throttled")
    assert fields(b"nr_periods 3\nthrottled_time 9\n") == [3, None]
    assert fields(b"nr_periods x\nnr_throttled 2\n") == [None, 2]
    assert fields(b"") == [None, None]


_NUMA_STAT = (b"total=30 N0=30\nfile=10 N0=10\nanon=15 N0=15\nunevictable=5 N0=5\n"
              b"hierarchical_total=300 N0=200 N1=100\nhierarchical_file=100 N0=60 N1=40\n"
              b"hierarchical_anon=150 N0=100 N1=50\nhierarchical_unevictable=50 N0=40 N1=10\n")


@pytest.mark.parametrize("data", [
    _NUMA_STAT,
    b"\n".join(reversed(_NUMA_STAT.split(b"\n"))),  # another order: each line looked up
])
def test_v1_memory_from_numa_stat_pages(data: bytes) -> None:
    import os

    from koordlet.host.cgroup import _numa_memory

    page = os.sysconf("SC_PAGE_SIZE")
    assert _numa_memory(data, "x") == ((150 + 50) * page, (150 + 50 + 100) * page)


def test_numa_stat_without_anon_is_unreadable() -> None:
    from koordlet.host.cgroup import _numa_memory

    with pytest.raises(HostReadError, match="hierarchical_anon"):
        _numa_memory(b"total=1 N0=1\nhierarchical_file=4 N0=4\n", "memory.numa_stat")


def test_v1_backend_reads_numa_stat_only_where_the_kernel_has_it(tmp_path: Path) -> None:
    from koordlet.host.cgroup import CgroupV1
    from koordlet.host.paths import HostPaths

    paths = HostPaths.under(str(tmp_path))
    (tmp_path / "sys/fs/cgroup/memory").mkdir(parents=True)
    assert CgroupV1(paths).stat_paths("pod")[1].endswith("/memory/pod/memory.stat")
    (tmp_path / "sys/fs/cgroup/memory/memory.numa_stat").write_bytes(_NUMA_STAT)
    backend = CgroupV1(paths)
    assert backend.stat_paths("pod")[1].endswith("/memory/pod/memory.numa_stat")
    stats = backend.parse_stats((b"7\n", _NUMA_STAT, b"nr_periods 2\nnr_throttled 1\n"), backend.stat_paths("pod"))
    assert (stats.cpu_usage_ns, stats.nr_periods, stats.nr_throttled) == (7, 2, 1)
