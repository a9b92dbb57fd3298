"""The node's NodeResourceTopology object: zones per NUMA node, the CPU annotations, and when it must be rewritten.

Upstream: pkg/koordlet/statesinformer/impl/states_noderesourcetopology.go (calcNodeTopo, calTopologyZoneList,
applyNUMAReservationToZoneResources, nodeTopologyStatus.isChanged/updateNRT, newNodeTopo), pkg/util/resource.go
(MergeZoneList, TrimDifferentZone, IsZoneListResourceEqual). Spec: agent-states-metrics-devices.md §2.6.

Decisions (docs/decisions.md, "NodeResourceTopology"):
- Zones: as upstream, our zones replace the managed resources of zones of the same name and other resources of those
  zones are kept. Unlike upstream (TrimDifferentZone), zones another writer named otherwise (not `node-<i>`) are
  kept and never a reason to write (issue #12); a `node-<i>` zone of a NUMA node that is gone is dropped, as
  upstream. Upstream's merge also rewrites
  every resource's capacity and available to its allocatable; we keep the computed capacity (it differs only with
  NUMA reservation) and a foreign resource's three values as they were.
- A malformed Node annotation (reservation, system QoS) counts as absent and is reported, where upstream skips the
  whole report; so does an unknown kubelet configuration (the policy annotation is then `{}`).
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from apis.core.errors import InvalidInput
from apis.core.gojson import marshal
from apis.core.objects import JSON, JSONMapping
from apis.core.quantity import format_bytes, format_milli, parse_quantity
from apis.extension.node import ANNOTATION_NODE_RESERVATION, ANNOTATION_SYSTEM_QOS_RESOURCE
from apis.extension.numa_aware import (
    ANNOTATION_BE_CPU_SHARED_POOLS,
    ANNOTATION_CPU_BASIC_INFO,
    ANNOTATION_CPU_SHARED_POOLS,
    ANNOTATION_CPU_TOPOLOGY,
    ANNOTATION_KUBELET_CPU_MANAGER_POLICY,
    ANNOTATION_POD_CPU_ALLOCS,
    LABEL_ENABLE_NUMA_RESERVATION,
)
from apis.extension.resources import RESOURCE_GPU
from koordlet.states.cpuinfo import CPUBasicInfo, NumaMemory
from koordlet.states.cpupools import encode_pools
from koordlet.states.kubeletcpu import encode_pod_allocs
from koordlet.states.nodecpu import NodeCPUFacts

GROUP = "topology.node.k8s.io"
API_VERSION = "topology.node.k8s.io/v1alpha1"
KIND = "NodeResourceTopology"
PLURAL = "noderesourcetopologies"
ZONE_TYPE = "Node"

LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"

MANAGED_RESOURCES = ("cpu", "memory", RESOURCE_GPU, "hugepages-2Mi", "hugepages-1Gi")
MANAGED_ANNOTATIONS = (
    ANNOTATION_CPU_BASIC_INFO, ANNOTATION_KUBELET_CPU_MANAGER_POLICY, ANNOTATION_CPU_SHARED_POOLS,
    ANNOTATION_BE_CPU_SHARED_POOLS, ANNOTATION_CPU_TOPOLOGY, ANNOTATION_POD_CPU_ALLOCS, ANNOTATION_NODE_RESERVATION,
    ANNOTATION_SYSTEM_QOS_RESOURCE,
)
MANAGED_LABELS = (LABEL_ENABLE_NUMA_RESERVATION,)


@dataclass(frozen=True)
class TopologyStatus:
    """nodeTopologyStatus: what koordlet owns in the object."""

    annotations: Mapping[str, str]
    labels: Mapping[str, str] = field(default_factory=dict)
    policy: str = "None"
    zones: Sequence[JSONMapping] = ()


def topology_status(facts: NodeCPUFacts, basic: CPUBasicInfo, memory: Mapping[int, NumaMemory],
                    node: JSONMapping | None = None, *, hugepage_report: bool = False) -> TopologyStatus:
    """calcNodeTopo from the node's CPU facts, its NUMA memory and the Node object (labels, capacity)."""
    labels = _meta(node, "labels")
    annotations = {
        ANNOTATION_CPU_BASIC_INFO: marshal(basic.to_json()),
        ANNOTATION_CPU_TOPOLOGY: marshal(facts.topology.to_json()),
        ANNOTATION_CPU_SHARED_POOLS: encode_pools(facts.share_pools),
        ANNOTATION_KUBELET_CPU_MANAGER_POLICY: marshal(facts.kubelet.cpu_manager_policy.to_json()),
        ANNOTATION_BE_CPU_SHARED_POOLS: encode_pools(facts.be_share_pools),
        ANNOTATION_POD_CPU_ALLOCS: encode_pod_allocs(facts.pod_allocs),
        ANNOTATION_NODE_RESERVATION: marshal(dict(facts.reservation)),
        ANNOTATION_SYSTEM_QOS_RESOURCE: marshal(dict(facts.system_qos)),
    }
    out_labels = {}
    if labels.get(LABEL_ENABLE_NUMA_RESERVATION):
        out_labels[LABEL_ENABLE_NUMA_RESERVATION] = str(labels[LABEL_ENABLE_NUMA_RESERVATION])
    zones = zone_list(facts, memory, node, hugepage_report=hugepage_report)
    return TopologyStatus(annotations, out_labels, facts.kubelet.topology_policy if facts.kubelet.known else "None",
                          zones)


