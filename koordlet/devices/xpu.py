"""xPU (Ascend, Cambricon, ...) devices from the device-info files a device daemon writes: read, then Device entries."""

# Upstream: pkg/koordlet/metricsadvisor/devices/xpu/collector_xpu_linux.go (GetXPUDevice), pkg/koordlet/util/device.go
# (XPUDeviceInfo), pkg/koordlet/statesinformer/impl/states_device_linux.go (buildXPUDevice, buildXPUDeviceLabels,
# buildXPUDeviceAnnotations, getPartitionTableFromXPUDevices, getXPUDeviceTopology, getXPUDeviceConditions).

from __future__ import annotations

import json
import logging
import os
import re

from apis.core.errors import InvalidInput
from apis.core.objects import JSON
from apis.core.quantity import canonical_quantity
from apis.extension.device_share import (
    ANNOTATION_GPU_PARTITIONS,
    LABEL_GPU_MODEL,
    LABEL_GPU_PARTITION_POLICY,
    LABEL_GPU_VENDOR,
)
from apis.extension.resources import RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY, RESOURCE_GPU_MEMORY_RATIO
from koordlet.devices.model import DeviceEntry, DeviceSet, healthy_condition
from koordlet.devices.partitions import POLICY_HONOR, POLICY_PREFER, partition, table_annotation
from koordlet.health import Health
from koordlet.host.paths import HostPaths

log = logging.getLogger(__name__)

KIND = "xpu-device-info"
MAX_FILE_BYTES = 4 << 20  # a real file is a few KiB; refuse to load anything absurd into memory
_INT = re.compile(r"[+-]?[0-9]+")
_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)
# metav1.Condition.reason and Kubernetes label values, as the API server validates them.
_REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_BARE_RESOURCES = {"gpu-core": RESOURCE_GPU_CORE, "gpu-memory": RESOURCE_GPU_MEMORY}


def device_infos_dir(paths: HostPaths) -> str:
    """`--xpu-device-infos-dir` default, /var/run/koordlet/xpu-device-infos/, under the var-run root."""
    return paths.var_run("koordlet", "xpu-device-infos")


class DeviceInfoFiles:
    """The directory's device-info files, each with its last good content.

    **[quirk]** upstream decodes every file each round and, when one fails, keeps the previous round's whole
    inventory. Here the unit is the file: a file that cannot be read or decoded contributes its own last good
    entries (none if it never had any) and the other files contribute what they hold now, so a half-written file
    never hides its devices and a permanently broken one never hides the others'. A file that disappears drops its
    devices. Each failure is counted (Health.skip) every round and logged once per file until it reads again.
    """

    def __init__(self, paths: HostPaths, health: Health, directory: str | None = None) -> None:
        self.directory = directory or device_infos_dir(paths)
        self.health = health
        self._good: dict[str, list[JSON]] = {}  # file name -> its last decoded entries

    def read(self) -> list[JSON]:
        """All entries, concatenated in file-name order (os.ReadDir order).

        A missing directory means no xPUs (**[quirk]** upstream keeps the old ones: a removed directory means the
        daemon is gone, not that a read failed); an unreadable one keeps every file's last good entries. Dot-files
        are skipped (**[quirk]** upstream reads them; they are atomic writers' temp files).
        """
        try:
            names = sorted(os.listdir(self.directory))
        except FileNotFoundError:
            self._good.clear()
            return []
        except OSError as e:
            self.health.skip(KIND, "unreadable", self.directory, str(e))
            return [info for name in sorted(self._good) for info in self._good[name]]
        self.health.recovered(KIND, "unreadable", self.directory)
        present: dict[str, list[JSON]] = {}
        for name in names:
            path = os.path.join(self.directory, name)
            if name.startswith(".") or os.path.isdir(path):
                continue
            entries = self._read_file(path)
            if entries is not None:
                present[name] = entries
            elif os.path.lexists(path):  # bad now: its last good content, if it ever had one
                present[name] = self._good.get(name, [])
        self._good = present  # files no longer listed are forgotten
        return [info for name in names if name in present for info in present[name]]

    def _read_file(self, path: str) -> list[JSON] | None:
        """The file's entries, or None when it cannot be read or decoded (counted, logged once) or is gone."""
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_FILE_BYTES + 1)
        except OSError as e:
            if not isinstance(e, FileNotFoundError) or os.path.lexists(path):  # a dangling symlink is unreadable
                self.health.skip(KIND, "unreadable", path, str(e))
            return None
        self.health.recovered(KIND, "unreadable", path)
        try:
            if len(data) > MAX_FILE_BYTES:
                raise InvalidInput(f"larger than {MAX_FILE_BYTES} bytes")
            entries = decode_device_infos(data)
        except InvalidInput as e:
            self.health.skip(KIND, "malformed", path, str(e))
            return None
        self.health.recovered(KIND, "malformed", path)
        return entries


