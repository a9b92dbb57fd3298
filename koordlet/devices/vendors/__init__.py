"""What the device daemon's vendor probes share: the command runner contract and PCI placement of a bus id."""

# Upstream: pkg/device-daemon/resource/{utils.go,const.go} (every vendor CLI runs as `chroot /hostfs <tool> ...` and
# its combined stdout+stderr is parsed; topology comes from helper.ParsePCIInfo).

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

from apis.core.errors import KoordletError
from koordlet.devices import pci
from koordlet.host.paths import HostPaths

# argv -> combined stdout+stderr; raises CommandError when the tool is missing, fails or times out.
Runner = Callable[[list[str]], str]


class CommandError(KoordletError):
    """A vendor command failed; `output` keeps what it printed (some probes read error text, e.g. 310P3)."""

    def __init__(self, argv: list[str], reason: str, output: str = "") -> None:
        super().__init__(f"{' '.join(argv)}: {reason}")
        self.argv = argv
        self.output = output


class VendorError(KoordletError):
    """A vendor probe cannot produce device infos this round (its required facts are missing)."""


def table_rows(text: str, stop: tuple[str, ...]) -> Iterator[tuple[list[str], list[str]]]:
    """The rows of a box-drawn CLI table (`| a  b | c | ...`) until a line containing any `stop` marker: each as
    (cells, the first cell split on whitespace). Border lines and rows with fewer than two cells are skipped."""
    for raw in text.splitlines():
        line = raw.strip()
        if any(marker in line for marker in stop):
            return
        if not (line.startswith("|") and line.endswith("|")):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) >= 2:
            yield cells, cells[0].split()


def fields_after_colon(line: str) -> str:
    """The value of a `Key : value` line (npu-smi / cnmon detail output), stripped; "" without a colon."""
    _, sep, value = line.partition(":")
    return value.strip() if sep else ""


def pci_placement(paths: HostPaths, bus_id: str) -> tuple[str, str, str]:
    """(busID, nodeID, pcieID) of a tool-reported PCI address, as strings for XPUDeviceInfo.topology.

    Upstream (helper.ParsePCIInfo) reads `numa_node` (-1 -> 0) and the root complex of the sysfs device; on any
    failure it returns nodeID 0 and *empty* busID and pcieID. **[quirk]** We lower-case the address first (npu-smi
    prints `0000:C1:00.0`, sysfs names are lower-case, so upstream loses every 910B address with a hex letter) and
    on failure keep the tool's busID with nodeID and pcieID empty (koordlet maps an empty nodeID to -1, "unknown",
    instead of claiming NUMA node 0).
    """
    bdf = bus_id.strip().lower()
    if not bdf:
        return "", "", ""
    if not os.path.isdir(pci.device_dir(paths, bdf)):
        return bdf, "", ""
    return bdf, str(pci.numa_node(paths, bdf)), pci.pcie_root(paths, bdf)
