"""Nodes and pods as kube-scheduler's plugin tests make them (st.MakeNode / st.MakePod), and a plugin run over them
the way those tests run one: Filter on every node, Score over the candidate nodes then NormalizeScore."""

from __future__ import annotations

import copy
from typing import Any, Protocol

import numpy as np

from scheduler.cluster import Cluster, NodeInfo, build_cluster
from scheduler.nodeindex import BoolArray, IntArray, NodeIndex, node_index

HOST = "kubernetes.io/hostname"


class KubePlugin(Protocol):
    def filter(self, pod: dict[str, Any], node: NodeInfo, cluster: Cluster) -> str | None: ...

    def prefilter_vector(self, pod: dict[str, Any], index: NodeIndex) -> BoolArray | None: ...

    def prescore(self, pod: dict[str, Any], index: NodeIndex, candidates: BoolArray) -> None: ...

    def score_vector(self, pod: dict[str, Any], index: NodeIndex) -> IntArray | int: ...

    def score(self, pod: dict[str, Any], node: NodeInfo, cluster: Cluster) -> int: ...

    def normalize(self, scores: IntArray, top: int) -> IntArray: ...


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"kind": "Node", "metadata": {"name": name, "labels": dict(labels)}, "spec": {},
            "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}}}


def pod(name: str, on: str | None = None, labels: dict[str, str] | None = None, ns: str = "default",
        terminating: bool = False, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "labels": labels or {}}
    if terminating:
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    return {"kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "c"}], **({"nodeName": on} if on else {}), **spec}}


def cluster_of(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> Cluster:
    return build_cluster(copy.deepcopy([*nodes, *pods]))


def filter_all(plugin: KubePlugin, incoming: dict[str, Any], nodes: list[dict[str, Any]],
               pods: list[dict[str, Any]]) -> dict[str, str | None]:
    """Filter's reason per node; the vector prefilter must agree with it on every node."""
    cluster = cluster_of(nodes, pods)
    index = node_index(cluster)
    vector = plugin.prefilter_vector(incoming, index)
    got = {n.name: plugin.filter(incoming, n, cluster) for n in index.nodes}
    if vector is not None:
        assert {n: bool(vector[index.pos[n]]) for n in got} == {n: r is None for n, r in got.items()}
    else:
        assert all(r is None for r in got.values())
    return got


def scores(plugin: KubePlugin, incoming: dict[str, Any], nodes: list[dict[str, Any]], pods: list[dict[str, Any]],
           failed: list[dict[str, Any]] | None = None) -> dict[str, int]:
    """Normalized scores of `nodes` (those that passed Filter; `failed` did not), per node and by vector alike."""
    cluster = cluster_of([*nodes, *(failed or [])], pods)
    index = node_index(cluster)
    names = [n["metadata"]["name"] for n in nodes]
    candidates = np.zeros(len(index), dtype=np.bool_)
    candidates[[index.pos[n] for n in names]] = True
    plugin.prescore(incoming, index, candidates)
    raw = np.array([plugin.score(incoming, cluster.nodes[n], cluster) for n in names], dtype=np.int64)
    per_node = plugin.normalize(raw, int(raw.max()) if len(raw) else 0)
    vector = plugin.score_vector(incoming, index)
    if isinstance(vector, int):
        vector = np.full(len(index), vector, dtype=np.int64)
    rows = [index.pos[n] for n in names]
    by_vector = plugin.normalize(vector, int(vector[rows].max()))[rows]
    assert per_node.tolist() == by_vector.tolist()
    return dict(zip(names, [int(s) for s in per_node], strict=True))
