"""The node's CPU facts in one record: topology, kubelet CPU manager, reservations and the LS/BE share pools.

Both the NodeResourceTopology report (koordlet.reporters.nrt) and the cpuset rule (koordlet.qos.cpuset,
koordlet.nri.hooks.cpuset) are built from `node_cpu_facts`, so what the scheduler reads and what the agent applies
never disagree. Upstream: states_noderesourcetopology.go calcNodeTopo (getNodeReserved, removeNodeReservedCPUs,
removeSystemQOSCPUs), apis/extension/node_reservation.go, system_qos.go.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from apis.core.errors import InvalidInput, PlanError
from apis.core.objects import JSON
from apis.extension.node import (
    ANNOTATION_NODE_RESERVATION,
    ANNOTATION_SYSTEM_QOS_RESOURCE,
    decode_node_reservation,
    reserved_cpu_count,
    reserved_cpu_list,
)
from apis.extension.resource_status import CPUSetError, format_cpuset, parse_cpuset
from koordlet.states.cpupools import CPUTopology, SharePool, be_share_pools, share_pools
from koordlet.states.kubeletcpu import KubeletCPUManager, PodCPUAlloc, kubelet_pod_allocs, take_by_topology
from koordlet.states.model import PodMeta

REASON = "InvalidNodeAnnotation"


@dataclass(frozen=True)
class NodeCPUFacts:
    topology: CPUTopology
    kubelet: KubeletCPUManager = field(default_factory=KubeletCPUManager)
    pod_allocs: tuple[PodCPUAlloc, ...] = ()
    reservation: Mapping[str, object] = field(default_factory=dict)  # the NodeReservation JSON as reported
    reserved_cpus: tuple[int, ...] = ()
    system_qos: Mapping[str, object] = field(default_factory=dict)  # the SystemQOSResource JSON as reported
    system_qos_cpuset: str = ""  # the SYSTEM pods' cpuset ("" = no rule)
    system_exclusive: tuple[int, ...] = ()
    share_pools: tuple[SharePool, ...] = ()
    be_share_pools: tuple[SharePool, ...] = ()
    errors: tuple[PlanError, ...] = ()


def node_cpu_facts(topo: CPUTopology, pods: Sequence[PodMeta], node_annotations: Mapping[str, object] | None = None,
                   kubelet: KubeletCPUManager | None = None,
                   cpu_manager_entries: Mapping[str, Sequence[int]] | None = None,
                   node_name: str = "") -> NodeCPUFacts:
    """Everything pure: the sysfs topology, the pods, the Node's annotations, the kubelet CPU manager settings and
    its checkpoint's assignments. Bad input (a malformed annotation) becomes an error and counts as absent."""
    annotations = node_annotations or {}
    kubelet = kubelet or KubeletCPUManager()
    errors: list[PlanError] = []
    allocs: list[PodCPUAlloc] = []
    if kubelet.static and cpu_manager_entries:
        allocs = kubelet_pod_allocs(cpu_manager_entries, pods)
    kubelet_cpus = {c for a in allocs for c in parse_cpuset(a.cpuset)}

    try:
        reservation, reserved = node_reservation(topo, annotations)
    except InvalidInput as e:
        errors.append(PlanError("Node", node_name, f"annotations[{ANNOTATION_NODE_RESERVATION}]", str(e), REASON))
        reservation, reserved = {}, []
    try:
        system_qos, system_cpuset, exclusive = system_qos_resource(annotations)
    except InvalidInput as e:
        errors.append(PlanError("Node", node_name, f"annotations[{ANNOTATION_SYSTEM_QOS_RESOURCE}]", str(e), REASON))
        system_qos, system_cpuset, exclusive = {}, "", []

    skipped: list[tuple[PodMeta, str]] = []
    ls = share_pools(topo, pods, reserved, exclusive, kubelet_cpus, skipped=skipped)
    be = be_share_pools(topo, pods, reserved, exclusive, kubelet_cpus)
    for pod, message in skipped:
        errors.append(PlanError("Pod", f"{pod.namespace}/{pod.name}",
                                "annotations[scheduling.koordinator.sh/resource-status]", message,
                                "InvalidAnnotation", uid=pod.uid))
    return NodeCPUFacts(topo, kubelet, tuple(allocs), reservation, tuple(reserved), system_qos, system_cpuset,
                        tuple(exclusive), tuple(ls), tuple(be), tuple(errors))


def node_reservation(topo: CPUTopology, annotations: Mapping[str, object]) -> tuple[JSON, list[int]]:
    """getNodeReserved: the `node.koordinator.sh/reservation` object as reported (reservedCPUs normalised, or
    ceil(resources.cpu) CPUs taken by topology when no list is given) and the reserved CPUs; InvalidInput when the
    annotation is malformed (an unparsable reservedCPUs list is reported empty, as upstream)."""
    text = annotations.get(ANNOTATION_NODE_RESERVATION)
    if text is None or text == "":
        return {}, []
    if not isinstance(text, str):
        raise InvalidInput(f"{ANNOTATION_NODE_RESERVATION} must be a string")
    reservation = decode_node_reservation(text)
    cpus = reserved_cpu_list(reservation)
    if not reservation.reserved_cpus and (count := reserved_cpu_count(reservation)):
        cpus = take_by_topology(topo, count)
    return replace(reservation, reserved_cpus=format_cpuset(cpus)).to_json(), cpus


def system_qos_resource(annotations: Mapping[str, object]) -> tuple[JSON, str, list[int]]:
    """`node.koordinator.sh/system-qos-resource` {cpuset, cpusetExclusive}: the object as reported, the SYSTEM
    pods' cpuset ("" when none or unparsable) and the CPUs taken out of the share pools (exclusive is the
    default)."""
    text = annotations.get(ANNOTATION_SYSTEM_QOS_RESOURCE)
    if text is None:
        return {}, "", []
    doc = _object(text, ANNOTATION_SYSTEM_QOS_RESOURCE)
    fields = {k.lower(): v for k, v in doc.items()}
    cpuset = fields.get("cpuset") or ""
    exclusive = fields.get("cpusetexclusive")
    if not isinstance(cpuset, str):
        raise InvalidInput("cpuset must be a string")
    if exclusive is not None and not isinstance(exclusive, bool):
        raise InvalidInput("cpusetExclusive must be a boolean")
    out: JSON = {}
    if cpuset:
        out["cpuset"] = cpuset
    if exclusive is not None:
        out["cpusetExclusive"] = exclusive
    try:
        cpus = parse_cpuset(cpuset)
    except CPUSetError as e:
        raise InvalidInput(f"cpuset: {e}") from None
    return out, cpuset, (cpus if exclusive is not False else [])


def _object(text: object, key: str) -> JSON:
    if not isinstance(text, str):
        raise InvalidInput(f"{key} must be a string")
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise InvalidInput(f"invalid JSON: {e}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise InvalidInput("must be a JSON object")
    return doc


def joined(pools: Iterable[SharePool]) -> list[int]:
    """All CPUs of the pools."""
    return sorted({c for p in pools for c in parse_cpuset(p.cpuset)})
