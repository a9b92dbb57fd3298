"""NVLink connectivity → the GPU partition table the scheduler allocates multi-GPU pods from (pure functions).

Upstream koordlet reports no partitions for NVML GPUs (only device-info files carry `p2pLinks`); the scheduler then
falls back to a built-in table for H100/H800/H20 (pkg/scheduler/plugins/deviceshare/allocator_gpu_helper.go
gpuPartitionIndexOfNVIDIAHopper: 1-GPU {0}..{7}, 2-GPU {0,1},{2,3},{4,5},{6,7}, 4-GPU {0-3},{4-7}, 8-GPU {0-7}).
We derive the table from the measured NVLink matrix instead, with the same shape on an NVSwitch machine: groups are
aligned blocks of consecutive minors ("buddy" blocks) whose GPUs are pairwise NVLink-connected; GPUs such blocks
leave uncovered are grouped greedily into further cliques, so bridged pairs on PCIe cards are found too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from apis.core.objects import JSON
from apis.core.quantity import canonical_quantity
from koordlet.devices.nvidia.backend import GpuInfo
from koordlet.devices.partitions import partition

LINK_TYPE_NVLINK = "NVLink"  # apis/extension/device_share.go GPUNVLink


@dataclass(frozen=True)
class Pair:
    """How two GPUs are NVLink-connected: link count and bandwidth (bytes/s, one direction) when known."""

    links: int
    bandwidth: int | None


def _active(g: GpuInfo) -> list[Any]:
    return [x for x in g.nvlinks if x.active]


def _bandwidth(links: Sequence[Any]) -> int | None:
    speeds = [x.speed_mbps for x in links]
    if not links or any(s is None or s <= 0 for s in speeds):
        return None
    return sum(int(s) for s in speeds) * 1_000_000


def pair(a: GpuInfo, b: GpuInfo) -> Pair | None:
    """None when a and b are not NVLink peers.

    Links counted as `nvidia-smi topo -m` shows NV#: direct GPU-to-GPU links when there are any, otherwise (an
    NVSwitch fabric, where every link ends at a switch) the smaller of the two GPUs' active switch-link counts.
    """
    direct_ab = [x for x in _active(a) if x.remote_type == "gpu" and x.remote_bus_id == b.bus_id]
    direct_ba = [x for x in _active(b) if x.remote_type == "gpu" and x.remote_bus_id == a.bus_id]
    direct = direct_ab or direct_ba
    if direct:
        return Pair(len(direct), _bandwidth(direct))
    if b.bus_id not in a.nvlink_peers and a.bus_id not in b.nvlink_peers:
        return None
    sw_a = [x for x in _active(a) if x.remote_type == "switch"]
    sw_b = [x for x in _active(b) if x.remote_type == "switch"]
    if sw_a and sw_b:
        fewer = sw_a if len(sw_a) <= len(sw_b) else sw_b
        bws = [_bandwidth(sw_a), _bandwidth(sw_b)]
        known = [x for x in bws if x is not None]
        return Pair(len(fewer), min(known) if len(known) == 2 else None)
    # NVML says P2P over NVLink works but did not tell how (no remote info): connected, bandwidth unknown.
    return Pair(max(len(_active(a)), len(_active(b)), 1), None)


def nvlink_matrix(gpus: Sequence[GpuInfo]) -> dict[tuple[int, int], Pair]:
    """Connected pairs keyed by (smaller minor, larger minor)."""
    out: dict[tuple[int, int], Pair] = {}
    for a, b in combinations(sorted(gpus, key=lambda g: g.minor), 2):
        p = pair(a, b)
        if p is not None:
            out[(a.minor, b.minor)] = p
    return out


def _group_bandwidth(minors: Sequence[int], matrix: dict[tuple[int, int], Pair],
                     by_minor: dict[int, GpuInfo]) -> int | None:
    """A ring over the group runs at its slowest edge; a fully connected group can take any ring, so the slowest
    pair bounds it. A single GPU's "ring" is its own NVLink bandwidth (so bandwidth-constrained 1-GPU requests
    still match)."""
    if len(minors) == 1:
        return _bandwidth(_active(by_minor[minors[0]]))
    bws = [matrix[(a, b)].bandwidth for a, b in combinations(minors, 2)]
    if any(bw is None for bw in bws):
        return None
    return min(int(bw) for bw in bws if bw is not None)


def _is_clique(minors: Iterable[int], matrix: dict[tuple[int, int], Pair]) -> bool:
    return all((a, b) in matrix for a, b in combinations(sorted(minors), 2))


def partitions(gpus: Sequence[GpuInfo]) -> list[JSON]:
    """GPUPartition dicts (minors, gpuLinkType, ringBusBandwidth, allocationScore 1) for sizes 1, 2, 4, 8, ...;
    empty when no two GPUs share an NVLink (then the node reports no partition table at all)."""
    ordered = sorted(gpus, key=lambda g: g.minor)
    by_minor = {g.minor: g for g in ordered}
    minors = [g.minor for g in ordered]
    matrix = nvlink_matrix(ordered)
    if not matrix:
        return []
    linked = {m for edge in matrix for m in edge}
    out: list[JSON] = []

    def emit(group: Sequence[int]) -> None:
        bw = _group_bandwidth(group, matrix, by_minor)
        out.append(partition(group, LINK_TYPE_NVLINK, canonical_quantity(bw) if bw else None))

    # Every GPU with an NVLink is a 1-GPU partition, so a node that honours partitions can still place 1-GPU pods.
    for m in minors:
        if m in linked:
            emit([m])
    size = 2
    while size <= len(minors):
        covered: set[int] = set()
        for start in range(0, len(minors) - size + 1, size):
            block = minors[start:start + size]
            if _is_clique(block, matrix):
                emit(block)
                covered.update(block)
        rest = [m for m in minors if m not in covered and m in linked]
        while len(rest) >= size:
            group = next((c for c in combinations(rest, size) if _is_clique(c, matrix)), None)
            if group is None:
                break
            emit(group)
            rest = [m for m in rest if m not in group]
        size *= 2
    return out
