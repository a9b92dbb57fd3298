"""Benchmarks: `make bench` prints tables of the agent's cost against same-run baselines."""
