"""The cluster as the scheduler sees it: nodes with their Device CR, NodeMetric and assigned pods.

Objects are plain Kubernetes JSON dicts (what the API server or a `--cluster DIR` of YAML files holds); NodeInfo
keeps per-node sums incrementally so placing a pod updates one node, not the whole cluster, and tells its watchers
(the scheduler's per-node arrays, scheduler.nodeindex) when it changed: through add_pod/remove_pod or by assigning
one of its attributes. Whoever edits a node's nested objects in place (a NodeMetric's usage, allocatable entries)
calls `node.changed()` afterwards; `cluster.nodes` is a NodeMap that counts additions and removals.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import json
import logging
import math
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml

from koordlet.errors import InvalidInput
from koordlet.quantity import parse_quantity

log = logging.getLogger(__name__)
JSON = dict[str, Any]
CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
_TERMINATED = ("Succeeded", "Failed")
_WATCHED = frozenset({"obj", "allocatable", "requested", "pods", "device", "nodemetric", "nrt"})
# apis/extension/deprecated.go DeprecatedDeviceResourcesMapper: v0.7's `kubernetes.io/` device names. Upstream's
# informer transformers (pkg/util/transformer) rename them in pods' containers, nodes' allocatable and Device CRs
# when the new name is absent; we do the same wherever resource lists are read.
DEPRECATED_DEVICE_RESOURCES = {
    "kubernetes.io/rdma": "koordinator.sh/rdma",
    "kubernetes.io/fpga": "koordinator.sh/fpga",
    "kubernetes.io/gpu": "koordinator.sh/gpu",
    "kubernetes.io/gpu-core": "koordinator.sh/gpu-core",
    "kubernetes.io/gpu-memory": "koordinator.sh/gpu-memory",
    "kubernetes.io/gpu-memory-ratio": "koordinator.sh/gpu-memory-ratio",
}


def quantity_value(resource: str, value: Any) -> int:
    """Kubernetes quantities as integers: cpu in millicores, everything else rounded up to whole units."""
    return _quantity_value(resource == CPU, str(value))


@functools.lru_cache(maxsize=4096)
def _quantity_value(milli: bool, text: str) -> int:  # a cluster repeats the same few quantities everywhere
    q = parse_quantity(text)
    return math.ceil(q * 1000) if milli else math.ceil(q)


# **[decision]** the v1.6 release text's HAMi pod asks `koordinator.sh/gpu-shared`; upstream ignores that name (and
# kubelet drops extended resources a node does not have), so the GPU would not be shared. Read as gpu.shared, logged.
MISSPELLED_DEVICE_RESOURCES = {"koordinator.sh/gpu-shared": "koordinator.sh/gpu.shared"}
_RENAMED = DEPRECATED_DEVICE_RESOURCES | MISSPELLED_DEVICE_RESOURCES
_told: set[str] = set()


def renamed_deprecated(resources: dict[str, Any]) -> dict[str, Any]:
    """`resources` with deprecated device names replaced by their koordinator.sh names (replaceAndEraseResource:
    when both names are present, both stay as they are)."""
    if _RENAMED.keys().isdisjoint(resources):
        return resources
    out = dict(resources)
    for old, new in _RENAMED.items():
        if old in out and new not in out:
            out[new] = out.pop(old)
            if old in MISSPELLED_DEVICE_RESOURCES and old not in _told:
                _told.add(old)
                log.warning("resource %s read as %s (the v1.6 release text's spelling)", old, new)
    return out


def resource_list(obj: Any) -> dict[str, int]:
    if not isinstance(obj, dict):
        return {}
    return {str(k): quantity_value(str(k), v) for k, v in renamed_deprecated(obj).items()}


def _tolerant_resources(node: str, obj: Any) -> dict[str, int]:
    """A node's allocatable; an entry that does not parse is left out (logged), the rest still count."""
    out: dict[str, int] = {}
    for k, v in renamed_deprecated(obj).items() if isinstance(obj, dict) else ():
        try:
            out[str(k)] = quantity_value(str(k), v)
        except InvalidInput as e:
            log.warning("node %s: allocatable %s ignored: %s", node, k, e)
    return out


_cycle_requests: tuple[JSON | None, dict[str, int]] = (None, {})


@contextlib.contextmanager
def cycle_requests(pod: JSON) -> Iterator[None]:
    """Within a scheduling cycle, `pod_requests(pod)` of the cycle's pod is parsed once for every plugin (a pod
    is not changed during its own cycle; a dozen plugins each parsed it before)."""
    global _cycle_requests
    before = _cycle_requests
    try:
        _cycle_requests = (pod, _pod_requests(pod))
    except InvalidInput:
        _cycle_requests = (None, {})  # every caller meets the error on its own
    try:
        yield
    finally:
        _cycle_requests = before


