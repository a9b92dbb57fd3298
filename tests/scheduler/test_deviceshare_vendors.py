"""Vendors end to end: Ascend vNPU templates, Cambricon dynamic-smlu, HAMi-core isolation and v0.7's resource names,
with the release texts' own Device and Pod snippets (tests/scheduler/seed_vendors, verbatim)."""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import kmock
import pytest
import yaml

from apis.client.kubeapi import KubeClient, KubeConfig
from scheduler.cluster import NodeInfo, build_cluster
from scheduler.deviceshare.plugin import DeviceShare
from scheduler.deviceshare.state import read_allocations
from scheduler.deviceshare.templates import TemplatesConfig, match, parse_catalog
from scheduler.deviceshare.vendors import lock_held, lock_value
from scheduler.framework import Profile, Scheduler
from scheduler.interfaces import Placement
from scheduler.plugins.fit import NodeResourcesFit
from scheduler.runner import SecondaryScheduler

from conftest import agent_device

SEEDS = Path(__file__).resolve().parent / "seed_vendors"
ALLOCATED = "scheduling.koordinator.sh/device-allocated"
DEVICE_CRD = "scheduling.koordinator.sh_devices.yaml"
T0 = dt.datetime(2025, 6, 1, 12, 0, 0, tzinfo=dt.UTC)
NANOS_T0 = str(int(T0.timestamp()) * 1_000_000_000)
TEMPLATES = """
huawei-Ascend-910B3:
  vir05_1c_16g:
    huawei.com/npu-core: 5
    huawei.com/npu-cpu: 1
    koordinator.sh/gpu-memory: 16Gi
  vir10_3c_32g:
    huawei.com/npu-core: 10
    huawei.com/npu-cpu: 3
    koordinator.sh/gpu-memory: 32Gi
huawei-Ascend-310P:
  vir01:
    huawei.com/npu-core: 1
    huawei.com/npu-cpu: 1
    huawei.com/npu-dvpp: 12
    koordinator.sh/gpu-memory: 3Gi
"""



def feasible(sched: Scheduler, pod: dict[str, Any], names: list[str] | None = None
             ) -> tuple[list[NodeInfo], dict[str, str]]:
    with sched.cycle(pod) as cycle:
        return cycle.feasible(names)

def seed(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((SEEDS / name).read_text())
    return doc


def node(name: str, labels: dict[str, str] | None = None, **extra: str) -> dict[str, Any]:
    alloc = {"cpu": "96", "memory": "1Ti", "pods": "110", "koordinator.sh/gpu.shared": "800",
             "koordinator.sh/gpu-core": "800", "koordinator.sh/gpu-memory-ratio": "800",
             "koordinator.sh/gpu-memory": "1Ti", "nvidia.com/gpu": "8"} | extra
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": dict(labels or {})},
            "status": {"allocatable": alloc}}


NPU_ALLOC = {"huawei.com/npu-core": "160", "huawei.com/npu-cpu": "56", "huawei.com/npu-dvpp": "800"}
MLU_ALLOC = {"cambricon.com/mlu.smlu.vcore": "800", "cambricon.com/mlu.smlu.vmemory": "360"}


def pod(name: str, requests: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": dict(labels or {}), "annotations": {}},
            "spec": {"containers": [{"name": "c", "resources": {"requests": requests, "limits": requests}}]},
            "status": {"phase": "Pending"}}


def templates_cm(data: str = TEMPLATES) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "gpu-shared-resource-templates", "namespace": "koordinator-system"},
            "data": {"data.yaml": data}}


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> dt.datetime:
        return self.now


def scheduler(objects: list[dict[str, Any]], **kwargs: Any) -> tuple[Scheduler, DeviceShare]:
    ds = DeviceShare(clock=kwargs.pop("clock", Clock()), **kwargs)
    return Scheduler(build_cluster(objects), Profile([NodeResourcesFit(), ds], [ds], [ds])), ds


