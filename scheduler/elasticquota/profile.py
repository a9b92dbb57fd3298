"""ElasticQuotaProfile → the root ElasticQuota of its tree, as koord-manager's profile controller writes it.

(pkg/quota-controller/profile/profile_controller.go) `simulate` restates the controller for the profiles in its
--cluster directory; `run` leaves it to koord-manager and schedules with the quotas it finds. The tree's total is
the allocatable of the nodes the profile's nodeSelector picks, scaled by resourceRatio; the quota's min is that
total for each resource key (annotation resource-keys, default cpu and memory), its max MaxInt64/2000.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Mapping

from apis.core.errors import InvalidInput
from apis.core.labelselector import selector_or_nothing
from apis.core.objects import JSON
from apis.scheduling.quota import (
    ANNOTATION_QUOTA_RESOURCE_KEYS,
    ANNOTATION_QUOTA_TOTAL_RESOURCE,
    ANNOTATION_QUOTA_UNSCHEDULABLE_RESOURCE,
    LABEL_QUOTA_IS_ROOT,
    LABEL_QUOTA_NAME,
    LABEL_QUOTA_PROFILE,
    LABEL_QUOTA_TREE_ID,
    QUOTA_API_VERSION,
)
from scheduler.cluster import Cluster, NodeInfo, key
from scheduler.elasticquota.model import Resources, add, resource_json

UNBOUNDED_MAX = str((2**63 - 1) // 2000)  # resource.NewQuantity(math.MaxInt64/2000, DecimalSI)
FNV64_OFFSET, FNV64_PRIME = 0xCBF29CE484222325, 0x100000001B3


def tree_id_of(profile: JSON) -> str:
    """The profile's tree-id label, else the controller's: FNV-1a 64 of "<namespace>/<name>", in decimal."""
    meta = profile.get("metadata") or {}
    given = (meta.get("labels") or {}).get(LABEL_QUOTA_TREE_ID)
    if given:
        return str(given)
    h = FNV64_OFFSET
    for b in f"{meta.get('namespace') or ''}/{meta.get('name') or ''}".encode():
        h = ((h ^ b) * FNV64_PRIME) & 0xFFFFFFFFFFFFFFFF
    return str(h)


def _ratio(spec: Mapping[str, object]) -> float:
    """resourceRatio: a number in (0, 1], anything else 1."""
    raw = spec.get("resourceRatio")
    if raw is None:
        return 1.0
    try:
        value = float(str(raw))
    except ValueError:
        return 1.0
    return value if 0 < value <= 1.0 and not math.isnan(value) else 1.0


def _scaled(total: Resources, ratio: float) -> Resources:
    # MultiplyQuantity: cpu on its milli value, the rest on whole units, truncated (cpu is milli here already)
    return {k: int(float(v) * ratio) for k, v in total.items()}


def _ready(node: NodeInfo) -> bool:
    for c in (node.obj.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


def root_quota(profile: JSON, cluster: Cluster, existing: JSON | None = None) -> JSON:
    """The ElasticQuota the controller creates (or updates, given the existing one) for the profile; InvalidInput
    names the field of a profile it would not take."""
    meta = profile.get("metadata") or {}
    spec = profile.get("spec")
    if not isinstance(spec, Mapping):
        raise InvalidInput("spec: required")
    quota_name = spec.get("quotaName")
    if not isinstance(quota_name, str) or not quota_name:
        raise InvalidInput("spec.quotaName: required")
    selector = spec.get("nodeSelector")
    if not isinstance(selector, Mapping):
        raise InvalidInput("spec.nodeSelector: required (a label selector)")
    quota_labels = spec.get("quotaLabels") or {}
    if not isinstance(quota_labels, Mapping):
        raise InvalidInput("spec.quotaLabels: must be a map of strings")
    total: Resources = {}
    unschedulable: Resources = {}
    nodes = selector_or_nothing(selector)  # one that does not convert selects no node
    for node in cluster.nodes.values():
        if nodes is None or not nodes.matches((node.obj.get("metadata") or {}).get("labels") or {}):
            continue
        total = add(total, node.allocatable)
        if (node.obj.get("spec") or {}).get("unschedulable") or not _ready(node):
            unschedulable = add(unschedulable, node.allocatable)
    ratio = _ratio(spec)
    total, unschedulable = _scaled(total, ratio), _scaled(unschedulable, ratio)
    keys = ["cpu", "memory"]
    raw_keys = (meta.get("annotations") or {}).get(ANNOTATION_QUOTA_RESOURCE_KEYS)
    if raw_keys:
        try:
            parsed = json.loads(str(raw_keys))
            if isinstance(parsed, list):
                keys = [str(k) for k in parsed]
        except ValueError:
            pass  # the controller logs and keeps cpu and memory
    quota: JSON = copy.deepcopy(existing) if existing is not None else {
        "apiVersion": QUOTA_API_VERSION, "kind": "ElasticQuota",
        "metadata": {"name": quota_name, "namespace": meta.get("namespace") or "default"}}
    qmeta: JSON = dict(quota.get("metadata") or {})
    minimum = {k: total.get(k, 0) for k in keys}
    quota["spec"] = {"min": resource_json(minimum), "max": {k: UNBOUNDED_MAX for k in keys}}
    labels: dict[str, str] = dict(qmeta.get("labels") or {})
    labels[LABEL_QUOTA_PROFILE] = str(meta.get("name") or "")
    labels.update({str(k): str(v) for k, v in quota_labels.items()})
    labels[LABEL_QUOTA_TREE_ID] = tree_id_of(profile)
    labels[LABEL_QUOTA_IS_ROOT] = "true"
    annotations: dict[str, str] = dict(qmeta.get("annotations") or {})
    annotations[ANNOTATION_QUOTA_TOTAL_RESOURCE] = json.dumps(resource_json(total), separators=(",", ":"))
    annotations[ANNOTATION_QUOTA_UNSCHEDULABLE_RESOURCE] = json.dumps(resource_json(unschedulable),
                                                                      separators=(",", ":"))
    qmeta["labels"], qmeta["annotations"] = labels, annotations
    quota["metadata"] = qmeta
    return quota


def apply_profiles(cluster: Cluster, profiles: list[JSON]) -> list[tuple[str, str]]:
    """Each profile's root quota into the cluster's ElasticQuotas (replacing one of that namespace/name);
    returns (profile, reason) for each profile not taken."""
    refused: list[tuple[str, str]] = []
    for profile in profiles:
        meta = profile.get("metadata") or {}
        ns = str(meta.get("namespace") or "default")
        name = str((profile.get("spec") or {}).get("quotaName") or "") if isinstance(profile.get("spec"), dict) else ""
        existing = next((q for q in cluster.elastic_quotas if key(q) == f"{ns}/{name}"), None)
        try:
            quota = root_quota(profile, cluster, existing)
        except InvalidInput as e:
            refused.append((f"{ns}/{meta.get('name')}", str(e)))
            continue
        cluster.elastic_quotas = [q for q in cluster.elastic_quotas if q is not existing] + [quota]
    return refused


def with_tree_affinity(pods: list[JSON], cluster: Cluster, profiles: list[JSON]) -> list[JSON]:
    """koord-manager's pod webhook (multi_quota_tree_affinity.go) on created pods: a pod whose quota (its quota
    label, else its namespace) is in a profile's tree gets the profile's nodeSelector as required node affinity,
    added to each of its node selector terms (or as the one term). The pods given are not changed."""
    if not profiles:
        return pods
    tree_of = {str((q.get("metadata") or {}).get("name")): str(((q.get("metadata") or {}).get("labels") or {})
                                                                 .get(LABEL_QUOTA_TREE_ID) or "")
               for q in cluster.elastic_quotas}
    selector_of: dict[str, Mapping[str, object]] = {}
    for p in profiles:
        sel = (p.get("spec") or {}).get("nodeSelector") if isinstance(p.get("spec"), dict) else None
        if isinstance(sel, Mapping):
            selector_of.setdefault(tree_id_of(p), sel)
    out: list[JSON] = []
    for pod in pods:
        meta = pod.get("metadata") or {} if isinstance(pod, dict) else {}
        quota = str((meta.get("labels") or {}).get(LABEL_QUOTA_NAME) or meta.get("namespace") or "default")
        sel = selector_of.get(tree_of.get(quota, ""))
        if not tree_of.get(quota) or sel is None or pod.get("kind", "Pod") != "Pod":
            out.append(pod)
            continue
        out.append(_add_affinity(pod, sel))
    return out


def _add_affinity(pod: JSON, selector: Mapping[str, object]) -> JSON:
    labels = selector.get("matchLabels")
    exprs = selector.get("matchExpressions")
    reqs: list[JSON] = [{"key": k, "operator": "In", "values": [v]}
                        for k, v in (labels.items() if isinstance(labels, Mapping) else ())]
    for e in exprs if isinstance(exprs, list) else ():
        if isinstance(e, dict):
            reqs.append({"key": e.get("key"), "operator": e.get("operator"), "values": e.get("values") or []})
    pod = copy.deepcopy(pod)
    spec = pod.setdefault("spec", {})
    required = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {}).setdefault(
        "requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or []
    if terms:
        for t in terms:
            t["matchExpressions"] = [*(t.get("matchExpressions") or []), *copy.deepcopy(reqs)]
    else:
        terms = [{"matchExpressions": reqs}]
    required["nodeSelectorTerms"] = terms
    return pod
