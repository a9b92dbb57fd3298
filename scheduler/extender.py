"""kube-scheduler extender HTTP API (filter, prioritize, bind) over the slim Scheduler and a listed cluster."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from apis.client.backoff import REFLECTOR, BackoffPolicy
from apis.client.kubeapi import KubeClient
from apis.client.listwatch import REAL_CLOCK, Clock
from apis.core.errors import ApiError, InvalidInput, KoordletError, NotFound
from apis.core.objects import JSON
from apis.core.shape import shape_problem
from apis.extension.device_allocated import ANNOTATION_DEVICE_ALLOCATED
from scheduler import extender_reservation as served
from scheduler import malformed
from scheduler.binder import Binder, Member, pod_path
from scheduler.cache import WATCH_TIMEOUT, ClusterCache, Source, list_source
from scheduler.cluster import (
    Cluster,
    NodeInfo,
    bound_pod,
    build_cluster,
    holds_resources,
    is_active,
    is_reserve_pod,
    key,
    node_allocatable,
    pod_problem,
    pod_requests,
)
from scheduler.elasticquota.plugin import NAME as ELASTIC_QUOTA
from scheduler.elasticquota.plugin import ElasticQuota
from scheduler.framework import Assumed, Scheduler
from scheduler.interfaces import Unschedulable
from scheduler.reservation.plugin import NAME as RESERVATION_PLUGIN
from scheduler.services import DiagnosisAPI, send
from scheduler.tlsserve import TLSHTTPServer

log = logging.getLogger(__name__)

MAX_EXTENDER_PRIORITY = 10  # k8s.io/kube-scheduler/extender/v1 MaxExtenderPriority
PLUGIN_MAX_SCORE = 100
MAX_BODY = 64 << 20

# Every collection the extender keeps, list + watch (scheduler.cache). Pods: the assigned ones (the field selector
# is only a hint: the server may ignore it).
SOURCES: tuple[Source, ...] = (
    Source("/api/v1/nodes", "Node"),
    Source("/api/v1/pods", "Pod", "spec.nodeName!=", assigned_only=True),
    Source("/apis/scheduling.koordinator.sh/v1alpha1/devices", "Device", optional=True),
    Source("/apis/slo.koordinator.sh/v1alpha1/nodemetrics", "NodeMetric", optional=True),
    Source("/apis/topology.node.k8s.io/v1alpha1/noderesourcetopologies", "NodeResourceTopology", optional=True),
    Source("/apis/scheduling.koordinator.sh/v1alpha1/reservations", "Reservation", optional=True),
    Source("/apis/scheduling.sigs.k8s.io/v1alpha1/elasticquotas", "ElasticQuota", optional=True),
)
# Cluster-scoped objects named after their Node, kept on NodeInfo under this attribute.
NODE_ATTRS = {"Device": "device", "NodeMetric": "nodemetric", "NodeResourceTopology": "nrt"}
# Listed on every (re)load, not watched: DeviceShare's GPU shared resource templates live in a ConfigMap there.
CONFIGMAPS = Source("/api/v1/namespaces/koordinator-system/configmaps", "ConfigMap", optional=True)


class BadRequest(Exception):
    """The request body is not what kube-scheduler sends (answered with HTTP 400)."""


class ClusterSource:
    """The extender's collections (SOURCES, kept by a ClusterCache) listed into a Cluster at once (a resync)."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self.cache = ClusterCache(client, SOURCES)

    def objects(self) -> list[JSON]:
        out: list[JSON] = []
        for source in SOURCES:
            try:
                items, _ = list_source(self.client, source)
            except NotFound:
                if not source.optional:
                    raise
                log.warning("%s is not served (CRD not installed?); continuing without %s objects", source.path,
                            source.kind)
                continue
            out.extend(items)
        with contextlib.suppress(NotFound):  # no such namespace: no templates
            out.extend(list_source(self.client, CONFIGMAPS)[0])
        return out

    def load(self) -> Cluster:
        return build_cluster(self.objects())


