"""`nvidia-smi -q` (text) and `nvidia-smi -q -x` (XML) → NVML snapshot documents (docs/nvml-snapshot.md), so the
bundled snapshots carry the numbers of real machines.

Each snapshot field comes from the nvidia-smi line printing the same NVML query (nvidia-smi is an NVML client): a
value nvidia-smi prints as `N/A` is a read the GPU does not support, recorded as the NOT_SUPPORTED error NVML gave
it; a read nvidia-smi does not print at all (energy, NVLink counters) is left out of the snapshot, which replays it
as NOT_SUPPORTED too. Sizes in MiB become bytes, watts milliwatts; nvidia-smi -q lists GPUs in NVML index order.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from apis.core.errors import InvalidInput
from apis.core.objects import JSON
from koordlet.devices.nvidia.backend import normalize_bus_id
from koordlet.devices.nvidia.nvml_reads import mig_profile
from koordlet.devices.nvidia.snapshot import SNAPSHOT_FORMAT, validate_snapshot
from koordlet.devices.nvidia.telemetry import CLOCK_EVENT_REASONS

MIB = 1 << 20
_NUMBER = re.compile(r"^(-?\d+(?:\.\d+)?)\s*([A-Za-z/%]*)")
_MIG_LINE = re.compile(r"^\s*MIG\s+(\S+)\s+Device\s+(\d+):\s*\(UUID:\s*(MIG-[0-9A-Za-z-]+)\)")
_GPU_LINE = re.compile(r"^GPU\s+(\d+):.*\(UUID:\s*(GPU-[0-9A-Za-z-]+)\)")
# nvidia-smi's clock event reason names (text, XML tag suffix) → telemetry.CLOCK_EVENT_REASONS
_REASONS = {
    ("Idle", "gpu_idle"): "gpu_idle",
    ("Applications Clocks Setting", "applications_clocks_setting"): "applications_clocks_setting",
    ("SW Power Cap", "sw_power_cap"): "sw_power_cap",
    ("HW Slowdown", "hw_slowdown"): "hw_slowdown",
    ("HW Thermal Slowdown", "hw_thermal_slowdown"): "hw_thermal_slowdown",
    ("HW Power Brake Slowdown", "hw_power_brake_slowdown"): "hw_power_brake_slowdown",
    ("Sync Boost", "sync_boost"): "sync_boost",
    ("SW Thermal Slowdown", "sw_thermal_slowdown"): "sw_thermal_slowdown",
    ("Display Clock Setting", "display_clocks_setting"): "display_clock_setting",
}


class NotAvailable(Exception):
    """nvidia-smi printed N/A (or nothing) where a number was expected."""


def _number(text: str | None, unit: str = "") -> float:
    if text is None:
        raise NotAvailable
    m = _NUMBER.match(text.strip())
    if not m:
        raise NotAvailable
    if unit and m.group(2) != unit:
        raise InvalidInput(f"expected a value in {unit}, got {text!r}")
    return float(m.group(1))


def _int(text: str | None, unit: str = "") -> int:
    return round(_number(text, unit))


def _yes(text: str | None) -> bool:
    if text is None or text.strip() in ("N/A", ""):
        raise NotAvailable
    return text.strip() in ("Yes", "Active", "Enabled")


# -- the two input forms, behind one lookup ---------------------------------------------------------------------


@dataclass
class _Node:
    """One `Key : value` line of `nvidia-smi -q`, or a section header with its indented children."""

    value: str | None = None
    children: list[tuple[str, _Node]] = field(default_factory=list)

    def find(self, key: str) -> _Node | None:
        for k, child in self.children:
            if k == key:
                return child
        return None


def _parse_text_tree(text: str) -> _Node:
    root = _Node()
    stack: list[tuple[int, _Node]] = [(-1, root)]
    for raw in text.splitlines():
        if not raw.strip() or raw.startswith("="):
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        key, sep, value = raw.strip().partition(":")
        if raw.strip().startswith("GPU ") and indent == 0:  # "GPU 00000000:19:00.0": a colon inside the key
            key, sep, value = raw.strip(), "", ""
        while stack[-1][0] >= indent:
            stack.pop()
        node = _Node(value.strip() if sep else None)
        stack[-1][1].children.append((key.strip(), node))
        stack.append((indent, node))
    return root


class _Gpu:
    """Lookup of one GPU's values: `get(text path, xml path)` is the printed string, None when absent."""

    def get(self, text_path: str, xml_path: str) -> str | None:
        raise NotImplementedError

    def processes(self) -> list[tuple[int, str | None]]:
        raise NotImplementedError

    def mig_devices(self) -> list[dict[str, str | None]]:
        return []


