"""The cluster as the scheduler sees it: nodes with their Device CR, NodeMetric and assigned pods.

Objects are plain Kubernetes JSON dicts (what the API server or a `--cluster DIR` of YAML files holds); NodeInfo
keeps per-node sums incrementally so placing a pod updates one node, not the whole cluster, and tells its watchers
(the scheduler's per-node arrays, scheduler.nodeindex) when it changed: through add_pod/remove_pod or by assigning
one of its attributes. Whoever edits a node's nested objects in place (a NodeMetric's usage, allocatable entries)
calls `node.changed()` afterwards; `cluster.nodes` is a NodeMap that counts additions and removals.
"""

from __future__ import annotations

import contextlib
import glob
import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import yaml

from apis.core import resources as core_resources
from apis.core.errors import InvalidInput
from apis.core.objects import JSON
from apis.core.resources import CPU, PODS
from apis.core.shape import shape_problem, string_maps_problem
from apis.extension.resources import DEPRECATED_DEVICE_RESOURCES, MISSPELLED_DEVICE_RESOURCES
from apis.scheduling.reservation import ANNOTATION_RESERVE_POD
from scheduler import malformed
from scheduler.amplification import amplified_allocatable

log = logging.getLogger(__name__)
_T = TypeVar("_T")
_TERMINATED = ("Succeeded", "Failed")
_WATCHED = frozenset({"obj", "allocatable", "requested", "pods", "device", "nodemetric", "nrt"})


quantity_value = core_resources.resource_value  # cpu in millicores, everything else rounded up to whole units


# names read under another (renameDeviceResources in pkg/util/transformer): the v0.7 names, a misspelling
_RENAMED = {**DEPRECATED_DEVICE_RESOURCES, **MISSPELLED_DEVICE_RESOURCES}
_told: set[str] = set()


def renamed_deprecated(resources: JSON) -> JSON:
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


def resource_list(obj: object) -> dict[str, int]:
    if not isinstance(obj, dict):
        return {}
    return {str(k): quantity_value(str(k), v) for k, v in renamed_deprecated(obj).items()}


def node_allocatable(obj: JSON) -> dict[str, int]:
    """A node's allocatable (capacity when absent), cpu and memory amplified as koord-manager's node webhook does
    (scheduler.amplification); an entry that does not parse is left out (reported once per node version), the rest
    still count."""
    status = obj.get("status") or {}
    out: dict[str, int] = {}
    bad: list[str] = []
    raw = status.get("allocatable") or status.get("capacity") if isinstance(status, dict) else None
    for k, v in renamed_deprecated(raw).items() if isinstance(raw, dict) else ():
        try:
            out[str(k)] = quantity_value(str(k), v)
        except InvalidInput as e:
            bad.append(f"{k}: {e}")
    if bad:
        malformed.report("Node", obj, "; ".join(bad), "allocatable left out")
    return amplified_allocatable(obj, out)


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


def cycle_of(pod: JSON) -> object | None:
    """A token of the scheduling cycle under way for this pod (the same object all through one cycle, another in
    the next), None outside its cycle: what a plugin derives from the pod alone may be kept for the cycle."""
    current = _cycle_requests
    return current if current[0] is pod else None


def pod_requests(pod: JSON) -> dict[str, int]:
    """Effective requests as kube-scheduler computes them (apis.core.resources.pod_requests: sidecars, init
    maxima, overhead, pod-level resources), deprecated device names renamed; InvalidInput (QuantityError) when
    they cannot be read."""
    remembered, requests = _cycle_requests
    if pod is remembered:
        return dict(requests)
    return _pod_requests(pod)


_REQUESTS: dict[tuple[Any, ...], dict[str, int]] = {}  # containers_key → requests (a copy is handed out)
_REQUESTS_SIZE = 4096  # distinct pod shapes remembered; a cluster's pods repeat a few (one per workload)


