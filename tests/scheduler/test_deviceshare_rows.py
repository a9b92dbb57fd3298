"""DeviceShare answers a cycle's few changed rows in Python from each node's device totals, and fills its arrays
only when an array is read: every row answered that way equals the arrays' answer for it, on nodes with held,
unhealthy and missing devices, well-planned NICs and partition tables, through placements and Device CR changes."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import numpy as np

from scheduler.cli import profile
from scheduler.cluster import build_cluster
from scheduler.deviceshare.plugin import DeviceShare
from scheduler.framework import Scheduler
from scheduler.nodeindex import node_index

PLANNED = "node.koordinator.sh/secondary-device-well-planned"
TABLE = json.dumps({"1": [{"minors": [0], "allocationScore": 1}], "2": [{"minors": [0, 1], "allocationScore": 1}]})
JOINT = '{"deviceTypes":["gpu","rdma"]}'
SHAPES: list[tuple[dict[str, str], dict[str, str]]] = [
    ({"cpu": "1", "koordinator.sh/gpu": "100"}, {}),
    ({"cpu": "1", "koordinator.sh/gpu": "200"}, {}),
    ({"cpu": "1", "koordinator.sh/gpu-core": "60", "koordinator.sh/gpu-memory-ratio": "60"}, {}),
    ({"cpu": "1", "koordinator.sh/gpu": "100", "koordinator.sh/rdma": "1"},
     {"scheduling.koordinator.sh/device-joint-allocate": JOINT}),
    ({"cpu": "1", "koordinator.sh/rdma": "50"}, {}),
    ({"cpu": "1", "koordinator.sh/gpu-memory": "50Gi"}, {}),
]


def _device(name: str, rng: random.Random) -> dict[str, Any]:
    gpus = rng.choice([0, 1, 2, 4, 8])
    devices: list[dict[str, Any]] = [
        {"type": "gpu", "id": f"{name}-{m}", "minor": m, "health": rng.random() < 0.8,
         "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "80Gi",
                       "koordinator.sh/gpu-memory-ratio": "100"},
         "topology": {"socketID": -1, "nodeID": m // 4, "pcieID": f"p{m // 2}", "busID": f"b{m}"}}
        for m in range(gpus)]
    if rng.random() < 0.6:
        devices.append({"type": "rdma", "id": f"{name}-nic", "minor": 0, "health": True,
                        "resources": {"koordinator.sh/rdma": "100"},
                        "topology": {"socketID": -1, "nodeID": 0, "pcieID": "p0"}})
    labels = {PLANNED: "true"} if rng.random() < 0.3 else {}
    annotations = {"scheduling.koordinator.sh/gpu-partitions": TABLE} if rng.random() < 0.2 else {}
    return {"kind": "Device", "metadata": {"name": name, "labels": labels, "annotations": annotations},
            "spec": {"devices": devices}}


def _pod(name: str, shape: int) -> dict[str, Any]:
    requests, annotations = SHAPES[shape]
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "t", "annotations": dict(annotations)},
            "spec": {"containers": [{"name": "c", "resources": {"requests": dict(requests)}}]}}


def _objects(rng: random.Random) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(20):
        name = f"n{i:02d}"
        out.append({"kind": "Node", "metadata": {"name": name}, "spec": {},
                    "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "40",
                                               "koordinator.sh/gpu": "800", "koordinator.sh/rdma": "100"}}})
        out.append(_device(name, rng))
    return out


def _rows_equal_arrays(ds: DeviceShare, sched: Scheduler, step: int) -> int:
    """Every row answered alone (the Python path) against all rows at once (the arrays); how many rows pass."""
    index = node_index(sched.cluster)
    passing = 0
    for shape in range(len(SHAPES)):
        pod = _pod(f"ask-{step}-{shape}", shape)
        ds.prefilter_shape(pod, index)
        whole = ds.prefilter_rows(pod, index, slice(None)), ds.score_rows(pod, index, slice(None))
        for i in range(len(index)):
            one = np.array([i], dtype=np.int64)
            alone = ds.prefilter_rows(pod, index, one), ds.score_rows(pod, index, one)
            assert (bool(alone[0][0]), int(alone[1][0])) == (bool(whole[0][i]), int(whole[1][i])), \
                (step, shape, index.names[i])
        passing += int(whole[0].sum())
    return passing


def test_rows_answered_alone_equal_the_arrays_through_placements_and_changes() -> None:
    rng = random.Random(5)
    sched = Scheduler(build_cluster(copy.deepcopy(_objects(rng))), profile(None))
    sched.prepare(freeze=False)
    ds = sched.profile.by_name["DeviceShare"]
    assert isinstance(ds, DeviceShare)
    placed = passing = 0
    for step in range(30):
        if step % 5 == 4:
            name = sorted(sched.cluster.nodes)[rng.randrange(20)]
            sched.cluster.nodes[name].device = _device(name, rng)
        else:
            for k in range(3):
                placed += sched.schedule(_pod(f"p{step}-{k}", rng.randrange(len(SHAPES)))).node is not None
        passing += _rows_equal_arrays(ds, sched, step)
    assert placed >= 40 and passing > 0  # devices were taken, and rows of every kind were asked


def test_arrays_filled_late_equal_a_fresh_fill() -> None:
    """Rows synced but not yet written (placements answered in Python only) are written before an array is read:
    the arrays then answer as a DeviceShare that filled every row at once."""
    rng = random.Random(8)
    sched = Scheduler(build_cluster(copy.deepcopy(_objects(rng))), profile(None))
    sched.prepare(freeze=False)
    ds = sched.profile.by_name["DeviceShare"]
    for k in range(25):  # one shape: its kept rows are refreshed alone, in Python
        sched.schedule(_pod(f"p{k}", 2))
    index = node_index(sched.cluster)
    fresh = DeviceShare()
    for shape in range(len(SHAPES)):
        pod = _pod(f"new-{shape}", shape)
        kept = ds.prefilter_vector(pod, index), ds.score_vector(pod, index)  # type: ignore[attr-defined]
        whole = fresh.prefilter_vector(pod, index), fresh.score_vector(pod, index)
        assert kept[0] is not None and whole[0] is not None
        assert np.array_equal(kept[0], whole[0]) and np.array_equal(kept[1], whole[1]), shape