class _TextGpu(_Gpu):
    def __init__(self, node: _Node) -> None:
        self.node = node

    def get(self, text_path: str, xml_path: str) -> str | None:
        if not text_path:
            return None
        node: _Node | None = self.node
        for part in text_path.split("/"):
            node = node.find(part) if node is not None else None
        return None if node is None else node.value

    def processes(self) -> list[tuple[int, str | None]]:
        out = []
        procs = self.node.find("Processes")
        for key, child in procs.children if procs is not None else []:
            if key == "Process ID" and child.value and child.value.isdigit():
                used = child.find("Used GPU Memory")
                out.append((int(child.value), used.value if used is not None else None))
        return out


class _XmlGpu(_Gpu):
    def __init__(self, element: ET.Element) -> None:
        self.el = element

    def get(self, text_path: str, xml_path: str) -> str | None:
        for path in filter(None, xml_path.split("|")):
            found = self.el.find(path)
            if found is not None and len(found) == 0:
                return (found.text or "").strip()
        return None

    def processes(self) -> list[tuple[int, str | None]]:
        out = []
        for p in self.el.findall("processes/process_info"):
            pid = (p.findtext("pid") or "").strip()
            if pid.isdigit():
                out.append((int(pid), p.findtext("used_memory")))
        return out

    def mig_devices(self) -> list[dict[str, str | None]]:
        return [{"index": m.findtext("index"), "gpuInstanceId": m.findtext("gpu_instance_id"),
                 "computeInstanceId": m.findtext("compute_instance_id"),
                 "total": m.findtext("fb_memory_usage/total"), "used": m.findtext("fb_memory_usage/used"),
                 "free": m.findtext("fb_memory_usage/free")}
                for m in self.el.findall("mig_devices/mig_device")]


# -- the mapping ------------------------------------------------------------------------------------------------

_ECC_KINDS = (("volatile", "Volatile", "volatile"), ("aggregate", "Aggregate", "aggregate"))


def _ecc(g: _Gpu) -> dict[str, int]:
    out: dict[str, int] = {}
    for key, text_section, xml_section in _ECC_KINDS:
        for kind, word in (("Correctable", "Correctable"), ("Uncorrectable", "Uncorrectable")):
            total = 0
            parts = [f"{text_section}/SRAM {word}", f"{text_section}/DRAM {word}"]
            if word == "Uncorrectable":  # Hopper splits SRAM uncorrectable in two
                parts += [f"{text_section}/SRAM {word} Parity", f"{text_section}/SRAM {word} SEC-DED"]
            xml_parts = [f"ecc_errors/{xml_section}/{ram}_{word.lower()}" for ram in ("sram", "dram")]
            values = [g.get(f"ECC Errors/{p}", "") for p in parts] + [g.get("", p) for p in xml_parts]
            present = [v for v in values if v is not None]
            if not present:
                raise NotAvailable
            total = sum(_int(v) for v in present)  # N/A anywhere raises NotAvailable
            out[f"{key}{kind}"] = total
    return out


def _reasons(g: _Gpu) -> int:
    mask = 0
    seen = False
    for (text_name, xml_name), ours in _REASONS.items():
        text = None
        for section in ("Clocks Event Reasons", "Clocks Throttle Reasons"):
            text = text or g.get(f"{section}/{text_name}", "") or g.get(f"{section}/HW Slowdown/{text_name}", "")
        for prefix in ("clocks_event_reasons/clocks_event_reason_", "clocks_throttle_reasons/clocks_throttle_reason_"):
            text = text or g.get("", prefix + xml_name)
        if text is None:
            continue
        seen = True
        if _yes(text):
            mask |= CLOCK_EVENT_REASONS[ours]
    if not seen:
        raise NotAvailable
    return mask


