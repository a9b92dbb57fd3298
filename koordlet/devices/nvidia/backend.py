"""What discovery, usage and health read from NVML, behind one interface: live pynvml, or a replayed JSON snapshot.

Every call is keyed by the GPU's PCI bus id in sysfs form (`0000:19:00.0`, NVML's `busIdLegacy` lower-cased), the
key upstream uses too (pkg/koordlet/metricsadvisor/devices/gpu/collector_gpu_linux.go). The snapshot format is
documented in docs/nvml-snapshot.md.
"""

from __future__ import annotations

import copy
import json
import logging
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from koordlet.errors import InvalidInput, KoordletError

log = logging.getLogger(__name__)

SNAPSHOT_FORMAT = "koordlet.nvml-snapshot/v1"

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
_UUID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]*$")


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


# -- live NVML through pynvml -------------------------------------------------------------------------------------


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class PynvmlBackend:
    """NVML through the `pynvml` module (nvidia-ml-py), imported on first use so a GPU-less host never loads it."""

    name = "pynvml"

    def __init__(self, module: Any = None) -> None:
        self._nvml = module  # injectable for tests; None → `import pynvml` in init()
        self._init_error: NvmlError | None = None
        self._ready = False
        self._handles: dict[str, Any] = {}
        self._events: Any = None
        self._lock = threading.Lock()

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
        return GpuInfo(bus_id=bus_id, index=index, name=name, uuid=uuid, minor=minor, memory_total=total,
                       mig_current=None if mig is None else bool(mig[0]),
                       mig_pending=None if mig is None else bool(mig[1]),
                       nvlinks=self._nvlinks(h), nvlink_peers=self._nvlink_peers(bus_id, h))

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


# -- snapshots ------------------------------------------------------------------------------------------------------


@dataclass
class _SnapDevice:
    info: GpuInfo | None  # None when the snapshot records that NVML failed for this GPU
    errors: dict[str, str]
    processes: list[ComputeProcess] = field(default_factory=list)
    utilization: list[UtilizationSample] = field(default_factory=list)
    xid_supported: bool = True


class SnapshotBackend:
    """Replays a validated snapshot document (see load_snapshot): no NVML calls at all."""

    def __init__(self, doc: dict[str, Any], name: str = "snapshot") -> None:
        validate_snapshot(doc)
        self.name = name
        self.doc = copy.deepcopy(doc)
        self._driver = str(doc["driverVersion"])
        self._init_error = doc.get("errors", {}).get("init")
        self._devices: dict[str, _SnapDevice] = {}
        for d in doc["devices"]:
            bus = normalize_bus_id(d["pciBusId"])
            self._devices[bus] = _parse_device(bus, d)
        self._events = [XidEvent(int(e["xid"]), normalize_bus_id(e["pciBusId"]) if e.get("pciBusId") else None,
                                 str(e.get("uuid", ""))) for e in doc.get("xidEvents", [])]
        self._registered: set[str] = set()
        self._closed = threading.Event()
        self._lock = threading.Lock()

    def _dev(self, bus_id: str, what: str) -> _SnapDevice:
        d = self._devices.get(bus_id)
        if d is None:
            raise NvmlError.named("NOT_FOUND", f"no GPU at {bus_id} in {self.name}")
        if "device" in d.errors:
            raise NvmlError.named(d.errors["device"], f"{bus_id}: {d.errors['device']}")
        if what in d.errors:
            raise NvmlError.named(d.errors[what], f"{bus_id}: {what}: {d.errors[what]}")
        return d

    def init(self) -> None:
        if self._init_error:
            raise NvmlError.named(self._init_error, f"{self.name}: nvmlInit: {self._init_error}")
        self._closed.clear()

    def shutdown(self) -> None:
        self._closed.set()

    def driver_version(self) -> str:
        return self._driver

    def bus_ids(self) -> list[str]:
        def order(item: tuple[str, _SnapDevice]) -> tuple[int, str]:
            info = item[1].info
            return (info.index if info is not None else 1 << 30, item[0])

        return [bus for bus, _ in sorted(self._devices.items(), key=order)]

    def device(self, bus_id: str) -> GpuInfo:
        info = self._dev(bus_id, "device").info
        assert info is not None  # a device without facts always carries errors.device
        return info

    def compute_processes(self, bus_id: str) -> list[ComputeProcess]:
        return list(self._dev(bus_id, "processes").processes)

    def process_utilization(self, bus_id: str) -> list[UtilizationSample]:
        return list(self._dev(bus_id, "utilization").utilization)

    def xid_supported(self, bus_id: str) -> bool:
        return self._dev(bus_id, "events").xid_supported

    def register_xid(self, bus_id: str) -> None:
        d = self._dev(bus_id, "events")
        if not d.xid_supported:
            raise NvmlError.named("NOT_SUPPORTED", f"{bus_id}: XID events not supported")
        self._registered.add(bus_id)

    def wait_xid(self, timeout_ms: int) -> XidEvent | None:
        with self._lock:
            while self._events:
                ev = self._events.pop(0)
                # NVML only delivers events of registered devices (or device-less ones).
                if ev.bus_id is None or ev.bus_id in self._registered:
                    return ev
        self._closed.wait(timeout_ms / 1000)
        return None

    def pending_events(self) -> list[XidEvent]:
        with self._lock:
            return list(self._events)


