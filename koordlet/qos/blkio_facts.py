"""blkio facts: the block devices (sysfs), the agent's mounts and the current content of the cgroup files blkio QoS
targets, read without writing; koordlet.qos.blkio plans on them."""

# Upstream: pkg/koordlet/util/storageinfo.go (device inventory; upstream shells out to lsblk/vgs/lvs/findmnt, we read
# sysfs and mountinfo), pkg/koordlet/qosmanager/plugins/blkio/blkio_reconcile.go (the levels: root, BE, pods).

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from apis.core.errors import HostReadError
from apis.extension.blkio_qos import ANNOTATION_POD_BLKIO_QOS
from apis.extension.qos import koord_qos_class
from koordlet.host.driver import K8sQoS
from koordlet.host.files import read_text
from koordlet.qos.state import QoSState
from koordlet.qos.steady import SteadyFacts
from koordlet.states.model import PodMeta

V1_THROTTLE = {  # file -> IOCfg field
    "blkio.throttle.read_iops_device": "readIOPS",
    "blkio.throttle.read_bps_device": "readBPS",
    "blkio.throttle.write_iops_device": "writeIOPS",
    "blkio.throttle.write_bps_device": "writeBPS",
}
V1_COST_WEIGHT = "blkio.cost.weight"  # Anolis / Alibaba Cloud Linux iocost on v1
# The v1 bfq file that takes per-device lines; plain blkio.bfq.weight holds only the cgroup-wide number.
V1_BFQ_WEIGHT = "blkio.bfq.weight_device"
V1_COST_QOS, V1_COST_MODEL = "blkio.cost.qos", "blkio.cost.model"
V2_MAX, V2_WEIGHT, V2_BFQ_WEIGHT = "io.max", "io.weight", "io.bfq.weight"
V2_COST_QOS, V2_COST_MODEL = "io.cost.qos", "io.cost.model"
DEVICE_NUMBER = re.compile(r"[0-9]+:[0-9]+")
_OCTAL = re.compile(r"\\([0-7]{3})")


# ---- the facts --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BlockDevice:
    """One entry of <sys>/block (a whole disk or a device-mapper device) or a partition below a disk."""

    name: str  # kernel name: vda, vda1, dm-0 ("/" in a device name is "!" in sysfs)
    number: str  # MAJ:MIN
    kind: str  # disk | part | dm
    parent: str | None = None  # part: the whole disk's kernel name
    slaves: tuple[str, ...] = ()  # dm: the devices it is built on
    dm_name: str | None = None  # dm: the /dev/mapper name
    lvm: bool = False  # dm: an LVM logical volume (dm/uuid starts with "LVM-")
    scheduler: str | None = None  # disk/part: the active I/O scheduler


@dataclass(frozen=True)
class BlkioFacts:
    devices: Mapping[str, BlockDevice]
    mounts: Mapping[str, tuple[str, str]]  # mount point -> (MAJ:MIN of the mounted device, source)
    files: Mapping[str, str]  # target cgroup file -> current content, for the files the kernel has
    dirs: frozenset[str]  # target cgroup dirs that exist
    pv_names: Mapping[tuple[str, str], str] = field(default_factory=dict)  # (namespace, claim) -> PV name

    def by_number(self) -> dict[str, BlockDevice]:
        return {d.number: d for d in self.devices.values()}


def read_facts(state: QoSState, pv_names: Mapping[tuple[str, str], str] | None = None, *,
               steady: SteadyFacts | None = None) -> BlkioFacts:
    """The block inventory from sysfs, the agent's mounts, and the current content of every target file.

    `pv_names` maps a pod's PVC to its PV (upstream asks the states informer); without it a `podvolume` block on a
    PVC cannot be resolved, while CSI inline volumes need nothing. With `steady`, the inventory, the mounts and
    which cgroups are targets are kept until the pods or the NodeSLO change or the force-update window elapses (a
    volume is mounted for a pod that changes meanwhile); the target files, whose content decides what is written,
    are read every pass."""
    files: dict[str, str] = {}
    dirs: set[str] = set()
    targets = steady.get("blkio/targets", lambda: _targets(state)) if steady is not None else _targets(state)
    for target in targets:
        directory = cgroup_dir(state, target.rel)
        if not os.path.isdir(directory):
            continue
        dirs.add(directory)
        for name in _files_of(state.cgroup_version, target.root):
            path = os.path.join(directory, name)
            try:
                files[path] = read_text(path)
            except HostReadError:
                continue  # the kernel lacks this file (iocost, bfq) or the cgroup just went away
    if steady is not None:
        devices = steady.get("blkio/devices", lambda: _read_devices(state))
        mounts = steady.get("blkio/mounts", lambda: _read_mounts(state))
    else:
        devices, mounts = _read_devices(state), _read_mounts(state)
    return BlkioFacts(devices, mounts, files, frozenset(dirs), dict(pv_names or {}))


def _read(path: str) -> str | None:
    try:
        return read_text(path).strip()
    except HostReadError:
        return None


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _active_scheduler(text: str | None) -> str | None:
    m = re.search(r"\[([^\]]+)\]", text or "")
    return m.group(1) if m else None


