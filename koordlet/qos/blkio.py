"""blkio QoS: per-disk throttles, io weight and iocost for the BE class, annotated pods and the cgroup root.

The facts (devices, mounts, current file content) are read by koordlet.qos.blkio_facts; this module decodes the
NodeSLO blocks and the pod annotation, resolves each block to a whole disk, and plans the writes."""

# Upstream: pkg/koordlet/qosmanager/plugins/blkio/blkio_reconcile.go (levels, files, removal),
# pkg/koordlet/util/storageinfo.go (VG and LV to disk), pkg/koordlet/resourceexecutor/updater.go (when to write).
# Upstream is cgroup v1 only; we also drive the v2 files (io.max, io.weight, io.bfq.weight, io.cost.qos/model).

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial

from apis.core.errors import PlanError
from apis.core.objects import JSON
from apis.extension.blkio_qos import ANNOTATION_POD_BLKIO_QOS
from apis.slo.types import BlkioQOS
from koordlet.host.driver import K8sQoS
from koordlet.host.resources import INT64_MAX
from koordlet.qos.blkio_facts import (
    DEVICE_NUMBER,
    V1_BFQ_WEIGHT,
    V1_COST_MODEL,
    V1_COST_QOS,
    V1_COST_WEIGHT,
    V1_THROTTLE,
    V2_BFQ_WEIGHT,
    V2_COST_MODEL,
    V2_COST_QOS,
    V2_MAX,
    V2_WEIGHT,
    BlkioFacts,
    BlockDevice,
    annotated_pods,
    cgroup_dir,
    pod_annotations,
)
from koordlet.qos.model import Plan, Write
from koordlet.qos.state import QoSState
from koordlet.states.model import PodMeta

BLOCK_TYPES = ("device", "volumegroup", "podvolume")

# The kernel keeps iops limits as u32 and reads UINT_MAX as "no limit" (a larger value is clamped to it), so the
# largest limit that reads back as written is UINT_MAX - 1.
IOPS_MAX = 2**32 - 2
DEFAULT_WEIGHT = 100
DEFAULT_LATENCY_US = 3000
DEFAULT_LATENCY_PERCENT = 95

V2_MAX_KEYS = {"rbps": "readBPS", "wbps": "writeBPS", "riops": "readIOPS", "wiops": "writeIOPS"}

_INT_FIELDS: dict[str, tuple[int, int]] = {
    "readIOPS": (0, IOPS_MAX), "writeIOPS": (0, IOPS_MAX),
    "readBPS": (0, INT64_MAX), "writeBPS": (0, INT64_MAX),
    "ioWeightPercent": (1, 100),
    "readLatency": (0, INT64_MAX), "writeLatency": (0, INT64_MAX),
    "readLatencyPercent": (0, 100), "writeLatencyPercent": (0, 100),
    **dict.fromkeys(("modelReadBPS", "modelWriteBPS", "modelReadSeqIOPS", "modelWriteSeqIOPS",
                     "modelReadRandIOPS", "modelWriteRandIOPS"), (1, INT64_MAX)),
}
_BOOL_FIELDS = ("enableUserModel",)
# blkio.cost.model / io.cost.model user-model keys in the order upstream writes them.
_MODEL_KEYS = (("rbps", "modelReadBPS"), ("rseqiops", "modelReadSeqIOPS"), ("rrandiops", "modelReadRandIOPS"),
               ("wbps", "modelWriteBPS"), ("wseqiops", "modelWriteSeqIOPS"), ("wrandiops", "modelWriteRandIOPS"))
_DM_NAME = re.compile(r"((?:[^-]|--)+)-(.+)")  # LVM doubles '-' inside names: the first lone '-' splits VG/LV


# ---- decoding ---------------------------------------------------------------------------------------------------


class _Bad(Exception):
    def __init__(self, where: str, message: str) -> None:
        super().__init__(message)
        self.where = where
        self.message = message


