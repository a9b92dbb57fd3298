"""`koordlet sched-latency`: sample every pod's run-queue waits over a window, one JSON object per pod."""

from __future__ import annotations

import time
from typing import Any

from apis.core.objects import JSON
from koordlet.schedlat.collector import PodLatency, SchedLatency
from koordlet.schedlat.hist import quantile

LOAD_TIMEOUT = 120.0  # seconds the program may take to compile and attach before the command gives up on it


def pod_row(row: PodLatency) -> JSON:
    pod, tick = row.pod, row.tick
    hist = tick.hist
    return {
        "namespace": pod.namespace, "name": pod.name, "uid": pod.uid, "qosClass": pod.koord_qos or pod.k8s_qos,
        "source": row.source, "count": tick.count, "sumSeconds": tick.sum_ns / 1e9,
        "p50Seconds": quantile(hist, 0.5) if hist is not None else None,
        "p99Seconds": quantile(hist, 0.99) if hist is not None else None,
    }


def sample(schedlat: SchedLatency, pods: list[Any], window: float) -> list[JSON]:
    """Waits that ended between two reads `window` seconds apart (the first read is the baseline)."""
    schedlat.wait_ready(LOAD_TIMEOUT)
    schedlat.collect(pods, int(time.time() * 1000), force=True)
    time.sleep(max(window, 0.0))
    schedlat.collect(pods, int(time.time() * 1000), force=True)
    return [pod_row(r) for r in schedlat.latest]
