"""kube-scheduler's ImageLocality, restating its unit cases (k8s v1.28 imagelocality/image_locality_test.go
TestImageLocalityPriority, TestNormalizedImageName) on the plugin, then through `koord-sched simulate`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from kubepodfixtures import cluster_of, node, pod

from scheduler.cli import main
from scheduler.nodeindex import NodeIndex
from scheduler.plugins.imagelocality import ImageLocality, normalized_image_name

MB = 1024 * 1024


def imaged(name: str, *images: tuple[list[str], int]) -> dict[str, Any]:
    out = node(name)
    out["status"]["images"] = [{"names": names, "sizeBytes": size * MB} for names, size in images]
    return out


def spec(*images: str, init: tuple[str, ...] = ()) -> dict[str, Any]:
    extra = {"initContainers": [{"name": f"i{k}", "image": i} for k, i in enumerate(init)]} if init else {}
    return pod("p", containers=[{"name": f"c{k}", "image": i} for k, i in enumerate(images)], **extra)


N403002000 = ([["gcr.io/40:latest", "gcr.io/40:v1", "gcr.io/40:v1"], 40], [["gcr.io/300:latest", "gcr.io/300:v1"], 300],
              [["gcr.io/2000:latest"], 2000])
N25010 = ([["gcr.io/250:latest"], 250], [["gcr.io/10:latest", "gcr.io/10:v1"], 10])
N60040900 = ([["gcr.io/600:latest"], 600], [["gcr.io/40:latest"], 40], [["gcr.io/900:latest"], 900])
N300600900 = ([["gcr.io/300:latest"], 300], [["gcr.io/600:latest"], 600], [["gcr.io/900:latest"], 900])
N400030 = ([["gcr.io/4000:latest"], 4000], [["gcr.io/30:latest"], 30])
N203040 = ([["gcr.io/20:latest"], 20], [["gcr.io/30:latest"], 30], [["gcr.io/40:latest"], 40])


def scores(incoming: dict[str, Any], nodes: list[dict[str, Any]]) -> list[int]:
    """Each node's score, per node and by vector alike (ImageLocality has no NormalizeScore)."""
    cluster = cluster_of(nodes, [])
    index = NodeIndex(cluster)
    plugin = ImageLocality()
    plugin.prescore(incoming, index, np.ones(len(index), dtype=np.bool_))
    names = [n["metadata"]["name"] for n in nodes]
    per_node = [plugin.score(incoming, cluster.nodes[n], cluster) for n in names]
    vector = plugin.score_vector(incoming, index)
    by_vector = [vector] * len(names) if isinstance(vector, int) else [int(vector[index.pos[n]]) for n in names]
    assert per_node == by_vector
    return per_node


@pytest.mark.parametrize(("name", "incoming", "nodes", "want"), [
    # 40 MB on node1 spread 1/2 = 20 MB < 23 MB: 0; 250 MB spread 1/2 = 125 MB: 100 × (125 − 23) / (2000 − 23) = 5
    ("two images spread on two nodes, prefer the larger image one", spec("gcr.io/40", "gcr.io/250"),
     [imaged("node1", *N403002000), imaged("node2", *N25010)], [0, 5]),
    # node1: 20 + 150 MB: 100 × 147 / 1977 = 7
    ("two images on one node, prefer this node", spec("gcr.io/40", "gcr.io/300"),
     [imaged("node1", *N403002000), imaged("node2", *N25010)], [7, 0]),
    ("if exceeding limit, use limit", spec("gcr.io/10", "gcr.io/4000"),
     [imaged("node1", *N400030), imaged("node2", *N25010)], [100, 0]),
    # 4000 MB spread 1/3 = 1333 MB: 100 × 1310 / 1977 = 66
    ("if exceeding limit, use limit (with node which has no container image)", spec("gcr.io/10", "gcr.io/4000"),
     [imaged("node1", *N400030), imaged("node2", *N25010), imaged("node3")], [66, 0, 0]),
    # three containers: 3000 MB top; node1 600 + 900 = 1500 → 49, node2 150 + 600 + 900 = 1650 → 54
    ("pod with multiple large images, node2 is preferred", spec("gcr.io/300", "gcr.io/600", "gcr.io/900"),
     [imaged("node1", *N60040900), imaged("node2", *N300600900)], [49, 54]),
    ("pod with multiple small images", spec("gcr.io/30", "gcr.io/40"),
     [imaged("node1", *N400030), imaged("node2", *N203040)], [0, 1]),
    ("existing images of init containers count", spec("gcr.io/30", init=("gcr.io/300",)),
     [imaged("node1", *N403002000), imaged("node2", *N203040)], [6, 0]),
    ("no node holds an image: every node 0", spec("gcr.io/1"), [imaged("node1", *N25010), node("node2")], [0, 0]),
])
def test_image_locality_priority(name: str, incoming: dict[str, Any], nodes: list[dict[str, Any]],
                                 want: list[int]) -> None:
    assert scores(incoming, nodes) == want, name


@pytest.mark.parametrize(("given", "want"), [
    ("root", "root:latest"), ("root:tag", "root:tag"), ("gcr.io:5000/root", "gcr.io:5000/root:latest"),
    ("root@" + "a" * 64, "root@" + "a" * 64 + ":latest"),
])
def test_normalized_image_name(given: str, want: str) -> None:
    assert normalized_image_name(given) == want


def test_malformed_node_images_are_skipped() -> None:
    bad = node("node1")
    bad["status"]["images"] = [None, {"names": "gcr.io/300:latest", "sizeBytes": 1}, {"names": ["gcr.io/300:latest"],
                                                                                        "sizeBytes": "big"}]
    # node1 holds nothing it states well: node2 alone holds the 300 MB image, spread 1/2: 100 × (150 − 23) / 977
    assert scores(spec("gcr.io/300"), [bad, imaged("node2", *N300600900)]) == [0, 12]


@pytest.mark.parametrize("cached", ["node-a", "node-b"])
def test_simulate_places_a_pod_where_its_image_is(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  cached: str) -> None:
    """Two nodes alike but for the pod's 1.5 GB image on one (either, so no tie-break decides): kube-scheduler's
    default profile (a file naming no plugin) puts the pod there."""
    nodes = [imaged(n, (["registry.local/train:v2"], 1500)) if n == cached else node(n) for n in ("node-a", "node-b")]
    incoming = spec("registry.local/train:v2")
    incoming["metadata"]["name"] = "trainer"
    incoming["spec"]["schedulerName"] = "default-scheduler"
    (tmp_path / "cluster.json").write_text(json.dumps({"kind": "List", "items": nodes}))
    (tmp_path / "pods.json").write_text(json.dumps({"kind": "List", "items": [incoming]}))
    config = tmp_path / "config.yaml"
    config.write_text("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
                      "profiles:\n- schedulerName: default-scheduler\n")
    assert main(["simulate", "--config", str(config), "--cluster", str(tmp_path / "cluster.json"),
                 "--pods", str(tmp_path / "pods.json"), "-o", "json"]) == 0
    placements = json.loads(capsys.readouterr().out)["placements"]
    assert [(p["pod"], p["node"]) for p in placements] == [("default/trainer", cached)]