@dataclass(frozen=True)
class _Block:
    name: str
    type: str
    io: Mapping[str, int | bool]
    where: str  # field path of the block, e.g. blocks[0]

    def get(self, key: str, default: int) -> int:
        value = self.io.get(key)
        return default if value is None or isinstance(value, bool) else value


def _fields(obj: Mapping[str, object], known: Iterable[str]) -> JSON:
    """Go encoding/json: keys match struct fields case-insensitively ("iocfg" is ioCfg), a later key overrides an
    earlier one, null clears it, a repeated object field is merged into, unknown keys are ignored."""
    lower = {k.lower(): k for k in known}
    out: JSON = {}
    for key, value in obj.items():
        canon = lower.get(str(key).lower())
        if canon is None:
            continue
        if value is None:
            out.pop(canon, None)
        elif isinstance(value, dict) and isinstance(out.get(canon), dict):
            out[canon] = {**out[canon], **value}
        else:
            out[canon] = value
    return out


def _decode_blocks(raw: object, where: str) -> list[_Block]:
    """The `blocks` list of a BlkIOQOS object, every field type- and range-checked."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise _Bad(where, "must be a list of blocks")
    blocks = []
    for i, item in enumerate(raw):
        at = f"{where}[{i}]"
        if not isinstance(item, dict):
            raise _Bad(at, "must be an object")
        f = _fields(item, ("name", "type", "ioCfg"))
        name, kind, io_raw = f.get("name", ""), f.get("type", ""), f.get("ioCfg", {})
        if not isinstance(name, str):
            raise _Bad(f"{at}.name", "must be a string")
        if not isinstance(kind, str):
            raise _Bad(f"{at}.type", f"block type {kind!r} is not supported (one of {', '.join(BLOCK_TYPES)})")
        _check_type(kind, at)
        if not isinstance(io_raw, dict):
            raise _Bad(f"{at}.ioCfg", "must be an object")
        io: list[tuple[str, int | bool]] = []
        for key, value in _fields(io_raw, (*_INT_FIELDS, *_BOOL_FIELDS)).items():
            if key in _BOOL_FIELDS:
                if not isinstance(value, bool):
                    raise _Bad(f"{at}.ioCfg.{key}", f"{value!r} is not a boolean")
            elif isinstance(value, bool) or not isinstance(value, int):
                raise _Bad(f"{at}.ioCfg.{key}", f"{value!r} is not an integer")
            _check_io(key, value, at)
            io.append((key, value))
        blocks.append(_block(name, kind, io, at))
    return blocks


def _nodeslo_blocks(cfg: BlkioQOS, where: str) -> list[_Block]:
    """Enabled: the blocks; disabled: an empty list, which resets every entry (upstream). Their JSON types were
    checked when the NodeSLO was received; what the kernel and the resolver take is checked here."""
    if not cfg.enable:
        return []
    blocks = []
    for i, b in enumerate(cfg.blocks):
        at = f"{where}[{i}]"
        _check_type(b.type, at)
        for key, value in b.io_cfg.fields:
            _check_io(key, value, at)
        blocks.append(_block(b.name, b.type, b.io_cfg.fields, at))
    return blocks


def _check_type(kind: str, at: str) -> None:
    if kind not in BLOCK_TYPES:
        raise _Bad(f"{at}.type", f"block type {kind!r} is not supported (one of {', '.join(BLOCK_TYPES)})")


def _check_io(key: str, value: int | bool, at: str) -> None:
    if key in _INT_FIELDS and not isinstance(value, bool):
        lo, hi = _INT_FIELDS[key]
        if not lo <= value <= hi:
            raise _Bad(f"{at}.ioCfg.{key}", f"{value} is not in [{lo}, {hi}]")


def _block(name: str, kind: str, io_cfg: Iterable[tuple[str, int | bool]], at: str) -> _Block:
    io = dict(io_cfg)
    if io.get("enableUserModel") is True:
        missing = [k for _, k in _MODEL_KEYS if k not in io]
        if missing:
            # [quirk] upstream writes 0 for an unset model field, which the kernel refuses (every value >= 1).
            raise _Bad(f"{at}.ioCfg.{missing[0]}", "is required (>= 1) when enableUserModel is true")
    return _Block(name, kind, io, at)


def _decode_annotation(value: object) -> list[_Block]:
    """Upstream parseBlkIOResult: "" is an empty block list (every entry is reset); anything else must be JSON."""
    if not isinstance(value, str):
        raise _Bad("", "must be a string")
    if value == "":
        return []
    try:
        doc = json.loads(value)
    except (ValueError, RecursionError) as e:  # RecursionError: nested deeper than the interpreter's stack
        raise _Bad("", f"invalid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise _Bad("", "must be a JSON object")
    return _decode_blocks(_fields(doc, ("blocks",)).get("blocks"), "blocks")


# ---- resolving a block to the whole disk's MAJ:MIN -----------------------------------------------------------


class _Resolver:
    def __init__(self, state: QoSState, facts: BlkioFacts) -> None:
        self.state = state
        self.facts = facts
        self.devices = facts.devices
        self.numbers = facts.by_number()
        self.mapper = {d.dm_name: d.name for d in facts.devices.values() if d.dm_name}

    def block(self, block: _Block, pod: PodMeta | None) -> str:
        if block.type == "device":
            return self.source(block.name, block.where)
        if block.type == "volumegroup":
            return self.volume_group(block.name, block.where)
        if pod is None:
            raise _Bad(f"{block.where}.type", "podvolume blocks are only valid in a pod annotation")
        return self.pod_volume(pod, block)

    def source(self, source: str, where: str, number: str = "") -> str:
        """A device path (/dev/vdb, /dev/vdb1, /dev/mapper/<vg>-<lv>, /dev/<vg>/<lv>, /dev/dm-0) -> whole disk."""
        dev = self.numbers.get(number) if number else None
        if dev is None and source.startswith("/dev/mapper/"):
            dev = self.devices.get(self.mapper.get(source[len("/dev/mapper/"):], ""))
        elif dev is None and source.startswith("/dev/"):
            rest = source[len("/dev/"):]
            dev = self.devices.get(rest.replace("/", "!"))
            if dev is None and rest.count("/") == 1:
                vg, lv = rest.split("/")
                dev = self.devices.get(self.mapper.get(f"{vg.replace('-', '--')}-{lv.replace('-', '--')}", ""))
        if dev is None:
            raise _Bad(f"{where}.name", f"{source!r} is not a block device in {self.state.paths.sys('block')}")
        if dev.kind == "disk":
            return dev.number
        if dev.kind == "part":
            assert dev.parent is not None
            return self.devices[dev.parent].number
        group = _vg_of(dev)
        if group is not None:
            return self.volume_group(group, where)  # an LV counts as its VG, as upstream (LVMapperVGMap -> VGDiskMap)
        return self._one_disk(self._disks_under(dev.name, set()), f"device {source!r}", where)

    def volume_group(self, vg: str, where: str) -> str:
        lvs = [d for d in self.devices.values() if _vg_of(d) == vg]
        if not lvs:
            raise _Bad(f"{where}.name", f"volume group {vg!r} has no active logical volume in sysfs")
        pvs: set[str] = set()
        stack = list(lvs)
        seen: set[str] = set()
        while stack:
            lv = stack.pop()
            if lv.name in seen:
                continue
            seen.add(lv.name)
            for slave in lv.slaves:
                dev = self.devices.get(slave)
                if dev is not None and _vg_of(dev) == vg:
                    stack.append(dev)  # thin pool, raid image, ...: still inside the VG
                else:
                    pvs.add(slave)
        if len(pvs) != 1:
            # upstream storageinfo.go: only a VG with pv_count = 1 maps to a disk
            raise _Bad(f"{where}.name", f"volume group {vg!r} has {len(pvs)} physical volumes "
                                        f"({', '.join(sorted(pvs))}); only single-PV groups are supported")
        return self._one_disk(self._disks_under(pvs.pop(), set()), f"volume group {vg!r}", where)

    def pod_volume(self, pod: PodMeta, block: _Block) -> str:
        spec = pod.raw.get("spec")
        volumes = spec.get("volumes") if isinstance(spec, dict) else None
        volume = next((v for v in volumes or [] if isinstance(v, dict) and v.get("name") == block.name), None)
        if volume is None:
            raise _Bad(f"{block.where}.name", f"pod has no volume {block.name!r}")
        claim = volume.get("persistentVolumeClaim")
        if isinstance(claim, dict):
            claim_name = str(claim.get("claimName", ""))
            dir_name = self.facts.pv_names.get((pod.namespace, claim_name), "")
            if not dir_name:
                raise _Bad(f"{block.where}.name", f"the PV bound to claim {claim_name!r} is unknown")
        elif isinstance(volume.get("csi"), dict):
            dir_name = block.name
        else:
            raise _Bad(f"{block.where}.name", f"volume {block.name!r} is neither a PVC nor a CSI inline volume")
        if "/" in dir_name or dir_name in (".", ".."):
            raise _Bad(f"{block.where}.name", f"{dir_name!r} is not a volume directory name")
        mount_point = os.path.normpath(self.state.paths.kubelet(
            "pods", pod.uid, "volumes", "kubernetes.io~csi", dir_name, "mount"))
        mounted = self.facts.mounts.get(mount_point)
        if mounted is None:
            raise _Bad(f"{block.where}.name", f"nothing is mounted at {mount_point}")
        number, source = mounted
        return self.source(source, block.where, number)

    def _disks_under(self, name: str, seen: set[str]) -> set[str]:
        dev = self.devices.get(name)
        if dev is None or name in seen:
            return set()
        seen.add(name)
        if dev.kind == "disk":
            return {name}
        if dev.kind == "part":
            return {dev.parent} if dev.parent else set()
        out: set[str] = set()
        for slave in dev.slaves:
            out |= self._disks_under(slave, seen)
        return out

    def _one_disk(self, disks: set[str], what: str, where: str) -> str:
        if len(disks) != 1:
            raise _Bad(f"{where}.name", f"{what} sits on {len(disks)} disks ({', '.join(sorted(disks))}); "
                                        "it must map to exactly one")
        return self.devices[disks.pop()].number


def _vg_of(dev: BlockDevice) -> str | None:
    if dev.kind != "dm" or not dev.lvm or not dev.dm_name:
        return None
    m = _DM_NAME.fullmatch(dev.dm_name)
    return m.group(1).replace("--", "-") if m else None


# ---- planning ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Level:
    label: str  # for write reasons: beClass, cgroupRoot, pod ns/name
    rel: str
    error_kind: str  # Pod | NodeSLO
    error_name: str
    error_field: str  # prefix of PlanError fields
    error_reason: str
    uid: str = ""


def plan(state: QoSState, facts: BlkioFacts) -> Plan:
    """Writes for the cgroup root (iocost), the BE class dir and every annotated pod; bad input skips one level."""
    out = Plan()
    if not state.nodeslo_present:
        return out  # upstream: no NodeSLO, no reconcile at all (pods included)
    resolver = _Resolver(state, facts)
    strategy = state.nodeslo.resource_qos_strategy
    for key, block in (("lsrClass", strategy.lsr_class), ("lsClass", strategy.ls_class),
                       ("systemClass", strategy.system_class)):
        if block.blkio_qos.enable and block.blkio_qos.blocks:
            out.errors.append(PlanError("NodeSLO", "", f"resourceQOSStrategy.{key}.blkioQOS",
                                        "blkio QoS applies to beClass, cgroupRoot and pod annotations only; "
                                        "these blocks are ignored", "UnsupportedBlkioQOS"))
    # The root first (upstream: BE, root, pods): a v2 io.weight needs iocost enabled on the disk.
    root = _Level("cgroupRoot", "", "NodeSLO", "", "resourceQOSStrategy.cgroupRoot.blkioQOS", "InvalidBlkioQOS")
    iocost_on = _plan_root(state, facts, resolver, root, out)
    be = _Level("beClass", state.qos_dir(K8sQoS.BESTEFFORT), "NodeSLO", "", "resourceQOSStrategy.beClass.blkioQOS",
                "InvalidBlkioQOS")
    _plan_class(state, facts, resolver, be, partial(_nodeslo_blocks, strategy.be_class.blkio_qos, "blocks"), None,
                iocost_on, out)
    for pod in annotated_pods(state):
        level = _Level(f"pod {pod.namespace}/{pod.name}", pod.cgroup_dir, "Pod", f"{pod.namespace}/{pod.name}",
                       f"annotations[{ANNOTATION_POD_BLKIO_QOS}]", "InvalidBlkioQOSAnnotation", pod.uid)
        decode = partial(_decode_annotation, pod_annotations(pod)[ANNOTATION_POD_BLKIO_QOS])
        _plan_class(state, facts, resolver, level, decode, pod, iocost_on, out)
    return out


def _error(level: _Level, bad: _Bad) -> PlanError:
    where = f"{level.error_field}.{bad.where}" if bad.where else level.error_field
    return PlanError(level.error_kind, level.error_name, where, bad.message, level.error_reason, level.uid)


def _resolve_all(level: _Level, blocks: list[_Block], resolver: _Resolver, pod: PodMeta | None,
                 out: Plan) -> dict[str, _Block] | None:
    """MAJ:MIN -> block; None (after a PlanError) when any block fails, which skips the level as upstream does.

    [quirk] two blocks on the same disk: upstream writes both every tick (the file flips); the last one wins here."""
    resolved: dict[str, _Block] = {}
    try:
        for block in blocks:
            resolved[resolver.block(block, pod)] = block
    except _Bad as bad:
        out.errors.append(_error(level, bad))
        return None
    return resolved


def _lines(content: str | None) -> dict[str, str]:
    """MAJ:MIN -> its line, for the lines of a multi-device cgroup file that start with a device number."""
    out: dict[str, str] = {}
    for line in (content or "").splitlines():
        first = line.split(" ", 1)[0]
        if DEVICE_NUMBER.fullmatch(first):
            out[first] = line.strip()
    return out


def _kv(line: str) -> dict[str, str]:
    return dict(p.split("=", 1) for p in line.split()[1:] if "=" in p)


def _same(a: str, b: str) -> bool:
    """A value as written against the kernel's rendering of it ("90" vs "90.00")."""
    if a == b:
        return True
    try:
        return float(a) == float(b)
    except ValueError:
        return False