def _power(g: _Gpu) -> int:
    text = g.get("GPU Power Readings/Power Draw", "gpu_power_readings/power_draw") or \
        g.get("Power Readings/Power Draw", "power_readings/power_draw")
    return round(_number(text, "W") * 1000)


def _mib(text: str | None) -> int:
    return _int(text, "MiB") * MIB


READ_MAPPING: dict[str, Callable[[_Gpu], Any]] = {
    "utilization": lambda g: {"gpu": _int(g.get("Utilization/Gpu", "utilization/gpu_util"), "%"),
                              "memory": _int(g.get("Utilization/Memory", "utilization/memory_util"), "%")},
    "encoderUtilization": lambda g: _int(g.get("Utilization/Encoder", "utilization/encoder_util"), "%"),
    "decoderUtilization": lambda g: _int(g.get("Utilization/Decoder", "utilization/decoder_util"), "%"),
    "memory": lambda g: {"used": _mib(g.get("FB Memory Usage/Used", "fb_memory_usage/used")),
                         "free": _mib(g.get("FB Memory Usage/Free", "fb_memory_usage/free")),
                         "reserved": _mib(g.get("FB Memory Usage/Reserved", "fb_memory_usage/reserved"))},
    "temperature": lambda g: _int(g.get("Temperature/GPU Current Temp", "temperature/gpu_temp"), "C"),
    "memoryTemperature": lambda g: _int(g.get("Temperature/Memory Current Temp", "temperature/memory_temp"), "C"),
    "powerUsage": _power,
    "clocks": lambda g: {"sm": _int(g.get("Clocks/SM", "clocks/sm_clock"), "MHz"),
                         "memory": _int(g.get("Clocks/Memory", "clocks/mem_clock"), "MHz")},
    "clocksEventReasons": _reasons,
    "eccErrors": _ecc,
    "retiredPages": lambda g: {
        "singleBitEcc": _int(g.get("Retired Pages/Single Bit ECC",
                                   "retired_pages/multiple_single_bit_retirement/retired_count")),
        "doubleBitEcc": _int(g.get("Retired Pages/Double Bit ECC",
                                   "retired_pages/double_bit_retirement/retired_count")),
        "pending": _yes(g.get("Retired Pages/Pending Page Blacklist", "retired_pages/pending_blacklist"))},
    "remappedRows": lambda g: {
        "correctable": _int(g.get("Remapped Rows/Correctable Error", "remapped_rows/remapped_row_corr")),
        "uncorrectable": _int(g.get("Remapped Rows/Uncorrectable Error", "remapped_rows/remapped_row_unc")),
        "pending": _yes(g.get("Remapped Rows/Pending", "remapped_rows/remapped_row_pending")),
        "failure": _yes(g.get("Remapped Rows/Remapping Failure Occurred", "remapped_rows/remapped_row_failure"))},
    "pcieThroughput": lambda g: {"txKBps": _int(g.get("PCI/Tx Throughput", "pci/tx_util"), "KB/s"),
                                 "rxKBps": _int(g.get("PCI/Rx Throughput", "pci/rx_util"), "KB/s")},
    "pcieReplayCounter": lambda g: _int(g.get("PCI/Replays Since Reset", "pci/replay_counter")),
}


def _mig_mode(g: _Gpu) -> dict[str, str] | None:
    current = g.get("MIG Mode/Current", "mig_mode/current_mig")
    pending = g.get("MIG Mode/Pending", "mig_mode/pending_mig")
    if current not in ("Enabled", "Disabled"):
        return None
    return {"current": current, "pending": pending if pending in ("Enabled", "Disabled") else current}


def _required(value: str | None, what: str, bus: str) -> str:
    if value is None or value in ("", "N/A"):
        raise InvalidInput(f"nvidia-smi output: GPU {bus}: no {what}")
    return value


