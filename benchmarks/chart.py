"""The configuration Koordinator's own chart (v1.5–v1.7) runs the koordlet with: its gates and the NodeSLO
koord-manager writes from the chart's slo-controller-config, for the benchmarks to run beside today's."""

from __future__ import annotations

import copy
from typing import Any

# The chart's container args (deploy/chart's koordlet DaemonSet, charts/koordinator/templates/koordlet.yaml):
# `-feature-gates=BECPUEvict=true,BEMemoryEvict=true,CgroupReconcile=true,Accelerators=true` over upstream's
# defaults (BECPUSuppress, CPUBurst, RdtResctrl, NodeTopologyReport, GroupIdentity, CPUSetAllocator, BatchResource).
# Its other args (-addr, -cgroup-root-dir, -runtime-hooks-host-endpoint, --logtostderr, --v=4) are the benchmark's
# own ports and dirs, or logging.
GATES = "BECPUEvict=true,BEMemoryEvict=true,CgroupReconcile=true,Accelerators=true"

# The NodeSLO koord-manager v1.5–v1.7 writes from the chart's slo-controller-config (colocation-config
# {"enable": true}, resource-threshold-config {"clusterStrategy": {"enable": true}}), restated in the project's
# spec (dropin.md §d.1 "Inputs under the chart"): CPU suppress at 65 % (cpuset policy), BE memory evict at 70 %,
# BECPUEvict by real limit (a no-op: no satisfaction percents), no QoS class enabled (CgroupReconcile then writes
# the "None" memory values), CPU burst policy none.
_SPEC: dict[str, Any] = {
    "resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 65, "cpuSuppressPolicy": "cpuset",
                                    "memoryEvictThresholdPercent": 70, "cpuEvictPolicy": "evictByRealLimit"},
    "resourceQOSStrategy": {},
    "cpuBurstStrategy": {"policy": "none", "cpuBurstPercent": 1000, "cfsQuotaBurstPercent": 300,
                         "cfsQuotaBurstPeriodSeconds": -1, "sharePoolThresholdPercent": 50},
    "systemStrategy": {"totalNetworkBandwidth": "0"},
}


def nodeslo(node: str) -> dict[str, Any]:
    """The chart's NodeSLO object for `node` (a fresh copy)."""
    return {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "metadata": {"name": node},
            "spec": copy.deepcopy(_SPEC)}