def zone_list(facts: NodeCPUFacts, memory: Mapping[int, NumaMemory], node: JSONMapping | None = None, *,
              hugepage_report: bool = False) -> list[JSON]:
    """calTopologyZoneList: zone `node-<i>` per NUMA node: cpu (its logical CPUs), memory (MemTotal minus the
    hugepages), hugepages-2Mi/1Gi (0 unless gate HugePageReport); with the Node label
    `node.koordinator.sh/enable-numa-reservation=true`, each zone's allocatable cpu/memory lose
    ceil((capacity - allocatable of the Node) / zones). InvalidInput when sysfs NUMA nodes and the CPUs' nodes
    disagree in number (upstream: "NUMA node number not matched")."""
    by_node = facts.topology.cpus_by_node()
    count = len(memory)
    if len(by_node) != count:
        raise InvalidInput(f"NUMA node number not matched: {len(by_node)} with CPUs, {count} in sysfs")
    per_zone: dict[str, Decimal] = {}
    if _meta(node, "labels").get(LABEL_ENABLE_NUMA_RESERVATION) == "true" and count > 0:
        per_zone = _numa_reservation(node, count)
    zones = []
    for i in range(count):
        mem = memory.get(i, NumaMemory(0))
        h2 = mem.hugepages_2m if hugepage_report else 0
        h1 = mem.hugepages_1g if hugepage_report else 0
        capacity = {"cpu": Decimal(len(by_node.get(i, ()))), "memory": Decimal(mem.total - h2 - h1),
                    "hugepages-2Mi": Decimal(h2), "hugepages-1Gi": Decimal(h1)}
        resources = []
        for name in sorted(capacity):
            cap = capacity[name]
            alloc = max(cap - per_zone[name], Decimal(0)) if name in per_zone else cap
            resources.append({"name": name, "capacity": _fmt(name, cap), "allocatable": _fmt(name, alloc),
                              "available": _fmt(name, alloc)})
        zones.append({"name": f"node-{i}", "type": ZONE_TYPE, "resources": resources})
    return sorted(zones, key=lambda z: z["name"])


def _numa_reservation(node: JSONMapping | None, count: int) -> dict[str, Decimal]:
    status = (node or {}).get("status") or {}
    capacity, allocatable = status.get("capacity") or {}, status.get("allocatable") or {}
    out: dict[str, Decimal] = {}
    for name in ("cpu", "memory"):
        if name not in capacity or name not in allocatable:
            continue
        try:
            reserved = parse_quantity(str(capacity[name])) - parse_quantity(str(allocatable[name]))
        except InvalidInput:
            continue
        if reserved <= 0:
            continue
        milli = math.ceil(reserved * 1000)  # MilliValue
        per = Decimal((milli + count - 1) // count) / 1000  # divideResourceByCount: ceiling division
        if per > 0:
            out[name] = per
    return out


def _fmt(name: str, value: Decimal) -> str:
    """cpu is DecimalSI, memory and hugepages BinarySI (resource.NewQuantity formats)."""
    if name == "cpu" or value != value.to_integral_value():
        return format_milli(int(value * 1000))
    return format_bytes(int(value))


def _meta(obj: JSONMapping | None, key: str) -> JSONMapping:
    meta = (obj or {}).get("metadata") or {}
    value = meta.get(key) if isinstance(meta, dict) else None
    return value if isinstance(value, dict) else {}


def new_object(node_name: str, node_uid: str | None) -> JSON:
    """newNodeTopo: what is created when the node has none."""
    meta: JSON = {"name": node_name, "labels": {LABEL_MANAGED_BY: "Koordinator"}}
    if node_uid:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid,
                                    "controller": True, "blockOwnerDeletion": True}]
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta, "topologyPolicies": ["None"], "zones": []}


