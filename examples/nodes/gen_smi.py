"""Example NVIDIA nodes whose NVML snapshots are converted from real `nvidia-smi -q` outputs
(shared/fixtures/vendor-outputs/, described in its README.md) by koordlet.devices.nvidia.smi: every GPU fact and
telemetry number in them is a line of those files.

Each node is a sysfs tree with the GPUs bound to the nvidia driver (at the bus ids and PCI device ids of the output,
directly below their root complex: the outputs do not show the bridges), `nvml-snapshot.json` and a README.md.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from koordlet.devices.nvidia.smi import snapshot_from_smi
from koordlet.devices.nvidia.snapshot import SnapshotBackend, dump_snapshot, write_snapshot

from simpci import add_pci_device

FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "vendor-outputs"
GPU_CLASS = "030200"  # 3D controller
_DEVICE_ID = re.compile(r"(?:Device Id\s*:\s*0x|<pci_device_id>)([0-9A-Fa-f]{4})[0-9A-Fa-f]{2}DE")
# the A10G output prints its PCI id as 000000DE (blanked in the source): the A10G's PCI device id instead
BLANKED_DEVICE_IDS = {"NVIDIA A10G": "2237"}
NVLINK4_SPEED_MBPS = 26562  # nvidia-smi-nvlink-status.h100.mlengineering.trimmed.txt: "Link N: 26.562 GB/s"
H100_LINKS = 18  # same file (Link 0 … Link 17) and nvidia-smi-topo-m.h100x8-nv18.compact.txt (NV18)

# node → (nvidia-smi -q file, nvidia-smi -L file or "", GPUs' NUMA nodes by index or None, one-line description)
SOURCES: dict[str, tuple[str, str, list[int] | None, str]] = {
    "a10-smi": ("nvidia-smi-q.a10.535.129.03.gpud.txt", "", None,
                "1× NVIDIA A10 in a VM (pass-through), driver 535.129.03; 4 uncorrectable remapped rows pending"),
    "h100-hgx-smi": ("nvidia-smi-q.h100x8.535.161.08.gpud.txt", "", [0, 0, 0, 0, 1, 1, 1, 1],
                     "8× NVIDIA H100 80GB HBM3 (HGX, NVSwitch), driver 535.161.08; HW power-brake slowdown active"),
    "rtx4090x8-smi": ("nvidia-smi-q.rtx4090x8.535.154.05.gpud.txt", "", None,
                      "8× GeForce RTX 4090, driver 535.154.05, minor numbers not in bus order, one process each"),
    "a100-mig-smi": ("nvidia-smi-q-x.a100-sxm4-v12.telegraf.xml",
                     "nvidia-smi-L.a100-sxm4-80gb-x4-mig.telegraf-issue5812.txt", None,
                     "1× A100-SXM4-80GB in MIG mode, four 1g.20gb instances, driver 535.54.03"),
    "a10g-smi": ("nvidia-smi-q-x.a10g.telegraf.xml", "", None, "1× NVIDIA A10G (AWS g5), driver 515.105.01"),
    "t4-smi": ("nvidia-smi-q-x.tesla-t4.telegraf.xml", "", None,
               "1× Tesla T4 (AWS g4dn), driver 515.105.01; retired pages rather than row remapping"),
}


def _hgx_nvlinks(doc: dict[str, Any]) -> None:
    """NVLink facts the -q output does not print: 18 active NVLink4 links per GPU to NVSwitches, every GPU pair
    NVLink P2P capable (NV18 in `topo -m`). The remote NVSwitch bus ids are not in the fixtures: left unknown."""
    buses = [d["pciBusId"] for d in doc["devices"]]
    for d in doc["devices"]:
        d["nvlinks"] = [{"link": i, "active": True, "speedMBps": NVLINK4_SPEED_MBPS, "remoteType": "switch",
                         "remoteBusId": ""} for i in range(H100_LINKS)]
        d["nvlinkPeers"] = [b for b in buses if b != d["pciBusId"]]


def build(node: str, root: Path) -> None:
    smi_file, mig_file, numa, what = SOURCES[node]
    text = (FIXTURES / smi_file).read_text()
    doc = snapshot_from_smi(text, (FIXTURES / mig_file).read_text() if mig_file else "")
    if node == "h100-hgx-smi":
        _hgx_nvlinks(doc)
    device_ids = _DEVICE_ID.findall(text)
    for i, d in enumerate(doc["devices"]):
        device = device_ids[i].lower() if device_ids[i] != "0000" else BLANKED_DEVICE_IDS[d["name"]]
        add_pci_device(root, d["pciBusId"], bridges=[], vendor="10de", device=device,
                       class_code=GPU_CLASS, numa_node=numa[i] if numa else 0, driver="nvidia")
    write_snapshot(dump_snapshot(SnapshotBackend(doc)), str(root / "nvml-snapshot.json"))
    sources = f"`shared/fixtures/vendor-outputs/{smi_file}`" + (f" and `{mig_file}` (MIG profiles, MIG UUIDs)"
                                                                if mig_file else "")
    (root / "README.md").write_text(README.format(node=node, what=what, sources=sources))


README = """\
# {node}: {what}

Replay with `koordlet devices --host-root examples/nodes/{node} --nvml-snapshot
examples/nodes/{node}/nvml-snapshot.json` (or `koordlet run` with the same flags for the GPU telemetry series).
Regenerate with `examples/nodes/generate.py` (`gen_smi.py`).

## Real facts used

Everything in `nvml-snapshot.json` is converted from {sources} by `koordlet.devices.nvidia.smi` (docs/nvml-snapshot.md,
"From nvidia-smi"): identity, memory, MIG mode, processes and the telemetry reads (utilization, framebuffer,
temperatures, power, clocks, clock event reasons, ECC, retired pages, remapped rows, PCIe). A value the output
prints as `N/A` is recorded as the NOT_SUPPORTED error NVML gave nvidia-smi.

## Synthetic parts

- sysfs: each GPU directly below its root complex at its real bus id and PCI device id (the output shows no bridges;
  a10g-smi's output blanks the device id, 10de:2237 is the A10G's).
- Reads nvidia-smi -q does not print (total energy, NVLink counters, per-process SM utilisation) are recorded as
  NOT_SUPPORTED (energy, NVLink) or empty (per-process utilisation).
- h100-hgx-smi only: the NVLinks (18 × 26562 MB/s to NVSwitches) come from `nvidia-smi-nvlink-status.h100…` and
  `nvidia-smi-topo-m.h100x8-nv18.compact.txt`, the switches' bus ids are unknown.
"""

NODES = {name: (lambda root, name=name: build(name, root)) for name in SOURCES}
