"""DeviceShare per-minor accounting: annotations of assigned pods, incremental updates, malformed input, encoding."""

from __future__ import annotations

import json
import logging
from decimal import Decimal
from typing import Any

import pytest

from apis.extension.device_allocated import DeviceAllocation, VirtualFunction, encode_device_allocations
from scheduler.cluster import NodeInfo
from scheduler.deviceshare.plugin import DeviceShare
from scheduler.deviceshare.state import VF, Allocation, DeviceState, encode_allocations, read_allocations

ALLOCATED = "scheduling.koordinator.sh/device-allocated"
CORE, MEM, RATIO = "koordinator.sh/gpu-core", "koordinator.sh/gpu-memory", "koordinator.sh/gpu-memory-ratio"
GI = 1024**3


def device(n: int = 2, healthy: bool = True) -> dict[str, Any]:
    return {"metadata": {"name": "n1"}, "spec": {"devices": [
        {"type": "gpu", "id": f"GPU-{i}", "minor": i, "health": healthy if i == 0 else True,
         "resources": {CORE: "100", MEM: "16Gi", RATIO: "100"},
         "topology": {"nodeID": 0, "pcieID": f"p{i}"}} for i in range(n)]}}


def pod(name: str, annotation: str | None = None, phase: str = "Running") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "annotations": {ALLOCATED: annotation} if annotation else {}},
            "spec": {"nodeName": "n1", "containers": []}, "status": {"phase": phase}}


def gpu_alloc(minor: int, ratio: int, mem: str) -> str:
    return json.dumps({"gpu": [{"minor": minor, "resources": {RATIO: str(ratio), MEM: mem}}]})


def test_used_rebuilt_from_assigned_active_pods() -> None:
    node = NodeInfo("n1", {}, {}, device=device())
    node.add_pod(pod("a", gpu_alloc(0, 30, "4Gi")))
    node.add_pod(pod("b", gpu_alloc(0, 20, "2Gi")))
    node.add_pod(pod("done", gpu_alloc(1, 100, "16Gi"), phase="Succeeded"))
    st = DeviceState().node(node)
    assert st.used["gpu"] == {0: {RATIO: 50, MEM: 6 * GI}}
    assert st.free["gpu"][0] == {CORE: 100, MEM: 10 * GI, RATIO: 50}
    assert st.free["gpu"][1] == {CORE: 100, MEM: 16 * GI, RATIO: 100}
    assert st.free_sum["gpu"] == {CORE: 200, MEM: 26 * GI, RATIO: 150}


def test_incremental_add_remove_and_reconcile() -> None:
    node = NodeInfo("n1", {}, {}, device=device())
    state = DeviceState()
    st = state.node(node)
    node.add_pod(pod("a", gpu_alloc(1, 100, "16Gi")))
    assert state.node(node) is st and st.free["gpu"][1] == {CORE: 100, MEM: 0, RATIO: 0}
    node.remove_pod("ns/a")
    assert state.node(node).free["gpu"][1] == {CORE: 100, MEM: 16 * GI, RATIO: 100}
    # a reservation not yet among node.pods survives reconciliation, and unreserve undoes it
    state.reserve(node, "ns/x", {"gpu": [Allocation(0, {RATIO: 100, MEM: 16 * GI})]})
    node.add_pod(pod("other"))
    assert state.node(node).free["gpu"][0][RATIO] == 0
    state.pod_removed("n1", "ns/x")
    assert state.node(node).free["gpu"][0][RATIO] == 100 and "gpu" not in {t for t, u in st.used.items() if u}


def test_over_used_minor_clips_free_at_zero() -> None:
    node = NodeInfo("n1", {}, {}, device=device())
    node.add_pod(pod("a", gpu_alloc(1, 100, "16Gi")))
    node.add_pod(pod("b", gpu_alloc(1, 100, "16Gi")))
    st = DeviceState().node(node)
    assert st.free["gpu"][1] == {CORE: 100, MEM: 0, RATIO: 0} and st.used["gpu"][1][RATIO] == 200


def test_unhealthy_device_has_no_resources() -> None:
    st = DeviceState().node(NodeInfo("n1", {}, {}, device=device(healthy=False)))
    assert st.devices["gpu"][0].total == {} and st.free["gpu"][0] == {}
    assert st.total_sum["gpu"] == {CORE: 100, MEM: 16 * GI, RATIO: 100}


@pytest.mark.parametrize("raw", ["{not json", "[]", '{"gpu": {"minor": 0}}', '{"gpu": [{"minor": "x"}]}',
                                 '{"gpu": [{"minor": 0, "resources": {"koordinator.sh/gpu-core": "lots"}}]}',
                                 '{"gpu": [{"minor": 0, "resources": []}]}'])
