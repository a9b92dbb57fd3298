"""DeviceShare's device layouts: nodes whose Device CRs list the same devices (ids aside) share one parse, and an
allocation made on a node with no device held is reused on the other such nodes — with the same placements and
`device-allocated` annotations (ids included) as allocating on every node afresh."""

from __future__ import annotations

import copy
import json
import logging
import random
from typing import Any

import pytest

import scheduler.deviceshare.state as device_state
from scheduler.cli import profile
from scheduler.cluster import build_cluster
from scheduler.deviceshare.allocator import Allocator
from scheduler.deviceshare.plugin import DeviceShare
from scheduler.deviceshare.state import NodeDeviceState, parse_devices
from scheduler.framework import Scheduler

ALLOCATED = "scheduling.koordinator.sh/device-allocated"
MODEL, PLANNED = "node.koordinator.sh/gpu-model", "node.koordinator.sh/secondary-device-well-planned"
GPU_RES = {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "80Gi",
           "koordinator.sh/gpu-memory-ratio": "100"}


def _device(name: str, layout: str, labels: dict[str, str], annotations: dict[str, str]) -> dict[str, Any]:
    """Layout A: 8 GPUs, NUMA 0 = minors 0-3, PCIe pairs (0,1), (2,3)...; B: the same GPUs in another topology (NUMA
    = minor % 2, PCIe = minor % 4: a 2-GPU pod gets (0,4) by topology); both with 2 NICs of 2 VFs; C: 4 GPUs, 1 NIC."""
    gpus, nics = (4, 1) if layout == "C" else (8, 2)
    devices: list[dict[str, Any]] = [
        {"type": "gpu", "id": f"GPU-{name}-{m}", "minor": m, "health": True, "resources": dict(GPU_RES),
         "topology": {"socketID": -1, "nodeID": m % 2 if layout == "B" else m // 4,
                      "pcieID": f"pci{m % 4 if layout == 'B' else m // 2}", "busID": f"b{m}"}}
        for m in range(gpus)]
    devices += [{"type": "rdma", "id": f"{name}-nic{k}", "minor": k, "health": True,
                 "resources": {"koordinator.sh/rdma": "100"},
                 "topology": {"socketID": -1, "nodeID": k, "pcieID": f"pci{k * 2}", "busID": f"n{k}"},
                 "vfGroups": [{"vfs": [{"minor": -1, "busID": f"n{k}.{v}"} for v in range(2)]}]}
                for k in range(nics)]
    return {"kind": "Device", "metadata": {"name": name, "labels": labels, "annotations": annotations},
            "spec": {"devices": devices}}


def _objects(rng: random.Random) -> list[dict[str, Any]]:
    """Sixteen nodes over three layouts, with what the allocator reads besides them varied: the Hopper model on the
    Device CR or on the Node (the built-in partition table), a CR with its own table, well-planned secondary
    devices (Filter allocates the GPUs alone, Reserve the NICs too), running pods holding a GPU in part and a VF."""
    table = json.dumps({"2": [{"minors": [6, 7], "gpuLinkType": "NVLink", "allocationScore": 1}]})
    out: list[dict[str, Any]] = []
    for i in range(16):
        name = f"n{i:02d}"
        layout = rng.choice("AABBC")
        labels: dict[str, str] = {}
        node_labels: dict[str, str] = {}
        annotations: dict[str, str] = {}
        extra = rng.choice(["", "", "cr-model", "node-model", "planned", "table"])
        if extra == "cr-model":
            labels[MODEL] = "H100"
        elif extra == "node-model":
            node_labels[MODEL] = "H100"
        elif extra == "planned":
            labels[PLANNED] = "true"
        elif extra == "table" and layout != "C":
            annotations["scheduling.koordinator.sh/gpu-partitions"] = table
        out.append({"kind": "Node", "metadata": {"name": name, "labels": node_labels}, "spec": {},
                    "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "40",
                                               "koordinator.sh/gpu": "800", "koordinator.sh/gpu-core": "800",
                                               "koordinator.sh/gpu-memory-ratio": "800",
                                               "koordinator.sh/gpu-memory": "640Gi", "koordinator.sh/rdma": "200"}}})
        out.append(_device(name, layout, labels, annotations))
        if rng.random() < 0.25:  # a running pod holding GPU 1 in part and a VF
            held = {"gpu": [{"minor": 1, "resources": {"koordinator.sh/gpu-core": "50",
                                                       "koordinator.sh/gpu-memory-ratio": "50"}}],
                    "rdma": [{"minor": 0, "resources": {"koordinator.sh/rdma": "1"},
                              "extension": {"vfs": [{"minor": -1, "busID": "n0.0"}]}}]}
            out.append(_pod(f"old-{i}", {"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"},
                            node=name, annotations={ALLOCATED: json.dumps(held)}))
    return out


