"""DeviceShare request normalisation: the accepted/refused table and per-GPU counts (spec §1.2)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from scheduler.cluster import cycle_requests
from scheduler.deviceshare.plugin import DeviceShare
from scheduler.deviceshare.requests import (
    DeviceHint,
    InvalidDeviceRequest,
    canonical_requests,
    gpu_requirement,
    instances,
    plan_pod,
)

CORE, MEM, RATIO = "koordinator.sh/gpu-core", "koordinator.sh/gpu-memory", "koordinator.sh/gpu-memory-ratio"
SHARED = "koordinator.sh/gpu.shared"
GI = 1024**3

ACCEPTED = [
    ({"nvidia.com/gpu": 2}, {"gpu": {CORE: 200, RATIO: 200}}),
    ({"amd.com/gpu": 1}, {"gpu": {CORE: 100, RATIO: 100}}),
    ({"dcu.com/gpu": 1}, {"gpu": {CORE: 100, RATIO: 100}}),
    ({"koordinator.sh/gpu": 50}, {"gpu": {CORE: 50, RATIO: 50}}),
    ({"koordinator.sh/gpu": 200}, {"gpu": {CORE: 200, RATIO: 200}}),
    ({MEM: 8 * GI}, {"gpu": {MEM: 8 * GI}}),
    ({RATIO: 50}, {"gpu": {RATIO: 50}}),
    ({RATIO: 200}, {"gpu": {RATIO: 200}}),
    ({CORE: 50, MEM: GI}, {"gpu": {CORE: 50, MEM: GI}}),
    ({CORE: 200, MEM: 64 * GI}, {"gpu": {CORE: 200, MEM: 64 * GI}}),
    ({CORE: 50, RATIO: 50}, {"gpu": {CORE: 50, RATIO: 50}}),
    ({"huawei.com/npu-core": 12, RATIO: 50}, {"gpu": {"huawei.com/npu-core": 12, RATIO: 50}}),
    ({SHARED: 2, MEM: GI}, {"gpu": {SHARED: 2, MEM: GI}}),
    ({SHARED: 2, RATIO: 100}, {"gpu": {SHARED: 2, RATIO: 100}}),
    ({SHARED: 2, CORE: 100, MEM: GI}, {"gpu": {SHARED: 2, CORE: 100, MEM: GI}}),
    ({SHARED: 2, CORE: 100, RATIO: 60}, {"gpu": {SHARED: 2, CORE: 100, RATIO: 60}}),
    ({SHARED: 1, "huawei.com/npu-core": 4, "huawei.com/npu-cpu": 1, MEM: GI},
     {"gpu": {SHARED: 1, "huawei.com/npu-core": 4, "huawei.com/npu-cpu": 1, MEM: GI}}),
    ({SHARED: 1, "huawei.com/npu-core": 4, "huawei.com/npu-cpu": 1, "huawei.com/npu-dvpp": 100, MEM: GI},
     {"gpu": {SHARED: 1, "huawei.com/npu-core": 4, "huawei.com/npu-cpu": 1, "huawei.com/npu-dvpp": 100, MEM: GI}}),
    ({"koordinator.sh/rdma": 100}, {"rdma": {"koordinator.sh/rdma": 100}}),
    ({"koordinator.sh/fpga": 200}, {"fpga": {"koordinator.sh/fpga": 200}}),
    ({"nvidia.com/gpu": 1, "koordinator.sh/rdma": 1},
     {"gpu": {CORE: 100, RATIO: 100}, "rdma": {"koordinator.sh/rdma": 1}}),
    ({"cpu": 1000, "memory": GI, "nvidia.com/gpu": 0}, {}),
]

REFUSED = [
    ({CORE: 50}, "invalid resource device requests"),
    ({"nvidia.com/gpu": 1, CORE: 100}, "invalid resource device requests"),
    ({"nvidia.com/gpu": 1, "koordinator.sh/gpu": 100}, "invalid resource device requests"),
    ({"koordinator.sh/gpu": 100, MEM: GI}, "invalid resource device requests"),
    ({"huawei.com/npu-core": 4, MEM: GI}, "invalid resource device requests"),
    ({"koordinator.sh/gpu": 150}, "invalid resource unit koordinator.sh/gpu: 150"),
    ({RATIO: 101}, "invalid resource device requests"),
    ({CORE: 150, RATIO: 100}, "invalid resource device requests"),
    ({SHARED: 2, CORE: 101, MEM: GI}, "invalid resource device requests"),
    ({SHARED: 1, CORE: 200, MEM: GI}, "invalid resource device requests"),
    ({SHARED: 2, "huawei.com/npu-core": 4, "huawei.com/npu-cpu": 1, MEM: GI}, "invalid resource device requests"),
    ({SHARED: 1, "huawei.com/npu-core": 4, "huawei.com/npu-cpu": 1, "huawei.com/npu-dvpp": 101, MEM: GI},
     "invalid resource device requests"),
    ({SHARED: 2, MEM: GI, RATIO: 50}, "invalid resource device requests"),
    ({SHARED: 2}, "invalid resource device requests"),
    ({"koordinator.sh/rdma": 150}, "invalid resource unit koordinator.sh/rdma: 150"),
    ({"koordinator.sh/fpga": 101}, "invalid resource unit koordinator.sh/fpga: 101"),
]


@pytest.mark.parametrize(("requests", "expected"), ACCEPTED)
def test_accepted(requests: dict[str, int], expected: dict[str, dict[str, int]]) -> None:
    assert canonical_requests(requests) == expected


@pytest.mark.parametrize(("requests", "reason"), REFUSED)
def test_refused(requests: dict[str, int], reason: str) -> None:
    with pytest.raises(InvalidDeviceRequest, match=reason):
        canonical_requests(requests)


def test_refused_reason_names_the_resources() -> None:
    with pytest.raises(InvalidDeviceRequest) as e:
        canonical_requests({CORE: 50})
    assert str(e.value) == "invalid resource device requests: [koordinator.sh/gpu-core]"


@pytest.mark.parametrize(("canonical", "per", "count", "shared"), [
    ({CORE: 200, RATIO: 200}, {CORE: 100, RATIO: 100}, 2, False),
    ({CORE: 100, RATIO: 100}, {CORE: 100, RATIO: 100}, 1, False),
    ({RATIO: 50}, {RATIO: 50}, 1, True),
    ({MEM: 8 * GI}, {MEM: 8 * GI}, 1, True),
    ({SHARED: 2, CORE: 100, RATIO: 60}, {CORE: 50, RATIO: 30}, 2, True),
    ({SHARED: 2, MEM: 4 * GI}, {MEM: 2 * GI}, 2, True),
    # [quirk] core 200 + memory stays one GPU with 200 core.
    ({CORE: 200, MEM: 64 * GI}, {CORE: 200, MEM: 64 * GI}, 1, True),
    ({"huawei.com/npu-core": 48, RATIO: 200}, {"huawei.com/npu-core": 24, RATIO: 100}, 2, False),
])
def test_gpu_requirement(canonical: dict[str, int], per: dict[str, int], count: int, shared: bool) -> None:
    req = gpu_requirement(canonical)
    assert (req.per_gpu, req.count, req.shared) == (per, count, shared)


def test_non_gpu_instances() -> None:
    assert instances({"koordinator.sh/rdma": 200}, None, 4) == ({"koordinator.sh/rdma": 100}, 2)
    assert instances({"koordinator.sh/rdma": 1}, None, 4) == ({"koordinator.sh/rdma": 1}, 1)
    assert instances({"koordinator.sh/rdma": 1}, DeviceHint(strategy="ApplyForAll"), 4) == (
        {"koordinator.sh/rdma": 1}, 4)
    assert instances({"koordinator.sh/rdma": 3}, DeviceHint(strategy="RequestsAsCount"), 4) == (
        {"koordinator.sh/rdma": 1}, 3)
    assert instances({"koordinator.sh/rdma": 3}, DeviceHint(strategy="RequestsAsCount", exclusive="DeviceLevel"),
                     4) == ({"koordinator.sh/rdma": 100}, 3)


def test_plan_reads_annotations() -> None:
    pod = {"metadata": {"annotations": {
        "scheduling.koordinator.sh/device-allocate-hint": json.dumps(
            {"rdma": {"selector": {"matchLabels": {"type": "fakeW"}},
                      "vfSelector": {"matchExpressions": [{"key": "type", "operator": "In", "values": ["fakeG"]}]}},
             "gpu": {"requiredTopologyScope": "NUMANode"}}),
        "scheduling.koordinator.sh/device-joint-allocate": '{"deviceTypes":["gpu","rdma"],"requiredScope":"SamePCIe"}',
        "scheduling.koordinator.sh/gpu-partition-spec": '{"allocatePolicy":"Restricted","ringBusBandwidth":"200Gi"}',
    }}}
    plan = plan_pod(pod, {"nvidia.com/gpu": 2, "koordinator.sh/rdma": 1})
    assert plan.joint_types == ["gpu", "rdma"] and plan.joint_same_pcie
    assert plan.hints["gpu"].scope == "NUMANode"
    assert plan.hints["rdma"].selector is not None and plan.hints["rdma"].selector.matches({"type": "fakeW"})
    assert plan.hints["rdma"].vf_selector is not None and not plan.hints["rdma"].vf_selector.matches({"type": "x"})
    assert plan.partition is not None and plan.partition.restricted and plan.partition.ring_bus_bandwidth == 200 * GI


def test_joint_drops_apply_for_all_and_unrequested_types() -> None:
    pod = {"metadata": {"annotations": {
        "scheduling.koordinator.sh/device-allocate-hint": '{"rdma": {"allocateStrategy": "ApplyForAll"}}',
        "scheduling.koordinator.sh/device-joint-allocate": '{"deviceTypes":["gpu","rdma"]}'}}}
    assert plan_pod(pod, {"nvidia.com/gpu": 1, "koordinator.sh/rdma": 1}).joint_types == []
    assert plan_pod({}, {"nvidia.com/gpu": 1}).joint_types == []


def test_malformed_pod_annotation_is_a_reason() -> None:
    pod = {"metadata": {"annotations": {"scheduling.koordinator.sh/device-allocate-hint": "{nope"}}}
    with pytest.raises(InvalidDeviceRequest, match="device-allocate-hint"):
        plan_pod(pod, {"nvidia.com/gpu": 1})


def _gpu_pod(name: str, requests: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "t", "annotations": annotations or {}},
            "spec": {"containers": [{"name": "c", "resources": {"requests": requests}}]}}


def test_pods_of_one_shape_share_a_plan_and_any_difference_gets_its_own() -> None:
    ds = DeviceShare()
    whole = {"cpu": "1", "koordinator.sh/gpu": "100"}
    joint = {"scheduling.koordinator.sh/device-joint-allocate": '{"deviceTypes":["gpu","rdma"]}'}
    first = ds.plan(_gpu_pod("a", whole))
    assert ds.plan(_gpu_pod("b", dict(whole))) is first  # the same requests and annotations
    with_rdma = {**whole, "koordinator.sh/rdma": "1"}
    plain, jointly = ds.plan(_gpu_pod("c", with_rdma)), ds.plan(_gpu_pod("d", with_rdma, joint))
    assert plain is not first and plain.joint_types == [] and jointly.joint_types == ["gpu", "rdma"]
    assert ds.plan(_gpu_pod("e", {"cpu": "1", "koordinator.sh/gpu": "200"})).gpu == gpu_requirement(
        {CORE: 200, RATIO: 200})
    assert ds.plan(_gpu_pod("f", whole)) == plan_pod(_gpu_pod("f", whole), {"cpu": 1000, "koordinator.sh/gpu": 100})
    bad = {"scheduling.koordinator.sh/device-allocate-hint": "{nope"}
    for name in ("g", "h"):  # a refused shape is refused for every pod of it
        with pytest.raises(InvalidDeviceRequest, match="device-allocate-hint"):
            ds.plan(_gpu_pod(name, whole, bad))


def test_a_pods_plan_is_kept_for_its_cycle_and_read_again_in_the_next() -> None:
    ds = DeviceShare()
    pod = _gpu_pod("a", {"cpu": "1", "koordinator.sh/gpu": "100", "koordinator.sh/rdma": "1"})
    with cycle_requests(pod):
        first = ds.plan(pod)
        pod["metadata"]["annotations"]["scheduling.koordinator.sh/device-joint-allocate"] = \
            '{"deviceTypes":["gpu","rdma"]}'
        assert ds.plan(pod) is first and first.joint_types == []  # a pod is not changed during its own cycle
    with cycle_requests(pod):
        assert ds.plan(pod).joint_types == ["gpu", "rdma"]  # the next cycle reads the annotation
        pod["metadata"]["annotations"]["scheduling.koordinator.sh/device-allocate-hint"] = "{nope"
    with cycle_requests(pod), pytest.raises(InvalidDeviceRequest, match="device-allocate-hint"):
        ds.plan(pod)
    del pod["metadata"]["annotations"]["scheduling.koordinator.sh/device-allocate-hint"]
    assert ds.plan(pod).joint_types == ["gpu", "rdma"]  # outside a cycle the annotations are compared each time
