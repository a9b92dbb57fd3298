"""The cluster's nodes in a fixed order for per-node numpy arrays, with a change counter per node.

Plugins keep their per-node numbers (free resources, usage, free GPUs) in arrays indexed by `NodeIndex.pos` and
refresh only the rows a `Tracker` reports as changed, so a scheduling cycle filters and scores every node with a few
array operations instead of a Python loop over the nodes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from scheduler.cluster import Cluster, NodeInfo

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]
Rows = IntArray | slice  # some rows of a NodeIndex (ascending), or slice(None) for all of them


LOG_LIMIT = 8192  # changed rows remembered in order; a tracker further behind compares every row's version
LOG_FEW = 64  # more new log entries than this: a tracker compares every row's version (one numpy pass) instead


class NodeIndex:
    """`nodes[i]` for i in 0..n−1; `versions[i]` names node i's state: a number never issued before whenever the
    node reports a change (NodeInfo.changed), an earlier one again only through `revert`. `log` lists the changed
    rows in order (from the `log_start`-th change on) so a tracker reads only what is new.

    `epoch` grows when the set of nodes changes: positions are then reassigned and every array must be rebuilt.
    `object_changes` grows with every change but a pod added or removed (NodeInfo.object_generation): while it
    stays, no fact read from the Node objects alone changed.
    """

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.epoch = 0
        self._issued = 0  # the last version number given out (versions are only compared for equality)
        self.object_changes = 0
        self._map: Any = None
        self._members = -1
        self._build()

    def _build(self) -> None:
        nodes = self.cluster.nodes
        self.nodes: list[NodeInfo] = list(nodes.values())
        self.names: list[str] = [n.name for n in self.nodes]
        self.names_array = np.array(self.names, dtype=object)
        self.pos: dict[str, int] = {n: i for i, n in enumerate(self.names)}
        self._by_id: dict[int, int] = {id(n): i for i, n in enumerate(self.nodes)}
        self._objects: list[int] = [n.object_generation for n in self.nodes]  # per row, as last seen
        order = sorted(range(len(self.names)), key=self.names.__getitem__)
        self.name_rank: IntArray = np.empty(len(self.names), dtype=np.int64)
        self.name_rank[order] = np.arange(len(self.names), dtype=np.int64)
        self.versions: IntArray = np.zeros(len(self.nodes), dtype=np.int64)
        self.log: list[int] = []
        self.log_start = 0
        self._logged: tuple[int, int, int, list[tuple[int, int]]] = (-1, -1, -1, [])  # see `logged`
        for n in self.nodes:
            n.watch(self, self._changed)
        self._map, self._members = nodes, getattr(nodes, "version", -1)
        self.epoch += 1

    def _changed(self, node: NodeInfo) -> None:
        i = self._by_id.get(id(node))
        if i is not None and self.nodes[i] is node:
            self._issued += 1
            self._set(i, self._issued)
            objects = node.object_generation
            if objects != self._objects[i]:
                self._objects[i] = objects
                self.object_changes += 1

    def _set(self, i: int, version: int) -> None:
        self.versions[i] = version
        if len(self.log) >= LOG_LIMIT:
            self.log_start += len(self.log)
            self.log = []
        self.log.append(i)

    def logged(self, start: int, end: int) -> list[tuple[int, int]]:
        """(row, its version now) of every row changed from the start-th to the end-th change (positions counted from
        the index's first, both within `log`), ascending by row: worked out once for the trackers that read the
        same span in a cycle (every version change extends the log, so the span fixes the versions)."""
        epoch, first, last, rows = self._logged
        if epoch != self.epoch or first != start or last != end:
            versions = self.versions
            rows = [(i, versions.item(i)) for i in sorted(set(self.log[start - self.log_start:end - self.log_start]))]
            self._logged = (self.epoch, start, end, rows)
        return rows

    def version(self, node: NodeInfo) -> int | None:
        """The node's current version (None: not a node of this index)."""
        i = self._by_id.get(id(node))
        return int(self.versions[i]) if i is not None and self.nodes[i] is node else None

    def touch(self, i: int) -> None:
        """Row i changed in a way its NodeInfo did not report (a plugin's own state of the node): a new version."""
        self._issued += 1
        self._set(i, self._issued)

    def revert(self, node: NodeInfo, version: int) -> None:
        """The node is again exactly as it was when it had `version` (its changes since were undone, or redone the
        same way from the same state): every row cached at that version is valid again. Only callers that know
        this for certain use it (the Reservation plugin lending reserve pods for a cycle)."""
        i = self._by_id.get(id(node))
        if i is not None and self.nodes[i] is node:
            self._set(i, version)

    def refresh(self) -> None:
        nodes = self.cluster.nodes
        if nodes is not self._map or getattr(nodes, "version", -2) != self._members:
            self._build()

    def __len__(self) -> int:
        return len(self.nodes)


def built_index(cluster: Cluster) -> NodeIndex | None:
    """The cluster's index as it is, None when no cycle built one yet (nothing is built or refreshed)."""
    index: NodeIndex | None = cluster.__dict__.get("_node_index")
    return index


def node_index(cluster: Cluster) -> NodeIndex:
    """The cluster's index (one per Cluster, shared by every Scheduler on it), brought up to date."""
    index = built_index(cluster)
    if index is None:
        index = NodeIndex(cluster)
        cluster.__dict__["_node_index"] = index
    else:
        index.refresh()
    return index


class Tracker:
    """Which rows changed since the owner last asked; None means all of them (new index or new node set)."""

    def __init__(self) -> None:
        self._index: NodeIndex | None = None
        self._epoch = -1
        self._seen: IntArray = np.zeros(0, dtype=np.int64)
        self._read = 0  # changes of the index's log read so far

    def current(self, index: NodeIndex, i: int) -> bool:
        """Row i's version is the one this tracker last saw (what its owner computed the row at is still so)."""
        return index is self._index and index.epoch == self._epoch and self._seen.item(i) == index.versions.item(i)

    def changes(self, index: NodeIndex) -> list[int] | None:
        if index is not self._index or index.epoch != self._epoch:
            self._index, self._epoch, self._seen = index, index.epoch, index.versions.copy()
            self._read = index.log_start + len(index.log)
            return None
        end = index.log_start + len(index.log)
        if self._read == end:
            return []
        if self._read >= index.log_start and end - self._read <= LOG_FEW:  # usually: a few rows changed since
            seen = self._seen
            rows: list[int] = []
            for i, version in index.logged(self._read, end):  # shared by the trackers reading the same span
                if seen.item(i) != version:  # not back at the version last seen (NodeIndex.revert)
                    seen[i] = version
                    rows.append(i)
        else:
            diff = np.flatnonzero(index.versions != self._seen)
            self._seen[diff] = index.versions[diff]
            rows = [int(i) for i in diff]
        self._read = end
        return rows
