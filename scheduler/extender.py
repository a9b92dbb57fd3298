"""kube-scheduler extender HTTP API (filter, prioritize, bind) over the slim Scheduler and a listed cluster."""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from koordlet.errors import ApiError, KoordletError, NotFound
from koordlet.kubeapi import KubeClient
from scheduler.cluster import JSON, Cluster, build_cluster, is_active, key
from scheduler.framework import Scheduler, Unschedulable

log = logging.getLogger(__name__)

MAX_EXTENDER_PRIORITY = 10  # k8s.io/kube-scheduler/extender/v1 MaxExtenderPriority
PLUGIN_MAX_SCORE = 100
MAX_BODY = 64 << 20

# (collection path, kind): list items come without kind/apiVersion, build_cluster needs the kind.
SOURCES: tuple[tuple[str, str], ...] = (
    ("/api/v1/nodes", "Node"),
    ("/api/v1/pods", "Pod"),
    ("/apis/scheduling.koordinator.sh/v1alpha1/devices", "Device"),
    ("/apis/slo.koordinator.sh/v1alpha1/nodemetrics", "NodeMetric"),
)
OPTIONAL_KINDS = ("Device", "NodeMetric")  # CRDs that may not be installed
LIST_PAGE = 500


class BadRequest(Exception):
    """The request body is not what kube-scheduler sends (answered with HTTP 400)."""


