"""PodResources List with 250 pods (mixed GPU/RDMA allocations): through the proxy beside the same call straight to
the fake kubelet behind it, in the same run. Each of the three (client, proxy, kubelet) is its own process, as on a
node; the client decodes every answer, as Multus does.

Targets (issue #10): proxy p99 < 5 ms, and proxy ≤ 1.5× direct. The fake kubelet answers with bytes encoded once (a
faster kubelet than the real one, which builds its answer per call): the strictest baseline. The proxy runs with its
defaults (List answers reused for 100 ms) except its caller limiter, which the throughput rows show both ways:
off (as the fake kubelet has none), and kubelet's 100 qps / burst 10, where the rest is RESOURCE_EXHAUSTED.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import grpc
import grpc.aio

from apis.extension.device_allocated import ANNOTATION_DEVICE_ALLOCATED
from koordlet.daemon import settle_heap
from koordlet.health import Health
from koordlet.host.driver import CgroupDriver
from koordlet.pb import podresources_v1_pb2 as v1
from koordlet.states.pods import pod_meta

PODS = 250
LIST = "/v1.PodResourcesLister/List"
CALLS = "/bench/Calls"  # the fake kubelet's List count, for the table
ROUNDS, PER_ROUND = 6, 500
CONCURRENCY, SUSTAIN_S = 8, 3.0
P99_TARGET_MS, RATIO_TARGET = 5.0, 1.5


def node() -> tuple[list[dict[str, Any]], v1.ListPodResourcesResponse]:
    """250 pods of three containers: a quarter with a GPU, a quarter GPU + an RDMA VF pair, a quarter a whole RDMA PF,
    a quarter nothing; kubelet lists each with exclusive CPUs and some with a device-plugin device of its own."""
    manifests, response = [], v1.ListPodResourcesResponse()
    for i in range(PODS):
        pfx = f"0000:{0x10 + i // 8:02x}:00"
        alloc: dict[str, Any] | None = [
            {"gpu": [{"minor": i % 8, "id": f"GPU-{i:08x}-1d2b-4c3a-9e8f-7a6b5c4d3e2f"}]},
            {"gpu": [{"minor": i % 8, "id": f"GPU-{i:08x}-1d2b-4c3a-9e8f-7a6b5c4d3e2f"}],
             "rdma": [{"minor": 0, "id": f"{pfx}.0", "resources": {"koordinator.sh/rdma": "1"},
                       "extension": {"vfs": [{"minor": -1, "busID": f"{pfx}.{2 + i % 6}"},
                                             {"minor": -1, "busID": f"{pfx}.1"}]}}]},
            {"rdma": [{"minor": 0, "id": f"{pfx}.0"}]},
            None][i % 4]
        annotations = {} if alloc is None else {ANNOTATION_DEVICE_ALLOCATED: json.dumps(alloc)}
        meta: dict[str, Any] = {"name": f"worker-{i}", "namespace": "training", "uid": f"uid-{i:04d}",
                                "annotations": annotations}
        manifests.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                          "spec": {"containers": [{"name": c} for c in ("main", "sidecar", "logs")]},
                          "status": {"phase": "Running"}})
        entry = response.pod_resources.add(name=f"worker-{i}", namespace="training")
        for j, c in enumerate(("main", "sidecar", "logs")):
            cr = entry.containers.add(name=c, cpu_ids=[4 * j + k for k in range(4)] if j == 0 else [])
            if j == 0 and i % 5 == 0:
                cr.devices.add(resource_name="example.com/fpga", device_ids=[f"fpga-{i}"],
                               topology=v1.TopologyInfo(nodes=[v1.NUMANode(ID=i % 2)]))
    return manifests, response


# -- the two servers, each in its own process ------------------------------------------------------------------
async def serve_kubelet(socket_path: str) -> None:
    data = node()[1].SerializeToString()
    calls = 0

    async def list_(request: bytes, context: Any) -> bytes:
        nonlocal calls
        calls += 1
        return data

    async def count(request: bytes, context: Any) -> bytes:
        return str(calls).encode()

    handlers: dict[str, grpc.RpcMethodHandler[bytes, bytes]] = {
        LIST: grpc.unary_unary_rpc_method_handler(list_), CALLS: grpc.unary_unary_rpc_method_handler(count)}

    class Routes(grpc.GenericRpcHandler):
        def service(self, details: grpc.HandlerCallDetails) -> Any:
            return handlers.get(details.method)

    server = grpc.aio.server()
    server.add_generic_rpc_handlers((Routes(),))
    server.add_insecure_port(f"unix:{socket_path}")
    await server.start()
    await _until_terminated()
    await server.stop(0)


async def serve_proxy(socket_path: str, kubelet_socket: str, qps: float) -> None:
    from koordlet.podresources.kubelet import KubeletClient
    from koordlet.podresources.ratelimit import TokenBucket
    from koordlet.podresources.server import ProxyServer

    health = Health()
    pods = [pod_meta(m, CgroupDriver.SYSTEMD, health) for m in node()[0]]
    settle_heap(full=True)  # as the daemon does after each pod change: the cyclic GC no longer walks the pods
    server = ProxyServer(socket_path, KubeletClient(kubelet_socket), lambda: pods, limiter=TokenBucket(qps, 10))
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await server.run(stop)


async def _until_terminated() -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()


# -- the client -------------------------------------------------------------------------------------------------
def latencies(channel: grpc.Channel, n: int) -> list[float]:
    call = channel.unary_unary(LIST, request_serializer=v1.ListPodResourcesRequest.SerializeToString,
                               response_deserializer=v1.ListPodResourcesResponse.FromString)
    out = []
    request = v1.ListPodResourcesRequest()
    for _ in range(n):
        t = time.perf_counter()
        response = call(request, timeout=10)
        out.append(time.perf_counter() - t)
        assert len(response.pod_resources) == PODS
    return out


async def sustained(socket_path: str) -> tuple[float, float]:
    """OK answers/s and refusals/s with CONCURRENCY callers for SUSTAIN_S seconds."""
    ok = refused = 0
    async with grpc.aio.insecure_channel(f"unix:{socket_path}") as ch:
        call = ch.unary_unary(LIST, request_serializer=v1.ListPodResourcesRequest.SerializeToString,
                              response_deserializer=v1.ListPodResourcesResponse.FromString)
        end = time.perf_counter() + SUSTAIN_S

        async def worker() -> None:
            nonlocal ok, refused
            while time.perf_counter() < end:
                try:
                    await call(v1.ListPodResourcesRequest(), timeout=10)
                    ok += 1
                except grpc.aio.AioRpcError as e:
                    if e.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                        raise
                    refused += 1
                    await asyncio.sleep(0.001)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        elapsed = time.perf_counter() - started
    return ok / elapsed, refused / elapsed


def _spawn(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "benchmarks.podresources", *args])


def _wait(path: str) -> None:
    for _ in range(600):
        if os.path.exists(path):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{path} did not appear")


def _kubelet_calls(kubelet: str) -> int:
    with grpc.insecure_channel(f"unix:{kubelet}") as ch:
        call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = ch.unary_unary(CALLS)
        return int(call(b"", timeout=5))


def _pct(samples: list[float], q: int) -> float:
    return statistics.quantiles(samples, n=100)[q - 1] * 1000 if q < 100 else max(samples) * 1000


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="prbench", dir="/tmp") as d:
        kubelet, proxy, limited = (os.path.join(d, n) for n in ("kubelet.sock", "proxy.sock", "limited.sock"))
        procs = [_spawn("--kubelet", kubelet)]
        try:
            _wait(kubelet)
            procs += [_spawn("--proxy", proxy, "--upstream", kubelet, "--qps", "0"),
                      _spawn("--proxy", limited, "--upstream", kubelet, "--qps", "100")]
            _wait(proxy)
            _wait(limited)
            size = len(node()[1].SerializeToString())
            samples: dict[str, list[float]] = {"proxy": [], "direct": []}
            with grpc.insecure_channel(f"unix:{proxy}") as pch, grpc.insecure_channel(f"unix:{kubelet}") as dch:
                for ch in (pch, dch):
                    latencies(ch, 200)  # warm up: connections, the first merge
                before = _kubelet_calls(kubelet)
                t0 = time.perf_counter()
                for _ in range(ROUNDS):  # interleaved, so both see the same machine
                    samples["proxy"] += latencies(pch, PER_ROUND)
                    samples["direct"] += latencies(dch, PER_ROUND)
                window = time.perf_counter() - t0
                upstream = _kubelet_calls(kubelet) - before - ROUNDS * PER_ROUND  # the direct calls are counted too
            rates = {"proxy": asyncio.run(sustained(proxy)), "direct": asyncio.run(sustained(kubelet)),
                     "limited": asyncio.run(sustained(limited))}
        finally:
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                p.wait(timeout=10)
    p50 = {k: _pct(v, 50) for k, v in samples.items()}
    p99 = {k: _pct(v, 99) for k, v in samples.items()}
    print(f"PodResources List, {PODS} pods × 3 containers ({size} B from kubelet), "
          f"{ROUNDS * PER_ROUND} sequential calls each, interleaved; {CONCURRENCY} concurrent callers for "
          f"{SUSTAIN_S:.0f} s")
    print(f"{'path':<44}{'p50 ms':>9}{'p99 ms':>9}{'req/s (sustained)':>19}{'refused/s':>11}")
    print(f"{'through the proxy (limiter off)':<44}{p50['proxy']:>9.3f}{p99['proxy']:>9.3f}"
          f"{rates['proxy'][0]:>19.0f}{rates['proxy'][1]:>11.0f}")
    print(f"{'straight to the fake kubelet':<44}{p50['direct']:>9.3f}{p99['direct']:>9.3f}"
          f"{rates['direct'][0]:>19.0f}{rates['direct'][1]:>11.0f}")
    print(f"{'through the proxy, 100 qps / burst 10':<44}{'':>9}{'':>9}{rates['limited'][0]:>19.0f}"
          f"{rates['limited'][1]:>11.0f}")
    r50, r99 = p50["proxy"] / p50["direct"], p99["proxy"] / p99["direct"]
    ok = p99["proxy"] < P99_TARGET_MS and r50 <= RATIO_TARGET and r99 <= RATIO_TARGET
    print(f"proxy / direct: p50 {r50:.2f}×, p99 {r99:.2f}×, req/s {rates['proxy'][0] / rates['direct'][0]:.2f}×; "
          f"kubelet List calls made by the proxy during the sequential runs: {upstream} in {window:.1f} s")
    print(f"targets: proxy p99 < {P99_TARGET_MS:.0f} ms, ≤ {RATIO_TARGET}× direct: {'ok' if ok else 'MISS'}")
    return 0 if ok else 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--kubelet")
    ap.add_argument("--proxy")
    ap.add_argument("--upstream")
    ap.add_argument("--qps", type=float, default=0.0)
    ns = ap.parse_args()
    if ns.kubelet:
        asyncio.run(serve_kubelet(ns.kubelet))
    elif ns.proxy:
        asyncio.run(serve_proxy(ns.proxy, ns.upstream, ns.qps))
    else:
        raise SystemExit(main())