def gpu(placement: Placement) -> list[dict[str, Any]]:
    allocs: list[dict[str, Any]] = json.loads(placement.annotations[ALLOCATED])["gpu"]
    return allocs


# ---- the seeds themselves ------------------------------------------------------------------------------------------

def test_seed_device_and_agent_devices_are_valid(validate_crd: Callable[[str, dict[str, Any]], None]) -> None:
    """The v1.7 text's Ascend Device lacks the CRD's required topology.socketID (an API server would refuse it);
    `simulate` reads it as written (socketID is not used), and with the field it is valid."""
    doc = seed("ascend-device.yaml")
    with pytest.raises(jsonschema.ValidationError, match="'socketID' is a required property"):
        validate_crd(DEVICE_CRD, doc)
    doc["spec"]["devices"][0]["topology"]["socketID"] = -1
    validate_crd(DEVICE_CRD, doc)
    for example in ("ascend-910b", "mlu370", "l20-pcie"):
        validate_crd(DEVICE_CRD, agent_device(example))


# ---- Ascend vNPU templates -----------------------------------------------------------------------------------------

def ascend_cluster(**kwargs: Any) -> tuple[Scheduler, DeviceShare]:
    """node-1: the v1.7 text's Ascend-910B3 Device CR (one NPU, quoted allocationScore); node-2 an Ascend-910B4 (no
    templates); node-3 an NVIDIA L20 without NPU allocatable."""
    b4 = copy.deepcopy(seed("ascend-device.yaml"))
    b4["metadata"]["name"] = "node-2"
    b4["metadata"]["labels"]["node.koordinator.sh/gpu-model"] = "Ascend-910B4"
    return scheduler([node("node-1", **NPU_ALLOC), node("node-2", **NPU_ALLOC), node("node-3"),
                      seed("ascend-device.yaml"), b4, agent_device("l20-pcie", "node-3"), templates_cm()], **kwargs)


def vnpu(name: str, cores: int, cpus: int, memory: str) -> dict[str, Any]:
    return pod(name, {"koordinator.sh/gpu.shared": "1", "huawei.com/npu-core": str(cores),
                      "huawei.com/npu-cpu": str(cpus), "koordinator.sh/gpu-memory": memory})


def test_vnpu_request_matches_template_and_writes_huawei_annotations() -> None:
    sched, _ = ascend_cluster()
    placed = sched.schedule(vnpu("infer", 5, 1, "16Gi"))
    assert placed.node == "node-1"
    (a,) = gpu(placed)
    assert a["minor"] == 0 and a["id"] == "GPU-fd971b33-4891-fd2e-ed42-ce6adf324615"
    assert a["extension"] == {"gpuSharedResourceTemplate": "vir05_1c_16g"}
    assert a["resources"] == {"huawei.com/npu-core": "5", "huawei.com/npu-cpu": "1",
                              "koordinator.sh/gpu-memory": "16Gi", "koordinator.sh/gpu-memory-ratio": "25"}
    ann = placed.annotations
    assert ann["huawei.com/npu-core"] == "0-vir05_1c_16g"  # what Huawei's device plugin allocates from
    assert ann["predicate-time"] == ann["scheduling.koordinator.sh/bind-timestamp"] == NANOS_T0
    assert ann["scheduling.koordinator.sh/gpu-minors"] == "0"
    # node-2's model has no template of that shape; node-3 has no NPU allocatable at all
    _, reasons = feasible(sched, vnpu("probe", 5, 1, "16Gi"), ["node-2", "node-3"])
    assert reasons["node-2"] == "no matched GPU shared resource template: GPU model huawei-Ascend-910B4 has none"
    assert reasons["node-3"].startswith("Insufficient huawei.com/npu-")


