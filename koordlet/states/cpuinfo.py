"""Host facts the NodeResourceTopology reports besides the CPU topology: CPU basic info and NUMA memory.

Upstream: pkg/koordlet/util/cpuinfo.go (getCPUBasicInfo: model, hyper-threading, turbo, L3 CBM mask, vendor),
pkg/koordlet/util/meminfo.go and node_numa (NUMA MemTotal, hugepages). Read with the node info (every
`--collect-node-cpu-info-interval`), never on the report path.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from apis.core.errors import HostReadError
from apis.core.objects import JSON
from koordlet.host.files import read_bytes
from koordlet.host.paths import HostPaths
from koordlet.states.cpupools import CPUTopology

_NODE_DIR = re.compile(r"^node(\d+)$")
HUGEPAGE_2M_KB = 2048
HUGEPAGE_1G_KB = 1048576


@dataclass(frozen=True)
class CPUBasicInfo:
    """extension.CPUBasicInfo, annotation `node.koordinator.sh/cpu-basic-info`."""

    cpu_model: str = ""
    hyper_thread_enabled: bool = False
    turbo_enabled: bool = False
    cat_l3_cbm_mask: str = ""
    vendor_id: str = ""

    def to_json(self) -> JSON:
        """Go's field order; omitempty drops empty strings and false."""
        out: JSON = {}
        for key, value in (("cpuModel", self.cpu_model), ("hyperThreadEnabled", self.hyper_thread_enabled),
                           ("turboEnabled", self.turbo_enabled), ("catL3CbmMask", self.cat_l3_cbm_mask),
                           ("vendorID", self.vendor_id)):
            if value:
                out[key] = value
        return out


def read_cpu_basic_info(paths: HostPaths, topo: CPUTopology) -> CPUBasicInfo:
    """Model and vendor from /proc/cpuinfo (the model is "unknown" when absent, as upstream), hyper-threading from
    `cpu/smt/active` (else: a core with two threads, where upstream asks lscpu), turbo from intel_pstate's
    `no_turbo` (false elsewhere, as upstream), the L3 CBM mask from resctrl's `info/L3/cbm_mask`."""
    cpuinfo = _text(paths.proc("cpuinfo"))
    model = _cpuinfo_value(cpuinfo, ("model name", "Model Name")) or "unknown"
    vendor = _cpuinfo_value(cpuinfo, ("vendor_id",))
    smt = _text(paths.sys("devices", "system", "cpu", "smt", "active")).strip()
    ht = smt == "1" if smt in ("0", "1") else any(len(ids) > 1 for ids in topo.siblings().values())
    no_turbo = _text(paths.sys("devices", "system", "cpu", "intel_pstate", "no_turbo")).strip()
    turbo = no_turbo == "0"
    mask = _text(paths.resctrl("info", "L3", "cbm_mask")).strip()
    return CPUBasicInfo(model, ht, turbo, mask, vendor)


def _cpuinfo_value(text: str, keys: tuple[str, ...]) -> str:
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip() in keys:
            return value.strip()
    return ""


@dataclass(frozen=True)
class NumaMemory:
    """One NUMA node's memory: MemTotal and the hugepages reserved on it, in bytes."""

    total: int
    hugepages_2m: int = 0
    hugepages_1g: int = 0


def read_numa_memory(paths: HostPaths) -> dict[int, NumaMemory]:
    """NUMA node id → memory, from `node<N>/meminfo` and `node<N>/hugepages/hugepages-<size>kB/nr_hugepages`."""
    base = paths.sys("devices", "system", "node")
    try:
        names = os.listdir(base)
    except OSError:
        return {}
    out: dict[int, NumaMemory] = {}
    for name in names:
        m = _NODE_DIR.match(name)
        if not m:
            continue
        total_kb = 0
        for line in _text(os.path.join(base, name, "meminfo")).splitlines():
            key, sep, rest = line.partition(":")
            if sep and key.split()[-1:] == ["MemTotal"]:
                fields = rest.split()
                total_kb = int(fields[0]) if fields and fields[0].isdigit() else 0
        pages = {size: _hugepages(os.path.join(base, name, "hugepages", f"hugepages-{size}kB", "nr_hugepages"))
                 for size in (HUGEPAGE_2M_KB, HUGEPAGE_1G_KB)}
        out[int(m.group(1))] = NumaMemory(total_kb * 1024, pages[HUGEPAGE_2M_KB] * HUGEPAGE_2M_KB * 1024,
                                          pages[HUGEPAGE_1G_KB] * HUGEPAGE_1G_KB * 1024)
    return dict(sorted(out.items()))


def _hugepages(path: str) -> int:
    text = _text(path).strip()
    return int(text) if text.isdigit() else 0


def _text(path: str) -> str:
    try:
        return read_bytes(path).decode("utf-8", "replace")
    except HostReadError:
        return ""
