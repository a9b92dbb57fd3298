"""PCI sysfs facts under an injectable sys root: NUMA (-1 → 0), root complex, VFs, drivers."""

from __future__ import annotations

from pathlib import Path

from koordlet.devices import pci
from koordlet.host.paths import HostPaths

from simpci import add_pci_device, add_vfs


def test_topology_vfs_and_driver(tmp_path: Path) -> None:
    add_pci_device(tmp_path, "0000:18:00.0", bridges=["0000:17:01.0"], vendor="10de", device="2324",
                   class_code="030200", numa_node=-1, driver="nvidia")
    add_pci_device(tmp_path, "0000:9a:00.0", bridges=["0000:97:02.0", "0000:98:00.0"], vendor="15b3",
                   device="101b", class_code="020700", numa_node=1, driver="mlx5_core")
    add_vfs(tmp_path, "0000:9a:00.0", ["0000:9a:00.2", "0000:9a:00.3", "0000:9a:01.0"])
    paths = HostPaths.under(str(tmp_path))
    assert pci.numa_node(paths, "0000:18:00.0") == 0  # -1 means "no affinity": upstream reports 0
    assert pci.numa_node(paths, "0000:9a:00.0") == 1
    assert pci.pcie_root(paths, "0000:18:00.0") == "pci0000:17"
    assert pci.pcie_root(paths, "0000:9a:00.0") == "pci0000:97"
    assert pci.driver_devices(paths, "nvidia") == ["0000:18:00.0"]
    assert pci.virtual_functions(paths, "0000:9a:00.0") == ["0000:9a:00.2", "0000:9a:00.3", "0000:9a:01.0"]
    assert pci.sriov_numvfs(paths, "0000:9a:00.0") == 3
    assert pci.is_virtual_function(paths, "0000:9a:00.3") and not pci.is_virtual_function(paths, "0000:9a:00.0")
    assert pci.class_code(paths, "0000:9a:00.0") == 0x020700
    assert pci.vendor_device(paths, "0000:9a:00.0") == ("15b3", "101b")
    assert pci.pcie_root(paths, "0000:ff:00.0") == "" and pci.numa_node(paths, "0000:ff:00.0") == 0
    assert "0000:9a:00.2" in pci.list_devices(paths)