def test_vnpu_templates_fill_one_npu_then_stop() -> None:
    sched, _ = ascend_cluster()
    placed = [sched.schedule(vnpu(f"v{i}", 5, 1, "16Gi")) for i in range(5)]
    assert [p.node for p in placed[:4]] == ["node-1"] * 4  # 20 cores, 7 AI CPUs, 64Gi: four vir05_1c_16g
    assert placed[4].node is None and "1 Insufficient gpu devices" in placed[4].reason
    assert read_allocations(placed[0].annotations[ALLOCATED])["gpu"][0].template == "vir05_1c_16g"


def test_impossible_vnpu_shape_is_refused_with_the_template_list() -> None:
    sched, _ = ascend_cluster()
    placed = sched.schedule(vnpu("odd", 7, 1, "16Gi"))
    assert placed.node is None
    assert "no matched GPU shared resource template for {huawei.com/npu-core: 7, huawei.com/npu-cpu: 1, " \
           "koordinator.sh/gpu-memory: 16Gi}" in placed.reason
    for name in ("vir05_1c_16g {huawei.com/npu-core: 5, huawei.com/npu-cpu: 1, koordinator.sh/gpu-memory: 16Gi}",
                 "vir10_3c_32g", "huawei-Ascend-310P: vir01"):
        assert name in placed.reason
    assert placed.reason.startswith("0/3 nodes are available: 2 no matched GPU shared resource template")
    assert placed.reason.endswith(", 1 Insufficient huawei.com/npu-core.")  # NodeResourcesFit runs first


def test_no_templates_configmap_refuses_vnpu_and_says_where_they_are_read() -> None:
    sched, _ = scheduler([node("node-1", **NPU_ALLOC), seed("ascend-device.yaml")])
    placed = sched.schedule(vnpu("infer", 5, 1, "16Gi"))
    assert placed.node is None
    assert "templates: none (ConfigMap koordinator-system/gpu-shared-resource-templates not found)" in placed.reason
    broken, _ = scheduler([node("node-1", **NPU_ALLOC), seed("ascend-device.yaml"), templates_cm("[oops")])
    assert "templates: none" in broken.schedule(vnpu("infer", 5, 1, "16Gi")).reason


def test_templates_follow_the_configmap_and_its_config() -> None:
    sched, _ = ascend_cluster()
    assert sched.schedule(vnpu("big", 10, 3, "32Gi")).node == "node-1"
    sched.cluster.configmaps.clear()  # the ConfigMap is gone: templates with it
    assert sched.schedule(vnpu("big2", 10, 3, "32Gi")).node is None
    # matchedResources without npu-core: templates are not enforced, the request is allocated as any shared one
    loose, _ = ascend_cluster(templates=TemplatesConfig(matched_resources=()))
    placed = loose.schedule(vnpu("odd", 7, 1, "16Gi"))
    assert placed.node == "node-1" and "extension" not in gpu(placed)[0]
    assert placed.annotations["huawei.com/npu-core"] == "0"  # a full-NPU style list without a template


def test_template_catalog_parsing_and_strict_match() -> None:
    catalog = parse_catalog(templates_cm())
    assert catalog["huawei-Ascend-310P"]["vir01"]["koordinator.sh/gpu-memory"] == 3 << 30
    per = {"huawei.com/npu-core": 1, "huawei.com/npu-cpu": 1, "huawei.com/npu-dvpp": 12,
           "koordinator.sh/gpu-memory": 3 << 30}
    assert match(catalog, per) == {"huawei-Ascend-310P": ["vir01"]}
    assert match(catalog, {**per, "huawei.com/npu-dvpp": 13}) == {}
    assert match(catalog, {k: v for k, v in per.items() if k != "huawei.com/npu-dvpp"}) == {}  # strict
    for bad in ("- a\n- b", "m: [1]", "m:\n  t: 3", "m:\n  t:\n    cpu: lots"):
        with pytest.raises(ValueError):
            parse_catalog(templates_cm(bad))


