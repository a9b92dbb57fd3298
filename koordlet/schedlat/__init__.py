"""Per-pod CPU run-queue wait (scheduling latency): an eBPF program via bcc, or per-task schedstat as fallback."""
