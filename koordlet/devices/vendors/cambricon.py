"""Cambricon MLUs for the device daemon: `cnmon` output parsers and the XPUDeviceInfo entries built from them."""

# Upstream: pkg/device-daemon/resource/{mlu.go,utils.go}. Every deviation is marked **[quirk]**.

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from apis.core.objects import JSON
from apis.extension.resources import RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY
from koordlet.devices.vendors import CommandError, Runner, VendorError, pci_placement, table_rows
from koordlet.host.paths import HostPaths

log = logging.getLogger(__name__)

VENDOR = "cambricon"
PCI_VENDOR_ID = "cabc"
CNMON = "cnmon"

_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")
_MEMORY = re.compile(r"(\d+)\s*MiB\s*/\s*(\d+)\s*MiB")
_DEVICE_LINE = re.compile(r"^Device\s*:\s*(.+)$")


def is_mlu(vendor: str, device: str) -> bool:
    """utils.go IsMLUDevice: the Cambricon vendor id, any product."""
    return vendor == PCI_VENDOR_ID


@dataclass(frozen=True)
class CnmonCard:
    """One card of the `cnmon` summary table."""

    card: int
    vf: str  # "/" for the physical function
    name: str
    firmware: str
    bus_id: str | None  # the `Bus-Id` column (v5 layout); the v4 layout shows `Inited / Driver` there instead
    memory_used_mib: int | None
    memory_total_mib: int | None


@dataclass(frozen=True)
class CnmonInfo:
    """The fields upstream reads from `cnmon info -c <card>`."""

    uuid: str
    numa_node: str
    domain: str
    bus: str
    device: str
    function: str
    healthy: bool
    error: str

    @property
    def bus_id(self) -> str:
        """utils.go: `domain:bus:device.function` as printed ("" when cnmon printed none of them)."""
        if not (self.domain or self.bus or self.device or self.function):
            return ""
        return f"{self.domain}:{self.bus}:{self.device}.{self.function}"


def parse_cnmon_table(text: str) -> list[CnmonCard]:
    """`cnmon` (v4 and v5 layouts): per card a line `| 0  /  MLU370-X4  v1.1.6 | <bus or inited/driver> | ...`
    and a line whose second cell is `<used> MiB/ <total> MiB`. Stops at the process table."""
    cards: list[CnmonCard] = []
    pending: tuple[int, str, str, str, str | None] | None = None
    for cells, head in table_rows(text, stop=("Processes:",)):
        if len(head) >= 3 and head[0].isdigit():
            name = head[2]
            firmware = head[3] if len(head) > 3 else ""
            bus = cells[1] if _BUS_ID.match(cells[1]) else None
            pending = (int(head[0]), head[1], name, firmware, bus)
            continue
        m = _MEMORY.search(cells[1])
        if pending is not None and m:
            card, vf, name, firmware, bus = pending
            cards.append(CnmonCard(card, vf, name, firmware, bus, int(m.group(1)), int(m.group(2))))
            pending = None
    return cards


def parse_cnmon_info(text: str) -> CnmonInfo:
    """`cnmon info -c <card>` as utils.go GetDeviceInfo reads it: `UUID : <uuid>` (third field), the last field of
    `NUMA node id`, `Domain ID`, `Bus num`, `Function`, and `Device : <n>` (PCI device number) or
    `Device : Good|<state>` (health). No `Device : Good` line means unhealthy, as upstream."""
    uuid = numa = domain = bus = device = function = error = ""
    healthy = False
    for raw in text.splitlines():
        fields = raw.split()
        if "UUID" in raw:
            if len(fields) < 3:
                raise VendorError(f"cnmon info: no uuid field in {raw.strip()!r}")
            uuid = fields[2]
        if "NUMA node id" in raw:
            numa = fields[-1]
        if "Domain ID" in raw:
            domain = _last_field(raw, "domain id")
        if "Bus num" in raw:
            bus = _last_field(raw, "bus num")
        if "Function" in raw:
            function = _last_field(raw, "function")
        m = _DEVICE_LINE.match(raw.strip())
        if m:
            value = m.group(1).strip()
            if value.isdigit():
                device = value
            elif value == "Good":
                healthy = True
            elif value:
                healthy, error = False, f"Device is unhealthy, status: {value}"
    return CnmonInfo(uuid, numa, domain, bus, device, function, healthy, error)


def _last_field(line: str, what: str) -> str:
    fields = line.split()
    if len(fields) < 3:
        raise VendorError(f"cnmon info: no {what} field in {line.strip()!r}")
    return fields[-1]


def collect(run: Runner, paths: HostPaths) -> list[JSON]:
    """XPUDeviceInfo entries (plain dicts) for every physical MLU card.

    **[quirk]** upstream counts cards and takes the model from `cnmon -l` and one memory size for all cards from
    `cnmon info`'s "Physical Memory Usage"; we read card numbers, model, per-card memory and (v5) bus ids from the
    `cnmon` summary table, whose real output is public and stable across v4/v5. UUID, NUMA node, PCI address parts
    and health come from `cnmon info -c <card>` as upstream; a card whose details fail is skipped (upstream
    `continue`). We also add the PCIe root complex (pcieID) from sysfs, which upstream leaves empty.
    """
    cards = [c for c in parse_cnmon_table(run([CNMON])) if c.vf == "/"]
    if not cards:
        raise VendorError("cnmon lists no MLU card")
    model = cards[0].name  # upstream reports one product name for all cards
    out: list[JSON] = []
    for c in cards:
        try:
            info = parse_cnmon_info(run([CNMON, "info", "-c", str(c.card)]))
        except (CommandError, VendorError) as e:
            log.warning("skipping MLU card %d: %s", c.card, e)
            continue
        if not info.uuid:
            log.warning("skipping MLU card %d: cnmon info shows no UUID", c.card)
            continue
        bus, node, pcie = pci_placement(paths, c.bus_id or info.bus_id)
        resources = {RESOURCE_GPU_CORE: "100"}
        if c.memory_total_mib is not None:
            resources[RESOURCE_GPU_MEMORY] = f"{c.memory_total_mib}Mi"
        status: JSON = {"healthy": info.healthy}
        if info.error:
            status["errMessage"] = info.error
        out.append({"vendor": VENDOR, "model": model, "uuid": info.uuid, "minor": str(c.card),
                    "resources": resources,
                    "topology": {"socketID": "-1", "nodeID": info.numa_node or node, "pcieID": pcie, "busID": bus},
                    "status": status})
    return out