def test_malformed_annotation_is_ignored_with_the_pod_named(raw: str, caplog: pytest.LogCaptureFixture) -> None:
    node = NodeInfo("n1", {}, {}, device=device())
    node.add_pod(pod("bad", raw))
    node.add_pod(pod("good", gpu_alloc(1, 100, "16Gi")))
    ds = DeviceShare()
    with caplog.at_level(logging.WARNING):
        st = ds.state.node(node)
    assert "ns/bad" in st.malformed and "ns/bad" in caplog.text
    assert st.free["gpu"][0] == {CORE: 100, MEM: 16 * GI, RATIO: 100}
    p = {"metadata": {"name": "p", "namespace": "ns"},
         "spec": {"containers": [{"resources": {"requests": {"nvidia.com/gpu": 1}}}]}}
    assert ds.filter(p, node, None) is None  # type: ignore[arg-type]
    assert json.loads(ds.reserve(p, node, None)[ALLOCATED])["gpu"][0]["minor"] == 0  # type: ignore[arg-type]


def test_device_cr_replacement_rebuilds_and_keeps_inflight() -> None:
    node = NodeInfo("n1", {}, {}, device=device())
    state = DeviceState()
    state.reserve(node, "ns/x", {"gpu": [Allocation(0, {RATIO: 100})]})
    node.device = device(n=3)
    st = state.node(node)
    assert sorted(st.devices["gpu"]) == [0, 1, 2] and st.free["gpu"][0][RATIO] == 0


def test_encode_matches_go_shape_and_round_trips() -> None:
    allocs = {"rdma": [Allocation(1, {"koordinator.sh/rdma": 1}, [VF(0, "0000:09:00.2"), VF(3, "0000:09:00.5")])],
              "gpu": [Allocation(0, {RATIO: 100, CORE: 100, MEM: 85198045184}, template="t1")]}
    raw = encode_allocations(allocs, {("gpu", 0): "GPU-0", ("rdma", 1): ""})
    assert raw == ('{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100",'
                   '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-0",'
                   '"extension":{"gpuSharedResourceTemplate":"t1"}}],'
                   '"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},'
                   '"extension":{"vfs":[{"busID":"0000:09:00.2"},{"minor":3,"busID":"0000:09:00.5"}]}}]}')
    back = read_allocations(raw)
    assert back["gpu"][0].resources == allocs["gpu"][0].resources
    assert back["rdma"][0].vfs == allocs["rdma"][0].vfs


def _direct(allocs: dict[str, list[Allocation]], ids: dict[tuple[str, int], str]) -> str:
    """The annotation straight from the wire encoder, nothing remembered."""
    return encode_device_allocations({t: [DeviceAllocation(a.minor, {r: Decimal(v) for r, v in a.resources.items()},
                                                           ids.get((t, a.minor), ""),
                                                           tuple(VirtualFunction(v.minor, v.bus_id) for v in a.vfs),
                                                           a.template) for a in items] for t, items in allocs.items()})


@pytest.mark.parametrize("ids", [
    {("gpu", 0): "GPU-a", ("gpu", 1): "GPU-b", ("rdma", 1): "nic"},
    {("gpu", 0): "GPU-c", ("gpu", 1): "", ("rdma", 1): "nic2"},  # an id not known: the key left out
    {("gpu", 0): 'quote"and\\slash', ("gpu", 1): "GPU-ä\u2603", ("rdma", 1): "\x00"},  # escaped as json writes them
    {},
])
def test_encoding_remembered_per_allocation_fills_in_each_nodes_ids(ids: dict[tuple[str, int], str]) -> None:
    first = {"gpu": [Allocation(0, {CORE: 50, RATIO: 50, MEM: 8 * GI}), Allocation(1, {CORE: 50, RATIO: 50})],
             "rdma": [Allocation(1, {"koordinator.sh/rdma": 1}, [VF(-1, "0000:09:00.2")], template="x")]}
    for other in ({("gpu", 0): "GPU-z", ("gpu", 1): "GPU-y", ("rdma", 1): "nic-z"}, ids, {("gpu", 1): "GPU-0"}, ids):
        assert encode_allocations(first, other) == _direct(first, other)
    odd = {"rdma": [Allocation(0, {"koordinator.sh/rdma": 1}, [VF(-1, "\x000\x00")])]}  # looks like a placeholder
    for other in ({("rdma", 0): "r0"}, {("rdma", 0): "r1"}, {}):
        assert encode_allocations(odd, other) == _direct(odd, other)