def updated(existing: JSONMapping, status: TopologyStatus) -> JSON:
    """updateNRT: our annotations and labels over the existing ones, our policy, our zones merged in."""
    obj = copy.deepcopy(dict(existing))
    obj.setdefault("apiVersion", API_VERSION)
    obj.setdefault("kind", KIND)
    meta = obj.setdefault("metadata", {})
    meta["annotations"] = {**(meta.get("annotations") or {}), **status.annotations}
    meta["labels"] = {**(meta.get("labels") or {}), **status.labels}
    if not meta["labels"]:
        del meta["labels"]
    obj["topologyPolicies"] = [status.policy]
    obj["zones"] = merge_zones(obj.get("zones") or [], status.zones)
    return obj


_OUR_ZONE = re.compile(r"node-[0-9]+")


def ours(zone: object) -> bool:
    """A zone this agent writes (`node-<i>`), as opposed to another writer's."""
    return isinstance(zone, dict) and isinstance(zone.get("name"), str) and bool(_OUR_ZONE.fullmatch(zone["name"]))


def merge_zones(old: Sequence[JSONMapping], new: Sequence[JSONMapping]) -> list[JSON]:
    """Zones named as ours: our resources replace theirs, other resources stay; our names of NUMA nodes that are
    gone go; zones other writers named otherwise stay as they are."""
    old_by_name = {z.get("name"): z for z in old if isinstance(z, dict)}
    out = [copy.deepcopy(dict(z)) for z in old if isinstance(z, dict) and isinstance(z.get("name"), str)
           and not ours(z)]
    for zone in new:
        merged = {r["name"]: r for r in zone["resources"]}
        for r in (old_by_name.get(zone["name"]) or {}).get("resources") or []:
            if isinstance(r, dict) and isinstance(r.get("name"), str) and r["name"] not in merged:
                merged[r["name"]] = copy.deepcopy(r)
        out.append({**copy.deepcopy(dict(zone)), "resources": [merged[k] for k in sorted(merged)]})
    return sorted(out, key=lambda z: z["name"])


def changed(old: JSONMapping | None, status: TopologyStatus) -> str:
    """isChanged: why the object must be written ("" when it need not be)."""
    if old is None or not isinstance((old.get("metadata") or {}).get("annotations"), dict):
        return "metadata changed"
    if old.get("topologyPolicies") != [status.policy]:
        return "TopologyPolicies changed"
    annotations = old["metadata"]["annotations"]
    for key in MANAGED_ANNOTATIONS:
        have, want = annotations.get(key), status.annotations.get(key)
        if have is None and want is None:
            continue
        if (have is None) != (want is None) or _json(have) != _json(want):
            return f"annotations changed, key {key}"
    labels = (old.get("metadata") or {}).get("labels") or {}
    for key in MANAGED_LABELS:
        if labels.get(key, "") != status.labels.get(key, ""):
            return f"labels changed, key {key}"
    zones = [z for z in old.get("zones") or [] if ours(z)]  # another writer's zones are no reason to write
    if len(zones) != len(status.zones):
        return "Zones changed, item: zones number"
    for i, (a, b) in enumerate(zip(zones, status.zones, strict=True)):
        if not isinstance(a, dict) or a.get("name") != b["name"]:
            return f"Zones changed, item: zone {i} name"
        if a.get("type") != b["type"]:
            return f"Zones changed, item: zone {i} type"
    if not _same_managed_resources(zones, status.zones):
        return "Zones changed, item: resources"
    return ""


def _json(text: Any) -> Any:
    """JSON-semantic comparison of annotation values: a value that is not JSON compares as its text."""
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return ("not-json", text)


def _same_managed_resources(a: Sequence[Any], b: Sequence[JSONMapping]) -> bool:
    """IsZoneListResourceEqual on the managed resources' allocatable, numerically."""
    def table(zones: Sequence[Any]) -> dict[Any, dict[str, Decimal | None]]:
        out: dict[Any, dict[str, Decimal | None]] = {}
        for z in zones:
            if not isinstance(z, dict):
                continue
            res = out.setdefault(z.get("name"), {})
            for r in z.get("resources") or []:
                if isinstance(r, dict) and r.get("name") in MANAGED_RESOURCES:
                    try:
                        res[r["name"]] = parse_quantity(str(r.get("allocatable")))
                    except InvalidInput:
                        res[r["name"]] = None
        return out

    ta, tb = table(a), table(b)
    for name in set(ta) | set(tb):
        ra, rb = ta.get(name), tb.get(name)
        if ra is None or rb is None:
            if ra or rb:
                return False
            continue
        if ra != rb:
            return False
    return True
