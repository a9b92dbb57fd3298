"""NVIDIA discovery on the example nodes and on small snapshots: entries, labels, partitions, MIG, skips."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from apis.core.errors import InvalidInput
from koordlet.devices.model import DeviceSet
from koordlet.devices.nvidia import SnapshotBackend, XidHealth, discover, load_snapshot
from koordlet.devices.nvidia.backend import XidEvent
from koordlet.devices.nvidia.discovery import model_label
from koordlet.devices.nvidia.snapshot import SNAPSHOT_FORMAT
from koordlet.health import Health
from koordlet.host.paths import HostPaths

from simpci import add_pci_device

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "nodes"
GIB = 1 << 30

# (minor, bus id, NUMA node, root complex) of the HGX board (lspci-vvv.h100x8-hgx-cx7 fixture).
H800 = [
    (0, "0000:19:00.0", 0, "pci0000:15"), (1, "0000:3b:00.0", 0, "pci0000:37"),
    (2, "0000:4c:00.0", 0, "pci0000:48"), (3, "0000:5d:00.0", 0, "pci0000:59"),
    (4, "0000:9b:00.0", 1, "pci0000:97"), (5, "0000:bb:00.0", 1, "pci0000:b7"),
    (6, "0000:cb:00.0", 1, "pci0000:c7"), (7, "0000:db:00.0", 1, "pci0000:d7"),
]
L20 = [
    (0, "0000:18:00.0", 0, "pci0000:15"), (1, "0000:19:00.0", 0, "pci0000:15"),
    (2, "0000:3a:00.0", 0, "pci0000:37"), (3, "0000:3b:00.0", 0, "pci0000:37"),
    (4, "0000:9a:00.0", 1, "pci0000:97"), (5, "0000:9b:00.0", 1, "pci0000:97"),
    (6, "0000:ba:00.0", 1, "pci0000:b7"), (7, "0000:bb:00.0", 1, "pci0000:b7"),
]
# 8 links × 26562 MB/s, bytes per second in one direction.
RING = "212496M"
def _p(minors: str) -> str:
    # Go field order: minors, gpuLinkType, ringBusBandwidth, allocationScore
    return f'{{"minors":[{minors}],"gpuLinkType":"NVLink","ringBusBandwidth":"{RING}","allocationScore":1}}'


H800_TABLE = (
    '{"1":[' + ",".join(_p(str(m)) for m in range(8)) + '],'
    '"2":[' + ",".join(_p(f"{a},{a + 1}") for a in (0, 2, 4, 6)) + '],'
    '"4":[' + _p("0,1,2,3") + "," + _p("4,5,6,7") + '],'
    '"8":[' + _p("0,1,2,3,4,5,6,7") + ']}'
)


def _uuids(node: str) -> dict[str, str]:
    doc = json.loads((EXAMPLES / node / "nvml-snapshot.json").read_text())
    return {d["pciBusId"]: d["uuid"] for d in doc["devices"]}


def _expected(node: str, table: list[tuple[int, str, int, str]], memory: str) -> list[dict[str, Any]]:
    uuids = _uuids(node)
    return [{
        "id": uuids[bus], "minor": minor, "type": "gpu", "health": True,
        "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": memory,
                      "koordinator.sh/gpu-memory-ratio": "100"},
        "topology": {"socketID": -1, "nodeID": numa, "pcieID": root, "busID": bus},
    } for minor, bus, numa, root in table]


def _device_cr(node: str, ds: DeviceSet) -> dict[str, Any]:
    return {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Device",
            "metadata": {"name": node, "labels": ds.labels, "annotations": ds.annotations},
            "spec": {"devices": ds.devices}}


def _discover_example(node: str, **kw: Any) -> DeviceSet:
    backend = load_snapshot(str(EXAMPLES / node / "nvml-snapshot.json"))
    return discover(backend, HostPaths.under(str(EXAMPLES / node)), Health(), **kw)


def test_h800_nvswitch_node(validate_crd: Any) -> None:
    ds = _discover_example("h800-nvlink")
    assert ds.devices == _expected("h800-nvlink", H800, "81559Mi")
    assert len(set(_uuids("h800-nvlink").values())) == 8
    assert ds.labels == {
        "node.koordinator.sh/gpu-vendor": "nvidia",
        "node.koordinator.sh/gpu-model": "H800",
        "node.koordinator.sh/gpu-driver-version": "535.161.08",
        "node.koordinator.sh/gpu-partition-policy": "Prefer",
    }
    assert ds.annotations == {"scheduling.koordinator.sh/gpu-partitions": H800_TABLE}
    # The scheduler's built-in Hopper table has exactly these groups.
    table = json.loads(ds.annotations["scheduling.koordinator.sh/gpu-partitions"])
    assert {k: [p["minors"] for p in v] for k, v in table.items()} == {
        "1": [[m] for m in range(8)], "2": [[0, 1], [2, 3], [4, 5], [6, 7]],
        "4": [[0, 1, 2, 3], [4, 5, 6, 7]], "8": [list(range(8))]}
    validate_crd("scheduling.koordinator.sh_devices.yaml", _device_cr("h800-nvlink", ds))


def test_h800_honor_policy() -> None:
    ds = _discover_example("h800-nvlink", partition_policy="Honor")
    assert ds.labels["node.koordinator.sh/gpu-partition-policy"] == "Honor"
    with pytest.raises(InvalidInput):
        _discover_example("h800-nvlink", partition_policy="Always")


def test_l20_pcie_node(validate_crd: Any) -> None:
    ds = _discover_example("l20-pcie")
    assert ds.devices == _expected("l20-pcie", L20, "46068Mi")
    # No NVLink: no partition table and no policy label.
    assert ds.labels == {"node.koordinator.sh/gpu-vendor": "nvidia", "node.koordinator.sh/gpu-model": "L20",
                         "node.koordinator.sh/gpu-driver-version": "535.161.08"}
    assert ds.annotations == {}
    validate_crd("scheduling.koordinator.sh_devices.yaml", _device_cr("l20-pcie", ds))


def test_l20_nics_share_pcie_roots_with_gpus() -> None:
    from koordlet.devices import pci

    paths = HostPaths.under(str(EXAMPLES / "l20-pcie"))
    nics = [b for b in pci.driver_devices(paths, "mlx5_core") if not pci.is_virtual_function(paths, b)]
    assert [pci.pcie_root(paths, b) for b in nics] == ["pci0000:15", "pci0000:37", "pci0000:97", "pci0000:b7"]
    assert [pci.numa_node(paths, b) for b in nics] == [0, 0, 1, 1]
    assert pci.virtual_functions(paths, "0000:1a:00.0")[-1] == "0000:1a:01.1"
    assert (EXAMPLES / "l20-pcie/sys/class/infiniband/mlx5_35").is_symlink()


def _gpu_doc(bus: str, minor: int, name: str = "NVIDIA A100-SXM4-80GB", **extra: Any) -> dict[str, Any]:
    doc = {"pciBusId": bus, "index": minor, "minor": minor, "name": name, "uuid": f"GPU-{minor:08x}-0000",
           "memoryTotal": 80 * GIB, "migMode": None, "nvlinks": [], "nvlinkPeers": []}
    doc.update(extra)
    return doc


def _snapshot(*devices: dict[str, Any], **extra: Any) -> SnapshotBackend:
    return SnapshotBackend({"format": SNAPSHOT_FORMAT, "driverVersion": "535.54.03", "devices": list(devices),
                            **extra})


def _sysfs(root: Path, *buses: str) -> HostPaths:
    for i, bus in enumerate(buses):
        add_pci_device(root, bus, bridges=[f"0000:{0x10 + i:02x}:01.0"], vendor="10de", device="20b2",
                       class_code="030200", numa_node=-1, driver="nvidia")
    return HostPaths.under(str(root))


def test_mig_reported_not_split(tmp_path: Path) -> None:
    # telegraf a100-sxm4-v12.xml: A100-SXM4-80GB, minor 1, bus 00000000:01:00.0, MIG enabled with 4 × 1g.20gb.
    mig = _gpu_doc("00000000:01:00.0", 1, uuid="GPU-513536b6-7d19-9063-b049-1e69664bb298",
                   memoryTotal=81920 * (1 << 20), migMode={"current": "Enabled", "pending": "Enabled"})
    plain = _gpu_doc("0000:02:00.0", 0, migMode={"current": "Disabled", "pending": "Disabled"})
    ds = discover(_snapshot(mig, plain), _sysfs(tmp_path, "0000:01:00.0", "0000:02:00.0"), Health())
    assert [(d["minor"], d["id"], d.get("labels")) for d in ds.devices] == [
        (0, "GPU-00000000-0000", None),
        (1, "GPU-513536b6-7d19-9063-b049-1e69664bb298", {"mig-mode": "Enabled"}),
    ]
    assert ds.devices[1]["resources"]["koordinator.sh/gpu-memory"] == "80Gi"
    assert ds.devices[1]["topology"] == {"socketID": -1, "nodeID": 0, "pcieID": "pci0000:10",
                                         "busID": "0000:01:00.0"}  # NUMA -1 is reported as 0 (upstream)
    assert ds.labels["node.koordinator.sh/gpu-model"] == "A100-SXM4-80GB"


@pytest.mark.parametrize(("names", "model"), [
    (["NVIDIA A100 SXM4 80GB"] * 2, "A100-SXM4-80GB"),
    (["Tesla T4"], "Tesla-T4"),
    (["NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090"], "GeForce-RTX-4090"),
    (["NVIDIA H800", "NVIDIA H100 80GB HBM3"], ""),  # mixed models: no model label at all
    ([], ""),
])
def test_model_label(names: list[str], model: str) -> None:
    assert model_label(names) == model


def test_failing_gpu_skipped_others_kept(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    lost = {"pciBusId": "0000:02:00.0", "errors": {"device": "GPU_IS_LOST"}}
    backend = _snapshot(_gpu_doc("0000:01:00.0", 0), lost)
    paths = _sysfs(tmp_path, "0000:01:00.0", "0000:02:00.0")
    health = Health()
    with caplog.at_level(logging.WARNING):
        rounds = [discover(backend, paths, health) for _ in range(3)]
    assert all([d["minor"] for d in ds.devices] == [0] for ds in rounds)
    lines = [r for r in caplog.records if "0000:02:00.0" in r.getMessage()]
    assert len(lines) == 1 and "GPU_IS_LOST" in lines[0].getMessage()
    assert health.skipped[("gpu", "nvml-device-failed")] == 3


def test_bus_ids_come_from_the_nvidia_driver_dir(tmp_path: Path) -> None:
    # NVML knows two GPUs, but only one is bound to the nvidia driver in sysfs (upstream enumerates sysfs).
    backend = _snapshot(_gpu_doc("0000:01:00.0", 0), _gpu_doc("0000:02:00.0", 1))
    ds = discover(backend, _sysfs(tmp_path, "0000:02:00.0"), Health())
    assert [d["minor"] for d in ds.devices] == [1]


def test_no_driver_dir_falls_back_to_nvml_enumeration(tmp_path: Path) -> None:
    backend = _snapshot(_gpu_doc("0000:02:00.0", 1), _gpu_doc("0000:01:00.0", 0))
    ds = discover(backend, HostPaths.under(str(tmp_path)), Health())
    assert [d["minor"] for d in ds.devices] == [0, 1]
    assert all("topology" not in d for d in ds.devices)  # no sysfs: no root complex, so no topology


def test_nvml_init_failure_in_snapshot_gives_empty_set(tmp_path: Path) -> None:
    backend = _snapshot(errors={"init": "DRIVER_NOT_LOADED"})
    health = Health()
    assert discover(backend, _sysfs(tmp_path, "0000:01:00.0"), health) == DeviceSet()
    assert health.capabilities["nvml"] is False


def test_unhealthy_gpu_entry(tmp_path: Path, validate_crd: Any) -> None:
    backend = _snapshot(_gpu_doc("0000:01:00.0", 0), _gpu_doc("0000:02:00.0", 1))
    paths = _sysfs(tmp_path, "0000:01:00.0", "0000:02:00.0")
    state = XidHealth(quiet_period=300)
    state.event(XidEvent(79, "0000:02:00.0", "GPU-00000001-0000"), ["0000:01:00.0", "0000:02:00.0"], now=1000.0)
    ds = discover(backend, paths, Health(), state=state, now=1010.0)
    healthy, sick = ds.devices
    assert healthy["health"] is True and "conditions" not in healthy
    assert sick["health"] is False
    assert sick["conditions"] == [{"type": "Healthy", "status": "False", "reason": "Xid79",
                                   "message": "Xid error detected on device, error code: 79"}]
    # The reporter stamps lastTransitionTime; with it the entry is a valid CR item.
    sick["conditions"][0]["lastTransitionTime"] = "2026-11-22T00:00:00Z"
    validate_crd("scheduling.koordinator.sh_devices.yaml", _device_cr("n", ds))
    # Quiet for the whole period: healthy again, and the condition is gone.
    later = discover(backend, paths, Health(), state=state, now=1300.0)
    assert later.devices[1]["health"] is True and "conditions" not in later.devices[1]
