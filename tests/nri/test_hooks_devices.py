"""Device hooks at CreateContainer: exact adjustments for GPU, HAMi-core, RDMA (VFs and PFs on a simulated sysfs and
/dev tree), Ascend and Cambricon, and what a malformed allocation or a missing device node gives.

The RDMA node is Koordinator's GPU+RDMA user-manual host k8s-node1 (ConnectX-5 PFs 0000:01:00.0/.1 as mlx5_0/1, VF
0000:01:00.2 as mlx5_2) with the device numbers a ConnectX host shows (`ls -l /dev/infiniband`: rdma_cm 10:57,
uverbs<N> 231:192+N). Device nodes need st_rdev, so those tests mknod them and run as root only.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from test_hooks_allocation import fixture_annotation

from apis.extension.device_allocated import ANNOTATION_DEVICE_ALLOCATED
from koordlet.host.paths import HostPaths
from koordlet.nri.hooks import stages
from koordlet.nri.hooks.facts import NodeFacts, NodeFactsReader
from koordlet.nri.hooks.model import (
    FACT_DEV,
    FACT_PCI,
    Adjustment,
    ContainerInfo,
    DeviceNode,
    HookResult,
    HostDir,
    Mount,
    PodInfo,
)
from koordlet.nri.hooks.options import HookOptions

from conftest import require
from simpci import add_rdma_nic, add_vfs

UID = "6f1c2a9e-3b1d-4c55-9a0e-2d5b8f7c1a10"
CONTAINER = ContainerInfo("c0ffee", "sandbox-1", "main")
ALL_GATES = {"GPUEnvInject": True, "RDMADeviceInject": True, "Resctrl": True, "GroupIdentity": True,
             "HamiCoreVGPUMonitor": False, "CPUSetAllocator": False}
FIELD = f"annotations[{ANNOTATION_DEVICE_ALLOCATED}]"


def pod(alloc: object = None, *, labels: dict[str, str] | None = None, raw: str | None = None) -> PodInfo:
    annotations = {} if alloc is None and raw is None else {
        ANNOTATION_DEVICE_ALLOCATED: raw if raw is not None else json.dumps(alloc)}
    return PodInfo("sandbox-1", UID, "team-a", "trainer", labels=labels or {}, annotations=annotations,
                   cgroup_parent="kubepods-burstable-pod6f1c2a9e_3b1d_4c55_9a0e_2d5b8f7c1a10.slice")


def create(p: PodInfo, facts: NodeFacts, *, gates: dict[str, bool] | None = None, **options: Any) -> HookResult:
    return stages.create_container(p, CONTAINER, facts, HookOptions(gates=dict(ALL_GATES, **(gates or {})), **options))


def bare_facts(tmp_path: Path, **kw: Any) -> NodeFacts:
    return NodeFacts(paths=HostPaths.under(str(tmp_path)), **kw)


# ---- GPU and HAMi-core --------------------------------------------------------------------------------------------


def test_gpu_minors_in_annotation_order(tmp_path: Path) -> None:
    r = create(pod({"gpu": [{"minor": 3}, {"minor": 0}, {"minor": 1}]}), bare_facts(tmp_path))
    assert r.adjustment == Adjustment(env={"NVIDIA_VISIBLE_DEVICES": "3,0,1"})
    assert (r.failures, r.plan.writes, r.host_dirs, r.stale_facts) == ([], [], [], frozenset())


def test_gpu_uuids_only_with_the_option_and_when_every_gpu_has_one(tmp_path: Path) -> None:
    both = {"gpu": [{"minor": 0, "id": "GPU-989aa251-1dfe-5bbc-7c12-46e817b1de9a"},
                    {"minor": 1, "id": "GPU-e8a40bd0-e484-2d1b-cad9-75b043139b0c"}]}
    facts = bare_facts(tmp_path)
    assert create(pod(both), facts).adjustment.env == {"NVIDIA_VISIBLE_DEVICES": "0,1"}
    assert create(pod(both), facts, gpu_env_uuid=True).adjustment.env == {
        "NVIDIA_VISIBLE_DEVICES": "GPU-989aa251-1dfe-5bbc-7c12-46e817b1de9a,GPU-e8a40bd0-e484-2d1b-cad9-75b043139b0c"}
    one = {"gpu": [both["gpu"][0], {"minor": 1}]}
    assert create(pod(one), facts, gpu_env_uuid=True).adjustment.env == {"NVIDIA_VISIBLE_DEVICES": "0,1"}


def hami(resources: dict[str, str]) -> PodInfo:
    return pod({"gpu": [{"minor": 1, "resources": resources}, {"minor": 2, "resources": {}}]},
               labels={"koordinator.sh/gpu-isolation-provider": "HAMi-core"})


def test_hami_core_below_a_whole_gpu(tmp_path: Path) -> None:
    r = create(hami({"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory": "16Gi",
                     "koordinator.sh/gpu-memory-ratio": "50"}), bare_facts(tmp_path))
    assert r.adjustment == Adjustment(
        env={"NVIDIA_VISIBLE_DEVICES": "1,2", "CUDA_DEVICE_MEMORY_LIMIT": "17179869184", "CUDA_DEVICE_SM_LIMIT": "50",
             "LD_PRELOAD": "/usr/local/vgpu/libvgpu.so"},
        mounts=[Mount("/usr/local/vgpu/libvgpu.so", "/usr/local/vgpu/libvgpu.so", "bind", ("rbind",)),
                Mount("/tmp/vgpulock", "/tmp/vgpulock", "bind", ("rbind",))])
    assert r.host_dirs == [] and r.failures == []


def test_hami_core_without_gpu_core_and_with_the_vgpu_monitor(tmp_path: Path) -> None:
    r = create(hami({"koordinator.sh/gpu-memory": "8Gi", "koordinator.sh/gpu-memory-ratio": "33"}),
               bare_facts(tmp_path), gates={"HamiCoreVGPUMonitor": True}, hami_core_library_path="/opt/hami/lib.so")
    host_dir = f"/opt/hami/containers/{UID}_main"
    assert r.adjustment == Adjustment(
        env={"NVIDIA_VISIBLE_DEVICES": "1,2", "CUDA_DEVICE_MEMORY_LIMIT": str(8 << 30),
             "LD_PRELOAD": "/opt/hami/lib.so", "CUDA_DEVICE_MEMORY_SHARED_CACHE": f"/opt/hami/{UID}_main.cache"},
        mounts=[Mount("/opt/hami/lib.so", "/opt/hami/lib.so"), Mount("/tmp/vgpulock", "/tmp/vgpulock"),
                Mount("/opt/hami", host_dir)])
    # the directory is the caller's to (re)create: no hook writes a file
    assert r.host_dirs == [HostDir(host_dir, 0o777, True, "HAMi-core vGPU monitor dir of team-a/trainer/main")]
    assert r.plan.writes == []


def test_hami_core_whole_gpu_sets_only_the_visible_devices(tmp_path: Path) -> None:
    r = create(hami({"koordinator.sh/gpu-memory": "23040Mi", "koordinator.sh/gpu-memory-ratio": "100"}),
               bare_facts(tmp_path), gates={"HamiCoreVGPUMonitor": True})
    assert r.adjustment == Adjustment(env={"NVIDIA_VISIBLE_DEVICES": "1,2"})
    assert r.host_dirs == []


def test_hami_core_missing_ratio_or_memory_adds_nothing(tmp_path: Path) -> None:
    r = create(hami({"koordinator.sh/gpu-memory": "8Gi"}), bare_facts(tmp_path))
    assert not r.adjustment
    (f,) = r.failures
    assert (f.kind, f.name, f.uid, f.reason) == ("Pod", "team-a/trainer", UID, "RuntimeHookFailed")
    assert f.field == f"{FIELD}.gpu[0].resources[koordinator.sh/gpu-memory-ratio]"
    assert f.message.startswith("gpu env inject: missing")
    r = create(hami({"koordinator.sh/gpu-memory-ratio": "25"}), bare_facts(tmp_path))
    assert not r.adjustment
    assert [f.field for f in r.failures] == [f"{FIELD}.gpu[0].resources[koordinator.sh/gpu-memory]"]
    # [decision] the v1.6 release text's `hami-core` is HAMi-core too (upstream compares case-sensitively)
    spelled = pod({"gpu": [{"minor": 0}]}, labels={"koordinator.sh/gpu-isolation-provider": "hami-core"})
    assert [f.field for f in create(spelled, bare_facts(tmp_path)).failures] == [
        f"{FIELD}.gpu[0].resources[koordinator.sh/gpu-memory-ratio]"]
    other = pod({"gpu": [{"minor": 0}]}, labels={"koordinator.sh/gpu-isolation-provider": "other"})
    assert create(other, bare_facts(tmp_path)).adjustment == Adjustment(env={"NVIDIA_VISIBLE_DEVICES": "0"})


def test_no_allocation_adds_nothing(tmp_path: Path) -> None:
    facts = bare_facts(tmp_path, gpu_vendor="huawei")
    for p in (pod(), pod({}), pod({"fpga": [{"minor": 0}]}), pod(raw="null")):
        r = create(p, facts, xpu_device_inject=True)
        assert not r.adjustment and r.failures == [] and r.stale_facts == frozenset()


def test_gates_off_run_nothing(tmp_path: Path) -> None:
    r = stages.create_container(pod({"gpu": [{"minor": 0}]}), CONTAINER, bare_facts(tmp_path),
                                HookOptions(gates={"CPUSetAllocator": False, "BatchResource": False}))
    assert not r.adjustment and r.timings == []


def test_a_malformed_allocation_is_one_failure_naming_the_field(tmp_path: Path) -> None:
    r = create(pod(raw='{"gpu":[{"minor":0}],"rdma":[{"minor":"0"}]}'), bare_facts(tmp_path, gpu_vendor="huawei"),
               xpu_device_inject=True)
    assert not r.adjustment
    (f,) = r.failures  # three hooks read the same bad field: one Event
    assert f.field == f"{FIELD}.rdma[0].minor"
    assert f.message == "gpu env inject, rdma device inject, xpu device inject: must be an integer, not a string"
    assert [name for name, ok, _ in r.timings] == ["BatchResource", "Resctrl", "gpu env inject", "rdma device inject",
                                                    "xpu device inject"]
    assert [ok for _, ok, _ in r.timings] == [True, True, False, False, False]


# ---- RDMA on a simulated sysfs and /dev -----------------------------------------------------------------------


def mknod(path: Path, major: int, minor: int, mode: int = 0o666) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(path, stat.S_IFCHR | mode, os.makedev(major, minor))
    os.chmod(path, mode)


def rdma_node(root: Path, *, vf: bool = True) -> HostPaths:
    require(os.geteuid() == 0, "device nodes (mknod) need root")
    add_rdma_nic(root, "0000:01:00.0", bridges=["0000:00:01.0"], ib_dev="mlx5_0", netdev="ens1f0np0", numa_node=0,
                 uverbs=0)
    add_rdma_nic(root, "0000:01:00.1", bridges=["0000:00:01.0"], ib_dev="mlx5_1", netdev="ens1f1np1", numa_node=0,
                 uverbs=1)
    ib = root / "dev/infiniband"
    mknod(ib / "rdma_cm", 10, 57)
    for n in range(2):
        mknod(ib / f"uverbs{n}", 231, 192 + n)
        mknod(ib / f"umad{n}", 231, n, 0o600)
    if vf:
        add_vf(root)
    return HostPaths.under(str(root))


def add_vf(root: Path) -> None:
    (vf,) = add_vfs(root, "0000:01:00.0", ["0000:01:00.2"])
    (vf / "infiniband_verbs/uverbs2").mkdir(parents=True)
    mknod(root / "dev/infiniband/uverbs2", 231, 194)


def cm() -> DeviceNode:
    return DeviceNode("/dev/infiniband/rdma_cm", "c", 10, 57, 0o666)


def uverbs(n: int) -> DeviceNode:
    return DeviceNode(f"/dev/infiniband/uverbs{n}", "c", 231, 192 + n, 0o666)


def test_gpu_and_rdma_vf_from_the_real_annotation(tmp_path: Path) -> None:
    paths = rdma_node(tmp_path)
    facts = NodeFactsReader(paths, 1).facts()
    assert facts.uverbs == {"0000:01:00.0": "uverbs0", "0000:01:00.1": "uverbs1", "0000:01:00.2": "uverbs2"}
    r = create(pod(raw=fixture_annotation()), facts)
    assert r.adjustment == Adjustment(env={"NVIDIA_VISIBLE_DEVICES": "0"}, devices=[cm(), uverbs(2)])
    assert r.failures == []


def test_rdma_pfs_without_vfs_and_each_node_once(tmp_path: Path) -> None:
    facts = NodeFactsReader(rdma_node(tmp_path), 1).facts()
    alloc = {"rdma": [{"minor": 1, "id": "0000:01:00.1"}, {"minor": 0, "id": "0000:01:00.0"},
                      {"minor": 0, "id": "0000:01:00.0", "extension": {"vfs": [{"minor": -1, "busID": "0000:01:00.2"},
                                                                               {"busID": "0000:01:00.2"}]}}]}
    r = create(pod(alloc), facts)
    assert r.adjustment == Adjustment(devices=[cm(), uverbs(1), uverbs(0), uverbs(2)])


def test_a_vf_created_after_the_facts_were_read_needs_one_refresh(tmp_path: Path) -> None:
    paths = rdma_node(tmp_path, vf=False)
    clock = [100.0]
    reader = NodeFactsReader(paths, 1, clock=lambda: clock[0])
    add_vf(tmp_path)  # SR-IOV enabled after koordlet started
    p = pod(raw=fixture_annotation())
    r = create(p, reader.facts())
    assert r.stale_facts == {FACT_PCI, FACT_DEV}
    assert [f.field for f in r.failures] == [f"{FIELD}.rdma[0].extension.vfs[0].busID"]
    assert not r.adjustment.devices and r.adjustment.env == {"NVIDIA_VISIBLE_DEVICES": "0"}  # the GPU hook still ran
    clock[0] += 5
    reader.refresh(r.stale_facts)
    r = create(p, reader.facts())
    assert (r.stale_facts, r.failures) == (frozenset(), [])
    assert r.adjustment.devices == [cm(), uverbs(2)]


def test_a_missing_device_node_adds_nothing_and_names_the_allocation(tmp_path: Path) -> None:
    paths = rdma_node(tmp_path)
    os.unlink(tmp_path / "dev/infiniband/uverbs1")
    reader = NodeFactsReader(paths, 1)
    r = create(pod({"rdma": [{"id": "0000:01:00.0"}, {"id": "0000:01:00.1"}]}), reader.facts())
    assert not r.adjustment.devices
    assert r.stale_facts == {FACT_DEV}
    (f,) = r.failures
    assert f.field == f"{FIELD}.rdma[1].id"
    assert "/dev/infiniband/uverbs1 is not a character device" in f.message
    # a refresh within a second of the last read keeps the facts (the runner's retry costs no second read)
    reader.refresh({FACT_DEV})
    assert "/dev/infiniband/uverbs1" not in reader.facts().dev_nodes


@pytest.mark.parametrize(("alloc", "fld"), [
    ({"rdma": [{"minor": 0}]}, "rdma[0].id"),
    ({"rdma": [{"id": "../../../etc"}]}, "rdma[0].id"),
    ({"rdma": [{"id": "0000:01:00.0", "extension": {"vfs": [{"minor": 1}]}}]}, "rdma[0].extension.vfs[0].busID"),
])
def test_rdma_without_a_pci_address(tmp_path: Path, alloc: object, fld: str) -> None:
    r = create(pod(alloc), bare_facts(tmp_path))
    assert not r.adjustment
    assert [f.field for f in r.failures] == [f"{FIELD}.{fld}"]
    assert r.stale_facts == frozenset()


def test_dev_root_defaults_and_host_root() -> None:
    assert HostPaths.defaults({}).dev_root == "/dev/"
    assert HostPaths.defaults({"agent_mode": "hostMode"}).dev_root == "/dev/"
    assert HostPaths.under("/node").dev("infiniband", "rdma_cm") == "/node/dev/infiniband/rdma_cm"


# ---- Ascend and Cambricon (our extension) --------------------------------------------------------------------


def ascend_node(root: Path) -> HostPaths:
    """8x Ascend 910B1 (`ls /dev/davinci*`: davinci0..7 and davinci_manager); hisi_hdc 237:0 and devmm_svm 238:0
    (crw-rw---- HwHiAiUser) as `ll` shows them there. The davinci numbers are the driver's dynamic ones."""
    require(os.geteuid() == 0, "device nodes (mknod) need root")
    dev = root / "dev"
    for n in range(8):
        mknod(dev / f"davinci{n}", 236, n, 0o660)
    mknod(dev / "davinci_manager", 235, 0, 0o660)
    mknod(dev / "hisi_hdc", 237, 0, 0o660)
    mknod(dev / "devmm_svm", 238, 0, 0o660)
    for name in ("davinci0", "hisi_hdc"):
        os.chown(dev / name, 1000, 1000)  # HwHiAiUser
    return HostPaths.under(str(root))


