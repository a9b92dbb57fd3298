"""RDMA port state and counters from sysfs (`<sys>/class/infiniband/<dev>/ports/<n>/`), as node_exporter's
infiniband collector reads them (prometheus/procfs sysfs/class_infiniband.go), with each device's PCI function.

Read when a scrape asks (never on the collection tick); nothing here raises: a file that cannot be read or parsed
leaves its value out (the kernel answers some counters with `N/A (no PMA)` or EINVAL).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from apis.core.errors import HostReadError
from koordlet.devices import pci
from koordlet.devices.pcinames import model_name
from koordlet.host.files import read_text
from koordlet.host.paths import HostPaths

# port_rcv_data / port_xmit_data (and the pre-4.5 counters_ext *_data_64) count 4-byte words: "divided by 4
# unconditionally" (procfs, after Mellanox), so bytes are the value × 4.
WORD_COUNTERS = frozenset({"port_rcv_data", "port_xmit_data", "port_rcv_data_64", "port_xmit_data_64"})
_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_GBIT = 125_000_000  # bytes per second in one Gb/s


@dataclass(frozen=True)
class PortStats:
    """One port: state and physical state (`4: ACTIVE` → 4, "ACTIVE"), rate in bytes/s (`100 Gb/sec (4X EDR)`),
    and its counters by file name (`counters/`, data in bytes) and hardware counters (`hw_counters/`)."""

    port: int
    state_id: int | None = None
    state: str = ""
    phys_state_id: int | None = None
    phys_state: str = ""
    rate_bytes: float | None = None
    link_layer: str = ""
    counters: dict[str, int] = field(default_factory=dict)
    hw_counters: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class IBDevice:
    """An InfiniBand device (`mlx5_0`) and the PCI function it belongs to (`physfn`: its PF when it is a VF)."""

    name: str
    bdf: str = ""
    physfn: str = ""
    model: str = ""
    firmware_version: str = ""
    board_id: str = ""
    hca_type: str = ""
    ports: tuple[PortStats, ...] = ()


def read_infiniband(paths: HostPaths) -> list[IBDevice]:
    """Every device under `<sys>/class/infiniband`, sorted by name; [] without that directory."""
    base = paths.sys("class", "infiniband")
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    return [_device(paths, os.path.join(base, name), name) for name in names]


def _device(paths: HostPaths, path: str, name: str) -> IBDevice:
    bdf = _pci_function(path)
    physfn, model = "", ""
    if bdf:
        model = model_name(*pci.vendor_device(paths, bdf))
        link = os.path.join(pci.device_dir(paths, bdf), "physfn")
        physfn = os.path.basename(os.path.realpath(link)) if os.path.lexists(link) else ""
    ports_dir = os.path.join(path, "ports")
    try:
        port_names = sorted((p for p in os.listdir(ports_dir) if p.isdigit()), key=int)
    except OSError:
        port_names = []
    return IBDevice(name, bdf, physfn, model, _text(os.path.join(path, "fw_ver")),
                    _text(os.path.join(path, "board_id")), _text(os.path.join(path, "hca_type")),
                    tuple(_port(os.path.join(ports_dir, p), int(p)) for p in port_names))


def _pci_function(path: str) -> str:
    """The PCI address of a class/infiniband entry: its `device` link, else the directory it sits in
    (`.../<bdf>/infiniband/<dev>`, which is where the class link points)."""
    device = os.path.join(path, "device")
    candidates = [os.path.realpath(device)] if os.path.lexists(device) else []
    candidates.append(os.path.dirname(os.path.dirname(os.path.realpath(path))))
    for c in candidates:
        if _BDF.match(os.path.basename(c)):
            return os.path.basename(c)
    return ""


def _port(path: str, number: int) -> PortStats:
    state_id, state = _state(_text(os.path.join(path, "state")))
    phys_id, phys = _state(_text(os.path.join(path, "phys_state")))
    counters = _counters(os.path.join(path, "counters"))
    counters.update(_counters(os.path.join(path, "counters_ext")))
    for name in WORD_COUNTERS & counters.keys():
        counters[name] *= 4
    return PortStats(number, state_id, state, phys_id, phys, _rate(_text(os.path.join(path, "rate"))),
                     _text(os.path.join(path, "link_layer")), counters, _counters(os.path.join(path, "hw_counters")))


def _text(path: str) -> str:
    try:
        return read_text(path).strip()
    except HostReadError:
        return ""


def _state(text: str) -> tuple[int | None, str]:
    """`4: ACTIVE` → (4, "ACTIVE")."""
    num, sep, name = text.partition(":")
    if not sep or not num.strip().isdigit():
        return None, text
    return int(num), name.strip()


def _rate(text: str) -> float | None:
    """`100 Gb/sec (4X EDR)` → bytes/s (the number is Gb/s, possibly fractional: `2.5 Gb/sec (1X SDR)`)."""
    try:
        return float(text.split(None, 1)[0]) * _GBIT
    except (IndexError, ValueError):
        return None


def _counters(directory: str) -> dict[str, int]:
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return {}
    out: dict[str, int] = {}
    for name in names:
        text = _text(os.path.join(directory, name))
        if text.isdigit():  # "N/A (no PMA)", an unreadable or empty file: left out
            out[name] = int(text)
    return out
