"""GPU telemetry: reads the driver does not support are asked once, slow reads keep their own period, the live
reads translate pynvml's answers, XIDs are counted by code, and a GPU's pod labels follow device-allocated."""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from koordlet.devices.gpu_series import gpu_owners, telemetry_families
from koordlet.devices.nvidia.backend import PynvmlBackend
from koordlet.devices.nvidia.health import XidHealth, XidWatcher
from koordlet.devices.nvidia.snapshot import SnapshotBackend
from koordlet.devices.nvidia.telemetry import PCIE_THROUGHPUT_PERIOD, READS, TelemetryCollector, XidCounts
from koordlet.health import Health
from koordlet.states.model import PodMeta

A10 = Path(__file__).resolve().parents[2] / "examples" / "nodes" / "a10-smi" / "nvml-snapshot.json"
BUS = "0000:07:00.0"


def _a10(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = copy.deepcopy(json.loads(A10.read_text()))
    doc["devices"][0].update(changes)
    return doc


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_unsupported_read_is_asked_once_a_failing_one_every_pass() -> None:
    doc = _a10()
    dev = doc["devices"][0]
    assert dev["telemetryErrors"]["memoryTemperature"] == "NOT_SUPPORTED"  # the A10 prints N/A
    dev["telemetryErrors"]["totalEnergyConsumption"] = "UNKNOWN"  # a transient failure
    backend = SnapshotBackend(doc)
    health = Health()
    clock = _Clock()
    tel = TelemetryCollector(backend, health, period=5.0, clock=clock)
    passes = 0
    for _ in range(12):  # ticks 1 s apart: a pass every 5 s
        passes += tel.collect([BUS])
        clock.now += 1.0
    assert passes == 3
    assert backend.reads[(BUS, "memoryTemperature")] == 1
    assert backend.reads[(BUS, "retiredPages")] == 1  # N/A on Ampere (row remapping instead)
    assert backend.reads[(BUS, "totalEnergyConsumption")] == 3
    assert backend.reads[(BUS, "temperature")] == 3
    assert tel.unsupported[BUS] >= {"memoryTemperature", "retiredPages"}
    assert "totalEnergyConsumption" not in tel.unsupported[BUS]
    assert health.skipped[("gpu", "telemetry-unreadable")] == 3
    assert not health.once("gpu-telemetry-unsupported:memoryTemperature", logging.INFO, "")  # logged, once
    assert tel.latest[BUS]["temperature"] == dev["telemetry"]["temperature"]
    assert set(tel.latest[BUS]) == set(dev["telemetry"])


def test_pcie_throughput_keeps_its_own_slower_period() -> None:
    backend = SnapshotBackend(_a10())
    clock = _Clock()
    tel = TelemetryCollector(backend, Health(), period=5.0, clock=clock)
    for _ in range(int(PCIE_THROUGHPUT_PERIOD // 5) + 1):
        assert tel.collect([BUS])
        assert "pcieThroughput" in tel.latest[BUS]  # kept between its own reads
        clock.now += 5.0
    assert backend.reads[(BUS, "pcieThroughput")] == 2
    assert backend.reads[(BUS, "utilization")] == int(PCIE_THROUGHPUT_PERIOD // 5) + 1


def test_one_gpu_per_pass_pays_for_a_pcie_sample() -> None:
    backend = SnapshotBackend(json.loads((A10.parents[1] / "h100-hgx-smi" / "nvml-snapshot.json").read_text()))
    buses = backend.bus_ids()
    clock = _Clock()
    tel = TelemetryCollector(backend, Health(), period=5.0, clock=clock)
    for n in range(1, 9):
        tel.collect(buses)
        assert sum(backend.reads[(b, "pcieThroughput")] for b in buses) == n  # one 20 ms sample pair a pass
        assert sum("pcieThroughput" in tel.latest[b] for b in buses) == n
        clock.now += 5.0
    assert all(backend.reads[(b, "pcieThroughput")] == 1 for b in buses)


def _field(value: int, ret: int = 0) -> Any:
    return SimpleNamespace(nvmlReturn=ret, valueType=1, value=SimpleNamespace(uiVal=value))


class FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


def _fake_pynvml() -> Any:
    h = SimpleNamespace(i=0)
    migs = [SimpleNamespace(gi=3), None, SimpleNamespace(gi=5)]
    fields_asked: list[Any] = []

    def fields(handle: Any, ids: list[Any]) -> list[Any]:
        fields_asked.append(ids)
        if ids == [82]:
            return [_field(0, ret=3)]  # memory temperature: NOT_SUPPORTED in the value itself
        totals = {52: 1, 59: 2, 38: 3, 45: 4, 90: 26562}  # 90: the common NVLink speed discovery asks
        return [_field(totals[i]) if isinstance(i, int) else _field(100 if i[0] == 138 else 10) for i in ids]

    def mig_handle(handle: Any, i: int) -> Any:
        if migs[i] is None:
            raise FakeNVMLError(6)
        return migs[i]

    def memory_info(handle: Any, version: int | None = None) -> Any:
        if handle is h:
            return SimpleNamespace(total=80 << 30, used=1 << 30, free=(79 << 30) - (1 << 29), reserved=1 << 29)
        return SimpleNamespace(total=20 << 30, used=handle.gi << 20, free=(20 << 30) - (handle.gi << 20))

    nvml = SimpleNamespace(
        NVMLError=FakeNVMLError, nvmlMemory_v2=0x2000028, nvmlInit=lambda: None, nvmlShutdown=lambda: None,
        nvmlDeviceGetHandleByPciBusId=lambda bus: h,
        nvmlDeviceGetNvLinkState=lambda handle, link: 1 if link < 2 else (_ for _ in ()).throw(FakeNVMLError(2)),
        nvmlDeviceGetUtilizationRates=lambda handle: SimpleNamespace(gpu=87, memory=41),
        nvmlDeviceGetMemoryInfo=memory_info, nvmlDeviceGetFieldValues=fields,
        nvmlDeviceGetPowerUsage=lambda handle: 312456, nvmlDeviceGetTotalEnergyConsumption=lambda handle: 9_000_000,
        nvmlDeviceGetCurrentClocksEventReasons=lambda handle: 0x8 | 0x80,
        nvmlDeviceGetRemappedRows=lambda handle: (0, 2, 1, 0),
        nvmlDeviceGetMigMode=lambda handle: (1, 1), nvmlDeviceGetMaxMigDeviceCount=lambda handle: 3,
        nvmlDeviceGetMigDeviceHandleByIndex=mig_handle,
        nvmlDeviceGetName=lambda m: b"NVIDIA A100-SXM4-80GB MIG 1g.10gb",
        nvmlDeviceGetUUID=lambda m: f"MIG-{m.gi}", nvmlDeviceGetGpuInstanceId=lambda m: m.gi,
        nvmlDeviceGetComputeInstanceId=lambda m: 0,
    )
    nvml.fields_asked = fields_asked
    return nvml


def test_live_reads_translate_pynvmls_answers() -> None:
    nvml = _fake_pynvml()
    backend = PynvmlBackend(nvml)
    backend.init()
    bus = "0000:19:00.0"
    assert backend.telemetry(bus, "utilization") == {"gpu": 87, "memory": 41}
    assert backend.telemetry(bus, "memory") == {"used": 1 << 30, "free": (79 << 30) - (1 << 29), "reserved": 1 << 29}
    assert backend.telemetry(bus, "powerUsage") == 312456
    assert backend.telemetry(bus, "clocksEventReasons") == 0x88
    nvml.nvmlDeviceGetCurrentClocksEventReasons = lambda handle: (_ for _ in ()).throw(FakeNVMLError(13))
    nvml.nvmlDeviceGetCurrentClocksThrottleReasons = lambda handle: 0x4  # a driver before R535: the old name
    assert backend.telemetry(bus, "clocksEventReasons") == 0x4
    assert backend.telemetry(bus, "remappedRows") == {"correctable": 0, "uncorrectable": 2, "pending": True,
                                                       "failure": False}
    # the two active links' data counters in one field-values call, the four error totals in another
    assert backend.telemetry(bus, "nvlinkThroughput") == {"txKiB": 200, "rxKiB": 20}
    assert nvml.fields_asked[-1] == [(138, 0), (139, 0), (138, 1), (139, 1)]
    assert backend.telemetry(bus, "nvlinkErrors") == {"replay": 1, "recovery": 2, "crcFlit": 3, "crcData": 4}
    assert backend.telemetry(bus, "migDevices") == [
        {"gpuInstanceId": gi, "computeInstanceId": 0, "profile": "1g.10gb", "uuid": f"MIG-{gi}",
         "memoryUsed": gi << 20, "memoryFree": (20 << 30) - (gi << 20), "memoryTotal": 20 << 30} for gi in (3, 5)]
    errors = {}
    for read in READS:
        try:
            backend.telemetry(bus, read)
        except Exception as e:
            errors[read] = getattr(e, "name", type(e).__name__)
    # a field's own NOT_SUPPORTED, and pynvml functions this fake lacks (as an older pynvml would)
    assert errors["memoryTemperature"] == "NOT_SUPPORTED"
    assert errors["eccErrors"] == errors["pcieReplayCounter"] == "FUNCTION_NOT_FOUND"


def _gpu_labels(fams: dict[str, Any], name: str) -> list[tuple[dict[str, str], float]]:
    return [(s.labels, s.value) for s in fams[name].samples]


def test_xids_are_counted_by_code_and_the_last_one_kept() -> None:
    doc = _a10(xidSupported=True)
    uuid = doc["devices"][0]["uuid"]
    doc["xidEvents"] = [{"xid": 79, "pciBusId": BUS, "uuid": uuid}, {"xid": 13, "pciBusId": BUS, "uuid": uuid},
                        {"xid": 79, "pciBusId": BUS, "uuid": uuid}, {"xid": 48, "pciBusId": None, "uuid": ""}]
    backend = SnapshotBackend(doc)
    backend.init()
    counts = XidCounts()
    watcher = XidWatcher(backend, XidHealth(), [BUS], Health(), wait_ms=1, counts=counts)
    watcher.register()
    for _ in range(4):
        assert watcher.step() is not None
    gpu = backend.device(BUS)
    fams = {f.name: f for f in telemetry_families("n1", [gpu], "535.129.03", {}, counts, [])}
    by_code = {s.labels["xid"]: s.value for s in fams["koordlet_gpu_xid_errors"].samples}
    # 13 is an application error (health ignores it), still counted; 48 came without a device: every GPU counts it
    assert by_code == {"13": 1.0, "48": 1.0, "79": 2.0}
    [(labels, last)] = _gpu_labels(fams, "koordlet_gpu_last_xid")
    assert last == 48.0 and labels["UUID"] == uuid and labels["pci_bus_id"] == "00000000:07:00.0"


def _pod(name: str, minors: list[int], phase: str = "Running", annotation: str | None = None) -> PodMeta:
    alloc = annotation if annotation is not None else json.dumps({"gpu": [{"minor": m} for m in minors]})
    raw = {"metadata": {"annotations": {"scheduling.koordinator.sh/device-allocated": alloc}},
           "spec": {"containers": [{"name": f"{name}-main"}, {"name": "sidecar"}]}}
    return PodMeta(uid=name, namespace="ml", name=name, k8s_qos="Burstable", koord_qos="", priority_class="",
                   phase=phase, cgroup_dir="", containers=(), raw=raw)


def test_a_gpu_carries_the_pod_it_is_allocated_to_unless_shared() -> None:
    pods = [_pod("solo", [0, 1]), _pod("share-a", [2]), _pod("share-b", [2]), _pod("done", [3], phase="Succeeded"),
            _pod("bad", [], annotation="{not json")]
    assert gpu_owners(pods) == {0: ("ml", "solo", "solo-main"), 1: ("ml", "solo", "solo-main")}
