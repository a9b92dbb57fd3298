"""What a cold start builds lazily or shares equals what an eager build gives: DeviceShare's per-node device state
(built on a node's first Filter/Reserve, its vector rows read from the Device CR until then), LoadAware's NodeMetric
facts kept across placements, the requests a node keeps per pod and the requests parsed once per pod shape."""

from __future__ import annotations

import copy
import json
import random
import time
from typing import Any

import numpy as np
import pytest

from apis.core.errors import InvalidInput
from scheduler.cli import profile
from scheduler.cluster import NodeInfo, build_cluster, pod_requests
from scheduler.deviceshare.plugin import DeviceShare
from scheduler.deviceshare.state import DeviceState, NodeDeviceState, unused_totals
from scheduler.framework import Scheduler
from scheduler.nodeindex import node_index
from scheduler.plugins.loadaware import LoadAware


def _now() -> str:
    """NodeMetrics' updateTime when the objects are built: a time taken at import is minutes old by the time the
    whole suite reaches these tests, and LoadAware refuses nodes whose NodeMetric has expired."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
ALLOCATED = "scheduling.koordinator.sh/device-allocated"
CORE, MEM, RATIO = "koordinator.sh/gpu-core", "koordinator.sh/gpu-memory", "koordinator.sh/gpu-memory-ratio"


def _device(name: str, rng: random.Random, gpus: int) -> dict[str, Any]:
    memory = rng.choice(["80Gi", "40Gi"])  # two models: nodes of one model share their sums
    devices: list[dict[str, Any]] = [
        {"type": "gpu", "id": f"{name}-{m}", "minor": m, "health": rng.random() > 0.15,
         "resources": {CORE: "100", MEM: memory, RATIO: "100"},
         "topology": {"socketID": -1, "nodeID": m // 4, "pcieID": f"p{m // 2}", "busID": f"b{m}"}}
        for m in range(gpus)]
    if rng.random() < 0.3:  # the same minor listed twice: the later entry counts
        devices.append({**devices[0], "health": True, "resources": {CORE: "100", MEM: "16Gi", RATIO: "100"}})
    if rng.random() < 0.4:
        devices.append({"type": "rdma", "id": f"{name}-nic", "minor": 0, "health": True,
                        "resources": {"koordinator.sh/rdma": "100"},
                        "vfGroups": [{"vfs": [{"minor": -1, "busID": f"{name}-vf{v}"} for v in range(2)]}]})
    if rng.random() < 0.1:  # a quantity that does not parse: the entry is left out (reported once)
        devices.append({"type": "fpga", "minor": 0, "health": True, "resources": {"koordinator.sh/fpga": "lots"}})
    labels = {"node.koordinator.sh/secondary-device-well-planned": "true"} if rng.random() < 0.2 else {}
    return {"kind": "Device", "metadata": {"name": name, "labels": labels}, "spec": {"devices": devices}}


def _pod(name: str, kind: str, node: str = "", allocated: str | None = None) -> dict[str, Any]:
    requests = {"cpu": "1", "memory": "2Gi"}
    if kind == "whole":
        requests["koordinator.sh/gpu"] = "100"
    elif kind == "two":
        requests["koordinator.sh/gpu"] = "200"
    elif kind == "shared":
        requests |= {CORE: "50", RATIO: "50"}
    elif kind == "rdma":
        requests |= {"koordinator.sh/gpu": "100", "koordinator.sh/rdma": "1"}
    pod: dict[str, Any] = {"kind": "Pod", "metadata": {"name": name, "namespace": "t",
                                                       "annotations": {ALLOCATED: allocated} if allocated else {}},
                           "spec": {"containers": [{"name": "c", "resources": {"requests": requests}}]},
                           "status": {"phase": "Running" if node else "Pending"}}
    if node:
        pod["spec"]["nodeName"] = node
    return pod


def _objects(seed: int, nodes: int = 14) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for i in range(nodes):
        name = f"n{i:02d}"
        gpus = rng.choice([0, 4, 8, 8])
        out.append({"kind": "Node", "metadata": {"name": name},
                    "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110",
                                               "koordinator.sh/gpu": str(100 * gpus),
                                               "koordinator.sh/rdma": "100"}}})
        out.append({"kind": "NodeMetric", "metadata": {"name": name}, "status": {
            "updateTime": _now(), "nodeMetric": {"nodeUsage": {"resources": {"cpu": str(rng.randint(1, 40)),
                                                                          "memory": "20Gi"}}}}})
        if gpus:
            out.append(_device(name, rng, gpus))
        for j in range(rng.randint(0, 3)):
            held = None
            if gpus and rng.random() < 0.3:  # a running pod holding part of GPU 1
                held = json.dumps({"gpu": [{"minor": 1, "resources": {RATIO: "30", MEM: "8Gi"}}]})
            out.append(_pod(f"run-{i}-{j}", "cpu", name, held))
    return out


def _plugin(sched: Scheduler) -> DeviceShare:
    found = [p for p in sched.profile.plugins if isinstance(p, DeviceShare)]
    assert found
    return found[0]


def _eager(objects: list[dict[str, Any]]) -> Scheduler:
    """A scheduler whose DeviceShare built every node's full state before its first sync (as before)."""
    sched = Scheduler(build_cluster(copy.deepcopy(objects)), profile(None))
    plugin = _plugin(sched)
    for node in sched.cluster.nodes.values():
        plugin.state.node(node)
    sched.prepare(freeze=False)
    return sched


