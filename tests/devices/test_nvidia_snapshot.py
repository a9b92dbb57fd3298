"""NVML backends: snapshot dump → load round trip, malformed files, pynvml translation, the GPU-less real pynvml."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from apis.core.errors import InvalidInput
from koordlet.devices.model import DeviceSet
from koordlet.devices.nvidia import PynvmlBackend, SnapshotBackend, discover, dump_snapshot, load_snapshot
from koordlet.devices.nvidia.backend import (
    ComputeProcess,
    NvLink,
    NvmlError,
    UtilizationSample,
    XidEvent,
    normalize_bus_id,
)
from koordlet.devices.nvidia.snapshot import SNAPSHOT_FORMAT, write_snapshot
from koordlet.health import Health
from koordlet.host.paths import HostPaths

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "nodes"


def _doc() -> dict[str, Any]:
    return {
        "format": SNAPSHOT_FORMAT, "driverVersion": "535.161.08",
        "devices": [
            {"pciBusId": "00000000:3B:00.0", "index": 1, "minor": 1, "name": "NVIDIA H800", "uuid": "GPU-b",
             "memoryTotal": 85520809984, "migMode": {"current": "Enabled", "pending": "Disabled"},
             "nvlinks": [{"link": 0, "active": True, "speedMBps": 26562, "remoteType": "switch",
                          "remoteBusId": "0000:83:00.0"}, {"link": 1, "active": False, "speedMBps": None}],
             "nvlinkPeers": ["0000:19:00.0"], "xidSupported": False,
             "processes": [{"pid": 7, "usedGpuMemory": 1024}, {"pid": 8, "usedGpuMemory": None}],
             "utilization": [{"pid": 7, "smUtil": 30, "timeStamp": 5}]},
            {"pciBusId": "0000:19:00.0", "index": 0, "minor": 0, "name": "NVIDIA H800", "uuid": "GPU-a",
             "memoryTotal": 85520809984, "errors": {"utilization": "NOT_SUPPORTED"}},
            {"pciBusId": "0000:5d:00.0", "errors": {"device": "GPU_IS_LOST"}},
        ],
        "xidEvents": [{"xid": 79, "pciBusId": "0000:19:00.0", "uuid": "GPU-a"}],
    }


def test_snapshot_backend_replays_the_document() -> None:
    b = SnapshotBackend(_doc())
    b.init()
    assert b.bus_ids() == ["0000:19:00.0", "0000:3b:00.0", "0000:5d:00.0"]  # by NVML index, failing last
    info = b.device("0000:3b:00.0")
    assert (info.minor, info.mig_current, info.mig_pending) == (1, True, False)
    assert info.nvlinks == (NvLink(0, True, 26562, "switch", "0000:83:00.0"), NvLink(1, False, None, "unknown", ""))
    assert b.compute_processes("0000:3b:00.0") == [ComputeProcess(7, 1024), ComputeProcess(8, 0)]
    assert b.process_utilization("0000:3b:00.0") == [UtilizationSample(7, 30, 5)]
    with pytest.raises(NvmlError) as e:
        b.process_utilization("0000:19:00.0")
    assert e.value.name == "NOT_SUPPORTED" and e.value.code == 3
    with pytest.raises(NvmlError) as e:
        b.device("0000:5d:00.0")
    assert e.value.name == "GPU_IS_LOST"
    with pytest.raises(NvmlError) as e:
        b.device("0000:77:00.0")
    assert e.value.name == "NOT_FOUND"
    with pytest.raises(NvmlError):
        b.register_xid("0000:3b:00.0")
    b.register_xid("0000:19:00.0")
    assert b.wait_xid(1) == XidEvent(79, "0000:19:00.0", "GPU-a")
    assert b.wait_xid(1) is None


def test_dump_load_round_trip(tmp_path: Path) -> None:
    first = dump_snapshot(SnapshotBackend(_doc()))
    path = tmp_path / "snap.json"
    write_snapshot(first, str(path))
    again = dump_snapshot(load_snapshot(str(path)))
    assert again == first
    assert path.read_text().endswith("}\n")
    # The canonical form: sysfs-style bus ids, every optional field spelled out.
    gpu_b = next(d for d in first["devices"] if d["uuid"] == "GPU-b")
    assert gpu_b["pciBusId"] == "0000:3b:00.0"
    assert gpu_b["processes"] == [{"pid": 7, "usedGpuMemory": 1024}, {"pid": 8, "usedGpuMemory": 0}]
    assert gpu_b["xidSupported"] is False
    assert next(d for d in first["devices"] if d["uuid"] == "GPU-a")["errors"] == {"utilization": "NOT_SUPPORTED"}
    assert first["xidEvents"] == [{"xid": 79, "pciBusId": "0000:19:00.0", "uuid": "GPU-a"}]


@pytest.mark.parametrize("node", ["h800-nvlink", "l20-pcie"])
def test_example_snapshots_are_canonical(node: str) -> None:
    path = EXAMPLES / node / "nvml-snapshot.json"
    doc = json.loads(path.read_text())
    assert doc["format"] == "koordlet.nvml-snapshot/v1"
    assert dump_snapshot(load_snapshot(str(path))) == doc


@pytest.mark.parametrize(("mutate", "needle"), [
    (lambda d: d.update(format="koordlet.nvml-snapshot/v2"), "format"),
    (lambda d: d.pop("driverVersion"), "driverVersion"),
    (lambda d: d.update(devices={}), "devices"),
    (lambda d: d["devices"][0].update(pciBusId="19:00"), "devices[0].pciBusId"),
    (lambda d: d["devices"][1].update(pciBusId="00000000:3b:00.0"), "duplicate"),
    (lambda d: d["devices"][0].pop("uuid"), "devices[0].uuid"),
    (lambda d: d["devices"][0].update(minor=-1), "devices[0].minor"),
    (lambda d: d["devices"][0].update(memoryTotal=True), "devices[0].memoryTotal"),
    (lambda d: d["devices"][0].update(migMode={"current": "On", "pending": "On"}), "migMode"),
    (lambda d: d["devices"][0]["nvlinks"][0].update(remoteType="cable"), "remoteType"),
    (lambda d: d["devices"][0].update(processes=[{"pid": 0}]), "processes[0]"),
    (lambda d: d["devices"][1].update(errors={"device": "BROKEN"}), "unknown NVML error"),
    (lambda d: d["devices"][1].update(errors={"power": "NOT_SUPPORTED"}), "unknown key"),
    (lambda d: d.update(xidEvents=[{"xid": "79"}]), "xidEvents[0]"),
])
def test_malformed_snapshots_are_invalid_input(tmp_path: Path, mutate: Any, needle: str) -> None:
    doc = _doc()
    mutate(doc)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InvalidInput, match=f"{path}.*{needle}".replace("[", r"\[").replace("]", r"\]")):
        load_snapshot(str(path))


def test_unreadable_and_non_json_files(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="No such file"):
        load_snapshot(str(tmp_path / "missing.json"))
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(InvalidInput, match="not JSON"):
        load_snapshot(str(tmp_path / "x.json"))
    (tmp_path / "y.json").write_text("[]")
    with pytest.raises(InvalidInput, match="JSON object"):
        load_snapshot(str(tmp_path / "y.json"))


@pytest.mark.parametrize(("raw", "bus"), [
    ("00000000:3B:00.0", "0000:3b:00.0"), (b"0000:19:00.0\x00", "0000:19:00.0"), ("db:00.1", "0000:db:00.1"),
])
def test_normalize_bus_id(raw: str | bytes, bus: str) -> None:
    assert normalize_bus_id(raw) == bus


def test_real_pynvml_without_gpu(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """This machine has no NVML library: nvmlInit fails, discovery is empty, one log line in all, no raise."""
    pytest.importorskip("pynvml")
    backend, health = PynvmlBackend(), Health()
    paths = HostPaths.under(str(tmp_path))
    with caplog.at_level(logging.DEBUG):
        rounds = [discover(backend, paths, health) for _ in range(4)]
    assert rounds == [DeviceSet()] * 4
    lines = [r for r in caplog.records if "NVML" in r.getMessage() or "nvml" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert "LIBRARY_NOT_FOUND" in lines[0].getMessage()
    assert health.capabilities["nvml"] is False
    assert dump_snapshot(backend) == {"format": SNAPSHOT_FORMAT, "driverVersion": "",
                                      "errors": {"init": "LIBRARY_NOT_FOUND"}, "devices": []}


class FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"fake NVML error {value}")
        self.value = value


def fake_pynvml() -> Any:
    """Just enough of the pynvml API, answering like a 2-GPU NVSwitch box (second GPU without MIG support)."""
    buses = [b"00000000:19:00.0", b"00000000:3B:00.0"]
    handles = [SimpleNamespace(i=i) for i in range(2)]
    events = [SimpleNamespace(eventType=0x8, eventData=79, device=handles[1])]

    def by_bus(bus: bytes) -> Any:
        for i, b in enumerate(buses):
            if normalize_bus_id(b) == normalize_bus_id(bus):
                return handles[i]
        raise FakeNVMLError(6)

    def mig(h: Any) -> list[int]:
        if h.i == 1:
            raise FakeNVMLError(3)
        return [1, 1]

    def link_state(h: Any, link: int) -> int:
        if link >= 3:
            raise FakeNVMLError(2)  # INVALID_ARGUMENT: past the last link
        return 0 if link == 2 else 1

    def wait(events_set: Any, timeout: int) -> Any:
        if events:
            return events.pop(0)
        raise FakeNVMLError(10)

    def utilization(h: Any, ts: int) -> list[Any]:
        if h.i == 1:
            raise FakeNVMLError(0)  # pynvml's way of saying "zero samples"
        return [SimpleNamespace(pid=42, smUtil=55, timeStamp=7)]

    return SimpleNamespace(
        NVMLError=FakeNVMLError,
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlSystemGetDriverVersion=lambda: "535.161.08",
        nvmlDeviceGetCount=lambda: 2, nvmlDeviceGetHandleByIndex=lambda i: handles[i],
        nvmlDeviceGetHandleByPciBusId=by_bus,
        nvmlDeviceGetPciInfo=lambda h: SimpleNamespace(busIdLegacy=buses[h.i][4:]),
        nvmlDeviceGetName=lambda h: "NVIDIA H800", nvmlDeviceGetUUID=lambda h: f"GPU-{h.i}",
        nvmlDeviceGetMinorNumber=lambda h: h.i, nvmlDeviceGetIndex=lambda h: h.i,
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(total=85520809984),
        nvmlDeviceGetMigMode=mig,
        nvmlDeviceGetFieldValues=lambda h, ids: [SimpleNamespace(nvmlReturn=0, value=SimpleNamespace(uiVal=26562))],
        nvmlDeviceGetNvLinkState=link_state,
        nvmlDeviceGetNvLinkRemoteDeviceType=lambda h, link: 2,
        nvmlDeviceGetNvLinkRemotePciInfo=lambda h, link: SimpleNamespace(busIdLegacy=b"0000:83:00.0"),
        nvmlDeviceGetP2PStatus=lambda a, b, idx: 0,
        nvmlDeviceGetComputeRunningProcesses=lambda h: [SimpleNamespace(pid=42, usedGpuMemory=None)],
        nvmlDeviceGetProcessUtilization=utilization,
        nvmlDeviceGetSupportedEventTypes=lambda h: 0x8 | 0x4,
        nvmlEventSetCreate=lambda: object(), nvmlDeviceRegisterEvents=lambda h, t, s: None,
        nvmlEventSetWait=wait, nvmlEventSetFree=lambda s: None,
    )


def test_pynvml_backend_translation() -> None:
    backend = PynvmlBackend(fake_pynvml())
    doc = dump_snapshot(backend)
    for d in doc["devices"]:  # this fake has no telemetry calls (tests/devices/test_gpu_telemetry.py has them)
        assert set(d.pop("telemetryErrors").values()) <= {"FUNCTION_NOT_FOUND", "NOT_SUPPORTED"}
        assert d.pop("telemetry") == {}
    link = {"active": True, "speedMBps": 26562, "remoteType": "switch", "remoteBusId": "0000:83:00.0"}
    links = [{"link": 0, **link}, {"link": 1, **link},
             {"link": 2, "active": False, "speedMBps": None, "remoteType": "unknown", "remoteBusId": ""}]
    assert doc == {
        "format": SNAPSHOT_FORMAT, "driverVersion": "535.161.08",
        "devices": [
            {"pciBusId": "0000:19:00.0", "index": 0, "name": "NVIDIA H800", "uuid": "GPU-0", "minor": 0,
             "memoryTotal": 85520809984, "migMode": {"current": "Enabled", "pending": "Enabled"},
             "nvlinks": links, "nvlinkPeers": ["0000:3b:00.0"], "xidSupported": True,
             "processes": [{"pid": 42, "usedGpuMemory": 0}],
             "utilization": [{"pid": 42, "smUtil": 55, "timeStamp": 7}]},
            {"pciBusId": "0000:3b:00.0", "index": 1, "name": "NVIDIA H800", "uuid": "GPU-1", "minor": 1,
             "memoryTotal": 85520809984, "migMode": None,
             "nvlinks": links, "nvlinkPeers": ["0000:19:00.0"], "xidSupported": True,
             "processes": [{"pid": 42, "usedGpuMemory": 0}], "utilization": []},
        ],
    }
    backend.register_xid("0000:3b:00.0")
    assert backend.wait_xid(10) == XidEvent(79, "0000:3b:00.0", "GPU-1")
    assert backend.wait_xid(10) is None  # TIMEOUT
    with pytest.raises(NvmlError) as e:
        backend.device("0000:aa:00.0")
    assert e.value.name == "NOT_FOUND"
    backend.shutdown()
    with pytest.raises(NvmlError) as e:
        backend.device("0000:19:00.0")
    assert e.value.name == "UNINITIALIZED"


def test_pynvml_init_failure_is_remembered() -> None:
    calls = []

    def init() -> None:
        calls.append(1)
        raise FakeNVMLError(9)

    backend = PynvmlBackend(SimpleNamespace(NVMLError=FakeNVMLError, nvmlInit=init))
    for _ in range(3):
        with pytest.raises(NvmlError) as e:
            backend.init()
        assert e.value.name == "DRIVER_NOT_LOADED"
    assert len(calls) == 1  # upstream never retries nvmlInit either
