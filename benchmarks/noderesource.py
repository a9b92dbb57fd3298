"""The noderesource loop at 1 000 nodes: one full pass (every node gets its GPU, RDMA, batch and mid resources) and
one steady pass with nothing changed, which must write nothing.

The API server is an in-process HTTP double (stdlib ThreadingHTTPServer, real sockets and JSON): paged lists of
1 000 Nodes, 8 000 Pods, 1 000 NodeMetrics and 1 000 Device CRs (our agent's 8-GPU + 4-RDMA l20-pcie node), the
`slo-controller-config` ConfigMap with colocation on, and merge patches of nodes and their status. The client's
limiter is off so the pass measures our work and the I/O ("our CPU": the loop's thread, not the double's); the
peer in the same run is listing those objects alone (the floor any reconcile pays). At koord-manager's 30
requests/s the first pass's writes are paced over a minute: printed beside, computed from the writes counted.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from apis.client.kubeapi import KubeClient, KubeConfig, TokenBucket
from scheduler.noderesource.controller import DEVICES, NODEMETRICS, NODES, PODS, NodeResourceController

NODES_N = 1000
PODS_PER_NODE = 8
PASS_TARGET_S = 30.0  # a pass must fit in the loop's default interval
RATE_QPS = 30.0


def _agent_device() -> dict[str, Any]:
    """The Device CR our agent reports for examples/nodes/l20-pcie (as tests/conftest.py agent_device builds it)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from conftest import agent_device  # type: ignore[import-not-found]

    doc: dict[str, Any] = agent_device("l20-pcie")
    return doc


def _objects(now: float) -> dict[str, list[dict[str, Any]]]:
    device = _agent_device()
    updated = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
    nodes, pods, metrics, devices = [], [], [], []
    for i in range(NODES_N):
        name = f"node-{i:04d}"
        nodes.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {}},
                      "status": {"capacity": {"cpu": "96", "memory": "768Gi", "pods": "110"},
                                 "allocatable": {"cpu": "94", "memory": "760Gi", "pods": "110"}}})
        d = copy.deepcopy(device)
        d["metadata"]["name"] = name
        devices.append(d)
        pod_metrics = []
        for k in range(PODS_PER_NODE):
            pname = f"p-{i:04d}-{k}"
            labels = {"koordinator.sh/qosClass": "BE" if k % 4 == 3 else "LS"}
            pods.append({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": pname, "namespace": "bench", "labels": labels},
                         "spec": {"nodeName": name, "containers": [{"name": "c", "resources": {
                             "requests": {"cpu": "4", "memory": "16Gi"}}}]},
                         "status": {"phase": "Running"}})
            pod_metrics.append({"namespace": "bench", "name": pname,
                                "podUsage": {"resources": {"cpu": f"{1000 + 100 * k}m", "memory": "6Gi"}}})
        metrics.append({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": name},
                        "status": {"updateTime": updated, "podsMetric": pod_metrics,
                                   "nodeMetric": {"nodeUsage": {"resources": {"cpu": "20", "memory": "100Gi"}},
                                                  "systemUsage": {"resources": {"cpu": "2", "memory": "20Gi"}}},
                                   "prodReclaimableMetric": {"resource": {"resources": {"cpu": "10",
                                                                                        "memory": "40Gi"}}}}})
    return {NODES: nodes, PODS: pods, NODEMETRICS: metrics, DEVICES: devices}


def _merge(dst: dict[str, Any], patch: dict[str, Any]) -> None:
    for k, v in patch.items():
        if v is None:
            dst.pop(k, None)
        elif isinstance(v, dict) and isinstance(dst.get(k), dict):
            _merge(dst[k], v)
        else:
            dst[k] = v