def test_full_npus_on_our_agents_ascend_device() -> None:
    """Whole NPUs (npu-core + memory ratio, not shared): no template, the minors list for Huawei's plugin."""
    sched, _ = scheduler([node("npu", **NPU_ALLOC), agent_device("ascend-910b", "npu"), templates_cm()])
    placed = sched.schedule(pod("train", {"huawei.com/npu-core": "48", "koordinator.sh/gpu-memory-ratio": "200"}))
    assert placed.node == "npu"
    minors = [a["minor"] for a in gpu(placed)]
    assert len(minors) == 2 and all("extension" not in a for a in gpu(placed))
    assert placed.annotations["huawei.com/npu-core"] == ",".join(map(str, minors))


def test_ascend_310p_duo_gets_its_own_annotation() -> None:
    dev = agent_device("ascend-910b", "duo")
    dev["metadata"]["labels"]["node.koordinator.sh/gpu-model"] = "Ascend-310P3-300I-DUO"
    sched, _ = scheduler([node("duo", **NPU_ALLOC), dev])
    placed = sched.schedule(pod("p", {"huawei.com/npu-core": "24", "koordinator.sh/gpu-memory-ratio": "100"}))
    ann = placed.annotations
    assert ann["huawei.com/Ascend310P"] == f"Ascend310P-{gpu(placed)[0]['minor']}"
    assert "huawei.com/npu-core" not in ann


def test_seed_partition_table_with_quoted_allocation_score_is_read() -> None:
    from scheduler.deviceshare.allocator import parse_partition_table
    raw = seed("ascend-device.yaml")["metadata"]["annotations"]["scheduling.koordinator.sh/gpu-partitions"]
    table = parse_partition_table(raw)
    assert [(score, [p.minors for p in parts]) for score, parts in table[4]] == [(1, [(0, 1, 2, 3)])]


# ---- Cambricon dynamic-smlu ----------------------------------------------------------------------------------------

def mlu_cluster(**kwargs: Any) -> tuple[Scheduler, DeviceShare]:
    """mlu: our agent's MLU370-X8 Device CR and the Cambricon plugin's allocatable; l20: an NVIDIA node."""
    return scheduler([node("mlu", **MLU_ALLOC), agent_device("mlu370", "mlu"), node("l20"),
                      agent_device("l20-pcie", "l20")], **kwargs)


def test_cambricon_seed_pod_lands_on_the_mlu_with_dsmlu_annotations_and_lock() -> None:
    clock = Clock()
    sched, _ = mlu_cluster(clock=clock)
    placed = sched.schedule(seed("cambricon-pod.yaml"))
    assert placed.node == "mlu"
    (a,) = gpu(placed)
    ann = placed.annotations
    assert ann["CAMBRICON_DSMLU_ASSIGHED"] == "false"
    assert ann["CAMBRICON_DSMLU_PROFILE"] == f"{a['minor']}_10_4"  # minor_vcore_(1Gi / 256Mi)
    assert ann["scheduling.koordinator.sh/gpu-minors"] == str(a["minor"])
    labels, node_annotations = sched.prebind_patches("default/test-cambricon-partial")
    assert labels == {}
    assert node_annotations == {"cambricon.com/dsmlu.lock": "2025-06-01T12:00:00Z,default,test-cambricon-partial"}
    assert sched.prebind_patches("default/test-cambricon-partial") == ({}, {})  # handed out once
    # the lock keeps a second dsmlu pod off the node until the device plugin lifts it (or 5 minutes pass)
    second = copy.deepcopy(seed("cambricon-pod.yaml"))
    second["metadata"]["name"] = "second"
    refused = sched.schedule(second)
    assert refused.node is None
    assert "1 node(s) locked for the device plugin by pod default/test-cambricon-partial" in refused.reason
    assert "1 Insufficient cambricon.com/mlu.smlu.vcore" in refused.reason  # the NVIDIA node: never MLU pods
    clock.now = T0 + dt.timedelta(minutes=5, seconds=1)
    assert sched.schedule(second).node == "mlu"


