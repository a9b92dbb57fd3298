"""The cgroup resource table: paths per version, upstream's value rules, and the v1 <-> v2 conversions."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apis.core.errors import HostReadError, InvalidInput, UnsupportedKernel
from koordlet.host.paths import HostPaths
from koordlet.host.resources import (
    RESOURCES,
    cpu_max,
    parse_cpu_max,
    resource_path,
    resource_supported,
    shares_to_weight,
    weight_to_shares,
)

# Every logical name upstream's cgroup_resource.go registers (v1 and v2 tables).
UPSTREAM = {
    "cpu.stat", "cpu.shares", "cpu.cfs_quota_us", "cpu.cfs_period_us", "cpu.cfs_burst_us", "tasks", "cpu.bvt_warp_ns",
    "cpu.idle", "cpuset.cpus", "cpuset.cpus.effective", "cpuacct.stat", "cpuacct.usage", "cpu.pressure",
    "memory.pressure", "io.pressure", "cgroup.procs", "memory.limit_in_bytes", "memory.usage_in_bytes",
    "memory.stat", "memory.numa_stat", "memory.wmark_ratio", "memory.wmark_scale_factor", "memory.wmark_min_adj",
    "memory.min", "memory.low", "memory.high", "memory.priority", "memory.use_priority_oom", "memory.oom.group",
    "memory.idle_page_stats", "blkio.throttle.read_iops_device", "blkio.throttle.read_bps_device",
    "blkio.throttle.write_iops_device", "blkio.throttle.write_bps_device", "blkio.cost.weight", "blkio.cost.qos",
    "blkio.cost.model", "net_cls.classid",
}


def test_table_covers_upstream_and_every_writable_file_has_a_rule() -> None:
    assert not UPSTREAM - RESOURCES.keys()
    for name, res in RESOURCES.items():
        assert res.name == name
        for version in (1, 2):
            if res.file(version) and not res.readonly:
                assert res.rule(version) is not None, (name, version)


# (resource, v1 path under the cgroup root, v2 path under the cgroup root); None = no file in that version.
PATHS = [
    ("cpu.shares", "cpu/kubepods/p1/cpu.shares", "kubepods/p1/cpu.weight"),
    ("cpu.cfs_quota_us", "cpu/kubepods/p1/cpu.cfs_quota_us", "kubepods/p1/cpu.max"),
    ("cpu.cfs_period_us", "cpu/kubepods/p1/cpu.cfs_period_us", "kubepods/p1/cpu.max"),
    ("cpu.cfs_burst_us", "cpu/kubepods/p1/cpu.cfs_burst_us", "kubepods/p1/cpu.max.burst"),
    ("cpu.bvt_warp_ns", "cpu/kubepods/p1/cpu.bvt_warp_ns", "kubepods/p1/cpu.bvt_warp_ns"),
    ("tasks", "cpu/kubepods/p1/tasks", "kubepods/p1/cgroup.threads"),
    ("cgroup.procs", "cpu/kubepods/p1/cgroup.procs", "kubepods/p1/cgroup.procs"),
    ("cpuset.cpus", "cpuset/kubepods/p1/cpuset.cpus", "kubepods/p1/cpuset.cpus"),
    ("cpuset.cpus.effective", None, "kubepods/p1/cpuset.cpus.effective"),
    ("cpuacct.usage", "cpuacct/kubepods/p1/cpuacct.usage", "kubepods/p1/cpu.stat"),
    ("cpuacct.stat", "cpuacct/kubepods/p1/cpuacct.stat", "kubepods/p1/cpu.stat"),
    ("memory.pressure", "cpuacct/kubepods/p1/memory.pressure", "kubepods/p1/memory.pressure"),
    ("memory.limit_in_bytes", "memory/kubepods/p1/memory.limit_in_bytes", "kubepods/p1/memory.max"),
    ("memory.usage_in_bytes", "memory/kubepods/p1/memory.usage_in_bytes", "kubepods/p1/memory.current"),
    ("memory.oom.group", "memory/kubepods/p1/memory.oom.group", "kubepods/p1/memory.oom.group"),
    ("memory.idle_page_stats", "memory/kubepods/p1/memory.idle_page_stats", None),
    ("blkio.cost.weight", "blkio/kubepods/p1/blkio.cost.weight", None),
    ("net_cls.classid", "net_cls/kubepods/p1/net_cls.classid", None),
]


@pytest.mark.parametrize(("name", "v1", "v2"), PATHS)
def test_paths_per_version(tmp_path: Path, name: str, v1: str | None, v2: str | None) -> None:
    paths = HostPaths.under(str(tmp_path))
    for version, want in ((1, v1), (2, v2)):
        if want is None:
            with pytest.raises(UnsupportedKernel):
                resource_path(version, paths, name, "kubepods/p1")
        else:
            assert resource_path(version, paths, RESOURCES[name], "/kubepods/p1") == paths.cgroup(want)


def test_path_rejects_unknown_resource_bad_version_and_escapes(tmp_path: Path) -> None:
    paths = HostPaths.under(str(tmp_path))
    assert resource_path(1, paths, "cpu.shares", "") == paths.cgroup("cpu", "cpu.shares")
    for version, name, rel in ((1, "cpu.nope", ""), (3, "cpu.shares", ""), (2, "cpu.shares", "kubepods/../../etc")):
        with pytest.raises(InvalidInput):
            resource_path(version, paths, name, rel)


OK, BAD = True, False
# (resource, version, value, accepted). Upstream ranges from cgroup_resource.go; cases from validator_test.go.
VALUES = [
    ("cpu.shares", 1, "2", OK), ("cpu.shares", 1, "262144", OK), ("cpu.shares", 1, "1", BAD),
    ("cpu.shares", 1, "262145", BAD), ("cpu.shares", 1, "", BAD), ("cpu.shares", 1, "max", BAD),
    ("cpu.shares", 1, "1_024", BAD), ("cpu.shares", 1, " 1024", BAD), ("cpu.shares", 1, "1024.0", BAD),
    ("cpu.shares", 2, "1", OK), ("cpu.shares", 2, "10000", OK), ("cpu.shares", 2, "0", BAD),
    ("cpu.shares", 2, "10001", BAD),
    ("cpu.cfs_quota_us", 1, "-1", OK), ("cpu.cfs_quota_us", 1, "1000", OK), ("cpu.cfs_quota_us", 1, "999", BAD),
    ("cpu.cfs_quota_us", 1, "-2", BAD), ("cpu.cfs_quota_us", 1, "max", BAD),
    ("cpu.cfs_quota_us", 2, "max", OK), ("cpu.cfs_quota_us", 2, "50000", OK),
    ("cpu.cfs_quota_us", 2, "max 100000", OK), ("cpu.cfs_quota_us", 2, "-1", BAD),
    ("cpu.cfs_quota_us", 2, "50000 999", BAD),
    ("cpu.cfs_period_us", 1, "1000", OK), ("cpu.cfs_period_us", 1, "1000000", OK),
    ("cpu.cfs_period_us", 1, "1000001", BAD), ("cpu.cfs_period_us", 2, "max 100000", OK),
    ("cpu.cfs_period_us", 2, "100000", BAD),
    ("cpu.cfs_burst_us", 1, "0", OK), ("cpu.cfs_burst_us", 1, "100000000", OK),
    ("cpu.cfs_burst_us", 1, "100000001", BAD), ("cpu.cfs_burst_us", 2, "100000001", OK),
    ("cpu.cfs_burst_us", 2, "max", OK), ("cpu.cfs_burst_us", 2, "-1", BAD),
    ("cpu.bvt_warp_ns", 1, "-1", OK), ("cpu.bvt_warp_ns", 2, "2", OK), ("cpu.bvt_warp_ns", 1, "-2", BAD),
    ("cpu.bvt_warp_ns", 1, "3", BAD), ("cpu.idle", 2, "1", OK), ("cpu.idle", 1, "2", BAD),
    ("tasks", 1, "4242", OK), ("tasks", 2, "0", BAD), ("cgroup.procs", 1, "-1", BAD),
    ("cpuset.cpus", 1, "", OK), ("cpuset.cpus", 1, "0-3,8,10-11", OK), ("cpuset.cpus", 2, "0-4096", OK),
    ("cpuset.cpus", 1, "0-4097", BAD), ("cpuset.cpus", 1, "3-1", BAD), ("cpuset.cpus", 1, "1,,2", BAD),
    ("cpuset.cpus", 1, "-1", BAD), ("cpuset.cpus", 1, "a", BAD), ("cpuset.mems", 2, "0-1", OK),
    ("memory.wmark_ratio", 1, "0", OK), ("memory.wmark_ratio", 2, "100", OK), ("memory.wmark_ratio", 1, "101", BAD),
    ("memory.wmark_scale_factor", 1, "1", OK), ("memory.wmark_scale_factor", 1, "1000", OK),
    ("memory.wmark_scale_factor", 1, "0", BAD), ("memory.wmark_min_adj", 1, "-25", OK),
    ("memory.wmark_min_adj", 1, "50", OK), ("memory.wmark_min_adj", 1, "-26", BAD),
    ("memory.wmark_min_adj", 1, "51", BAD), ("memory.priority", 1, "12", OK), ("memory.priority", 1, "13", BAD),
    ("memory.use_priority_oom", 1, "1", OK), ("memory.use_priority_oom", 1, "2", BAD),
    ("memory.oom.group", 2, "1", OK), ("memory.oom.group", 2, "-1", BAD),
    ("memory.min", 1, "0", OK), ("memory.high", 2, "max", OK), ("memory.low", 1, "-1", BAD),
    ("memory.limit_in_bytes", 1, "-1", OK), ("memory.limit_in_bytes", 1, "max", BAD),
    ("memory.limit_in_bytes", 2, "max", OK), ("memory.limit_in_bytes", 2, "-1", BAD),
    ("blkio.throttle.read_iops_device", 1, "253:16 2048", OK), ("blkio.throttle.write_bps_device", 1, "253:16 0", OK),
    ("blkio.throttle.read_bps_device", 1, "253:16 -1", BAD), ("blkio.throttle.read_bps_device", 1, "garbage", BAD),
    ("blkio.throttle.write_iops_device", 1, "253:16", BAD), ("blkio.throttle.read_iops_device", 2, "8:0 1", BAD),
    ("blkio.cost.weight", 1, "253:16 1", OK), ("blkio.cost.weight", 1, "253:16 100", OK),
    ("blkio.cost.weight", 1, "253:16 0", BAD), ("blkio.cost.weight", 1, "253:16 101", BAD),
    ("blkio.cost.qos", 1, "253:16 enable=1 ctrl=user rpct=95 rlat=3000 wpct=95 wlat=4000", OK),
    ("blkio.cost.qos", 1, "253:16 enable=0", OK),
    ("blkio.cost.qos", 1, "253:16 enable=1 ctrl=user rpct=-1 rlat=3000 wpct=95 wlat=4000", BAD),
    ("blkio.cost.qos", 1, "253:16 enable=2", BAD), ("blkio.cost.qos", 1, "253:16 bogus=1", BAD),
    ("blkio.cost.model", 1, "253:16 ctrl=user rbps=3324911720 rseqiops=168274 rrandiops=352545 wbps=2765819289 "
                            "wseqiops=367565 wrandiops=339390", OK),
    ("blkio.cost.model", 1, "253:16 ctrl=auto", OK), ("blkio.cost.model", 1, "253:16 ctrl=user rbps=0", BAD),
    ("net_cls.classid", 1, "0", OK), ("net_cls.classid", 1, "1048577", OK), ("net_cls.classid", 1, "0x100001", OK),
    ("net_cls.classid", 1, "4294967295", OK), ("net_cls.classid", 1, "4294967296", BAD),
    ("net_cls.classid", 1, "", BAD), ("net_cls.classid", 1, "abc", BAD), ("net_cls.classid", 1, "-1", BAD),
    ("net_cls.classid", 1, "111111111111111111111111", BAD), ("net_cls.classid", 1, "0xmm", BAD),
    ("net_cls.classid", 1, "0x-1", BAD), ("net_cls.classid", 1, "0x1111111111111111", BAD),
    ("cpu.stat", 1, "1", BAD), ("cpuset.cpus.effective", 2, "0", BAD), ("memory.pressure", 2, "x", BAD),
]


@pytest.mark.parametrize(("name", "version", "value", "accepted"), VALUES)
def test_validate(name: str, version: int, value: str, accepted: bool) -> None:
    error = RESOURCES[name].validate(value, version)
    assert (error is None) is accepted, error


@pytest.mark.parametrize(("shares", "weight"), [(2, 1), (102, 4), (512, 20), (1024, 39), (262144, 10000)])
def test_shares_to_weight_matches_kubelet(shares: int, weight: int) -> None:
    assert shares_to_weight(shares) == weight
    assert RESOURCES["cpu.shares"].validate(str(weight), 2) is None


def test_weight_to_shares_vectors_and_ranges() -> None:
    assert [weight_to_shares(w) for w in (1, 39, 100, 10000)] == [2, 999, 2598, 262144]
    for bad_shares in (1, 262145):
        with pytest.raises(InvalidInput):
            shares_to_weight(bad_shares)
    for bad_weight in (0, 10001):
        with pytest.raises(InvalidInput):
            weight_to_shares(bad_weight)


@given(st.integers(1, 10000))
def test_weight_round_trips_exactly(weight: int) -> None:
    assert shares_to_weight(weight_to_shares(weight)) == weight


@given(st.integers(2, 262144), st.integers(2, 262144))
def test_shares_to_weight_is_monotonic_and_inverse_is_smallest(a: int, b: int) -> None:
    lo, hi = sorted((a, b))
    assert shares_to_weight(lo) <= shares_to_weight(hi)
    assert weight_to_shares(shares_to_weight(lo)) <= lo


@pytest.mark.parametrize(("text", "parsed"), [
    ("max 100000", (-1, 100000)), ("max 100000\n", (-1, 100000)), ("100000 100000", (100000, 100000)),
    ("999999 100000", (999999, 100000)), ("0 100000", (0, 100000)),
])
def test_parse_cpu_max(text: str, parsed: tuple[int, int]) -> None:
    assert parse_cpu_max(text) == parsed


@pytest.mark.parametrize("text", ["100000", "max", "not_a_number 100000", "100000 not_a_number", "-1 100000", ""])
def test_parse_cpu_max_rejects(text: str) -> None:
    with pytest.raises(HostReadError):
        parse_cpu_max(text)


def test_cpu_max_formats_and_rejects() -> None:
    assert cpu_max(-1, 100000) == "max 100000"
    assert cpu_max(50000, 100000) == "50000 100000"
    for quota, period in ((999, 100000), (-2, 100000), (1000, 999), (1000, 1000001)):
        with pytest.raises(InvalidInput):
            cpu_max(quota, period)


@given(st.one_of(st.just(-1), st.integers(1000, 10**12)), st.integers(1000, 1_000_000))
def test_cpu_max_round_trips_and_validates(quota: int, period: int) -> None:
    line = cpu_max(quota, period)
    assert parse_cpu_max(line) == (quota, period)
    for name in ("cpu.cfs_quota_us", "cpu.cfs_period_us"):
        assert RESOURCES[name].validate(line, 2) is None


def test_resource_supported(tmp_path: Path) -> None:
    paths = HostPaths.under(str(tmp_path))
    bvt = Path(paths.cgroup("cpu", "kubepods", "cpu.bvt_warp_ns"))
    bvt.parent.mkdir(parents=True)
    bvt.write_text("0\n")
    weight = Path(paths.cgroup("kubepods", "cpu.weight"))
    weight.parent.mkdir(parents=True)
    weight.write_text("100\n")
    assert resource_supported(1, paths, "cpu.bvt_warp_ns", "kubepods")
    assert not resource_supported(1, paths, "cpu.idle", "kubepods")
    assert not resource_supported(1, paths, "cpu.bvt_warp_ns")
    assert resource_supported(2, paths, "cpu.shares", "kubepods")
    assert not resource_supported(2, paths, "net_cls.classid", "kubepods")
    assert RESOURCES["cpu.idle"].probe_in(2) == "kubepods" and RESOURCES["memory.min"].probe_in(2) == "always"
