"""The `scheduling.koordinator.sh/gpu-partitions` annotation: GPU groups the scheduler allocates together.

Shape (apis/extension/device_share.go GPUPartition, GPUPartitionTable): a JSON object keyed by the group size as a
string, each a list of `{"minors": [...], "gpuLinkType": "NVLink", "ringBusBandwidth": "<quantity>",
"allocationScore": 1}` with the last three omitted when empty/zero, serialized compactly as Go's encoding/json does:
map keys sorted, struct fields in declaration order (so the string is byte-identical to upstream's).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from apis.core.objects import JSON

POLICY_PREFER = "Prefer"
POLICY_HONOR = "Honor"


def partition(minors: Iterable[int], link_type: str = "", ring_bus_bandwidth: str | None = None,
              allocation_score: int = 1) -> JSON:
    out: JSON = {"minors": sorted(minors)}
    if link_type:
        out["gpuLinkType"] = link_type
    if ring_bus_bandwidth:
        out["ringBusBandwidth"] = ring_bus_bandwidth
    if allocation_score:
        out["allocationScore"] = allocation_score
    return out


def table_annotation(partitions: Iterable[JSON]) -> str | None:
    """Group partitions by size into the annotation's JSON; None when there are none (annotation omitted).
    Partitions with the same minors are kept once (first wins), as upstream dedupes by the sorted minor list."""
    table: dict[str, list[JSON]] = {}
    seen: set[tuple[int, ...]] = set()
    for p in partitions:
        key = tuple(p["minors"])
        if not key or key in seen:
            continue
        seen.add(key)
        table.setdefault(str(len(key)), []).append(p)
    if not table:
        return None
    return json.dumps({size: table[size] for size in sorted(table)}, separators=(",", ":"))