def test_ascend_whole_cards(tmp_path: Path) -> None:
    facts = NodeFactsReader(ascend_node(tmp_path), 1).facts()
    assert facts.gpu_vendor == "huawei"
    full = {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "64Gi",
            "koordinator.sh/gpu-memory-ratio": "100", "huawei.com/npu-core": "20"}
    r = create(pod({"gpu": [{"minor": 0, "resources": full}, {"minor": 3, "resources": full}]}), facts,
               xpu_device_inject=True, gates={"GPUEnvInject": False})
    assert r.failures == []
    assert r.adjustment == Adjustment(env={"ASCEND_VISIBLE_DEVICES": "0,3"}, devices=[
        DeviceNode("/dev/davinci_manager", "c", 235, 0, 0o660, 0, 0),
        DeviceNode("/dev/hisi_hdc", "c", 237, 0, 0o660, 1000, 1000),
        DeviceNode("/dev/devmm_svm", "c", 238, 0, 0o660, 0, 0),
        DeviceNode("/dev/davinci0", "c", 236, 0, 0o660, 1000, 1000),
        DeviceNode("/dev/davinci3", "c", 236, 3, 0o660, 0, 0),
    ])
    # off unless asked for (ours): the upstream GPU hook alone sets only NVIDIA_VISIBLE_DEVICES, as upstream
    r = create(pod({"gpu": [{"minor": 0, "resources": full}]}), facts)
    assert r.adjustment == Adjustment(env={"NVIDIA_VISIBLE_DEVICES": "0"})