def _read_devices(state: QoSState) -> dict[str, BlockDevice]:
    """<sys>/block/* are disks and dm devices; partitions sit in their disk's dir with a `partition` file.

    [quirk] upstream storageinfo.go finds a partition's disk as MAJ:(MIN - MIN mod 16), which is wrong for NVMe
    (259:N minors) and for disks with more than 15 partitions; sysfs names the parent directly."""
    devices: dict[str, BlockDevice] = {}
    block = state.paths.sys("block")
    for name in _listdir(block):
        d = os.path.join(block, name)
        number = _read(os.path.join(d, "dev"))
        if not number or not DEVICE_NUMBER.fullmatch(number):
            continue
        if os.path.isdir(os.path.join(d, "dm")):
            uuid = _read(os.path.join(d, "dm", "uuid")) or ""
            devices[name] = BlockDevice(name, number, "dm", slaves=tuple(_listdir(os.path.join(d, "slaves"))),
                                        dm_name=_read(os.path.join(d, "dm", "name")), lvm=uuid.startswith("LVM-"))
            continue
        scheduler = _active_scheduler(_read(os.path.join(d, "queue", "scheduler")))
        devices[name] = BlockDevice(name, number, "disk", scheduler=scheduler)
        for child in _listdir(d):
            part = os.path.join(d, child)
            part_number = _read(os.path.join(part, "dev"))
            if os.path.isfile(os.path.join(part, "partition")) and part_number and DEVICE_NUMBER.fullmatch(part_number):
                devices[child] = BlockDevice(child, part_number, "part", parent=name, scheduler=scheduler)
    # <sys>/class/block/<part> links into its disk's dir: catches a partition listed there only.
    class_block = state.paths.sys("class", "block")
    for name in _listdir(class_block):
        link = os.path.join(class_block, name)
        parent = os.path.basename(os.path.dirname(os.path.realpath(link)))
        number = _read(os.path.join(link, "dev"))
        disk = devices.get(parent)
        if (name not in devices and disk is not None and disk.kind == "disk" and number
                and DEVICE_NUMBER.fullmatch(number) and os.path.isfile(os.path.join(link, "partition"))):
            devices[name] = BlockDevice(name, number, "part", parent=parent, scheduler=disk.scheduler)
    return devices


def _unescape(text: str) -> str:
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), text)


def _read_mounts(state: QoSState) -> dict[str, tuple[str, str]]:
    """Mount point -> (MAJ:MIN, source) from <proc>/self/mountinfo, else <proc>/self/mounts; the last mount on a
    point is the visible one."""
    mounts: dict[str, tuple[str, str]] = {}
    text = _read(state.proc("self", "mountinfo"))
    if text is not None:
        for line in text.splitlines():
            head, sep, tail = line.partition(" - ")
            fields, rest = head.split(), tail.split()
            if sep and len(fields) >= 5 and len(rest) >= 2:
                mounts[os.path.normpath(_unescape(fields[4]))] = (fields[2], _unescape(rest[1]))
        return mounts
    for line in (_read(state.proc("self", "mounts")) or "").splitlines():
        parts = line.split()
        if len(parts) >= 2:
            mounts[os.path.normpath(_unescape(parts[1]))] = ("", _unescape(parts[0]))
    return mounts


# ---- levels and files -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Target:
    rel: str  # cgroup dir relative to the blkio (v1) or unified (v2) root
    root: bool  # the cgroup root level (iocost qos/model) rather than a class or pod dir


def _targets(state: QoSState) -> list[_Target]:
    if not state.nodeslo_present:
        return []
    return [_Target("", True), _Target(state.qos_dir(K8sQoS.BESTEFFORT), False)] + [
        _Target(p.cgroup_dir, False) for p in annotated_pods(state)]


def annotated_pods(state: QoSState) -> list[PodMeta]:
    """Running pods with a koordinator QoS label and the annotation (an absent annotation means: leave it alone)."""
    return [p for p in state.pods if koord_qos_class(p.raw) != "" and p.phase == "Running"
            and ANNOTATION_POD_BLKIO_QOS in pod_annotations(p)]


def pod_annotations(pod: PodMeta) -> Mapping[str, object]:
    """The pod's annotations ({} when absent or malformed)."""
    meta = pod.raw.get("metadata")
    value = meta.get("annotations") if isinstance(meta, dict) else None
    return value if isinstance(value, dict) else {}


def _files_of(version: int, root: bool) -> tuple[str, ...]:
    if version == 2:
        return (V2_COST_QOS, V2_COST_MODEL) if root else (V2_MAX, V2_WEIGHT, V2_BFQ_WEIGHT)
    return (V1_COST_QOS, V1_COST_MODEL) if root else (*V1_THROTTLE, V1_COST_WEIGHT, V1_BFQ_WEIGHT)


def cgroup_dir(state: QoSState, rel: str) -> str:
    """Same layout as koordlet.host.resources.resource_path: v1 under blkio/, v2 under the unified root."""
    rel = rel.strip("/")
    if state.cgroup_version == 2:
        return os.path.join(state.paths.cgroup_root, rel) if rel else os.path.normpath(state.paths.cgroup_root)
    return os.path.join(state.paths.cgroup_root, "blkio", rel) if rel else os.path.join(state.paths.cgroup_root,
                                                                                          "blkio")