def _kv_holds(current: str | None, value: str) -> bool:
    """Every key=value of `value` is already in the current line (the kernel prints more keys than we set)."""
    if current is None:
        return False
    have = _kv(current)
    return all(k in have and _same(have[k], v) for k, v in _kv(value).items())


def _plan_root(state: QoSState, facts: BlkioFacts, resolver: _Resolver, level: _Level, out: Plan) -> set[str]:
    """blkio.cost.qos / io.cost.qos and the cost model per configured disk; other disks get enable=0.

    Returns the disks whose iocost is (or is being) enabled."""
    v2 = state.cgroup_version == 2
    directory = cgroup_dir(state, "")
    qos_path = os.path.join(directory, V2_COST_QOS if v2 else V1_COST_QOS)
    model_path = os.path.join(directory, V2_COST_MODEL if v2 else V1_COST_MODEL)
    current_qos = _lines(facts.files.get(qos_path))
    enabled = {n for n, line in current_qos.items() if _kv(line).get("enable") == "1"}
    try:
        blocks = _nodeslo_blocks(state.nodeslo.resource_qos_strategy.cgroup_root.blkio_qos, "blocks")
    except _Bad as bad:
        out.errors.append(_error(level, bad))
        return enabled
    resolved = _resolve_all(level, blocks, resolver, None, out)
    if resolved is None or qos_path not in facts.files:
        return enabled  # no iocost in this kernel: nothing to configure or reset
    current_model = _lines(facts.files.get(model_path))
    qos_res, model_res = (None, None) if v2 else (V1_COST_QOS, V1_COST_MODEL)
    for number, block in resolved.items():
        qos = (f"{number} enable=1 ctrl=user rpct={block.get('readLatencyPercent', DEFAULT_LATENCY_PERCENT)} "
               f"rlat={block.get('readLatency', DEFAULT_LATENCY_US)} "
               f"wpct={block.get('writeLatencyPercent', DEFAULT_LATENCY_PERCENT)} "
               f"wlat={block.get('writeLatency', DEFAULT_LATENCY_US)}")
        # [quirk] upstream writes unless a line equals the value exactly; the kernel prints "rpct=95.00" and
        # min/max, so it rewrote every tick. Comparing key by key keeps an unchanged node quiet.
        if not _kv_holds(current_qos.get(number), qos):
            out.writes.append(Write(qos_path, qos, f"blkio {level.label}: {block.type} {block.name}", qos_res,
                                    compare="line"))
        if block.io.get("enableUserModel") is True:
            model = f"{number} ctrl=user " + " ".join(f"{k}={block.get(f, 0)}" for k, f in _MODEL_KEYS)
        else:
            model = f"{number} ctrl=auto"
        if model_path in facts.files and not _kv_holds(current_model.get(number), model):
            out.writes.append(Write(model_path, model, f"blkio {level.label}: {block.type} {block.name}", model_res,
                                    compare="line"))
    for number, line in current_qos.items():
        if number not in resolved and _kv(line).get("enable") != "0":
            out.writes.append(Write(qos_path, f"{number} enable=0", f"blkio {level.label}: reset {number}", qos_res,
                                    compare="line"))
    return set(resolved)


