"""Node facts the descheduler's plugins share: capacity for thresholds, and NodeFit (upstream
pkg/descheduler/node/node.go, utilization_util.go GetNodeRawAllocatableFromNode)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from apis.core.errors import InvalidInput
from apis.core.nodeaffinity import AffinityError, PodNodeAffinity, pod_node_affinity
from apis.core.objects import JSON
from apis.core.resources import CPU, MEMORY, PODS
from apis.core.taints import (
    NO_EXECUTE,
    NO_SCHEDULE,
    first_untolerated,
    node_taints,
    node_unschedulable,
    pod_tolerations,
)
from apis.extension.node import ANNOTATION_NODE_RAW_ALLOCATABLE, decode_node_raw_allocatable
from scheduler.cluster import NodeInfo, pod_requests, resource_list

_BASIC = (CPU, MEMORY, PODS)  # IsBasicResource: counted even where the node does not list them


def is_ready(node: JSON) -> bool:
    """IsReady: no Ready condition other than True (a cordoned node is ready; one without conditions too)."""
    conditions = (node.get("status") or {}).get("conditions")
    for c in conditions if isinstance(conditions, list) else ():
        if isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") != "True":
            return False
    return True


def status_allocatable(node: JSON) -> dict[str, int]:
    """status.allocatable as written (no amplification), cpu in millicores; entries that do not parse left out."""
    raw = (node.get("status") or {}).get("allocatable")
    out: dict[str, int] = {}
    for k, v in (raw.items() if isinstance(raw, dict) else ()):
        try:
            out.update(resource_list({k: v}))
        except InvalidInput:
            continue
    return out


def raw_allocatable(node: JSON) -> dict[str, int]:
    """The `node.koordinator.sh/raw-allocatable` annotation when present and valid (the allocatable before
    koord-manager amplified it), else status.allocatable."""
    text = ((node.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_NODE_RAW_ALLOCATABLE)
    if isinstance(text, str):
        try:
            raw = decode_node_raw_allocatable(text)
            if raw is not None:
                return resource_list(raw)
        except InvalidInput:
            pass
    return status_allocatable(node)


@dataclass(frozen=True)
class PodFacts:
    """What NodeFit reads of a pod, read once for the many nodes it is tried on."""

    affinity: PodNodeAffinity | None
    affinity_error: str | None
    tolerations: list[JSON]
    requests: dict[str, int]
    requests_error: str | None

    @classmethod
    def of(cls, pod: JSON) -> PodFacts:
        try:
            affinity, affinity_error = pod_node_affinity(pod), None
        except AffinityError as e:
            affinity, affinity_error = None, str(e)
        try:
            requests, requests_error = pod_requests(pod), None
        except InvalidInput as e:
            requests, requests_error = {}, str(e)
        return cls(affinity, affinity_error, pod_tolerations(pod), requests, requests_error)


def node_fit(pod: JSON | PodFacts, node: NodeInfo) -> list[str]:
    """NodeFit's errors (none: the pod fits): node selector and required affinity, NoSchedule/NoExecute taints,
    the pod's requests within status.allocatable less the requests of the node's pods, node schedulable."""
    facts = pod if isinstance(pod, PodFacts) else PodFacts.of(pod)
    errors = []
    if facts.affinity_error is not None:
        errors.append(facts.affinity_error)
    elif facts.affinity is not None and not facts.affinity.required_match(node.labels, node.name):
        errors.append("pod node selector does not match the node label")
    if first_untolerated(node_taints(node.obj), facts.tolerations, (NO_SCHEDULE, NO_EXECUTE)) is not None:
        errors.append("pod does not tolerate taints on the node")
    errors += _insufficient(facts, node)
    if node_unschedulable(node.obj):
        errors.append("node is not schedulable")
    return errors


def _insufficient(facts: PodFacts, node: NodeInfo) -> list[str]:
    """fitsRequest: each resource the pod requests against what remains (cpu, memory, pods always known; other
    resources only where the node lists them)."""
    if facts.requests_error is not None:
        return [facts.requests_error]
    allocatable: dict[str, int] = node.derived("descheduler.status_allocatable", _status_allocatable_of)
    errors = []
    for name, amount in facts.requests.items():
        if name not in _BASIC and name not in allocatable:
            errors.append(f"insufficient {name}")
            continue
        remaining = allocatable.get(name, 0) - node.requested.get(name, 0)
        if amount > remaining:
            errors.append(f"insufficient {name}")
    return errors


def _status_allocatable_of(node: NodeInfo, _last: dict[str, int] | None) -> dict[str, int]:
    return status_allocatable(node.obj)


def pod_fits_any_other_node(pod: JSON, nodes: Iterable[NodeInfo]) -> bool:
    """PodFitsAnyOtherNode: NodeFit on some node other than the pod's own."""
    own = (pod.get("spec") or {}).get("nodeName")
    facts = PodFacts.of(pod)
    return any(n.name != own and not node_fit(facts, n) for n in nodes)