def _lazy(objects: list[dict[str, Any]]) -> Scheduler:
    sched = Scheduler(build_cluster(copy.deepcopy(objects)), profile(None))
    sched.prepare(freeze=False)
    return sched


def _vectors(sched: Scheduler, pod: dict[str, Any]) -> tuple[list[bool] | None, list[int]]:
    plugin, index = _plugin(sched), node_index(sched.cluster)
    ok = plugin.prefilter_vector(pod, index)
    return (None if ok is None else ok.tolist()), plugin.score_vector(pod, index).tolist()


def test_unused_totals_equal_the_full_state_of_each_node() -> None:
    malformed = 0
    for seed in range(6):
        for o in _objects(seed):
            if o["kind"] != "Device":
                continue
            node = NodeInfo(o["metadata"]["name"], {}, {}, device=o)
            full = NodeDeviceState(node).totals()
            state = DeviceState()
            assert state.totals(node) == full
            if any(d["resources"].get("koordinator.sh/fpga") == "lots" for d in o["spec"]["devices"]):
                malformed += 1
                with pytest.raises(InvalidInput):
                    unused_totals(o)
                assert node.name in state.nodes  # the full state was built, and left the entry out
            else:
                assert unused_totals(o) == full and node.name not in state.nodes
    assert malformed


def test_lazy_device_state_places_and_scores_as_the_eager_one_through_placements_deletions_and_updates() -> None:
    kinds = ["whole", "shared", "two", "rdma", "cpu"]
    for seed in range(3):
        objects = _objects(seed)
        lazy, eager = _lazy(objects), _eager(objects)
        # before any placement, only the nodes whose pods hold devices (or whose Device CR has an entry that does
        # not parse) have a full state
        holders = {o["spec"]["nodeName"] for o in objects if o["kind"] == "Pod" and o["metadata"]["annotations"]}
        holders |= {o["metadata"]["name"] for o in objects if o["kind"] == "Device" and any(
            d["resources"].get("koordinator.sh/fpga") == "lots" for d in o["spec"]["devices"])}
        assert set(_plugin(lazy).state.nodes) == holders
        rng = random.Random(seed)
        placed: list[tuple[str, str]] = []
        for k in range(24):
            pod = _pod(f"p{k}", rng.choice(kinds))
            assert _vectors(lazy, pod) == _vectors(eager, pod)
            a, b = lazy.schedule(copy.deepcopy(pod)), eager.schedule(copy.deepcopy(pod))
            assert (a.node, a.annotations) == (b.node, b.annotations)
            if a.node is not None:
                placed.append((a.node, f"t/p{k}"))
            if k % 6 == 5 and placed:  # a placed pod is deleted
                node, key = placed.pop(rng.randrange(len(placed)))
                for sched in (lazy, eager):
                    sched.cluster.nodes[node].remove_pod(key)
                    _plugin(sched).pod_removed(node, key)
            if k % 8 == 7:  # a node's Device CR is replaced (one GPU less healthy)
                name = rng.choice([n for n, info in lazy.cluster.nodes.items() if info.device is not None])
                for sched in (lazy, eager):
                    device = copy.deepcopy(sched.cluster.nodes[name].device)
                    device["spec"]["devices"][0]["health"] = False
                    sched.cluster.nodes[name].device = device
        assert len(placed) > 4


