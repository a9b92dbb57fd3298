"""Example NVIDIA nodes: an 8× H800 NVSwitch HGX board and an 8× L20 PCIe server with ConnectX-6 Dx NICs.

Each node is a simulated sysfs tree (tests/simpci.py) plus `nvml-snapshot.json` (docs/nvml-snapshot.md) and a
README.md listing the real facts used and where they come from. Regenerate with examples/nodes/generate.py.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from koordlet.devices.nvidia.snapshot import SNAPSHOT_FORMAT, SnapshotBackend, dump_snapshot, write_snapshot

from simpci import add_pci_device, add_rdma_nic

MIB = 1 << 20
DRIVER_VERSION = "535.161.08"  # nvidia-smi-q.h100x8.535.161.08.gpud.txt
NVLINK4_SPEED_MBPS = 26562  # "Link N: 26.562 GB/s" in nvidia-smi-nvlink-status.h100.mlengineering.trimmed.txt
H800_NVLINKS = 8  # H800 SXM5: 400 GB/s NVLink = 8 NVLink4 links × 50 GB/s (H100 SXM5: 18 links, 900 GB/s)
H800_MEMORY = 81559 * MIB  # "FB Memory Usage Total : 81559 MiB" of the 80 GB HBM3 Hopper board in the -q fixture
L20_MEMORY = 46068 * MIB  # 48 GB GDDR6 with ECC as NVML sizes AD102 48 GB boards (see l20-pcie/README.md)
GPU_CLASS = "030200"  # 3D controller
NVSWITCH_CLASS = "068000"  # Bridge (lspci "Bridge: NVIDIA Corporation Device 22a3")

# HGX H100 facts from lspci-vvv.h100x8-hgx-cx7.gpud.txt: (GPU BDF, root port, switch upstream, switch downstream,
# NUMA node); minor numbers follow bus order as in nvidia-smi-q.h100x8.535.161.08.gpud.txt.
HGX_GPUS = [
    ("0000:19:00.0", "0000:15:01.0", "0000:16:00.0", "0000:17:01.0", 0),
    ("0000:3b:00.0", "0000:37:01.0", "0000:38:00.0", "0000:39:01.0", 0),
    ("0000:4c:00.0", "0000:48:01.0", "0000:49:00.0", "0000:4a:01.0", 0),
    ("0000:5d:00.0", "0000:59:01.0", "0000:5a:00.0", "0000:5b:01.0", 0),
    ("0000:9b:00.0", "0000:97:01.0", "0000:98:00.0", "0000:99:01.0", 1),
    ("0000:bb:00.0", "0000:b7:01.0", "0000:b8:00.0", "0000:b9:01.0", 1),
    ("0000:cb:00.0", "0000:c7:01.0", "0000:c8:00.0", "0000:c9:01.0", 1),
    ("0000:db:00.0", "0000:d7:01.0", "0000:d8:00.0", "0000:d9:01.0", 1),
]
# NVSwitch bridges (10de:22a3, driver nvidia-nvswitch) below 80:01.0 → 81:00.0 → 82:0N.0, NUMA 1.
HGX_NVSWITCHES = [(f"0000:{0x83 + i:02x}:00.0", f"0000:82:0{i}.0") for i in range(4)]

# L20 server: four PCIe switches, two per NUMA node, on the root ports of the same Sapphire Rapids numbering.
L20_SWITCH_ROOTS = [(0x15, 0), (0x37, 0), (0x97, 1), (0xb7, 1)]


def gpu_uuid(node: str, bdf: str) -> str:
    """Synthetic, stable GPU UUIDs (a real board's UUIDs belong to that board)."""
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"https://koordinator.sh/examples/{node}/{bdf}"))


def _snapshot(devices: list[dict[str, Any]]) -> dict[str, Any]:
    doc = {"format": SNAPSHOT_FORMAT, "driverVersion": DRIVER_VERSION, "devices": devices}
    return dump_snapshot(SnapshotBackend(doc))  # the canonical form a live dump would have