def _pod(name: str, requests: dict[str, str], node: str = "", annotations: dict[str, str] | None = None
         ) -> dict[str, Any]:
    pod: dict[str, Any] = {"kind": "Pod", "metadata": {"name": name, "namespace": "default",
                                                       "annotations": dict(annotations or {})},
                           "spec": {"containers": [{"name": "c", "resources": {"requests": requests}}]},
                           "status": {"phase": "Running" if node else "Pending"}}
    if node:
        pod["spec"]["nodeName"] = node
    return pod


JOINT = {"scheduling.koordinator.sh/device-joint-allocate": '{"deviceTypes":["gpu","rdma"]}'}
SHAPES: list[tuple[dict[str, str], dict[str, str]]] = [
    ({"cpu": "1", "koordinator.sh/gpu": "100"}, {}),
    ({"cpu": "1", "koordinator.sh/gpu": "200"}, {}),
    ({"cpu": "1", "koordinator.sh/gpu": "400"}, {}),
    ({"cpu": "1", "koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"}, {}),
    ({"cpu": "1", "koordinator.sh/gpu": "100", "koordinator.sh/rdma": "1"}, JOINT),
    ({"cpu": "1", "koordinator.sh/rdma": "1"}, {}),
]


def _place(objects: list[dict[str, Any]], pods: list[dict[str, Any]]) -> list[tuple[str | None, str, str]]:
    sched = Scheduler(build_cluster(copy.deepcopy(objects)), profile(None))
    sched.prepare(freeze=False)
    out = []
    for pod in copy.deepcopy(pods):
        placed = sched.schedule(pod)
        out.append((placed.node, placed.annotations.get(ALLOCATED, ""), placed.reason or ""))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_reuse_places_and_allocates_as_afresh(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    objects = _objects(rng)
    pods = [_pod(f"p{k}", *map(dict, rng.choice(SHAPES))) for k in range(40)]
    calls: list[int] = []
    counted = Allocator.allocate_within

    def counting(self: Allocator, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return counted(self, *args, **kwargs)

    monkeypatch.setattr(Allocator, "allocate_within", counting)
    reused = _place(objects, pods)
    with_reuse = len(calls)
    calls.clear()
    with monkeypatch.context() as m:  # every node parsed and allocated on afresh
        m.setattr(NodeDeviceState, "unused", lambda self: False)
        m.setattr(device_state, "device_layout", device_state.parse_layout)
        afresh = _place(objects, pods)
    assert reused == afresh
    assert sum(node is not None for node, _, _ in reused) >= 30
    # ids are each node's own: every allocated device id names the node it was placed on
    for node, allocated, _ in reused:
        for items in (json.loads(allocated) if allocated else {}).values():
            assert all(node in a["id"] for a in items)
    assert with_reuse < len(calls)  # the reuse was taken (allocating afresh asks the allocator more often)


def _node(name: str, layout: str, labels: dict[str, str] | None = None, node_labels: dict[str, str] | None = None,
          annotations: dict[str, str] | None = None, held: str = "") -> list[dict[str, Any]]:
    out = [{"kind": "Node", "metadata": {"name": name, "labels": dict(node_labels or {})}, "spec": {},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "40", "koordinator.sh/gpu": "800",
                                       "koordinator.sh/rdma": "200"}}},
           _device(name, layout, dict(labels or {}), dict(annotations or {}))]
    if held:
        out.append(_pod(f"held-{name}", {"koordinator.sh/gpu": "100"}, node=name, annotations={ALLOCATED: held}))
    return out


