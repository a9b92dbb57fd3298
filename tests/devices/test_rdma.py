"""RDMA discovery: simulated ConnectX sysfs trees from real outputs, Device CR entries, netlink backends."""

from __future__ import annotations

import asyncio
import copy
import logging
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from apis.extension.device_share import (
    LABEL_RDMA_LINK_STATE,
    LABEL_RDMA_NETDEV,
    LABEL_RDMA_VF_LINK_STATE,
    LABEL_RDMA_VF_MAC,
    LABEL_RDMA_VF_SPOOFCHK,
    LABEL_RDMA_VF_TRUST,
    LABEL_RDMA_VF_VLAN,
)
from koordlet.devices import rdma
from koordlet.devices.model import DeviceSet
from koordlet.devices.rdma import LinkInfo, NullNetlink, PyRoute2Netlink, VFInfo
from koordlet.health import Health
from koordlet.host.paths import HostPaths

from conftest import CRD_DIR, require
from simpci import add_pci_device, add_rdma_nic

FIXTURES = CRD_DIR.parent / "fixtures" / "vendor-outputs"
NODE1_CR = FIXTURES / "koordinator-device-cr.gpu-rdma.p40-connectx5.k8s-node1.yaml"
Validate = Callable[[str, dict[str, Any]], None]