def _name(obj: JSON) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _pod_signature(pod: JSON) -> tuple[object, ...]:
    """What the scheduler accounts of an assigned pod: a change here replaces the pod on its node."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    return (sorted(pod_requests(pod).items()), ((meta.get("annotations") or {}).get(ANNOTATION_DEVICE_ALLOCATED)),
            spec.get("priority"), spec.get("priorityClassName"))


@dataclass
class _Bound:
    """A pod this extender bound (or is binding), kept on its node until a watch or list shows it there."""

    pod: JSON
    node: str
    bound_at: float = math.inf  # monotonic; inf while the bind is in flight


def _require_str(args: JSON, field: str) -> str:
    value = args.get(field)
    if not isinstance(value, str) or not value:
        raise BadRequest(f"{field} must be a non-empty string")
    return value


def _node_names(args: JSON) -> tuple[list[str], list[JSON] | None]:
    """NodeNames (nodeCacheCapable) or the names of Nodes.items, plus the node objects in the latter case."""
    names = args.get("NodeNames")
    if names is not None:
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise BadRequest("NodeNames must be a list of strings")
        return list(names), None
    nodes = args.get("Nodes")
    if isinstance(nodes, dict) and isinstance(nodes.get("items"), list):
        items = nodes["items"]
        if not all(isinstance(n, dict) and shape_problem(n) is None for n in items):
            raise BadRequest("every Nodes.items entry must be a Node with metadata.name")
        return [_name(n) for n in items], items
    raise BadRequest("one of NodeNames (nodeCacheCapable) or Nodes.items is required")


def _pod(args: JSON) -> JSON:
    pod = args.get("Pod")
    if not isinstance(pod, dict) or not isinstance(pod.get("metadata"), dict):
        raise BadRequest("Pod must be a Pod object with metadata")
    why = pod_problem(pod)
    if why is not None:
        raise BadRequest(f"Pod: {why}")
    return pod


class Extender:
    """The three verbs on one Scheduler; `lock` guards the scheduler state, `bind_lock` a whole
    reserve → patch → bind so concurrent binds can never hand out the same device."""

    def __init__(self, source: ClusterSource, make_scheduler: Callable[[Cluster], Scheduler]) -> None:
        self.source = source
        self.client = source.client
        self.make_scheduler = make_scheduler
        self.lock = threading.RLock()
        self.bind_lock = threading.Lock()
        self.assumed: dict[str, _Bound] = {}  # pod key → bound by us, not yet seen bound+annotated
        self.binder = Binder(self.client)
        self.scheduler = make_scheduler(Cluster())
        served.load(self.scheduler)
        self.refresh_lock = threading.Lock()
        # Watch deliveries made while a re-list is in flight, replayed onto the new cluster before it is swapped in
        # (the list may have been read before them). None when no re-list is running.
        self._journal: list[tuple[str, str, Any]] | None = None
        # Device / NodeMetric objects whose Node is not known yet (a Device CR may come before its Node).
        self._orphans: dict[tuple[str, str], JSON] = {}
        self.stop_event = threading.Event()
        self.clock: Clock = REAL_CLOCK  # the watches' waits (a test's own clock)
        self.watch_backoff: BackoffPolicy = REFLECTOR
        self.metrics: Any = None  # scheduler.metrics.SchedulerMetrics, set by the CLI

    @contextmanager
    def state(self) -> Iterator[tuple[Scheduler | None, list[JSON]]]:
        """The live scheduler for the diagnosis API (an extender sees no pending pods)."""
        with self.lock:
            yield self.scheduler, []

    def refresh(self) -> None:
        """Re-list the cluster and swap it in; pods we bound that the list does not show yet stay assumed."""
        with self.refresh_lock:
            started = time.monotonic()
            with self.lock:
                self._journal = []
            try:
                cluster = self.source.load()
            except BaseException:
                with self.lock:
                    self._journal = None
                raise
            sched = self.make_scheduler(cluster)
            with self.lock:
                for pod_key, a in list(self.assumed.items()):
                    node = cluster.nodes.get(a.node)
                    if node is None or pod_key in node.pods or a.bound_at < started:
                        del self.assumed[pod_key]  # seen bound, or bound before this list began and gone since
                    else:
                        cluster.assume(a.pod, a.node)
                served.load(sched)  # after the assumed pods: owners we bound are accounted to their reservation
                journal, self._journal = self._journal or [], None
                for op, kind, payload in journal:
                    self._apply(sched, op, kind, payload)
                self.scheduler = sched
        log.info("cluster: %d nodes, %d assigned pods", len(cluster.nodes), sum(len(n.pods) for n in
                                                                                  cluster.nodes.values()))

    # -- watches ----------------------------------------------------------------------------------------------
    def start_watches(self, timeout_seconds: int = WATCH_TIMEOUT) -> list[threading.Thread]:
        """The cache's list + watch threads, each change delivered here; stop_watches() ends them."""
        cache = self.source.cache
        cache.clock, cache.backoff, cache.stop_event = self.clock, self.watch_backoff, self.stop_event
        cache.listeners.append(self.deliver)
        return cache.start(timeout_seconds)

    def stop_watches(self) -> None:
        self.source.cache.stop()

    def deliver(self, op: str, kind: str, payload: object) -> None:
        """Apply one watch event (ADDED/MODIFIED/DELETED with an object) or a REPLACE (every listed object of the
        kind) to the live cluster."""
        if op != "REPLACE":
            why = shape_problem(payload)
            if why is not None:
                malformed.report(kind, payload, why)
                return
        with self.lock:
            if self._journal is not None:
                self._journal.append((op, kind, payload))
            self._apply(self.scheduler, op, kind, payload)

    def _apply(self, sched: Scheduler, op: str, kind: str, payload: Any) -> None:
        cluster = sched.cluster
        if op == "REPLACE":
            items: list[JSON] = payload
            names = {_name(o) for o in items}
            if kind == "Node":
                for gone in [n for n in cluster.nodes if n not in names]:
                    self._node_deleted(cluster, gone)
            elif kind == "Pod":
                listed = {key(o) for o in items}
                for node in list(cluster.nodes.values()):
                    for k, pod in list(node.pods.items()):
                        if k not in listed and k not in self.assumed and not is_reserve_pod(pod):
                            self._remove_pod(sched, node, k, pod)
            elif kind == "Reservation":
                cluster.reservations = list(items)
                served.load(sched)
                return
            elif kind == "ElasticQuota":
                cluster.elastic_quotas = list(items)
                self._quotas_changed(sched)
                return
            else:
                attr = NODE_ATTRS[kind]
                for node in cluster.nodes.values():
                    if getattr(node, attr) is not None and node.name not in names:
                        setattr(node, attr, None)
                for orphan in [o for o in self._orphans if o[0] == kind and o[1] not in names]:
                    del self._orphans[orphan]
            for obj in items:
                self._apply(sched, "MODIFIED", kind, obj)
            return
        try:
            self._apply_one(sched, op, kind, payload)
        except Exception as e:  # one object isolated: it must not stop this kind's watch (a re-list would fail too)
            malformed.report(kind, payload, f"{type(e).__name__}: {e}", "not applied")

    def _apply_one(self, sched: Scheduler, op: str, kind: str, payload: JSON) -> None:
        cluster = sched.cluster
        deleted = op == "DELETED"
        if kind == "Pod":
            self._pod_event(sched, payload, deleted)
        elif kind == "Node":
            name = _name(payload)
            known = name in cluster.nodes
            if deleted:
                self._node_deleted(cluster, name)
            else:
                self._node_upsert(cluster, payload)
            if known != (name in cluster.nodes) and served.on_node(sched, name):
                served.load(sched)  # a reservation's node came or went: place or fail it afresh
        elif kind == "Reservation":
            cluster.reservations = [o for o in cluster.reservations if _name(o) != _name(payload)]
            if not deleted:
                cluster.reservations.append(payload)
            served.load(sched)
        elif kind == "ElasticQuota":
            cluster.elastic_quotas = [o for o in cluster.elastic_quotas if key(o) != key(payload)]
            if not deleted:
                cluster.elastic_quotas.append(payload)
            self._quotas_changed(sched)
        else:
            attr, name = NODE_ATTRS[kind], _name(payload)
            target = cluster.nodes.get(name)
            if target is None:
                if deleted:
                    self._orphans.pop((kind, name), None)
                else:
                    self._orphans[kind, name] = payload
            elif deleted:
                setattr(target, attr, None)
            elif getattr(target, attr) is not payload:
                setattr(target, attr, payload)

    @staticmethod
    def _quotas_changed(sched: Scheduler) -> None:
        quota = sched.plugin(ELASTIC_QUOTA, ElasticQuota)
        if quota is not None:
            quota.reload(sched.cluster)

    def _node_upsert(self, cluster: Cluster, obj: JSON) -> None:
        name = _name(obj)
        allocatable = node_allocatable(obj)
        node = cluster.nodes.get(name)
        if node is None:
            new = NodeInfo(name, obj, allocatable)
            for kind, attr in NODE_ATTRS.items():
                setattr(new, attr, self._orphans.pop((kind, name), None))
            cluster.nodes[name] = new  # a NodeMap operation: the node index rebuilds
            return
        if node.obj is not obj:
            node.obj = obj
        if node.allocatable != allocatable:
            node.allocatable = allocatable

    def _node_deleted(self, cluster: Cluster, name: str) -> None:
        node = cluster.nodes.pop(name, None)
        if node is None:
            return
        for kind, attr in NODE_ATTRS.items():
            obj = getattr(node, attr)
            if obj is not None:  # the CR may outlive its Node for a while
                self._orphans[kind, name] = obj
        for k in [k for k, a in self.assumed.items() if a.node == name]:
            del self.assumed[k]

    def _pod_event(self, sched: Scheduler, pod: JSON, deleted: bool) -> None:
        cluster = sched.cluster
        k = key(pod)
        if deleted or not holds_resources(pod):
            # pending ones too: a filtered pod counted in its quota's request leaves it (ElasticQuota's
            # OnPodDelete; a terminated pod leaves as upstream's OnPodUpdate does). A pod whose requests do not
            # read was never counted there (filter refuses it): its node's copy is still taken off below.
            with contextlib.suppress(InvalidInput):
                sched.forget(pod)
        node_name = str((pod.get("spec") or {}).get("nodeName") or "")
        assumed = self.assumed.get(k)
        if assumed is not None and (deleted or assumed.node != node_name or not holds_resources(pod)):
            # deleted, finished, or bound elsewhere by someone else: our assumption no longer holds
            del self.assumed[k]
            held = cluster.nodes.get(assumed.node)
            if held is not None and k in held.pods:
                self._remove_pod(sched, held, k, held.pods[k])
            assumed = None
        node = cluster.nodes.get(node_name)
        if node is None:
            return
        old = node.pods.get(k)
        if deleted or not holds_resources(pod):
            if old is not None:
                self._remove_pod(sched, node, k, old)
            return
        pod = bound_pod(pod, node)  # never under-counted, whatever its requests say
        if assumed is not None:
            del self.assumed[k]  # seen bound by the API server
        if old is None:
            node.add_pod(pod)
        elif _pod_signature(old) != _pod_signature(pod):
            self._remove_pod(sched, node, k, old, gone=False)
            node.add_pod(pod)
            if node.device is not None:
                # DeviceShare re-reads a node's pods when their count or the Device object changes; the count is
                # back where it was, so hand it a new (equal) Device object to re-read the replaced pod.
                node.device = dict(node.device)

    @staticmethod
    def _remove_pod(sched: Scheduler, node: NodeInfo, k: str, pod: JSON, gone: bool = True) -> None:
        """Take an assigned pod off its node; when it is `gone` (deleted or finished) an owner's share returns
        to its reservation (never reviving an allocateOnce one: Succeeded is final)."""
        node.remove_pod(k)
        sched.unreserve(pod, node, keep=(RESERVATION_PLUGIN,))  # the owner's share: owner_gone, below
        if gone:
            served.owner_gone(sched, pod)

    # -- verbs ------------------------------------------------------------------------------------------------
    def filter(self, args: JSON) -> JSON:
        pod = _pod(args)
        names, items = _node_names(args)
        with self.lock, self.scheduler.cycle(pod) as cycle:
            known = [n for n in names if n in self.scheduler.cluster.nodes]
            fits, failed = cycle.feasible(known)
        fit_names = [f.name for f in fits]
        for n in set(names) - set(known):
            failed[n] = "node is unknown to the koord-sched extender (not listed yet)"
        result: JSON = {"FailedNodes": failed, "FailedAndUnresolvableNodes": {}, "Error": ""}
        if items is None:
            result["NodeNames"] = fit_names
        else:
            keep = set(fit_names)
            result["Nodes"] = {"items": [n for n in items if (n.get("metadata") or {}).get("name") in keep]}
        return result

    def prioritize(self, args: JSON) -> list[JSON]:
        pod = _pod(args)
        names, _ = _node_names(args)
        with self.lock, self.scheduler.cycle(pod) as cycle:
            cluster = self.scheduler.cluster
            nodes = [cluster.nodes[n] for n in names if n in cluster.nodes]
            totals, weight = cycle.weighted_scores(nodes)
        # Plugin scores are 0..100 each, weighted; kube-scheduler wants 0..MaxExtenderPriority. A plugin that scores
        # every node 0 (the Reservation plugin for a pod no reservation serves, weight 5000; ImageLocality where no
        # node holds the pod's images) is left out of the scale: it changes no ranking (docs/decisions.md)
        top = PLUGIN_MAX_SCORE * weight
        return [{"Host": n, "Score": totals.get(n, 0) * MAX_EXTENDER_PRIORITY // top if top else 0} for n in names]

    def bind(self, args: JSON) -> JSON:
        name, namespace, node = (_require_str(args, f) for f in ("PodName", "PodNamespace", "Node"))
        uid = args.get("PodUID") or ""
        if not isinstance(uid, str):
            raise BadRequest("PodUID must be a string")
        try:
            pod = self.client.get(pod_path(namespace, name))
        except NotFound:
            return {"Error": f"pod {namespace}/{name} not found"}
        except KoordletError as e:
            return {"Error": f"getting pod {namespace}/{name}: {e}"}
        why = pod_problem(pod) if isinstance(pod, dict) else "not an object"
        if why is not None:
            return {"Error": f"pod {namespace}/{name} is malformed: {why}"}
        meta = pod["metadata"]
        meta.setdefault("namespace", namespace)
        if uid and meta.get("uid") and meta["uid"] != uid:
            return {"Error": f"pod {namespace}/{name} has UID {meta['uid']}, not {uid}"}
        pod_key = key(pod)
        if (pod.get("spec") or {}).get("nodeName"):
            return {"Error": f"pod {pod_key} is already bound to {pod['spec']['nodeName']}"}
        if not is_active(pod):
            return {"Error": f"pod {pod_key} is terminating or finished"}
        with self.bind_lock:
            with self.lock:
                if node not in self.scheduler.cluster.nodes:
                    return {"Error": f"node {node} is unknown to the koord-sched extender"}
                if pod_key in self.assumed:
                    return {"Error": f"pod {pod_key} is already bound to {self.assumed[pod_key].node}"}
                try:
                    # an owner is served from its reservation on this node (reservation-allocated, accounted)
                    target = self.scheduler.cluster.nodes[node]
                    with self.scheduler.cycle(pod) as cycle:
                        annotations = cycle.assume(target, cycle.reserve(target)).annotations
                except Unschedulable as e:
                    return {"Error": f"pod {pod_key} does not fit on node {node}: {e}"}
                self.assumed[pod_key] = _Bound(pod, node)
                if self.metrics is not None:
                    self.metrics.reserved(annotations)
            result = self.binder.bind(self.scheduler, [Member(Assumed(pod, node, annotations), uid)], self._rollback)
            if result.error:
                return {"Error": f"binding {pod_key} to {node}: {result.cause or result.error}"}
            with self.lock:
                if pod_key in self.assumed:
                    self.assumed[pod_key].bound_at = time.monotonic()
                patch = served.status_patch(self.scheduler, annotations)
            if patch is not None:  # as `run` writes it; the Binding stands even if this write fails
                served.write(self.client, *patch)
        return {"Error": ""}

    def _rollback(self, undo: list[Assumed]) -> None:
        """A failed bind: the pods are no longer assumed, their reservations released (on the live scheduler: a
        re-list meanwhile assumed them on its new cluster)."""
        with self.lock:
            for a in undo:
                self.assumed.pop(key(a.pod), None)
            self.scheduler.release(undo)


VERB_POINTS = {"filter": "Filter", "prioritize": "Score", "bind": "Bind"}


class _Handler(BaseHTTPRequestHandler):
    server: ExtenderServer
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        verb = self.server.verb(self.path)
        if verb is None:
            self._send(404, {"Error": f"no such extender verb: {self.path}"})
            return
        try:
            length = int(self.headers.get("Content-Length") or "0")
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY:
            self._send(400, {"Error": "missing or invalid Content-Length"})
            return
        body = self.rfile.read(length)
        try:
            args = json.loads(body)
            if not isinstance(args, dict):
                raise BadRequest("the body must be a JSON object")
            started = time.perf_counter()
            ext = self.server.extender
            result: JSON | list[JSON] = (ext.filter(args) if verb == "filter" else ext.prioritize(args)
                                         if verb == "prioritize" else ext.bind(args))
            metrics = self.server.extender.metrics
            if metrics is not None:  # the extension point kube-scheduler delegates to this verb
                ok = not (isinstance(result, dict) and result.get("Error"))
                metrics.point(VERB_POINTS[verb], time.perf_counter() - started, ok)
        except (ValueError, BadRequest, InvalidInput) as e:
            reason = " ".join(str(e).split())  # one line, whatever the decoder said
            self._send(400, {"Error": f"malformed {verb} request: {reason}"})
            return
        except Exception as e:  # a scheduler bug must fail this request, not the server
            log.exception("%s failed", verb)
            self._send(500, {"Error": f"{verb}: internal error: {e}"})
            return
        self._send(200, result)

    def do_GET(self) -> None:
        if self.path in ("/healthz", "/readyz"):
            self._send(200, {"status": "ok"})
        elif self.server.diagnosis.handles(self.path):
            self._diagnose("GET")
        else:
            self._send(405 if self.server.verb(self.path) else 404, {"Error": "use POST"})

    def do_PUT(self) -> None:
        if self.server.diagnosis.handles(self.path):
            self._diagnose("PUT")
        else:
            self._send(404, {"Error": f"no such path: {self.path}"})

    def _diagnose(self, method: str) -> None:
        try:
            length = int(self.headers.get("Content-Length") or "0")
        except ValueError:
            self._send(400, {"Error": "invalid Content-Length"})
            return
        body = self.rfile.read(min(length, MAX_BODY)) if length > 0 else b""
        status, ctype, payload = self.server.diagnosis.serve(method, self.path, body)
        send(self, status, ctype, payload)

    def _send(self, status: int, payload: object) -> None:
        data = json.dumps(payload, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)


class ExtenderServer(TLSHTTPServer):
    def __init__(self, address: tuple[str, int], extender: Extender, prefix: str = "") -> None:
        super().__init__(address, _Handler)
        self.extender = extender
        self.diagnosis = DiagnosisAPI(extender.state, extender.metrics)
        self.prefix = "/" + prefix.strip("/") if prefix.strip("/") else ""

    def verb(self, path: str) -> str | None:
        path = path.split("?", 1)[0]
        for v in ("filter", "prioritize", "bind"):
            if path == f"{self.prefix}/{v}":
                return v
        return None


def parse_addr(addr: str) -> tuple[str, int]:
    """`:8080`, `0.0.0.0:8080`, `[::1]:8080` or `8080`."""
    host, sep, port = addr.rpartition(":")
    if not sep:
        host, port = "", addr
    try:
        return host.strip("[]"), int(port)
    except ValueError:
        raise ValueError(f"invalid listen address {addr!r} (want host:port)") from None


def serve(extender: Extender, addr: str, prefix: str = "", resync: float = 0.0, watch: bool = True,
          stop: threading.Event | None = None, tls: ssl.SSLContext | None = None) -> None:
    """Serve until `stop` is set (or interrupted), over HTTPS when `tls` is given; watch the cluster (when `watch`)
    and re-list it every `resync` seconds when positive, a safety net for anything the watches missed. On the way
    out the watches are stopped and the server closed."""
    server = ExtenderServer(parse_addr(addr), extender, prefix)
    server.tls = tls
    stop = stop if stop is not None else threading.Event()
    watches = extender.start_watches() if watch else []

    def resync_loop() -> None:
        while not stop.wait(resync):
            try:
                extender.refresh()
            except (KoordletError, ApiError) as e:
                log.warning("re-listing the cluster: %s", e)

    def stopper() -> None:
        stop.wait()
        server.shutdown()  # from another thread: serve_forever returns within its poll interval

    if resync > 0:
        threading.Thread(target=resync_loop, name="resync", daemon=True).start()
    threading.Thread(target=stopper, name="stopper", daemon=True).start()
    host, port = server.server_address[:2]
    log.info("extender listening on %s://%s:%s%s/{filter,prioritize,bind}", server.scheme, host, port, server.prefix)
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        stop.set()
        if watch:
            extender.stop_watches()
        server.server_close()
        deadline = time.monotonic() + 0.5
        for t in watches:  # aborted streams end at once; a thread still blocked is a daemon and cannot hold exit
            t.join(max(0.0, deadline - time.monotonic()))
        log.info("extender stopped")
