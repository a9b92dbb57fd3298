"""The node's `Device` CR from the discovery sources (pure): composition, ordering, ownership and change test.

Upstream: pkg/koordlet/statesinformer/impl/states_device_linux.go (reportDevice, updateDevice). Differences, on
purpose: labels and annotations owned by others are kept (upstream replaces them wholesale), and only our own
keys are compared when deciding whether to update.
"""

from __future__ import annotations

import copy
import datetime as dt

from apis.core.objects import JSON
from apis.extension.device_share import (
    ANNOTATION_GPU_PARTITIONS,
    LABEL_GPU_DRIVER_VERSION,
    LABEL_GPU_MODEL,
    LABEL_GPU_PARTITION_POLICY,
    LABEL_GPU_VENDOR,
)
from koordlet.devices.model import DeviceSet

API_VERSION = "scheduling.koordinator.sh/v1alpha1"
GROUP = "scheduling.koordinator.sh"
PLURAL = "devices"
OWNED_LABELS = frozenset({LABEL_GPU_VENDOR, LABEL_GPU_MODEL, LABEL_GPU_DRIVER_VERSION, LABEL_GPU_PARTITION_POLICY})
OWNED_ANNOTATIONS = frozenset({ANNOTATION_GPU_PARTITIONS})


def compose(xpu: DeviceSet | None, nvidia: DeviceSet | None, rdma: DeviceSet | None,
            enforce_device_infos: bool = False) -> DeviceSet:
    """Upstream order: xPU device-info entries win over NVML GPUs (whose labels then do not apply); RDMA is
    appended; `--xpu-enforce-collect-from-device-infos` never falls back to NVML."""
    devices: list[JSON] = []
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    if xpu is not None and xpu.devices:
        devices += xpu.devices
        labels.update(xpu.labels)
        annotations.update(xpu.annotations)
    elif nvidia is not None and not enforce_device_infos:
        devices += nvidia.devices
        labels.update(nvidia.labels)
        annotations.update(nvidia.annotations)
    if rdma is not None:
        devices += rdma.devices
        labels.update(rdma.labels)
        annotations.update(rdma.annotations)
    return DeviceSet(sort_devices(devices), labels, annotations)


def sort_devices(devices: list[JSON]) -> list[JSON]:
    """By type (string order: gpu < rdma) then minor; each device's conditions by type (upstream)."""
    out = []
    for d in sorted(devices, key=lambda d: (str(d.get("type", "")), int(d.get("minor", 0) or 0))):
        d = copy.deepcopy(d)
        if d.get("conditions"):
            d["conditions"] = sorted(d["conditions"], key=lambda c: str(c.get("type", "")))
        out.append(d)
    return out


def _now() -> str:
    return dt.datetime.now(tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def stamp_conditions(devices: list[JSON], previous: list[JSON], now: str | None = None) -> None:
    """Give every condition a lastTransitionTime: the old one when the same device (by id) had the same
    condition type with the same status, else now."""
    now = now or _now()
    old: dict[tuple[str, str], JSON] = {}
    for d in previous:
        for c in d.get("conditions") or []:
            old[(str(d.get("id")), str(c.get("type")))] = c
    for d in devices:
        for c in d.get("conditions") or []:
            before = old.get((str(d.get("id")), str(c.get("type"))))
            if before is not None and before.get("status") == c.get("status") and before.get("lastTransitionTime"):
                c["lastTransitionTime"] = before["lastTransitionTime"]
            else:
                c.setdefault("lastTransitionTime", now)


def _merge(existing: dict[str, str] | None, ours: dict[str, str], owned: frozenset[str]) -> dict[str, str]:
    kept = {k: v for k, v in (existing or {}).items() if k not in owned}
    return {**kept, **ours}


def desired(node_name: str, node_uid: str | None, composed: DeviceSet, existing: JSON | None,
            now: str | None = None) -> JSON:
    """The Device object to write, given what exists (None = create). Foreign labels/annotations and every
    other metadata field of the existing object are kept."""
    meta: JSON = copy.deepcopy((existing or {}).get("metadata") or {})
    meta["name"] = node_name
    if node_uid and not meta.get("ownerReferences"):
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid,
                                    "controller": True, "blockOwnerDeletion": True}]
    meta["labels"] = _merge(meta.get("labels"), composed.labels, OWNED_LABELS)
    meta["annotations"] = _merge(meta.get("annotations"), composed.annotations, OWNED_ANNOTATIONS)
    for key in ("labels", "annotations"):
        if not meta[key]:
            del meta[key]
    devices = copy.deepcopy(composed.devices)
    previous = ((existing or {}).get("spec") or {}).get("devices") or []
    stamp_conditions(devices, previous, now)
    spec: JSON = {"devices": devices} if devices else {}  # Go's omitempty: no devices → `spec: {}`
    obj: JSON = {"apiVersion": API_VERSION, "kind": "Device", "metadata": meta, "spec": spec}
    if existing and "status" in existing:
        obj["status"] = copy.deepcopy(existing["status"])
    return obj


def changed(existing: JSON | None, new: JSON) -> bool:
    """Whether an update is needed: spec.devices, or any label/annotation we own, differs."""
    if existing is None:
        return True
    old_devices = sort_devices(((existing.get("spec") or {}).get("devices")) or [])
    if old_devices != new["spec"].get("devices", []):
        return True
    for key, owned in (("labels", OWNED_LABELS), ("annotations", OWNED_ANNOTATIONS)):
        old = {k: v for k, v in ((existing.get("metadata") or {}).get(key) or {}).items() if k in owned}
        now = {k: v for k, v in (new["metadata"].get(key) or {}).items() if k in owned}
        if old != now:
            return True
    return False
