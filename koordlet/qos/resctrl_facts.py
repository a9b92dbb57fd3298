"""resctrl facts: what the CPU, the resctrl mount, its groups, the pods' cgroups and their annotations say.

Reading is split from planning (koordlet.qos.resctrl) so that each can be read on its own; the planner sees only
these values, which makes it a pure function that tests drive with hand-made facts. The pods' `resctrl` annotation
is decoded here, once per pod per pass (decode_resctrl), and the planner reads the decoded requests.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from apis.core.errors import InvalidInput, KoordletError
from apis.extension.errors import AnnotationError
from apis.extension.resctrl import ANNOTATION_RESCTRL, ResctrlConfig, decode_resctrl
from apis.slo.types import ResctrlQOS
from koordlet.host.files import read_text
from koordlet.qos.state import QoSState
from koordlet.qos.steady import SteadyFacts
from koordlet.states.model import PodMeta

# Upstream: pkg/koordlet/util/system/resctrl.go (detection, schemata parsing), pkg/koordlet/util/resctrl/resctrl.go
# (the groups on disk), pkg/koordlet/qosmanager/plugins/resctrl/resctrl_reconcile.go (which pods' tasks are read).

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


def pod_annotation(pod: PodMeta) -> str | None:
    """The pod's `node.koordinator.sh/resctrl` annotation, None when absent or not a string."""
    meta = pod.raw.get("metadata") if isinstance(pod.raw, dict) else None
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    value = annotations.get(ANNOTATION_RESCTRL) if isinstance(annotations, dict) else None
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
