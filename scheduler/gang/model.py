"""Gang identity and settings from PodGroups and pod annotations, and GangGroups (spec §4)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from apis.core import godur
from apis.core.errors import InvalidInput
from apis.core.objects import JSON
from apis.scheduling.gang import (
    ANNOTATION_GANG_GROUPS,
    ANNOTATION_GANG_MATCH_POLICY,
    ANNOTATION_GANG_MIN_AVAILABLE,
    ANNOTATION_GANG_MODE,
    ANNOTATION_GANG_NETWORK_TOPOLOGY_INDEX,
    ANNOTATION_GANG_NETWORK_TOPOLOGY_SPEC,
    ANNOTATION_GANG_TOTAL_NUMBER,
    ANNOTATION_GANG_WAITING_TIME,
    ANNOTATION_MATCH_POLICY_ALIAS,
    GANG_MODE_NON_STRICT,
    GANG_MODE_STRICT,
    LABEL_MIN_AVAILABLE_DEPRECATED,
    MATCH_POLICIES,
    MATCH_POLICY_ONCE_SATISFIED,
    gang_name,
)
from scheduler.cluster import Cluster, key

DEFAULT_TIMEOUT_SECONDS = 600.0


def parse_go_duration(text: str) -> float | None:
    """Go's time.ParseDuration in seconds ("1h30m", "90s", "1.5m"); None when invalid."""
    try:
        return godur.parse(text)
    except InvalidInput:
        return None


def _meta(obj: JSON) -> JSON:
    return obj.get("metadata") or {}


def _labels(obj: JSON) -> dict[str, str]:
    return dict(_meta(obj).get("labels") or {})


def _annotations(obj: JSON) -> dict[str, str]:
    return dict(_meta(obj).get("annotations") or {})


def _int(value: object) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def gang_name_of(pod: JSON) -> str | None:
    return gang_name(_labels(pod), _annotations(pod))


def gang_id_of(pod: JSON) -> str | None:
    """`<namespace>/<gang name>` or None for a pod outside any gang."""
    name = gang_name_of(pod)
    if name is None:
        return None
    return f"{_meta(pod).get('namespace') or 'default'}/{name}"


def pod_priority(pod: JSON, cluster: Cluster) -> int:
    """spec.priority (set by admission) or the PriorityClass value; 0 without either."""
    spec = pod.get("spec") or {}
    if spec.get("priority") is not None:
        return int(spec["priority"])
    return cluster.priority_classes.get(str(spec.get("priorityClassName") or ""), 0)


def network_topology_index(pod: JSON) -> int | None:
    return _int(_annotations(pod).get(ANNOTATION_GANG_NETWORK_TOPOLOGY_INDEX))


def topology_order(pods: Iterable[JSON]) -> list[JSON]:
    """Pods by network-topology-index (those without a valid index last), then by name (spec §5.1)."""
    def rank(p: JSON) -> tuple[int, int, str]:
        idx = network_topology_index(p)
        return (0, idx, key(p)) if idx is not None else (1, 0, key(p))
    return sorted(pods, key=rank)


@dataclass
class Gang:
    id: str  # namespace/name
    min_member: int
    total_number: int
    mode: str = GANG_MODE_STRICT
    match_policy: str = MATCH_POLICY_ONCE_SATISFIED
    wait_seconds: float = DEFAULT_TIMEOUT_SECONDS
    groups: list[str] = field(default_factory=list)  # gang ids of the GangGroup, self included
    topology_spec: str | None = None  # raw network-topology-spec JSON
    from_podgroup: bool = False
    pending: list[JSON] = field(default_factory=list)  # pods to place, input order
    bound: int = 0  # members already running in the cluster
    exists: bool = True  # False for a gang a GangGroup names but nothing declares

    @property
    def children(self) -> int:
        return len(self.pending) + self.bound


@dataclass
class GangGroup:
    id: str  # member gang ids sorted and joined by ","
    gangs: list[Gang]

    @property
    def pending(self) -> list[JSON]:
        return [p for g in self.gangs for p in g.pending]


