"""Periodic readers of /proc, sysfs and cgroupfs that turn counters into usage samples."""
