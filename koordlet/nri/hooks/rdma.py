"""Runtime hook `rdma device inject` (feature gate RDMADeviceInject): the RDMA device nodes of the allocated NICs.

Upstream: pkg/koordlet/runtimehooks/hooks/rdma/rdma.go, pkg/koordlet/util/system/device_numbers_linux.go (spec §5.6).

With `rdma` entries in the device allocation: `/dev/infiniband/rdma_cm` first, then per entry the uverbs node of
each allocated VF (`extension.vfs[].busID`) or, without VFs, of the PF (`id`, its PCI address): the first entry of
`<sys-root>/bus/pci/devices/<bdf>/infiniband_verbs/`, `/dev/infiniband/<that name>`. Type `c`, mode 0666, major
and minor from the host node's st_rdev (all read ahead by NodeFactsReader). No env, mount or cgroup rule (the
runtime derives the device-cgroup rule from the device itself).

Decisions:
- **[quirk]** upstream *replaces* the adjustment's device list with its own (rdma_cm first). Harmless upstream,
  where no earlier hook adds devices, but it would silently drop another hook's devices; here the devices are
  appended to what earlier hooks added (the stage merges results in hook order).
- A node listed twice (two entries naming one VF) is added once.
- Upstream stops at the first failed stat or readdir and keeps the devices appended so far; here the hook adds
  nothing then (a partial set leaves the pod with some of its NICs and no error it can see). A node or uverbs
  directory missing from the cached facts first asks the caller to refresh them once (a VF created after start).
"""

from __future__ import annotations

import os
import re

from apis.scheduling.device import DEVICE_TYPE_RDMA
from koordlet.nri.hooks.context import FactMissing, HookCall, HookInputError
from koordlet.nri.hooks.model import FACT_DEV, FACT_PCI, Adjustment, DeviceNode, HookResult

HOOK_NAME = "rdma device inject"
GATE = "RDMADeviceInject"
RDMA_CM = "/dev/infiniband/rdma_cm"
IB_DEV_DIR = "/dev/infiniband"
FILE_MODE = 0o666
# A PCI address as sysfs names it: domain:bus:device.function
_BDF = re.compile(r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")


def inject(call: HookCall) -> HookResult:
    nics = call.allocations().get(DEVICE_TYPE_RDMA, ())
    if not nics:
        return HookResult()
    wanted: list[tuple[str, str]] = []  # (PCI address, field naming it)
    for i, nic in enumerate(nics):
        at = f"{DEVICE_TYPE_RDMA}[{i}]"
        if nic.vfs:
            wanted += [(vf.bus_id, f"{at}.extension.vfs[{j}].busID") for j, vf in enumerate(nic.vfs)]
        else:
            wanted.append((nic.id, f"{at}.id"))
    for bdf, fld in wanted:
        if not _BDF.fullmatch(bdf):
            raise HookInputError(call.allocation_field(fld), f"{bdf!r} is not a PCI address")
    devices = [_node(call, RDMA_CM, call.allocation_field(DEVICE_TYPE_RDMA))]
    for bdf, fld in wanted:
        uverbs = call.facts.uverbs.get(bdf)
        if uverbs is None:
            sysfs = os.path.join(call.facts.paths.sys_root, "bus/pci/devices", bdf, "infiniband_verbs")
            # a function that appeared since (a VF) brings a new device node too: both are read again
            raise FactMissing({FACT_PCI, FACT_DEV}, call.allocation_field(fld), f"no uverbs device under {sysfs}")
        devices.append(_node(call, f"{IB_DEV_DIR}/{uverbs}", call.allocation_field(fld)))
    unique = list({d.path: d for d in devices}.values())
    return HookResult(adjustment=Adjustment(devices=unique))


def _node(call: HookCall, path: str, field: str) -> DeviceNode:
    host = call.facts.dev_nodes.get(path)
    if host is None or host.type != "c":
        raise FactMissing(FACT_DEV, field, f"{path} is not a character device on this host (dev root "
                                           f"{call.facts.paths.dev_root})")
    return DeviceNode(path, "c", host.major, host.minor, FILE_MODE)
