"""The workload a pod belongs to, found through its controller ownerReference, with its replicas and its pods.

Upstream: pkg/descheduler/controllers/migration/controllerfinder (a restatement of OpenKruise's ControllerFinder).
Kinds are matched by API group and kind, the version ignored: ReplicationController, Deployment, ReplicaSet (one a
Deployment controls stands for that Deployment), StatefulSet, Kruise CloneSet and Advanced StatefulSet; any other
kind is read as upstream reads its `scale` subresource: `spec.replicas` (0 when absent).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from apis.core import podmeta
from apis.core.labelselector import LabelSelector, SelectorError, parse_label_selector
from apis.core.objects import JSON, JSONMapping, as_object

CORE, APPS, KRUISE = "", "apps", "apps.kruise.io"
# (group, kind) read through their own objects; spec.replicas defaults to 1 there, as the API server defaults it
NATIVE = {(CORE, "ReplicationController"), (APPS, "Deployment"), (APPS, "ReplicaSet"), (APPS, "StatefulSet"),
          (KRUISE, "CloneSet"), (KRUISE, "StatefulSet")}


def group_of(api_version: object) -> str:
    text = str(api_version or "")
    return text.split("/", 1)[0] if "/" in text else CORE


@dataclass(frozen=True)
class Workload:
    """A controller of pods. `owner_uids`: the UIDs a pod of it carries among its ownerReferences (a Deployment's
    are those of its ReplicaSets)."""

    group: str
    kind: str
    namespace: str
    name: str
    uid: str
    replicas: int
    deleting: bool
    owner_uids: frozenset[str]

    def pods(self, pods: Iterable[JSON]) -> list[JSON]:
        """The pods of the namespace that carry one of the workload's UIDs among their ownerReferences."""
        return [p for p in pods if as_object(p.get("metadata")).get("namespace") == self.namespace
                and any(r.get("uid") in self.owner_uids for r in podmeta.owner_references(p))]


Objects = Mapping[str, Sequence[JSON]]  # by kind, as the descheduler's Snapshot keeps them


class ObjectIndex:
    """The objects of a snapshot by (group, kind, namespace) and name, built once per snapshot (a lookup per
    candidate pod over thousands of workloads would otherwise walk them all)."""

    def __init__(self, objects: Objects) -> None:
        self.by_ns: dict[tuple[str, str, str], list[JSON]] = {}
        self.by_name: dict[tuple[str, str, str, str], JSON] = {}
        for kind, objs in objects.items():
            for o in objs:
                meta = as_object(o.get("metadata"))
                ns = str(meta.get("namespace") or "")
                group = group_of(o.get("apiVersion"))
                self.by_ns.setdefault((group, kind, ns), []).append(o)
                self.by_name.setdefault((group, kind, ns, str(meta.get("name") or "")), o)


def controller_of(pod: JSON, objects: Objects | ObjectIndex) -> Workload | None:
    """The workload behind the pod's controller ownerReference; None for a pod without one or when the object is not
    there (or has another UID)."""
    ref = podmeta.controller_ref(pod)
    if ref is None:
        return None
    return find(ref, str(as_object(pod.get("metadata")).get("namespace") or ""), objects)


def find(ref: JSONMapping, namespace: str, objects: Objects | ObjectIndex) -> Workload | None:
    """The workload an ownerReference names in `namespace` (upstream GetPodsForRef / GetExpectedScaleForPod)."""
    if not isinstance(objects, ObjectIndex):
        objects = ObjectIndex(objects)
    group, kind, name = group_of(ref.get("apiVersion")), str(ref.get("kind") or ""), str(ref.get("name") or "")
    obj = objects.by_name.get((group, kind, namespace, name))
    if obj is None or (ref.get("uid") and _uid(obj) != ref.get("uid")):
        return None
    if (group, kind) == (APPS, "ReplicaSet"):
        owner = podmeta.controller_ref(obj)
        if owner is not None and owner.get("kind") == "Deployment" and group_of(owner.get("apiVersion")) == APPS:
            deployment = find(owner, namespace, objects)
            if deployment is not None:
                return deployment
    if (group, kind) == (APPS, "Deployment"):
        return _workload(group, kind, obj, namespace, _replica_sets_of(obj, namespace, objects))
    return _workload(group, kind, obj, namespace, frozenset({_uid(obj)}))


def _workload(group: str, kind: str, obj: JSON, namespace: str, uids: frozenset[str]) -> Workload:
    meta = as_object(obj.get("metadata"))
    replicas = as_object(obj.get("spec")).get("replicas")
    if not isinstance(replicas, int) or isinstance(replicas, bool):
        replicas = 1 if (group, kind) in NATIVE else 0
    return Workload(group, kind, namespace, str(meta.get("name") or ""), _uid(obj), replicas,
                    meta.get("deletionTimestamp") is not None, uids)


def _replica_sets_of(deployment: JSON, namespace: str, objects: ObjectIndex) -> frozenset[str]:
    """The UIDs of the ReplicaSets the Deployment controls whose labels its selector matches."""
    uid = _uid(deployment)
    selector = _selector(as_object(deployment.get("spec")).get("selector"))
    out = set()
    for rs in objects.by_ns.get((APPS, "ReplicaSet", namespace), ()):
        owner = podmeta.controller_ref(rs)
        labels = as_object(as_object(rs.get("metadata")).get("labels"))
        if owner is not None and owner.get("uid") == uid and selector is not None and not selector.empty \
                and selector.matches({str(k): str(v) for k, v in labels.items()}):
            out.add(_uid(rs))
    return frozenset(out)


def _selector(raw: object) -> LabelSelector | None:
    try:
        return parse_label_selector(raw) if isinstance(raw, Mapping) else None
    except SelectorError:
        return None


def _uid(obj: JSON) -> str:
    return str(as_object(obj.get("metadata")).get("uid") or "")
