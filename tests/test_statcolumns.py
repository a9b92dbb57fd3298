"""parse_columns gives every cgroup exactly what parse_stats gives it, whatever the files hold."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apis.core.errors import HostReadError
from koordlet.host.cgroup import CgroupBackend, CgroupV1, CgroupV2
from koordlet.host.paths import HostPaths

_NUMA = (b"total=%d N0=1\nfile=1 N0=1\nanon=1 N0=1\nunevictable=1 N0=1\nhierarchical_total=9 N0=9\n"
         b"hierarchical_file=%d N0=1\nhierarchical_anon=%d N0=1\nhierarchical_unevictable=%d N0=1\n")
_V1_STAT = (b"cache 1\ntotal_inactive_anon %d\ntotal_active_anon %d\ntotal_inactive_file %d\ntotal_active_file %d\n"
            b"total_unevictable %d\n")
_V2_STAT = b"anon 5\nfile 6\ninactive_anon %d\nactive_anon %d\ninactive_file %d\nactive_file %d\nunevictable %d\n"
_V2_CPU = (b"usage_usec %d\nuser_usec 1\nsystem_usec 2\nnr_periods %d\nnr_throttled %d\nthrottled_usec %d\n"
           b"nr_bursts 0\nburst_usec 0\n")
_V1_CPU = b"nr_periods %d\nnr_throttled %d\nthrottled_time %d\n"

counters = st.one_of(st.integers(0, 10**12), st.integers(0, 2**64), st.sampled_from([0, 2**53 + 1, 2**63 - 1,
                                                                                       2**63, 10**18, 10**19]))
garbage = st.sampled_from([b"", b"x\n", b"-3\n", b" 12 \n", b"1_000\n", b"7", b"7\n\n", b"5 6\n", b"12,\n", b"\x00",
                           b"nr_periods 1\n", b"hierarchical_anon=1 N0=1\n", b"usage_usec 5\n"])


def _backend(tmp_path: Path, version: int, numa: bool) -> CgroupBackend:
    tmp_path = tmp_path / f"v{version}{'-numa' if numa else ''}"
    paths = HostPaths.under(str(tmp_path))
    if version == 2:
        return CgroupV2(paths)
    (tmp_path / "sys/fs/cgroup/memory").mkdir(parents=True, exist_ok=True)
    if numa:
        (tmp_path / "sys/fs/cgroup/memory/memory.numa_stat").write_bytes(_NUMA % (1, 1, 1, 1))
    backend = CgroupV1(paths)
    assert backend.numa_stat == numa
    return backend


@st.composite
def cgroup_files(draw: st.DrawFn, version: int, numa: bool) -> tuple[bytes, ...]:
    """The stat files of one cgroup: the kernel's layouts with any counters, or now and then garbage."""
    def one(template: bytes, n: int) -> bytes:
        if draw(st.integers(0, 9)) == 0:
            return draw(garbage)
        return template % tuple(draw(counters) for _ in range(n))

    if version == 2:
        return one(_V2_CPU, 4), one(_V2_STAT, 5)
    usage = draw(garbage) if draw(st.integers(0, 9)) == 0 else b"%d\n" % draw(counters)
    return usage, one(_NUMA, 4) if numa else one(_V1_STAT, 5), one(_V1_CPU, 3)


@pytest.fixture(scope="module")
def backends(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[int, bool], CgroupBackend]:
    root = tmp_path_factory.mktemp("backends")
    return {(v, numa): _backend(root, v, numa) for v, numa in ((1, True), (1, False), (2, False))}


@pytest.mark.parametrize(("version", "numa"), [(1, True), (1, False), (2, False)])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_columns_are_parse_stats_row_by_row(backends: dict[tuple[int, bool], CgroupBackend], version: int,
                                            numa: bool, data: st.DataObject) -> None:
    backend = backends[(version, numa)]
    rows = data.draw(st.lists(cgroup_files(version, numa), max_size=12))
    paths = [backend.stat_paths(f"kubepods/p{i}") for i in range(len(rows))]
    files = [[r[j] for r in rows] for j in range(len(backend.stat_paths("x")))]
    cols = backend.parse_columns(files, paths)
    for i, (contents, stat_paths) in enumerate(zip(rows, paths, strict=True)):
        try:
            want: tuple[int, ...] | None = tuple(backend.parse_stats(contents, stat_paths))
            if any(v >= 2**63 for v in want):
                want = None  # beyond a column's int64: refused
        except HostReadError:
            want = None
        got = tuple(int(c[i]) for c in cols[:6])
        assert (None if i in cols.failed else got) == want, (i, contents)


def test_a_counter_beyond_64_bits_is_refused_with_its_path(tmp_path: Path) -> None:
    backend = _backend(tmp_path, 1, False)
    paths = [backend.stat_paths("a"), backend.stat_paths("b")]
    cols = backend.parse_columns([[b"%d\n" % 2**64, b"5\n"], [_V1_STAT % (1, 2, 3, 4, 5)] * 2,
                                  [_V1_CPU % (1, 0, 0)] * 2], paths)
    assert list(cols.failed) == [0] and "cpuacct.usage" in str(cols.failed[0])
    assert cols.cpu_usage_ns.tolist() == [0, 5] and cols.memory_usage.tolist() == [0, 1 + 2 + 5]