def as_upstream(devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The entries as upstream's buildRDMADevice finally reports them: sorted by id (PF BDF), minor = position,
    health always true, no labels. Not used by `discover`; for comparing with real upstream Device CRs."""
    out = []
    for i, d in enumerate(sorted(devices, key=lambda d: str(d["id"]))):
        d = copy.deepcopy(d)
        d.pop("labels", None)
        d["minor"] = i
        d["health"] = True
        out.append(d)
    return out


def _cr_rdma_entries() -> list[dict[str, Any]]:
    """The RDMA entries of the real k8s-node1 Device CR (the author's `.....` and `//` notes removed)."""
    require(NODE1_CR.is_file(), f"fixture {NODE1_CR} not found")
    lines = [re.sub(r"\s*//.*$", "", ln) for ln in NODE1_CR.read_text().splitlines() if ln.strip() != "....."]
    doc = yaml.safe_load("\n".join(lines))
    return [d for d in doc["spec"]["devices"] if d["type"] == "rdma"]


def _k8s_node1(root: Path, *, ibstat_view: bool) -> HostPaths:
    """k8s-node1: CX-5 (MT27800, 15b3:1017) PFs 01:00.0/01:00.1 with VF 01:00.2 (lspci-grep-mellanox...node1) plus
    the third RDMA PF 05:00.0 that only the Device CR shows. `ibstat_view` uses ibstat.connectx5-pf-vf.k8s-node1:
    mlx5_1's port Down, the VF is mlx5_2 (so 05:00.0, absent there, gets mlx5_3); otherwise every port is ACTIVE and
    05:00.0 is mlx5_2 (probed at boot, before the VF was created)."""
    pf1_state = "1: DOWN" if ibstat_view else "4: ACTIVE"
    vf_ib, third_ib = ("mlx5_2", "mlx5_3") if ibstat_view else ("mlx5_3", "mlx5_2")
    add_rdma_nic(root, "0000:01:00.0", bridges=["0000:00:01.0"], ib_dev="mlx5_0", netdev="ens1f0np0", numa_node=0,
                 device="1017", vfs=[("0000:01:00.2", vf_ib, "ens1f0v0")], uverbs=0)
    add_rdma_nic(root, "0000:01:00.1", bridges=["0000:00:01.0"], ib_dev="mlx5_1", netdev="ens1f1np1", numa_node=0,
                 device="1017", port_state=pf1_state, uverbs=2)
    add_rdma_nic(root, "0000:05:00.0", bridges=["0000:00:03.0"], ib_dev=third_ib, netdev="ens5f0np0", numa_node=-1,
                 device="1017", uverbs=3)
    # GPUs and an ordinary NIC on the same host are not RDMA devices.
    add_pci_device(root, "0000:02:00.0", bridges=["0000:00:02.0"], vendor="10de", device="1b38", class_code="030200",
                   numa_node=0, driver="nvidia")
    add_pci_device(root, "0000:06:00.0", bridges=["0000:00:1c.0"], vendor="8086", device="1521", class_code="020000",
                   numa_node=0, driver="igb")
    return HostPaths.under(str(root))


def _ids(ds: DeviceSet) -> list[str]:
    return [d["id"] for d in ds.devices]


def test_k8s_node1_matches_the_real_device_cr(tmp_path: Path) -> None:
    paths = _k8s_node1(tmp_path, ibstat_view=False)
    health = Health()
    ds = rdma.discover(paths, health)
    assert ds.devices == _cr_rdma_entries()
    assert ds.labels == {} and ds.annotations == {}
    assert not health.skipped
    # The same with the null netlink backend: nothing is added.
    assert rdma.discover(paths, Health(), NullNetlink()).devices == ds.devices


def test_k8s_node1_ibstat_view_and_upstream_renumbering(tmp_path: Path) -> None:
    ds = rdma.discover(_k8s_node1(tmp_path, ibstat_view=True), Health())
    assert [(d["id"], d["minor"], d["health"]) for d in ds.devices] == [
        ("0000:01:00.0", 0, True), ("0000:01:00.1", 1, False), ("0000:05:00.0", 3, True)]
    # Upstream's buildRDMADevice renumbers by BDF and forces health=true: exactly what the real CR shows even though
    # ibstat reports mlx5_1's port Down.
    assert as_upstream(ds.devices) == _cr_rdma_entries()
    assert ds.devices[1]["health"] is False  # as_upstream copies


def test_vfs_are_not_devices_and_listed_sorted_by_bus_id(tmp_path: Path) -> None:
    # virtfn order differs from bus order on purpose: virtfn0 → 3b:01.0
    vfs = [("0000:3b:01.0", "mlx5_9", "ens2f0v7"), *[(f"0000:3b:00.{i}", f"mlx5_{i + 1}", f"ens2f0v{i - 1}")
                                                      for i in range(2, 8)]]
    add_rdma_nic(tmp_path, "0000:3b:00.0", bridges=["0000:3a:00.0"], ib_dev="mlx5_0", netdev="ens2f0np0",
                 numa_node=0, vfs=vfs)
    paths = HostPaths.under(str(tmp_path))
    ds = rdma.discover(paths, Health())
    assert _ids(ds) == ["0000:3b:00.0"]
    group = ds.devices[0]["vfGroups"]
    assert group == [{"vfs": [{"minor": -1, "busID": b} for b in sorted(v[0] for v in vfs)]}]
    assert ds.devices[0]["topology"] == {"socketID": -1, "nodeID": 0, "pcieID": "pci0000:3a", "busID": "0000:3b:00.0"}


def test_multi_nic_with_eight_vfs_each(tmp_path: Path, validate_crd: Validate) -> None:
    roots = {"0000:1a:00.0": ("0000:17:01.0", 0), "0000:3d:00.0": ("0000:38:01.0", 0),
             "0000:9c:00.0": ("0000:97:01.0", 1), "0000:bc:00.0": ("0000:b7:01.0", 1)}
    expected = []
    for i, (bdf, (bridge, numa)) in enumerate(roots.items()):
        bus = bdf[5:7]
        vf_bdfs = [f"0000:{bus}:00.{f}" for f in range(1, 8)] + [f"0000:{bus}:01.0"]
        vfs = [(vf, f"mlx5_{4 + 8 * i + j}", f"ibp{int(bus, 16)}s0v{j}") for j, vf in enumerate(vf_bdfs)]
        add_rdma_nic(tmp_path, bdf, bridges=[bridge], ib_dev=f"mlx5_{i}", netdev=f"ibp{int(bus, 16)}s0",
                     numa_node=numa, vfs=vfs, uverbs=9 * i)
        expected.append((bdf, i, f"pci{bridge[:7]}", numa, vf_bdfs))
    paths = HostPaths.under(str(tmp_path))
    ds = rdma.discover(paths, Health())
    got = [(d["id"], d["minor"], d["topology"]["pcieID"], d["topology"]["nodeID"],
            [v["busID"] for v in d["vfGroups"][0]["vfs"]]) for d in ds.devices]
    assert got == expected
    assert all(d["health"] and d["resources"] == {"koordinator.sh/rdma": "100"} for d in ds.devices)
    assert len(pci_ids := os.listdir(paths.sys("bus", "pci", "devices"))) == 36 and len(ds.devices) == 4, pci_ids
    obj = {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Device", "metadata": {"name": "node-a"},
           "spec": {"devices": ds.devices}}
    validate_crd("scheduling.koordinator.sh_devices.yaml", obj)


def _imbue_h100(root: Path) -> HostPaths:
    """ibdev2netdev-column-t.h100-cx7x8-cx6...: 8 CX-7 InfiniBand (class 0x0207) + a dual-port CX-6 Dx Ethernet
    (class 0x0200); bus numbers from the predictable netdev names, root complexes approximate."""
    table = [("mlx5_0", "ibp26s0", False), ("mlx5_1", "enp27s0f0np0", True), ("mlx5_2", "enp27s0f1np1", False),
             ("mlx5_3", "ibp60s0", False), ("mlx5_4", "ibp77s0", False), ("mlx5_5", "ibp94s0", False),
             ("mlx5_6", "ibp156s0", False), ("mlx5_7", "enp157s0f0np0", True), ("mlx5_8", "enp157s0f1np1", False),
             ("mlx5_9", "ibp188s0", False), ("mlx5_10", "ibp204s0", False), ("mlx5_11", "ibp220s0", False)]
    for ib, net, up in table:
        m = re.match(r"^(?:ib|en)p(\d+)s0(?:f(\d))?", net)
        assert m
        bus, fn = int(m.group(1)), int(m.group(2) or 0)
        bdf = f"0000:{bus:02x}:00.{fn}"
        ethernet = net.startswith("en")
        pf = add_rdma_nic(root, bdf, bridges=[f"0000:{bus - 3:02x}:01.0"], ib_dev=ib, netdev=net,
                          numa_node=0 if bus < 0x80 else 1, device="101d" if ethernet else "1021",
                          port_state="4: ACTIVE" if up else "1: DOWN")
        if not ethernet:
            (pf / "class").write_text("0x020700\n")  # Infiniband controller
    return HostPaths.under(str(root))


def test_ethernet_and_infiniband_controllers_sorted_by_numeric_minor(tmp_path: Path) -> None:
    paths = _imbue_h100(tmp_path)
    ds = rdma.discover(paths, Health())
    assert [d["minor"] for d in ds.devices] == list(range(12))  # mlx5_10 after mlx5_9, not after mlx5_1
    by_minor = {d["minor"]: d for d in ds.devices}
    assert by_minor[0]["id"] == "0000:1a:00.0" and by_minor[10]["id"] == "0000:cc:00.0"
    assert by_minor[1]["id"] == "0000:1b:00.0" and by_minor[2]["id"] == "0000:1b:00.1"
    assert [m for m, d in by_minor.items() if d["health"]] == [1, 7]  # ports Down → unhealthy
    assert by_minor[6]["topology"] == {"socketID": -1, "nodeID": 1, "pcieID": "pci0000:99", "busID": "0000:9c:00.0"}


def test_other_pci_classes_with_infiniband_entries_are_ignored(tmp_path: Path) -> None:
    pf = add_rdma_nic(tmp_path, "0000:21:00.0", bridges=["0000:20:01.1"], ib_dev="mlx5_0", netdev="enp33s0np0",
                      numa_node=0)
    (pf / "class").write_text("0x120000\n")  # a processing accelerator that happens to expose an ibdev
    add_rdma_nic(tmp_path, "0000:41:00.0", bridges=["0000:40:01.1"], ib_dev="mlx5_1", netdev="enp65s0np0",
                 numa_node=0)
    assert _ids(rdma.discover(HostPaths.under(str(tmp_path)), Health())) == ["0000:41:00.0"]


def test_port_health(tmp_path: Path) -> None:
    for i, state in enumerate(["4: ACTIVE", "1: DOWN", "2: INIT", "3: ARMED", "4: ACTIVE", "4: ACTIVE"]):
        add_rdma_nic(tmp_path, f"0000:{0x10 + i:02x}:00.0", bridges=[f"0000:{i:02x}:01.0"], ib_dev=f"mlx5_{i}",
                     netdev=f"enp{0x10 + i}s0np0", numa_node=0, port_state=state)
    cls = tmp_path / "sys/class/infiniband"
    (cls / "mlx5_4/ports/2").mkdir()
    (cls / "mlx5_4/ports/2/state").write_text("1: DOWN\n")  # dual port, second one down
    shutil.rmtree(cls / "mlx5_5/ports")  # no ports at all
    health = Health()
    ds = rdma.discover(HostPaths.under(str(tmp_path)), health)
    assert [d["health"] for d in ds.devices] == [True, False, False, False, False, False]
    assert health.skipped[("rdma-port", "unreadable")] == 1


def test_health_reads_class_infiniband_under_the_sys_root(tmp_path: Path) -> None:
    add_rdma_nic(tmp_path, "0000:c3:00.0", bridges=["0000:c0:03.2"], ib_dev="mlx5_0", netdev="eth1", numa_node=0)
    # The device's own infiniband/<ib>/ports says ACTIVE; /sys/class/infiniband under the root is what counts.
    link = tmp_path / "sys/class/infiniband/mlx5_0"
    link.unlink()
    (link / "ports/1").mkdir(parents=True)
    (link / "ports/1/state").write_text("1: DOWN\n")
    assert rdma.discover(HostPaths.under(str(tmp_path)), Health()).devices[0]["health"] is False


def test_non_mlx_names_are_skipped_but_others_kept(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    add_rdma_nic(tmp_path, "0000:af:00.0", bridges=["0000:ae:02.0"], ib_dev="bnxt_re0", netdev="ens5f0np0",
                 numa_node=1)
    add_rdma_nic(tmp_path, "0000:86:00.0", bridges=["0000:85:00.0"], ib_dev="rocep134s0f0", netdev="ens4f0",
                 numa_node=1)
    add_rdma_nic(tmp_path, "0000:3b:00.0", bridges=["0000:3a:00.0"], ib_dev="mlx5_4", netdev="ens2f0np0",
                 numa_node=0)
    health = Health()
    paths = HostPaths.under(str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="koordlet"):
        for _ in range(3):
            ds = rdma.discover(paths, health)
    assert [(d["id"], d["minor"]) for d in ds.devices] == [("0000:3b:00.0", 4)]
    assert health.skipped[("rdma", "unsupported-ibdev-name")] == 6
    assert len([r for r in caplog.records if "unsupported-ibdev-name" in r.getMessage()]) == 2  # once per device


def test_duplicate_minor_keeps_the_first_bdf(tmp_path: Path) -> None:
    add_rdma_nic(tmp_path, "0000:04:00.0", bridges=["0000:00:02.0"], ib_dev="mlx4_0", netdev="ib0", numa_node=0)
    add_rdma_nic(tmp_path, "0000:3b:00.0", bridges=["0000:3a:00.0"], ib_dev="mlx5_0", netdev="ib1", numa_node=0)
    health = Health()
    assert _ids(rdma.discover(HostPaths.under(str(tmp_path)), health)) == ["0000:04:00.0"]
    assert health.skipped[("rdma", "duplicate-minor")] == 1


def test_unreadable_sysfs_never_crashes(tmp_path: Path) -> None:
    health = Health()
    assert rdma.discover(HostPaths.under(str(tmp_path / "nothing")), health) == DeviceSet()
    assert health.skipped[("rdma", "no-pci-sysfs")] == 1

    a = add_rdma_nic(tmp_path, "0000:01:00.0", bridges=["0000:00:01.0"], ib_dev="mlx5_0", netdev="a0", numa_node=0)
    b = add_rdma_nic(tmp_path, "0000:02:00.0", bridges=["0000:00:02.0"], ib_dev="mlx5_1", netdev="b0", numa_node=0)
    c = add_rdma_nic(tmp_path, "0000:03:00.0", bridges=["0000:00:03.0"], ib_dev="mlx5_2", netdev="c0", numa_node=1)
    (a / "numa_node").write_text("garbage\n")
    shutil.rmtree(b / "infiniband")
    os.symlink("infiniband", b / "infiniband")  # ELOOP: unreadable, not merely absent
    (c / "class").unlink()
    port_state = tmp_path / "sys/class/infiniband/mlx5_0/ports/1/state"
    port_state.unlink()
    port_state.mkdir()  # reading it fails with EISDIR
    health = Health()
    ds = rdma.discover(HostPaths.under(str(tmp_path)), health)
    assert [(d["id"], d["health"], d["topology"]["nodeID"]) for d in ds.devices] == [("0000:01:00.0", False, 0)]
    assert {k for k in health.skipped} == {("rdma", "unreadable-numa-node"), ("rdma", "unreadable-infiniband"),
                                          ("rdma", "unreadable-class"), ("rdma-port", "unreadable")}


def test_uverbs_devices(tmp_path: Path) -> None:
    """ls-l-dev-infiniband-sys-class-infiniband-net...: mlx5_0/1 at c3:00.0/.1 under c0:03.2, uverbs0/1."""
    add_rdma_nic(tmp_path, "0000:c3:00.0", bridges=["0000:c0:03.2"], ib_dev="mlx5_0", netdev="ens3f0", numa_node=0,
                 vfs=[("0000:c3:00.2", "mlx5_2", "ens3f0v0")], uverbs=0)
    add_rdma_nic(tmp_path, "0000:c3:00.1", bridges=["0000:c0:03.2"], ib_dev="mlx5_1", netdev="ens3f1", numa_node=0,
                 uverbs=3)
    paths = HostPaths.under(str(tmp_path))
    assert rdma.uverbs_devices(paths, "0000:c3:00.0") == ["/dev/infiniband/uverbs0"]
    assert rdma.uverbs_devices(paths, "0000:c3:00.2") == ["/dev/infiniband/uverbs1"]  # the VF
    assert rdma.uverbs_devices(paths, "0000:c3:00.1") == ["/dev/infiniband/uverbs3"]
    assert rdma.uverbs_devices(paths, "0000:ff:00.0") == []
    ds = rdma.discover(paths, Health())
    assert [d["topology"]["pcieID"] for d in ds.devices] == ["pci0000:c0", "pci0000:c0"]


# --- netlink -------------------------------------------------------------------------------------------------------


class FakeNetlink:
    def __init__(self, links: Mapping[str, LinkInfo | None]) -> None:
        self._links = links
        self.asked: list[list[str]] = []

    def links(self, names: Sequence[str]) -> Mapping[str, LinkInfo | None]:
        self.asked.append(list(names))
        return {n: self._links.get(n) for n in names}


class FailingNetlink:
    def links(self, names: Sequence[str]) -> Mapping[str, LinkInfo | None]:
        raise PermissionError(1, "Operation not permitted")


def _vf(i: int, mac: str = "0a:00:00:00:00:01", vlan: int = 0, trust: bool | None = False,
        spoofchk: bool | None = True, state: str = "auto") -> VFInfo:
    return VFInfo(index=i, mac=mac, vlan=vlan, spoofchk=spoofchk, trust=trust, link_state=state)


def test_netlink_labels_on_pf_entries(tmp_path: Path, validate_crd: Validate) -> None:
    paths = _k8s_node1(tmp_path, ibstat_view=False)
    fake = FakeNetlink({"ens1f0np0": LinkInfo("ens1f0np0", "up", (_vf(0),)),
                        "ens1f1np1": LinkInfo("ens1f1np1", "down", (_vf(0),)),  # VF info without VFs: ignored
                        "ens5f0np0": None})
    health = Health()
    ds = rdma.discover(paths, health, fake)
    assert fake.asked == [["ens1f0np0", "ens1f1np1", "ens5f0np0"]]
    labels = {d["id"]: d.get("labels") for d in ds.devices}
    assert labels == {
        "0000:01:00.0": {LABEL_RDMA_NETDEV: "ens1f0np0", LABEL_RDMA_LINK_STATE: "up", LABEL_RDMA_VF_MAC: "assigned",
                         LABEL_RDMA_VF_VLAN: "0", LABEL_RDMA_VF_TRUST: "off", LABEL_RDMA_VF_SPOOFCHK: "on",
                         LABEL_RDMA_VF_LINK_STATE: "auto"},
        "0000:01:00.1": {LABEL_RDMA_NETDEV: "ens1f1np1", LABEL_RDMA_LINK_STATE: "down"},
        "0000:05:00.0": None,
    }
    assert health.skipped[("rdma-netlink", "no-such-link")] == 1
    # Without labels the entries are exactly the sysfs ones.
    stripped = [{k: v for k, v in d.items() if k != "labels"} for d in ds.devices]
    assert stripped == _cr_rdma_entries()
    validate_crd("scheduling.koordinator.sh_devices.yaml", {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Device", "metadata": {"name": "k8s-node1"},
        "spec": {"devices": ds.devices}})


def test_vf_label_summaries() -> None:
    same = LinkInfo("p0", "up", tuple(_vf(i) for i in range(8)))
    assert rdma.link_labels(same)[LABEL_RDMA_VF_TRUST] == "off"
    mixed = LinkInfo("p0", "lowerlayerdown", (_vf(0, trust=True, vlan=10, state="disable"),
                                              _vf(1, mac="00:00:00:00:00:00")))
    assert rdma.link_labels(mixed) == {
        LABEL_RDMA_NETDEV: "p0", LABEL_RDMA_LINK_STATE: "lowerlayerdown", LABEL_RDMA_VF_MAC: "mixed",
        LABEL_RDMA_VF_VLAN: "mixed", LABEL_RDMA_VF_TRUST: "mixed", LABEL_RDMA_VF_SPOOFCHK: "on",
        LABEL_RDMA_VF_LINK_STATE: "mixed"}
    unsupported = LinkInfo("p0", "up", (_vf(0, trust=None, spoofchk=None), _vf(1)))
    assert LABEL_RDMA_VF_TRUST not in rdma.link_labels(unsupported)
    assert LABEL_RDMA_VF_SPOOFCHK not in rdma.link_labels(unsupported)
    assert rdma.link_labels(same, with_vfs=False) == {LABEL_RDMA_NETDEV: "p0", LABEL_RDMA_LINK_STATE: "up"}
    assert rdma.link_labels(LinkInfo("bad:name", "up")) == {LABEL_RDMA_LINK_STATE: "up"}  # not a label value


def test_parse_link_from_a_real_pyroute2_message() -> None:
    from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg

    def vf(i: int, mac: str, vlan: int, trust: int) -> tuple[str, dict[str, Any]]:
        return ("IFLA_VF_INFO", {"attrs": [
            ("IFLA_VF_MAC", {"vf": i, "mac": mac}), ("IFLA_VF_VLAN", {"vf": i, "vlan": vlan, "qos": 0}),
            ("IFLA_VF_SPOOFCHK", {"vf": i, "spoofchk": 0}), ("IFLA_VF_LINK_STATE", {"vf": i, "link_state": 2}),
            ("IFLA_VF_TRUST", {"vf": i, "trust": trust})]})

    msg = ifinfmsg()
    msg["index"] = 7
    msg["attrs"] = [("IFLA_IFNAME", "ens1f0np0"), ("IFLA_OPERSTATE", "UP"),
                    ("IFLA_VFINFO_LIST", {"attrs": [vf(0, "0a:1b:2c:3d:4e:5f", 100, 1),
                                                    vf(1, "00:00:00:00:00:00", 0, 0xFFFFFFFF)]})]
    msg.encode()
    wire = ifinfmsg(msg.data)
    wire.decode()
    assert rdma.parse_link(wire) == LinkInfo("ens1f0np0", "up", (
        VFInfo(0, "0a:1b:2c:3d:4e:5f", 100, False, True, "disable"),
        VFInfo(1, "00:00:00:00:00:00", 0, False, None, "disable")))


def test_failing_netlink_logs_once_and_keeps_devices(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    paths = _k8s_node1(tmp_path, ibstat_view=False)
    health = Health()
    backend = FailingNetlink()
    with caplog.at_level(logging.WARNING, logger="koordlet"):
        results = [rdma.discover(paths, health, backend) for _ in range(3)]
    assert all(r.devices == _cr_rdma_entries() for r in results)
    assert len([r for r in caplog.records if "rdma-netlink" in r.getMessage()]) == 1
    assert health.skipped[("rdma-netlink", "unavailable")] == 3


def test_missing_pyroute2_is_a_logged_skip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_pyroute2(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("pyroute2"):
            raise ImportError("No module named 'pyroute2'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pyroute2)
    health = Health()
    ds = rdma.discover(_k8s_node1(tmp_path, ibstat_view=False), health, PyRoute2Netlink())
    assert ds.devices == _cr_rdma_entries()
    assert health.skipped[("rdma-netlink", "unavailable")] == 1


# --- netlink against a real kernel, inside a throwaway network namespace ------------------------------------------


def _ip(*argv: str) -> None:
    subprocess.run(["ip", *argv], check=True, capture_output=True, text=True)


@pytest.fixture
def netns() -> Iterator[str]:
    require(os.geteuid() == 0, "creating a network namespace needs root")
    require(shutil.which("ip") is not None, "iproute2's `ip` is not installed")
    name = f"krdma-{uuid.uuid4().hex[:8]}"
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    require(r.returncode == 0, f"`ip netns add` failed: {r.stderr.strip()}")
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


@pytest.mark.realhost
def test_pyroute2_backend_in_a_network_namespace(tmp_path: Path, netns: str,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    # A veth pair stands in for the ConnectX netdev (it has a carrier, unlike dummy, whose operstate is "unknown").
    _ip("-n", netns, "link", "add", "ens1f0np0", "type", "veth", "peer", "name", "ens1f0np0p")
    _ip("-n", netns, "link", "set", "ens1f0np0p", "up")
    _ip("-n", netns, "link", "set", "ens1f0np0", "up")
    paths = _k8s_node1(tmp_path, ibstat_view=False)
    backend = PyRoute2Netlink(netns=netns)
    health = Health()
    ds = rdma.discover(paths, health, backend)
    labels = {d["id"]: d.get("labels") for d in ds.devices}
    # No VF labels: a veth has no IFLA_VFINFO_LIST.
    assert labels == {"0000:01:00.0": {LABEL_RDMA_NETDEV: "ens1f0np0", LABEL_RDMA_LINK_STATE: "up"},
                      "0000:01:00.1": None, "0000:05:00.0": None}
    assert health.skipped[("rdma-netlink", "no-such-link")] == 2  # ens1f1np1, ens5f0np0 are not in the netns

    _ip("-n", netns, "link", "set", "ens1f0np0", "down")
    ds = rdma.discover(paths, health, backend)
    assert ds.devices[0]["labels"][LABEL_RDMA_LINK_STATE] == "down"
    _ip("-n", netns, "link", "set", "ens1f0np0", "up")
    _ip("-n", netns, "link", "set", "ens1f0np0p", "down")  # peer down: no carrier
    assert rdma.discover(paths, health, backend).devices[0]["labels"][LABEL_RDMA_LINK_STATE] == "lowerlayerdown"

    # Inside a running event loop too (pyroute2's sync API cannot run there; the backend moves to a thread).
    async def in_loop() -> DeviceSet:
        return rdma.discover(paths, health, backend)

    assert asyncio.run(in_loop()).devices[0]["labels"][LABEL_RDMA_NETDEV] == "ens1f0np0"

    # A namespace that does not exist: logged once, devices still reported, and the namespace is not created.
    missing = f"{netns}-gone"
    gone = PyRoute2Netlink(netns=missing)
    with caplog.at_level(logging.WARNING, logger="koordlet"):
        for _ in range(2):
            assert [d.get("labels") for d in rdma.discover(paths, health, gone).devices] == [None, None, None]
    assert len([r for r in caplog.records if "PyRoute2Netlink" in r.getMessage()]) == 1
    assert not os.path.exists(f"/var/run/netns/{missing}") and not os.path.exists(f"/run/netns/{missing}")
