"""resctrl facts: what the CPU, the resctrl mount, its groups, the pods' cgroups and their annotations say.

Reading is split from planning (koordlet.qos.resctrl) so that each can be read on its own; the planner sees only
these values, which makes it a pure function that tests drive with hand-made facts. The pods' `resctrl` annotation
is decoded here, once per pod per pass (decode_resctrl), and the planner reads the decoded requests.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from apis.core.errors import InvalidInput, KoordletError
from apis.slo.types import ResctrlQOS
from koordlet.host.files import read_text
from koordlet.qos.state import QoSState
from koordlet.qos.steady import SteadyFacts
from koordlet.states.model import PodMeta

# Upstream: pkg/koordlet/util/system/resctrl.go (detection, schemata parsing), pkg/koordlet/util/resctrl/resctrl.go
# (the groups on disk), pkg/koordlet/qosmanager/plugins/resctrl/resctrl_reconcile.go (which pods' tasks are read).

ANNOTATION = "node.koordinator.sh/resctrl"
CLASS_GROUPS = ("LSR", "LS", "BE")  # the order upstream reconciles them in
POD_GROUP_PREFIX = "koordlet-"  # upstream ClosdIdPrefix
GROUP_EXPIRATION_SECONDS = 10.0  # ctrl_mgr.go ExpirationTime: a young group is not removed (NRI may be ahead)
CBM_MAX_BITS = 32  # upstream parses cbm_mask with ParseUint(.., 16, 32)
ACTIVE_PHASES = ("Pending", "Running")
_NOT_GROUPS = ("info", "mon_groups", "mon_data")
_INT64 = (-(2**63), 2**63 - 1)


# ---- the facts --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupFacts:
    """A resctrl control group koordlet owns (LSR, LS, BE, koordlet-<uid>) as it is on disk."""

    name: str
    schemata: str  # raw file text, "" when unreadable
    tasks: frozenset[int]
    # seconds since the directory's mtime; None when unknown (treated as old). Not compared: facts that differ only
    # in ages are the same facts (the manager then keeps its plan); `young` is what planning depends on.
    age: float | None = field(default=None, compare=False)
    young: bool = False  # age < GROUP_EXPIRATION_SECONDS: not removed yet (ctrl_mgr.go ExpirationTime)

    @classmethod
    def aged(cls, name: str, schemata: str, tasks: frozenset[int], age: float | None) -> GroupFacts:
        """The group with `young` derived from its age."""
        return cls(name, schemata, tasks, age, age is not None and age < GROUP_EXPIRATION_SECONDS)


@dataclass(frozen=True)
class ResctrlFacts:
    """Everything the planner needs from /proc, the resctrl mount and the pods' cgroups, read in one go.

    There is no in-memory state besides this: after a restart the plan is rebuilt from the groups on disk (the
    `koordlet-*` directories), which is what upstream's RDTEngine.Rebuild recovers, minus its bookkeeping."""

    supported: bool = False  # cpuinfo flags carry both cat_l3 and mba (upstream's only gate)
    vendor: str = ""
    mounted: bool = False  # info/L3/cbm_mask exists
    cbm_mask: int = 0  # 0 = unknown or unparsable
    min_cbm_bits: int = 1
    cache_ids: tuple[int, ...] = ()  # ids on the root schemata's L3 line
    has_mb: bool = False  # the root schemata has an MB line
    mba_mbps: bool = False  # mounted with -o mba_MBps: MB values are MBps, not percent
    bandwidth_gran: int | None = None
    min_bandwidth: int | None = None
    num_closids: int | None = None  # the smallest num_closids over L3 and MB (the kernel uses the minimum)
    ctrl_groups: tuple[str, ...] = ()  # every control group under the mount except the root, koordlet's or not
    groups: Mapping[str, GroupFacts] = field(default_factory=dict)  # koordlet's: LSR/LS/BE/koordlet-*
    pod_tids: Mapping[str, frozenset[int]] = field(default_factory=dict)  # pod uid → thread ids of its cgroups
    # pod uid → its decoded annotation, for the pods that carry one. Not compared: it follows the pods, which the
    # manager compares itself before it reuses a plan (koordlet.qos.steady).
    requests: Mapping[str, PodResctrl] = field(default_factory=dict, compare=False)


