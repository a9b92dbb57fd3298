"""RDMA NICs as Device CR entries: PCI/InfiniBand facts from sysfs under the sys root, link/VF details from netlink."""

from __future__ import annotations

import asyncio
import errno
import os
import re
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from apis.core.errors import HostReadError
from apis.core.objects import JSON
from apis.extension.device_share import (
    LABEL_RDMA_LINK_STATE,
    LABEL_RDMA_NETDEV,
    LABEL_RDMA_VF_LINK_STATE,
    LABEL_RDMA_VF_MAC,
    LABEL_RDMA_VF_SPOOFCHK,
    LABEL_RDMA_VF_TRUST,
    LABEL_RDMA_VF_VLAN,
)
from apis.extension.resources import RESOURCE_RDMA
from apis.scheduling.device import DEVICE_TYPE_RDMA
from koordlet.devices import pci
from koordlet.devices.model import DeviceEntry, DeviceSet, topology
from koordlet.devices.pcinames import model_name
from koordlet.health import Health
from koordlet.host.files import read_text
from koordlet.host.paths import HostPaths

DEV_INFINIBAND = "/dev/infiniband"
NETWORK_CONTROLLER_CLASS = 0x02  # PCI base class of the 24-bit class code (0x020000 Ethernet, 0x020700 InfiniBand)

# Per-device labels (DeviceInfo.labels) filled from netlink; VF facts are summarised per PF because the CRD's
# VirtualFunction has only minor/busID and upstream reports a single label-less vfGroup.
MIXED = "mixed"

