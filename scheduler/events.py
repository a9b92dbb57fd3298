"""Events on pods as kube-scheduler records them (events.k8s.io/v1, `kubectl describe pod` shows them): `Scheduled`
when a pod is bound, `FailedScheduling` when it is not, with the reason. kube-scheduler's recorder is the profile's
schedulerName (reportingController) on this host (reportingInstance); a failed Event post is logged, never fatal."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable

from apis.client.kubeapi import KubeClient
from apis.core.errors import KoordletError
from apis.core.metatime import micro_time
from apis.core.objects import JSON

log = logging.getLogger(__name__)
EVENTS = "/apis/events.k8s.io/v1/namespaces/{namespace}/events"
SCHEDULED, FAILED_SCHEDULING = "Scheduled", "FailedScheduling"  # kube-scheduler's reasons (schedule_one.go)
BINDING, SCHEDULING = "Binding", "Scheduling"  # its actions


class SchedulingEvents:
    def __init__(self, client: KubeClient, scheduler_name: str, clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.controller = scheduler_name
        self.instance = f"{scheduler_name}-{socket.gethostname()}"
        self.clock = clock

    def scheduled(self, pod: JSON, node: str) -> None:
        meta = pod.get("metadata") or {}
        note = f"Successfully assigned {meta.get('namespace', '')}/{meta.get('name', '')} to {node}"
        self._post(pod, "Normal", SCHEDULED, BINDING, note)

    def failed(self, pod: JSON, reason: str) -> None:
        self._post(pod, "Warning", FAILED_SCHEDULING, SCHEDULING, reason)

    def _post(self, pod: JSON, kind: str, reason: str, action: str, note: str) -> None:
        meta = pod.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
        now = self.clock()
        event = {
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            # client-go's recorder names an Event <object>.<nanoseconds in hex>
            "metadata": {"name": f"{name}.{int(now * 1e9):x}", "namespace": namespace},
            "eventTime": micro_time(now), "reportingController": self.controller,
            "reportingInstance": self.instance, "action": action, "reason": reason, "type": kind,
            "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": name,
                          "uid": str(meta.get("uid") or "")},
            "note": note[:1024],  # the API server refuses a longer note
        }
        try:
            self.client.post(EVENTS.format(namespace=namespace), event)
        except KoordletError as e:
            log.debug("event %s on %s/%s: %s", reason, namespace, name, e)