def test_cambricon_lock_on_the_node_object() -> None:
    sched, _ = mlu_cluster()
    mlu = sched.cluster.nodes["mlu"]
    obj = copy.deepcopy(mlu.obj)
    obj["metadata"]["annotations"] = {"cambricon.com/dsmlu.lock": lock_value(T0, "default", "holder")}
    mlu.obj = obj
    assert feasible(sched, seed("cambricon-pod.yaml"), ["mlu"])[0]  # the holder pod no longer exists
    sched.cluster.assume(pod("holder", {"cpu": "1"}), "mlu")
    assert feasible(sched, seed("cambricon-pod.yaml"), ["mlu"])[1] == {
        "mlu": "node(s) locked for the device plugin by pod default/holder"}
    # a freshly listed Node object without the annotation: the device plugin has unlocked
    mlu.obj = copy.deepcopy(mlu.obj)
    mlu.obj["metadata"]["annotations"] = {}
    mlu.changed()
    assert feasible(sched, seed("cambricon-pod.yaml"), ["mlu"])[0]


def test_lock_values() -> None:
    exists: Callable[[str], bool] = lambda k: k == "ns/p"  # noqa: E731
    value = lock_value(T0, "ns", "p")
    assert lock_held(value, T0 + dt.timedelta(minutes=4), exists) == "node(s) locked for the device plugin by pod ns/p"
    assert lock_held(value, T0 + dt.timedelta(minutes=6), exists) is None
    assert lock_held(lock_value(T0, "ns", "gone"), T0, exists) is None
    assert lock_held("garbage", T0, exists) == "node(s) with an invalid device plugin lock 'garbage'"
    assert lock_held(None, T0, exists) is None


def test_cambricon_device_plugin_limits_are_filter_reasons() -> None:
    sched, _ = mlu_cluster()
    small = pod("small", {"koordinator.sh/gpu.shared": "1", "koordinator.sh/gpu-core": "10",
                          "koordinator.sh/gpu-memory": "128Mi", "cambricon.com/mlu.smlu.vcore": "10"})
    placed = sched.schedule(small)
    assert placed.node is None and "gpu memory must not be less than 268435456 bytes" in placed.reason
    two = pod("two", {"koordinator.sh/gpu.shared": "2", "koordinator.sh/gpu-core": "20",
                      "koordinator.sh/gpu-memory": "2Gi", "cambricon.com/mlu.smlu.vcore": "10"})
    assert "multiple gpu share is not supported on device side" in sched.schedule(two).reason
    no_core = pod("no-core", {"koordinator.sh/gpu.shared": "1", "koordinator.sh/gpu-memory": "1Gi",
                              "cambricon.com/mlu.smlu.vcore": "10"})
    assert "gpu core resource is required" in sched.schedule(no_core).reason


def test_adaption_switched_off_writes_device_allocated_only() -> None:
    sched, _ = mlu_cluster(device_plugin_adaption=False)
    placed = sched.schedule(seed("cambricon-pod.yaml"))
    assert placed.node == "mlu" and list(placed.annotations) == [ALLOCATED]
    assert sched.prebind_patches("default/test-cambricon-partial") == ({}, {})


def test_adaption_on_for_every_vendor_and_off_by_default_for_nvidia() -> None:
    plain, _ = mlu_cluster()
    placed = plain.schedule(pod("n", {"nvidia.com/gpu": "1"}))
    assert placed.node == "l20" and list(placed.annotations) == [ALLOCATED]
    everything, _ = mlu_cluster(device_plugin_adaption=True)
    placed = everything.schedule(pod("n", {"nvidia.com/gpu": "2"}))
    minors = ",".join(str(a["minor"]) for a in gpu(placed))
    assert placed.annotations == {ALLOCATED: placed.annotations[ALLOCATED],
                                  "scheduling.koordinator.sh/bind-timestamp": NANOS_T0,
                                  "scheduling.koordinator.sh/gpu-minors": minors}