def read_facts(state: QoSState, *, now: float | None = None, steady: SteadyFacts | None = None) -> ResctrlFacts:
    """Read the facts; anything unreadable reads as absent (never raises).

    With `steady`, the CPU's flags and the mount's capabilities (info/, the root schemata's cache ids, mba_MBps) are
    kept between passes: one stat per pass tells whether resctrl is (still, or newly, or re-)mounted, and a new mount
    is read afresh. Groups, their schemata and tasks, and the pods' thread ids are read every pass."""
    now = time.time() if now is None else now
    requests = steady.get("resctrl/requests", lambda: pod_requests(state.pods)) if steady else \
        pod_requests(state.pods)
    supported, vendor = steady.get("resctrl/cpu", lambda: _read_cpu(state)) if steady else _read_cpu(state)
    mount = _mount_id(state)
    if mount is None:
        mounted, info = False, _MountInfo()
    elif steady is not None:
        mounted, info = True, steady.get(f"resctrl/mount/{mount}", lambda: _read_mount(state))
    else:
        mounted, info = True, _read_mount(state)

    ctrl: list[str] = []
    groups: dict[str, GroupFacts] = {}
    if mounted:
        for name in _listdirs(state.resctrl()):
            if name in _NOT_GROUPS or not os.path.isfile(state.resctrl(name, "schemata")):
                continue
            ctrl.append(name)
            if name in CLASS_GROUPS or name.startswith(POD_GROUP_PREFIX):
                tasks = _ids(_read(state.resctrl(name, "tasks")))
                groups[name] = GroupFacts.aged(name, _read(state.resctrl(name, "schemata")), tasks,
                                               _age(state.resctrl(name), now))

    return ResctrlFacts(
        supported=supported, vendor=vendor, mounted=mounted, cbm_mask=info.cbm_mask, min_cbm_bits=info.min_cbm_bits,
        cache_ids=info.cache_ids, has_mb=info.has_mb, mba_mbps=info.mba_mbps, bandwidth_gran=info.bandwidth_gran,
        min_bandwidth=info.min_bandwidth, num_closids=info.num_closids, ctrl_groups=tuple(sorted(ctrl)),
        groups=groups,
        pod_tids={p.uid: _pod_tids(state, p) for p in state.pods if _wants_tids(state, p, requests)} if mounted else {},
        requests=requests,
    )


@dataclass(frozen=True)
class _MountInfo:
    """What a resctrl mount tells about the CPU and the mount options; fixed for the life of the mount."""

    cbm_mask: int = 0
    min_cbm_bits: int = 1
    cache_ids: tuple[int, ...] = ()
    has_mb: bool = False
    mba_mbps: bool = False
    bandwidth_gran: int | None = None
    min_bandwidth: int | None = None
    num_closids: int | None = None


def _read_cpu(state: QoSState) -> tuple[bool, str]:
    """(cat_l3 and mba in the CPU flags, vendor_id) from cpuinfo."""
    flags: set[str] = set()
    vendor = ""
    for line in _read(state.proc("cpuinfo")).splitlines():
        if "flags" in line:
            flags.update(line.split(" "))  # upstream splits on single spaces; "flags\t\t:" is just another token
        elif not vendor and line.startswith("vendor_id"):
            vendor = line.partition(":")[2].strip()
    return "cat_l3" in flags and "mba" in flags, vendor


def _mount_id(state: QoSState) -> int | None:
    """The device number of the resctrl filesystem holding info/L3/cbm_mask (a remount gets a new one); None when
    resctrl is not mounted."""
    try:
        return os.stat(state.resctrl("info", "L3", "cbm_mask")).st_dev
    except OSError:
        return None


def _read_mount(state: QoSState) -> _MountInfo:
    try:
        cbm = parse_cbm(_read(state.resctrl("info", "L3", "cbm_mask")))
    except InvalidInput:
        cbm = 0
    root = parse_schemata(_read(state.resctrl("schemata")))
    closids = [_read_int(state.resctrl("info", "L3", "num_closids"))]
    if root.mb:
        closids.append(_read_int(state.resctrl("info", "MB", "num_closids")))
    known = [n for n in closids if n is not None]
    return _MountInfo(
        cbm_mask=cbm, min_cbm_bits=max(1, _read_int(state.resctrl("info", "L3", "min_cbm_bits")) or 1),
        cache_ids=tuple(sorted(root.l3)), has_mb=bool(root.mb), mba_mbps=_mounted_mbps(state),
        bandwidth_gran=_read_int(state.resctrl("info", "MB", "bandwidth_gran")),
        min_bandwidth=_read_int(state.resctrl("info", "MB", "min_bandwidth")),
        num_closids=min(known) if known else None)


