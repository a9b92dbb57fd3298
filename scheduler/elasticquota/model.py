"""ElasticQuota objects as quota specs: labels, annotations, resource arithmetic and the webhook's validation."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from apis.core.errors import InvalidInput
from apis.core.objects import JSON
from apis.core.quantity import format_bytes, format_milli
from apis.core.resources import CPU, MEMORY
from apis.scheduling.quota import (
    ANNOTATION_QUOTA_NAMESPACES,
    ANNOTATION_QUOTA_SHARED_WEIGHT,
    ANNOTATION_QUOTA_TOTAL_RESOURCE,
    DEFAULT_QUOTA,
    LABEL_QUOTA_ALLOW_FORCE_UPDATE,
    LABEL_QUOTA_ALLOW_LENT_RESOURCE,
    LABEL_QUOTA_IGNORE_DEFAULT_TREE,
    LABEL_QUOTA_IS_PARENT,
    LABEL_QUOTA_IS_ROOT,
    LABEL_QUOTA_PARENT,
    LABEL_QUOTA_TREE_ID,
    ROOT_QUOTA,
    SYSTEM_QUOTA,
)
from scheduler.cluster import quantity_value

log = logging.getLogger(__name__)

# apis/extension/elastic_quota.go
SPECIAL = (ROOT_QUOTA, SYSTEM_QUOTA, DEFAULT_QUOTA)

Resources = dict[str, int]  # cpu in millicores, everything else in whole units (scheduler.cluster.quantity_value)


def quota_signature(objs: list[JSON]) -> str:
    """What of the ElasticQuota objects defines the quota tree (names, labels, spec, shared-weight and namespaces
    annotations), as a comparable string: status and the runtime/request annotations a scheduler writes are left
    out."""
    parts = []
    for o in objs:
        meta = o.get("metadata") or {}
        ann = meta.get("annotations") or {}
        parts.append([meta.get("namespace"), meta.get("name"), meta.get("labels"), o.get("spec"),
                      ann.get(ANNOTATION_QUOTA_SHARED_WEIGHT) if isinstance(ann, dict) else None,
                      ann.get(ANNOTATION_QUOTA_NAMESPACES) if isinstance(ann, dict) else None,
                      ann.get(ANNOTATION_QUOTA_TOTAL_RESOURCE) if isinstance(ann, dict) else None])
    return json.dumps(sorted(parts, key=lambda p: (str(p[0]), str(p[1]))), sort_keys=True, default=str)


# -- resource arithmetic (k8s.io/apiserver/pkg/quota/v1 in the small) ------------------------------------------
def add(a: Mapping[str, int], b: Mapping[str, int]) -> Resources:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return out


def sub(a: Mapping[str, int], b: Mapping[str, int]) -> Resources:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) - v
    return out


def non_negative(a: Mapping[str, int]) -> Resources:
    return {k: max(v, 0) for k, v in a.items()}


def add_non_negative(a: Mapping[str, int], b: Mapping[str, int]) -> Resources:
    """non_negative(add(a, b)) in one new map (the tree's accounting does this at every level for every pod)."""
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    for k, v in out.items():
        if v < 0:
            out[k] = 0
    return out


def mask(a: Mapping[str, int], keys: Iterable[str]) -> Resources:
    return {k: a[k] for k in keys if k in a}


def is_zero(a: Mapping[str, int]) -> bool:
    return not any(a.values())


def equal(a: Mapping[str, int], b: Mapping[str, int]) -> bool:
    """quotav1.Equals after RemoveZeros."""
    return {k: v for k, v in a.items() if v} == {k: v for k, v in b.items() if v}


def exceeded(a: Mapping[str, int], b: Mapping[str, int]) -> list[str]:
    """quotav1.LessThanOrEqual's failing dimensions (a key missing from b counts as 0), sorted."""
    return sorted(k for k, v in a.items() if v > b.get(k, 0))


def format_quantity(resource: str, value: int) -> str:
    """As createQuantity writes it: cpu milli DecimalSI, memory BinarySI, others DecimalSI."""
    if resource == CPU:
        return format_milli(value)
    if resource == MEMORY:
        return format_bytes(value)
    return format_milli(value * 1000)


def resource_json(a: Mapping[str, int]) -> dict[str, str]:
    return {k: format_quantity(k, a[k]) for k in sorted(a)}


def print_resources(a: Mapping[str, int]) -> str:
    """plugin_helper.go printResourceList: "cpu:2,memory:4Gi", `<empty>` for none."""
    if not a:
        return "<empty>"
    return ",".join(sorted(f"{k}:{format_quantity(k, v)}" for k, v in a.items()))


def go_list(names: list[str]) -> str:
    return "[" + " ".join(names) + "]"


def parse_resources(obj: object, where: str) -> Resources:
    if obj is None:
        return {}
    if not isinstance(obj, Mapping):
        raise InvalidInput(f"{where} must be a map of resource quantities")
    out: Resources = {}
    for k, v in obj.items():
        try:
            out[str(k)] = quantity_value(str(k), v)
        except InvalidInput as e:
            raise InvalidInput(f"{where}[{k}]: {e}") from None
    return out


# -- the objects ---------------------------------------------------------------------------------------------
@dataclass
class QuotaSpec:
    """What the scheduler takes from one ElasticQuota (NewQuotaInfoFromQuota)."""

    name: str
    namespace: str
    parent: str = ROOT_QUOTA
    is_parent: bool = False
    allow_lent: bool = True
    max: Resources = field(default_factory=dict)
    min: Resources = field(default_factory=dict)
    shared_weight: Resources = field(default_factory=dict)
    namespaces: list[str] = field(default_factory=list)  # the quota.scheduling.koordinator.sh/namespaces annotation
    force_update: bool = False
    tree_root: bool = False
    tree_id: str = ""  # the quota tree it belongs to ("" the default tree)
    total: Resources | None = None  # a tree root's total-resource annotation: its tree's total
    ignore_default_tree: bool = False  # the tree's total is not taken out of the default tree's
    obj: JSON = field(default_factory=dict, repr=False)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def parse_quota(obj: JSON) -> QuotaSpec:
    """One ElasticQuota; raises InvalidInput with the reason (quota_topology_check.go validateQuotaSelfItem)."""
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or "")
    if not name:
        raise InvalidInput("metadata.name is empty")
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    if not isinstance(labels, Mapping) or not isinstance(annotations, Mapping):
        raise InvalidInput(f"{name}: labels and annotations must be maps")
    spec = obj.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise InvalidInput(f"{name}: spec must be a map")
    mx = parse_resources(spec.get("max"), f"{name} spec.max")
    mn = parse_resources(spec.get("min"), f"{name} spec.min")
    if neg := sorted(k for k, v in mx.items() if v < 0):
        raise InvalidInput(f"{name} quota.Spec.Max's value < 0, in dimensions :{go_list(neg)}")
    if neg := sorted(k for k, v in mn.items() if v < 0):
        raise InvalidInput(f"{name} quota.Spec.Min's value < 0, in dimensions :{go_list(neg)}")
    weight: Resources = {}
    raw = annotations.get(ANNOTATION_QUOTA_SHARED_WEIGHT)
    if raw:
        try:
            doc = json.loads(str(raw))
        except ValueError as e:
            raise InvalidInput(f"{name} annotation {ANNOTATION_QUOTA_SHARED_WEIGHT} is not JSON: {e}") from None
        weight = parse_resources(doc, f"{name} annotation {ANNOTATION_QUOTA_SHARED_WEIGHT}")
        if neg := sorted(k for k, v in weight.items() if v < 0):
            raise InvalidInput(f"{name} quota.Annotation[{ANNOTATION_QUOTA_SHARED_WEIGHT}]'s value < 0, in dimension :"
                               f"{go_list(neg)}")
    for k in sorted(mn):
        if k not in mx:
            raise InvalidInput(f"resourceKey {k} of quota {name} is included in min, which is not included in max")
        if mn[k] > mx[k]:
            raise InvalidInput(f"resourceKey {k} of quota {name} min {format_quantity(k, mn[k])} > max "
                               f"{format_quantity(k, mx[k])}")
    namespaces: list[str] = []
    if annotations.get(ANNOTATION_QUOTA_NAMESPACES):
        try:
            parsed = json.loads(str(annotations[ANNOTATION_QUOTA_NAMESPACES]))
            namespaces = [str(n) for n in parsed] if isinstance(parsed, list) else []
        except ValueError:
            namespaces = []  # GetAnnotationQuotaNamespaces: unparsable means none
    total: Resources | None = None
    raw_total = annotations.get(ANNOTATION_QUOTA_TOTAL_RESOURCE)
    if raw_total and labels.get(LABEL_QUOTA_IS_ROOT) == "true":
        try:
            total = parse_resources(json.loads(str(raw_total)), f"{name} annotation {ANNOTATION_QUOTA_TOTAL_RESOURCE}")
        except ValueError as e:
            raise InvalidInput(f"{name} annotation {ANNOTATION_QUOTA_TOTAL_RESOURCE} is not JSON: {e}") from None
    parent = str(labels.get(LABEL_QUOTA_PARENT) or "")
    if not parent and name != ROOT_QUOTA:
        parent = ROOT_QUOTA
    return QuotaSpec(name=name, namespace=str(meta.get("namespace") or "default"), parent=parent,
                     is_parent=labels.get(LABEL_QUOTA_IS_PARENT) == "true",
                     allow_lent=labels.get(LABEL_QUOTA_ALLOW_LENT_RESOURCE) != "false", max=mx, min=mn,
                     # GetSharedWeight: a missing, unparsable or all-zero annotation means max
                     shared_weight=weight if not is_zero(weight) else dict(mx), namespaces=namespaces,
                     force_update=labels.get(LABEL_QUOTA_ALLOW_FORCE_UPDATE) == "true",
                     tree_root=labels.get(LABEL_QUOTA_IS_ROOT) == "true",
                     tree_id=str(labels.get(LABEL_QUOTA_TREE_ID) or ""), total=total,
                     ignore_default_tree=labels.get(LABEL_QUOTA_IGNORE_DEFAULT_TREE) == "true", obj=obj)


