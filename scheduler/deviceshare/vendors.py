"""Device plugin adapters: what vendors' device plugins read from a pod bound with koord-scheduler's allocation
(upstream pkg/scheduler/plugins/deviceshare/device_plugin_adapter.go), HAMi-core isolation matching, node locks."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from apis.core.objects import JSON
from apis.extension.device_share import (
    ANNOTATION_BIND_TIMESTAMP,
    ANNOTATION_GPU_MINORS,
    ANNOTATION_HAMI_NODE_LOCK,
    ANNOTATION_METAX_GPU_DEVICES_ALLOCATED,
    LABEL_GPU_ISOLATION_PROVIDER,
    LABEL_GPU_MODEL,
    LABEL_GPU_VENDOR,
)
from apis.extension.resources import RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY, RESOURCE_NPU_CORE
from apis.scheduling.device import DEVICE_TYPE_GPU
from scheduler.deviceshare.state import Allocation, Allocations

LABEL_HAMI_VGPU_NODE = "hami.io/vgpu-node"
HAMI_CORE = "HAMi-core"

VENDOR_HUAWEI = "huawei"
VENDOR_CAMBRICON = "cambricon"
VENDOR_METAX = "metax"
ASCEND_310P_DUO = "Ascend-310P3-300I-DUO"

ANN_PREDICATE_TIME = "predicate-time"
ANN_NPU_CORE = RESOURCE_NPU_CORE  # the Ascend device plugin reads its allocation under the resource's own name
ANN_ASCEND_310P = "huawei.com/Ascend310P"
ANN_DSMLU_ASSIGNED = "CAMBRICON_DSMLU_ASSIGHED"  # sic: the Cambricon device plugin's spelling
ANN_DSMLU_PROFILE = "CAMBRICON_DSMLU_PROFILE"
ANN_DSMLU_LOCK = "cambricon.com/dsmlu.lock"
CAMBRICON_VMEMORY_UNIT = 256 * 1024 * 1024  # the device plugin's min-dsmlu-unit
METAX_VRAM_UNIT = 1024 * 1024  # MetaX sGPU memory is given in MiB
LOCK_TIMEOUT = dt.timedelta(minutes=5)

# Vendors whose device plugin cannot tell two pods apart that are bound to a node at the same time: the scheduler
# locks the node (annotation `<key>: <RFC 3339 time>,<namespace>,<name>`) until the plugin removes the lock.
LOCK_KEYS = {VENDOR_CAMBRICON: ANN_DSMLU_LOCK, VENDOR_METAX: ANNOTATION_HAMI_NODE_LOCK}


def gpu_model(node_labels: dict[str, str], device_labels: dict[str, str]) -> tuple[str, str]:
    """(vendor, model): the Node's labels, else the Device CR's (our agent labels the Device CR)."""
    return (node_labels.get(LABEL_GPU_VENDOR) or device_labels.get(LABEL_GPU_VENDOR, ""),
            node_labels.get(LABEL_GPU_MODEL) or device_labels.get(LABEL_GPU_MODEL, ""))


def isolation_provider(value: str) -> str:
    """**[decision]** the v1.6 release text spells HAMi-core `hami-core`: any casing of it is HAMi-core."""
    return HAMI_CORE if value.lower() == HAMI_CORE.lower() else value


def provider_mismatch(pod_labels: dict[str, str], node_labels: dict[str, str]) -> str | None:
    """plugin.go Filter: a shared-GPU pod naming an isolation provider fits only nodes labelled with the same one.
    **[decision]** a per-node reason (upstream returns an Error status that aborts the whole attempt)."""
    want = pod_labels.get(LABEL_GPU_ISOLATION_PROVIDER, "")
    if not want or isolation_provider(want) == isolation_provider(node_labels.get(LABEL_GPU_ISOLATION_PROVIDER, "")):
        return None
    return f"node(s) didn't match gpu-isolation-provider {isolation_provider(want)}"


def check(vendor: str, allocs: Allocations) -> str | None:
    """What the vendor's adapter would refuse at PreBind, found at Filter instead so another node can be tried."""
    gpus = allocs.get(DEVICE_TYPE_GPU) or []
    if not gpus:
        return None
    if vendor == VENDOR_METAX:
        return _metax_check(gpus)
    if vendor != VENDOR_CAMBRICON:
        return None
    if len(gpus) > 1:
        return "multiple gpu share is not supported on device side"
    if RESOURCE_GPU_CORE not in gpus[0].resources:
        return "gpu core resource is required"
    if gpus[0].resources.get(RESOURCE_GPU_MEMORY, 0) < CAMBRICON_VMEMORY_UNIT:
        return f"gpu memory must not be less than {CAMBRICON_VMEMORY_UNIT} bytes"
    return None