class ApiDouble:
    """Paged lists and merge patches over the objects above; counts the writes."""

    def __init__(self, objects: dict[str, list[dict[str, Any]]], config_map: dict[str, Any]) -> None:
        self.objects = objects
        self.nodes = {n["metadata"]["name"]: n for n in objects[NODES]}
        self.config_map = config_map
        self.writes = 0
        self.lock = threading.Lock()

    def handle(self, method: str, url: str, body: bytes) -> tuple[int, bytes]:
        parsed = urllib.parse.urlsplit(url)
        path, query = parsed.path, urllib.parse.parse_qs(parsed.query)
        if method == "GET" and path.endswith("/configmaps/slo-controller-config"):
            return 200, json.dumps(self.config_map).encode()
        if method == "GET" and path in self.objects:
            items = self.objects[path]
            limit = int(query.get("limit", ["500"])[0])
            start = int(query.get("continue", ["0"])[0] or 0)
            page = items[start:start + limit]
            cont = str(start + limit) if start + limit < len(items) else ""
            with self.lock:
                doc = json.dumps({"kind": "List", "metadata": {"continue": cont, "resourceVersion": "1"},
                                  "items": page})
            return 200, doc.encode()
        if method == "PATCH" and path.startswith(NODES + "/"):
            name = path[len(NODES) + 1:].removesuffix("/status")
            node = self.nodes.get(name)
            if node is None:
                return 404, b'{"kind":"Status","code":404}'
            with self.lock:
                _merge(node, json.loads(body))
                self.writes += 1
            return 200, json.dumps(node).encode()
        return 404, b'{"kind":"Status","code":404}'


def _serve(api: ApiDouble) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # else each reply waits out a delayed ACK (40 ms)

        def _do(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            code, out = api.handle(self.command, self.path, body)
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        do_GET = do_PATCH = _do

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__).parse_args(argv)
    now = time.time()
    api = ApiDouble(_objects(now), {"apiVersion": "v1", "kind": "ConfigMap",
                                    "metadata": {"name": "slo-controller-config", "namespace": "koordinator-system"},
                                    "data": {"colocation-config": json.dumps({"enable": True,
                                                                              "midUnallocatedPercent": 10})}})
    server = _serve(api)
    try:
        config = KubeConfig(server=f"http://127.0.0.1:{server.server_address[1]}")
        client = KubeClient(config, limiter=TokenBucket(0, 1))
        ctl = NodeResourceController(client)

        list_s = float("inf")
        for _ in range(2):  # the second, warm (connection, caches), is the floor
            started = time.perf_counter()
            for path in (NODES, PODS, NODEMETRICS, DEVICES):
                ctl._list(path)
            list_s = min(list_s, time.perf_counter() - started)

        started, cpu0 = time.perf_counter(), time.thread_time()
        full = ctl.run_once()
        full_s, full_cpu = time.perf_counter() - started, time.thread_time() - cpu0
        full_writes = api.writes

        started, cpu0 = time.perf_counter(), time.thread_time()
        steady = ctl.run_once()
        assert steady.errors == 0
        steady_s, steady_cpu = time.perf_counter() - started, time.thread_time() - cpu0
        steady_writes = api.writes - full_writes
    finally:
        server.shutdown()

    sample = api.nodes["node-0000"]["status"]["allocatable"]
    ok_full = full_writes == 2 * NODES_N and full.errors == 0 and "kubernetes.io/batch-cpu" in sample and \
        "koordinator.sh/gpu-core" in sample
    rows = [
        ("list Nodes, Pods, NodeMetrics, Devices (peer)", f"{list_s:.2f} s", "", ""),
        (f"full pass, {NODES_N} nodes (wall / our CPU)", f"{full_s:.2f} / {full_cpu:.2f} s",
         f"< {PASS_TARGET_S:.0f} s", "ok" if full_s < PASS_TARGET_S else "MISS"),
        ("  writes (status + GPU labels)", str(full_writes), str(2 * NODES_N), "ok" if ok_full else "MISS"),
        (f"  paced at {RATE_QPS:.0f} req/s (koord-manager's rate)", f"{full_writes / RATE_QPS:.0f} s", "", ""),
        ("steady pass, nothing changed (wall / our CPU)", f"{steady_s:.2f} / {steady_cpu:.2f} s",
         f"< {PASS_TARGET_S:.0f} s", "ok" if steady_s < PASS_TARGET_S else "MISS"),
        ("  writes", str(steady_writes), "0", "ok" if steady_writes == 0 else "MISS"),
        ("steady pass / listing alone", f"{steady_s / list_s:.2f}×", "", ""),
    ]
    print(f"noderesource loop: {NODES_N} nodes × 8 GPUs + 4 RDMA, {NODES_N * PODS_PER_NODE} pods, colocation on")
    w = max(len(r[0]) for r in rows)
    print(f"{'step':<{w}}  {'value':>16}  {'target':>7}  result")
    for r in rows:
        print(f"{r[0]:<{w}}  {r[1]:>16}  {r[2]:>7}  {r[3]}")
    return 0 if ok_full and steady_writes == 0 and full_s < PASS_TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
