"""DeviceShare's node state kept across pod changes: pods holding no device are not accounted, and a reserved pod
arriving as the node's one change is taken without reading the node's pods again — the kept state always equals one
built afresh from the node's pods (and the reservations still in flight)."""

from __future__ import annotations

import json
import random
from typing import Any

from scheduler.cluster import NodeInfo
from scheduler.deviceshare.state import Allocation, Allocations, DeviceState, NodeDeviceState

ALLOCATED = "scheduling.koordinator.sh/device-allocated"
CORE, RATIO = "koordinator.sh/gpu-core", "koordinator.sh/gpu-memory-ratio"


def _device(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"devices": [
        {"type": "gpu", "id": f"GPU-{m}", "minor": m, "health": True, "resources": {CORE: "100", RATIO: "100"}}
        for m in range(4)]}}


def _pod(name: str, minor: int | None) -> dict[str, Any]:
    annotations = {} if minor is None else {ALLOCATED: json.dumps(
        {"gpu": [{"minor": minor, "resources": {CORE: "25", RATIO: "25"}}]})}
    return {"metadata": {"name": name, "namespace": "ns", "annotations": annotations},
            "spec": {"nodeName": "n1", "containers": []}, "status": {"phase": "Running"}}


def _seen(st: NodeDeviceState) -> tuple[object, ...]:
    return ({t: {m: dict(u) for m, u in ms.items() if u} for t, ms in st.used.items() if ms}, st.free, st.free_sum,
            st.totals())


def _afresh(node: NodeInfo, inflight: dict[str, Allocations]) -> NodeDeviceState:
    state = DeviceState()
    for k, allocs in inflight.items():
        state.reserve(node, k, allocs)
    return state.node(node)


def test_kept_state_equals_one_built_afresh_through_random_pod_changes() -> None:
    rng = random.Random(3)
    node = NodeInfo("n1", {}, {}, device=_device("n1"))
    for c in range(4):
        node.add_pod(_pod(f"cpu{c}", None))
    state = DeviceState()
    inflight: dict[str, Allocations] = {}
    bound = fast = 0
    for step in range(400):
        op = rng.choice(["cpu", "gpu", "remove", "replace", "reserve", "bind", "bind", "unreserve"])
        name = f"p{step}"
        if op in ("cpu", "gpu"):
            node.add_pod(_pod(name, rng.randrange(4) if op == "gpu" else None))
        elif op == "remove" and node.pods:
            node.remove_pod(rng.choice(sorted(node.pods)))
        elif op == "replace" and node.pods:  # the same key, another object: with or without devices now
            k = rng.choice(sorted(node.pods))
            node.remove_pod(k)
            node.add_pod(_pod(k.split("/")[1], rng.choice([None, rng.randrange(4)])))
        elif op == "reserve":
            minor = rng.randrange(4)
            inflight[f"ns/{name}"] = {"gpu": [Allocation(minor, {CORE: 25, RATIO: 25})]}
            state.reserve(node, f"ns/{name}", inflight[f"ns/{name}"])
        elif op == "bind" and inflight:
            k = rng.choice(sorted(inflight))
            allocs = inflight.pop(k)
            before = state.node(node).synced_pods
            pod = _pod(k.split("/")[1], allocs["gpu"][0].minor)
            other = rng.random()
            if other < 0.2:  # another change lands in the same look: the whole reconcile runs
                node.add_pod(_pod(f"also{step}", rng.choice([None, 1])))
            elif other < 0.4 and node.pods:  # one replaced under its key: the same count, two generations more
                k2 = rng.choice(sorted(node.pods))
                node.remove_pod(k2)
                node.add_pod(_pod(k2.split("/")[1], rng.choice([None, 2])))
            node.add_pod(pod)
            bound += 1
            fast += state.node(node).synced_pods == (before[0] + 1, before[1] + 1)
        elif op == "unreserve" and inflight:
            k = rng.choice(sorted(inflight))
            del inflight[k]
            state.pod_removed("n1", k)
        assert _seen(state.node(node)) == _seen(_afresh(node, inflight)), (step, op)
    assert bound > 20 and 0 < fast < bound


def test_a_foreign_pod_arriving_while_one_is_in_flight_is_accounted() -> None:
    node = NodeInfo("n1", {}, {}, device=_device("n1"))
    state = DeviceState()
    state.reserve(node, "ns/mine", {"gpu": [Allocation(0, {CORE: 25, RATIO: 25})]})
    node.add_pod(_pod("theirs", 1))  # one pod more, one generation step: not the one in flight
    st = state.node(node)
    assert st.used["gpu"][1] == {CORE: 25, RATIO: 25} and "ns/mine" in st.inflight
