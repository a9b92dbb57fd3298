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


def add_vfs(root: Path, pf_bdf: str, vf_bdfs: list[str], device: str = "101e") -> list[Path]:
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
        (vf_dir / "device").write_text(f"0x{device}\n")
        (vf_dir / "class").write_text(f"0x{class_code}\n")
        (vf_dir / "numa_node").write_text(f"{numa}\n")
        _link(root / "sys/bus/pci/devices" / vf, vf_dir)
        _link(pf / f"virtfn{i}", vf_dir)
        _link(vf_dir / "physfn", pf)
        out.append(vf_dir)
    (pf / "sriov_numvfs").write_text(f"{len(vf_bdfs)}\n")
    (pf / "sriov_totalvfs").write_text(f"{max(len(vf_bdfs), 8)}\n")
    return out


# What mlx5_core shows for a ConnectX PF / VF (PCI device id → hca_type, firmware, port rate), from real outputs:
# CX-5 (ibstat.connectx5-pf-vf.k8s-node1: MT4119/MT4120, 16.35.4030, Rate 25), CX-6 Dx
# (ibstat.h100-server.cx7.some-down-polling: MT4125, 22.39.1002, Rate 100; VF MT4126 per ibstat.a100-server),
# CX-7 (sysfs/sys-class-infiniband.h100.gpud: MT4129, 28.41.1000, MT_0000000838, `400 Gb/sec (4X NDR)`).
NIC_FACTS: dict[str, tuple[str, str, str, str]] = {  # device id → (hca_type, fw_ver, board_id or "" unseen, rate)
    "1017": ("MT4119", "16.35.4030", "", "25 Gb/sec (1X EDR)"),
    "1018": ("MT4120", "16.35.4030", "", "25 Gb/sec (1X EDR)"),
    "101d": ("MT4125", "22.39.1002", "", "100 Gb/sec (4X EDR)"),
    "101e": ("MT4126", "22.39.1002", "", "100 Gb/sec (4X EDR)"),
    "1021": ("MT4129", "28.41.1000", "MT_0000000838", "400 Gb/sec (4X NDR)"),
}
# The files mlx5_core puts in a port's counters/ (the IB PMA set; port_*_data in 4-byte words) and hw_counters/.
PORT_COUNTERS = ("VL15_dropped", "excessive_buffer_overrun_errors", "link_downed", "link_error_recovery",
                 "local_link_integrity_errors", "multicast_rcv_packets", "multicast_xmit_packets",
                 "port_rcv_constraint_errors", "port_rcv_data", "port_rcv_errors", "port_rcv_packets",
                 "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors", "port_xmit_constraint_errors",
                 "port_xmit_data", "port_xmit_discards", "port_xmit_packets", "port_xmit_wait", "symbol_error",
                 "unicast_rcv_packets", "unicast_xmit_packets")
HW_COUNTERS = ("duplicate_request", "implied_nak_seq_err", "lifespan", "local_ack_timeout_err", "np_cnp_sent",
               "np_ecn_marked_roce_packets", "out_of_buffer", "out_of_sequence", "packet_seq_err", "req_cqe_error",
               "req_cqe_flush_error", "req_remote_access_errors", "req_remote_invalid_request", "resp_cqe_error",
               "resp_cqe_flush_error", "resp_local_length_error", "resp_remote_access_errors", "rnr_nak_retry_err",
               "roce_adp_retrans", "roce_adp_retrans_to", "roce_slow_restart", "roce_slow_restart_cnps",
               "roce_slow_restart_trans", "rp_cnp_handled", "rp_cnp_ignored", "rx_atomic_requests",
               "rx_dct_connect", "rx_icrc_encapsulated", "rx_read_requests", "rx_write_requests")


