"""cnmon parsers against the recorded v4/v5 tables and `cnmon info`, and the Cambricon probe's entries."""

from __future__ import annotations

from pathlib import Path

import pytest

from koordlet.devices.device_daemon import ReplayRunner
from koordlet.devices.vendors import CommandError, VendorError, cambricon
from koordlet.host.paths import HostPaths

from conftest import CRD_DIR, require
from simpci import add_pci_device

FIXTURES = CRD_DIR.parent / "fixtures" / "vendor-outputs"


def fixture(name: str) -> str:
    require((FIXTURES / name).is_file(), f"recorded vendor output {name} not found")
    return (FIXTURES / name).read_text()


# Constructed (no public `cnmon info` sample exists): the lines upstream's parser reads, in its `Key : value` form.
INFO = """Card 0
  Product Name                   : MLU370-X4
  UUID                           : 89033010-2354-0000-0000-000000000000
  PCIe Info
    Domain ID                    : 0
    Bus num                      : 1b
    Device                       : 0
    Function                     : 0
  NUMA node id                   : 1
  Health
    Device                       : Good
"""


@pytest.mark.parametrize(("name", "expected"), [
    ("cnmon.mlu370-x4x2.v5.10.10.paddle-doc.txt",  # starts with a timestamp; row 2 has `N/A  ` as published
     [(0, "MLU370-X4", "0000:1B:00.0", 23308), (1, "MLU370-X4", "0000:36:00.0", 23308)]),
    ("cnmon.mlu370-x8x2.v5.10.13.paddle-doc.txt",
     [(0, "MLU370-X8", "0000:39:00.0", 23374), (1, "MLU370-X8", "0000:3D:00.0", 23374)]),
    ("cnmon.mlu370-x4x3.v4.20.11.paddle-doc.txt",  # v4: `Inited / Driver` instead of Bus-Id, vMemory column
     [(0, "MLU370-X4", None, 23308), (1, "MLU370-X4", None, 23308), (2, "MLU370-X4", None, 23308)]),
])
def test_summary_table_layouts(name: str, expected: list[tuple[object, ...]]) -> None:
    cards = cambricon.parse_cnmon_table(fixture(name))
    assert [(c.card, c.name, c.bus_id, c.memory_total_mib) for c in cards] == expected
    assert all(c.vf == "/" and c.firmware == "v1.1.6" and c.memory_used_mib == 0 for c in cards)


def test_summary_table_ignores_process_table_and_noise() -> None:
    text = fixture("cnmon.mlu370-x8x2.v5.10.13.paddle-doc.txt").replace(
        "|  No running processes found ", "|  0     /   4242    python train.py ")
    assert len(cambricon.parse_cnmon_table(text)) == 2
    assert cambricon.parse_cnmon_table("") == []


def test_cnmon_info_fields() -> None:
    info = cambricon.parse_cnmon_info(INFO)
    assert info == cambricon.CnmonInfo("89033010-2354-0000-0000-000000000000", "1", "0", "1b", "0", "0", True, "")
    assert info.bus_id == "0:1b:0.0"  # upstream formats the parts as printed
    sick = cambricon.parse_cnmon_info(INFO.replace("Device                       : Good", "Device : Bad"))
    assert (sick.healthy, sick.error) == (False, "Device is unhealthy, status: Bad")
    silent = cambricon.parse_cnmon_info(INFO.replace("    Device                       : Good\n", ""))
    assert (silent.healthy, silent.error) == (False, "")  # upstream: no `Device : Good` line means unhealthy
    assert cambricon.parse_cnmon_info("").bus_id == ""
    with pytest.raises(VendorError):
        cambricon.parse_cnmon_info("UUID\n")


def _host(tmp_path: Path, buses: list[str]) -> HostPaths:
    for i, bus in enumerate(buses):
        add_pci_device(tmp_path, f"0000:{bus}:00.0", bridges=[f"0000:{int(bus, 16) - 1:02x}:0{i}.0"], vendor="cabc",
                       device="0370", class_code="120000", numa_node=0)
    return HostPaths.under(str(tmp_path))


def test_probe_v5(tmp_path: Path) -> None:
    paths = _host(tmp_path, ["1b", "36"])
    run = ReplayRunner({
        ("cnmon",): fixture("cnmon.mlu370-x4x2.v5.10.10.paddle-doc.txt"),
        ("cnmon", "info", "-c", "0"): INFO,
        ("cnmon", "info", "-c", "1"): INFO.replace("0000-000000000000", "0000-000000000001").replace(
            "NUMA node id                   : 1", "").replace("Device                       : Good", "Device : Bad"),
    })
    assert cambricon.collect(run, paths) == [
        {"vendor": "cambricon", "model": "MLU370-X4", "uuid": "89033010-2354-0000-0000-000000000000", "minor": "0",
         "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "23308Mi"},
         "topology": {"socketID": "-1", "nodeID": "1", "pcieID": "pci0000:1a", "busID": "0000:1b:00.0"},
         "status": {"healthy": True}},
        {"vendor": "cambricon", "model": "MLU370-X4", "uuid": "89033010-2354-0000-0000-000000000001", "minor": "1",
         "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "23308Mi"},
         # no NUMA line from cnmon: the sysfs node of the table's bus id
         "topology": {"socketID": "-1", "nodeID": "0", "pcieID": "pci0000:35", "busID": "0000:36:00.0"},
         "status": {"healthy": False, "errMessage": "Device is unhealthy, status: Bad"}}]


def test_probe_v4_uses_cnmon_info_bus_and_skips_failing_cards(tmp_path: Path) -> None:
    paths = _host(tmp_path, [])
    run = ReplayRunner({
        ("cnmon",): fixture("cnmon.mlu370-x4x3.v4.20.11.paddle-doc.txt"),
        ("cnmon", "info", "-c", "0"): INFO,
        ("cnmon", "info", "-c", "1"): CommandError(["cnmon"], "exit status 1"),
        ("cnmon", "info", "-c", "2"): "Product Name : MLU370-X4\n",  # no UUID: skipped
    })
    [entry] = cambricon.collect(run, paths)
    assert entry["minor"] == "0" and entry["topology"] == {"socketID": "-1", "nodeID": "1", "pcieID": "",
                                                           "busID": "0:1b:0.0"}


def test_probe_needs_a_card() -> None:
    with pytest.raises(VendorError):
        cambricon.collect(ReplayRunner({("cnmon",): "CNMON v5.10.10\n"}), HostPaths.under("/nonexistent"))
    with pytest.raises(CommandError):
        cambricon.collect(ReplayRunner({}), HostPaths.under("/nonexistent"))
    assert cambricon.is_mlu("cabc", "0370") and not cambricon.is_mlu("19e5", "0370")
