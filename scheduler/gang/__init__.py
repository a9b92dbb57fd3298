"""Coscheduling: gangs and gang groups, network-topology-aware placement and job-level preemption planning."""

from scheduler.gang.model import Gang, GangGroup, collect_gangs, gang_id_of, pod_priority
from scheduler.gang.planner import plan_jobs
from scheduler.gang.topology import NetworkTopologySpec, TopologyTree, build_tree

__all__ = ["Gang", "GangGroup", "NetworkTopologySpec", "TopologyTree", "build_tree", "collect_gangs", "gang_id_of",
           "plan_jobs", "pod_priority"]