def _allocate(objects: list[dict[str, Any]], pod: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """Filter and Reserve of one DeviceShare on each named node in turn (pods of one shape: one plan); the last
    node's device-allocated annotation."""
    cluster = build_cluster(copy.deepcopy(objects))
    plugin = DeviceShare()
    got = ""
    for k, name in enumerate(names):
        node, one = cluster.nodes[name], copy.deepcopy(pod)
        one["metadata"]["name"] = f"{one['metadata']['name']}-{k}"
        assert plugin.filter(one, node, cluster) is None
        got = plugin.reserve(one, node, cluster)[ALLOCATED]
    return {t: [(a["minor"], [v["busID"] for v in a.get("extension", {}).get("vfs", [])]) for a in items]
            for t, items in json.loads(got).items()}


GPU2 = {"koordinator.sh/gpu": "200"}
TABLE = json.dumps({"2": [{"minors": [6, 7], "gpuLinkType": "NVLink", "allocationScore": 1}]})
HELD = '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory-ratio":"100"}}]}'
# (what y differs in, x, y, the pod): x and y allocate differently; a layout's allocation made on x must not be
# taken for y
PAIRS = [
    ("topology", _node("x", "A"), _node("y", "B"), GPU2),
    ("Device CR model", _node("x", "B"), _node("y", "B", labels={MODEL: "H100"}), GPU2),
    ("Node model", _node("x", "B"), _node("y", "B", node_labels={MODEL: "H100"}), GPU2),
    ("partition table", _node("x", "A"), _node("y", "A", annotations={"scheduling.koordinator.sh/gpu-partitions":
                                                                          TABLE}), GPU2),
    ("a device held", _node("x", "A"), _node("y", "A", held=HELD), {"koordinator.sh/gpu": "100"}),
    ("well planned, Filter's GPUs before Reserve's NICs", _node("x", "A", labels={PLANNED: "true"}), _node("y", "A"),
     {"koordinator.sh/gpu": "100", "koordinator.sh/rdma": "1"}),
]


@pytest.mark.parametrize(("what", "x", "y", "requests"), PAIRS, ids=[p[0] for p in PAIRS])
def test_an_allocation_is_taken_only_where_it_is_the_same(what: str, x: list[dict[str, Any]],
                                                           y: list[dict[str, Any]], requests: dict[str, str]) -> None:
    annotations = JOINT if "koordinator.sh/rdma" in requests else {}
    pod = _pod("p", {"cpu": "1", **requests}, annotations=annotations)
    objects = x + y
    on_x, on_y = _allocate(objects, pod, ["x"]), _allocate(objects, pod, ["y"])
    wanted = {"gpu", "rdma"} if "koordinator.sh/rdma" in requests else {"gpu"}
    assert set(on_x) == set(on_y) == wanted  # Reserve allocates every type, also where Filter allocated GPUs alone
    assert on_x != on_y or what.startswith("well planned")
    assert _allocate(objects, pod, ["x", "y"]) == on_y
    assert _allocate(objects, pod, ["y", "x"]) == on_x


def _cr(name: str, minor: Any = 0, core: Any = "100") -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"devices": [
        {"type": "gpu", "id": f"{name}-gpu", "minor": minor, "health": True,
         "resources": {"koordinator.sh/gpu-core": core, "koordinator.sh/gpu-memory-ratio": "100"}}]}}


def _state(device: dict[str, Any]) -> NodeDeviceState:
    cluster = build_cluster([{"kind": "Node", "metadata": {"name": device["metadata"]["name"]},
                              "status": {"allocatable": {"cpu": "8"}}}, {"kind": "Device", **device}])
    return NodeDeviceState(next(iter(cluster.nodes.values())))


def test_equal_lists_share_one_parse_with_their_own_ids() -> None:
    a, b, c = _state(_cr("a")), _state(_cr("b")), _state(_cr("c"))
    assert b.devices is c.devices and b.layout is c.layout  # remembered by the first two parses at the latest
    assert (a.ids, b.ids, c.ids) == ({("gpu", 0): "a-gpu"}, {("gpu", 0): "b-gpu"}, {("gpu", 0): "c-gpu"})
    assert a.devices == b.devices == parse_devices(_cr("z"))


def test_values_of_another_type_are_parsed_on_their_own() -> None:
    _state(_cr("a"))
    b = _state(_cr("b"))
    odd = _state(_cr("odd", minor=0.0))  # equal to 0, not the same JSON value: never taken for the list above
    assert odd.layout is not b.layout and odd.devices == b.devices


def test_an_entry_left_out_is_logged_for_every_node(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="scheduler.deviceshare.state"):
        for name in ("a", "b", "c"):
            st = _state(_cr(name, core="lots"))
            assert st.devices == {} and st.ids == {}
    assert sum("ignoring gpu minor 0" in r.getMessage() for r in caplog.records) == 3
