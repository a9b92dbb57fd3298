"""kube-scheduler's NodePorts: a pod asking for host ports goes where no pod holds the same (IP, protocol, port)."""

from __future__ import annotations

import numpy as np

from apis.core.objects import JSON
from scheduler.cluster import Cluster, NodeInfo
from scheduler.nodeindex import BoolArray, NodeIndex
from scheduler.plugins.nodefacts import NodeFacts

REASON = "node(s) didn't have free ports for the requested pod ports"
WILDCARD = "0.0.0.0"
HostPort = tuple[str, str, int]  # (host IP, protocol, port)


def host_ports(pod: JSON) -> frozenset[HostPort]:
    """The host ports of the pod's containers and restartable (sidecar) init containers; IP defaults to 0.0.0.0,
    protocol to TCP (kube's getContainerPorts / HostPortInfo sanitising)."""
    raw_spec = pod.get("spec")
    spec: JSON = raw_spec if isinstance(raw_spec, dict) else {}
    containers = [c for c in spec.get("containers") or [] if isinstance(c, dict)]
    containers += [c for c in spec.get("initContainers") or [] if isinstance(c, dict)
                   and c.get("restartPolicy") == "Always"]
    out: set[HostPort] = set()
    for c in containers:
        for p in c.get("ports") or []:
            if not isinstance(p, dict):
                continue
            port = p.get("hostPort")
            if isinstance(port, int) and not isinstance(port, bool) and port > 0:
                out.add((str(p.get("hostIP") or WILDCARD), str(p.get("protocol") or "TCP"), port))
    return frozenset(out)


def _used(node: NodeInfo) -> frozenset[HostPort]:
    used: set[HostPort] = set()
    for pod in node.pods.values():
        used |= host_ports(pod)
    return frozenset(used)


def conflicts(wanted: frozenset[HostPort], used: frozenset[HostPort]) -> bool:
    """HostPortInfo.CheckConflict: the same protocol and port on the same IP, or where either side is 0.0.0.0."""
    for ip, proto, port in wanted:
        for uip, uproto, uport in used:
            if port == uport and proto == uproto and (ip == uip or WILDCARD in (ip, uip)):
                return True
    return False


class NodePorts:
    name = "NodePorts"

    def __init__(self) -> None:
        self._used = NodeFacts(_used)

    def quiet(self, pod: JSON, index: NodeIndex) -> int | None:
        """A pod asking no host port passes every node (scheduler.interfaces' QuietPlugin)."""
        spec = pod.get("spec")
        if type(spec) is dict and not spec.get("initContainers"):
            for c in spec.get("containers") or ():
                if type(c) is not dict or c.get("ports"):
                    break
            else:
                return 0  # no port listed at all (host_ports' answer, without building it)
        return None if host_ports(pod) else 0

    def filter(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> str | None:
        wanted = host_ports(pod)
        return REASON if wanted and conflicts(wanted, _used(node)) else None

    def prefilter_vector(self, pod: JSON, index: NodeIndex) -> BoolArray | None:
        wanted = host_ports(pod)
        if not wanted:
            return None
        used = self._used.get(index)
        return np.fromiter((not (u and conflicts(wanted, u)) for u in used), dtype=np.bool_, count=len(used))
