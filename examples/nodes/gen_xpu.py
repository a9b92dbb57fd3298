"""Example xPU nodes (8x Ascend 910B1, 2x Cambricon MLU370-X8) whose device-info file the device daemon writes."""

# The daemon (koordlet.devices.device_daemon) is run against each node's tree with a replay runner: recorded vendor
# outputs from shared/fixtures/vendor-outputs where a public recording exists, small synthesized outputs (in the
# recorded layouts) where none does. Each node's README.md says which is which.

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from koordlet.devices.device_daemon import ReplayRunner, collect, write_device_infos
from koordlet.devices.vendors import CommandError
from koordlet.host.paths import HostPaths

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "tests"))
FIXTURES = HERE.parents[2] / "shared" / "fixtures" / "vendor-outputs"
DEVICE_INFO = "var/run/koordlet/xpu-device-infos/ic-device"

# 8x 910B1 host of the arthurchiao.art post. NPU 0, 1, 7 bus ids are in its `npu-smi info`; 2-6 are elided there
# and inferred (README.md): the 8x 910B3 table, the Atlas 800 bus set and `-t topo` CPU affinity (NUMA node =
# first affine CPU / 24). (npu, bus, numa node)
ASCEND_NPUS = [(0, "c1", 6), (1, "01", 0), (2, "c2", 6), (3, "02", 0), (4, "81", 4), (5, "41", 2), (6, "82", 4),
               (7, "42", 2)]
# 2x MLU370-X8 of the PaddlePaddle doc `cnmon` (v5.10.13): (card, bus); NUMA node 0 assumed for both.
MLU_CARDS = [(0, "39"), (1, "3d")]


def _fixture(name: str) -> str:
    path = FIXTURES / name
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the recorded vendor outputs (shared/ beside the checkout) are needed")
    return path.read_text()


def _kv(pairs: list[tuple[str, str]]) -> str:
    """npu-smi detail layout: a tab, the key padded to 31 columns, `: value` (as the recorded -t board output)."""
    return "".join(f"\t{k:<31}: {v}\n" for k, v in pairs)


def ascend_outputs() -> dict[tuple[str, ...], str | CommandError]:
    """npu-smi answers for the 8x 910B1 node: recorded where public, synthesized in the recorded layout elsewhere."""
    smi = "npu-smi"
    out: dict[tuple[str, ...], str | CommandError] = {
        (smi, "info"): _fixture("npu-smi-info.910B1x8.trimmed.txt"),
        (smi, "info", "-t", "topo"): _fixture("npu-smi-info-t-topo.910B1x8.txt"),
        (smi, "info", "-t", "usages", "-i", "0"): _fixture("npu-smi-info-t-usages-i0.910B1.txt"),
        # recorded for NPU 1 of the same host; only `Aicore Count` is read and all eight NPUs are 910B1
        (smi, "info", "-t", "common", "-i", "0"): _fixture("npu-smi-info-t-common-i1.910B1.txt"),
        # synthesized: no public 910B `-m` / `-l` / `-t board` recording (see README)
        (smi, "info", "-m"): "\tNPU ID                         Chip ID                        Chip Logic ID"
                             "                  Chip Name\n"
                             + "".join(f"\t{n:<31}0{'':<30}{n:<31}Ascend 910B1\n" for n, _, _ in ASCEND_NPUS),
        (smi, "info", "-l"): _kv([("Total Count", str(len(ASCEND_NPUS)))]) + "\n"
                             + "\n".join(_kv([("NPU ID", str(n)), ("Chip Count", "1")]) for n, _, _ in ASCEND_NPUS),
    }
    for n, bus, _ in ASCEND_NPUS:
        out[(smi, "info", "-t", "board", "-i", str(n))] = _kv([
            ("NPU ID", str(n)), ("PCIe Bus Info", f"0000:{bus.upper()}:00.0"), ("PCI Vendor ID", "0x19E5"),
            ("PCI Device ID", "0xD802"), ("Chip Count", "1")])
    return out


def mlu_outputs() -> dict[tuple[str, ...], str | CommandError]:
    out: dict[tuple[str, ...], str | CommandError] = {("cnmon",): _fixture("cnmon.mlu370-x8x2.v5.10.13.paddle-doc.txt")}
    for card, _ in MLU_CARDS:
        # synthesized: only the lines upstream's parser reads; the UUIDs are placeholders
        out[("cnmon", "info", "-c", str(card))] = (
            f"Card {card}\n"
            f"  UUID                           : 00000000-0000-0000-0000-00000000000{card}\n"
            f"  NUMA node id                   : 0\n"
            f"  Device                         : Good\n")
    return out


def _daemon_writes(root: Path, outputs: dict[tuple[str, ...], str | CommandError]) -> None:
    infos = collect(HostPaths.under(str(root)), ReplayRunner(outputs), dev_root=str(root / "dev"))
    write_device_infos(str(root / DEVICE_INFO), infos)


def ascend_910b(root: Path) -> None:
    from simpci import add_pci_device

    for _, bus, numa in ASCEND_NPUS:
        b = int(bus, 16)
        root_bus, port = b & 0xC0, "00.0" if b & 0x3F == 1 else "04.0"
        add_pci_device(root, f"0000:{bus}:00.0", bridges=[f"0000:{root_bus:02x}:{port}"], vendor="19e5",
                       device="d802", class_code="120000", numa_node=numa)
    dev = root / "dev"
    dev.mkdir()
    for name in [*_fixture("ls-dev-davinci.910B1x8.txt").split(), "/dev/hisi_hdc", "/dev/devmm_svm"]:
        (dev / Path(name).name).touch()  # character devices on the host; empty files here
    _daemon_writes(root, ascend_outputs())
    (root / "README.md").write_text(ASCEND_README)