def test_ascend_shared_cards_are_left_to_the_vendor_plugin(tmp_path: Path) -> None:
    facts = NodeFactsReader(ascend_node(tmp_path), 1).facts()
    for alloc in ({"gpu": [{"minor": 1, "extension": {"gpuSharedResourceTemplate": "vir05_1c_16g"}}]},
                  {"gpu": [{"minor": 1, "resources": {"koordinator.sh/gpu-core": "50"}}]},
                  {"gpu": [{"minor": 1, "resources": {"koordinator.sh/gpu-memory-ratio": "25"}}]}):
        r = create(pod(alloc), facts, xpu_device_inject=True, gates={"GPUEnvInject": False})
        assert not r.adjustment and r.failures == []


def test_ascend_card_missing_on_the_host(tmp_path: Path) -> None:
    facts = NodeFactsReader(ascend_node(tmp_path), 1).facts()
    r = create(pod({"gpu": [{"minor": 0}, {"minor": 9}]}), facts, xpu_device_inject=True,
               gates={"GPUEnvInject": False})
    assert not r.adjustment and r.stale_facts == {FACT_DEV}
    assert [f.field for f in r.failures] == [f"{FIELD}.gpu[1]"]
    r = create(pod({"gpu": [{"minor": -1}]}), facts, xpu_device_inject=True, gates={"GPUEnvInject": False})
    assert [f.field for f in r.failures] == [f"{FIELD}.gpu[0].minor"] and r.stale_facts == frozenset()