class ClusterSource:
    """Lists Nodes, assigned Pods, Device CRs and NodeMetrics from the API server into a Cluster."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client

    def objects(self) -> list[JSON]:
        out: list[JSON] = []
        for path, kind in SOURCES:
            try:
                items = self._list_all(path, "spec.nodeName!=" if kind == "Pod" else None)
            except NotFound:
                if kind not in OPTIONAL_KINDS:
                    raise
                log.warning("%s is not served (CRD not installed?); continuing without %s objects", path, kind)
                continue
            for item in items:
                if kind == "Pod" and not (item.get("spec") or {}).get("nodeName"):
                    continue  # the field selector is only a hint to the server
                item.setdefault("kind", kind)
                out.append(item)
        return out

    def _list_all(self, path: str, field_selector: str | None) -> list[JSON]:
        items: list[JSON] = []
        cont = ""
        while True:
            params = {"limit": str(LIST_PAGE), **({"continue": cont} if cont else {})}
            page = self.client.list(path, field_selector=field_selector, params=params)
            items.extend(i for i in page.get("items") or [] if isinstance(i, dict))
            cont = str((page.get("metadata") or {}).get("continue") or "")
            if not cont:
                return items

    def load(self) -> Cluster:
        return build_cluster(self.objects())


@dataclass
class _Assumed:
    pod: JSON
    node: str
    bound_at: float = math.inf  # monotonic; inf while the bind is in flight


def _pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}"


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
        items = [n for n in nodes["items"] if isinstance(n, dict)]
        return [str((n.get("metadata") or {}).get("name")) for n in items], items
    raise BadRequest("one of NodeNames (nodeCacheCapable) or Nodes.items is required")


def _pod(args: JSON) -> JSON:
    pod = args.get("Pod")
    if not isinstance(pod, dict) or not isinstance(pod.get("metadata"), dict):
        raise BadRequest("Pod must be a Pod object with metadata")
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
        self.assumed: dict[str, _Assumed] = {}  # pod key → bound by us, not yet seen bound+annotated in a list
        self.scheduler = make_scheduler(Cluster())

    def refresh(self) -> None:
        """Re-list the cluster and swap it in; pods we bound that the list does not show yet stay assumed."""
        started = time.monotonic()
        cluster = self.source.load()
        sched = self.make_scheduler(cluster)
        with self.lock:
            for pod_key, a in list(self.assumed.items()):
                node = cluster.nodes.get(a.node)
                if node is None or pod_key in node.pods or a.bound_at < started:
                    del self.assumed[pod_key]  # seen bound, or bound before this list began and gone since
                else:
                    cluster.assume(a.pod, a.node)
            self.scheduler = sched
        log.info("cluster: %d nodes, %d assigned pods", len(cluster.nodes), sum(len(n.pods) for n in
                                                                                  cluster.nodes.values()))

    # -- verbs ------------------------------------------------------------------------------------------------
    def filter(self, args: JSON) -> JSON:
        pod = _pod(args)
        names, items = _node_names(args)
        with self.lock:
            known = [n for n in names if n in self.scheduler.cluster.nodes]
            fits, failed = self.scheduler.feasible(pod, known)
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
        with self.lock:
            cluster = self.scheduler.cluster
            nodes = [cluster.nodes[n] for n in names if n in cluster.nodes]
            totals = self.scheduler.scores(pod, nodes)
            weight = sum(s.weight for s in self.scheduler.scorers)
        # Plugin scores are 0..100 each, weighted; kube-scheduler wants 0..MaxExtenderPriority.
        top = PLUGIN_MAX_SCORE * weight
        return [{"Host": n, "Score": totals.get(n, 0) * MAX_EXTENDER_PRIORITY // top if top else 0} for n in names]

    def bind(self, args: JSON) -> JSON:
        name, namespace, node = (_require_str(args, f) for f in ("PodName", "PodNamespace", "Node"))
        uid = args.get("PodUID") or ""
        if not isinstance(uid, str):
            raise BadRequest("PodUID must be a string")
        try:
            pod = self.client.get(_pod_path(namespace, name))
        except NotFound:
            return {"Error": f"pod {namespace}/{name} not found"}
        except KoordletError as e:
            return {"Error": f"getting pod {namespace}/{name}: {e}"}
        meta = pod.setdefault("metadata", {})
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
                    annotations = self.scheduler.reserve_on(pod, node)
                except Unschedulable as e:
                    return {"Error": f"pod {pod_key} does not fit on node {node}: {e}"}
                self.assumed[pod_key] = _Assumed(pod, node)
            patched = False
            try:
                if annotations:
                    self.client.patch(_pod_path(namespace, name), {"metadata": {"annotations": annotations}})
                    patched = True
                self.client.post(f"{_pod_path(namespace, name)}/binding", {
                    "apiVersion": "v1", "kind": "Binding",
                    "metadata": {"name": name, "namespace": namespace, **({"uid": uid} if uid else {})},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": node}})
            except KoordletError as e:
                self._rollback(pod, pod_key, node)
                if patched:
                    self._unannotate(namespace, name, annotations)
                return {"Error": f"binding {pod_key} to {node}: {e}"}
            with self.lock:
                if pod_key in self.assumed:
                    self.assumed[pod_key].bound_at = time.monotonic()
        log.info("bound %s to %s%s", pod_key, node, f" ({', '.join(annotations)})" if annotations else "")
        return {"Error": ""}

    def _rollback(self, pod: JSON, pod_key: str, node_name: str) -> None:
        with self.lock:
            self.assumed.pop(pod_key, None)
            cluster = self.scheduler.cluster
            node = cluster.nodes.get(node_name)
            if node is None:
                return
            node.remove_pod(pod_key)
            for r in reversed(self.scheduler.reservers):
                r.unreserve(pod, node, cluster)

    def _unannotate(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        """Best effort: a pending pod must not keep a device-allocated that no longer holds."""
        try:
            self.client.patch(_pod_path(namespace, name), {"metadata": {"annotations": dict.fromkeys(annotations)}})
        except KoordletError as e:
            log.warning("removing %s from %s/%s after a failed bind: %s", ", ".join(annotations), namespace, name, e)


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
            result: Any = getattr(self.server.extender, verb)(args)
        except (ValueError, BadRequest) as e:
            self._send(400, {"Error": f"malformed {verb} request: {e}"})
            return
        except Exception as e:  # a scheduler bug must fail this request, not the server
            log.exception("%s failed", verb)
            self._send(500, {"Error": f"{verb}: internal error: {e}"})
            return
        self._send(200, result)

    def do_GET(self) -> None:
        if self.path in ("/healthz", "/readyz"):
            self._send(200, {"status": "ok"})
        else:
            self._send(405 if self.server.verb(self.path) else 404, {"Error": "use POST"})

    def _send(self, status: int, payload: Any) -> None:
        data = json.dumps(payload, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)


class ExtenderServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], extender: Extender, prefix: str = "") -> None:
        super().__init__(address, _Handler)
        self.extender = extender
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


def serve(extender: Extender, addr: str, prefix: str = "", resync: float = 0.0) -> None:
    """Serve until interrupted; re-list the cluster every `resync` seconds when positive."""
    server = ExtenderServer(parse_addr(addr), extender, prefix)
    stop = threading.Event()

    def resync_loop() -> None:
        while not stop.wait(resync):
            try:
                extender.refresh()
            except (KoordletError, ApiError) as e:
                log.warning("re-listing the cluster: %s", e)

    if resync > 0:
        threading.Thread(target=resync_loop, name="resync", daemon=True).start()
    host, port = server.server_address[:2]
    log.info("extender listening on %s:%s%s/{filter,prioritize,bind}", host, port, server.prefix)
    try:
        server.serve_forever()
    finally:
        stop.set()
        server.server_close()