def mlu370(root: Path) -> None:
    from simpci import add_pci_device

    for _, bus in MLU_CARDS:
        add_pci_device(root, f"0000:{bus}:00.0", bridges=[f"0000:{int(bus, 16) - 1:02x}:00.0"], vendor="cabc",
                       device="0370", class_code="120000", numa_node=0)
    _daemon_writes(root, mlu_outputs())
    (root / "README.md").write_text(MLU_README)


NODES: dict[str, Callable[[Path], None]] = {"ascend-910b": ascend_910b, "mlu370": mlu370}

ASCEND_README = """\
# ascend-910b: 8x Huawei Ascend 910B1 (Atlas 800T A2 class)

Generated by `examples/nodes/gen_xpu.py`; do not edit. `var/run/koordlet/xpu-device-infos/ic-device` is what
`koordlet device-daemon --oneshot` writes for this tree, replaying the vendor outputs below.

Real facts (files in shared/fixtures/vendor-outputs; its README gives the exact sources):

- 8 NPUs named 910B1, health OK; bus ids of NPU 0/1/7 are 0000:C1/01/42:00.0 --
  `npu-smi-info.910B1x8.trimmed.txt`, replayed for `npu-smi info`.
- A full HCCS mesh between all 8 NPUs and each NPU's CPU affinity -- `npu-smi-info-t-topo.910B1x8.txt`,
  replayed for `npu-smi info -t topo`.
- HBM 65536 MB and DDR 0 MB per NPU -- `npu-smi-info-t-usages-i0.910B1.txt`, replayed for `-t usages -i 0`.
- 24 AI cores -- `npu-smi-info-t-common-i1.910B1.txt` (NPU 1 of the same host), replayed for `-t common -i 0`.
- /dev/davinci0..7, davinci_manager, hisi_hdc, devmm_svm -- `ls-dev-davinci.910B1x8.txt`,
  `ll-dev-hisi_hdc-devmm_svm.910B1.txt`.
- PCI vendor 19e5, class 0x1200 (processing accelerator) -- `lspci-grep-acce.910Ax8.txt` (910A, device d801).

Assumed or synthesized (no public recording for this host):

- PCI device id d802 for 910B (d801 is the 910A in the recorded `lspci`/`-t board`).
- Bus ids of NPU 2-6: C2/02 for NPU 2/3 as in the 8x 910B3 `npu-smi info` (same layout for NPU 0/1); 81/41/82
  for NPU 4-6, completing the bus set {01,02,41,42,81,82,C1,C2} of the Atlas 800 9010 doc output, ordered so
  that the NUMA nodes agree with the `-t topo` CPU affinity. NUMA node = first affine CPU / 24 (assuming 24 CPUs
  per NUMA node); one root complex per 0x40 buses (pci0000:00/40/80/c0) with one root port per NPU.
- `npu-smi info -m` (8 rows `Ascend 910B1` -> model `Ascend-910B1`), `npu-smi info -l` (NPU ID 0-7) and
  `npu-smi info -t board -i N` (PCIe Bus Info) are synthesized in the layouts of the recorded 910A outputs.
- Not replayed, so the daemon falls back as it would on a host answering with an error: `-t memory` (memory
  comes from `-t usages`), `-t cpu-num-cfg` (910B1 is not in upstream's fixed AI-CPU table, so
  `huawei.com/npu-cpu` is omitted) and `-t health` (NPUs not listed in the trimmed summary count as healthy).

Result: 8 entries `npu-<card>-<minor>`, 64Gi memory, 24 npu-core, npu-dvpp 100, and p2pLinks of type HCCS to the
7 other NPUs; koordlet turns those into `gpu-partition-policy: Prefer` and one 8-NPU HCCS partition.
"""

MLU_README = """\
# mlu370: 2x Cambricon MLU370-X8

Generated by `examples/nodes/gen_xpu.py`; do not edit. `var/run/koordlet/xpu-device-infos/ic-device` is what
`koordlet device-daemon --oneshot` writes for this tree, replaying the vendor outputs below.

Real facts (files in shared/fixtures/vendor-outputs; its README gives the exact sources):

- 2 cards MLU370-X8 at 0000:39:00.0 and 0000:3D:00.0, 23374 MiB each, CNMON/driver v5.10.13 --
  `cnmon.mlu370-x8x2.v5.10.13.paddle-doc.txt`, replayed for `cnmon`.
- PCI vendor id cabc -- upstream `pkg/device-daemon/resource/const.go` (MLURealVendorID).

Assumed or synthesized (no public recording):

- PCI device id 0370 (MLU370) and class 0x1200; NUMA node 0 for both cards; one root port per card.
- `cnmon info -c N`: no public sample exists; synthesized with only the lines upstream's parser reads
  (`UUID`, `NUMA node id`, `Device : Good`). The UUIDs are placeholders.

Result: 2 entries with model `MLU370-X8`, 23374Mi memory, gpu-core 100, healthy, no p2p links.
"""