def pod_requests(pod: JSON) -> dict[str, int]:
    """Effective requests as kube-scheduler computes them: Σ containers, at least each init container, plus
    overhead (k8s.io/component-helpers resource.PodRequests)."""
    remembered, requests = _cycle_requests
    if pod is remembered:
        return dict(requests)
    return _pod_requests(pod)


def _pod_requests(pod: JSON) -> dict[str, int]:
    spec = pod.get("spec") or {}
    total: dict[str, int] = {}
    for c in spec.get("containers") or []:
        for k, v in resource_list((c.get("resources") or {}).get("requests")).items():
            total[k] = total.get(k, 0) + v
    for c in spec.get("initContainers") or []:
        for k, v in resource_list((c.get("resources") or {}).get("requests")).items():
            total[k] = max(total.get(k, 0), v)
    for k, v in resource_list(spec.get("overhead")).items():
        total[k] = total.get(k, 0) + v
    return total


def key(obj: JSON) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


# A Reservation's template pod as this scheduler keeps it on the reservation's node (scheduler.reservation.model);
# ours, never written out. Plugins that account real pods only (LoadAware's assign cache) pass over it.
ANNOTATION_RESERVE_POD = "scheduling.koordinator.sh/reserve-pod"


def is_reserve_pod(pod: JSON) -> bool:
    return ((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_RESERVE_POD) == "true"


def holds_resources(pod: JSON) -> bool:
    """Not finished: a terminating pod still holds its node's resources until it is gone (kube-scheduler's cache
    keeps it, so a preemptor waits for its victims)."""
    return (pod.get("status") or {}).get("phase") not in _TERMINATED


def is_active(pod: JSON) -> bool:
    return (pod.get("status") or {}).get("phase") not in _TERMINATED and not (pod.get("metadata") or {}).get(
        "deletionTimestamp")


@dataclass
class NodeInfo:
    name: str
    obj: JSON
    allocatable: dict[str, int]
    requested: dict[str, int] = field(default_factory=dict)
    pods: dict[str, JSON] = field(default_factory=dict)  # ns/name → pod
    device: JSON | None = None
    nodemetric: JSON | None = None
    nrt: JSON | None = None  # NodeResourceTopology (NUMA zones, CPU topology), read by scheduler.numa

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name in _WATCHED:
            self.changed()

    def watch(self, owner: object, callback: Callable[[NodeInfo], None]) -> None:
        """Call `callback(node)` on every change; one callback per owner (a later one replaces it)."""
        watchers = self.__dict__.setdefault("_watchers", {})
        watchers[id(owner)] = callback
        self.__dict__["_callbacks"] = tuple(watchers.values())  # what changed() walks (it runs per pod added)

    @property
    def generation(self) -> int:
        """Counts `changed()` calls: a pod replaced under the same key (same count) is a change too."""
        return int(self.__dict__.get("_generation", 0))

    def changed(self) -> None:
        d = self.__dict__
        d["_generation"] = d.get("_generation", 0) + 1
        for callback in d.get("_callbacks", ()):
            callback(self)

    @property
    def labels(self) -> dict[str, str]:
        return dict((self.obj.get("metadata") or {}).get("labels") or {})

    def free(self, resource: str) -> int:
        return self.allocatable.get(resource, 0) - self.requested.get(resource, 0)

    def add_pod(self, pod: JSON, requests: dict[str, int] | None = None, pod_key: str | None = None) -> None:
        """`requests`: pod_requests(pod), and `pod_key` its key, when the caller has them (a reservation's reserve
        pod, put back each cycle)."""
        k = key(pod) if pod_key is None else pod_key
        if k in self.pods:
            return
        if requests is None:
            requests = pod_requests(pod)  # may raise InvalidInput: nothing is recorded then
        self.pods[k] = pod
        for r, v in requests.items():
            self.requested[r] = self.requested.get(r, 0) + v
        self.requested[PODS] = self.requested.get(PODS, 0) + 1
        self.changed()

    def remove_pod(self, pod_key: str, requests: dict[str, int] | None = None) -> JSON | None:
        """`requests`: pod_requests of the pod under that key when the caller knows them."""
        pod = self.pods.pop(pod_key, None)
        if pod is not None:
            for r, v in (pod_requests(pod) if requests is None else requests).items():
                self.requested[r] = self.requested.get(r, 0) - v
            self.requested[PODS] = self.requested.get(PODS, 0) - 1
            self.changed()
        return pod


class NodeMap(dict[str, NodeInfo]):
    """`Cluster.nodes`: a dict whose `version` counts changes to which NodeInfo objects it holds."""

    version = 0

    def _bump(self) -> None:
        self.version += 1

    def __setitem__(self, k: str, v: NodeInfo) -> None:
        super().__setitem__(k, v)
        self._bump()

    def __delitem__(self, k: str) -> None:
        super().__delitem__(k)
        self._bump()

    def pop(self, *args: Any) -> Any:
        self._bump()
        return super().pop(*args)

    def popitem(self) -> tuple[str, NodeInfo]:
        self._bump()
        return super().popitem()

    def clear(self) -> None:
        super().clear()
        self._bump()

    def update(self, *args: Any, **kwargs: Any) -> None:
        super().update(*args, **kwargs)
        self._bump()

    def setdefault(self, k: str, default: Any = None) -> Any:
        self._bump()
        return super().setdefault(k, default)

    def __ior__(self, other: Any) -> NodeMap:  # type: ignore[override,misc]
        self.update(other)
        return self


@dataclass
class Cluster:
    nodes: dict[str, NodeInfo] = field(default_factory=dict)  # a NodeMap once assigned
    podgroups: dict[str, JSON] = field(default_factory=dict)  # ns/name
    topologies: list[JSON] = field(default_factory=list)  # ClusterNetworkTopology objects
    priority_classes: dict[str, int] = field(default_factory=dict)
    pending: list[JSON] = field(default_factory=list)  # pods without spec.nodeName found in the cluster dir
    elastic_quotas: list[JSON] = field(default_factory=list)  # ElasticQuota objects
    pdbs: list[JSON] = field(default_factory=list)  # PodDisruptionBudget objects
    configmaps: dict[str, JSON] = field(default_factory=dict)  # ns/name → ConfigMap (e.g. GPU share templates)
    reservations: list[JSON] = field(default_factory=list)  # Reservation objects (scheduler.reservation)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "nodes" and not isinstance(value, NodeMap):
            value = NodeMap(value)
        object.__setattr__(self, name, value)

    def assume(self, pod: JSON, node_name: str) -> None:
        pod.setdefault("spec", {})["nodeName"] = node_name
        self.nodes[node_name].add_pod(pod)

    def assigned_pods(self) -> Iterable[JSON]:
        for n in self.nodes.values():
            yield from n.pods.values()


def load_objects(path: str) -> list[JSON]:
    """Every Kubernetes object in a YAML/JSON file or a directory of them (multi-document YAML and Lists too)."""
    files = [path] if os.path.isfile(path) else sorted(
        glob.glob(os.path.join(path, "**", "*.y*ml"), recursive=True) +
        glob.glob(os.path.join(path, "**", "*.json"), recursive=True))
    out: list[JSON] = []
    for f in files:
        with open(f, encoding="utf-8") as fh:
            docs = [json.load(fh)] if f.endswith(".json") else list(yaml.safe_load_all(fh))
        for doc in docs:
            out.extend(_flatten(doc))
    return out


def _flatten(doc: Any) -> list[JSON]:
    if not isinstance(doc, dict):
        return []
    if str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list):
        return [o for item in doc["items"] for o in _flatten(item)]
    return [doc]


