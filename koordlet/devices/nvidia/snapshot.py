"""NVML snapshots: a JSON document of everything the GPU code reads from NVML, replayed by SnapshotBackend without
NVML (docs/nvml-snapshot.md is the format), validated on load and written from any backend by dump_snapshot."""

from __future__ import annotations

import copy
import json
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from apis.core.errors import InvalidInput
from apis.core.objects import JSON
from koordlet.devices.nvidia.backend import (
    ERROR_CODES,
    ComputeProcess,
    GpuInfo,
    NvLink,
    NvmlBackend,
    NvmlError,
    UtilizationSample,
    XidEvent,
    normalize_bus_id,
)
from koordlet.devices.nvidia.telemetry import MIG_KEYS, READS

SNAPSHOT_FORMAT = "koordlet.nvml-snapshot/v1"
_UUID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]*$")


@dataclass
class _SnapDevice:
    info: GpuInfo | None  # None when the snapshot records that NVML failed for this GPU
    errors: dict[str, str]
    processes: list[ComputeProcess] = field(default_factory=list)
    utilization: list[UtilizationSample] = field(default_factory=list)
    xid_supported: bool = True
    telemetry: JSON = field(default_factory=dict)  # read name → value (telemetry.READS)
    telemetry_errors: dict[str, str] = field(default_factory=dict)  # read name → NVML error name


class SnapshotBackend:
    """Replays a validated snapshot document (see load_snapshot): no NVML calls at all."""

    def __init__(self, doc: JSON, name: str = "snapshot") -> None:
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
        self.reads: Counter[tuple[str, str]] = Counter()  # (bus id, telemetry read) → times asked
        self._closed = threading.Event()
        self._woken = threading.Event()  # set by wake() and shutdown(): a wait_xid in progress answers at once
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
        self._woken.clear()

    def shutdown(self) -> None:
        self._closed.set()
        self._woken.set()

    def wake(self) -> None:
        self._woken.set()

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

    def telemetry(self, bus_id: str, read: str) -> Any:
        """The recorded value; the recorded error, or NOT_SUPPORTED for a read the snapshot does not hold."""
        if read not in READS:
            raise NvmlError.named("INVALID_ARGUMENT", f"unknown telemetry read {read!r}")
        d = self._dev(bus_id, "device")
        self.reads[(bus_id, read)] += 1
        if read in d.telemetry_errors:
            raise NvmlError.named(d.telemetry_errors[read], f"{bus_id}: {read}: {d.telemetry_errors[read]}")
        if read not in d.telemetry:
            raise NvmlError.named("NOT_SUPPORTED", f"{bus_id}: {read} not in {self.name}")
        return copy.deepcopy(d.telemetry[read])

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
        if self._woken.wait(timeout_ms / 1000) and not self._closed.is_set():
            self._woken.clear()  # one wake ends one wait
        return None

    def pending_events(self) -> list[XidEvent]:
        with self._lock:
            return list(self._events)


def _parse_device(bus: str, d: JSON) -> _SnapDevice:
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
        bool(d.get("xidSupported", True)), dict(d.get("telemetry") or {}),
        {str(k): str(v) for k, v in (d.get("telemetryErrors") or {}).items()})


# -- snapshot validation, dump and load ---------------------------------------------------------------------------


def _check(cond: bool, where: str, what: str) -> None:
    if not cond:
        raise InvalidInput(f"NVML snapshot: {where}: {what}")


def _is_int(v: object, minimum: int = 0) -> bool:
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
        _check_telemetry(d, w)
    events = doc.get("xidEvents", [])
    _check(isinstance(events, list), "xidEvents", "must be a list")
    for j, e in enumerate(events):
        _check(isinstance(e, dict) and _is_int(e.get("xid")), f"xidEvents[{j}]", "needs an integer xid")
        if e.get("pciBusId") is not None:
            _check_bus(e["pciBusId"], f"xidEvents[{j}].pciBusId")
        _check(isinstance(e.get("uuid", ""), str), f"xidEvents[{j}].uuid", "must be a string")


def _check_telemetry(d: JSON, w: str) -> None:
    tel = d.get("telemetry", {})
    _check(isinstance(tel, dict), f"{w}.telemetry", "must be an object")
    for read, value in tel.items():
        rw = f"{w}.telemetry.{read}"
        _check(read in READS, rw, f"unknown read (expected one of {', '.join(READS)})")
        shape = READS[read][0]
        if shape == "int":
            _check(_is_int(value), rw, "must be a non-negative integer")
        elif shape == "mig":
            _check(isinstance(value, list), rw, "must be a list of MIG instances")
            for j, m in enumerate(value):
                _check(isinstance(m, dict) and all(k in m for k in MIG_KEYS), f"{rw}[{j}]",
                       f"needs {', '.join(MIG_KEYS)}")
                _check(isinstance(m["profile"], str) and isinstance(m["uuid"], str)
                       and all(_is_int(m[k]) for k in MIG_KEYS if k not in ("profile", "uuid")), f"{rw}[{j}]",
                       "profile and uuid are strings, the others non-negative integers")
        else:
            _check(isinstance(value, dict) and set(value) == set(shape), rw, f"must be an object of {', '.join(shape)}")
            for k, v in value.items():
                _check(_is_int(v) or isinstance(v, bool), f"{rw}.{k}", "must be a non-negative integer or boolean")
    errors = d.get("telemetryErrors", {})
    _check(isinstance(errors, dict), f"{w}.telemetryErrors", "must be an object")
    for read, name in errors.items():
        _check(read in READS, f"{w}.telemetryErrors.{read}", "unknown read")
        _check(name in ERROR_CODES, f"{w}.telemetryErrors.{read}", f"unknown NVML error {name!r}")
        _check(read not in tel, f"{w}.telemetryErrors.{read}", "a read has a value or an error, not both")


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


def dump_snapshot(backend: NvmlBackend) -> JSON:
    """Everything discovery, usage and health read, as a snapshot document (NVML errors recorded, not raised;
    only a failing nvmlInit is recorded as `errors.init` with no devices)."""
    doc: JSON = {"format": SNAPSHOT_FORMAT, "driverVersion": ""}
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
        entry: JSON = {"pciBusId": bus}
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
        _dump_telemetry(backend, bus, entry)
        devices.append(entry)
    doc["devices"] = devices
    if isinstance(backend, SnapshotBackend):
        events = backend.pending_events()
        if events:
            doc["xidEvents"] = [{"xid": e.xid, "pciBusId": e.bus_id, "uuid": e.uuid} for e in events]
    return doc


def _dump_telemetry(backend: NvmlBackend, bus: str, entry: JSON) -> None:
    values: JSON = {}
    errors: dict[str, str] = {}
    for read in READS:
        try:
            values[read] = backend.telemetry(bus, read)
        except NvmlError as e:
            errors[read] = e.name
    entry["telemetry"] = values
    if errors:
        entry["telemetryErrors"] = errors


def write_snapshot(doc: JSON, path: str) -> None:
    """The canonical file form: sorted keys, two-space indent, trailing newline."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