def _read_or_none(path: str) -> str | None:
    try:
        return read_text(path)
    except KoordletError:
        return None


def _read(path: str) -> str:
    return _read_or_none(path) or ""


def _read_int(path: str) -> int | None:
    text = _read(path).strip()
    try:
        return int(text)
    except ValueError:
        return None


def _ids(text: str) -> frozenset[int]:
    return frozenset(int(t) for t in text.split() if t.isdigit())


def _listdirs(path: str) -> list[str]:
    try:
        return sorted(e.name for e in os.scandir(path) if e.is_dir(follow_symlinks=False))
    except OSError:
        return []


def _age(path: str, now: float) -> float | None:
    try:
        return now - os.stat(path).st_mtime
    except OSError:
        return None


def _mounted_mbps(state: QoSState) -> bool:
    """Whether the resctrl mount has the mba_MBps option (/proc/mounts, else /proc/self/mountinfo)."""
    for line in _read(state.proc("mounts")).splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[2] == "resctrl":
            return "mba_MBps" in parts[3].split(",")
    for line in _read(state.proc("self", "mountinfo")).splitlines():
        _, sep, tail = line.partition(" - ")
        parts = tail.split()
        if sep and len(parts) >= 3 and parts[0] == "resctrl":
            head = line.split()
            options = parts[2].split(",") + (head[5].split(",") if len(head) > 5 else [])
            return "mba_MBps" in options
    return False


def _wants_tids(state: QoSState, pod: PodMeta, requests: Mapping[str, PodResctrl]) -> bool:
    if pod.phase not in ACTIVE_PHASES:
        return False
    return pod.uid in requests or class_enabled(state, pod.koord_qos)


def _pod_tids(state: QoSState, pod: PodMeta) -> frozenset[int]:
    """Thread ids in the pod's cgroup, its containers' and any other child (the sandbox); a missing dir is skipped
    silently, as upstream does (states_pods.go, resctrl_reconcile.go)."""
    dirs = [pod.cgroup_dir, *(c.cgroup_dir for c in pod.containers if c.cgroup_dir)]
    try:
        pod_path = os.path.dirname(state.cgroup_file("tasks", pod.cgroup_dir))
    except KoordletError:
        return frozenset()
    dirs += [f"{pod.cgroup_dir.rstrip('/')}/{name}" for name in _listdirs(pod_path)]
    tids: set[int] = set()
    for rel in dict.fromkeys(dirs):
        try:
            tids |= _ids(_read(state.cgroup_file("tasks", rel)))
        except KoordletError:
            continue
    return frozenset(tids)


def class_resctrl_qos(state: QoSState, koord_qos: str) -> ResctrlQOS:
    """The NodeSLO resctrlQOS block of a koordinator QoS class (disabled for a class NodeSLO has none for)."""
    block = state.nodeslo.resource_qos_strategy.for_class(koord_qos)
    return block.resctrl_qos if block is not None else ResctrlQOS()


def class_enabled(state: QoSState, koord_qos: str) -> bool:
    """Whether a NodeSLO is present and enables resctrl for the class (its pods' tasks go to the class group)."""
    return state.nodeslo_present and class_resctrl_qos(state, koord_qos).enable


# ---- the pod annotation -----------------------------------------------------------------------------------------