def _parse_device(bus: str, d: dict[str, Any]) -> _SnapDevice:
    errors = {str(k): str(v) for k, v in (d.get("errors") or {}).items()}
    info = None
    if "device" not in errors:
        mig = d.get("migMode")
        links = tuple(NvLink(int(x["link"]), bool(x["active"]), x.get("speedMBps"), str(x.get("remoteType", "unknown")),
                             normalize_bus_id(x["remoteBusId"]) if x.get("remoteBusId") else "")
                      for x in d.get("nvlinks", []))
        info = GpuInfo(bus_id=bus, index=int(d["index"]), name=str(d["name"]), uuid=str(d["uuid"]),
                       minor=int(d["minor"]), memory_total=int(d["memoryTotal"]),
                       mig_current=None if mig is None else mig["current"] == "Enabled",
                       mig_pending=None if mig is None else mig["pending"] == "Enabled",
                       nvlinks=links,
                       nvlink_peers=tuple(sorted(normalize_bus_id(p) for p in d.get("nvlinkPeers", []))))
    return _SnapDevice(
        info, errors,
        [ComputeProcess(int(p["pid"]), int(p.get("usedGpuMemory") or 0)) for p in d.get("processes", [])],
        [UtilizationSample(int(u["pid"]), int(u["smUtil"]), int(u.get("timeStamp", 0)))
         for u in d.get("utilization", [])],
        bool(d.get("xidSupported", True)))


# -- snapshot validation, dump and load ---------------------------------------------------------------------------


def _check(cond: bool, where: str, what: str) -> None:
    if not cond:
        raise InvalidInput(f"NVML snapshot: {where}: {what}")


def _is_int(v: Any, minimum: int = 0) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= minimum


def _check_bus(v: Any, where: str) -> None:
    _check(isinstance(v, str), where, "must be a PCI bus id string")
    try:
        normalize_bus_id(v)
    except InvalidInput as e:
        raise InvalidInput(f"NVML snapshot: {where}: {e}") from e


def _check_error_map(v: Any, where: str, keys: tuple[str, ...]) -> None:
    _check(isinstance(v, dict), where, "must be an object")
    for k, name in v.items():
        _check(k in keys, f"{where}.{k}", f"unknown key (expected one of {', '.join(keys)})")
        _check(name in ERROR_CODES, f"{where}.{k}", f"unknown NVML error {name!r}")


def validate_snapshot(doc: Any) -> None:
    """Raise InvalidInput naming the first field that does not follow docs/nvml-snapshot.md."""
    _check(isinstance(doc, dict), "document", "must be a JSON object")
    _check(doc.get("format") == SNAPSHOT_FORMAT, "format", f"must be {SNAPSHOT_FORMAT!r}, got {doc.get('format')!r}")
    _check(isinstance(doc.get("driverVersion"), str), "driverVersion", "must be a string")
    if "errors" in doc:
        _check_error_map(doc["errors"], "errors", ("init",))
    devices = doc.get("devices")
    _check(isinstance(devices, list), "devices", "must be a list")
    seen: set[str] = set()
    for i, d in enumerate(devices):
        w = f"devices[{i}]"
        _check(isinstance(d, dict), w, "must be an object")
        _check_bus(d.get("pciBusId"), f"{w}.pciBusId")
        bus = normalize_bus_id(d["pciBusId"])
        _check(bus not in seen, f"{w}.pciBusId", f"duplicate {bus}")
        seen.add(bus)
        if "errors" in d:
            _check_error_map(d["errors"], f"{w}.errors", ("device", "processes", "utilization", "events"))
        if "device" in (d.get("errors") or {}):
            continue
        for key in ("index", "minor", "memoryTotal"):
            _check(_is_int(d.get(key)), f"{w}.{key}", "must be a non-negative integer")
        _check(isinstance(d.get("name"), str) and d["name"] != "", f"{w}.name", "must be a non-empty string")
        _check(isinstance(d.get("uuid"), str) and bool(_UUID.match(d["uuid"])), f"{w}.uuid", "must be a GPU UUID")
        mig = d.get("migMode")
        if mig is not None:
            _check(isinstance(mig, dict) and mig.get("current") in ("Enabled", "Disabled")
                   and mig.get("pending") in ("Enabled", "Disabled"), f"{w}.migMode",
                   'must be null or {"current": "Enabled"|"Disabled", "pending": ...}')
        links = d.get("nvlinks", [])
        _check(isinstance(links, list), f"{w}.nvlinks", "must be a list")
        for j, x in enumerate(links):
            lw = f"{w}.nvlinks[{j}]"
            _check(isinstance(x, dict) and _is_int(x.get("link")) and isinstance(x.get("active"), bool), lw,
                   "needs integer link and boolean active")
            sp = x.get("speedMBps")
            _check(sp is None or _is_int(sp), f"{lw}.speedMBps", "must be null or a non-negative integer")
            _check(x.get("remoteType", "unknown") in ("gpu", "switch", "ibmnpu", "unknown"), f"{lw}.remoteType",
                   "must be gpu, switch, ibmnpu or unknown")
            if x.get("remoteBusId"):
                _check_bus(x["remoteBusId"], f"{lw}.remoteBusId")
        peers = d.get("nvlinkPeers", [])
        _check(isinstance(peers, list), f"{w}.nvlinkPeers", "must be a list")
        for j, p in enumerate(peers):
            _check_bus(p, f"{w}.nvlinkPeers[{j}]")
        _check(isinstance(d.get("xidSupported", True), bool), f"{w}.xidSupported", "must be a boolean")
        for j, p in enumerate(d.get("processes", [])):
            _check(isinstance(p, dict) and _is_int(p.get("pid"), 1)
                   and (p.get("usedGpuMemory") is None or _is_int(p.get("usedGpuMemory"))),
                   f"{w}.processes[{j}]", "needs pid ≥ 1 and usedGpuMemory (bytes or null)")
        for j, u in enumerate(d.get("utilization", [])):
            _check(isinstance(u, dict) and _is_int(u.get("pid"), 1) and _is_int(u.get("smUtil"))
                   and _is_int(u.get("timeStamp", 0)), f"{w}.utilization[{j}]",
                   "needs pid ≥ 1, smUtil and optional timeStamp (integers)")
    events = doc.get("xidEvents", [])
    _check(isinstance(events, list), "xidEvents", "must be a list")
    for j, e in enumerate(events):
        _check(isinstance(e, dict) and _is_int(e.get("xid")), f"xidEvents[{j}]", "needs an integer xid")
        if e.get("pciBusId") is not None:
            _check_bus(e["pciBusId"], f"xidEvents[{j}].pciBusId")
        _check(isinstance(e.get("uuid", ""), str), f"xidEvents[{j}].uuid", "must be a string")


