"""Device series from a Device CR's entries and NVML usage samples: labels as documented, bad input skipped."""

from __future__ import annotations

from prometheus_client.core import Metric

from koordlet.devices.metrics import DeviceView, device_families
from koordlet.devices.nvidia.backend import GpuInfo
from koordlet.devices.nvidia.usage import CONTAINER_CORE, NODE_MEMORY, POD_MEMORY, Sample
from koordlet.states.model import ContainerMeta, PodMeta

GPU = GpuInfo(bus_id="0000:18:00.0", index=0, name="NVIDIA L20", uuid="GPU-aaaa", minor=3, memory_total=48 << 30)


def _families(view: DeviceView) -> dict[str, Metric]:
    return {f.name: f for f in device_families("n1", view)}


def _pod() -> PodMeta:
    ctr = ContainerMeta(name="trainer", container_id="containerd://c1", cgroup_dir=None, running=True)
    return PodMeta(uid="u1", namespace="ml", name="train-0", k8s_qos="Guaranteed", koord_qos="", priority_class="",
                   phase="Running", cgroup_dir="", containers=(ctr,), raw={})


def test_health_and_allocatable_per_device_with_the_gpu_model() -> None:
    entries = [
        {"type": "gpu", "id": "GPU-aaaa", "minor": 3, "health": True,
         "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "46068Mi"}},
        {"type": "rdma", "id": "0000:1a:00.0", "minor": 0, "health": False,
         "resources": {"koordinator.sh/rdma": "100", "koordinator.sh/bogus": "12x"}},  # a bad quantity: skipped
    ]
    fams = _families(DeviceView(entries, {}, [GPU]))
    healthy = {(s.labels["type"], s.labels["minor"]): (s.labels, s.value)
               for s in fams["koordlet_device_healthy"].samples}
    assert healthy[("gpu", "3")] == ({"node": "n1", "type": "gpu", "minor": "3", "uuid": "GPU-aaaa",
                                      "model": "NVIDIA L20"}, 1.0)
    assert healthy[("rdma", "0")][1] == 0.0 and healthy[("rdma", "0")][0]["model"] == ""
    alloc = {(s.labels["uuid"], s.labels["resource"]): (s.labels["unit"], s.value)
             for s in fams["koordlet_device_allocatable"].samples}
    assert alloc == {("GPU-aaaa", "koordinator.sh/gpu-core"): ("integer", 100.0),
                     ("GPU-aaaa", "koordinator.sh/gpu-memory"): ("byte", 46068.0 * (1 << 20)),
                     ("0000:1a:00.0", "koordinator.sh/rdma"): ("integer", 100.0)}


def test_xpu_model_comes_from_the_device_label() -> None:
    entries = [{"type": "gpu", "id": "npu-0-0", "minor": 0, "health": True, "resources": {}}]
    fams = _families(DeviceView(entries, {"node.koordinator.sh/gpu-model": "Ascend-910B1"}))
    [s] = fams["koordlet_device_healthy"].samples
    assert s.labels["model"] == "Ascend-910B1"


def test_gpu_usage_carries_dcgm_exporter_labels() -> None:
    gl = {"gpu_minor": "3", "gpu_device_uuid": "GPU-aaaa"}
    samples = [Sample(NODE_MEMORY, gl, 1024.0), Sample(POD_MEMORY, {"pod_uid": "u1", **gl}, 512.0),
               Sample(CONTAINER_CORE, {"container_id": "containerd://c1", **gl}, 40.0),
               Sample(POD_MEMORY, {"pod_uid": "gone", **gl}, 1.0),  # a pod no longer listed: no series
               Sample(NODE_MEMORY, {"gpu_minor": "9", "gpu_device_uuid": "GPU-unknown"}, 1.0)]
    fams = _families(DeviceView([], {}, [GPU], samples, [_pod()]))
    [node] = fams["koordlet_gpu_memory_used_bytes"].samples
    # dcgm-exporter's `gpu` and `device` name the GPU's index (DCGM's GPU id), not its minor
    assert node.labels == {"node": "n1", "gpu": "0", "UUID": "GPU-aaaa", "pci_bus_id": "00000000:18:00.0",
                           "device": "nvidia0", "modelName": "NVIDIA L20", "Hostname": "n1",
                           "DCGM_FI_DRIVER_VERSION": ""}
    [pod] = fams["koordlet_pod_gpu_memory_used_bytes"].samples
    assert (pod.labels["namespace"], pod.labels["pod"], pod.value) == ("ml", "train-0", 512.0)
    [ctr] = fams["koordlet_container_gpu_core_usage_percent"].samples
    assert (ctr.labels["pod"], ctr.labels["container"], ctr.value) == ("train-0", "trainer", 40.0)