def _metax_check(gpus: list[Allocation]) -> str | None:
    """metaxDevicePluginAdapter's refusals: every GPU needs gpu-core and at least 1 MiB of gpu-memory."""
    for a in gpus:
        if RESOURCE_GPU_CORE not in a.resources:
            return "gpu core resource is required"
        if a.resources.get(RESOURCE_GPU_MEMORY, 0) < METAX_VRAM_UNIT:
            return f"gpu memory must not be less than {METAX_VRAM_UNIT} bytes"
    return None


def metax_devices_allocated(gpus: list[Allocation], ids: Mapping[tuple[str, int], str]) -> str:
    """`metax-tech.com/gpu-devices-allocated`: one container's list of {uuid (the Device CR's id), compute
    (gpu-core), vRam (gpu-memory in MiB)}, as json.Marshal writes it."""
    per = [{"uuid": ids.get((DEVICE_TYPE_GPU, a.minor), ""), "compute": a.resources.get(RESOURCE_GPU_CORE, 0),
            "vRam": a.resources.get(RESOURCE_GPU_MEMORY, 0) // METAX_VRAM_UNIT} for a in gpus]
    return json.dumps([per], separators=(",", ":"))


@dataclass
class Adapted:
    """What PreBind writes besides device-allocated: pod annotations and labels, and node annotations (locks)."""

    annotations: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    node_annotations: dict[str, str] = field(default_factory=dict)


def _minors(allocs: Allocations, prefix: str = "") -> str:
    return ",".join(f"{prefix}{a.minor}" for a in allocs.get(DEVICE_TYPE_GPU) or [])


def adapt(pod: JSON, node_name: str, allocs: Allocations, vendor: str, model: str, now: dt.datetime,
          ids: Mapping[tuple[str, int], str] | None = None) -> Adapted:
    """The general adapter (bind-timestamp), the GPU one (gpu-minors, HAMi's vgpu-node label) and the vendor's;
    `ids` are the node's device ids by (type, minor) (MetaX names its GPUs by uuid)."""
    meta = pod.get("metadata") or {}
    nanos = str(int(now.timestamp() * 1_000_000) * 1000)
    out = Adapted({ANNOTATION_BIND_TIMESTAMP: nanos})
    gpus = allocs.get(DEVICE_TYPE_GPU) or []
    if not gpus:
        return out
    out.annotations[ANNOTATION_GPU_MINORS] = _minors(allocs)
    if isolation_provider((meta.get("labels") or {}).get(LABEL_GPU_ISOLATION_PROVIDER, "")) == HAMI_CORE:
        out.labels[LABEL_HAMI_VGPU_NODE] = node_name
    if vendor == VENDOR_HUAWEI:
        out.annotations[ANN_PREDICATE_TIME] = nanos
        if model == ASCEND_310P_DUO:
            out.annotations[ANN_ASCEND_310P] = _minors(allocs, "Ascend310P-")
        elif gpus[0].template:
            out.annotations[ANN_NPU_CORE] = f"{gpus[0].minor}-{gpus[0].template}"  # vNPU
        else:
            out.annotations[ANN_NPU_CORE] = _minors(allocs)
    elif vendor == VENDOR_CAMBRICON:
        a = gpus[0]
        out.annotations[ANN_DSMLU_ASSIGNED] = "false"
        out.annotations[ANN_DSMLU_PROFILE] = (f"{a.minor}_{a.resources.get(RESOURCE_GPU_CORE, 0)}_"
                                              f"{a.resources.get(RESOURCE_GPU_MEMORY, 0) // CAMBRICON_VMEMORY_UNIT}")
    elif vendor == VENDOR_METAX:
        out.annotations[ANNOTATION_METAX_GPU_DEVICES_ALLOCATED] = metax_devices_allocated(gpus, ids or {})
    lock = LOCK_KEYS.get(vendor)
    if lock:
        out.node_annotations[lock] = lock_value(now, str(meta.get("namespace") or "default"), str(meta.get("name")))
    return out


def lock_value(now: dt.datetime, namespace: str, name: str) -> str:
    return f"{now.astimezone(dt.UTC).strftime('%Y-%m-%dT%H:%M:%SZ')},{namespace},{name}"


def lock_held(value: str | None, now: dt.datetime, pod_exists: Callable[[str], bool]) -> str | None:
    """Why a node lock still holds (lockNode): younger than 5 minutes and its pod (`ns/name`) still exists. An
    unreadable value holds, as upstream refuses to lock over it."""
    if value is None:
        return None
    parts = value.split(",")
    try:
        if len(parts) != 3:
            raise ValueError(value)
        since = dt.datetime.fromisoformat(parts[0].replace("Z", "+00:00"))
    except ValueError:
        return f"node(s) with an invalid device plugin lock {value!r}"
    if since.tzinfo is None:
        since = since.replace(tzinfo=dt.UTC)
    if now - since > LOCK_TIMEOUT or not pod_exists(f"{parts[1]}/{parts[2]}"):
        return None
    return f"node(s) locked for the device plugin by pod {parts[1]}/{parts[2]}"