def load_snapshot(path: str) -> SnapshotBackend:
    """A SnapshotBackend from a JSON file; InvalidInput when the file is unreadable or malformed."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as e:
        raise InvalidInput(f"NVML snapshot {path}: {e.strerror or e}") from e
    except ValueError as e:
        raise InvalidInput(f"NVML snapshot {path}: not JSON: {e}") from e
    try:
        return SnapshotBackend(doc, name=f"snapshot:{path}")
    except InvalidInput as e:
        raise InvalidInput(f"{path}: {e}") from e


def _mig_doc(current: bool | None, pending: bool | None) -> dict[str, str] | None:
    if current is None:
        return None
    return {"current": "Enabled" if current else "Disabled", "pending": "Enabled" if pending else "Disabled"}


def dump_snapshot(backend: NvmlBackend) -> dict[str, Any]:
    """Everything discovery, usage and health read, as a snapshot document (NVML errors recorded, not raised;
    only a failing nvmlInit is recorded as `errors.init` with no devices)."""
    doc: dict[str, Any] = {"format": SNAPSHOT_FORMAT, "driverVersion": ""}
    try:
        backend.init()
    except NvmlError as e:
        doc["errors"] = {"init": e.name}
        doc["devices"] = []
        return doc
    try:
        doc["driverVersion"] = backend.driver_version()
    except NvmlError:
        doc["driverVersion"] = ""
    devices = []
    for bus in backend.bus_ids():
        entry: dict[str, Any] = {"pciBusId": bus}
        errors: dict[str, str] = {}
        try:
            info = backend.device(bus)
        except NvmlError as e:
            entry["errors"] = {"device": e.name}
            devices.append(entry)
            continue
        entry.update({
            "index": info.index, "name": info.name, "uuid": info.uuid, "minor": info.minor,
            "memoryTotal": info.memory_total, "migMode": _mig_doc(info.mig_current, info.mig_pending),
            "nvlinks": [{"link": x.link, "active": x.active, "speedMBps": x.speed_mbps, "remoteType": x.remote_type,
                         "remoteBusId": x.remote_bus_id} for x in info.nvlinks],
            "nvlinkPeers": list(info.nvlink_peers),
        })
        try:
            entry["xidSupported"] = backend.xid_supported(bus)
        except NvmlError as e:
            errors["events"] = e.name
        try:
            entry["processes"] = [{"pid": p.pid, "usedGpuMemory": p.used_memory}
                                  for p in backend.compute_processes(bus)]
        except NvmlError as e:
            errors["processes"] = e.name
        try:
            entry["utilization"] = [{"pid": u.pid, "smUtil": u.sm_util, "timeStamp": u.timestamp}
                                    for u in backend.process_utilization(bus)]
        except NvmlError as e:
            errors["utilization"] = e.name
        if errors:
            entry["errors"] = errors
        devices.append(entry)
    doc["devices"] = devices
    if isinstance(backend, SnapshotBackend):
        events = backend.pending_events()
        if events:
            doc["xidEvents"] = [{"xid": e.xid, "pciBusId": e.bus_id, "uuid": e.uuid} for e in events]
    return doc


def write_snapshot(doc: dict[str, Any], path: str) -> None:
    """The canonical file form: sorted keys, two-space indent, trailing newline."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
