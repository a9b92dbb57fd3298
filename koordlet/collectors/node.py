"""Node and per-NUMA CPU/memory usage from /proc/stat, /proc/meminfo and sysfs NUMA meminfo.

Upstream: pkg/koordlet/metricsadvisor/collectors/noderesource, pkg/koordlet/util/stat.go, meminfo.go.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from apis.core.errors import HostReadError
from apis.extension.resource_status import CPUSetError, parse_cpuset
from koordlet.host.files import OpenFiles, read_bytes
from koordlet.host.paths import HostPaths

# /proc/stat cpu columns counted as busy: user, nice, system, irq, softirq (upstream util/stat.go).
_BUSY_COLUMNS = (0, 1, 2, 5, 6)
_NODE_DIR = re.compile(r"^node(\d+)$")


def parse_proc_stat(data: bytes) -> tuple[int, dict[int, int]]:
    """Busy ticks of the whole node and of each CPU."""
    total = 0
    per_cpu: dict[int, int] = {}
    for line in data.split(b"\n"):
        if not line.startswith(b"cpu"):
            break  # the cpu lines come first
        name, *cols = line.split()
        busy = sum(int(cols[i]) for i in _BUSY_COLUMNS if i < len(cols))
        if name == b"cpu":
            total = busy
        else:
            per_cpu[int(name[3:])] = busy
    return total, per_cpu


def parse_meminfo(data: bytes) -> dict[str, int]:
    """/proc/meminfo or a NUMA node's meminfo (`Node 0 MemTotal: ... kB`) → {key: kB}."""
    out: dict[str, int] = {}
    for line in data.split(b"\n"):
        key, sep, rest = line.partition(b":")
        if not sep:
            continue
        name = key.rsplit(b" ", 1)[-1].decode()
        value = rest.split()
        if value:
            out[name] = int(value[0])
    return out


def numa_memory_usage(meminfo: dict[str, int]) -> int:
    """Upstream: MemTotal − (MemFree + Active(file) + Inactive(file) + SReclaimable), in bytes, clamped ≥ 0."""
    free = sum(meminfo.get(k, 0) for k in ("MemFree", "Active(file)", "Inactive(file)", "SReclaimable"))
    return max(meminfo.get("MemTotal", 0) - free, 0) * 1024


@dataclass(frozen=True)
class NumaTopology:
    """NUMA node id → its CPUs, read from sysfs (refreshed with node info, not every tick)."""

    cpus_by_node: dict[int, tuple[int, ...]] = field(default_factory=dict)

    @classmethod
    def read(cls, paths: HostPaths) -> NumaTopology:
        base = paths.sys("devices", "system", "node")
        try:
            names = os.listdir(base)
        except OSError:
            return cls()
        nodes: dict[int, tuple[int, ...]] = {}
        for name in names:
            m = _NODE_DIR.match(name)
            if not m:
                continue
            try:
                cpulist = read_bytes(os.path.join(base, name, "cpulist")).decode()
                nodes[int(m.group(1))] = tuple(parse_cpuset(cpulist))
            except (HostReadError, CPUSetError, UnicodeDecodeError):
                continue
        return cls(dict(sorted(nodes.items())))


@dataclass(frozen=True)
class NodeUsage:
    cpu_cores: float | None  # None on the first observation (no delta yet)
    memory_bytes: int
    numa_cpu_cores: dict[int, float]
    numa_memory_bytes: dict[int, int]


class NodeCollector:
    """Reads /proc/stat and meminfo; keeps only the previous tick's counters."""

    def __init__(self, paths: HostPaths, clk_tck: int | None = None) -> None:
        self.paths = paths
        self.hz = clk_tck or _clk_tck()
        self.topology = NumaTopology.read(paths)
        self._prev: tuple[float, int, dict[int, int]] | None = None
        self._files = OpenFiles(cap=256)  # /proc/stat, /proc/meminfo and one meminfo per NUMA node

    def refresh_topology(self) -> None:
        self.topology = NumaTopology.read(self.paths)

    def close(self) -> None:
        self._files.close()

    def collect(self, now_mono: float) -> NodeUsage:
        read = self._files.read
        total, per_cpu = parse_proc_stat(read(self.paths.proc("stat")))
        meminfo = parse_meminfo(read(self.paths.proc("meminfo")))
        memory = max(meminfo.get("MemTotal", 0) - meminfo.get("MemAvailable", 0), 0) * 1024

        cpu: float | None = None
        numa_cpu: dict[int, float] = {}
        prev, self._prev = self._prev, (now_mono, total, per_cpu)
        if prev is not None and now_mono > prev[0]:
            ticks = (now_mono - prev[0]) * self.hz
            cpu = max(total - prev[1], 0) / ticks
            for node, cpus in self.topology.cpus_by_node.items():
                busy = sum(max(per_cpu.get(c, 0) - prev[2].get(c, 0), 0) for c in cpus)
                numa_cpu[node] = busy / ticks

        numa_mem: dict[int, int] = {}
        for node in self.topology.cpus_by_node:
            path = self.paths.sys("bus", "node", "devices", f"node{node}", "meminfo")
            try:
                numa_mem[node] = numa_memory_usage(parse_meminfo(read(path)))
            except HostReadError:
                continue
        return NodeUsage(cpu, memory, numa_cpu, numa_mem)


def _clk_tck() -> int:
    try:
        return int(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError):
        return 100  # upstream's default when getconf fails
