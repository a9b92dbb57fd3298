"""Coscheduling: gangs and gang groups, network-topology-aware placement and job-level preemption planning."""
