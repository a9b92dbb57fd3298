"""Huawei Ascend and Cambricon MLU cards: device nodes and the visible-devices env for the allocated minors.

**Our extension; upstream koordlet has no such hook** (spec §5.7): there, koord-scheduler writes annotations for the
vendor's own device plugin (`huawei.com/npu-core`, `CAMBRICON_DSMLU_PROFILE`), which then hands kubelet the devices.
This hook does at container creation what those plugins' Allocate answers contain for whole cards, so a pod whose
cards koord-scheduler allocated runs without the vendor's device plugin:

- Ascend (ascend-device-plugin, `mountDefaultDevice` + `mountDevice` + `addEnv`): `/dev/davinci_manager`
  (required), `/dev/hisi_hdc` and `/dev/devmm_svm` when present, then `/dev/davinci<minor>` per card;
  `ASCEND_VISIBLE_DEVICES=<minors>` for the Ascend container runtime and CANN inside the container.
- Cambricon (cambricon-k8s-device-plugin, `PrepareResponse`): `/dev/cambricon_ctl` and `/dev/cambricon_gdr` when
  present, then per card `/dev/cambr-msgq:<n>`, `/dev/cambr-rpc:<n>`, `/dev/cmsg_ctrl<n>`, `/dev/commu<n>`,
  `/dev/cambricon_ipcm<n>` when present and `/dev/cambricon_dev<n>` (required);
  `CAMBRICON_VISIBLE_DEVICES=<minors>` (what the plugin sets for the Cambricon container runtime).

The cards are the annotation's `gpu` entries (upstream's DeviceType has no Ascend or Cambricon type: the node's
Device CR label `node.koordinator.sh/gpu-vendor` says which vendor its GPUs are); minors in annotation order,
repeated minors once. Each node keeps the host's mode and owner, as a device plugin's DeviceSpec does.

Shared cards are left to the vendor's device plugin, which does the partitioning (vNPU templates, Cambricon
dynamic sMLU): an allocation with a `gpuSharedResourceTemplate`, or below 100 `koordinator.sh/gpu-core` or
`koordinator.sh/gpu-memory-ratio`, makes this hook add nothing; handing such a pod the whole card would bypass the
partition.
"""

from __future__ import annotations

from apis.extension.device_allocated import DeviceAllocation
from apis.extension.resources import RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY_RATIO
from apis.scheduling.device import DEVICE_TYPE_GPU
from koordlet.nri.hooks.context import FactMissing, HookCall, HookInputError
from koordlet.nri.hooks.model import FACT_DEV, Adjustment, DeviceNode, HookResult
from koordlet.nri.hooks.xpu_nodes import (
    ASCEND_CARD,
    ASCEND_MANAGER,
    ASCEND_OPTIONAL,
    ASCEND_VISIBLE_DEVICES,
    CAMBRICON_CARD,
    CAMBRICON_CARD_OPTIONAL,
    CAMBRICON_NODE_OPTIONAL,
    CAMBRICON_VISIBLE_DEVICES,
    VENDOR_CAMBRICON,
    VENDOR_HUAWEI,
)

HOOK_NAME = "xpu device inject"
_WHOLE = 100


def inject(call: HookCall) -> HookResult:
    vendor = call.facts.gpu_vendor
    if vendor not in (VENDOR_HUAWEI, VENDOR_CAMBRICON):
        return HookResult()
    cards = call.allocations().get(DEVICE_TYPE_GPU, ())
    if not cards:
        return HookResult()
    for i, card in enumerate(cards):
        if card.minor < 0:
            raise HookInputError(call.allocation_field(f"{DEVICE_TYPE_GPU}[{i}].minor"),
                                 f"{card.minor} is not a card minor")
    if any(_shared(c) for c in cards):
        return HookResult()  # the vendor's device plugin partitions the card
    minors = list(dict.fromkeys(c.minor for c in cards))
    index = {c.minor: i for i, c in reversed(list(enumerate(cards)))}  # first entry naming each minor
    nodes = call.facts.dev_nodes
    devices: list[DeviceNode] = []
    if vendor == VENDOR_HUAWEI:
        devices.append(_required(call, ASCEND_MANAGER, call.allocation_field(DEVICE_TYPE_GPU)))
        devices += [nodes[p] for p in ASCEND_OPTIONAL if p in nodes]
        for m in minors:
            devices.append(_required(call, ASCEND_CARD.format(m),
                                     call.allocation_field(f"{DEVICE_TYPE_GPU}[{index[m]}]")))
        env = {ASCEND_VISIBLE_DEVICES: ",".join(map(str, minors))}
    else:
        devices += [nodes[p] for p in CAMBRICON_NODE_OPTIONAL if p in nodes]
        for m in minors:
            devices += [nodes[p.format(m)] for p in CAMBRICON_CARD_OPTIONAL if p.format(m) in nodes]
            devices.append(_required(call, CAMBRICON_CARD.format(m),
                                     call.allocation_field(f"{DEVICE_TYPE_GPU}[{index[m]}]")))
        env = {CAMBRICON_VISIBLE_DEVICES: ",".join(map(str, minors))}
    return HookResult(adjustment=Adjustment(env=env, devices=devices))


def _shared(card: DeviceAllocation) -> bool:
    if card.gpu_shared_resource_template:
        return True
    core, ratio = card.value(RESOURCE_GPU_CORE), card.value(RESOURCE_GPU_MEMORY_RATIO)
    return (core is not None and core < _WHOLE) or (ratio is not None and ratio < _WHOLE)


def _required(call: HookCall, path: str, field: str) -> DeviceNode:
    node = call.facts.dev_nodes.get(path)
    if node is None:
        raise FactMissing(FACT_DEV, field, f"{path} is not a device node on this host (dev root "
                                           f"{call.facts.paths.dev_root})")
    return node