def cambricon_node(root: Path) -> HostPaths:
    """Two MLU370 cards as the Cambricon driver names their nodes (cambricon_ctl, cambricon_dev<n>,
    cambricon_ipcm<n>); the numbers are the driver's dynamic ones."""
    require(os.geteuid() == 0, "device nodes (mknod) need root")
    dev = root / "dev"
    mknod(dev / "cambricon_ctl", 240, 0)
    for n in range(2):
        mknod(dev / f"cambricon_dev{n}", 241, n)
        mknod(dev / f"cambricon_ipcm{n}", 242, n)
    return HostPaths.under(str(root))


def test_cambricon_whole_card(tmp_path: Path) -> None:
    facts = NodeFactsReader(cambricon_node(tmp_path), 1).facts()
    assert facts.gpu_vendor == "cambricon"
    r = create(pod({"gpu": [{"minor": 1, "id": "89033010-2354-0000-0000-000000000000",
                             "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "24Gi",
                                           "koordinator.sh/gpu-memory-ratio": "100"}}]}),
               facts, xpu_device_inject=True, gates={"GPUEnvInject": False})
    assert r.failures == []
    assert r.adjustment == Adjustment(env={"CAMBRICON_VISIBLE_DEVICES": "1"}, devices=[
        DeviceNode("/dev/cambricon_ctl", "c", 240, 0, 0o666, 0, 0),
        DeviceNode("/dev/cambricon_ipcm1", "c", 242, 1, 0o666, 0, 0),
        DeviceNode("/dev/cambricon_dev1", "c", 241, 1, 0o666, 0, 0),
    ])
    shared = {"gpu": [{"minor": 0, "resources": {"koordinator.sh/gpu-core": "30",
                                                 "koordinator.sh/gpu-memory": "6Gi"}}]}
    r = create(pod(shared), facts, xpu_device_inject=True, gates={"GPUEnvInject": False})
    assert not r.adjustment and r.failures == []


def test_the_inventory_vendor_wins_over_the_dev_nodes(tmp_path: Path) -> None:
    reader = NodeFactsReader(cambricon_node(tmp_path), 1, gpu_vendor=lambda: "nvidia")
    r = create(pod({"gpu": [{"minor": 0}]}), reader.facts(), xpu_device_inject=True)
    assert r.adjustment == Adjustment(env={"NVIDIA_VISIBLE_DEVICES": "0"})
