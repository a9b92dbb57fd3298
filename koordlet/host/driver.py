"""cgroup driver (systemd/cgroupfs) detection and pod/container cgroup dirs exactly as kubelet lays them out.

Upstream: pkg/koordlet/util/system/cgroup_driver.go, cgroup_driver_linux.go, pkg/koordlet/util/cgroup_parent_utils.go.
"""

from __future__ import annotations

import enum
import logging
import os
import re

from apis.core.errors import InvalidInput
from koordlet.host.files import read_bytes
from koordlet.host.paths import HostPaths

log = logging.getLogger(__name__)


class CgroupDriver(enum.StrEnum):
    SYSTEMD = "systemd"
    CGROUPFS = "cgroupfs"


class K8sQoS(enum.StrEnum):
    GUARANTEED = "Guaranteed"
    BURSTABLE = "Burstable"
    BESTEFFORT = "BestEffort"


_QOS_DIRS = {
    CgroupDriver.SYSTEMD: {
        K8sQoS.GUARANTEED: "kubepods.slice",
        K8sQoS.BURSTABLE: "kubepods.slice/kubepods-burstable.slice",
        K8sQoS.BESTEFFORT: "kubepods.slice/kubepods-besteffort.slice",
    },
    CgroupDriver.CGROUPFS: {
        K8sQoS.GUARANTEED: "kubepods",
        K8sQoS.BURSTABLE: "kubepods/burstable",
        K8sQoS.BESTEFFORT: "kubepods/besteffort",
    },
}
_SYSTEMD_POD_PREFIX = {
    K8sQoS.GUARANTEED: "kubepods-pod",
    K8sQoS.BURSTABLE: "kubepods-burstable-pod",
    K8sQoS.BESTEFFORT: "kubepods-besteffort-pod",
}
# Pod UIDs and runtime container ids become path components: anything but a plain id is refused.
_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_SYSTEMD_SCOPE_PREFIX = {"docker": "docker-", "containerd": "cri-containerd-", "cri-o": "crio-", "pouch": "pouch-"}


def qos_dir(driver: CgroupDriver, qos: K8sQoS) -> str:
    """The kubepods QoS parent dir, relative to a subsystem (v1) or the unified root (v2)."""
    return _QOS_DIRS[driver][qos]


def pod_dir(driver: CgroupDriver, qos: K8sQoS, uid: str) -> str:
    """The pod's cgroup dir; a UID that is not a plain id (it would name another dir) is InvalidInput."""
    if not _SAFE_ID.fullmatch(uid):
        raise InvalidInput(f"pod uid {uid!r} is not a plain id")
    parent = _QOS_DIRS[driver][qos]
    if driver is CgroupDriver.SYSTEMD:
        return f"{parent}/{_SYSTEMD_POD_PREFIX[qos]}{uid.replace('-', '_')}.slice"
    return f"{parent}/pod{uid}"


def split_container_id(container_id: str) -> tuple[str, str]:
    """`containerd://abc` → (`containerd`, `abc`); an unknown runtime scheme is InvalidInput."""
    scheme, sep, cid = container_id.partition("://")
    if not sep or not cid or scheme not in _SYSTEMD_SCOPE_PREFIX:
        raise InvalidInput(f"unsupported container id {container_id!r}")
    if not _SAFE_ID.fullmatch(cid):
        raise InvalidInput(f"container id {container_id!r} is not a plain runtime id")
    return scheme, cid


def container_dir(driver: CgroupDriver, pod_rel_dir: str, container_id: str) -> str:
    scheme, cid = split_container_id(container_id)
    if driver is CgroupDriver.SYSTEMD:
        return f"{pod_rel_dir}/{_SYSTEMD_SCOPE_PREFIX[scheme]}{cid}.scope"
    return f"{pod_rel_dir}/{cid}"


_KUBELET_FLAG = re.compile(rb"--cgroup-driver[= ](\w+)")
_KUBELET_CONFIG_FLAG = re.compile(rb"--config[= ](\S+)")
_CONFIG_DRIVER = re.compile(rb"^cgroupDriver:\s*['\"]?(\w+)", re.M)


def detect_from_dirs(paths: HostPaths, cgroup_version: int) -> CgroupDriver | None:
    base = paths.cgroup_root if cgroup_version == 2 else os.path.join(paths.cgroup_root, "cpu")
    if os.path.isdir(os.path.join(base, "kubepods.slice")):
        return CgroupDriver.SYSTEMD
    if os.path.isdir(os.path.join(base, "kubepods")):
        return CgroupDriver.CGROUPFS
    return None


def detect_from_kubelet(paths: HostPaths) -> CgroupDriver | None:
    """Read the running kubelet's `--cgroup-driver` flag, or `cgroupDriver:` of its `--config` file."""
    try:
        pids = [p for p in os.listdir(paths.proc_root) if p.isdigit()]
    except OSError:
        return None
    for pid in pids:
        try:
            cmdline = read_bytes(os.path.join(paths.proc_root, pid, "cmdline")).replace(b"\0", b" ")
        except Exception:
            continue
        argv0 = cmdline.split(b" ", 1)[0]
        if not argv0.endswith(b"kubelet"):
            continue
        if m := _KUBELET_FLAG.search(cmdline):
            return _driver_or_none(m.group(1))
        if m := _KUBELET_CONFIG_FLAG.search(cmdline):
            # The config path is on the host; resolve it through the kubelet's own root.
            cfg = os.path.join(paths.proc_root, pid, "root", m.group(1).decode().lstrip("/"))
            try:
                if cm := _CONFIG_DRIVER.search(read_bytes(cfg)):
                    return _driver_or_none(cm.group(1))
            except Exception:
                pass
        return CgroupDriver.CGROUPFS  # kubelet's own default when neither flag nor config sets it
    return None


def _driver_or_none(raw: bytes) -> CgroupDriver | None:
    try:
        return CgroupDriver(raw.decode())
    except ValueError:
        return None


def detect_driver(paths: HostPaths, cgroup_version: int) -> tuple[CgroupDriver, bool]:
    """(driver, certain). Upstream falls back to systemd when neither the dirs nor kubelet tell."""
    found = detect_from_dirs(paths, cgroup_version) or detect_from_kubelet(paths)
    if found is not None:
        return found, True
    return CgroupDriver.SYSTEMD, False
