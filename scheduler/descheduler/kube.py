"""What `koord-descheduler run` gives its plugins to act on the cluster (upstream framework.Handle's ClientSet and
EventRecorder, evictions/evictions.go's PodEvictor): the API client, Events on pods, the eviction metric, and the
Eviction API. `simulate` gives none of it (Handle.kube is None there).

An eviction is one POST of a policy/v1 Eviction (upstream sends policy/v1 only since Kubernetes 1.25 removed
v1beta1); the API server enforces PodDisruptionBudgets and answers 429 when one allows no more disruptions. Any
refusal or failure is `descheduler_pods_evicted{result="error"}` and False (the plugin moves on to its next pod; the
pod is not tried again in that round). A success records `success` and a `Descheduled` Event on the pod.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from apis.client.kubeapi import KubeClient
from apis.core.errors import ApiError, KoordletError, NotFound
from apis.core.metatime import rfc3339
from apis.core.objects import JSON
from scheduler.descheduler.metrics import ERROR, SUCCESS, DeschedulerMetrics

log = logging.getLogger("koord-descheduler")
COMPONENT = "koord-descheduler"
EVENTS = "/api/v1/namespaces/{namespace}/events"
EVICTION = "/api/v1/namespaces/{namespace}/pods/{name}/eviction"
DESCHEDULED, EVICTING = "Descheduled", "Evicting"  # upstream's reason and action (evictions.go)


def _meta(obj: JSON) -> JSON:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


class PodEvents:
    """core/v1 Events, as upstream's recorder (controller-runtime's, adapted) writes them; a failed post is logged,
    never fatal."""

    def __init__(self, client: KubeClient, component: str = COMPONENT, clock: Callable[[], float] = time.time
                 ) -> None:
        self.client = client
        self.component = component
        self.host = socket.gethostname()
        self.clock = clock

    def event(self, obj: JSON, kind: str, reason: str, action: str, note: str) -> None:
        meta = _meta(obj)
        namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
        now = self.clock()
        stamp = rfc3339(now)
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{name}.{int(now * 1e9):x}", "namespace": namespace},  # client-go's naming
            "involvedObject": {"apiVersion": str(obj.get("apiVersion") or "v1"), "kind": str(obj.get("kind") or "Pod"),
                               "namespace": namespace, "name": name, "uid": str(meta.get("uid") or ""),
                               "resourceVersion": str(meta.get("resourceVersion") or "")},
            "reason": reason, "message": note[:1024], "type": kind, "action": action,
            "source": {"component": self.component, "host": self.host},
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
            "reportingComponent": self.component, "reportingInstance": self.host,
        }
        try:
            self.client.post(EVENTS.format(namespace=namespace), event)
        except KoordletError as e:
            log.debug("event %s on %s/%s: %s", reason, namespace, name, e)


@dataclass
class Tally:
    """One round's evictions through the API: done, refused by a PodDisruptionBudget (429), failed otherwise."""

    evicted: int = 0
    refused: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


class PodEvictor:
    """Upstream's PodEvictor.Evict less the caps (the framework's limiter has them) and the dry run (the framework
    never calls an evict plugin in a dry run)."""

    def __init__(self, client: KubeClient, events: PodEvents, metrics: DeschedulerMetrics) -> None:
        self.client = client
        self.events = events
        self.metrics = metrics
        self.tally = Tally()

    def evict(self, pod: JSON, plugin: str, reason: str, delete_options: Mapping[str, object] | None = None) -> bool:
        meta, spec = _meta(pod), pod.get("spec") or {}
        namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
        node = str(spec.get("nodeName") or "") if isinstance(spec, dict) else ""
        body: JSON = {"apiVersion": "policy/v1", "kind": "Eviction",
                      "metadata": {"name": name, "namespace": namespace}}
        if delete_options:
            body["deleteOptions"] = dict(delete_options)
        why = None
        try:
            self.client.post(EVICTION.format(namespace=namespace, name=name), body)
        except NotFound as e:
            why = f"pod not found when evicting {name!r}: {e}"
            self.tally.failed.append(f"{namespace}/{name}")
        except ApiError as e:
            if e.status == 429:
                why = f"error when evicting pod (ignoring) {name!r}: {e}"
                self.tally.refused.append(f"{namespace}/{name}")
            else:
                why = str(e)
                self.tally.failed.append(f"{namespace}/{name}")
        except KoordletError as e:
            why = str(e)
            self.tally.failed.append(f"{namespace}/{name}")
        if why is not None:
            log.error("Error evicting pod %s/%s (%s): %s", namespace, name, reason, why)
            self.metrics.pod_evicted(ERROR, plugin, namespace, node)
            return False
        self.tally.evicted += 1
        self.metrics.pod_evicted(SUCCESS, plugin, namespace, node)
        log.info("Evicted pod %s/%s from node %s by %s: %s", namespace, name, node, plugin, reason)
        self.events.event(pod, "Normal", DESCHEDULED, EVICTING, f"pod evicted by {reason}")
        return True


def _nothing() -> list[JSON]:
    return []


def _unversioned() -> int:
    return 0


ObjectListener = Callable[[str, str, object], None]
"""Hears the live view's changes: (op, kind, payload) — op ADDED, MODIFIED or DELETED with the object, or REPLACE
with a list's objects (scheduler.cache's listeners)."""


def _deaf(listener: ObjectListener) -> None:
    """No live view to hear (simulate, tests without a cache)."""


@dataclass
class KubeAccess:
    """Handle.kube in `run`: the API client (for plugins that write their own objects, e.g. PodMigrationJobs), Pod
    Events, the metrics, the Eviction API, and `objects()`: a private copy of the live view now (every object `run`
    lists and watches, kind filled in), for a controller working between rounds; `version()` changes whenever that
    view does (a controller rebuilds what it derives from it only then); `listen(listener)` has a controller hear
    each change of the view as the watches see it (upstream's informer event handlers)."""

    client: KubeClient
    events: PodEvents
    metrics: DeschedulerMetrics
    evictor: PodEvictor
    objects: Callable[[], list[JSON]] = _nothing
    version: Callable[[], int] = _unversioned
    listen: Callable[[ObjectListener], None] = _deaf

    @classmethod
    def of(cls, client: KubeClient, metrics: DeschedulerMetrics | None = None,
           clock: Callable[[], float] = time.time, objects: Callable[[], list[JSON]] = _nothing,
           version: Callable[[], int] = _unversioned, listen: Callable[[ObjectListener], None] = _deaf
           ) -> KubeAccess:
        events = PodEvents(client, clock=clock)
        metrics = metrics if metrics is not None else DeschedulerMetrics()
        return cls(client, events, metrics, PodEvictor(client, events, metrics), objects, version, listen)