def build_cluster(objects: Iterable[JSON]) -> Cluster:
    cluster = Cluster()
    objs = list(objects)
    for o in objs:
        if o.get("kind") == "Node":
            name = str((o.get("metadata") or {}).get("name"))
            status = o.get("status") or {}
            cluster.nodes[name] = NodeInfo(name, o, _tolerant_resources(name, status.get("allocatable") or
                                                                        status.get("capacity")))
    for o in objs:
        kind, name = o.get("kind"), str((o.get("metadata") or {}).get("name"))
        if kind == "Device" and name in cluster.nodes:
            cluster.nodes[name].device = o
        elif kind == "NodeMetric" and name in cluster.nodes:
            cluster.nodes[name].nodemetric = o
        elif kind == "NodeResourceTopology" and name in cluster.nodes:
            cluster.nodes[name].nrt = o
        elif kind == "PodGroup":
            cluster.podgroups[key(o)] = o
        elif kind == "ClusterNetworkTopology":
            cluster.topologies.append(o)
        elif kind == "ElasticQuota":
            cluster.elastic_quotas.append(o)
        elif kind == "PodDisruptionBudget":
            cluster.pdbs.append(o)
        elif kind == "ConfigMap":
            cluster.configmaps[f"{(o.get('metadata') or {}).get('namespace') or 'default'}/{name}"] = o
        elif kind == "Reservation":
            cluster.reservations.append(o)
        elif kind == "PriorityClass":
            cluster.priority_classes[name] = int(o.get("value") or 0)
        elif kind == "Pod":
            node = (o.get("spec") or {}).get("nodeName")
            if node and node in cluster.nodes and holds_resources(o):
                try:
                    cluster.nodes[node].add_pod(o)
                except InvalidInput as e:  # one bad pod must not take the cluster down; its requests are unknown
                    log.warning("pod %s on %s ignored: %s", key(o), node, e)
            elif not node:
                cluster.pending.append(o)
    return cluster