def _settings(annotations: dict[str, str], gang: Gang, default_match_policy: str) -> None:
    mode = annotations.get(ANNOTATION_GANG_MODE, GANG_MODE_STRICT)
    gang.mode = mode if mode in (GANG_MODE_STRICT, GANG_MODE_NON_STRICT) else GANG_MODE_STRICT  # invalid ⇒ Strict
    policy = (annotations.get(ANNOTATION_GANG_MATCH_POLICY) or annotations.get(ANNOTATION_MATCH_POLICY_ALIAS)
              or default_match_policy)
    gang.match_policy = policy if policy in MATCH_POLICIES else default_match_policy
    wait = (parse_go_duration(annotations[ANNOTATION_GANG_WAITING_TIME]) if ANNOTATION_GANG_WAITING_TIME in annotations
            else None)
    if wait is not None and wait > 0:
        gang.wait_seconds = wait
    raw_groups = annotations.get(ANNOTATION_GANG_GROUPS)
    if raw_groups:
        try:
            parsed = json.loads(raw_groups)
        except ValueError:
            parsed = None
        if isinstance(parsed, list) and all(isinstance(g, str) for g in parsed):
            gang.groups = sorted(set(parsed) | {gang.id})
    if not gang.groups:
        gang.groups = [gang.id]
    gang.topology_spec = annotations.get(ANNOTATION_GANG_NETWORK_TOPOLOGY_SPEC) or None


def gang_from_podgroup(pg: JSON, default_timeout: float = DEFAULT_TIMEOUT_SECONDS,
                       default_match_policy: str = MATCH_POLICY_ONCE_SATISFIED) -> Gang:
    spec = pg.get("spec") or {}
    min_member = max(0, _int(spec.get("minMember")) or 0)
    gang = Gang(key(pg) if _meta(pg).get("namespace") else f"default/{_meta(pg).get('name')}", min_member,
                min_member, wait_seconds=default_timeout, from_podgroup=True)
    timeout = _int(spec.get("scheduleTimeoutSeconds"))
    if timeout is not None and timeout > 0:
        gang.wait_seconds = float(timeout)
    annotations = _annotations(pg)
    total = _int(annotations.get(ANNOTATION_GANG_TOTAL_NUMBER))
    gang.total_number = max(total or min_member, min_member)
    _settings(annotations, gang, default_match_policy)
    return gang


def gang_from_pod(pod: JSON, default_timeout: float = DEFAULT_TIMEOUT_SECONDS,
                  default_match_policy: str = MATCH_POLICY_ONCE_SATISFIED) -> Gang | None:
    """An annotation-only gang from its first pod; None when min-available is missing or invalid."""
    gid = gang_id_of(pod)
    annotations, labels = _annotations(pod), _labels(pod)
    min_available = _int(annotations.get(ANNOTATION_GANG_MIN_AVAILABLE, labels.get(LABEL_MIN_AVAILABLE_DEPRECATED)))
    if gid is None or min_available is None or min_available < 0:
        return None
    total = _int(annotations.get(ANNOTATION_GANG_TOTAL_NUMBER))
    gang = Gang(gid, min_available, max(total or min_available, min_available), wait_seconds=default_timeout)
    _settings(annotations, gang, default_match_policy)
    return gang


def collect_gangs(pods: Iterable[JSON], cluster: Cluster, default_timeout: float = DEFAULT_TIMEOUT_SECONDS,
                  default_match_policy: str = MATCH_POLICY_ONCE_SATISFIED) -> dict[str, Gang]:
    """Every gang the pending pods (or the cluster's PodGroups) declare, with pending and bound members counted.

    A PodGroup wins over pod annotations for the same id; an annotation gang is configured by its first pod
    (upstream `gang.go` tryInitByPodConfig initialises once)."""
    gangs: dict[str, Gang] = {}
    for pg in cluster.podgroups.values():
        g = gang_from_podgroup(pg, default_timeout, default_match_policy)
        gangs[g.id] = g
    pending = list(pods)
    for pod in pending:
        gid = gang_id_of(pod)
        if gid is None:
            continue
        if gid not in gangs:
            made = gang_from_pod(pod, default_timeout, default_match_policy)
            if made is None:
                continue
            gangs[gid] = made
        gangs[gid].pending.append(pod)
    for pod in cluster.assigned_pods():
        gid = gang_id_of(pod)
        if gid in gangs and gid is not None and (pod.get("spec") or {}).get("nodeName"):
            gangs[gid].bound += 1
    return gangs


def gang_groups(gangs: dict[str, Gang]) -> dict[str, GangGroup]:
    """gang id → its GangGroup. Groups that list each other differently are merged (union of the declared sets)
    so that every gang belongs to exactly one group in the simulation."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for g in gangs.values():
        for other in g.groups:
            parent[find(other)] = find(g.id)
    members: dict[str, list[str]] = {}
    for gid in list(parent):
        members.setdefault(find(gid), []).append(gid)
    out: dict[str, GangGroup] = {}
    for ids in members.values():
        ids = sorted(ids)
        group = GangGroup(",".join(ids), [gangs[i] if i in gangs else Gang(i, 0, 0, exists=False) for i in ids])
        for i in ids:
            out[i] = group
    for gid in gangs:
        out.setdefault(gid, GangGroup(gid, [gangs[gid]]))
    return out
