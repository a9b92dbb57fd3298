"""From a computed NodeResource to the node: the status it should have, whether that is worth a write, the patches.

Upstream: resource_calculator.go (updateNodeResource, isCommonNodeNeedSync), each plugin's Prepare and NeedSync,
pkg/util/resource.go IsResourceDiff. A write happens when a managed resource appears, disappears or moves by more
than `resourceDiffThreshold` of its value, or when `updateTimeThresholdSeconds` passed since the node's last write
and its value moved at all (upstream rewrites the same value then; an identical write is skipped here).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from apis.core.errors import InvalidInput
from apis.core.objects import JSON, JSONMapping
from apis.core.quantity import format_bytes, format_milli
from apis.extension.device_share import GPU_LABELS
from apis.extension.resources import BATCH_MEMORY, BATCH_RESOURCES, MID_MEMORY, MID_RESOURCES, RESOURCE_GPU_MEMORY
from scheduler.cluster import quantity_value
from scheduler.noderesource.calculate import GPU_RESOURCES, RDMA_RESOURCES, NodeResource

# batch and mid: absent from the result means removed (PrepareNodeForResource); devices: only an explicit reset
# removes, a resource not computed is left as it is (gpudeviceresource/rdmadevicereource Prepare)
COMPUTED_OR_REMOVED = (*MID_RESOURCES, *BATCH_RESOURCES)
RESET_ONLY = (*GPU_RESOURCES, *RDMA_RESOURCES)
MANAGED = (*COMPUTED_OR_REMOVED, *RESET_ONLY)
_BYTE_RESOURCES = frozenset({BATCH_MEMORY, MID_MEMORY, RESOURCE_GPU_MEMORY})


def format_value(name: str, value: int) -> str:
    """The quantity string as the Go client writes it: bytes in BinarySI, everything else as a DecimalSI integer
    (so 4000 millicores of batch-cpu is "4k", as kubectl shows it)."""
    return format_bytes(value) if name in _BYTE_RESOURCES else format_milli(value * 1000)


def _value(name: str, text: object) -> int | None:
    try:
        return quantity_value(name, text)
    except InvalidInput:
        return None


@dataclass
class Plan:
    """What to write to one node: status entries (None removes), labels, and why."""

    status: dict[str, str | None] = field(default_factory=dict)  # resource → quantity, same in allocatable/capacity
    labels: dict[str, str] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.status and not self.labels


def desired(nr: NodeResource) -> dict[str, int | None]:
    """Each managed resource's target: a value, None (remove), or absent (leave as it is)."""
    out: dict[str, int | None] = {}
    for name in COMPUTED_OR_REMOVED:
        out[name] = None if name in nr.resets else nr.resources.get(name)
    for name in RESET_ONLY:
        if name in nr.resets:
            out[name] = None
        elif name in nr.resources:
            out[name] = nr.resources[name]
    return out


def diff_exceeds(old: int, new: int, threshold: float) -> bool:
    """util.IsQuantityDiff: |new − old| > old × threshold (so any change from zero counts)."""
    return abs(new - old) > old * threshold


def plan(node: JSONMapping, nr: NodeResource, strategy: JSONMapping, expired: bool) -> Plan:
    """The writes this node needs now. `expired`: its last write is older than updateTimeThresholdSeconds (or
    there was none), so any difference is written; otherwise only one past the diff threshold (or a resource
    appearing or going) is, and then every differing managed resource goes in the same write."""
    status = node.get("status") or {}
    alloc, cap = status.get("allocatable") or {}, status.get("capacity") or {}
    threshold = float(strategy.get("resourceDiffThreshold") or 0.1)
    differing: dict[str, str | None] = {}
    significant: list[str] = []
    for name, target in desired(nr).items():
        old_alloc = _value(name, alloc[name]) if name in alloc else None
        old_cap = _value(name, cap[name]) if name in cap else None
        if target is None:
            if name in alloc or name in cap:
                differing[name] = None
                significant.append(f"{name} removed")
            continue
        if old_alloc == target and old_cap == target:
            continue
        differing[name] = format_value(name, target)
        if old_alloc is None or diff_exceeds(old_alloc, target, threshold):
            significant.append(f"{name} {alloc.get(name, '(none)')} -> {differing[name]}")
    out = Plan()
    if differing and (significant or expired):
        out.status = differing
        out.reasons = significant or ["updateTimeThresholdSeconds passed"]
    labels = (node.get("metadata") or {}).get("labels") or {}
    out.labels = {k: v for k, v in nr.labels.items() if k in GPU_LABELS and labels.get(k) != v}
    return out


def status_patch(p: Plan) -> JSON:
    """A merge patch of the node's status subresource: the same entries in allocatable and capacity."""
    return {"status": {"allocatable": dict(p.status), "capacity": dict(p.status)}}


def label_patch(p: Plan) -> JSON:
    return {"metadata": {"labels": dict(p.labels)}}