def _device(index: int, bus_raw: str, g: _Gpu, migs: Sequence[tuple[str, str]]) -> JSON:
    bus = normalize_bus_id(bus_raw)
    total = g.get("FB Memory Usage/Total", "fb_memory_usage/total")
    entry: JSON = {
        "pciBusId": bus, "index": index,
        "name": _required(g.get("Product Name", "product_name"), "Product Name", bus),
        "uuid": _required(g.get("GPU UUID", "uuid"), "GPU UUID", bus),
        "minor": int(_required(g.get("Minor Number", "minor_number"), "Minor Number", bus)),
        "memoryTotal": _mib(_required(total, "FB Memory Usage Total", bus)),
        "migMode": _mig_mode(g), "nvlinks": [], "nvlinkPeers": [], "xidSupported": True,
        "processes": [{"pid": pid, "usedGpuMemory": _mib(used) if used and used != "N/A" else None}
                      for pid, used in g.processes()],
        "utilization": [],
    }
    telemetry: JSON = {}
    errors: dict[str, str] = {}
    for read, extract in READ_MAPPING.items():
        try:
            telemetry[read] = extract(g)
        except NotAvailable:
            errors[read] = "NOT_SUPPORTED"
    mig = _mig_instances(g, migs)
    if mig is not None:
        telemetry["migDevices"] = mig
    entry["telemetry"] = telemetry
    if errors:
        entry["telemetryErrors"] = errors
    return entry


def _mig_instances(g: _Gpu, migs: Sequence[tuple[str, str]]) -> list[JSON] | None:
    """MIG devices of the XML, named by `nvidia-smi -L`'s (profile, MIG UUID) in device-index order."""
    devices = g.mig_devices()
    if not devices:
        return None
    out = []
    for d in devices:
        i = int(d["index"] or 0)
        profile, uuid = migs[i] if i < len(migs) else ("", "")
        out.append({"gpuInstanceId": int(d["gpuInstanceId"] or 0),
                    "computeInstanceId": int(d["computeInstanceId"] or 0),
                    "profile": mig_profile(f"MIG {profile}") if profile else "", "uuid": uuid,
                    "memoryUsed": _mib(d["used"]), "memoryFree": _mib(d["free"]), "memoryTotal": _mib(d["total"])})
    return out


def parse_mig_list(text: str) -> dict[str, list[tuple[str, str]]]:
    """`nvidia-smi -L` → GPU UUID → [(MIG profile, MIG UUID)] in MIG device order."""
    out: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for line in text.splitlines():
        gm = _GPU_LINE.match(line)
        if gm:
            current = out.setdefault(gm.group(2), [])
            continue
        mm = _MIG_LINE.match(line)
        if mm and current is not None:
            current.append((mm.group(1), mm.group(3)))
    return out


def _gpus(text: str) -> tuple[str, Iterator[tuple[str, _Gpu]]]:
    if text.lstrip().startswith("<?xml") or text.lstrip().startswith("<nvidia_smi_log"):
        try:
            root = ET.fromstring(text)
        except ET.ParseError as e:
            raise InvalidInput(f"nvidia-smi XML: {e}") from e
        return (root.findtext("driver_version") or "").strip(), \
            ((str(el.get("id")), _XmlGpu(el)) for el in root.findall("gpu"))
    tree = _parse_text_tree(text)
    driver = tree.find("Driver Version")
    return (driver.value or "") if driver is not None else "", \
        ((k.split(None, 1)[1], _TextGpu(n)) for k, n in tree.children if k.startswith("GPU "))


def snapshot_from_smi(text: str, mig_list: str = "") -> JSON:
    """A validated snapshot document from one `nvidia-smi -q` or `-q -x` output (and optionally `nvidia-smi -L`,
    which alone names MIG profiles and MIG UUIDs); InvalidInput when the output lacks a GPU's identity."""
    driver, gpus = _gpus(text)
    migs = parse_mig_list(mig_list)
    devices = []
    for index, (bus, g) in enumerate(gpus):
        uuid = g.get("GPU UUID", "uuid") or ""
        devices.append(_device(index, bus, g, migs.get(uuid, [])))
    if not devices:
        raise InvalidInput("nvidia-smi output: no GPU section")
    doc: JSON = {"format": SNAPSHOT_FORMAT, "driverVersion": driver, "devices": devices}
    validate_snapshot(doc)
    return doc
