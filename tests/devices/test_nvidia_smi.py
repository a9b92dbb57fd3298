"""The nvidia-smi -q (text and XML) → NVML snapshot converter, on the real outputs of shared/fixtures/vendor-outputs:
each number is the one the output prints, N/A becomes NOT_SUPPORTED, and a broken output is one line naming why."""

from __future__ import annotations

from pathlib import Path

import pytest

from apis.core.errors import InvalidInput
from koordlet.devices.nvidia.smi import parse_mig_list, snapshot_from_smi
from koordlet.devices.nvidia.snapshot import SnapshotBackend

from conftest import require

FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "vendor-outputs"
MIB = 1 << 20


def _read(name: str) -> str:
    require((FIXTURES / name).is_file(), f"{name} not in shared/fixtures/vendor-outputs")
    return (FIXTURES / name).read_text()


def test_a10_text() -> None:
    doc = snapshot_from_smi(_read("nvidia-smi-q.a10.535.129.03.gpud.txt"))
    [d] = doc["devices"]
    assert doc["driverVersion"] == "535.129.03"
    assert (d["pciBusId"], d["index"], d["minor"], d["name"]) == ("0000:07:00.0", 0, 0, "NVIDIA A10")
    assert d["uuid"] == "GPU-73d12ef7-f589-f867-4259-c7090ab44736" and d["migMode"] is None
    assert d["memoryTotal"] == 23028 * MIB
    t = d["telemetry"]
    assert t["memory"] == {"used": 4 * MIB, "free": 22511 * MIB, "reserved": 512 * MIB}
    assert (t["temperature"], t["powerUsage"], t["clocks"]) == (33, 43890, {"sm": 225, "memory": 405})
    assert t["remappedRows"] == {"correctable": 0, "uncorrectable": 4, "pending": True, "failure": False}
    assert t["clocksEventReasons"] == 0x1  # Idle: Active
    assert d["telemetryErrors"] == {"memoryTemperature": "NOT_SUPPORTED", "retiredPages": "NOT_SUPPORTED"}
    SnapshotBackend(doc)  # a valid snapshot


def test_h100_text_eight_gpus_with_hopper_ecc_and_power_brake() -> None:
    doc = snapshot_from_smi(_read("nvidia-smi-q.h100x8.535.161.08.gpud.txt"))
    assert [d["pciBusId"][5:7] for d in doc["devices"]] == ["19", "3b", "4c", "5d", "9b", "bb", "cb", "db"]
    assert [d["index"] for d in doc["devices"]] == [d["minor"] for d in doc["devices"]] == list(range(8))
    t = doc["devices"][0]["telemetry"]
    assert (t["memoryTemperature"], t["pcieReplayCounter"]) == (39, 67)
    assert t["pcieThroughput"] == {"txKBps": 3875, "rxKBps": 574}
    assert t["clocksEventReasons"] == 0x8 | 0x80  # HW Slowdown and HW Power Brake Slowdown active
    assert t["eccErrors"] == dict.fromkeys(("volatileCorrectable", "volatileUncorrectable", "aggregateCorrectable",
                                            "aggregateUncorrectable"), 0)


def test_rtx4090_text_minor_numbers_and_processes() -> None:
    doc = snapshot_from_smi(_read("nvidia-smi-q.rtx4090x8.535.154.05.gpud.txt"))
    first = doc["devices"][0]
    assert (first["pciBusId"], first["index"], first["minor"]) == ("0000:01:00.0", 0, 3)
    assert first["processes"] == [{"pid": 58130, "usedGpuMemory": 20322 * MIB}]
    assert {"eccErrors", "memoryTemperature"} <= set(first["telemetryErrors"])  # GeForce: no ECC, N/A


def test_a100_xml_with_mig_instances_named_by_nvidia_smi_l() -> None:
    doc = snapshot_from_smi(_read("nvidia-smi-q-x.a100-sxm4-v12.telegraf.xml"),
                            _read("nvidia-smi-L.a100-sxm4-80gb-x4-mig.telegraf-issue5812.txt"))
    [d] = doc["devices"]
    assert d["migMode"] == {"current": "Enabled", "pending": "Enabled"} and d["minor"] == 1
    migs = d["telemetry"]["migDevices"]
    assert [(m["gpuInstanceId"], m["profile"], m["memoryTotal"]) for m in migs] == [
        (gi, "1g.20gb", 19968 * MIB) for gi in (3, 4, 5, 6)]
    assert migs[0]["uuid"] == "MIG-ce861fb0-a248-58ce-a9a8-f9adbc22a66a"
    assert d["telemetryErrors"]["utilization"] == "NOT_SUPPORTED"  # N/A with MIG enabled
    assert d["telemetry"]["memoryTemperature"] == 44


def test_t4_xml_retired_pages_instead_of_row_remapping() -> None:
    doc = snapshot_from_smi(_read("nvidia-smi-q-x.tesla-t4.telegraf.xml"))
    [d] = doc["devices"]
    assert d["telemetry"]["retiredPages"] == {"singleBitEcc": 0, "doubleBitEcc": 0, "pending": False}
    assert d["telemetryErrors"]["remappedRows"] == "NOT_SUPPORTED"
    assert [p["pid"] for p in d["processes"]] == [675, 5762]


def test_mig_list_and_broken_outputs() -> None:
    text = "GPU 0: A (UUID: GPU-1)\n  MIG 3g.40gb     Device  0: (UUID: MIG-a)\nGPU 1: A (UUID: GPU-2)\n"
    assert parse_mig_list(text) == {"GPU-1": [("3g.40gb", "MIG-a")], "GPU-2": []}
    with pytest.raises(InvalidInput, match="no GPU section"):
        snapshot_from_smi("==============NVSMI LOG==============\nDriver Version : 1\n")
    with pytest.raises(InvalidInput, match="no GPU UUID"):
        snapshot_from_smi("GPU 00000000:01:00.0\n    Product Name : X\n    Minor Number : 0\n")
    with pytest.raises(InvalidInput, match="nvidia-smi XML"):
        snapshot_from_smi("<?xml version='1.0'?><nvidia_smi_log><gpu>")
