"""What discovery, usage and health read from NVML: the facts (frozen records), the NvmlBackend interface, and the
live reader through pynvml. The replayed reader and its file format are in snapshot.py.

Every call is keyed by the GPU's PCI bus id in sysfs form (`0000:19:00.0`, NVML's `busIdLegacy` lower-cased), the
key upstream uses too (pkg/koordlet/metricsadvisor/devices/gpu/collector_gpu_linux.go).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from apis.core.errors import InvalidInput, KoordletError
from apis.core.objects import JSON
from koordlet.devices.nvidia.nvml_reads import READERS

log = logging.getLogger(__name__)

# nvmlReturn_t codes (nvml.h) this package tells apart; names are what snapshots store.
ERROR_CODES: dict[str, int] = {
    "UNINITIALIZED": 1,
    "INVALID_ARGUMENT": 2,
    "NOT_SUPPORTED": 3,
    "NO_PERMISSION": 4,
    "NOT_FOUND": 6,
    "DRIVER_NOT_LOADED": 9,
    "TIMEOUT": 10,
    "LIBRARY_NOT_FOUND": 12,
    "FUNCTION_NOT_FOUND": 13,
    "GPU_IS_LOST": 15,
    "UNKNOWN": 999,
}
_ERROR_NAMES = {v: k for k, v in ERROR_CODES.items()}
_XID_CRITICAL_ERROR = 0x8  # nvmlEventTypeXidCriticalError
_NVLINK_REMOTE_TYPES = {0: "gpu", 1: "ibmnpu", 2: "switch"}
_SPEED_FIELD_COMMON = 90  # NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON
_P2P_CAPS_INDEX_NVLINK = 2
_MAX_LINKS = 36  # NVML_NVLINK_MAX_LINKS
_BUS_ID = re.compile(r"^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")


class NvmlError(KoordletError):
    """An NVML call failed; `code` is the nvmlReturn_t value, `name` its symbolic name (NOT_SUPPORTED, ...)."""

    def __init__(self, code: int, detail: str = "") -> None:
        self.code = code
        self.name = _ERROR_NAMES.get(code, f"ERROR_{code}")
        super().__init__(detail or self.name)

    @classmethod
    def named(cls, name: str, detail: str = "") -> NvmlError:
        return cls(ERROR_CODES.get(name, ERROR_CODES["UNKNOWN"]), detail or name)


def normalize_bus_id(raw: str | bytes) -> str:
    """`00000000:19:00.0`, `0000:19:00.0` or `19:00.0` → `0000:19:00.0` (sysfs form); InvalidInput otherwise."""
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
    m = _BUS_ID.match(text.strip().rstrip("\x00"))
    if not m:
        raise InvalidInput(f"not a PCI bus id: {text!r}")
    domain = int(m.group(1) or "0", 16)
    if domain > 0xFFFF:
        raise InvalidInput(f"PCI domain out of range: {text!r}")
    return f"{domain:04x}:{m.group(2).lower()}:{m.group(3).lower()}.{m.group(4)}"


@dataclass(frozen=True)
class NvLink:
    """One NVLink of a GPU: `remote_type` is gpu, switch, ibmnpu or unknown; speed in MB/s when known."""

    link: int
    active: bool
    speed_mbps: int | None = None
    remote_type: str = "unknown"
    remote_bus_id: str = ""


@dataclass(frozen=True)
class GpuInfo:
    """The static NVML facts of one GPU."""

    bus_id: str
    index: int
    name: str
    uuid: str
    minor: int
    memory_total: int
    mig_current: bool | None = None  # None: MIG not supported
    mig_pending: bool | None = None
    nvlinks: tuple[NvLink, ...] = ()
    nvlink_peers: tuple[str, ...] = ()  # bus ids this GPU reaches by NVLink P2P (direct or through NVSwitch)


@dataclass(frozen=True)
class ComputeProcess:
    pid: int
    used_memory: int  # bytes; 0 when NVML cannot tell (WDDM / MIG without permission)


@dataclass(frozen=True)
class UtilizationSample:
    pid: int
    sm_util: int  # percent
    timestamp: int = 0  # µs, as NVML reports it


@dataclass(frozen=True)
class XidEvent:
    """A critical XID event; `uuid` empty means NVML could not tell the device (upstream: all GPUs affected)."""

    xid: int
    bus_id: str | None
    uuid: str


class NvmlBackend(Protocol):
    """The NVML calls the GPU code makes; every method raises NvmlError on failure."""

    name: str

    def init(self) -> None: ...

    def shutdown(self) -> None: ...

    def driver_version(self) -> str: ...

    def bus_ids(self) -> list[str]:
        """NVML's own enumeration (by index), for when sysfs has no nvidia driver directory."""
        ...

    def device(self, bus_id: str) -> GpuInfo: ...

    def compute_processes(self, bus_id: str) -> list[ComputeProcess]: ...

    def process_utilization(self, bus_id: str) -> list[UtilizationSample]: ...

    def xid_supported(self, bus_id: str) -> bool: ...

    def register_xid(self, bus_id: str) -> None:
        """Watch the GPU's critical XID events; NvmlError NOT_SUPPORTED on GPUs too old to report them."""
        ...

    def wait_xid(self, timeout_ms: int) -> XidEvent | None:
        """The next event of a registered GPU, or None when `timeout_ms` passed without one."""
        ...

    def wake(self) -> None:
        """End a `wait_xid` in progress early where the backend can (it then answers None)."""
        ...

    def telemetry(self, bus_id: str, read: str) -> Any:
        """One telemetry read (a name of telemetry.READS), shaped as READS says; INVALID_ARGUMENT for an unknown
        name."""
        ...


