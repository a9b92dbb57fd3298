"""Descheduling rounds over a directory of objects (`simulate`); the in-cluster loop comes with `run`."""