def _pod_requests(pod: JSON) -> dict[str, int]:
    """Parsed once per pod shape (apis.core.resources.containers_key): a cluster's pods repeat a few, and each is
    read on loading, by the plugins' syncs and when its cycle starts."""
    shape = core_resources.containers_key(pod)
    if shape is not None:
        try:
            known = _REQUESTS.get(shape)
        except TypeError:  # a value that is a list or an object
            known = shape = None
        if known is not None:
            return dict(known)
    requests = core_resources.pod_requests(pod, rename=renamed_deprecated)
    if shape is not None and core_resources.strings_only(shape):
        if len(_REQUESTS) >= _REQUESTS_SIZE:
            _REQUESTS.clear()
        _REQUESTS[shape] = dict(requests)
    return requests


def pod_problem(pod: JSON) -> str | None:
    """Why a pod cannot be scheduled at all (a shape or requests the API server would refuse), or None."""
    why = shape_problem(pod) or string_maps_problem(pod)
    if why is None:
        try:
            pod_requests(pod)
        except InvalidInput as e:
            why = str(e)
    return why


def pod_limits(pod: JSON) -> dict[str, int]:
    """Effective limits (apis.core.resources.pod_limits), deprecated device names renamed; InvalidInput
    (QuantityError) when they cannot be read."""
    return core_resources.pod_limits(pod, rename=renamed_deprecated)


def _containers(spec: JSON, field: str) -> list[JSON]:
    """spec[field] as a list of container objects (conservative_pod's walk); raises InvalidInput otherwise."""
    items = spec.get(field) or []
    if not isinstance(items, list) or not all(isinstance(c, dict) for c in items):
        raise InvalidInput(f"spec.{field} is not a list of objects")
    return items


def conservative_pod(pod: JSON, allocatable: dict[str, int]) -> tuple[JSON, str | None]:
    """A pod bound to a node whose requests cannot all be read, as the scheduler keeps it: never under-counted. Each
    unreadable request counts as the node's whole allocatable of that resource; a spec whose containers cannot be
    read at all counts as all of the node's allocatable. Returns (pod, None) when it reads as it is, else the
    stand-in (a copy) and the reason. See docs/decisions.md, "A malformed bound pod"."""
    try:
        pod_requests(pod)
        return pod, None
    except InvalidInput as e:
        reason = str(e)

    def whole(resource: str) -> str:
        v = allocatable.get(_RENAMED.get(resource, resource), 0)
        return f"{v}m" if resource == CPU else str(v)

    def fixed(requests: Any) -> JSON:
        out: JSON = {}
        for k, v in requests.items():
            try:
                ok = quantity_value(str(k), v) >= 0
            except InvalidInput:
                ok = False
            out[str(k)] = v if ok else whole(str(k))
        return out

    spec = dict(pod.get("spec") or {})
    try:
        for field in ("containers", "initContainers"):
            spec[field] = [c | {"resources": (c.get("resources") or {}) | {
                part: fixed((c.get("resources") or {}).get(part) or {}) for part in ("requests", "limits")}}
                for c in _containers(spec, field)]
        spec["overhead"] = fixed(spec.get("overhead") or {})
        stand_in = {**pod, "spec": spec}
        pod_requests(stand_in)
    except (InvalidInput, AttributeError, TypeError):
        spec["containers"] = [{"name": "malformed", "resources": {"requests": {
            r: whole(r) for r in allocatable if r != PODS}}}]
        spec["initContainers"], spec["overhead"] = [], {}
        stand_in = {**pod, "spec": spec}
    return stand_in, reason


_SHARED: dict[tuple[tuple[str, int], ...], dict[str, int]] = {}  # requests kept by nodes, one dict per distinct one
_SHARED_SIZE = 4096  # distinct requests remembered; a cluster's pods repeat a few (one per workload)


def _shared(requests: dict[str, int]) -> dict[str, int]:
    """One dict for every pod with these requests (read, never changed): a node keeps its pods' requests, and
    whoever sums them over many pods (ElasticQuota's re-list) sums each distinct one once."""
    shape = tuple(requests.items())
    known = _SHARED.get(shape)
    if known is None:
        if len(_SHARED) >= _SHARED_SIZE:
            _SHARED.clear()
        known = _SHARED[shape] = dict(requests)
    return known


def key(obj: JSON) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


# A Reservation's template pod as this scheduler keeps it on the reservation's node (scheduler.reservation.model);
# ours, never written out. Plugins that account real pods only (LoadAware's assign cache) pass over it.


