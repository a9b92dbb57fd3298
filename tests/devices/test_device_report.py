"""The Device CR: upstream composition and ordering, condition times, foreign labels kept, change detection."""

from __future__ import annotations

from typing import Any

from koordlet.devices.model import DeviceSet, healthy_condition, topology
from koordlet.devices.report import changed, compose, desired


def _gpu(minor: int, uuid: str, healthy: bool = True) -> dict[str, Any]:
    d: dict[str, Any] = {"id": uuid, "minor": minor, "type": "gpu", "health": healthy,
                         "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "80Gi",
                                       "koordinator.sh/gpu-memory-ratio": "100"},
                         "topology": topology(0, "pci0000:17", f"0000:{0x19 + minor:02x}:00.0")}
    if not healthy:
        d["conditions"] = [healthy_condition(False, "Xid79", "Xid error detected on device, error code: 79")]
    return d


def _rdma(minor: int) -> dict[str, Any]:
    bdf = f"0000:{0x1a + minor:02x}:00.0"
    return {"id": bdf, "minor": minor, "type": "rdma", "health": True, "resources": {"koordinator.sh/rdma": "100"},
            "topology": topology(0, "pci0000:17", bdf)}


NVIDIA = DeviceSet([_gpu(1, "GPU-b"), _gpu(0, "GPU-a")],
                   {"node.koordinator.sh/gpu-vendor": "nvidia", "node.koordinator.sh/gpu-model": "H800"})
XPU = DeviceSet([{"id": "npu-0-0", "minor": 0, "type": "gpu", "health": True, "resources": {}}],
                {"node.koordinator.sh/gpu-vendor": "huawei"},
                {"scheduling.koordinator.sh/gpu-partitions": '{"4":[{"minors":[0,1,2,3]}]}'})
RDMA = DeviceSet([_rdma(1), _rdma(0)])


def test_composition_follows_upstream_order(validate_crd: Any) -> None:
    both = compose(None, NVIDIA, RDMA)
    assert [(d["type"], d["minor"]) for d in both.devices] == [("gpu", 0), ("gpu", 1), ("rdma", 0), ("rdma", 1)]
    assert both.labels == NVIDIA.labels
    xpu_wins = compose(XPU, NVIDIA, RDMA)
    assert [d["id"] for d in xpu_wins.devices][:1] == ["npu-0-0"] and xpu_wins.labels == XPU.labels
    assert "GPU-a" not in [d["id"] for d in xpu_wins.devices]
    enforced = compose(DeviceSet(), NVIDIA, RDMA, enforce_device_infos=True)
    assert [d["type"] for d in enforced.devices] == ["rdma", "rdma"]
    obj = desired("node-1", "uid-1", both, None, now="2026-11-22T10:00:00Z")
    validate_crd("scheduling.koordinator.sh_devices.yaml", obj)
    assert obj["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": "node-1",
                                                   "uid": "uid-1", "controller": True, "blockOwnerDeletion": True}]


def test_empty_node_reports_an_empty_spec(validate_crd: Any) -> None:
    obj = desired("cpu-node", "u", compose(None, None, None), None)
    validate_crd("scheduling.koordinator.sh_devices.yaml", obj)
    assert obj["spec"] == {} and "labels" not in obj["metadata"]


def test_foreign_labels_kept_ours_replaced_and_removed() -> None:
    existing = desired("n", "u", compose(XPU, None, None), None)
    existing["metadata"]["labels"]["team.example.com/owner"] = "ml-infra"
    existing["metadata"]["annotations"]["note.example.com/x"] = "keep"
    existing["metadata"]["resourceVersion"] = "7"
    new = desired("n", "u", compose(None, NVIDIA, None), existing)
    assert new["metadata"]["labels"] == {**NVIDIA.labels, "team.example.com/owner": "ml-infra"}
    assert new["metadata"]["annotations"] == {"note.example.com/x": "keep"}  # our partitions key is gone
    assert new["metadata"]["resourceVersion"] == "7"
    assert changed(existing, new)


def test_condition_time_kept_while_status_holds() -> None:
    sick = DeviceSet([_gpu(0, "GPU-a", healthy=False)])
    first = desired("n", "u", sick, None, now="2026-11-22T10:00:00Z")
    again = desired("n", "u", sick, first, now="2026-11-22T10:05:00Z")
    assert again["spec"]["devices"][0]["conditions"][0]["lastTransitionTime"] == "2026-11-22T10:00:00Z"
    assert not changed(first, again)
    recovered = DeviceSet([{**_gpu(0, "GPU-a"), "conditions": [healthy_condition(True)]}])
    back = desired("n", "u", recovered, again, now="2026-11-22T10:10:00Z")
    assert back["spec"]["devices"][0]["conditions"][0] == {
        "type": "Healthy", "status": "True", "reason": "DeviceHealthy", "message": "device is healthy",
        "lastTransitionTime": "2026-11-22T10:10:00Z"}
    assert changed(again, back)


def test_foreign_label_changes_do_not_trigger_updates() -> None:
    existing = desired("n", "u", compose(None, NVIDIA, RDMA), None)
    existing["metadata"]["labels"]["other/x"] = "1"
    new = desired("n", "u", compose(None, NVIDIA, RDMA), existing)
    assert not changed(existing, new)


def test_partition_annotation_is_byte_identical_to_go() -> None:
    from koordlet.devices.partitions import partition, table_annotation

    text = table_annotation([partition([3, 2, 1, 0], "HCCS"), partition([0, 1], "NVLink", "400Gi"),
                             partition([0, 1, 2, 3], "HCCS"), partition([4, 5, 6, 7], "HCCS")])
    # Go: map keys sorted ("2" < "4"), struct fields in declaration order, duplicates of a minor set dropped
    assert text == ('{"2":[{"minors":[0,1],"gpuLinkType":"NVLink","ringBusBandwidth":"400Gi","allocationScore":1}],'
                    '"4":[{"minors":[0,1,2,3],"gpuLinkType":"HCCS","allocationScore":1},'
                    '{"minors":[4,5,6,7],"gpuLinkType":"HCCS","allocationScore":1}]}')
    assert table_annotation([]) is None
