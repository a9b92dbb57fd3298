"""kube-scheduler's ImageLocality: Score favours the nodes that already hold the pod's images, by their size scaled by
the share of nodes holding them (k8s v1.28 pkg/scheduler/framework/plugins/imagelocality/image_locality.go)."""

from __future__ import annotations

from collections.abc import Hashable, Mapping

import numpy as np

from apis.core.objects import JSON
from scheduler.cluster import Cluster, NodeInfo
from scheduler.nodeindex import BoolArray, IntArray, NodeIndex, Rows
from scheduler.plugins.nodefacts import NodeFacts
from scheduler.rowcache import FEW_ROWS

_MB = 1024 * 1024
MIN_THRESHOLD = 23 * _MB  # below: no score (a small image is cheap to pull anywhere)
MAX_CONTAINER_THRESHOLD = 1000 * _MB  # per container of the pod: above, the top score
MAX_NODE_SCORE = 100

Images = Mapping[str, int]  # image name as the node lists it → its size in bytes


def normalized_image_name(name: str) -> str:
    """A name without a tag gets `:latest` (a `:` before the last `/` is a registry port, not a tag). No registry or
    library prefix is added: `nginx:1.25` does not match a node's `docker.io/library/nginx:1.25`, as in v1.28."""
    return name + ":latest" if name.rfind(":") <= name.rfind("/") else name


def node_images(node: NodeInfo) -> dict[str, int]:
    """node.status.images by each of their names (upstream: the cache's NodeInfo.ImageStates); a malformed entry is
    skipped."""
    status = node.obj.get("status")
    images = status.get("images") if isinstance(status, dict) else None
    out: dict[str, int] = {}
    for image in images if isinstance(images, list) else ():
        if not isinstance(image, dict) or not isinstance(image.get("names"), list):
            continue
        size = image.get("sizeBytes", 0)
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            continue  # the API server would not have let it in: the entry is skipped whole
        for name in image["names"]:
            if isinstance(name, str):
                out.setdefault(name, size)
    return out


def pod_images(pod: JSON) -> list[str]:
    """The normalized image of every init and regular container, one entry per container (each counts)."""
    spec = pod.get("spec") or {}
    out = []
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or ():
            if isinstance(c, dict) and isinstance(c.get("image"), str):
                out.append(normalized_image_name(c["image"]))
    return out


def _containers(pod: JSON) -> int:
    spec = pod.get("spec") or {}
    return len(spec.get("initContainers") or ()) + len(spec.get("containers") or ())


def priority(sum_scores: int, containers: int) -> int:
    """calculatePriority: the summed scaled sizes clamped to [23 MB, 1000 MB × containers], mapped onto 0..100."""
    top = MAX_CONTAINER_THRESHOLD * containers
    clamped = min(max(sum_scores, MIN_THRESHOLD), top)
    return MAX_NODE_SCORE * (clamped - MIN_THRESHOLD) // (top - MIN_THRESHOLD) if top > MIN_THRESHOLD else 0


class ImageLocality:
    name = "ImageLocality"

    def __init__(self, weight: int = 1) -> None:
        self.weight = weight
        self._facts = NodeFacts(node_images, objects_only=True)
        self._built: tuple[int, int] = (-1, -1)  # (facts version, node count) the inverted index is of
        self._holders: dict[str, tuple[IntArray, IntArray]] = {}  # image name → (rows holding it, its size there)
        self._nodes = 0

    def sync(self, index: NodeIndex) -> None:
        """Scheduler.prepare: every node's images read now, not in the first cycle."""
        self._sync(index)

    def _sync(self, index: NodeIndex) -> None:
        """The image → nodes index, rebuilt when some node's images changed (they seldom do)."""
        facts = self._facts.get(index)
        key = (self._facts.version, len(facts))
        if key == self._built:
            return
        rows: dict[str, list[int]] = {}
        sizes: dict[str, list[int]] = {}
        for i, images in enumerate(facts):
            for name, size in images.items():
                rows.setdefault(name, []).append(i)
                sizes.setdefault(name, []).append(size)
        self._holders = {n: (np.array(r, dtype=np.intp), np.array(sizes[n], dtype=np.int64)) for n, r in rows.items()}
        self._nodes, self._built = len(facts), key

    def quiet(self, pod: JSON, index: NodeIndex) -> int | None:
        """No node lists an image: every score is 0 (scheduler.interfaces' QuietPlugin)."""
        self._sync(index)
        return None if self._holders else 0

    def prescore(self, pod: JSON, index: NodeIndex, candidates: BoolArray) -> None:
        self._sync(index)

    def _scaled(self, name: str, size: int) -> int:
        """scaledImageScore: the size times the share of all nodes holding the image."""
        held = self._holders.get(name)
        return int(float(size) * (len(held[0]) / self._nodes)) if held is not None and self._nodes else 0

    def score(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> int:
        images = node_images(node)
        total = sum(self._scaled(name, images[name]) for name in pod_images(pod) if name in images)
        return priority(total, _containers(pod))

    def score_vector(self, pod: JSON, index: NodeIndex) -> IntArray | int:
        self._sync(index)
        if not self._holders:
            return 0  # no node lists an image: the sum is 0 everywhere, below the 23 MB floor
        return self._sums(pod_images(pod), _containers(pod), slice(None))

    def _sums(self, names: list[str], containers: int, rows: Rows) -> IntArray | int:
        """The scores of the rows (0: every one is 0)."""
        held = [entry for name in names if (entry := self._holders.get(name)) is not None]
        top = MAX_CONTAINER_THRESHOLD * containers
        if not held or top <= MIN_THRESHOLD:
            return 0
        sums = np.zeros(self._nodes, dtype=np.int64)
        for where, sizes in held:  # a node lists an image name once: rows are distinct
            sums[where] += (sizes.astype(np.float64) * (len(where) / self._nodes)).astype(np.int64)
        clamped = np.clip(sums[rows], MIN_THRESHOLD, top)
        scores: IntArray = MAX_NODE_SCORE * (clamped - MIN_THRESHOLD) // (top - MIN_THRESHOLD)
        return scores

    # -- kept between cycles by the framework (scheduler.vectorcache) --------------------------------------------
    def score_shape(self, pod: JSON, index: NodeIndex) -> Hashable:
        """The pod's images and container count, and which image index the scores are of: each node's score
        depends on its own images and on how many nodes hold each (every node's facts), so the key names the
        index's build (a change to any node's images is a new key, computed whole)."""
        self._sync(index)
        if not self._holders:
            return ("none",)
        return tuple(pod_images(pod)), _containers(pod), self._built

    def score_rows(self, pod: JSON, index: NodeIndex, rows: Rows) -> IntArray:
        self._sync(index)
        count = len(index) if isinstance(rows, slice) else len(rows)
        if not self._holders:
            return np.zeros(count, dtype=np.int64)
        names, containers = pod_images(pod), _containers(pod)
        if isinstance(rows, np.ndarray) and rows.size <= FEW_ROWS:  # numpy's per-call cost is most of it here
            facts = self._facts.get(index)
            return np.array([priority(sum(self._scaled(n, facts[i][n]) for n in names if n in facts[i]), containers)
                             for i in rows.tolist()], dtype=np.int64)
        got = self._sums(names, containers, rows)
        return np.zeros(count, dtype=np.int64) if isinstance(got, int) else got
