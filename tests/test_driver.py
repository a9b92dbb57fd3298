"""cgroup driver detection and kubelet's pod/container cgroup dirs (upstream cgroup_driver.go tables)."""

from __future__ import annotations

from pathlib import Path

import pytest

from apis.core.errors import InvalidInput
from koordlet.host.driver import (
    CgroupDriver,
    K8sQoS,
    container_dir,
    detect_driver,
    detect_from_kubelet,
    pod_dir,
)
from koordlet.host.paths import HostPaths

UID = "7b1ea9a6-4f0e-4b2b-a1c0-2f7d2b1d9a11"


@pytest.mark.parametrize(("driver", "qos", "expected"), [
    (CgroupDriver.SYSTEMD, K8sQoS.GUARANTEED, "kubepods.slice/kubepods-pod7b1ea9a6_4f0e_4b2b_a1c0_2f7d2b1d9a11.slice"),
    (CgroupDriver.SYSTEMD, K8sQoS.BURSTABLE,
     "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod7b1ea9a6_4f0e_4b2b_a1c0_2f7d2b1d9a11.slice"),
    (CgroupDriver.SYSTEMD, K8sQoS.BESTEFFORT,
     "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod7b1ea9a6_4f0e_4b2b_a1c0_2f7d2b1d9a11.slice"),
    (CgroupDriver.CGROUPFS, K8sQoS.GUARANTEED, f"kubepods/pod{UID}"),
    (CgroupDriver.CGROUPFS, K8sQoS.BURSTABLE, f"kubepods/burstable/pod{UID}"),
    (CgroupDriver.CGROUPFS, K8sQoS.BESTEFFORT, f"kubepods/besteffort/pod{UID}"),
])
def test_pod_dir(driver: CgroupDriver, qos: K8sQoS, expected: str) -> None:
    assert pod_dir(driver, qos, UID) == expected


@pytest.mark.parametrize(("runtime", "scope"), [
    ("docker", "docker-abc.scope"), ("containerd", "cri-containerd-abc.scope"), ("cri-o", "crio-abc.scope"),
    ("pouch", "pouch-abc.scope"),
])
def test_container_dir_per_runtime(runtime: str, scope: str) -> None:
    assert container_dir(CgroupDriver.SYSTEMD, "p", f"{runtime}://abc") == f"p/{scope}"
    assert container_dir(CgroupDriver.CGROUPFS, "p", f"{runtime}://abc") == "p/abc"


@pytest.mark.parametrize("bad", ["abc", "rkt://abc", "containerd://", ""])
def test_unsupported_container_ids_are_invalid_input(bad: str) -> None:
    with pytest.raises(InvalidInput):
        container_dir(CgroupDriver.SYSTEMD, "p", bad)


def _paths(root: Path) -> HostPaths:
    return HostPaths.under(str(root))


@pytest.mark.parametrize(("version", "dirname", "driver"), [
    (1, "cpu/kubepods.slice", CgroupDriver.SYSTEMD), (1, "cpu/kubepods", CgroupDriver.CGROUPFS),
    (2, "kubepods.slice", CgroupDriver.SYSTEMD), (2, "kubepods", CgroupDriver.CGROUPFS),
])
def test_detect_from_dirs(tmp_path: Path, version: int, dirname: str, driver: CgroupDriver) -> None:
    (tmp_path / "sys/fs/cgroup" / dirname).mkdir(parents=True)
    assert detect_driver(_paths(tmp_path), version) == (driver, True)


def _kubelet_proc(root: Path, pid: int, cmdline: list[str]) -> None:
    d = root / "proc" / str(pid)
    d.mkdir(parents=True)
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in cmdline) + b"\0")


def test_detect_from_kubelet_flag_and_config(tmp_path: Path) -> None:
    (tmp_path / "sys/fs/cgroup/cpu").mkdir(parents=True)
    _kubelet_proc(tmp_path, 10, ["/usr/bin/containerd"])
    _kubelet_proc(tmp_path, 42, ["/usr/bin/kubelet", "--cgroup-driver=cgroupfs"])
    assert detect_from_kubelet(_paths(tmp_path)) == CgroupDriver.CGROUPFS

    other = tmp_path / "b"
    _kubelet_proc(other, 7, ["/usr/bin/kubelet", "--config", "/var/lib/kubelet/config.yaml"])
    cfg = other / "proc/7/root/var/lib/kubelet/config.yaml"
    cfg.parent.mkdir(parents=True)
    cfg.write_text("kind: KubeletConfiguration\ncgroupDriver: systemd\n")
    assert detect_from_kubelet(_paths(other)) == CgroupDriver.SYSTEMD


def test_undetectable_driver_falls_back_to_systemd(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    assert detect_driver(_paths(tmp_path), 1) == (CgroupDriver.SYSTEMD, False)


@pytest.mark.parametrize("uid", ["../../etc", "a/b", "", ".hidden"])
def test_pod_uids_that_would_escape_are_invalid(uid: str) -> None:
    with pytest.raises(InvalidInput):
        pod_dir(CgroupDriver.CGROUPFS, K8sQoS.BURSTABLE, uid)


@pytest.mark.parametrize("cid", ["containerd://../../x", "docker://a/b", "cri-o://.."])
def test_container_ids_that_would_escape_are_invalid(cid: str) -> None:
    with pytest.raises(InvalidInput):
        container_dir(CgroupDriver.SYSTEMD, "p", cid)
