"""DeviceShare allocation on one node: the spec's worked examples, partitions, topology, joint GPU+RDMA, scoring."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from scheduler.cluster import NodeInfo
from scheduler.deviceshare.plugin import DeviceShare
from scheduler.deviceshare.state import read_allocations

from conftest import agent_device

ROOT = Path(__file__).resolve().parents[2]
ALLOCATED = "scheduling.koordinator.sh/device-allocated"
HINT = "scheduling.koordinator.sh/device-allocate-hint"
JOINT = "scheduling.koordinator.sh/device-joint-allocate"
PARTITION_SPEC = "scheduling.koordinator.sh/gpu-partition-spec"
H800_MEM = "83201216Ki"


def fake_h800(policy: str = "Honor") -> dict[str, Any]:
    """Upstream's fakeH800DeviceCR shape: 8 GPUs each on its own PCIe (0-3 NUMA 0, 4-7 NUMA 1), one RDMA per PCIe."""
    rdma_bus = ["0000:09:00.0", "0000:7f:00.0", "0000:a3:00.0", "0000:c7:00.0",
                "0000:0b:00.0", "0000:81:00.0", "0000:a5:00.0", "0000:c9:00.0"]
    devices: list[dict[str, Any]] = []
    for i in range(8):
        topo = {"socketID": i // 4, "nodeID": i // 4, "pcieID": str(i)}
        devices.append({"type": "gpu", "id": f"GPU-{i:08d}", "minor": i, "health": True, "topology": topo,
                        "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": H800_MEM,
                                      "koordinator.sh/gpu-memory-ratio": "100"}})
    for i, bus in enumerate(rdma_bus):
        base = bus[:-1]
        groups = [{"labels": {"type": label}, "vfs": [{"minor": 2 * g + k, "busID": f"{base}{2 + 2 * g + k}"}
                                                         for k in range(2)]}
                  for g, label in enumerate(["fakeS", "fakeG", "fakeC"])]
        devices.append({"type": "rdma", "id": bus, "minor": i + 1, "health": True, "labels": {"type": "fakeW"},
                        "resources": {"koordinator.sh/rdma": "100"},
                        "topology": {"socketID": i // 4, "nodeID": i // 4, "pcieID": str(i)}, "vfGroups": groups})
    return {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Device",
            "metadata": {"name": "n1", "labels": {"node.koordinator.sh/gpu-vendor": "nvidia",
                                                  "node.koordinator.sh/gpu-model": "H800",
                                                  "node.koordinator.sh/gpu-partition-policy": policy}},
            "spec": {"devices": devices}}


def node_with(device: dict[str, Any], name: str = "n1") -> NodeInfo:
    return NodeInfo(name, {"metadata": {"name": name}}, {}, device=device)


def pod(name: str, requests: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "annotations": dict(annotations or {})},
            "spec": {"containers": [{"name": "c", "resources": {"requests": requests}}]}}


def assigned(name: str, allocation: dict[str, Any]) -> dict[str, Any]:
    p = pod(name, {})
    p["metadata"]["annotations"][ALLOCATED] = json.dumps(allocation)
    p["spec"]["nodeName"] = "n1"
    return p


def place(ds: DeviceShare, node: NodeInfo, p: dict[str, Any]) -> dict[str, Any]:
    """filter + reserve + assume, returning the decoded annotation."""
    assert ds.filter(p, node, None) is None  # type: ignore[arg-type]
    ann = ds.reserve(p, node, None)  # type: ignore[arg-type]
    p["metadata"]["annotations"].update(ann)
    node.add_pod(p)
    doc: dict[str, Any] = json.loads(ann[ALLOCATED])
    assert_shape(doc)
    return doc


def assert_shape(doc: dict[str, Any]) -> None:
    """The documented device-allocated shape: sorted type keys; minor, resources, id, extension in that order."""
    assert list(doc) == sorted(doc)
    for items in doc.values():
        for a in items:
            keys = list(a)
            assert keys[:2] == ["minor", "resources"] and set(keys) <= {"minor", "resources", "id", "extension"}
            assert keys == [k for k in ("minor", "resources", "id", "extension") if k in a]
            assert isinstance(a["minor"], int) and all(isinstance(v, str) for v in a["resources"].values())
            assert list(a["resources"]) == sorted(a["resources"])
            for vf in (a.get("extension") or {}).get("vfs", []):
                assert list(vf) == [k for k in ("minor", "busID") if k in vf] and vf.get("minor") != 0


def minors(doc: dict[str, Any], dtype: str = "gpu") -> list[int]:
    return [a["minor"] for a in doc.get(dtype, [])]


def test_spec_example_2_gpu_2_vf_with_assigned_devices() -> None:
    """§1.8: partition {0,1} keeps {4-7} free; one RDMA per GPU PCIe, each with the lowest-busID fakeG VF."""
    node = node_with(fake_h800())
    node.add_pod(assigned("used", {"gpu": [{"minor": 2, "resources": {"koordinator.sh/gpu-core": "100"}},
                                           {"minor": 3, "resources": {"koordinator.sh/gpu-core": "100"}}]}))
    hint = {"rdma": {"vfSelector": {"matchLabels": {"type": "fakeG"}}}}
    p = pod("p", {"nvidia.com/gpu": 2, "koordinator.sh/rdma": 1},
            {HINT: json.dumps(hint), JOINT: '{"deviceTypes":["gpu","rdma"]}'})
    ds = DeviceShare()
    raw = ds.reserve(p, node, None)[ALLOCATED]  # type: ignore[arg-type]
    gpu_res = {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": H800_MEM,
               "koordinator.sh/gpu-memory-ratio": "100"}
    expected = {"gpu": [{"minor": 0, "resources": gpu_res, "id": "GPU-00000000"},
                        {"minor": 1, "resources": gpu_res, "id": "GPU-00000001"}],
                "rdma": [{"minor": 1, "resources": {"koordinator.sh/rdma": "1"}, "id": "0000:09:00.0",
                          "extension": {"vfs": [{"minor": 2, "busID": "0000:09:00.4"}]}},
                         {"minor": 2, "resources": {"koordinator.sh/rdma": "1"}, "id": "0000:7f:00.0",
                          "extension": {"vfs": [{"minor": 2, "busID": "0000:7f:00.4"}]}}]}
    assert raw == json.dumps(expected, separators=(",", ":"))


def test_h800_agent_device_partitions_align() -> None:
    """Our agent's H800 Device (Prefer + table): 1/2/4/8-GPU pods take partition-aligned minors while they fit."""
    node, ds = node_with(agent_device("h800-nvlink")), DeviceShare()
    assert minors(place(ds, node, pod("a", {"nvidia.com/gpu": 1}))) == [0]
    assert minors(place(ds, node, pod("b", {"nvidia.com/gpu": 2}))) == [2, 3]
    assert minors(place(ds, node, pod("c", {"nvidia.com/gpu": 1}))) == [1]
    assert minors(place(ds, node, pod("d", {"nvidia.com/gpu": 4}))) == [4, 5, 6, 7]
    assert ds.filter(pod("e", {"nvidia.com/gpu": 1}), node, None) == "Insufficient gpu devices"  # type: ignore[arg-type]
    empty = node_with(agent_device("h800-nvlink"), "n2")
    assert minors(place(DeviceShare(), empty, pod("f", {"nvidia.com/gpu": 8}))) == list(range(8))


def test_honor_policy_refuses_unaligned_and_prefer_falls_back() -> None:
    dev = agent_device("h800-nvlink")
    for policy, reason in (("Honor", "Insufficient Partitioned GPU Devices"), ("Prefer", None)):
        dev["metadata"]["labels"]["node.koordinator.sh/gpu-partition-policy"] = policy
        node = node_with(copy.deepcopy(dev))
        for i, m in enumerate((0, 2, 4, 6)):
            node.add_pod(assigned(f"u{i}", {"gpu": [{"minor": m, "resources": {"koordinator.sh/gpu-core": "100"}}]}))
        ds = DeviceShare()
        assert ds.filter(pod("p", {"nvidia.com/gpu": 2}), node, None) == reason  # type: ignore[arg-type]
        unsupported = ds.filter(pod("q", {"nvidia.com/gpu": 3}), node, None)  # type: ignore[arg-type]
        assert unsupported == ("node(s) Unsupported number of GPU requests" if policy == "Honor" else None)


def test_builtin_hopper_table_and_pod_partition_spec() -> None:
    """No gpu-partitions annotation: H800 gets the built-in table; Restricted stops after the first score group."""
    node = node_with(fake_h800(policy="Prefer"))
    node.add_pod(assigned("u", {"gpu": [{"minor": 1, "resources": {"koordinator.sh/gpu-core": "100"}}]}))
    ds = DeviceShare()
    spec = {PARTITION_SPEC: '{"allocatePolicy":"Restricted"}'}
    assert minors(place(ds, node, pod("p", {"nvidia.com/gpu": 4}, spec))) == [4, 5, 6, 7]
    bw = {PARTITION_SPEC: '{"ringBusBandwidth":"200Gi"}'}  # built-in entries carry no bandwidth
    assert ds.filter(pod("q", {"nvidia.com/gpu": 2}, bw), node, None) == "Insufficient Partitioned GPU Devices"  # type: ignore[arg-type]


def test_partition_score_groups_ascending() -> None:
    """[quirk] mirrored: the lowest allocationScore group is tried first."""
    dev = fake_h800()
    table = {"2": [{"minors": [0, 1], "allocationScore": 2}, {"minors": [2, 3], "allocationScore": 1}]}
    dev["metadata"]["annotations"] = {"scheduling.koordinator.sh/gpu-partitions": json.dumps(table)}
    assert minors(place(DeviceShare(), node_with(dev), pod("p", {"nvidia.com/gpu": 2}))) == [2, 3]


def test_joint_gpu_rdma_on_l20_same_pcie_with_vf() -> None:
    node = node_with(agent_device("l20-pcie"))
    ann = {HINT: json.dumps({"rdma": {"vfSelector": {}}}),
           JOINT: '{"deviceTypes":["gpu","rdma"],"requiredScope":"SamePCIe"}'}
    ds = DeviceShare()
    doc = place(ds, node, pod("p", {"nvidia.com/gpu": 1, "koordinator.sh/rdma": 1}, ann))
    gpus = {d["minor"]: d for d in agent_device("l20-pcie")["spec"]["devices"] if d["type"] == "gpu"}
    rdmas = {d["minor"]: d for d in agent_device("l20-pcie")["spec"]["devices"] if d["type"] == "rdma"}
    [g], [r] = doc["gpu"], doc["rdma"]
    assert gpus[g["minor"]]["topology"]["pcieID"] == rdmas[r["minor"]]["topology"]["pcieID"]
    assert r["id"] == rdmas[r["minor"]]["id"]
    vf = r["extension"]["vfs"][0]
    assert vf == {"minor": -1, "busID": rdmas[r["minor"]]["id"][:-1] + "2"}
    # The next pod on the same PF gets the next free VF, never the same one.
    doc2 = place(ds, node, pod("p2", {"nvidia.com/gpu": 1, "koordinator.sh/rdma": 1}, ann))
    assert doc2["gpu"][0]["minor"] != g["minor"]
    assert doc2["rdma"][0]["extension"]["vfs"][0]["busID"] != vf["busID"]


def test_joint_two_pcies_gives_two_rdma() -> None:
    """§1.5 consequence: rdma 1 with GPUs on two PCIe switches yields one RDMA allocation per GPU PCIe."""
    node = node_with(agent_device("l20-pcie"))
    for i, m in enumerate((0, 2, 5, 7)):  # every PCIe switch keeps one free GPU
        node.add_pod(assigned(f"u{i}", {"gpu": [{"minor": m, "resources": {"koordinator.sh/gpu-core": "100"}}]}))
    ann = {JOINT: '{"deviceTypes":["gpu","rdma"]}'}
    doc = place(DeviceShare(), node, pod("p", {"nvidia.com/gpu": 2, "koordinator.sh/rdma": 1}, ann))
    assert minors(doc) == [1, 3]
    assert minors(doc, "rdma") == [0, 1] and all("extension" not in a for a in doc["rdma"])


def test_joint_vf_selector_without_vfs_is_refused() -> None:
    node = node_with(fake_h800())
    ann = {HINT: json.dumps({"rdma": {"vfSelector": {"matchLabels": {"type": "nope"}}}}),
           JOINT: '{"deviceTypes":["gpu","rdma"],"requiredScope":"SamePCIe"}'}
    assert DeviceShare().filter(pod("p", {"nvidia.com/gpu": 1, "koordinator.sh/rdma": 1}, ann), node, None)  # type: ignore[arg-type]


def test_topology_scope_required() -> None:
    node = node_with(agent_device("l20-pcie"))  # 2 GPUs per PCIe, 4 per NUMA
    for i, m in enumerate((0, 2, 4)):
        node.add_pod(assigned(f"u{i}", {"gpu": [{"minor": m, "resources": {"koordinator.sh/gpu-core": "100"}}]}))
    ds = DeviceShare()
    pcie = {HINT: '{"gpu": {"requiredTopologyScope": "PCIe"}}'}
    assert ds.filter(pod("p", {"nvidia.com/gpu": 2}, pcie), node, None) is None  # type: ignore[arg-type]
    assert minors(place(ds, node, pod("p", {"nvidia.com/gpu": 2}, pcie))) == [6, 7]
    assert ds.filter(pod("q", {"nvidia.com/gpu": 2}, pcie), node, None) == "Insufficient Topology Scoped GPU Devices"  # type: ignore[arg-type]
    numa = {HINT: '{"gpu": {"requiredTopologyScope": "NUMANode"}}'}
    assert minors(place(ds, node, pod("r", {"nvidia.com/gpu": 2}, numa))) == [1, 3]
    device = {HINT: '{"gpu": {"requiredTopologyScope": "Device"}}'}  # [quirk] mirrored: never satisfiable
    assert ds.filter(pod("s", {"nvidia.com/gpu": 1}, device), node, None) == "Insufficient Topology Scoped GPU Devices"  # type: ignore[arg-type]


def test_topology_binpacks_into_used_numa() -> None:
    node = node_with(agent_device("l20-pcie"))
    node.add_pod(assigned("u", {"gpu": [{"minor": 5, "resources": {"koordinator.sh/gpu-core": "100"}}]}))
    assert minors(place(DeviceShare(), node, pod("p", {"nvidia.com/gpu": 1}))) == [4]


@pytest.mark.parametrize(("strategy", "expected"), [("MostAllocated", 0), ("LeastAllocated", 1)])
def test_shared_gpu_binpack_vs_spread(strategy: str, expected: int) -> None:
    dev = agent_device("l20-pcie")
    dev["spec"]["devices"] = [d for d in dev["spec"]["devices"] if d["type"] == "gpu" and d["minor"] < 2]
    node = node_with(dev)
    ds = DeviceShare(scoring_strategy=strategy)
    place(ds, node, pod("a", {"koordinator.sh/gpu-memory-ratio": 30}))
    doc = place(ds, node, pod("b", {"koordinator.sh/gpu-memory-ratio": 30}))
    assert minors(doc) == [expected]
    r = doc["gpu"][0]["resources"]
    assert r["koordinator.sh/gpu-memory-ratio"] == "30" and r["koordinator.sh/gpu-memory"]
    assert "koordinator.sh/gpu-core" not in r


def test_memory_only_request_gets_ratio() -> None:
    node = node_with(agent_device("l20-pcie"))
    doc = place(DeviceShare(), node, pod("a", {"koordinator.sh/gpu-memory": "23034Mi"}))
    assert doc["gpu"][0]["resources"] == {"koordinator.sh/gpu-memory": "23034Mi",
                                          "koordinator.sh/gpu-memory-ratio": "50"}


def test_node_score_strategies() -> None:
    used, empty = node_with(agent_device("l20-pcie"), "a"), node_with(agent_device("l20-pcie"), "b")
    for i in range(4):
        used.add_pod(assigned(f"u{i}", {"gpu": [{"minor": i, "resources": {"koordinator.sh/gpu-memory-ratio": "100",
                                                                           "koordinator.sh/gpu-memory": "46068Mi"}}]}))
    p = pod("p", {"nvidia.com/gpu": 1})
    spread, pack = DeviceShare(), DeviceShare(scoring_strategy="MostAllocated")
    assert spread.score(p, empty, None) > spread.score(p, used, None)  # type: ignore[arg-type]
    assert pack.score(p, used, None) > pack.score(p, empty, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        DeviceShare(scoring_strategy="Balanced")


def test_unhealthy_devices_have_no_resources() -> None:
    dev = agent_device("l20-pcie")
    for d in dev["spec"]["devices"]:
        if d["type"] == "gpu" and d["minor"] != 7:
            d["health"] = False
    node, ds = node_with(dev), DeviceShare()
    assert minors(place(ds, node, pod("a", {"nvidia.com/gpu": 1}))) == [7]
    assert ds.filter(pod("b", {"koordinator.sh/gpu-memory-ratio": 10}), node, None) == "Insufficient gpu devices"  # type: ignore[arg-type]


def test_node_without_devices_and_invalid_request() -> None:
    ds = DeviceShare()
    bare = NodeInfo("bare", {"metadata": {"name": "bare"}}, {})
    assert ds.filter(pod("a", {"nvidia.com/gpu": 1}), bare, None) == "Insufficient gpu devices"  # type: ignore[arg-type]
    assert ds.filter(pod("b", {"cpu": "1"}), bare, None) is None  # type: ignore[arg-type]
    assert ds.reserve(pod("b", {"cpu": "1"}), bare, None) == {}  # type: ignore[arg-type]
    bad = ds.filter(pod("c", {"koordinator.sh/gpu-core": 50}), bare, None)  # type: ignore[arg-type]
    assert bad == "invalid resource device requests: [koordinator.sh/gpu-core]"


def test_rdma_apply_for_all_and_selector() -> None:
    node = node_with(fake_h800())
    ann = {HINT: json.dumps({"rdma": {"allocateStrategy": "ApplyForAll",
                                      "selector": {"matchLabels": {"type": "fakeW"}}}})}
    doc = place(DeviceShare(), node, pod("p", {"koordinator.sh/rdma": 1}, ann))
    assert minors(doc, "rdma") == list(range(1, 9))
    assert read_allocations(json.dumps(doc))["rdma"][0].resources == {"koordinator.sh/rdma": 1}


def test_restricted_reservation_devices_are_the_only_ones() -> None:
    """An owner of a Restricted reservation is allocated on its devices alone; Aligned falls back to the node's."""
    from scheduler.deviceshare.state import Allocation
    from scheduler.interfaces import Unschedulable

    ds = DeviceShare()
    node = node_with(fake_h800("Prefer"))
    st = ds.state.node(node)
    want = pod("owner", {"nvidia.com/gpu": "2"})
    plan = ds.plan(want)
    held = {"gpu": [Allocation(3, {"koordinator.sh/gpu-core": 100, "koordinator.sh/gpu-memory-ratio": 100})]}
    got = ds.allocator.allocate_within(st, plan, node.labels, None, None, held)  # one reserved GPU, two wanted
    assert len(got["gpu"]) == 2  # Aligned: the node's GPUs as well (here by the H800 partition table)
    with pytest.raises(Unschedulable):
        ds.allocator.allocate_within(st, plan, node.labels, None, None, held, only_preferred=True)
