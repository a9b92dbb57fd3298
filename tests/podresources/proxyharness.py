"""The proxy in front of a fake kubelet, in-process: pods from manifests, a pod sync the proxy can ask for, the
problems it reported, its metrics."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from koordlet.health import Health
from koordlet.host.driver import CgroupDriver
from koordlet.pb import podresources_v1_pb2 as v1
from koordlet.podresources.kubelet import KubeletClient
from koordlet.podresources.merge import Problem
from koordlet.podresources.metrics import ProxyMetrics
from koordlet.podresources.ratelimit import TokenBucket
from koordlet.podresources.server import ProxyServer
from koordlet.states.model import PodMeta
from koordlet.states.pods import pod_meta

from fakekubelet import FakeKubelet, entry


def metas(manifests: list[dict[str, Any]]) -> list[PodMeta]:
    return [pod_meta(m, CgroupDriver.CGROUPFS, Health()) for m in manifests]


@dataclass
class Harness:
    root: str
    kubelet: FakeKubelet
    server: ProxyServer
    registry: CollectorRegistry
    source: list[dict[str, Any]]  # what a pod sync would read
    pods: list[PodMeta] = field(default_factory=list)  # what the agent knows now
    problems: list[Problem] = field(default_factory=list)
    syncs: int = 0

    @property
    def socket(self) -> str:
        return self.server.socket_path

    def metrics(self) -> str:
        return generate_latest(self.registry).decode()

    async def refresh(self) -> None:
        self.syncs += 1
        await asyncio.sleep(0.001)
        self.pods = metas(self.source)

    def kubelet_lists(self, *names: str, namespace: str = "default") -> None:
        self.kubelet.set_response(v1.ListPodResourcesResponse(pod_resources=[entry(n, namespace) for n in names]))


@asynccontextmanager
async def proxy(root: str, manifests: list[dict[str, Any]], response: v1.ListPodResourcesResponse | None = None, *,
                kubelet_up: bool = True, known: bool = True, max_age: float = 0.1, qps: float = 0.0,
                burst: int = 10, timeout: float = 2.0, check_every: float = 5.0) -> AsyncIterator[Harness]:
    """The proxy on <root>/proxy/kubelet.sock before a fake kubelet on <root>/kubelet.sock listing `response`
    (default: one entry per manifest). `known=False`: the agent has not synced the pods yet."""
    if response is None:
        response = v1.ListPodResourcesResponse(pod_resources=[
            entry(m["metadata"]["name"], m["metadata"]["namespace"]) for m in manifests])
    kubelet = FakeKubelet(os.path.join(root, "kubelet.sock"), response)
    if kubelet_up:
        await kubelet.start()
    registry = CollectorRegistry()
    metrics = ProxyMetrics(registry)
    h: Harness
    client = KubeletClient(kubelet.socket_path, timeout=timeout, max_age=max_age, metrics=metrics)
    server = ProxyServer(os.path.join(root, "proxy", "kubelet.sock"), client, lambda: h.pods,
                         limiter=TokenBucket(qps, burst), metrics=metrics,
                         report=lambda ps: h.problems.extend(ps), refresh_pods=lambda: h.refresh())
    h = Harness(root, kubelet, server, registry, list(manifests), metas(manifests) if known else [])
    stop = asyncio.Event()
    task = asyncio.ensure_future(server.run(stop, check_every=check_every))
    try:
        for _ in range(500):
            if server.socket_present:
                break
            await asyncio.sleep(0.01)
        yield h
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
        await kubelet.stop()
