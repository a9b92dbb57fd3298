"""NUMA-aligned placement: upstream's NodeNUMAResource plugin and the scheduler's topology manager."""