def build_h800(root: Path) -> None:
    node = "h800-nvlink"
    buses = [g[0] for g in HGX_GPUS]
    devices = []
    for minor, (bdf, port, up, down, numa) in enumerate(HGX_GPUS):
        add_pci_device(root, bdf, bridges=[port, up, down], vendor="10de", device="2324", class_code=GPU_CLASS,
                       numa_node=numa, driver="nvidia")
        links = [{"link": i, "active": True, "speedMBps": NVLINK4_SPEED_MBPS, "remoteType": "switch",
                  "remoteBusId": HGX_NVSWITCHES[i // 2][0]} for i in range(H800_NVLINKS)]
        devices.append({
            "index": minor, "pciBusId": bdf, "name": "NVIDIA H800", "uuid": gpu_uuid(node, bdf), "minor": minor,
            "memoryTotal": H800_MEMORY, "migMode": {"current": "Disabled", "pending": "Disabled"},
            "nvlinks": links, "nvlinkPeers": [b for b in buses if b != bdf], "xidSupported": True,
            "processes": [], "utilization": [],
        })
    for bdf, down in HGX_NVSWITCHES:
        add_pci_device(root, bdf, bridges=["0000:80:01.0", "0000:81:00.0", down], vendor="10de", device="22a3",
                       class_code=NVSWITCH_CLASS, numa_node=1, driver="nvidia-nvswitch")
    write_snapshot(_snapshot(devices), str(root / "nvml-snapshot.json"))
    (root / "README.md").write_text(H800_README)


def build_l20(root: Path) -> None:
    node = "l20-pcie"
    devices = []
    minor = 0
    for sw, (rb, numa) in enumerate(L20_SWITCH_ROOTS):
        port, up = f"0000:{rb:02x}:01.0", f"0000:{rb + 1:02x}:00.0"
        down = [f"0000:{rb + 2:02x}:0{i}.0" for i in range(3)]
        for slot in range(2):
            bdf = f"0000:{rb + 3 + slot:02x}:00.0"
            add_pci_device(root, bdf, bridges=[port, up, down[slot]], vendor="10de", device="26ba",
                           class_code=GPU_CLASS, numa_node=numa, driver="nvidia")
            devices.append({
                "index": minor, "pciBusId": bdf, "name": "NVIDIA L20", "uuid": gpu_uuid(node, bdf), "minor": minor,
                "memoryTotal": L20_MEMORY, "migMode": None, "nvlinks": [], "nvlinkPeers": [], "xidSupported": True,
                "processes": [], "utilization": [],
            })
            minor += 1
        nic_bus = rb + 5
        pf = f"0000:{nic_bus:02x}:00.0"
        # ConnectX-6 Dx VFs start at function 2 with stride 1: 00.2..00.7, 01.0, 01.1.
        vf_bdfs = [f"0000:{nic_bus:02x}:{(2 + j) // 8:02x}.{(2 + j) % 8}" for j in range(8)]
        vfs = [(vf, f"mlx5_{4 + sw * 8 + j}", f"ens{sw + 1}f0v{j}") for j, vf in enumerate(vf_bdfs)]
        add_rdma_nic(root, pf, bridges=[port, up, down[2]], ib_dev=f"mlx5_{sw}", netdev=f"ens{sw + 1}f0np0",
                     numa_node=numa, device="101d", vfs=vfs, uverbs=sw * 9)
    write_snapshot(_snapshot(devices), str(root / "nvml-snapshot.json"))
    (root / "README.md").write_text(L20_README)


H800_README = """\
# h800-nvlink: 8× NVIDIA H800 SXM5 on an HGX board with NVSwitch

Replay with `koordlet devices --host-root examples/nodes/h800-nvlink --nvml-snapshot
examples/nodes/h800-nvlink/nvml-snapshot.json`. Regenerate with `examples/nodes/generate.py` (`gen_nvidia.py`).

## Real facts used

| fact | value here | source |
| --- | --- | --- |
| GPU bus ids and PCIe path | 19, 3b, 4c, 5d, 9b, bb, cb, db (`:00.0`), each behind its own Broadcom PEX890xx Gen5 switch: root port `NN:01.0` → switch upstream port → downstream port (e.g. 15:01.0 → 16:00.0 → 17:01.0 → 19:00.0) | `shared/fixtures/vendor-outputs/lspci-vvv.h100x8-hgx-cx7.gpud.txt` (bridge `Bus: primary/secondary` lines) |
| NUMA nodes | GPUs 19–5d on node 0, 9b–db on node 1 | same file, `NUMA node:` lines |
| PCIe root complexes | pci0000:15, :37, :48, :59, :97, :b7, :c7, :d7 | derived from the root ports above |
| minor numbers | bus order, 0..7 | `nvidia-smi-q.h100x8.535.161.08.gpud.txt` (`Minor Number`) |
| NVSwitches | four 10de:22a3 bridges at 83–86:00.0 behind 80:01.0 → 81:00.0 → 82:0N.0, NUMA 1, driver `nvidia-nvswitch` (so they are not in `/sys/bus/pci/drivers/nvidia`) | `lspci-vvv.h100x8-hgx-cx7.gpud.txt` |
| driver version | 535.161.08 | `nvidia-smi-q.h100x8.535.161.08.gpud.txt` |
| framebuffer | 81559 MiB (80 GB HBM3 Hopper board) | same file, `FB Memory Usage Total` |
| NVLink per-link speed | 26562 MB/s (`26.562 GB/s`) | `nvidia-smi-nvlink-status.h100.mlengineering.trimmed.txt` |
| H800 PCI device id | 10de:2324 (H100 SXM5 is 2330 in the lspci fixture) | PCI ID of the H800 SXM5 |
| NVLink count | 8 active links per GPU (`NV8` in `nvidia-smi topo -m`): H800 SXM5 NVLink is 400 GB/s = 8 × 50 GB/s NVLink4, against 18 links / 900 GB/s on H100 SXM5 | NVIDIA H800 product specification |
| NVML name | `NVIDIA H800` → label `node.koordinator.sh/gpu-model=H800` (the model the scheduler's built-in Hopper table keys on) | upstream `allocator_gpu_helper.go` |

## Synthetic parts

- GPU UUIDs: `uuid5` of the node and bus id (a real board's UUIDs identify that board).
- Distribution of each GPU's 8 links over the 4 NVSwitches (2 per switch): NVML reports the switch behind each
  link; the exact spread does not change connectivity (every GPU pair is NVLink P2P capable).
- No GPU processes, no XID events.

## What koordlet reports

8 healthy `gpu` entries with topology, labels vendor/model/driver, and a `gpu-partitions` annotation with 1-, 2-,
4- and 8-GPU partitions of consecutive minors (the shape of upstream's built-in Hopper table) and
`ringBusBandwidth` = 8 links × 26562 MB/s = `212496M` (bytes/s, one direction); policy label `Prefer`.
"""  # noqa: E501 (Markdown table rows)

L20_README = """\
# l20-pcie: 8× NVIDIA L20 on four PCIe switches, with a ConnectX-6 Dx NIC per switch

Replay with `koordlet devices --host-root examples/nodes/l20-pcie --nvml-snapshot
examples/nodes/l20-pcie/nvml-snapshot.json`. Regenerate with `examples/nodes/generate.py` (`gen_nvidia.py`).

## Layout (plausible, documented here)

The bus numbering reuses the Sapphire Rapids root ports of the real HGX host in
`shared/fixtures/vendor-outputs/lspci-vvv.h100x8-hgx-cx7.gpud.txt` (root port `NN:01.0`, switch upstream port on
the next bus, downstream ports on the one after), with two L20s and one NIC per switch:

| switch | root complex | NUMA | GPUs (minor) | ConnectX-6 Dx PF | ib / netdev | VFs |
| --- | --- | --- | --- | --- | --- | --- |
| 1 | pci0000:15 | 0 | 18:00.0 (0), 19:00.0 (1) | 1a:00.0 | mlx5_0 / ens1f0np0 | 1a:00.2–1a:01.1 = mlx5_4–11, ens1f0v0–7 |
| 2 | pci0000:37 | 0 | 3a:00.0 (2), 3b:00.0 (3) | 3c:00.0 | mlx5_1 / ens2f0np0 | 3c:00.2–3c:01.1 = mlx5_12–19 |
| 3 | pci0000:97 | 1 | 9a:00.0 (4), 9b:00.0 (5) | 9c:00.0 | mlx5_2 / ens3f0np0 | 9c:00.2–9c:01.1 = mlx5_20–27 |
| 4 | pci0000:b7 | 1 | ba:00.0 (6), bb:00.0 (7) | bc:00.0 | mlx5_3 / ens4f0np0 | bc:00.2–bc:01.1 = mlx5_28–35 |

So each RDMA NIC shares its PCIe root with two GPUs (joint GPU + RDMA allocation by PCIe).

## Real facts used

| fact | value here | source |
| --- | --- | --- |
| L20 PCI id | 10de:26ba, class 3D controller | PCI ID of the NVIDIA L20 |
| L20 memory | 48 GB GDDR6 with ECC; NVML total 46068 MiB | 48 GB from the L20 specification; 46068 MiB is what NVML reports for 48 GB AD102 boards (L40/L40S) — no L20 `nvidia-smi -q` is in the fixtures, so this value is an assumption |
| no NVLink, no MIG | `nvlinks: []`, `migMode: null` | L20 is a PCIe-only Ada Lovelace board without NVLink or MIG |
| ConnectX-6 Dx | PF 15b3:101d, VFs 15b3:101e starting at function 2 | `lspci-vvv.h100x8-hgx-cx7.gpud.txt` (`MT2892 Family [ConnectX-6 Dx]`), mlx5 SR-IOV layout |
| ConnectX-6 Dx ports | PF `hca_type` MT4125, VF MT4126, `fw_ver` 22.39.1002, `100 Gb/sec (4X EDR)`, Ethernet (RoCE) | `ibstat.h100-server.cx7.some-down-polling.gpud.txt` (MT4125, 22.39.1002, Rate 100, Ethernet), `ibstat.a100-server.all-active.gpud.txt` (MT4126 VFs) |
| driver version | 535.161.08 | `nvidia-smi-q.h100x8.535.161.08.gpud.txt` |

## Synthetic parts

- GPU UUIDs (`uuid5` of node and bus id); `uverbsN` numbering (9 per NIC); no GPU processes, no XID events.
- The ports' `counters/` and `hw_counters/` files are mlx5's names, all 0 (an idle NIC; the fixtures carry no counter
  values); no `board_id` (none of a CX-6 Dx is in the fixtures).

## What koordlet reports

8 healthy `gpu` entries with NUMA/PCIe topology, labels vendor/model (`L20`)/driver, and no partition annotation
or partition-policy label: without NVLink there is nothing to partition.
"""  # noqa: E501 (Markdown table rows)

NODES = {"h800-nvlink": build_h800, "l20-pcie": build_l20}