def read_device_infos(paths: HostPaths, health: Health, directory: str | None = None) -> list[JSON]:
    """One-shot read of the directory (`directory`, default device_infos_dir): the good files' entries, bad files
    skipped (they have no earlier content to fall back on)."""
    return DeviceInfoFiles(paths, health, directory).read()


# --- decoding: the shape Go's encoding/json accepts for []XPUDeviceInfo ---------------------------------------

def decode_device_infos(data: bytes) -> list[JSON]:
    """Decode one file like json.NewDecoder(f).Decode(&[]XPUDeviceInfo): the first JSON value must be an array (or
    null) of objects whose fields have the Go types; unknown fields are ignored, keys match case-insensitively,
    absent/null fields take Go zero values, data after the first value is ignored. Raises InvalidInput."""
    text = data.decode("utf-8", "replace")
    try:
        value, _ = json.JSONDecoder().raw_decode(text.lstrip(" \t\r\n"))
    except (ValueError, RecursionError) as e:  # RecursionError: absurdly deep nesting
        raise InvalidInput(f"not JSON: {e}") from e
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidInput(f"expected a JSON array of device infos, got {type(value).__name__}")
    out = []
    for i, item in enumerate(value):
        if item is None:
            continue  # **[quirk]** Go decodes a null element to an all-empty entry; it can only be noise
        out.append(_decode_info(item, f"[{i}]"))
    return out


def _decode_info(obj: object, where: str) -> JSON:
    f = _fields(obj, where)
    return {
        "vendor": _str(f, "vendor", where), "model": _str(f, "model", where),
        "uuid": _str(f, "uuid", where), "minor": _str(f, "minor", where),
        "resources": _str_map(f.get("resources"), f"{where}.resources"),
        "topology": _topology(f.get("topology"), f"{where}.topology"),
        "status": _status(f.get("status"), f"{where}.status"),
    }


def _fields(obj: object, where: str) -> JSON:
    """Keys folded to lower case: Go matches struct fields case-insensitively, and of several keys naming the
    same field the last one decoded wins."""
    if not isinstance(obj, dict):
        raise InvalidInput(f"{where}: expected an object, got {type(obj).__name__}")
    return {k.lower(): v for k, v in obj.items()}


def _str(f: JSON, key: str, where: str) -> str:
    v = f.get(key.lower())
    if v is None:
        return ""
    if not isinstance(v, str):
        raise InvalidInput(f"{where}.{key}: expected a string, got {type(v).__name__}")
    return v


def _bool(f: JSON, key: str, where: str) -> bool:
    v = f.get(key.lower())
    if v is None:
        return False
    if not isinstance(v, bool):
        raise InvalidInput(f"{where}.{key}: expected a boolean, got {type(v).__name__}")
    return v


def _str_map(v: object, where: str) -> dict[str, str] | None:
    if v is None:
        return None
    if not isinstance(v, dict):
        raise InvalidInput(f"{where}: expected an object, got {type(v).__name__}")
    out: dict[str, str] = {}
    for k, val in v.items():
        if val is None:
            val = ""
        if not isinstance(val, str):
            raise InvalidInput(f"{where}.{k}: expected a string, got {type(val).__name__}")
        out[k] = val
    return out


def _topology(v: object, where: str) -> JSON | None:
    if v is None:
        return None
    f = _fields(v, where)
    links_raw = f.get("p2plinks")
    links: list[dict[str, str]] | None = None
    if links_raw is not None:
        if not isinstance(links_raw, list):
            raise InvalidInput(f"{where}.p2pLinks: expected an array, got {type(links_raw).__name__}")
        links = []
        for i, link in enumerate(links_raw):
            lw = f"{where}.p2pLinks[{i}]"
            lf = _fields({} if link is None else link, lw)
            links.append({"peerMinor": _str(lf, "peerMinor", lw), "type": _str(lf, "type", lw)})
    return {"p2pLinks": links, "mustHonorPartition": _bool(f, "mustHonorPartition", where),
            "socketID": _str(f, "socketID", where), "nodeID": _str(f, "nodeID", where),
            "pcieID": _str(f, "pcieID", where), "busID": _str(f, "busID", where)}


def _status(v: object, where: str) -> JSON | None:
    if v is None:
        return None
    f = _fields(v, where)
    return {"healthy": _bool(f, "healthy", where), "errCode": _str(f, "errCode", where),
            "errMessage": _str(f, "errMessage", where)}


# --- building the Device CR entries --------------------------------------------------------------------------

