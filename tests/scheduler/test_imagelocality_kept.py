"""ImageLocality's scores kept between cycles (scheduler.vectorcache): with nodes listing images, the kept path
places every pod where the per-node cycle does, with the same scores, while pods land and nodes' images change;
the rows hook answers exactly what the whole vector does."""

from __future__ import annotations

import copy
import random
from typing import Any

import numpy as np

from scheduler.cli import profile
from scheduler.cluster import build_cluster
from scheduler.framework import Scheduler
from scheduler.interfaces import Placement
from scheduler.nodeindex import node_index
from scheduler.plugins.imagelocality import ImageLocality

MB = 1024 * 1024
IMAGES = [f"reg.io/app{k}:v1" for k in range(6)]


def _images(rng: random.Random) -> list[dict[str, Any]]:
    return [{"names": [name], "sizeBytes": rng.choice([10, 200, 800, 1900]) * MB}
            for name in IMAGES if rng.random() < 0.4]


def _node(name: str, rng: random.Random) -> dict[str, Any]:
    return {"kind": "Node", "metadata": {"name": name, "labels": {}}, "spec": {},
            "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "30"}, "images": _images(rng)}}


def _pod(i: int, rng: random.Random) -> dict[str, Any]:
    containers = [{"name": f"c{k}", "image": rng.choice(IMAGES),
                   "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}} for k in range(rng.choice([1, 1, 2]))]
    return {"kind": "Pod", "metadata": {"name": f"p{i}", "namespace": "t"}, "spec": {"containers": containers}}


def _each(sched: Scheduler, pod: dict[str, Any]) -> Placement:
    with sched.cycle(pod) as cycle:
        return cycle.run_each()


def test_kept_image_scores_follow_placements_and_image_changes() -> None:
    for seed in range(3):
        rng = random.Random(seed)
        objects = [_node(f"n{i:02d}", rng) for i in range(20)]
        fast, slow = (Scheduler(build_cluster(copy.deepcopy(objects)), profile(None)) for _ in range(2))
        kept = [s for s in fast.vectors.scorers if s is not None]
        assert any(isinstance(s, ImageLocality) for s in kept)  # the framework keeps its scores
        for i in range(90):
            pod = _pod(i, rng)
            a, b = fast.schedule(copy.deepcopy(pod)), _each(slow, copy.deepcopy(pod))
            assert (a.node, a.reason) == (b.node, b.reason), (seed, i)
            assert dict(a.scores) == dict(b.scores), (seed, i)
            if i % 9 == 8:  # a node pulls or drops images: every node's share of those images moves
                name = f"n{rng.randrange(20):02d}"
                images = _images(rng)
                for s in (fast, slow):
                    node = s.cluster.nodes[name]
                    obj = copy.deepcopy(node.obj)
                    obj["status"]["images"] = copy.deepcopy(images)
                    node.obj = obj


def test_rows_equal_the_whole_vector() -> None:
    rng = random.Random(7)
    cluster = build_cluster([_node(f"n{i:02d}", rng) for i in range(30)])
    index = node_index(cluster)
    plugin = ImageLocality()
    for i in range(20):
        pod = _pod(i, rng)
        plugin.score_shape(pod, index)
        whole = plugin.score_vector(pod, index)
        want = np.full(len(index), whole) if isinstance(whole, int) else whole
        assert plugin.score_rows(pod, index, slice(None)).tolist() == want.tolist()
        rows = np.array(sorted(rng.sample(range(len(index)), 3)), dtype=np.int64)
        assert plugin.score_rows(pod, index, rows).tolist() == want[rows].tolist()
        many = np.arange(0, len(index), 2, dtype=np.int64)
        assert plugin.score_rows(pod, index, many).tolist() == want[many].tolist()
        assert [plugin.score(pod, n, cluster) for n in index.nodes] == want.tolist()


def test_no_images_listed_is_one_shape() -> None:
    cluster = build_cluster([{"kind": "Node", "metadata": {"name": f"n{i}"}, "spec": {},
                              "status": {"allocatable": {"cpu": "4"}}} for i in range(3)])
    index = node_index(cluster)
    plugin = ImageLocality()
    rng = random.Random(1)
    assert {plugin.score_shape(_pod(i, rng), index) for i in range(5)} == {("none",)}
    assert plugin.score_rows(_pod(9, rng), index, slice(None)).tolist() == [0, 0, 0]