def _plan_class(state: QoSState, facts: BlkioFacts, resolver: _Resolver, level: _Level,
                decode: Callable[[], list[_Block]], pod: PodMeta | None, iocost_on: set[str], out: Plan) -> None:
    """Throttles and weight for the BE class dir or a pod dir (`decode` gives the blocks or raises _Bad)."""
    try:
        blocks = decode()
    except _Bad as bad:
        out.errors.append(_error(level, bad))
        return
    resolved = _resolve_all(level, blocks, resolver, pod, out)
    directory = cgroup_dir(state, level.rel)
    if resolved is None or directory not in facts.dirs:
        return  # bad input (reported), or no such cgroup (yet)
    if state.cgroup_version == 2:
        _plan_v2(facts, directory, level, resolved, iocost_on, resolver, out)
    else:
        _plan_v1(facts, directory, level, resolved, resolver, out)


def _weight(block: _Block) -> int:
    return block.get("ioWeightPercent", DEFAULT_WEIGHT)


def _uses_bfq(resolver: _Resolver, number: str) -> bool:
    dev = resolver.numbers.get(number)
    return dev is not None and dev.scheduler == "bfq"  # per-device bfq weights need bfq on that disk


def _plan_v1(facts: BlkioFacts, directory: str, level: _Level, resolved: Mapping[str, _Block],
             resolver: _Resolver, out: Plan) -> None:
    def write(name: str, value: str, why: str, resource: str | None) -> None:
        out.writes.append(Write(os.path.join(directory, name), value, f"blkio {level.label}: {why}", resource,
                                compare="line"))

    # Throttles (updater.go CheckIfBlkQOSNeedUpdate): "<n> 0" only clears an existing line; any other value is
    # written unless that exact line is there. A disk no longer configured is reset to 0.
    for name, key in V1_THROTTLE.items():
        current = _lines(facts.files.get(os.path.join(directory, name)))
        for number, block in resolved.items():
            value = block.get(key, 0)
            line = f"{number} {value}"
            needed = number in current if value == 0 else current.get(number) != line
            if needed:
                write(name, line, f"{block.type} {block.name}", name)
        for number in current.keys() - resolved.keys():
            write(name, f"{number} 0", f"reset {number}", name)
    cost = os.path.join(directory, V1_COST_WEIGHT)
    bfq = os.path.join(directory, V1_BFQ_WEIGHT)
    if cost in facts.files:
        current = _lines(facts.files[cost])
        for number, block in resolved.items():
            line = f"{number} {_weight(block)}"
            if current.get(number) != line:
                write(V1_COST_WEIGHT, line, f"{block.type} {block.name}", V1_COST_WEIGHT)
        for number in current.keys() - resolved.keys():
            # [quirk] upstream also writes "<n> 100" for a stale disk that has no weight line, which adds an entry
            # (overriding the cgroup's own default); we reset only the entries that exist.
            if current[number] != f"{number} {DEFAULT_WEIGHT}":
                write(V1_COST_WEIGHT, f"{number} {DEFAULT_WEIGHT}", f"reset {number}", V1_COST_WEIGHT)
    elif bfq in facts.files:
        _plan_weight_lines(facts, bfq, level, resolved, lambda n: _uses_bfq(resolver, n), out)


