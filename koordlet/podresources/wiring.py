"""Builds the PodResources proxy from the agent: its pod list, Event recorder, metrics registry and flags."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from apis.core.errors import PlanError
from koordlet.agent import Agent
from koordlet.podresources.kubelet import KubeletClient
from koordlet.podresources.merge import UNKNOWN_TYPE, Problem, field_of
from koordlet.podresources.metrics import ProxyMetrics
from koordlet.podresources.ratelimit import TokenBucket
from koordlet.podresources.server import ProxyServer

log = logging.getLogger(__name__)

REASON = "InvalidDeviceAllocation"


def pod_resources_proxy(agent: Agent, post_event: Any = None,
                        refresh_pods: Callable[[], Awaitable[None]] | None = None) -> ProxyServer:
    """The proxy for `koordlet run`; `refresh_pods` runs one pod sync (the daemon's pods loop, early)."""
    cfg = agent.config
    pr = cfg.pod_resources_proxy
    metrics = ProxyMetrics(agent.metrics.internal)
    kubelet = KubeletClient(pr.kubelet_socket(cfg.paths), timeout=pr.kubelet_timeout, max_age=pr.max_age,
                            metrics=metrics)
    events = agent.qos_manager(post_event=post_event).events

    def report(problems: list[Problem]) -> None:
        errors = []
        for p in problems:
            if p.kind == UNKNOWN_TYPE:  # a type Koordinator knows (fpga) that kubelet has no name for: news, not bad
                agent.health.once(f"podresources/{p.pod}/{p.field}", logging.INFO,
                                  "PodResources proxy: pod %s: %s", p.pod, p.message)
                continue
            errors.append(PlanError("Pod", p.pod, field_of(p), f"PodResources proxy: {p.message}; the pod's "
                                    "kubelet devices are listed without it", REASON, uid=p.uid))
        if errors:  # posting is a blocking HTTP call in a cluster
            asyncio.get_running_loop().run_in_executor(None, _report_all, events.report, errors)

    return ProxyServer(pr.socket(cfg.paths, cfg.host_root), kubelet, lambda: agent.pods.pods,
                       limiter=TokenBucket(pr.qps, pr.burst), metrics=metrics, report=report,
                       refresh_pods=refresh_pods, refresh_timeout=cfg.kubelet_sync_timeout + 1.0)


def _report_all(report: Callable[[PlanError], None], errors: list[PlanError]) -> None:
    for err in errors:
        report(err)
