"""Host access: injectable roots, cgroup backends, cgroup driver and kernel capability probes."""
