"""memory.numa_stat parsing: the lines the per-NUMA system memory subtracts, in the kernel's layouts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from koordlet.collectors.numamemory import FILE, PodNumaMemory, parse_v1, parse_v2
from koordlet.host.paths import HostPaths
from koordlet.host.resources import resource_path
from koordlet.states.model import PodMeta

PAGE = os.sysconf("SC_PAGE_SIZE")
# A v1 pod dir (mm/memcontrol-v1.c memcg_numa_stat_show): its own pages first (none: they are its containers'),
# then the subtree's.
V1 = (b"total=0 N0=0 N1=0\nfile=0 N0=0 N1=0\nanon=0 N0=0 N1=0\nunevictable=0 N0=0 N1=0\n"
      b"hierarchical_total=1300 N0=1000 N1=300\nhierarchical_file=290 N0=200 N1=90\n"
      b"hierarchical_anon=1000 N0=790 N1=210\nhierarchical_unevictable=10 N0=10 N1=0\n")
# v2 (mm/memcontrol.c memory_numa_stat_show): bytes, one line per counter.
V2 = (b"anon N0=1048576 N1=2097152\nfile N0=4096 N1=0\nkernel_stack N0=16384 N1=0\nshmem N0=0 N1=0\n"
      b"unevictable N0=8192 N1=0\n")


def test_v1_counts_the_subtree_anon_and_unevictable_pages_not_the_own_total() -> None:
    assert parse_v1(V1) == {0: 800 * PAGE, 1: 210 * PAGE}  # upstream's `total=` line would say 0


def test_v2_counts_anon_and_unevictable_bytes() -> None:
    assert parse_v2(V2) == {0: 1048576 + 8192, 1: 2097152}


def test_a_file_without_the_anon_line_is_refused() -> None:
    with pytest.raises(ValueError, match="hierarchical_anon"):
        parse_v1(b"total=0 N0=0\n")
    with pytest.raises(ValueError, match="anon"):
        parse_v2(b"file N0=1\n")


def test_a_sample_parses_what_the_tick_read_and_reads_only_the_rest(tmp_path: Path) -> None:
    paths = HostPaths.under(str(tmp_path))
    pods = [PodMeta(f"u{i}", "ns", f"p{i}", "Burstable", "LS", "", "Running", f"kubepods/pod{i}", (), {})
            for i in range(2)]
    on_disk = resource_path(1, paths, FILE, pods[1].cgroup_dir)
    os.makedirs(os.path.dirname(on_disk))
    with open(on_disk, "wb") as f:
        f.write(V1)
    # pod 0's file exists only as the tick read it (no file on disk): parsed from the tick's bytes
    ticked = {resource_path(1, paths, FILE, pods[0].cgroup_dir): V1.replace(b"anon=1000 N0=790", b"anon=1010 N0=800")}
    asked: list[str] = []

    def already_read(name: str) -> dict[str, bytes]:
        asked.append(name)
        return ticked

    total = PodNumaMemory(paths, 1).sample(pods, already_read)
    assert asked == [FILE]
    assert total == {0: (800 + 10 + 800) * PAGE, 1: (210 + 210) * PAGE}
