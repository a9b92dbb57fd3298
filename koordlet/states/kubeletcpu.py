"""The kubelet CPU manager as koordlet reports and respects it: policy, reserved CPUs, static-policy pods' CPUs.

Upstream: pkg/koordlet/statesinformer/impl/states_noderesourcetopology.go (calcNodeTopo, calGuaranteedCpu,
getTopologyPolicy), pkg/koordlet/util/kubelet/kubelet.go (GetStaticCPUManagerPolicyReservedCPUs,
GetKubeletReservedOptions, GetCPUManagerStateFilePath), util/kubelet/cpu_assignment.go (TakeByTopology).

Where the kubelet configuration comes from: upstream asks kubelet's `/configz` (unless
`--disable-query-kubelet-config`). In cluster mode we do the same; where no kubelet answers (standalone, or
`/configz` failing) we read kubelet's config file `<var-lib-kubelet-dir>/config.yaml` (kubeadm's location), and with
neither the policy is unknown and reported as `{}` — upstream skips the whole NodeResourceTopology report when
`/configz` fails; we report it without the kubelet's part rather than not at all (docs/decisions.md).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import yaml

from apis.core.errors import HostReadError, InvalidInput
from apis.core.objects import JSON
from apis.core.quantity import parse_quantity
from apis.core.shape import json_object
from apis.extension.numa_aware import (
    KUBELET_CPU_MANAGER_POLICY_NONE,
    KUBELET_CPU_MANAGER_POLICY_STATIC,
    NRT_TOPOLOGY_POLICIES,
    NRT_TOPOLOGY_POLICY_NONE,
    KubeletCPUManagerPolicy,
)
from apis.extension.pod import pod_resource_status
from apis.extension.qos import QOS_BE, QOS_LS, koord_qos_class
from apis.extension.resource_status import CPUSetError, format_cpuset, parse_cpuset
from koordlet.host.files import read_bytes
from koordlet.host.paths import HostPaths
from koordlet.states.cpupools import CPUTopology
from koordlet.states.model import PodMeta

CPU_MANAGER_STATE = "cpu_manager_state"
KUBELET_CONFIG_FILE = "config.yaml"


@dataclass(frozen=True)
class KubeletCPUManager:
    """extension.KubeletCPUManagerPolicy {policy, options, reservedCPUs}, plus the topology manager settings."""

    policy: str = ""
    options: Mapping[str, str] = field(default_factory=dict)
    reserved_cpus: str = ""
    topology_manager_policy: str = ""
    topology_manager_scope: str = ""
    known: bool = False  # a kubelet configuration was found at all

    @property
    def static(self) -> bool:
        return self.policy == KUBELET_CPU_MANAGER_POLICY_STATIC

    @property
    def cpu_manager_policy(self) -> KubeletCPUManagerPolicy:
        """What koordlet reports in the kubelet.koordinator.sh/cpu-manager-policy annotation."""
        return KubeletCPUManagerPolicy(self.policy, self.options, self.reserved_cpus)

    @property
    def topology_policy(self) -> str:
        """getTopologyPolicy: the NRT `topologyPolicies` entry for the kubelet's topology manager policy and scope
        (kubelet's default scope is `container`)."""
        scope = self.topology_manager_scope or "container"
        return NRT_TOPOLOGY_POLICIES.get((scope, self.topology_manager_policy), NRT_TOPOLOGY_POLICY_NONE)


def cpu_manager(config: Mapping[str, object] | None, topo: CPUTopology) -> KubeletCPUManager:
    """The CPU manager settings of a KubeletConfiguration (as `/configz` or the config file holds it).

    InvalidInput when a field the static policy needs is malformed (upstream logs it and reports no reserved CPUs);
    a static policy whose reservation cannot be computed reports `reservedCPUs` empty, as upstream."""
    if config is None:
        return KubeletCPUManager()
    policy = _str(config.get("cpuManagerPolicy"), "cpuManagerPolicy") or KUBELET_CPU_MANAGER_POLICY_NONE
    options = config.get("cpuManagerPolicyOptions") or {}
    if not isinstance(options, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in options.items()):
        raise InvalidInput("cpuManagerPolicyOptions must map strings to strings")
    reserved = ""
    if policy == KUBELET_CPU_MANAGER_POLICY_STATIC:
        reserved = format_cpuset(static_reserved_cpus(config, topo))
    return KubeletCPUManager(policy, dict(options), reserved,
                             _str(config.get("topologyManagerPolicy"), "topologyManagerPolicy"),
                             _str(config.get("topologyManagerScope"), "topologyManagerScope"), known=True)


def static_reserved_cpus(config: Mapping[str, object], topo: CPUTopology) -> list[int]:
    """GetStaticCPUManagerPolicyReservedCPUs: `reservedSystemCPUs` when given, else ceil(kubeReserved.cpu +
    systemReserved.cpu) CPUs taken by topology from an idle node; [] when that is zero (kubelet refuses to start
    then) or the list is not a subset of the online CPUs."""
    listed = _str(config.get("reservedSystemCPUs"), "reservedSystemCPUs")
    if listed:
        try:
            cpus = parse_cpuset(listed)
        except CPUSetError as e:
            raise InvalidInput(f"reservedSystemCPUs: {e}") from None
        return cpus if set(cpus) <= set(topo.ids()) else []
    milli = _reserved_cpu_milli(config.get("kubeReserved")) + _reserved_cpu_milli(config.get("systemReserved"))
    count = math.ceil(milli / 1000)
    return take_by_topology(topo, count) if count > 0 else []


def _reserved_cpu_milli(value: object) -> int:
    if value is None:
        return 0
    if not isinstance(value, dict):
        raise InvalidInput("kubeReserved/systemReserved must be a map")
    q = value.get("cpu")
    if q is None:
        return 0
    try:
        amount = parse_quantity(str(q))
    except InvalidInput as e:
        raise InvalidInput(f"reserved cpu {q!r}: {e}") from None
    if amount < 0:
        raise InvalidInput(f"reserved cpu {q!r} is negative")
    return math.ceil(amount * 1000)  # Quantity.MilliValue rounds up


def take_by_topology(topo: CPUTopology, count: int) -> list[int]:
    """kubelet's packed CPU assignment (takeByTopologyNUMAPacked) on an idle node: whole NUMA nodes, then whole
    sockets, then whole cores, then single CPUs, each in id order, so 2 CPUs of an HT node are one core's two
    threads ({0,4} on 4 cores × 2). Only ever used on an idle node here (reserved CPUs), which keeps it this short."""
    if count <= 0:
        return []
    if count >= len(topo.cpus):
        return topo.ids()
    taken: list[int] = []

    def free(group: Iterable[int]) -> list[int]:
        return [c for c in group if c not in taken]

    for level in ("node", "socket"):
        groups: dict[int, list[int]] = {}
        for info in topo.cpus:
            groups.setdefault(getattr(info, level), []).append(info.id)
        for members in groups.values():
            if len(free(members)) == len(members) and len(members) <= count - len(taken):
                taken += members
    cores = sorted(topo.siblings().values(), key=lambda ids: (_node_of(topo, ids[0]), min(ids)))
    for core in cores:
        if len(free(core)) == len(core) and len(core) <= count - len(taken):
            taken += core
    for core in cores:
        for cpu in free(core):
            if len(taken) < count:
                taken.append(cpu)
    return sorted(taken)


def _node_of(topo: CPUTopology, cpu: int) -> tuple[int, int]:
    info = topo.by_id()[cpu]
    return info.node, info.socket


@dataclass(frozen=True)
class PodCPUAlloc:
    """extension.PodCPUAlloc: a pod whose CPUs the kubelet static policy handed out."""

    uid: str
    cpuset: str
    namespace: str = ""
    name: str = ""
    managed_by_kubelet: bool = True

    def to_json(self) -> JSON:
        out: JSON = {}
        if self.namespace:
            out["namespace"] = self.namespace
        if self.name:
            out["name"] = self.name
        if self.uid:
            out["uid"] = self.uid
        if self.cpuset:
            out["cpuset"] = self.cpuset
        if self.managed_by_kubelet:
            out["managedByKubelet"] = True
        return out


def parse_cpu_manager_state(text: str) -> dict[str, list[int]]:
    """kubelet's checkpoint `cpu_manager_state` → pod UID → the union of its containers' CPUs (non-empty only).

    A container entry that does not parse is left out, as upstream logs and skips it; InvalidInput when the file
    is not a checkpoint at all."""
    doc = json_object(text, CPU_MANAGER_STATE)
    entries = doc.get("entries") or {}
    if not isinstance(entries, dict):
        raise InvalidInput(f"{CPU_MANAGER_STATE}: entries must be an object")
    out: dict[str, list[int]] = {}
    for uid, containers in entries.items():
        if not isinstance(containers, dict):
            continue
        cpus: set[int] = set()
        for value in containers.values():
            if isinstance(value, str):
                try:
                    cpus.update(parse_cpuset(value))
                except CPUSetError:
                    continue
        if cpus:
            out[str(uid)] = sorted(cpus)
    return out


def kubelet_pod_allocs(entries: Mapping[str, Sequence[int]], pods: Iterable[PodMeta]) -> list[PodCPUAlloc]:
    """calGuaranteedCpu: static-policy pods not managed by koordlet (neither LS/BE by label nor with a
    resource-status cpuset), sorted by UID, with namespace/name when the pod is known."""
    by_uid: dict[str, PodMeta] = {}
    managed: set[str] = set()
    for pod in pods:
        by_uid[pod.uid] = pod
        if koord_qos_class(pod.raw) in (QOS_LS, QOS_BE):  # the raw label (PodMeta.koord_qos has a default)
            managed.add(pod.uid)
            continue
        try:
            if pod_resource_status(pod).cpus():
                managed.add(pod.uid)
        except InvalidInput:
            pass
    out = []
    for uid in sorted(entries):
        if uid in managed or not entries[uid]:
            continue
        known = by_uid.get(uid)
        out.append(PodCPUAlloc(uid, format_cpuset(entries[uid]), known.namespace if known else "",
                               known.name if known else ""))
    return out


def encode_pod_allocs(allocs: Sequence[PodCPUAlloc]) -> str:
    """The `node.koordinator.sh/pod-cpu-allocs` value: `null` for none, as Go marshals a nil slice."""
    if not allocs:
        return "null"
    return json.dumps([a.to_json() for a in allocs], separators=(",", ":"))


def read_kubelet_config_file(paths: HostPaths) -> JSON | None:
    """`<var-lib-kubelet>/config.yaml` (a KubeletConfiguration), None when absent; InvalidInput when malformed."""
    path = paths.kubelet(KUBELET_CONFIG_FILE)
    try:
        data = read_bytes(path)
    except HostReadError:
        return None
    try:
        doc = yaml.safe_load(data)
    except yaml.YAMLError as e:
        raise InvalidInput(f"{path}: {e}") from None
    if not isinstance(doc, dict):
        raise InvalidInput(f"{path}: not a KubeletConfiguration")
    return doc


def read_cpu_manager_state(paths: HostPaths) -> dict[str, list[int]]:
    """The static policy's assignments ({} when the checkpoint is absent or empty); InvalidInput when malformed."""
    path = paths.kubelet(CPU_MANAGER_STATE)
    if not os.path.exists(path):
        return {}
    try:
        data = read_bytes(path)
    except HostReadError as e:
        raise InvalidInput(str(e)) from None
    if not data.strip():
        return {}
    return parse_cpu_manager_state(data.decode("utf-8", "replace"))


def _str(value: object, name: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidInput(f"{name} must be a string, not {value!r}")
    return value

