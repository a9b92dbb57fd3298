"""Simulated sysfs PCI trees, laid out like the kernel's: real devices under /sys/devices/pciDDDD:BB/...,
relative symlinks from /sys/bus/pci/devices and /sys/bus/pci/drivers/<driver>, SR-IOV virtfn/physfn links."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path


def _link(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    os.symlink(os.path.relpath(target, link.parent), link)


def add_pci_device(root: Path, bdf: str, *, bridges: list[str], vendor: str, device: str, class_code: str,
                   numa_node: int = -1, driver: str | None = None) -> Path:
    """Create a PCI function below its root complex and bridges; returns its real sysfs directory.

    `bridges` lists the upstream bridge BDFs from the root port down (e.g. ["0000:17:01.0", "0000:18:00.0"]);
    the root complex is derived from the first one (`pci0000:17`).
    """
    first = bridges[0] if bridges else bdf
    domain, bus = first.split(":")[0], first.split(":")[1]
    real = root / "sys/devices" / f"pci{domain}:{bus}"
    for b in bridges:
        real = real / b
    real = real / bdf
    real.mkdir(parents=True, exist_ok=True)
    (real / "vendor").write_text(f"0x{vendor}\n")
    (real / "device").write_text(f"0x{device}\n")
    (real / "class").write_text(f"0x{class_code}\n")
    (real / "numa_node").write_text(f"{numa_node}\n")
    _link(root / "sys/bus/pci/devices" / bdf, real)
    if driver:
        drv = root / "sys/bus/pci/drivers" / driver
        drv.mkdir(parents=True, exist_ok=True)
        _link(drv / bdf, real)
        _link(real / "driver", drv)
    return real


def add_vfs(root: Path, pf_bdf: str, vf_bdfs: list[str]) -> list[Path]:
    """SR-IOV: VFs beside the PF (same parent), `virtfnN` on the PF, `physfn` on each VF, `sriov_numvfs`."""
    pf = Path(os.path.realpath(root / "sys/bus/pci/devices" / pf_bdf))
    vendor = (pf / "vendor").read_text().strip().removeprefix("0x")
    class_code = (pf / "class").read_text().strip().removeprefix("0x")
    numa = int((pf / "numa_node").read_text())
    out = []
    for i, vf in enumerate(vf_bdfs):
        vf_dir = pf.parent / vf
        vf_dir.mkdir(parents=True, exist_ok=True)
        (vf_dir / "vendor").write_text(f"0x{vendor}\n")
        (vf_dir / "device").write_text("0x101e\n")
        (vf_dir / "class").write_text(f"0x{class_code}\n")
        (vf_dir / "numa_node").write_text(f"{numa}\n")
        _link(root / "sys/bus/pci/devices" / vf, vf_dir)
        _link(pf / f"virtfn{i}", vf_dir)
        _link(vf_dir / "physfn", pf)
        out.append(vf_dir)
    (pf / "sriov_numvfs").write_text(f"{len(vf_bdfs)}\n")
    (pf / "sriov_totalvfs").write_text(f"{max(len(vf_bdfs), 8)}\n")
    return out


def add_rdma_nic(root: Path, pf_bdf: str, *, bridges: list[str], ib_dev: str, netdev: str, numa_node: int,
                 device: str = "1021", vfs: Sequence[tuple[str, str, str]] = (), port_state: str = "4: ACTIVE",
                 uverbs: int = 0) -> Path:
    """A Mellanox/NVIDIA ConnectX PF (15b3, class 0x020000, mlx5_core) with `infiniband/<ib_dev>/ports/1/state`,
    `infiniband_verbs/uverbs<N>`, `net/<netdev>` and `/sys/class/infiniband/<ib_dev>`; each VF in `vfs` is
    (bdf, ib_dev, netdev) and gets the same entries (VF device id 101e)."""
    pf = add_pci_device(root, pf_bdf, bridges=bridges, vendor="15b3", device=device, class_code="020000",
                        numa_node=numa_node, driver="mlx5_core")
    _ib_entries(root, pf, ib_dev, netdev, port_state, uverbs)
    vf_dirs = add_vfs(root, pf_bdf, [v[0] for v in vfs])
    for i, (vf_dir, (_, vf_ib, vf_net)) in enumerate(zip(vf_dirs, vfs, strict=True)):
        drv = root / "sys/bus/pci/drivers/mlx5_core"
        _link(drv / vf_dir.name, vf_dir)
        _link(vf_dir / "driver", drv)
        _ib_entries(root, vf_dir, vf_ib, vf_net, port_state, uverbs + 1 + i)
    return pf


def _ib_entries(root: Path, dev: Path, ib_dev: str, netdev: str, port_state: str, uverbs: int) -> None:
    port = dev / "infiniband" / ib_dev / "ports" / "1"
    port.mkdir(parents=True, exist_ok=True)
    (port / "state").write_text(f"{port_state}\n")
    (port / "phys_state").write_text("5: LinkUp\n" if "ACTIVE" in port_state else "3: Disabled\n")
    (port / "link_layer").write_text("Ethernet\n")
    (dev / "infiniband_verbs" / f"uverbs{uverbs}").mkdir(parents=True, exist_ok=True)
    (dev / "infiniband_verbs" / f"uverbs{uverbs}" / "ibdev").write_text(f"{ib_dev}\n")
    (dev / "net" / netdev).mkdir(parents=True, exist_ok=True)
    # a netdev dir always has attributes (and git keeps no empty dir, so committed example trees need one)
    (dev / "net" / netdev / "operstate").write_text("up\n" if "ACTIVE" in port_state else "down\n")
    _link(root / "sys/class/infiniband" / ib_dev, dev / "infiniband" / ib_dev)
    _link(root / "sys/class/net" / netdev, dev / "net" / netdev)