def validate_quotas(objs: Iterable[JSON]) -> tuple[list[QuotaSpec], list[tuple[str, str]]]:
    """The ElasticQuotas the scheduler takes, parents before children, and (namespace/name, reason) for each one
    left out, as koord-manager's webhook would have refused it (quota_topology_check.go):

    - the object itself: quantities, min ≤ max, min's keys within max's, shared weight non-negative;
    - the parent must be a quota with is-parent "true" (taken itself), and have the same max keys; the child's
      min keys must be within the parent's min keys;
    - the children's min sum must stay within the parent's min (siblings are taken in name order, so the one
      that overflows is the one left out), unless the child has allow-force-update or is a tree root.
    - a child is in its parent's quota tree (label tree-id); a tree's root quota (is-root "true") hangs below
      the root and carries the tree's total in its total-resource annotation.
    Names are cluster-wide identities upstream (quotaInfoMap is keyed by name): a second quota of the same name
    in another namespace is left out. The root quota's object carries nothing the tree uses and is skipped.
    """
    rejected: list[tuple[str, str]] = []
    specs: dict[str, QuotaSpec] = {}
    for obj in sorted(objs, key=lambda o: (str((o.get("metadata") or {}).get("namespace") or ""),
                                           str((o.get("metadata") or {}).get("name") or ""))):
        meta = obj.get("metadata") or {}
        ident = f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
        if meta.get("deletionTimestamp"):
            continue
        try:
            spec = parse_quota(obj)
        except InvalidInput as e:
            rejected.append((ident, str(e)))
            continue
        if spec.name == ROOT_QUOTA:
            continue
        if spec.name in specs:
            rejected.append((ident, f"quota name {spec.name} is already taken by {specs[spec.name].key} "
                                    f"(quota names are cluster-wide)"))
            continue
        specs[spec.name] = spec
    ordered: list[QuotaSpec] = []
    taken: dict[str, QuotaSpec] = {}
    child_min: dict[str, Resources] = {}
    children: dict[str, list[QuotaSpec]] = {}
    for s in specs.values():
        children.setdefault(s.parent, []).append(s)
    queue = sorted(children.get(ROOT_QUOTA, []), key=lambda s: s.name)
    for s in specs.values():
        if s.parent == s.name:
            rejected.append((s.key, f"{s.name} has itself as parent"))
        elif s.parent != ROOT_QUOTA and s.parent not in specs:
            rejected.append((s.key, f"{s.name} has parentName {s.parent} but not find parentInfo in quotaInfoMap"))
    while queue:
        s = queue.pop(0)
        why = _topology_problem(s, taken, child_min)
        if why is None:
            taken[s.name] = s
            ordered.append(s)
            if s.parent != ROOT_QUOTA:
                child_min[s.parent] = add(child_min.get(s.parent, {}), s.min)
            queue.extend(sorted(children.get(s.name, []), key=lambda c: c.name))
        else:
            rejected.append((s.key, why))
            for c in _descendants(s.name, children):
                rejected.append((c.key, f"{c.name}: its ancestor {s.name} was left out"))
    reported = {k for k, _ in rejected}
    for s in specs.values():  # below a quota that never joined the tree (cycle, missing or refused ancestor)
        if s.name not in taken and s.key not in reported:
            rejected.append((s.key, f"{s.name}: its parent {s.parent} was left out"))
    for key, why in rejected:
        log.warning("ElasticQuota %s left out: %s", key, why)
    return ordered, rejected