class AnnotationError(InvalidInput):
    """A malformed `node.koordinator.sh/resctrl`; `path` names the bad field inside it ("" = the whole)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path  # e.g. llc.schemata.range
        self.message = message


@dataclass(frozen=True)
class ResctrlConfig:
    """apis/extension/resctrl.go ResctrlConfig, validated: ranges 0 <= start < end <= 100, percents 1..100."""

    llc_range: tuple[int, int] | None = None
    llc_per_cache: tuple[tuple[int, tuple[int, int]], ...] = ()
    mb_percent: int | None = None
    mb_per_cache: tuple[tuple[int, int], ...] = ()


class _Obj:
    """A JSON object as its key/value pairs in order (Go matches keys case-insensitively, so no dict)."""

    __slots__ = ("pairs",)

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        self.pairs = pairs


def _fold(name: str) -> str:
    # Go's encoding/json folds keys like this (so "ſ" matches "s" and the Kelvin sign matches "k")
    return "".join(c.upper().lower() if len(c.upper()) == 1 else c.lower() for c in name)


def _member(obj: _Obj, name: str, path: str, kind: str) -> Any:
    """The value for a Go struct field: keys matched case-insensitively; for an object every match is decoded into
    the same struct (merged), otherwise the last non-null match wins; null leaves the field unset (None)."""
    folded = _fold(name)
    values = [v for k, v in obj.pairs if _fold(k) == folded and v is not None]
    if kind == "object":
        pairs: list[tuple[str, Any]] = []
        for v in values:
            if not isinstance(v, _Obj):
                raise AnnotationError(path, f"must be an object, not {_json_kind(v)}")
            pairs += v.pairs
        return _Obj(pairs) if values else None
    return values[-1] if values else None


def _json_kind(v: Any) -> str:
    if isinstance(v, _Obj):
        return "an object"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, list):
        return "an array"
    if isinstance(v, str):
        return "a string"
    return f"the number {v!r}" if isinstance(v, int | float) else "null"


def _int(v: Any, path: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise AnnotationError(path, f"must be an integer, not {_json_kind(v)}")
    if not _INT64[0] <= v <= _INT64[1]:
        raise AnnotationError(path, f"{v} overflows a Go int")
    return v


def _optional_int(v: Any, path: str) -> int:
    return 0 if v is None else _int(v, path)  # an absent Go int is 0


def _array(v: Any, path: str) -> list[Any]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise AnnotationError(path, f"must be an array, not {_json_kind(v)}")
    return v


def _range(v: Any, path: str, *, required: bool) -> tuple[int, int] | None:
    items = [_int(x, f"{path}[{i}]") for i, x in enumerate(_array(v, path))]
    if not items and not required:
        return None
    if len(items) != 2:
        raise AnnotationError(path, f"must be [start, end], got {len(items)} numbers")
    start, end = items
    if start < 0 or end > 100 or end <= start:
        raise AnnotationError(path, f"[{start}, {end}] is not 0 <= start < end <= 100")
    return start, end


def _percent(v: Any, path: str) -> int:
    p = _int(v, path)
    if not 1 <= p <= 100:
        raise AnnotationError(path, f"{p} is not in [1, 100]")
    return p


def decode_resctrl(text: str) -> ResctrlConfig:
    """Decode and validate `node.koordinator.sh/resctrl`; AnnotationError names the bad field.

    Keys match case-insensitively as Go's encoding/json does (upstream tests write `cacheid`, the proposal `LLC`);
    unknown keys are ignored; numbers must be integers; `null` means unset. Where upstream silently ignores an
    entry (a range that is not two numbers, a per-cache entry without a value) or writes an out-of-range value,
    we report the field instead."""

    def _reject(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    try:
        doc = json.loads(text, object_pairs_hook=_Obj, parse_constant=_reject)
    except (ValueError, RecursionError) as e:  # RecursionError: nested deeper than the interpreter's stack
        raise AnnotationError("", f"invalid JSON: {e}") from None
    if doc is None:
        return ResctrlConfig()
    if not isinstance(doc, _Obj):
        raise AnnotationError("", f"must be a JSON object, not {_json_kind(doc)}")
    llc = _member(doc, "llc", "llc", "object") or _Obj([])
    mb = _member(doc, "mb", "mb", "object") or _Obj([])
    llc_schemata = _member(llc, "schemata", "llc.schemata", "object") or _Obj([])
    mb_schemata = _member(mb, "schemata", "mb.schemata", "object") or _Obj([])

    # llc.schemata.percent and mb.schemata.range exist in the Go type but are never used: type-checked only
    unused_percent = _member(llc_schemata, "percent", "llc.schemata.percent", "value")
    if unused_percent is not None:
        _int(unused_percent, "llc.schemata.percent")
    _array(_member(mb_schemata, "range", "mb.schemata.range", "value"), "mb.schemata.range")

    llc_range = _range(_member(llc_schemata, "range", "llc.schemata.range", "value"), "llc.schemata.range",
                       required=False)
    raw_percent = _member(mb_schemata, "percent", "mb.schemata.percent", "value")
    mb_percent = None
    if raw_percent is not None and _int(raw_percent, "mb.schemata.percent") != 0:  # 0 = unset (omitempty)
        mb_percent = _percent(raw_percent, "mb.schemata.percent")

    llc_per: dict[int, tuple[int, int]] = {}
    path = "llc.schemataPerCache"
    for i, entry in enumerate(_array(_member(llc, "schemataPerCache", path, "value"), path)):
        at = f"{path}[{i}]"
        if entry is None:
            entry = _Obj([])  # Go decodes null into the zero element
        if not isinstance(entry, _Obj):
            raise AnnotationError(at, f"must be an object, not {_json_kind(entry)}")
        cache_id = _optional_int(_member(entry, "cacheID", f"{at}.cacheID", "value"), f"{at}.cacheID")
        rng = _range(_member(entry, "range", f"{at}.range", "value"), f"{at}.range", required=True)
        assert rng is not None
        llc_per[cache_id] = rng
    mb_per: dict[int, int] = {}
    path = "mb.schemataPerCache"
    for i, entry in enumerate(_array(_member(mb, "schemataPerCache", path, "value"), path)):
        at = f"{path}[{i}]"
        if entry is None:
            entry = _Obj([])
        if not isinstance(entry, _Obj):
            raise AnnotationError(at, f"must be an object, not {_json_kind(entry)}")
        cache_id = _optional_int(_member(entry, "cacheID", f"{at}.cacheID", "value"), f"{at}.cacheID")
        mb_per[cache_id] = _percent(_optional_int(_member(entry, "percent", f"{at}.percent", "value"),
                                                  f"{at}.percent"), f"{at}.percent")
    return ResctrlConfig(llc_range, tuple(llc_per.items()), mb_percent, tuple(mb_per.items()))


def pod_annotation(pod: PodMeta) -> str | None:
    """The pod's `node.koordinator.sh/resctrl` annotation, None when absent or not a string."""
    meta = pod.raw.get("metadata") if isinstance(pod.raw, dict) else None
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    value = annotations.get(ANNOTATION) if isinstance(annotations, dict) else None
    return value if isinstance(value, str) else None