# ---- HAMi-core ------------------------------------------------------------------------------------------------------

HAMI = {"koordinator.sh/gpu-isolation-provider": "HAMi-core"}


def hami_cluster(**kwargs: Any) -> tuple[Scheduler, DeviceShare]:
    return scheduler([node("hami", HAMI), agent_device("l20-pcie", "hami"), node("plain"),
                      agent_device("l20-pcie", "plain"), node("mlu", **MLU_ALLOC), agent_device("mlu370", "mlu")],
                     **kwargs)


def test_hami_seed_pod_fits_only_the_hami_node_and_gets_the_vgpu_node_label() -> None:
    sched, _ = hami_cluster()
    placed = sched.schedule(seed("hami-pod.yaml"))  # label `hami-core`, resource `koordinator.sh/gpu-shared`
    assert placed.node == "hami"
    (a,) = gpu(placed)
    assert a["resources"]["koordinator.sh/gpu-core"] == "50"
    assert a["resources"]["koordinator.sh/gpu-memory-ratio"] == "50"  # shared: gpu-shared read as gpu.shared
    assert placed.annotations["scheduling.koordinator.sh/gpu-minors"] == str(a["minor"])
    assert sched.prebind_patches("default/pod-example") == ({"hami.io/vgpu-node": "hami"}, {})
    _, reasons = feasible(sched, seed("hami-pod.yaml"))
    assert reasons == {"plain": "node(s) didn't match gpu-isolation-provider HAMi-core",
                       "mlu": "node(s) didn't match gpu-isolation-provider HAMi-core"}  # never on an MLU node


def test_hami_without_any_labelled_node_is_a_per_node_reason() -> None:
    sched, _ = scheduler([node("plain"), agent_device("l20-pcie", "plain"), node("cpu")])
    placed = sched.schedule(seed("hami-pod.yaml"))
    assert placed.node is None
    # checked before the node's devices, as upstream's Filter does: a CPU node gives the same reason
    assert placed.reason == "0/2 nodes are available: 2 node(s) didn't match gpu-isolation-provider HAMi-core."
    # a node labelled with the release text's spelling matches upstream's spelling on the pod, and vice versa
    spelled, _ = scheduler([node("n", {"koordinator.sh/gpu-isolation-provider": "hami-core"}),
                            agent_device("l20-pcie", "n")])
    hami = pod("p", {"koordinator.sh/gpu.shared": "1", "koordinator.sh/gpu-memory-ratio": "30"}, HAMI)
    assert spelled.schedule(hami).node == "n"


def test_hami_check_is_for_shared_gpus_only() -> None:
    sched, _ = scheduler([node("plain"), agent_device("l20-pcie", "plain")])
    whole = pod("whole", {"nvidia.com/gpu": "1"}, HAMI)
    assert sched.schedule(whole).node == "plain"  # as upstream: a whole GPU needs no isolation


def test_gpu_share_unsupported_models_are_refused() -> None:
    sched, _ = hami_cluster(gpu_share_unsupported_models=[("nvidia", "L20")])
    placed = sched.schedule(pod("s", {"koordinator.sh/gpu.shared": "1", "koordinator.sh/gpu-core": "50",
                                      "koordinator.sh/gpu-memory-ratio": "50"}))
    assert placed.node == "mlu"
    _, reasons = feasible(sched, seed("hami-pod.yaml"), ["hami"])
    assert reasons == {"hami": 'model "L20" of vendor "nvidia" does not support GPU Share'}
    assert sched.schedule(pod("w", {"nvidia.com/gpu": "1"})).node in ("hami", "plain")  # whole GPUs still fit


# ---- v0.7's kubernetes.io/ names ----------------------------------------------------------------------------------

