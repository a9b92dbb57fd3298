"""What every discovery source hands the Device reporter: CR-shaped device entries plus owned labels/annotations.

Entries are plain JSON dicts shaped like the CRD's `spec.devices[]` items (apis/scheduling/v1alpha1/device_types.go
DeviceInfo), so what a source builds is exactly what goes on the wire.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from apis.core.objects import JSON

DeviceEntry = JSON

CONDITION_HEALTHY = "Healthy"


def topology(node_id: int, pcie_id: str, bus_id: str, socket_id: int = -1) -> JSON:
    """DeviceTopology: socketID is always -1 upstream (koordlet never resolves sockets)."""
    return {"socketID": socket_id, "nodeID": node_id, "pcieID": pcie_id, "busID": bus_id}


def healthy_condition(healthy: bool, reason: str = "", message: str = "") -> JSON:
    """A `Healthy` condition without lastTransitionTime; the reporter stamps it (keeping the old time when the
    status did not change, as upstream)."""
    if healthy:
        return {"type": CONDITION_HEALTHY, "status": "True", "reason": reason or "DeviceHealthy",
                "message": message or "device is healthy"}
    return {"type": CONDITION_HEALTHY, "status": "False", "reason": reason or "Unknown",
            "message": message or "device is unhealthy"}


@dataclass(frozen=True)
class DeviceSet:
    """One source's contribution to the node's Device CR."""

    devices: list[DeviceEntry] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
