"""The diagnosis API (frameworkext/services): plugin state under /apis/v1/, and the /debug/flags setters.

Routes keep upstream's gin patterns, so `GET /apis/v1/__services__` lists them the same way; the state comes from
the scheduler of the last cycle (`koord-sched run`) or the live one (`extender`), read under its lock. As upstream's
handler, /apis/v1/ answers 503 on a candidate that does not lead; a services-only API (v0.7's own port) serves
/apis/v1/ and nothing else.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from apis.core.objects import JSON
from apis.scheduling.gang import ANNOTATION_GANG_MIN_AVAILABLE
from scheduler import debug
from scheduler.cluster import key
from scheduler.deviceshare.plugin import DeviceShare
from scheduler.elasticquota.model import format_quantity, resource_json
from scheduler.elasticquota.plugin import NAME as ELASTIC_QUOTA
from scheduler.elasticquota.plugin import ElasticQuota
from scheduler.framework import Scheduler
from scheduler.gang.model import Gang, collect_gangs, gang_from_pod, gang_groups, gang_id_of
from scheduler.metrics import CONTENT_TYPE, SchedulerMetrics
from scheduler.numa.plugin import NodeNUMAResource
from scheduler.numa.service import available_cpus, cpu_topology_options
from scheduler.tlsserve import TLSHTTPServer

log = logging.getLogger(__name__)
BASE = "/apis/v1"
PLUGINS = f"{BASE}/plugins"
# What a handler sees: the scheduler of the last cycle and the pending pods it was given.
StateSource = Callable[[], AbstractContextManager[tuple[Scheduler | None, list[JSON]]]]
Response = tuple[int, str, object]  # status, content type, payload (JSON-able or text)


def _error(status: int, message: str) -> Response:
    return status, "application/json", {"message": message}


class DiagnosisAPI:
    ROUTES = (
        ("GET", f"{BASE}/__services__"),
        ("GET", f"{BASE}/nodes/:nodeName"),
        ("GET", f"{PLUGINS}/Coscheduling/gang/:namespace/:name"),
        ("GET", f"{PLUGINS}/Coscheduling/gangs"),
        ("GET", f"{PLUGINS}/DeviceShare/nodeDeviceSummaries"),
        ("GET", f"{PLUGINS}/DeviceShare/nodeDeviceSummaries/:name"),
        ("GET", f"{PLUGINS}/ElasticQuota/quotas"),
        ("GET", f"{PLUGINS}/ElasticQuota/quotas/:name"),
        # v1.7's plugin_service.go, then the older order (`cpuTopologyOptions/<node>`) v0.7's text shows, also under
        # the plugin name as that text spells it; a literal segment first, as gin matches it before a parameter
        ("GET", f"{PLUGINS}/{NodeNUMAResource.name}/cpuTopologyOptions/:nodeName"),
        ("GET", f"{PLUGINS}/{NodeNUMAResource.name}/availableCPUs/:nodeName"),
        ("GET", f"{PLUGINS}/NodeNUMAResources/cpuTopologyOptions/:nodeName"),
        ("GET", f"{PLUGINS}/NodeNUMAResources/availableCPUs/:nodeName"),
        ("GET", f"{PLUGINS}/{NodeNUMAResource.name}/:nodeName/cpuTopologyOptions"),
        ("GET", f"{PLUGINS}/{NodeNUMAResource.name}/:nodeName/availableCPUs"),
    )

    def __init__(self, state: StateSource, metrics: SchedulerMetrics | None = None,
                 is_leader: Callable[[], bool] | None = None, services_only: bool = False) -> None:
        self.state = state
        self.metrics = metrics  # served at /metrics when set
        self.is_leader = is_leader  # None: always answer (the extender, a single `run`)
        self.services_only = services_only

    def handles(self, path: str) -> bool:
        p = urlsplit(path).path
        if self.services_only:
            return p.startswith(BASE + "/")
        return p.startswith(BASE + "/") or p == "/debug/flags" or p.startswith("/debug/flags/") or (
            p == "/metrics" and self.metrics is not None)

    def serve(self, method: str, raw_path: str, body: bytes = b"") -> Response:
        url = urlsplit(raw_path)
        path, query = url.path.rstrip("/") or "/", {k: v[-1] for k, v in parse_qs(url.query).items()}
        if not self.handles(path + "/" if path == BASE else path):
            return _error(404, f"no such API: {path}")
        if path.startswith(BASE + "/") and self.is_leader is not None and not self.is_leader():
            return _error(503, "the instance is not leader")
        if path == "/metrics" and self.metrics is not None:
            return 200, CONTENT_TYPE, self.metrics.exposition()
        if path == "/debug/flags":
            return 200, "text/plain", "/debug/flags/\nflags:\n" + "".join(f"{f}\n" for f in sorted(debug.SETTERS))
        if path.startswith("/debug/flags/"):
            return self._flag(method, path.rsplit("/", 1)[-1], body)
        parts = path.split("/")
        for m, pattern in self.ROUTES:
            pat = pattern.split("/")
            if len(pat) != len(parts) or any(a != b and not a.startswith(":") for a, b in zip(pat, parts,
                                                                                             strict=True)):
                continue
            if method != m:
                return _error(405, f"use {m}")
            params = {a[1:]: b for a, b in zip(pat, parts, strict=True) if a.startswith(":")}
            return self._route(pattern, params, query)
        return _error(404, f"no such API: {path}")

    def _flag(self, method: str, flag: str, body: bytes) -> Response:
        setter = debug.SETTERS.get(flag)
        if setter is None:
            return 404, "text/plain", f"no such debug flag: {flag}\n"
        if method != "PUT":
            return 406, "text/plain", "unsupported http method\n"
        try:
            return 200, "text/plain", setter(body.decode("utf-8", "replace")) + "\n"
        except ValueError as e:
            return 400, "text/plain", f"{e}\n"

    def _route(self, pattern: str, params: dict[str, str], query: dict[str, str]) -> Response:
        if pattern.endswith("__services__"):
            services: dict[str, list[str]] = {}
            for m, p in self.ROUTES:
                services.setdefault(m, []).append(p)
            return 200, "application/json", {m: sorted(ps) for m, ps in services.items()}
        with self.state() as (sched, pending):
            if sched is None:
                return _error(503, "The component is initializing and temporarily unavailable")
            if "/nodes/" in pattern:
                return self._node(sched, params["nodeName"])
            if "NodeNUMAResource" in pattern:
                return self._numa(sched, params["nodeName"], "availableCPUs" in pattern)
            if "ElasticQuota" in pattern:
                return self._quota(sched, params.get("name"), query)
            if "DeviceShare" in pattern:
                return self._devices(sched, params.get("name"))
            return self._gangs(sched, pending, params)

    @staticmethod
    def _node(sched: Scheduler, name: str) -> Response:
        node = sched.cluster.nodes.get(name)
        if node is None:
            return _error(404, f"cannot find node {name}")
        remaining = {r: node.free(r) for r in node.allocatable}
        return 200, "application/json", {
            "node": node.obj, "pods": sorted(node.pods), "requested": resource_json(node.requested),
            "allocatable": resource_json(node.allocatable), "remaining": resource_json(remaining)}

    @staticmethod
    def _numa(sched: Scheduler, name: str, available: bool) -> Response:
        plugin = sched.plugin(NodeNUMAResource.name, NodeNUMAResource)
        if plugin is None:
            return _error(404, f"plugin {NodeNUMAResource.name} is not enabled")
        node = sched.cluster.nodes.get(name)
        if node is None:
            return _error(404, f"cannot find node {name}")
        return 200, "application/json", available_cpus(plugin, node) if available else cpu_topology_options(plugin,
                                                                                                             node)

    @staticmethod
    def _quota(sched: Scheduler, name: str | None, query: dict[str, str]) -> Response:
        plugin = sched.plugin(ELASTIC_QUOTA, ElasticQuota)
        if plugin is None:
            return _error(404, "plugin ElasticQuota is not enabled")
        plugin.bind(sched.cluster)
        include = query.get("includePods") == "true"
        if name is None:
            return 200, "application/json", plugin.summaries(include, query.get("tree") or None)
        summary = plugin.summary(name, include)
        if summary is None:
            return _error(404, f"cannot find quota {name}")
        return 200, "application/json", summary

    @staticmethod
    def _devices(sched: Scheduler, name: str | None) -> Response:
        plugin = sched.plugin(DeviceShare.name, DeviceShare)
        if plugin is None:
            return _error(404, "plugin DeviceShare is not enabled")
        names = [name] if name is not None else sorted(n for n, info in sched.cluster.nodes.items()
                                                       if info.device is not None)
        out: JSON = {}
        for n in names:
            info = sched.cluster.nodes.get(n)
            if info is None or info.device is None:
                return _error(404, f"cannot find node {n}")
            out[n] = device_summary(plugin.state.node(info))
        return 200, "application/json", out[name] if name is not None else out

    @staticmethod
    def _gangs(sched: Scheduler, pending: list[JSON], params: dict[str, str]) -> Response:
        gangs = all_gangs(sched, pending)
        if "name" in params:
            gid = f"{params['namespace']}/{params['name']}"
            if gid not in gangs:
                return _error(404, f"cannot find gang {gid}")
            return 200, "application/json", gang_summary(gangs[gid], sched, pending)
        return 200, "application/json", {g: gang_summary(v, sched, pending) for g, v in sorted(gangs.items())}


def device_summary(st: Any) -> JSON:
    """NodeDeviceSummary (deviceshare/device_summary.go): totals, free and used per resource and per minor, and
    the allocations per pod."""
    def detail(per_type: dict[str, dict[int, dict[str, int]]]) -> JSON:
        return {t: {str(m): {r: format_quantity(r, v) for r, v in sorted(res.items())}
                    for m, res in sorted(minors.items())} for t, minors in sorted(per_type.items())}

    def summed(per_type: dict[str, dict[int, dict[str, int]]]) -> JSON:
        out: dict[str, int] = {}
        for minors in per_type.values():
            for res in minors.values():
                for r, v in res.items():
                    out[r] = out.get(r, 0) + v
        return resource_json(out)

    total = {t: {m: d.total for m, d in ds.items()} for t, ds in st.devices.items()}
    used = {t: dict(ms) for t, ms in st.used.items()}
    allocate: dict[str, dict[str, dict[str, dict[str, str]]]] = {}
    for pod_key, allocs in sorted(st.pods.items()):
        for dtype, items in allocs.items():
            allocate.setdefault(dtype, {})[pod_key] = {
                str(a.minor): {r: format_quantity(r, v) for r, v in sorted(a.resources.items())} for a in items}
    return {"deviceTotal": summed(total), "deviceFree": summed(st.free), "deviceUsed": summed(used),
            "deviceTotalDetail": detail(total), "deviceFreeDetail": detail(st.free), "deviceUsedDetail": detail(used),
            "allocateSet": allocate}


def all_gangs(sched: Scheduler, pending: list[JSON]) -> dict[str, Gang]:
    gangs = collect_gangs(pending, sched.cluster)
    for pod in sched.cluster.assigned_pods():  # annotation gangs whose members are all bound
        gid = gang_id_of(pod)
        if gid is not None and gid not in gangs and ANNOTATION_GANG_MIN_AVAILABLE in ((pod.get("metadata") or {}).get(
                "annotations") or {}):
            made = gang_from_pod(pod)
            if made is not None:
                made.bound = 0
                gangs[gid] = made
    return gangs


def gang_summary(gang: Gang, sched: Scheduler, pending: list[JSON]) -> JSON:
    """GangSummary (coscheduling/core/gang_summary.go); sets marshal as objects of empty values, durations as
    nanoseconds, as Go's encoding/json does."""
    bound = sorted(key(p) for p in sched.cluster.assigned_pods() if gang_id_of(p) == gang.id)
    waiting = sorted(key(p) for p in pending if gang_id_of(p) == gang.id)
    group = gang_groups({gang.id: gang})[gang.id]
    return {"name": gang.id, "waitTime": int(gang.wait_seconds * 1e9), "createTime": "0001-01-01T00:00:00Z",
            "mode": gang.mode, "gangMatchPolicy": gang.match_policy, "minRequiredNumber": gang.min_member,
            "totalChildrenNum": gang.total_number, "gangGroup": [g.id for g in group.gangs],
            "children": {k: {} for k in sorted(bound + waiting)}, "pendingChildren": {k: {} for k in waiting},
            "waitingForBindChildren": {}, "boundChildren": {k: {} for k in bound},
            "onceResourceSatisfied": len(bound) >= gang.min_member, "gangGroupInfo": None,
            "gangFrom": "GangFromPodGroupCrd" if gang.from_podgroup else "GangFromPodAnnotation",
            "hasGangInit": True}


class _Handler(BaseHTTPRequestHandler):
    server: DiagnosisServer
    protocol_version = "HTTP/1.1"

    def _serve(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or "0")
        body = self.rfile.read(min(max(length, 0), 1 << 20)) if length > 0 else b""
        try:
            status, ctype, payload = self.server.api.serve(method, self.path, body)
        except Exception as e:  # a bug in a state dump must not take the server down
            log.exception("diagnosis %s %s", method, self.path)
            status, ctype, payload = 500, "application/json", {"message": f"internal error: {e}"}
        send(self, status, ctype, payload)

    def do_GET(self) -> None:
        if self.path in ("/healthz", "/readyz"):
            send(self, 200, "text/plain", "ok")
        else:
            self._serve("GET")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)


def send(handler: BaseHTTPRequestHandler, status: int, ctype: str, payload: object) -> None:
    data = (payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", ctype)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class DiagnosisServer(TLSHTTPServer):
    def __init__(self, address: tuple[str, int], api: DiagnosisAPI) -> None:
        super().__init__(address, _Handler)
        self.api = api

    def start(self) -> threading.Thread:
        t = threading.Thread(target=self.serve_forever, name="diagnosis", daemon=True)
        t.start()
        return t