# -- live NVML through pynvml -------------------------------------------------------------------------------------


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class PynvmlBackend:
    """NVML through the `pynvml` module (nvidia-ml-py), imported on first use so a GPU-less host never loads it."""

    name = "pynvml"

    def __init__(self, module: Any = None) -> None:
        self._nvml = module  # injectable for tests; None → `import pynvml` in init()
        self._init_error: NvmlError | None = None
        self._ready = False
        self._handles: JSON = {}
        self._events: Any = None
        self._lock = threading.Lock()
        self._active_links: dict[str, tuple[int, ...]] = {}  # bus id → active NVLinks, for the nvlink read

    @contextmanager
    def _calls(self) -> Iterator[Any]:
        """Translate pynvml's exceptions into NvmlError."""
        nvml = self._nvml
        try:
            yield nvml
        except NvmlError:
            raise
        except Exception as e:
            if nvml is not None and isinstance(e, nvml.NVMLError):
                raise NvmlError(int(e.value), str(e)) from e
            raise

    def init(self) -> None:
        with self._lock:
            if self._ready:
                return
            # Upstream never retries a failed nvmlInit (collector_gpu_linux.go initGPUDeviceManager); neither do
            # we, so a GPU-less host pays for one failed library load, not one per round.
            if self._init_error is not None:
                raise self._init_error
            if self._nvml is None:
                try:
                    import pynvml
                except ImportError as e:
                    self._init_error = NvmlError.named("LIBRARY_NOT_FOUND", f"pynvml not importable: {e}")
                    raise self._init_error from e
                self._nvml = pynvml
            try:
                with self._calls() as nvml:
                    nvml.nvmlInit()
            except NvmlError as e:
                self._init_error = e
                raise
            except OSError as e:  # a broken libnvidia-ml.so that loads but cannot resolve
                self._init_error = NvmlError.named("LIBRARY_NOT_FOUND", str(e))
                raise self._init_error from e
            self._ready = True

    def shutdown(self) -> None:
        with self._lock:
            if not self._ready:
                return
            self._ready = False
            self._handles.clear()
            with self._calls() as nvml:
                if self._events is not None:
                    nvml.nvmlEventSetFree(self._events)
                    self._events = None
                nvml.nvmlShutdown()

    def _handle(self, bus_id: str) -> Any:
        if not self._ready:
            raise NvmlError.named("UNINITIALIZED")
        h = self._handles.get(bus_id)
        if h is None:
            with self._calls() as nvml:
                h = nvml.nvmlDeviceGetHandleByPciBusId(bus_id.encode())
            self._handles[bus_id] = h
        return h

    def driver_version(self) -> str:
        with self._calls() as nvml:
            return _text(nvml.nvmlSystemGetDriverVersion())

    def bus_ids(self) -> list[str]:
        out = []
        with self._calls() as nvml:
            for i in range(int(nvml.nvmlDeviceGetCount())):
                h = nvml.nvmlDeviceGetHandleByIndex(i)
                bus = normalize_bus_id(_text(nvml.nvmlDeviceGetPciInfo(h).busIdLegacy))
                self._handles.setdefault(bus, h)
                out.append(bus)
        return out

    def _optional(self, call: Callable[[], Any], *absent: str) -> Any:
        """A call whose listed NVML errors mean "this GPU has no such feature" (→ None)."""
        try:
            with self._calls():
                return call()
        except NvmlError as e:
            if e.name in absent:
                return None
            raise

    def device(self, bus_id: str) -> GpuInfo:
        h = self._handle(bus_id)
        nvml = self._nvml
        with self._calls():
            name = _text(nvml.nvmlDeviceGetName(h))
            uuid = _text(nvml.nvmlDeviceGetUUID(h))
            minor = int(nvml.nvmlDeviceGetMinorNumber(h))
            index = int(nvml.nvmlDeviceGetIndex(h))
            total = int(nvml.nvmlDeviceGetMemoryInfo(h).total)
        mig = self._optional(lambda: nvml.nvmlDeviceGetMigMode(h), "NOT_SUPPORTED", "FUNCTION_NOT_FOUND")
        links = self._nvlinks(h)
        self._active_links[bus_id] = tuple(x.link for x in links if x.active)
        return GpuInfo(bus_id=bus_id, index=index, name=name, uuid=uuid, minor=minor, memory_total=total,
                       mig_current=None if mig is None else bool(mig[0]),
                       mig_pending=None if mig is None else bool(mig[1]),
                       nvlinks=links, nvlink_peers=self._nvlink_peers(bus_id, h))

    def _nvlinks(self, h: Any) -> tuple[NvLink, ...]:
        nvml = self._nvml
        speed = None
        values = self._optional(lambda: nvml.nvmlDeviceGetFieldValues(h, [_SPEED_FIELD_COMMON]), "NOT_SUPPORTED")
        if values is not None and len(values) == 1 and int(values[0].nvmlReturn) == 0:
            speed = int(values[0].value.uiVal) or None
        links = []
        for link in range(_MAX_LINKS):
            # The first link NVML rejects ends the list: GPUs without NVLink answer NOT_SUPPORTED for link 0.
            state = self._optional(lambda link=link: nvml.nvmlDeviceGetNvLinkState(h, link),  # type: ignore[misc]
                                   "NOT_SUPPORTED", "INVALID_ARGUMENT", "FUNCTION_NOT_FOUND")
            if state is None:
                break
            active = bool(state)
            remote_type, remote_bus = "unknown", ""
            if active:
                rtype = self._optional(lambda link=link: nvml.nvmlDeviceGetNvLinkRemoteDeviceType(h, link),  # type: ignore[misc]
                                       "NOT_SUPPORTED", "FUNCTION_NOT_FOUND")
                remote_type = _NVLINK_REMOTE_TYPES.get(int(rtype), "unknown") if rtype is not None else "unknown"
                pci = self._optional(lambda link=link: nvml.nvmlDeviceGetNvLinkRemotePciInfo(h, link),  # type: ignore[misc]
                                     "NOT_SUPPORTED", "FUNCTION_NOT_FOUND")
                if pci is not None:
                    try:
                        remote_bus = normalize_bus_id(_text(pci.busIdLegacy))
                    except InvalidInput:
                        remote_bus = ""
            links.append(NvLink(link, active, speed if active else None, remote_type, remote_bus))
        return tuple(links)

    def _active_link_ids(self, h: Any) -> tuple[int, ...]:
        """The active NVLinks (as _nvlinks walks them, without asking what is at their far end)."""
        nvml = self._nvml
        active = []
        for link in range(_MAX_LINKS):
            state = self._optional(lambda link=link: nvml.nvmlDeviceGetNvLinkState(h, link),  # type: ignore[misc]
                                   "NOT_SUPPORTED", "INVALID_ARGUMENT", "FUNCTION_NOT_FOUND")
            if state is None:
                break
            if state:
                active.append(link)
        return tuple(active)

    def _nvlink_peers(self, bus_id: str, h: Any) -> tuple[str, ...]:
        nvml = self._nvml
        if not self._handles or len(self._handles) < 2:
            self.bus_ids()
        peers = []
        for other_bus, other in sorted(self._handles.items()):
            if other_bus == bus_id:
                continue
            status = self._optional(lambda other=other: nvml.nvmlDeviceGetP2PStatus(  # type: ignore[misc]
                h, other, _P2P_CAPS_INDEX_NVLINK), "NOT_SUPPORTED", "FUNCTION_NOT_FOUND")
            if status is not None and int(status) == 0:  # NVML_P2P_STATUS_OK
                peers.append(other_bus)
        return tuple(peers)

    def compute_processes(self, bus_id: str) -> list[ComputeProcess]:
        h = self._handle(bus_id)
        with self._calls() as nvml:
            procs = nvml.nvmlDeviceGetComputeRunningProcesses(h)
        return [ComputeProcess(int(p.pid), int(p.usedGpuMemory or 0)) for p in procs]

    def process_utilization(self, bus_id: str) -> list[UtilizationSample]:
        h = self._handle(bus_id)
        try:
            with self._calls() as nvml:
                # 1024 µs as upstream: in effect "every sample NVML still buffers".
                samples = nvml.nvmlDeviceGetProcessUtilization(h, 1024)
        except NvmlError as e:
            # pynvml raises NVMLError(SUCCESS) when NVML has zero samples, and NVML says NOT_FOUND when no
            # process ran since the timestamp: both mean "no samples".
            if e.code == 0 or e.name == "NOT_FOUND":
                return []
            raise
        return [UtilizationSample(int(s.pid), int(s.smUtil), int(s.timeStamp)) for s in samples]

    def telemetry(self, bus_id: str, read: str) -> Any:
        reader = READERS.get(read)
        if reader is None:
            raise NvmlError.named("INVALID_ARGUMENT", f"unknown telemetry read {read!r}")
        h = self._handle(bus_id)
        links = self._active_links.get(bus_id)
        if links is None:
            links = self._active_links[bus_id] = self._active_link_ids(h)
        try:
            with self._calls() as nvml:
                return reader(nvml, h, links)
        except AttributeError as e:  # a pynvml older than the NVML function
            raise NvmlError.named("FUNCTION_NOT_FOUND", f"{read}: {e}") from e

    def xid_supported(self, bus_id: str) -> bool:
        h = self._handle(bus_id)
        with self._calls() as nvml:
            return bool(int(nvml.nvmlDeviceGetSupportedEventTypes(h)) & _XID_CRITICAL_ERROR)

    def register_xid(self, bus_id: str) -> None:
        h = self._handle(bus_id)
        with self._calls() as nvml:
            if self._events is None:
                self._events = nvml.nvmlEventSetCreate()
            nvml.nvmlDeviceRegisterEvents(h, _XID_CRITICAL_ERROR, self._events)

    def wake(self) -> None:
        """nvmlEventSetWait cannot be interrupted: a wait in progress runs out its timeout (health.WAIT_MS)."""

    def wait_xid(self, timeout_ms: int) -> XidEvent | None:
        if self._events is None:
            raise NvmlError.named("UNINITIALIZED", "no GPU registered for XID events")
        try:
            with self._calls() as nvml:
                data = nvml.nvmlEventSetWait(self._events, timeout_ms)
        except NvmlError as e:
            if e.name == "TIMEOUT":
                return None
            raise
        if int(data.eventType) != _XID_CRITICAL_ERROR:
            return None
        xid = int(data.eventData)
        try:
            with self._calls() as nvml:
                bus = normalize_bus_id(_text(nvml.nvmlDeviceGetPciInfo(data.device).busIdLegacy))
                uuid = _text(nvml.nvmlDeviceGetUUID(data.device))
        except (NvmlError, InvalidInput) as e:
            # Upstream skips an event whose device cannot be identified (checkHealth `continue`).
            log.warning("XID %d event from an unidentifiable device skipped: %s", xid, e)
            return None
        return XidEvent(xid, bus, uuid)