@dataclass(frozen=True)
class PodResctrl:
    """What a pod's annotation asks for, decoded: `config`, or `error` naming the bad field."""

    config: ResctrlConfig | None = None
    error: AnnotationError | None = None


def pod_requests(pods: Iterable[PodMeta]) -> dict[str, PodResctrl]:
    """Pod uid → its decoded annotation, for the pods that carry one: each annotation read and decoded once."""
    out: dict[str, PodResctrl] = {}
    for pod in pods:
        text = pod_annotation(pod)
        if text is None:
            continue
        try:
            out[pod.uid] = PodResctrl(config=decode_resctrl(text))
        except AnnotationError as e:
            out[pod.uid] = PodResctrl(error=e)
    return out



# ---- kernel formats ---------------------------------------------------------------------------------------------


def parse_cbm(text: str) -> int:
    """The root cbm_mask (hex, at most 32 bits, as upstream's ParseUint(.., 16, 32))."""
    try:
        cbm = int(text.strip(), 16)
    except ValueError:
        raise InvalidInput(f"cbm_mask {text.strip()!r} is not hexadecimal") from None
    if cbm < 0 or cbm >= 1 << CBM_MAX_BITS:
        raise InvalidInput(f"cbm_mask {text.strip()!r} does not fit {CBM_MAX_BITS} bits")
    return cbm


@dataclass(frozen=True)
class Schemata:
    l3: Mapping[int, int] = field(default_factory=dict)  # cache id → mask
    mb: Mapping[int, int] = field(default_factory=dict)  # cache id → MB value


def parse_schemata(text: str) -> Schemata:
    """ParseResctrlSchemata: `L3:0=7ff;1=7ff` (hex) and `MB:0=100;1=100` (decimal), lines trimmed (the kernel
    right-aligns names), other resources (L2, MPAM, L3CODE) and malformed entries ignored."""
    l3: dict[int, int] = {}
    mb: dict[int, int] = {}
    for line in text.splitlines():
        parts = line.strip().split(":")
        if len(parts) != 2 or parts[0].strip() not in ("L3", "MB"):
            continue
        target, base = (l3, 16) if parts[0].strip() == "L3" else (mb, 10)
        for entry in parts[1].split(";"):
            key, sep, value = entry.partition("=")
            try:
                if sep:
                    target[int(key.strip())] = int(value.strip(), base)
            except ValueError:
                continue
    return Schemata(l3, mb)