def add_rdma_nic(root: Path, pf_bdf: str, *, bridges: list[str], ib_dev: str, netdev: str, numa_node: int,
                 device: str = "1021", vfs: Sequence[tuple[str, str, str]] = (), port_state: str = "4: ACTIVE",
                 uverbs: int = 0, vf_device: str = "101e") -> Path:
    """A Mellanox/NVIDIA ConnectX PF (15b3, class 0x020000, mlx5_core) with `infiniband/<ib_dev>/` (fw_ver,
    hca_type, board_id, `ports/1/` state, rate and zeroed counters: see set_port_counters), `infiniband_verbs/
    uverbs<N>`, `net/<netdev>` and `/sys/class/infiniband/<ib_dev>`; each VF in `vfs` is (bdf, ib_dev, netdev) and
    gets the same entries (VF device id `vf_device`)."""
    pf = add_pci_device(root, pf_bdf, bridges=bridges, vendor="15b3", device=device, class_code="020000",
                        numa_node=numa_node, driver="mlx5_core")
    _ib_entries(root, pf, ib_dev, netdev, port_state, uverbs, device)
    vf_dirs = add_vfs(root, pf_bdf, [v[0] for v in vfs], vf_device)
    for i, (vf_dir, (_, vf_ib, vf_net)) in enumerate(zip(vf_dirs, vfs, strict=True)):
        drv = root / "sys/bus/pci/drivers/mlx5_core"
        _link(drv / vf_dir.name, vf_dir)
        _link(vf_dir / "driver", drv)
        _ib_entries(root, vf_dir, vf_ib, vf_net, port_state, uverbs + 1 + i, vf_device)
    return pf


def set_port_counters(root: Path, ib_dev: str, counters: dict[str, int | str] | None = None,
                      hw_counters: dict[str, int | str] | None = None, port: int = 1) -> None:
    """Write counter values as the kernel shows them (port_*_data in 4-byte words; `N/A (no PMA)` where a port has
    no performance management agent)."""
    base = root / "sys/class/infiniband" / ib_dev / "ports" / str(port)
    for sub, values in (("counters", counters or {}), ("hw_counters", hw_counters or {})):
        for name, value in values.items():
            (base / sub / name).write_text(f"{value}\n")


def _ib_entries(root: Path, dev: Path, ib_dev: str, netdev: str, port_state: str, uverbs: int, device: str) -> None:
    ibdir = dev / "infiniband" / ib_dev
    port = ibdir / "ports" / "1"
    port.mkdir(parents=True, exist_ok=True)
    hca_type, fw_ver, board_id, rate = NIC_FACTS.get(device, ("", "", "", "100 Gb/sec (4X EDR)"))
    for name, value in (("hca_type", hca_type), ("fw_ver", fw_ver), ("board_id", board_id)):
        if value:
            (ibdir / name).write_text(f"{value}\n")
    (port / "state").write_text(f"{port_state}\n")
    (port / "phys_state").write_text("5: LinkUp\n" if "ACTIVE" in port_state else "3: Disabled\n")
    (port / "link_layer").write_text("Ethernet\n")
    (port / "rate").write_text(f"{rate}\n")
    for sub, names in (("counters", PORT_COUNTERS), ("hw_counters", HW_COUNTERS)):
        (port / sub).mkdir(exist_ok=True)
        for name in names:
            (port / sub / name).write_text("0\n")
    (dev / "infiniband_verbs" / f"uverbs{uverbs}").mkdir(parents=True, exist_ok=True)
    (dev / "infiniband_verbs" / f"uverbs{uverbs}" / "ibdev").write_text(f"{ib_dev}\n")
    (dev / "net" / netdev).mkdir(parents=True, exist_ok=True)
    # a netdev dir always has attributes (and git keeps no empty dir, so committed example trees need one)
    (dev / "net" / netdev / "operstate").write_text("up\n" if "ACTIVE" in port_state else "down\n")
    _link(root / "sys/class/infiniband" / ib_dev, dev / "infiniband" / ib_dev)
    _link(root / "sys/class/net" / netdev, dev / "net" / netdev)
