"""Pods' memory per NUMA node from `memory.numa_stat`, read every few ticks: what NodeMetric's per-NUMA system
memory subtracts from each NUMA node's usage (upstream collectors/podresource and sysresource).

**[quirk]** Upstream reads the v1 file's first line, `total=`, which counts only the pages charged to the pod
cgroup itself; on cgroup v1 a pod's pages are charged to its containers' cgroups below it, so that is about nothing
and the system's share of every NUMA node came out as nearly all of it. We read the `hierarchical_` lines (the pod's
subtree). And where upstream counts page cache in (`total`, v2 `anon`+`file`) to subtract from a NUMA node usage
that leaves page cache out (MemTotal − MemFree − file − SReclaimable), we count what the node figure counts: anon
and unevictable pages, the pod memory usage NodeMetric reports too.

**[decision]** Every EVERY_TICKS collection ticks (10 s at the default 1 s), not every tick: one more file per pod
would be ~8 % more tick work for a figure NodeMetric averages over a minute. Where the tick itself reads the pods'
`memory.numa_stat` (cgroup v1 with NUMA: its memory figures come from that file), the sample parses what that tick
read instead of opening the files again.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping

from apis.core.errors import KoordletError
from koordlet.host.paths import HostPaths
from koordlet.host.resources import resource_path
from koordlet.states.model import PodMeta

EVERY_TICKS = 10
FILE = "memory.numa_stat"
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
_NODE = re.compile(rb"\bN(\d+)=(\d+)")


def _line(data: bytes, prefix: bytes) -> bytes | None:
    for line in data.split(b"\n"):
        if line.startswith(prefix):
            return line
    return None


def _sum_lines(data: bytes, prefixes: tuple[bytes, ...], unit: int) -> dict[int, int]:
    out: dict[int, int] = {}
    for prefix in prefixes:
        line = _line(data, prefix)
        if line is None:
            if prefix.startswith((b"anon", b"hierarchical_anon")):
                raise ValueError(f"no {prefix.decode().strip(' =')} line")
            continue  # unevictable: absent on some kernels, then none
        for n, value in _NODE.findall(line):
            out[int(n)] = out.get(int(n), 0) + int(value) * unit
    return out


def parse_v1(data: bytes) -> dict[int, int]:
    """Bytes per NUMA node from v1 `memory.numa_stat`: `hierarchical_anon=` + `hierarchical_unevictable=` pages."""
    return _sum_lines(data, (b"hierarchical_anon=", b"hierarchical_unevictable="), _PAGE_SIZE)


def parse_v2(data: bytes) -> dict[int, int]:
    """Bytes per NUMA node from v2 `memory.numa_stat`: the `anon` and `unevictable` lines."""
    return _sum_lines(data, (b"anon ", b"unevictable "), 1)


class PodNumaMemory:
    """`sample(pods)` every EVERY_TICKS calls: the pods' memory per NUMA node summed, or None between samples. A pod
    whose file cannot be read or parsed is left out, as upstream skips it."""

    def __init__(self, paths: HostPaths, cgroup_version: int) -> None:
        self.paths = paths
        self.version = cgroup_version
        self._parse = parse_v1 if cgroup_version == 1 else parse_v2
        self._calls = 0

    def sample(self, pods: list[PodMeta],
               already_read: Callable[[str], Mapping[str, bytes]] | None = None) -> dict[int, int] | None:
        """`already_read(file name)`: the files of that name this tick read, by path (called only on a sample)."""
        self._calls += 1
        if (self._calls - 1) % EVERY_TICKS:
            return None
        read = already_read(FILE) if already_read is not None else {}
        total: dict[int, int] = {}
        for pod in pods:
            try:
                path = resource_path(self.version, self.paths, FILE, pod.cgroup_dir)
                data = read.get(path)
                if data is None:
                    fd = os.open(path, os.O_RDONLY)
                    try:
                        data = os.read(fd, 1 << 16)
                    finally:
                        os.close(fd)
                per_node = self._parse(data)
            except (OSError, ValueError, KoordletError):  # a pod gone meanwhile, a bad dir, an odd file: skipped
                continue
            for n, value in per_node.items():
                total[n] = total.get(n, 0) + value
        return total