def test_loadaware_keeps_metric_facts_until_the_metric_is_replaced() -> None:
    objects = _objects(1)
    sched = _lazy(objects)
    clock = [time.time()]
    plugin = LoadAware(now=lambda: clock[0])
    index = node_index(sched.cluster)
    plugin.sync(index)
    name = "n03"
    node = sched.cluster.nodes[name]
    before = plugin.loads.get(node)
    assert before is not None
    extra = _pod("extra", "cpu", name)
    node.add_pod(extra)
    after = plugin.loads.get(node)
    assert after is not None and after.node_usage is before.node_usage  # the metric was not read again
    assert after.node_delta["cpu"] == before.node_delta["cpu"] + plugin.estimate(extra)["cpu"] > 0
    node.nodemetric = {"status": {"updateTime": _now(), "nodeMetric": {"nodeUsage": {"resources": {"cpu": "63"}}}}}
    replaced = plugin.loads.get(node)
    assert replaced is not None and replaced.node_usage is not None and replaced.node_usage["cpu"] == 63000
    # and all of it equals a plugin built from scratch on the cluster as it is now, with the same clock
    fresh = LoadAware(now=lambda: clock[0])
    for p in (plugin, fresh):
        p.sync(node_index(sched.cluster))
    for n in sched.cluster.nodes.values():
        mine, theirs = plugin.loads.get(n), fresh.loads.get(n)
        assert mine is not None and theirs is not None
        assert (mine.usage(), mine.prod(), mine.capacity) == (theirs.usage(), theirs.prod(), theirs.capacity)
    assert np.array_equal(plugin.prefilter_vector(_pod("q", "cpu"), index),
                          fresh.prefilter_vector(_pod("q", "cpu"), index))


def test_requests_are_parsed_once_per_shape_and_handed_out_as_copies() -> None:
    a, b = _pod("a", "whole"), _pod("b", "whole")
    first = pod_requests(a)
    first["cpu"] = 1  # a caller's change stays its own
    assert pod_requests(b) == {"cpu": 1000, "memory": 2 * 1024**3, "koordinator.sh/gpu": 100}
    # what makes a shape: the limits too (a missing request is its limit), and the quantities' types
    limits_only = {"kind": "Pod", "metadata": {"name": "l", "namespace": "t"}, "spec": {"containers": [
        {"name": "c", "resources": {"limits": {"cpu": "2", "memory": "2Gi"}}}]}}
    assert pod_requests(limits_only) == {"cpu": 2000, "memory": 2 * 1024**3}
    numeric = copy.deepcopy(limits_only)
    numeric["spec"]["containers"][0]["resources"]["limits"]["cpu"] = 3
    assert pod_requests(numeric) == {"cpu": 3000, "memory": 2 * 1024**3}
    assert pod_requests(limits_only)["cpu"] == 2000


def test_a_node_subtracts_what_it_added_for_a_pod() -> None:
    node = NodeInfo("n", {}, {"cpu": 8000})
    pod = _pod("a", "cpu", "n")
    node.add_pod(pod)
    assert node.requests_of("t/a") == {"cpu": 1000, "memory": 2 * 1024**3}
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "3"  # changed in place after it was counted
    node.remove_pod("t/a")
    assert node.requested == {"cpu": 0, "memory": 0, "pods": 0} and node.requests_of("t/a") is None
