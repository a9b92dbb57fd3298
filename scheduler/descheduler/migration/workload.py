"""The workload a pod belongs to, found through its controller ownerReference, with its replicas and its pods.

Upstream: pkg/descheduler/controllers/migration/controllerfinder (a restatement of OpenKruise's ControllerFinder).
Kinds are matched by API group and kind, the version ignored: ReplicationController, Deployment, ReplicaSet (one a
Deployment controls stands for that Deployment), StatefulSet, Kruise CloneSet and Advanced StatefulSet; any other
kind is read as upstream reads its `scale` subresource: `spec.replicas` (0 when absent) — in `simulate` from the
object in the cluster directory, in `run` through `scales` (migration/scale.py: discovery, then GET .../scale), whose
Scale's `status.selector` finds the ReplicaSets that kind controls (upstream getReplicaSetsForDeployment, which its
GetPodsForRef applies to every kind but the five it knows).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from apis.core import podmeta
from apis.core.labelselector import LabelSelector, SelectorError, parse_label_selector, parse_selector_string
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
Scales = Callable[[str, str, str, str], JSON | None]
"""(apiVersion, kind, namespace, name) → the object's autoscaling/v1 Scale, or None (migration/scale.ScaleReader)."""


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


def controller_of(pod: JSON, objects: Objects | ObjectIndex, scales: Scales | None = None) -> Workload | None:
    """The workload behind the pod's controller ownerReference; None for a pod without one or when the object is not
    there (or has another UID)."""
    ref = podmeta.controller_ref(pod)
    if ref is None:
        return None
    return find(ref, str(as_object(pod.get("metadata")).get("namespace") or ""), objects, scales)


def find(ref: JSONMapping, namespace: str, objects: Objects | ObjectIndex, scales: Scales | None = None
         ) -> Workload | None:
    """The workload an ownerReference names in `namespace` (upstream GetPodsForRef / GetExpectedScaleForPod)."""
    if not isinstance(objects, ObjectIndex):
        objects = ObjectIndex(objects)
    group, kind, name = group_of(ref.get("apiVersion")), str(ref.get("kind") or ""), str(ref.get("name") or "")
    obj = objects.by_name.get((group, kind, namespace, name))
    if obj is None and scales is not None and (group, kind) not in NATIVE:
        return _by_scale(ref, namespace, objects, scales)
    if obj is None or (ref.get("uid") and _uid(obj) != ref.get("uid")):
        return None
    if (group, kind) == (APPS, "ReplicaSet"):
        owner = podmeta.controller_ref(obj)
        if owner is not None and owner.get("kind") == "Deployment" and group_of(owner.get("apiVersion")) == APPS:
            deployment = find(owner, namespace, objects)
            if deployment is not None:
                return deployment
    if (group, kind) == (APPS, "Deployment"):
        selector = _selector(as_object(obj.get("spec")).get("selector"))
        return _workload(group, kind, obj, namespace, _replica_sets_of(_uid(obj), selector, namespace, objects))
    return _workload(group, kind, obj, namespace, frozenset({_uid(obj)}))


def _workload(group: str, kind: str, obj: JSON, namespace: str, uids: frozenset[str]) -> Workload:
    meta = as_object(obj.get("metadata"))
    replicas = as_object(obj.get("spec")).get("replicas")
    if not isinstance(replicas, int) or isinstance(replicas, bool):
        replicas = 1 if (group, kind) in NATIVE else 0
    return Workload(group, kind, namespace, str(meta.get("name") or ""), _uid(obj), replicas,
                    meta.get("deletionTimestamp") is not None, uids)


def _by_scale(ref: JSONMapping, namespace: str, objects: ObjectIndex, scales: Scales) -> Workload | None:
    """Upstream getScaleController: the Scale's replicas and UID; its pods those of the ReplicaSets it controls that
    its selector matches, else its own (a selector that does not parse: no workload, as upstream's error)."""
    api_version, kind, name = str(ref.get("apiVersion") or ""), str(ref.get("kind") or ""), str(ref.get("name") or "")
    scale = scales(api_version, kind, namespace, name)
    if scale is None or (ref.get("uid") and _uid(scale) != ref.get("uid")):
        return None
    try:
        selector = parse_selector_string(str(as_object(scale.get("status")).get("selector") or ""))
    except SelectorError:
        return None
    replicas = as_object(scale.get("spec")).get("replicas")
    uid = _uid(scale)
    rss = _replica_sets_of(uid, selector, namespace, objects, empty_matches=True)  # labels.Everything, as upstream
    return Workload(group_of(api_version), kind, namespace, name, uid,
                    replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else 0, False,
                    rss or frozenset({uid}))


def _replica_sets_of(uid: str, selector: LabelSelector | None, namespace: str, objects: ObjectIndex, *,
                     empty_matches: bool = False) -> frozenset[str]:
    """The UIDs of the ReplicaSets the object of `uid` controls whose labels its selector matches (an empty selector
    matches none, unless `empty_matches`)."""
    out = set()
    for rs in objects.by_ns.get((APPS, "ReplicaSet", namespace), ()):
        owner = podmeta.controller_ref(rs)
        labels = as_object(as_object(rs.get("metadata")).get("labels"))
        if owner is not None and owner.get("uid") == uid and selector is not None \
                and (empty_matches or not selector.empty) \
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
