"""NodeNUMAResource's plugin services (upstream nodenumaresource/plugin_service.go): a node's CPU topology options
and its available CPUs, as JSON in upstream's shapes (TopologyOptions in topology_options.go, CPUTopology and
CPUInfo in cpu_topology.go, AvailableCPUsResponse), read from the plugin's view of the node."""

from __future__ import annotations

from apis.core.errors import InvalidInput
from apis.core.objects import JSON
from apis.core.quantity import format_bytes, format_milli
from apis.core.resources import CPU, MEMORY
from apis.extension.pod import pod_resource_status
from apis.extension.resource_status import format_cpuset
from scheduler.cluster import NodeInfo
from scheduler.numa.plugin import NodeNUMAResource
from scheduler.numa.topology import NodeTopology, node_policy
from scheduler.podview import pod_view


def _cpu_info(topo: NodeTopology, cpu: int, ref_count: int = 0) -> JSON:
    c = topo.cpus[cpu]
    # CPUTopologyBuilder.AddCPUInfo keys cores and NUMA nodes by socket too: socket<<16 | id
    return {"cpuID": c.id, "coreID": c.socket << 16 | c.core, "nodeID": c.socket << 16 | c.node,
            "socketID": c.socket, "refCount": ref_count, "exclusivePolicy": ""}


def cpu_topology(topo: NodeTopology) -> JSON:
    cpus = topo.cpus.values()
    return {"numCPUs": len(topo.cpus), "numCores": len({(c.socket, c.node, c.core) for c in cpus}),
            "numNodes": len({(c.socket, c.node) for c in cpus}), "numSockets": len({c.socket for c in cpus}),
            "cpuDetails": {str(i): _cpu_info(topo, i) for i in sorted(topo.cpus)}}


def cpu_topology_options(plugin: NodeNUMAResource, node: NodeInfo) -> JSON:
    """TopologyOptions of the node: its CPUs, the kubelet's reserved CPUs and policy, the NUMA policy, and each NUMA
    node's allocatable with the reserved CPUs taken out of its cpu (NewTopologyOptions)."""
    topo = plugin.topology(node)
    numa = []
    for i in sorted(topo.numa):
        res = dict(topo.numa[i])
        if res.get(CPU):
            res[CPU] -= 1000 * sum(1 for c in topo.reserved_cpus if c in topo.cpus and topo.cpus[c].node == i)
        numa.append({"node": i, "resources": {r: format_milli(v) if r == CPU else format_bytes(v) if r == MEMORY
                                              else str(v) for r, v in sorted(res.items())}})
    out: JSON = {"cpuTopology": cpu_topology(topo), "reservedCPUs": format_cpuset(topo.reserved_cpus),
                 "maxRefCount": 1, "numaTopologyPolicy": node_policy(node.labels, topo),
                 "numaNodeResources": numa}
    if topo.kubelet_policy:
        out["policy"] = {"policy": topo.kubelet_policy, "options": dict(topo.kubelet_options),
                         "reservedCPUs": format_cpuset(topo.reserved_cpus)}
    return out


def available_cpus(plugin: NodeNUMAResource, node: NodeInfo) -> JSON:
    """AvailableCPUsResponse: the CPUs neither reserved nor held by a pod's resource-status, and the held ones with
    how many pods hold each (cpuManager.GetAvailableCPUs)."""
    topo = plugin.topology(node)
    held: dict[int, int] = {}
    for pod in node.pods.values():
        try:
            cpus = pod_resource_status(pod_view(pod)).cpus()
        except InvalidInput:
            continue
        for c in cpus:
            held[c] = held.get(c, 0) + 1
    free = set(topo.cpus) - set(topo.reserved_cpus) - set(held)
    return {"availableCPUs": format_cpuset(free),
            "allocated": {str(c): _cpu_info(topo, c, n) for c, n in sorted(held.items()) if c in topo.cpus}}