def _descendants(name: str, children: dict[str, list[QuotaSpec]]) -> list[QuotaSpec]:
    out: list[QuotaSpec] = []
    for c in sorted(children.get(name, []), key=lambda c: c.name):
        out.append(c)
        out.extend(_descendants(c.name, children))
    return out


def _topology_problem(s: QuotaSpec, taken: dict[str, QuotaSpec], child_min: dict[str, Resources]) -> str | None:
    if s.parent == ROOT_QUOTA:
        return None
    parent = taken[s.parent]
    if parent.tree_id != s.tree_id:  # a tree is its own budget: no quota borrows across trees
        return (f"{s.name} is in quota tree {s.tree_id!r} but its parent {s.parent} is in tree {parent.tree_id!r}")
    if not parent.is_parent:
        return f"{s.name} has parentName {s.parent} but the parentQuotaInfo's IsParent is false"
    if set(parent.max) != set(s.max):
        return (f"failed to check sub and parent group quotaKey, err: checkSubAndParentGroupQuotaKey failed: "
                f"{s.parent}'s max keys are not the same with {s.name}'s")
    if not set(s.min) <= set(parent.min):
        return (f"failed to check sub and parent group quotaKey, err: checkSubAndParentGroupQuotaKey failed: "
                f"{s.name}'s min keys are not all included in {s.parent}'s")
    if s.force_update or s.tree_root:
        return None
    total = add(child_min.get(s.parent, {}), s.min)
    if exceeded(total, parent.min):
        return f"checkMinQuotaSum all brothers' MinQuota > parent MinQuota, parent: {s.parent}"
    return None
