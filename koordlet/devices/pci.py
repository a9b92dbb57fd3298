"""PCI facts from sysfs under `--sys-root-dir`: NUMA node, PCIe root complex, SR-IOV VFs, class/vendor ids.

Upstream: pkg/koordlet/util/system/system_file.go GetPCIDeviceDir, pkg/koordlet/util/device.go ParsePCIInfo,
pkg/koordlet/util/system/sriov.go. Unlike upstream, every path honours the sys root (upstream hard-codes
/sys/bus/pci/drivers/nvidia and /sys/class/infiniband).
"""

from __future__ import annotations

import os
import re

from apis.core.errors import HostReadError
from koordlet.host.files import read_text
from koordlet.host.paths import HostPaths

_PCIE_ROOT = re.compile(r"pci\d{4}:[0-9a-fA-F]{2}")
BDF = re.compile(r"^((1?[0-9a-f]{0,4}):)?([0-9a-f]{2}):([0-9a-f]{2})\.([0-9a-f]{1})$")


def device_dir(paths: HostPaths, bdf: str) -> str:
    return paths.sys("bus", "pci", "devices", bdf)


def attr(paths: HostPaths, bdf: str, name: str) -> str:
    """A sysfs attribute of the device, stripped; HostReadError when missing."""
    return read_text(os.path.join(device_dir(paths, bdf), name)).strip()


def numa_node(paths: HostPaths, bdf: str) -> int:
    """`numa_node`, with upstream's mapping of -1 (no NUMA affinity) to 0; unreadable → 0 as well."""
    try:
        node = int(attr(paths, bdf, "numa_node"))
    except (HostReadError, ValueError):
        return 0
    return 0 if node < 0 else node


def pcie_root(paths: HostPaths, bdf: str) -> str:
    """The root complex (`pci0000:3a`) on the device's resolved sysfs path; "" when it cannot be resolved."""
    real = os.path.realpath(device_dir(paths, bdf))
    m = _PCIE_ROOT.search(real)
    return m.group(0) if m else ""


def list_devices(paths: HostPaths) -> list[str]:
    try:
        return sorted(os.listdir(paths.sys("bus", "pci", "devices")))
    except OSError:
        return []


def class_code(paths: HostPaths, bdf: str) -> int | None:
    """The 24-bit class code (`0x020000` = Ethernet controller); None when unreadable."""
    try:
        return int(attr(paths, bdf, "class"), 16)
    except (HostReadError, ValueError):
        return None


def vendor_device(paths: HostPaths, bdf: str) -> tuple[str, str]:
    """(`15b3`, `101b`) without the 0x prefix; empty strings when unreadable."""
    out = []
    for name in ("vendor", "device"):
        try:
            out.append(attr(paths, bdf, name).lower().removeprefix("0x"))
        except HostReadError:
            out.append("")
    return out[0], out[1]


def is_virtual_function(paths: HostPaths, bdf: str) -> bool:
    return os.path.lexists(os.path.join(device_dir(paths, bdf), "physfn"))


def sriov_numvfs(paths: HostPaths, bdf: str) -> int:
    try:
        return int(attr(paths, bdf, "sriov_numvfs"))
    except (HostReadError, ValueError):
        return 0


def virtual_functions(paths: HostPaths, bdf: str) -> list[str]:
    """VF BDFs from the PF's `virtfn<N>` links, in N order (upstream sriov.go)."""
    base = device_dir(paths, bdf)
    try:
        names = [n for n in os.listdir(base) if n.startswith("virtfn") and n[6:].isdigit()]
    except OSError:
        return []
    out = []
    for name in sorted(names, key=lambda n: int(n[6:])):
        link = os.path.join(base, name)
        if os.path.islink(link):
            out.append(os.path.basename(os.readlink(link)))
    return out


def driver_devices(paths: HostPaths, driver: str) -> list[str]:
    """BDFs bound to a driver (`<sys>/bus/pci/drivers/<driver>/<bdf>`), lower-cased and BDF-shaped only."""
    try:
        names = os.listdir(paths.sys("bus", "pci", "drivers", driver))
    except OSError:
        return []
    return sorted(n.lower() for n in names if BDF.match(n.lower()))
