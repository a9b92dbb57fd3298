"""What the PodResources proxy tells Prometheus: requests by method and code, kubelet latency, List cache use.

Upstream koordlet exports nothing for its proxy; these `koordlet_pod_resources_proxy_*` series are ours.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from koordlet.promchildren import LabelledChildren

_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 2.0, 10.0)


class ProxyMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        registry = registry if registry is not None else CollectorRegistry(auto_describe=False)
        self.serving = Gauge("koordlet_pod_resources_proxy_serving",
                             "1 while the PodResources proxy listens on its socket.", registry=registry)
        self.requests = Counter("koordlet_pod_resources_proxy_requests",
                                "PodResources proxy requests, by method and gRPC status code.", ["method", "code"],
                                registry=registry)
        self.request_seconds = Histogram("koordlet_pod_resources_proxy_request_duration_seconds",
                                         "Time the proxy took to answer, by method.", ["method"], buckets=_BUCKETS,
                                         registry=registry)
        self.upstream_seconds = Histogram("koordlet_pod_resources_proxy_kubelet_request_duration_seconds",
                                          "Calls the proxy made to kubelet's PodResources socket, by method and "
                                          "gRPC status code.", ["method", "code"], buckets=_BUCKETS,
                                          registry=registry)
        self.list_cache = Counter("koordlet_pod_resources_proxy_list_cache",
                                  "List requests by how kubelet's answer was had: hit (a recent answer reused), "
                                  "coalesced (shared a call already under way), miss (a call of its own).",
                                  ["result"], registry=registry)
        self._child = LabelledChildren()

    def request(self, method: str, code: str, seconds: float) -> None:
        self._child(self.requests, method, code).inc()
        self._child(self.request_seconds, method).observe(seconds)

    def upstream(self, method: str, code: str, seconds: float) -> None:
        self._child(self.upstream_seconds, method, code).observe(seconds)

    def cache(self, result: str) -> None:
        self._child(self.list_cache, result).inc()