def _plan_weight_lines(facts: BlkioFacts, path: str, level: _Level, resolved: Mapping[str, _Block],
                       applies: Callable[[str], bool], out: Plan) -> None:
    """io.weight / io.bfq.weight / blkio.bfq.weight_device: "<n> <weight>" per disk, "<n> default" to remove."""
    current = _lines(facts.files.get(path))
    mine = {n: b for n, b in resolved.items() if applies(n)}
    for number, block in mine.items():
        line = f"{number} {_weight(block)}"
        if current.get(number) != line:
            out.writes.append(Write(path, line, f"blkio {level.label}: {block.type} {block.name}", compare="line"))
    for number in current.keys() - mine.keys():
        out.writes.append(Write(path, f"{number} default", f"blkio {level.label}: reset {number}", compare="line"))


def _plan_v2(facts: BlkioFacts, directory: str, level: _Level, resolved: Mapping[str, _Block],
             iocost_on: set[str], resolver: _Resolver, out: Plan) -> None:
    path = os.path.join(directory, V2_MAX)
    current = {n: _kv(line) for n, line in _lines(facts.files.get(path)).items()}
    unlimited = dict.fromkeys(V2_MAX_KEYS, "max")
    for number, block in resolved.items():
        want = {k: str(block.get(f, 0) or "max") for k, f in V2_MAX_KEYS.items()}
        have = {**unlimited, **current.get(number, {})}
        if want != have:  # all "max" with no line: nothing to clear
            value = f"{number} " + " ".join(f"{k}={v}" for k, v in want.items())
            out.writes.append(Write(path, value, f"blkio {level.label}: {block.type} {block.name}", compare="line"))
    for number, have in current.items():
        if number not in resolved and {**unlimited, **have} != unlimited:
            value = f"{number} " + " ".join(f"{k}=max" for k in V2_MAX_KEYS)
            out.writes.append(Write(path, value, f"blkio {level.label}: reset {number}", compare="line"))
    weight = os.path.join(directory, V2_WEIGHT)
    bfq = os.path.join(directory, V2_BFQ_WEIGHT)
    has_weight = weight in facts.files
    if has_weight:
        _plan_weight_lines(facts, weight, level, resolved, lambda n: n in iocost_on, out)
    if bfq in facts.files:
        _plan_weight_lines(facts, bfq, level, resolved,
                           lambda n: not (has_weight and n in iocost_on) and _uses_bfq(resolver, n), out)