def test_v07_pods_with_deprecated_names_are_placed() -> None:
    legacy = agent_device("l20-pcie", "old")
    for d in legacy["spec"]["devices"]:  # a Device CR of the v0.7 days
        d["resources"] = {k.replace("koordinator.sh/", "kubernetes.io/"): v for k, v in d["resources"].items()}
    old_node = node("old")
    old_node["status"]["allocatable"] = {"cpu": "96", "memory": "1Ti", "pods": "110",
                                         "kubernetes.io/gpu-core": "800", "kubernetes.io/gpu-memory": "1Ti"}
    sched, _ = scheduler([old_node, legacy])
    full, half = seed("v07-full-gpu.yaml"), seed("v07-half-gpu.yaml")
    half["metadata"]["name"] = "demo-pod-half"
    got = sched.schedule(full)
    assert got.node == "old"
    assert gpu(got)[0]["resources"] == {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "8Gi",
                                        "koordinator.sh/gpu-memory-ratio": "17"}
    assert sched.schedule(half).node == "old"
    assert sched.cluster.nodes["old"].requested["koordinator.sh/gpu-core"] == 150
    # an old allocation annotation with the deprecated names counts against the same GPU
    allocated = json.dumps({"gpu": [{"minor": 1, "resources": {"kubernetes.io/gpu-core": "100"}}]})
    assert read_allocations(allocated)["gpu"][0].resources == {"koordinator.sh/gpu-core": 100}


# ---- koord-sched run: labels and node locks reach the API server -------------------------------------------------

async def test_run_writes_vendor_annotations_labels_and_node_lock(kmock: kmock.KubernetesEmulator) -> None:
    devices = "scheduling.koordinator.sh/v1alpha1/devices"
    for res in ("v1/nodes", "v1/pods", devices):
        kmock.resources[res] = {}
    for name, labels, extra, example in (("mlu", {}, MLU_ALLOC, "mlu370"), ("hami", HAMI, {}, "l20-pcie")):
        n = node(name, labels, **extra)
        n.pop("kind")
        kmock.objects["v1/nodes", None, name] = n
        kmock.objects[devices, None, name] = agent_device(example, name)
    from kubedouble import emulate_binding
    emulate_binding(kmock, "test/fail-binding")
    for p in (seed("cambricon-pod.yaml"), seed("hami-pod.yaml")):
        p["spec"]["schedulerName"] = "koord-py"
        p["metadata"].setdefault("annotations", {})
        p["status"] = {"phase": "Pending"}
        kmock.objects["v1/pods", "default", p["metadata"]["name"]] = p
    runner = SecondaryScheduler(KubeClient(KubeConfig(server=str(kmock.url))), "koord-py",
                                lambda c: Scheduler(c, _profile()))
    placements = await asyncio.to_thread(runner.run_once)
    assert {p.pod: p.node for p in placements} == {"default/test-cambricon-partial": "mlu",
                                                   "default/pod-example": "hami"}
    mlu_pod = kmock.objects["v1/pods", "default", "test-cambricon-partial"].raw
    assert mlu_pod["spec"]["nodeName"] == "mlu"
    assert mlu_pod["metadata"]["annotations"]["CAMBRICON_DSMLU_ASSIGHED"] == "false"
    lock = kmock.objects["v1/nodes", None, "mlu"].raw["metadata"]["annotations"]["cambricon.com/dsmlu.lock"]
    assert lock.endswith(",default,test-cambricon-partial")
    hami_pod = kmock.objects["v1/pods", "default", "pod-example"].raw
    assert hami_pod["metadata"]["labels"] == {"koordinator.sh/gpu-isolation-provider": "hami-core",
                                              "hami.io/vgpu-node": "hami"}
    writes = [(r.method.value, r.url.path) for r in kmock if r.method.value in ("PATCH", "POST")]
    assert writes.index(("PATCH", "/api/v1/nodes/mlu")) < writes.index(
        ("POST", "/api/v1/namespaces/default/pods/test-cambricon-partial/binding"))


def _profile() -> tuple[list[Any], list[Any], list[Any]]:
    from scheduler.cli import profile
    return profile(None)
