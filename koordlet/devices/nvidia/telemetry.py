"""Per-GPU device telemetry read from NVML on the collection tick (what dcgm-exporter's default counters hold), and
the XID events counted by code.

Each *read* is one NVML query (or a few of one kind) with a fixed result shape; its name is the key the NVML
snapshot records it under (docs/nvml-snapshot.md, "telemetry"). A read the driver or GPU does not support
(NOT_SUPPORTED, FUNCTION_NOT_FOUND, NO_PERMISSION) is skipped for that GPU from then on: it is asked once, not once
per tick. Other failures are reported and asked again next pass.

Cost (docs/decisions.md "GPU telemetry"): one pass every TELEMETRY_PERIOD seconds, on the collection tick that
falls due, about 25 NVML calls per GPU through handles kept by the backend; PCIe throughput (a 20 ms NVML sample per
direction) only every PCIE_THROUGHPUT_PERIOD seconds and for one GPU per pass, so a pass waits for at most one such
sample (40 ms) however many GPUs the node has.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from koordlet.devices.nvidia.backend import NvmlBackend, NvmlError, XidEvent
from koordlet.health import Health

log = logging.getLogger(__name__)

TELEMETRY_PERIOD = 5.0  # seconds between telemetry passes (dcgm-exporter collects every 30 s by default)
PCIE_THROUGHPUT_PERIOD = 30.0  # nvmlDeviceGetPcieThroughput samples 20 ms per direction: read it seldom
# NVML answers meaning "this GPU/driver will never answer this": ask once
UNSUPPORTED = frozenset({"NOT_SUPPORTED", "FUNCTION_NOT_FOUND", "NO_PERMISSION"})

# read name → (result shape, minimum seconds between reads). Shapes: "int" (a non-negative integer), a tuple of
# keys (an object of those keys, integers or booleans), or "mig" (a list of MIG instances, MIG_KEYS each).
READS: dict[str, tuple[str | tuple[str, ...], float]] = {
    "utilization": (("gpu", "memory"), 0.0),  # nvmlDeviceGetUtilizationRates, percent
    "encoderUtilization": ("int", 0.0),  # nvmlDeviceGetEncoderUtilization, percent
    "decoderUtilization": ("int", 0.0),  # nvmlDeviceGetDecoderUtilization, percent
    "memory": (("used", "free", "reserved"), 0.0),  # nvmlDeviceGetMemoryInfo (v2), bytes
    "temperature": ("int", 0.0),  # nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU), °C
    "memoryTemperature": ("int", 0.0),  # field NVML_FI_DEV_MEMORY_TEMP, °C
    "powerUsage": ("int", 0.0),  # nvmlDeviceGetPowerUsage, mW
    "totalEnergyConsumption": ("int", 0.0),  # nvmlDeviceGetTotalEnergyConsumption, mJ since the driver loaded
    "clocks": (("sm", "memory"), 0.0),  # nvmlDeviceGetClockInfo(SM, MEM), MHz
    "clocksEventReasons": ("int", 0.0),  # nvmlDeviceGetCurrentClocksEventReasons, bit mask
    "eccErrors": (("volatileCorrectable", "volatileUncorrectable", "aggregateCorrectable",
                   "aggregateUncorrectable"), 0.0),  # nvmlDeviceGetTotalEccErrors
    "retiredPages": (("singleBitEcc", "doubleBitEcc", "pending"), 0.0),  # nvmlDeviceGetRetiredPages(+PendingStatus)
    "remappedRows": (("correctable", "uncorrectable", "pending", "failure"), 0.0),  # nvmlDeviceGetRemappedRows
    "pcieThroughput": (("txKBps", "rxKBps"), PCIE_THROUGHPUT_PERIOD),  # nvmlDeviceGetPcieThroughput, KB/s
    "pcieReplayCounter": ("int", 0.0),  # nvmlDeviceGetPcieReplayCounter
    # fields NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_{TX,RX} summed over the active links, KiB
    "nvlinkThroughput": (("txKiB", "rxKiB"), 0.0),
    # fields NVML_FI_DEV_NVLINK_{REPLAY,RECOVERY,CRC_FLIT,CRC_DATA}_ERROR_COUNT_TOTAL (older GPUs have these alone)
    "nvlinkErrors": (("replay", "recovery", "crcFlit", "crcData"), 0.0),
    "migDevices": ("mig", 0.0),  # nvmlDeviceGetMigDeviceHandleByIndex → instance ids, name, memory
}
MIG_KEYS = ("gpuInstanceId", "computeInstanceId", "profile", "uuid", "memoryUsed", "memoryFree", "memoryTotal")

# nvmlClocksEventReason* bits (nvml.h) and the names the families use
CLOCK_EVENT_REASONS: dict[str, int] = {
    "gpu_idle": 0x1, "applications_clocks_setting": 0x2, "sw_power_cap": 0x4, "hw_slowdown": 0x8,
    "sync_boost": 0x10, "sw_thermal_slowdown": 0x20, "hw_thermal_slowdown": 0x40, "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}

Readings = Mapping[str, Any]  # read name → its value, as READS shapes it


class TelemetryCollector:
    """The last readings per GPU (bus id → read → value), refreshed by `collect` when a pass is due."""

    def __init__(self, backend: NvmlBackend, health: Health, period: float = TELEMETRY_PERIOD,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.backend = backend
        self.health = health
        self.period = period
        self.clock = clock
        self.latest: dict[str, dict[str, Any]] = {}
        self.unsupported: dict[str, set[str]] = {}  # bus id → reads this GPU never answers
        self._read_at: dict[tuple[str, str], float] = {}
        self._pass_at: float | None = None

    def collect(self, bus_ids: Iterable[str]) -> bool:
        """One pass over the GPUs when TELEMETRY_PERIOD has passed since the last; True when it read."""
        now = self.clock()
        if self._pass_at is not None and now - self._pass_at < self.period:
            return False
        self._pass_at = now
        buses = list(bus_ids)
        for bus in buses:
            self.latest[bus] = self._read_gpu(bus, now)
        for read, (_, every) in READS.items():
            if every:
                self._read_slow(buses, read, every, now)
        for gone in set(self.latest) - set(buses):
            del self.latest[gone]
        return True

    def _read_gpu(self, bus: str, now: float) -> dict[str, Any]:
        """Every read due each pass; a slow read's last value is carried over (_read_slow refreshes it)."""
        skip = self.unsupported.setdefault(bus, set())
        old = self.latest.get(bus, {})
        out: dict[str, Any] = {}
        for read, (_, every) in READS.items():
            if read in skip:
                continue
            if every:
                if read in old:
                    out[read] = old[read]
                continue
            if not self._read(bus, read, now, out):
                break
        return out

    def _read_slow(self, buses: list[str], read: str, every: float, now: float) -> None:
        """The one GPU most overdue for a slow read (never read first), if any is due."""
        due = [b for b in buses if read not in self.unsupported.get(b, ())
               and now - self._read_at.get((b, read), float("-inf")) >= every]
        if due:
            bus = min(due, key=lambda b: self._read_at.get((b, read), float("-inf")))
            self._read(bus, read, now, self.latest[bus])

    def _read(self, bus: str, read: str, now: float, out: dict[str, Any]) -> bool:
        """One read into `out`; False when the GPU is lost (the rest of its pass is skipped)."""
        try:
            out[read] = self.backend.telemetry(bus, read)
        except NvmlError as e:
            out.pop(read, None)
            if e.name in UNSUPPORTED:
                self.unsupported.setdefault(bus, set()).add(read)
                log.debug("GPU %s: NVML %s: %s; not asked again", bus, read, e.name)
                self.health.once(f"gpu-telemetry-unsupported:{read}", logging.INFO, "NVML %s: %s on GPU %s "
                                 "(each GPU that refuses it is not asked again)", read, e.name, bus)
                return True
            self.health.skip("gpu", "telemetry-unreadable", f"{bus} {read}", str(e))
            return e.name != "GPU_IS_LOST"
        self._read_at[(bus, read)] = now
        self.health.recovered("gpu", "telemetry-unreadable", f"{bus} {read}")
        return True


@dataclass(frozen=True)
class XidTally:
    """XID events of one GPU: count by code and the code of the latest (0 before any)."""

    counts: Mapping[int, int]
    last: int


class XidCounts:
    """Every XID NVML delivered, by GPU and code (application XIDs included: health ignores them, counts do not).
    Thread-safe: the XID watcher thread records, the exporter reads."""

    def __init__(self) -> None:
        self._counts: dict[str, dict[int, int]] = {}
        self._last: dict[str, int] = {}
        self._lock = threading.Lock()

    def record(self, ev: XidEvent, watched: Iterable[str]) -> None:
        """An event NVML could not attribute to a device counts on every watched GPU, as health marks them all."""
        hit = [ev.bus_id] if ev.uuid and ev.bus_id else list(watched)
        with self._lock:
            for bus in hit:
                per = self._counts.setdefault(bus, {})
                per[ev.xid] = per.get(ev.xid, 0) + 1
                self._last[bus] = ev.xid

    def tally(self, bus_id: str) -> XidTally:
        with self._lock:
            return XidTally(dict(self._counts.get(bus_id, {})), self._last.get(bus_id, 0))
