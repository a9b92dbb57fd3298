"""DeviceShare end to end: the slim Scheduler places several device pods on a small cluster of our Device CRs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from scheduler.cluster import build_cluster
from scheduler.deviceshare.plugin import DeviceShare
from scheduler.deviceshare.state import read_allocations
from scheduler.framework import Profile, Scheduler
from scheduler.plugins.fit import NodeResourcesFit

from conftest import agent_device

ROOT = Path(__file__).resolve().parents[2]
ALLOCATED = "scheduling.koordinator.sh/device-allocated"


def device(example: str, name: str) -> dict[str, Any]:
    return agent_device(example, name)


def node(name: str) -> dict[str, Any]:
    return {"kind": "Node", "metadata": {"name": name},
            "status": {"allocatable": {"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": "8",
                                       "koordinator.sh/gpu-memory-ratio": "800", "koordinator.sh/gpu-core": "800",
                                       "koordinator.sh/rdma": "400"}}}


def pod(name: str, requests: dict[str, Any], annotations: dict[str, str] | None = None,
        node_name: str = "") -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "default", "annotations": dict(annotations or {})},
            "spec": {"nodeName": node_name, "containers": [{"name": "c", "resources": {"requests": requests}}]},
            "status": {"phase": "Running" if node_name else "Pending"}}


def test_scheduler_places_device_pods() -> None:
    existing = pod("old", {"cpu": "1"}, {ALLOCATED: '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100",'
                                                    '"koordinator.sh/gpu-memory-ratio":"100"}}]}'}, "h800")
    broken = pod("broken", {"cpu": "1"}, {ALLOCATED: "{oops"}, "l20")
    cluster = build_cluster([node("h800"), node("l20"), node("cpu-only"),
                             device("h800-nvlink", "h800"), device("l20-pcie", "l20"), existing, broken])
    ds = DeviceShare(scoring_strategy="MostAllocated", weight=2)
    sched = Scheduler(cluster, Profile([NodeResourcesFit(), ds], [ds], [ds]))
    joint = {"scheduling.koordinator.sh/device-joint-allocate": '{"deviceTypes":["gpu","rdma"]}'}
    pods = [pod("eight", {"nvidia.com/gpu": 8}), pod("four", {"nvidia.com/gpu": 4}),
            pod("two", {"nvidia.com/gpu": 2}), pod("rdma", {"nvidia.com/gpu": 1, "koordinator.sh/rdma": 1}, joint),
            pod("half", {"koordinator.sh/gpu-memory-ratio": 50}), pod("half2", {"koordinator.sh/gpu-memory-ratio": 50}),
            pod("cpu", {"cpu": "2"}), pod("bad", {"koordinator.sh/gpu-core": 10}),
            pod("too-many", {"nvidia.com/gpu": 8})]
    placed = {p["metadata"]["name"]: sched.schedule(p) for p in pods}
    assert placed["eight"].node == "l20"  # h800 has GPU 0 taken by "old"
    assert placed["four"].node == "h800"
    assert placed["two"].node == "h800"
    assert placed["rdma"].node is None  # h800 has no RDMA, l20 is full
    assert placed["cpu"].node is not None and not placed["cpu"].annotations
    assert placed["bad"].node is None and "invalid resource device requests" in placed["bad"].reason
    assert placed["too-many"].node is None and "Insufficient" in placed["too-many"].reason
    half, half2 = (json.loads(placed[n].annotations[ALLOCATED]) for n in ("half", "half2"))
    assert placed["half"].node == placed["half2"].node == "h800"
    assert half["gpu"][0]["minor"] == half2["gpu"][0]["minor"]  # MostAllocated packs the shared GPU
    used: dict[int, int] = {}
    for name in ("four", "two"):
        doc = json.loads(placed[name].annotations[ALLOCATED])
        assert list(doc) == ["gpu"] and all(list(a) == ["minor", "resources", "id"] for a in doc["gpu"])
        for a in doc["gpu"]:
            used[a["minor"]] = used.get(a["minor"], 0) + 1
    assert set(used.values()) == {1} and 0 not in used
    for pl in placed.values():
        if ALLOCATED in pl.annotations:
            read_allocations(pl.annotations[ALLOCATED])
    assert "default/broken" in ds.state.nodes["l20"].malformed


def test_scheduler_spreads_with_least_allocated() -> None:
    cluster = build_cluster([node("a"), node("b"), device("l20-pcie", "a"), device("l20-pcie", "b")])
    ds = DeviceShare()
    sched = Scheduler(cluster, Profile([ds], [ds], [ds]))
    nodes = [sched.schedule(pod(f"p{i}", {"nvidia.com/gpu": 1})).node for i in range(4)]
    assert sorted(nodes) == ["a", "a", "b", "b"]
    # every GPU of both nodes can be handed out exactly once
    rest = [sched.schedule(pod(f"q{i}", {"nvidia.com/gpu": 1})) for i in range(13)]
    assert sum(p.node is not None for p in rest) == 12 and rest[-1].node is None