# pkg/koordlet/util/system/rdma.go: ibdev `mlx5_1` → minor 1; ports are healthy when their state says ACTIVE.
_MINOR = re.compile(r"^mlx\d+_(\d+)$")
_PORT_ACTIVE = "ACTIVE"
_INT32_MAX = 2**31 - 1
_UVERBS = re.compile(r"^uverbs\d+$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_RTEXT_FILTER_VF = 1  # IFLA_EXT_MASK bit asking the kernel for IFLA_VFINFO_LIST
_VF_LINK_STATES = {0: "auto", 1: "enable", 2: "disable"}  # IFLA_VF_LINK_STATE_{AUTO,ENABLE,DISABLE}
_ZERO_MAC = "00:00:00:00:00:00"


@dataclass(frozen=True)
class VFInfo:
    """One IFLA_VF_INFO of a PF netdev; None/"" where the driver does not report the attribute."""

    index: int
    mac: str = ""
    vlan: int | None = None
    spoofchk: bool | None = None
    trust: bool | None = None
    link_state: str = ""  # auto | enable | disable


@dataclass(frozen=True)
class LinkInfo:
    """A netdev as netlink reports it; `operstate` lower-cased like /sys/class/net/<dev>/operstate."""

    name: str
    operstate: str
    vfs: tuple[VFInfo, ...] = ()


class NetlinkBackend(Protocol):
    """Where link state and VF details come from (netlink lives in a network namespace, not in the sys root)."""

    def links(self, names: Sequence[str]) -> Mapping[str, LinkInfo | None]:
        """Look the netdevs up by name: a name mapped to None does not exist; a name left out was not looked up.
        Raises when netlink itself is unusable (no pyroute2, permission, missing namespace)."""
        ...


class NullNetlink:
    """No netlink: entries carry only what sysfs says."""

    def links(self, names: Sequence[str]) -> Mapping[str, LinkInfo | None]:
        return {}

    def __repr__(self) -> str:
        return "NullNetlink()"


class PyRoute2Netlink:
    """rtnetlink through pyroute2 (imported on first use), in the agent's own network namespace or in `netns`:
    an `ip netns` name or a namespace file path such as /proc/1/ns/net. One socket per `links` call."""

    def __init__(self, netns: str | None = None) -> None:
        self.netns = netns

    def __repr__(self) -> str:
        return f"PyRoute2Netlink(netns={self.netns!r})"

    def links(self, names: Sequence[str]) -> Mapping[str, LinkInfo | None]:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return self._query(names)
        # pyroute2's synchronous IPRoute drives its own event loop and fails inside a running one.
        with ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(self._query, names).result()

    def _query(self, names: Sequence[str]) -> dict[str, LinkInfo | None]:
        from pyroute2 import IPRoute
        from pyroute2.netlink.exceptions import NetlinkError

        # flags=0: never create a missing namespace (pyroute2 defaults to O_CREAT).
        kwargs: JSON = {"netns": self.netns, "flags": 0} if self.netns else {}
        out: dict[str, LinkInfo | None] = {}
        with IPRoute(**kwargs) as ipr:
            for name in names:
                try:
                    msgs = ipr.link("get", ifname=name, ext_mask=_RTEXT_FILTER_VF)
                except NetlinkError as e:
                    if e.code == errno.ENODEV:
                        out[name] = None
                        continue
                    raise
                out[name] = parse_link(msgs[0]) if msgs else None
        return out


def parse_link(msg: Any) -> LinkInfo:
    """A LinkInfo from a pyroute2 RTM_NEWLINK message (ifinfmsg)."""
    vfs: list[VFInfo] = []
    vflist = msg.get_attr("IFLA_VFINFO_LIST")
    if vflist is not None:
        vfs = [_parse_vf(info) for info in vflist.get_attrs("IFLA_VF_INFO")]
    return LinkInfo(name=str(msg.get_attr("IFLA_IFNAME") or ""),
                    operstate=str(msg.get_attr("IFLA_OPERSTATE") or "unknown").lower(), vfs=tuple(vfs))


def _parse_vf(info: Any) -> VFInfo:
    def field(attr: str, key: str) -> Any:
        value = info.get_attr(attr)
        return None if value is None else value.get(key)

    def flag(attr: str, key: str) -> bool | None:
        # The kernel sends u32 -1 for "not supported by this driver".
        value = field(attr, key)
        return bool(value) if value in (0, 1) else None

    index = field("IFLA_VF_MAC", "vf")
    vlan = field("IFLA_VF_VLAN", "vlan")
    state = field("IFLA_VF_LINK_STATE", "link_state")
    return VFInfo(index=index if isinstance(index, int) else -1, mac=str(field("IFLA_VF_MAC", "mac") or ""),
                  vlan=vlan if isinstance(vlan, int) else None,
                  spoofchk=flag("IFLA_VF_SPOOFCHK", "spoofchk"), trust=flag("IFLA_VF_TRUST", "trust"),
                  link_state=_VF_LINK_STATES.get(state, "") if isinstance(state, int) else "")


def discover(paths: HostPaths, health: Health, netlink: NetlinkBackend | None = None) -> DeviceSet:
    """RDMA entries for every non-VF network controller with an InfiniBand device, sorted by minor.

    Upstream: metricsadvisor/devices/rdma/collector_rdma_linux.go (the sysfs walk) and
    statesinformer/impl/states_device_linux.go buildRDMADevice (the entry shape). Nothing here raises: unreadable
    sysfs files and netlink failures are logged once through `health`, and the device is kept when possible.
    """
    base = paths.sys("bus", "pci", "devices")
    if not os.path.isdir(base):
        health.skip("rdma", "no-pci-sysfs", base, "PCI sysfs directory missing; no RDMA devices reported")
        return DeviceSet()
    entries: list[DeviceEntry] = []
    by_minor: dict[int, str] = {}
    for bdf in pci.list_devices(paths):
        try:
            entry = _entry(paths, health, bdf)
        except OSError as e:  # sysfs changing under us (hot-unplug, VFs being re-created)
            health.skip("rdma", "sysfs-error", bdf, str(e))
            continue
        if entry is None:
            continue
        # **[quirk]** minors come from ibdev names, so two drivers' names (mlx4_0, mlx5_0) could collide; upstream
        # sidesteps this by renumbering in buildRDMADevice (tests/devices/test_rdma.py shows that numbering). A
        # duplicate minor would break the scheduler's per-minor accounting, so the later BDF is dropped.
        minor = entry["minor"]
        if minor in by_minor:
            health.skip("rdma", "duplicate-minor", bdf, f"minor {minor} already taken by {by_minor[minor]}")
            continue
        by_minor[minor] = bdf
        entries.append(entry)
    if netlink is not None and entries:
        _attach_netlink(paths, health, netlink, entries)
    entries.sort(key=lambda e: (e["minor"], e["id"]))
    return DeviceSet(devices=entries)


def _entry(paths: HostPaths, health: Health, bdf: str) -> DeviceEntry | None:
    code = pci.class_code(paths, bdf)
    if code is None:
        health.skip("rdma", "unreadable-class", bdf, "PCI class unreadable; not considered for RDMA")
        return None
    if code >> 16 != NETWORK_CONTROLLER_CLASS or pci.is_virtual_function(paths, bdf):
        return None
    names = infiniband_devices(paths, bdf, health)
    if not names:
        return None  # an ordinary NIC (upstream warns about every one of them on every round)
    # The PF's ibdev is created before its VFs', so the smallest name is the PF's (collector_rdma_linux.go).
    m = _MINOR.match(names[0])
    if m is None or int(m.group(1)) > _INT32_MAX:
        # **[quirk]** upstream returns an error for the whole round (GetRDMAMinor), dropping every RDMA device.
        health.skip("rdma", "unsupported-ibdev-name", bdf, f"ibdev {names[0]!r} does not match mlx<N>_<minor>")
        return None
    _check_numa(paths, health, bdf)
    pcie = pci.pcie_root(paths, bdf)
    if not pcie:
        health.skip("rdma", "no-pcie-root", bdf, "no pciDDDD:BB on the resolved sysfs path; pcieID left empty")
    entry: DeviceEntry = {
        "id": bdf,
        "minor": int(m.group(1)),
        "type": DEVICE_TYPE_RDMA,
        # **[quirk]** upstream's buildRDMADevice hard-codes health=true, discarding the port check below.
        "health": port_healthy(paths, health, names[0]),
        "resources": {RESOURCE_RDMA: "100"},
        "topology": topology(pci.numa_node(paths, bdf), pcie, bdf),
    }
    vfs = sorted(pci.virtual_functions(paths, bdf)) if pci.sriov_numvfs(paths, bdf) > 0 else []
    if vfs:
        # **[quirk]** upstream emits an empty group when sriov_numvfs > 0 but no virtfn link resolves; we omit it.
        entry["vfGroups"] = [{"vfs": [{"minor": -1, "busID": vf} for vf in vfs]}]
    return entry


def _check_numa(paths: HostPaths, health: Health, bdf: str) -> None:
    # **[quirk]** upstream (helper/topology.go ParsePCIInfo) fails the whole round on an unreadable numa_node;
    # pci.numa_node reports node 0 instead, and we log it once.
    try:
        int(pci.attr(paths, bdf, "numa_node"))
    except (HostReadError, ValueError) as e:
        health.skip("rdma", "unreadable-numa-node", bdf, f"{e}; nodeID 0 reported")


def models(paths: HostPaths, entries: Sequence[DeviceEntry]) -> dict[str, str]:
    """Device id (the PF's PCI address) → model name from its PCI vendor/device ids, for the RDMA entries: the
    Device CR has no model field, so the name is read here for the device series' `model` label."""
    return {str(e["id"]): model_name(*pci.vendor_device(paths, str(e["id"])))
            for e in entries if e.get("type") == DEVICE_TYPE_RDMA and e.get("id")}


def infiniband_devices(paths: HostPaths, bdf: str, health: Health | None = None) -> list[str]:
    """The ibdev names (`mlx5_0`) of a PCI function: entries of `<sys>/bus/pci/devices/<bdf>/infiniband/`, sorted
    (what github.com/Mellanox/rdmamap GetRdmaDevicesForPcidev reads)."""
    path = os.path.join(pci.device_dir(paths, bdf), "infiniband")
    try:
        return sorted(os.listdir(path))
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as e:
        if health is not None:
            health.skip("rdma", "unreadable-infiniband", bdf, f"{path}: {e}")
        return []


def port_healthy(paths: HostPaths, health: Health, ibdev: str) -> bool:
    """Every `<sys>/class/infiniband/<ibdev>/ports/*/state` contains ACTIVE; no ports or an unreadable one → False."""
    ports_dir = paths.sys("class", "infiniband", ibdev, "ports")
    try:
        ports = sorted(os.listdir(ports_dir))
    except OSError as e:
        health.skip("rdma-port", "unreadable", ibdev, f"{ports_dir}: {e}; reported unhealthy")
        return False
    if not ports:
        health.skip("rdma-port", "no-ports", ibdev, f"{ports_dir} is empty; reported unhealthy")
        return False
    states = []
    for port in ports:
        try:
            states.append(read_text(os.path.join(ports_dir, port, "state")))
        except HostReadError as e:
            health.skip("rdma-port", "unreadable", ibdev, f"{e}; reported unhealthy")
            return False
    health.recovered("rdma-port", "unreadable", ibdev)
    return all(_PORT_ACTIVE in state for state in states)


def netdevs(paths: HostPaths, bdf: str) -> list[str]:
    """Netdev names of a PCI function (entries of `<sys>/bus/pci/devices/<bdf>/net/`), sorted."""
    try:
        return sorted(os.listdir(os.path.join(pci.device_dir(paths, bdf), "net")))
    except OSError:
        return []


def _attach_netlink(paths: HostPaths, health: Health, netlink: NetlinkBackend, entries: list[DeviceEntry]) -> None:
    wanted = {e["id"]: names[0] for e in entries if (names := netdevs(paths, e["id"]))}
    if not wanted:
        return
    backend = repr(netlink)
    try:
        found = netlink.links(sorted(set(wanted.values())))
    except Exception as e:  # any backend failure (no pyroute2, EPERM, missing netns) keeps the sysfs-only view
        health.skip("rdma-netlink", "unavailable", backend, f"{type(e).__name__}: {e}; no netdev labels")
        return
    health.recovered("rdma-netlink", "unavailable", backend)
    for entry in entries:
        name = wanted.get(entry["id"])
        if name is None or name not in found:
            continue
        link = found[name]
        if link is None:
            health.skip("rdma-netlink", "no-such-link", name,
                        f"netdev of {entry['id']} not found over netlink (not the host network namespace?)")
            continue
        health.recovered("rdma-netlink", "no-such-link", name)
        labels = link_labels(link, with_vfs="vfGroups" in entry)
        if labels:
            entry["labels"] = labels


def link_labels(link: LinkInfo, with_vfs: bool = True) -> dict[str, str]:
    """DeviceInfo labels for a PF's netdev. VF attributes are summarised: the common value, or `mixed` when the
    VFs disagree; a label is left out when any VF lacks the attribute or a value is not a valid label value."""
    labels: dict[str, str] = {}
    _put(labels, LABEL_RDMA_NETDEV, link.name)
    _put(labels, LABEL_RDMA_LINK_STATE, link.operstate)
    if with_vfs and link.vfs:
        vfs = link.vfs
        _put(labels, LABEL_RDMA_VF_MAC, _agree(["" if not v.mac else "unassigned" if v.mac == _ZERO_MAC
                                                else "assigned" for v in vfs]))
        _put(labels, LABEL_RDMA_VF_VLAN, _agree(["" if v.vlan is None else str(v.vlan) for v in vfs]))
        _put(labels, LABEL_RDMA_VF_TRUST, _agree([_on_off(v.trust) for v in vfs]))
        _put(labels, LABEL_RDMA_VF_SPOOFCHK, _agree([_on_off(v.spoofchk) for v in vfs]))
        _put(labels, LABEL_RDMA_VF_LINK_STATE, _agree([v.link_state for v in vfs]))
    return labels


def _on_off(value: bool | None) -> str:
    return "" if value is None else "on" if value else "off"


def _agree(values: list[str]) -> str:
    if not values or "" in values:
        return ""
    return values[0] if len(set(values)) == 1 else MIXED


def _put(labels: dict[str, str], key: str, value: str) -> None:
    # Values are matched by the scheduler's label selectors, so only selector-valid values are emitted.
    if value and len(value) <= 63 and _LABEL_VALUE.match(value):
        labels[key] = value


def uverbs_devices(paths: HostPaths, bdf: str) -> list[str]:
    """The `/dev/infiniband/uverbsN` char devices of a PF or VF, from `<sys>/bus/pci/devices/<bdf>/infiniband_verbs/`
    (sorted by name like Go's os.ReadDir, so [0] is what upstream runtimehooks/hooks/rdma/rdma.go injects)."""
    try:
        names = os.listdir(os.path.join(pci.device_dir(paths, bdf), "infiniband_verbs"))
    except OSError:
        return []
    return [os.path.join(DEV_INFINIBAND, n) for n in sorted(names) if _UVERBS.match(n)]