def is_reserve_pod(pod: JSON) -> bool:
    return ((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_RESERVE_POD) == "true"


def holds_resources(pod: JSON) -> bool:
    """Not finished: a terminating pod still holds its node's resources until it is gone (kube-scheduler's cache
    keeps it, so a preemptor waits for its victims)."""
    return (pod.get("status") or {}).get("phase") not in _TERMINATED


def is_active(pod: JSON) -> bool:
    return (pod.get("status") or {}).get("phase") not in _TERMINATED and not (pod.get("metadata") or {}).get(
        "deletionTimestamp")


class _SubsetChanges:
    changes = 0  # every node's, every cluster's: only ever compared for equality


_SUBSETS = _SubsetChanges()


def subset_changes() -> int:
    """Grows whenever some node's NodeInfo.pods_where set gains or loses a pod (any node of any cluster): while it
    stays, none did."""
    return _SUBSETS.changes


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
        if name == "pods" and self.__dict__.pop("_subsets", None):
            _SUBSETS.changes += 1
        if name in _WATCHED:
            self.changed()

    def pods_where(self, name: str, test: Callable[[JSON], bool]) -> Mapping[str, JSON]:
        """The node's pods for which `test` holds, kept under `name` as pods come and go (add_pod, remove_pod) so a
        plugin looking for a few (those stating pod affinity) does not read every pod on each change. `test` reads
        only what the API server never changes on a pod (its spec); read the result, never change it."""
        subsets: dict[str, dict[str, JSON]] = self.__dict__.setdefault("_subsets", {})
        got = subsets.get(name)
        if got is None:
            got = subsets[name] = {k: p for k, p in self.pods.items() if test(p)}
            self.__dict__.setdefault("_tests", {})[name] = test
        return got

    def watch(self, owner: object, callback: Callable[[NodeInfo], None]) -> None:
        """Call `callback(node)` on every change; one callback per owner (a later one replaces it)."""
        watchers = self.__dict__.setdefault("_watchers", {})
        watchers[id(owner)] = callback
        self.__dict__["_callbacks"] = tuple(watchers.values())  # what changed() walks (it runs per pod added)

    @property
    def generation(self) -> int:
        """Counts `changed()` calls: a pod replaced under the same key (same count) is a change too."""
        return int(self.__dict__.get("_generation", 0))

    @property
    def object_generation(self) -> int:
        """Counts the changes but a pod added or removed (add_pod, remove_pod, which leave `obj` as it is): a fact
        read from the Node object alone (labels, taints, images) can differ only once this moved."""
        return int(self.__dict__.get("_object_generation", 0))

    def changed(self) -> None:
        d = self.__dict__
        d["_object_generation"] = d.get("_object_generation", 0) + 1
        self._pods_changed()

    def _pods_changed(self) -> None:
        d = self.__dict__
        d["_generation"] = d.get("_generation", 0) + 1
        for callback in d.get("_callbacks", ()):
            callback(self)

    def derived(self, name: str, compute: Callable[[NodeInfo, _T | None], _T]) -> _T:
        """A fact plugins compute from this node (its pods' non-zero requests, …), kept until the node next
        changes and shared by every plugin asking under `name`; `compute(node, last)` may reuse the last value."""
        memo = self.__dict__.setdefault("_derived", {})
        generation = self.generation
        last = memo.get(name)
        if last is not None and last[0] == generation:
            return cast(_T, last[1])
        value = compute(self, None if last is None else last[1])
        memo[name] = (generation, value)
        return value

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
        self.__dict__.setdefault("_requests", {})[k] = _shared(requests)
        subsets = self.__dict__.get("_subsets")
        if subsets:
            tests = self.__dict__["_tests"]
            for name, members in subsets.items():
                if tests[name](pod):
                    members[k] = pod
                    _SUBSETS.changes += 1
        for r, v in requests.items():
            self.requested[r] = self.requested.get(r, 0) + v
        self.requested[PODS] = self.requested.get(PODS, 0) + 1
        self._pods_changed()

    def requests_of(self, pod_key: str) -> dict[str, int] | None:
        """The requests `add_pod` counted for the pod under this key (parsed once, when it was added; read them,
        never change them); None for a key not among `pods`."""
        requests: dict[str, int] | None = self.__dict__.get("_requests", {}).get(pod_key)
        return requests

    def remove_pod(self, pod_key: str, requests: dict[str, int] | None = None) -> JSON | None:
        """`requests`: pod_requests of the pod under that key when the caller knows them."""
        pod = self.pods.pop(pod_key, None)
        kept = self.__dict__.get("_requests", {}).pop(pod_key, None)
        for members in self.__dict__.get("_subsets", {}).values():
            if members.pop(pod_key, None) is not None:
                _SUBSETS.changes += 1
        if pod is not None:
            if requests is None:
                requests = pod_requests(pod) if kept is None else kept
            for r, v in requests.items():
                self.requested[r] = self.requested.get(r, 0) - v
            self.requested[PODS] = self.requested.get(PODS, 0) - 1
            self._pods_changed()
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
    quota_profiles: list[JSON] = field(default_factory=list)  # ElasticQuotaProfile objects (koord-manager's)
    pdbs: list[JSON] = field(default_factory=list)  # PodDisruptionBudget objects
    configmaps: dict[str, JSON] = field(default_factory=dict)  # ns/name → ConfigMap (e.g. GPU share templates)
    reservations: list[JSON] = field(default_factory=list)  # Reservation objects (scheduler.reservation)
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)  # name → labels (pod affinity's selectors)

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
        for n, doc in enumerate(docs, 1):
            if doc is not None and not isinstance(doc, dict):  # e.g. a snippet whose indentation was lost
                raise ValueError(f"{f}: document {n} is not an object (it reads as a {type(doc).__name__})")
            out.extend(_flatten(doc))
    return out