def build(infos: list[JSON], health: Health | None = None) -> DeviceSet:
    """Device entries, labels and the partition annotation from decoded XPUDeviceInfo entries (upstream rules).

    Entries are sorted by uuid; labels come from the first entry as read (file order), the partition table from
    all entries in that order. Unparsable resource quantities are skipped (logged once per device and name).
    """
    devices = sorted((_entry(info, health) for info in infos), key=lambda d: str(d["id"]))
    return DeviceSet(devices, _labels(infos, health), _annotations(infos))


def _entry(info: JSON, health: Health | None) -> DeviceEntry:
    resources: dict[str, str] = {RESOURCE_GPU_MEMORY_RATIO: "100"}
    for name, value in (info.get("resources") or {}).items():
        try:
            quantity = canonical_quantity(value)
        except InvalidInput as e:
            if health is not None:
                health.skip("xpu-resource", "unparsable", f"{info.get('uuid')}/{name}", str(e))
            continue
        resources[_BARE_RESOURCES.get(name, name)] = quantity
    status = info.get("status")
    entry: DeviceEntry = {"id": info.get("uuid", ""), "minor": _go_parse_int(info.get("minor", ""), _INT32)[0],
                          "type": "gpu", "health": True if status is None else bool(status.get("healthy")),
                          "resources": resources}
    topo = info.get("topology")
    if topo is not None:
        node = str(topo.get("nodeID") or "")
        entry["topology"] = {"socketID": -1, "nodeID": _go_parse_int(node, _INT32)[0] if node else -1,
                             "pcieID": topo.get("pcieID") or "", "busID": topo.get("busID") or ""}
    if status is not None:
        if status.get("healthy"):
            entry["conditions"] = [healthy_condition(True)]
        else:
            entry["conditions"] = [healthy_condition(False, _reason(str(status.get("errCode") or "")),
                                                     str(status.get("errMessage") or ""))]
    return entry


def _go_parse_int(text: str, bounds: tuple[int, int]) -> tuple[int, bool]:
    """strconv.ParseInt(text, 10, bits): (value, ok); a syntax error gives 0, an out-of-range value the nearest
    bound, as Go returns alongside its error (upstream logs and uses the value)."""
    if not _INT.fullmatch(text):
        return 0, False
    value = int(text)
    lo, hi = bounds
    return min(max(value, lo), hi), lo <= value <= hi


def _reason(err_code: str) -> str:
    """The condition reason for an unhealthy device: errCode, else Unknown.

    **[quirk]** upstream copies errCode verbatim, but the API server rejects the whole Device update when a reason
    is not CamelCase-like (`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`) — and upstream's own daemon writes
    `chip error`. Invalid characters become `_` (`chip error` -> `chip_error`); what still does not fit is Unknown.
    """
    if not err_code:
        return "Unknown"
    if _REASON.match(err_code) and len(err_code) <= 1024:
        return err_code
    fixed = re.sub(r"[^A-Za-z0-9_,:]+", "_", err_code).strip("_,:")[:1024].rstrip(",:")
    return fixed if _REASON.match(fixed) else "Unknown"


def _labels(infos: list[JSON], health: Health | None) -> dict[str, str]:
    if not infos:
        return {}
    first = infos[0]
    labels = {LABEL_GPU_MODEL: str(first.get("model") or ""), LABEL_GPU_VENDOR: str(first.get("vendor") or "")}
    topo = first.get("topology")
    if topo is not None and topo.get("p2pLinks") is not None:
        labels[LABEL_GPU_PARTITION_POLICY] = POLICY_HONOR if topo.get("mustHonorPartition") else POLICY_PREFER
    # **[quirk]** upstream sets the values as they are; one that is not a valid label value (spaces, > 63 chars)
    # makes the API server reject the whole Device, so such a label is left out instead.
    for key, value in list(labels.items()):
        if len(value) > 63 or not _LABEL_VALUE.match(value):
            del labels[key]
            if health is not None:
                health.skip("xpu-label", "invalid-value", key, repr(value))
    return labels


def _annotations(infos: list[JSON]) -> dict[str, str]:
    """getPartitionTableFromXPUDevices: every device's p2p link is one group, its peers plus itself."""
    groups = []
    for info in infos:
        topo = info.get("topology")
        if topo is None or not topo.get("p2pLinks"):
            continue
        for link in topo["p2pLinks"]:
            if not link.get("peerMinor") or not link.get("type"):
                continue  # upstream: "invalid p2p link"
            minors = set()
            for text in [*str(link["peerMinor"]).split(","), str(info.get("minor") or "")]:
                value, ok = _go_parse_int(text, _INT64)  # strconv.Atoi; non-integers are ignored
                if ok:
                    minors.add(value)
            groups.append(partition(minors, str(link["type"]), allocation_score=1))
    table = table_annotation(groups)  # dedupes by the sorted minors, first wins, keyed by size
    return {ANNOTATION_GPU_PARTITIONS: table} if table else {}
