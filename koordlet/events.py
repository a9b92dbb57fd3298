"""Kubernetes Events for bad input the agent skipped (a malformed annotation, an impossible NodeSLO value).

In a cluster an Event is posted on the object (core/v1 Event, source component `koordlet`), at most once per
object/reason/message within `dedupe_seconds`; standalone, the skip is logged once and counted (Health.skip), which
a cluster run does as well, so `koordlet_agent_skipped_items_total` tells the same story everywhere.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import replace

from apis.core.errors import ApiError, PlanError
from apis.core.objects import JSON
from koordlet.health import Health

log = logging.getLogger(__name__)

_DEDUPE_SECONDS = 600.0
_MAX_REMEMBERED = 4096


class EventRecorder:
    def __init__(self, health: Health, node_name: str, post: Callable[[str, JSON], object] | None = None,
                 *, dedupe_seconds: float = _DEDUPE_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self.health = health
        self.node_name = node_name
        self._post = post  # KubeClient.post in a cluster; None standalone
        self.dedupe_seconds = dedupe_seconds
        self.clock = clock
        self._sent: dict[tuple[str, str, str], float] = {}
        self.posted = 0

    def report(self, err: PlanError) -> None:
        if not err.name and err.kind in ("NodeSLO", "Node", "Device", "NodeMetric"):
            err = replace(err, name=self.node_name)  # node-scoped objects are named after the node
        self.health.skip(err.kind.lower(), err.reason, err.name, f"{err.field}: {err.message}")
        if self._post is None:
            return
        key = (f"{err.kind}/{err.name}", err.reason, err.message)
        now = self.clock()
        last = self._sent.get(key)
        if last is not None and now - last < self.dedupe_seconds:
            return
        if len(self._sent) >= _MAX_REMEMBERED:
            self._sent = {k: t for k, t in self._sent.items() if now - t < self.dedupe_seconds}
        self._sent[key] = now
        namespace, _, name = err.name.rpartition("/") if err.kind == "Pod" else ("default", "", err.name)
        self.emit(err.kind, namespace, name, err.uid, err.reason, f"{err.field}: {err.message}")

    def emit(self, kind: str, namespace: str, name: str, uid: str | None, reason: str, message: str, *,
             component: str = "koordlet") -> bool:
        """Post one Warning Event on an object, as client-go's recorder would (no dedupe); True when posted.
        Standalone (no API) nothing is posted."""
        if self._post is None:
            return False
        stamp = dt.datetime.now(tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1", "kind": "Event",
            # client-go's recorder names events <object>.<unix nanos in hex>
            "metadata": {"name": f"{name}.{time.time_ns():x}", "namespace": namespace},
            "involvedObject": {"kind": kind, "name": name, "uid": uid,
                               **({"namespace": namespace} if kind == "Pod" else {}),
                               **({"apiVersion": "v1"} if kind in ("Pod", "Node") else
                                  {"apiVersion": "slo.koordinator.sh/v1alpha1"})},
            "reason": reason, "message": message, "type": "Warning",
            "source": {"component": component, "host": self.node_name},
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
            "reportingComponent": component, "reportingInstance": self.node_name,
        }
        try:
            self._post(f"/api/v1/namespaces/{namespace}/events", event)
            self.posted += 1
            return True
        except ApiError as e:
            obj = f"{kind}/{namespace}/{name}" if kind == "Pod" else f"{kind}/{name}"
            self.health.skip("event", "post-failed", obj, str(e))
            return False