def _flatten(doc: object) -> list[JSON]:
    if not isinstance(doc, dict):
        return []
    if str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list):
        return [o for item in doc["items"] for o in _flatten(item)]
    return [doc]


def bound_pod(pod: JSON, node: NodeInfo) -> JSON:
    """`pod` as it is accounted on `node`: its conservative stand-in when its requests are malformed (reported)."""
    kept, why = conservative_pod(pod, node.allocatable)
    if why is not None:
        malformed.report("Pod", pod, why, f"counted on node {node.name} as holding what it could not say")
    return kept


def build_cluster(objects: Iterable[JSON]) -> Cluster:
    cluster = Cluster()
    objs = []
    for o in objects:
        why = shape_problem(o) or string_maps_problem(o) if isinstance(o, dict) else "not an object"
        if why is None:
            objs.append(o)
        else:
            malformed.report(str(o.get("kind") if isinstance(o, dict) else "object"), o, why)
    for o in objs:
        if o.get("kind") == "Node":
            name = str((o.get("metadata") or {}).get("name"))
            cluster.nodes[name] = NodeInfo(name, o, node_allocatable(o))
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
        elif kind == "ElasticQuotaProfile":
            cluster.quota_profiles.append(o)
        elif kind == "PodDisruptionBudget":
            cluster.pdbs.append(o)
        elif kind == "ConfigMap":
            cluster.configmaps[f"{(o.get('metadata') or {}).get('namespace') or 'default'}/{name}"] = o
        elif kind == "Reservation":
            cluster.reservations.append(o)
        elif kind == "Namespace":
            labels = (o.get("metadata") or {}).get("labels") or {}
            cluster.namespaces[name] = {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}
        elif kind == "PriorityClass":
            value = o.get("value") or 0
            if isinstance(value, int) and not isinstance(value, bool):
                cluster.priority_classes[name] = value
            else:
                malformed.report(kind, o, f"value {value!r} is not an integer")
        elif kind == "Pod":
            node = (o.get("spec") or {}).get("nodeName")
            if not isinstance(node, str | None):
                malformed.report(kind, o, "spec.nodeName is not a string")
            elif node and node in cluster.nodes and holds_resources(o):
                cluster.nodes[node].add_pod(bound_pod(o, cluster.nodes[node]))
            elif not node:
                cluster.pending.append(o)
    return cluster
