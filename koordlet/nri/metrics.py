"""What the NRI plugin tells Prometheus: connection state, calls by method and outcome, and hook latency.

`koordlet_runtime_hook_invoked_duration_milliseconds` is upstream's (pkg/koordlet/metrics/runtime_hook.go: labels
node, hook, stage, status; buckets 0.01 ms × 4^k, eight of them); the `koordlet_nri_*` series are ours.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from koordlet.promchildren import LabelledChildren

_HOOK_BUCKETS = tuple(0.01 * 4**k for k in range(8))
_CALL_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1.0, 2.0)


class NriMetrics:
    def __init__(self, node_name: str, registry: CollectorRegistry | None = None) -> None:
        self.node = node_name
        registry = registry if registry is not None else CollectorRegistry(auto_describe=False)
        self.connected = Gauge("koordlet_nri_connected", "1 while koordlet is registered with the runtime's NRI.",
                               registry=registry)
        self.connects = Counter("koordlet_nri_connection_attempts", "Attempts to connect and register with the "
                                "runtime's NRI, by result.", ["result"], registry=registry)
        self.calls = Counter("koordlet_nri_calls", "NRI calls from the runtime, by method and outcome (ok, "
                             "hook_failed: answered without that hook's adjustment, error: answered with none).",
                             ["method", "outcome"], registry=registry)
        self.call_seconds = Histogram("koordlet_nri_call_duration_seconds", "Time koordlet took to answer an NRI "
                                      "call, decode to encode.", ["method"], buckets=_CALL_BUCKETS,
                                      registry=registry)
        self.hook_ms = Histogram("koordlet_runtime_hook_invoked_duration_milliseconds",
                                 "time duration of invocations of runtime hook plugins",
                                 ["node", "hook", "stage", "status"], buckets=_HOOK_BUCKETS, registry=registry)
        self._child = LabelledChildren()  # labels() costs more than the observation on hot paths

    def call(self, method: str, outcome: str, seconds: float) -> None:
        self._child(self.calls, method, outcome).inc()
        self._child(self.call_seconds, method).observe(seconds)

    def hook(self, hook: str, stage: str, ok: bool, seconds: float) -> None:
        self._child(self.hook_ms, self.node, hook, stage, "succeeded" if ok else "failed").observe(seconds * 1000)
