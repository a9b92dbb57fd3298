"""The proxy's gRPC server (grpcio, asyncio API): v1 List, Get and GetAllocatableResources and v1alpha1 List on its
socket, answered from kubelet's socket plus the pods' device allocations.

Messages stay encoded where nothing is added: requests are forwarded as bytes, GetAllocatableResources comes back as
kubelet's bytes, and a merged List is encoded once per (kubelet answer, pod list) and then served as bytes. A pod
kubelet lists that the agent's pod list lacks (a pod admitted since the last pod sync: the usual case for a CNI ADD)
or has as being deleted (a StatefulSet pod replaced under the same name) makes the proxy ask for a pod sync first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import grpc
import grpc.aio

from koordlet.pb import podresources_v1_pb2 as v1
from koordlet.podresources import listen
from koordlet.podresources.kubelet import ALLOCATABLE, GET, LIST, KubeletClient, KubeletError, ListAnswer
from koordlet.podresources.merge import PodKey, Problem, index_pods, merge_get, merge_list, terminating, to_v1alpha1
from koordlet.podresources.metrics import ProxyMetrics
from koordlet.podresources.ratelimit import TokenBucket
from koordlet.states.model import PodMeta

log = logging.getLogger(__name__)

V1 = "/v1.PodResourcesLister/"
V1ALPHA1_LIST = "/v1alpha1.PodResourcesLister/List"
# kubernetes/kubernetes:pkg/kubelet/apis/podresources/grpc/ratelimit.go answers its limiter's refusals so
RATE_LIMITED = "rejected by rate limit"
# A pod kubelet lists but the pod list lacks is looked up again (one pod sync) at most this often.
REFRESH_RETRY_SECONDS = 5.0

Handler = Callable[[bytes, grpc.aio.ServicerContext[bytes, bytes]], Awaitable[bytes]]


@dataclass
class _Merged:
    key: tuple[int, int]  # (kubelet answer version, id of the pod list)
    v1: bytes
    pods: Sequence[PodMeta]  # held so that id() in the key stays this list's
    v1alpha1: bytes | None = None


@dataclass
class _Index:
    pods: Sequence[PodMeta]
    by_key: dict[PodKey, PodMeta] = field(default_factory=dict)


class ProxyServer:
    """Serves on `socket_path` until stopped:

        server = ProxyServer(path, KubeletClient(kubelet_socket), agent.state.pods)
        await server.start(); ...; await server.stop()
    """

    def __init__(self, socket_path: str, kubelet: KubeletClient, pods: Callable[[], Sequence[PodMeta]], *,
                 limiter: TokenBucket | None = None, metrics: ProxyMetrics | None = None,
                 report: Callable[[list[Problem]], None] | None = None,
                 refresh_pods: Callable[[], Awaitable[None]] | None = None, refresh_timeout: float = 3.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.socket_path = socket_path
        self.kubelet = kubelet
        self.pods = pods
        self.limiter = limiter or TokenBucket()
        self.metrics = metrics or kubelet.metrics
        self.report = report
        self.refresh_pods = refresh_pods
        self.refresh_timeout = refresh_timeout
        self.clock = clock
        self._server: grpc.aio.Server | None = None
        self._ident: tuple[int, int] | None = None
        self._merged: _Merged | None = None
        self._index: _Index | None = None
        self._merging = asyncio.Lock()
        self._looked_up: dict[PodKey, float] = {}  # pods a sync was asked for, when
        self._reported: set[Problem] = set()
        self._handlers: dict[str, grpc.RpcMethodHandler[bytes, bytes]] = {
            V1 + LIST: self._handler(LIST, self._list),
            V1 + GET: self._handler(GET, self._get),
            V1 + ALLOCATABLE: self._handler(ALLOCATABLE, self._allocatable),
            V1ALPHA1_LIST: self._handler("v1alpha1.List", self._list_v1alpha1),
        }

    # -- lifecycle ---------------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Listen on the socket; SocketUnusable (or OSError) when that cannot be done."""
        listen.prepare(self.socket_path)
        server = grpc.aio.server(options=(("grpc.so_reuseport", 0),))
        server.add_generic_rpc_handlers((_Routes(self._handlers),))
        try:
            server.add_insecure_port(f"unix:{self.socket_path}")
        except RuntimeError as e:
            raise listen.SocketUnusable(f"cannot listen on {self.socket_path}: {e}") from None
        try:
            self._ident = listen.bound(self.socket_path)  # before start(): nobody connects to it with wider rights
            await server.start()
        except BaseException:
            await server.stop(0)
            raise
        self._server = server
        self.metrics.serving.set(1)
        log.info("PodResources proxy serving on %s in front of %s", self.socket_path, self.kubelet.socket_path)

    async def run(self, stop: asyncio.Event, *, retry_cap: float = 30.0, check_every: float = 5.0) -> None:
        """Serve until `stop` is set. A socket that cannot be had (a live server holds it, a file that is not a
        socket is there) is retried with backoff; a socket file removed under us is bound again. Never raises: the
        agent goes on without its proxy, as it goes on without kubelet."""
        attempt, problem = 0, ""
        try:
            while not stop.is_set():
                if self._server is None:
                    try:
                        await self.start()
                        attempt, problem = 0, ""
                    except Exception as e:  # SocketUnusable, OSError, or anything gRPC raises at start
                        await self.stop(grace=0)
                        if str(e) != problem:
                            log.error("PodResources proxy not serving: %s; retrying (up to every %.0fs)", e,
                                      retry_cap)
                            problem = str(e)
                        await _sleep(stop, min(2.0 ** attempt, retry_cap))
                        attempt += 1
                        continue
                await _sleep(stop, check_every)
                if self._server is not None and not stop.is_set() and not self.socket_present:
                    log.warning("PodResources proxy: %s was removed or replaced; listening again", self.socket_path)
                    await self.stop(grace=0.5)
        finally:
            await self.stop()
            await self.kubelet.close()

    @property
    def socket_present(self) -> bool:
        """Whether the socket file is still the one we bound (someone may have removed the directory's contents)."""
        return self._ident is not None and listen.identity(self.socket_path) == self._ident

    async def stop(self, grace: float = 1.0) -> None:
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace)
        listen.remove_if_ours(self.socket_path, self._ident)
        self._ident = None
        self.metrics.serving.set(0)

    # -- handlers ----------------------------------------------------------------------------------------------
    def _handler(self, method: str, fn: Callable[[bytes], Awaitable[bytes]]) -> grpc.RpcMethodHandler[bytes, bytes]:
        async def handle(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
            started = time.perf_counter()
            if not self.limiter.allow():
                self.metrics.request(method, "RESOURCE_EXHAUSTED", time.perf_counter() - started)
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, RATE_LIMITED)
            try:
                answer = await fn(request)
            except KubeletError as e:
                self.metrics.request(method, e.code.name, time.perf_counter() - started)
                await context.abort(e.code, e.message)
            except Exception as e:  # a bug here must cost one answer, never the agent
                log.exception("PodResources proxy: %s failed", method)
                self.metrics.request(method, "INTERNAL", time.perf_counter() - started)
                await context.abort(grpc.StatusCode.INTERNAL, f"koordlet PodResources proxy: {e}")
            self.metrics.request(method, "OK", time.perf_counter() - started)
            return answer

        return grpc.unary_unary_rpc_method_handler(handle)  # no (de)serializers: bytes in, bytes out

    async def _list(self, request: bytes) -> bytes:
        return (await self._merged_list(await self.kubelet.list())).v1

    async def _list_v1alpha1(self, request: bytes) -> bytes:
        merged = await self._merged_list(await self.kubelet.list())
        if merged.v1alpha1 is None:
            merged.v1alpha1 = to_v1alpha1(merged.v1)
        return merged.v1alpha1

    async def _allocatable(self, request: bytes) -> bytes:
        return await self.kubelet.call(ALLOCATABLE, request)

    async def _get(self, request: bytes) -> bytes:
        data = await self.kubelet.call(GET, request)
        response = v1.GetPodResourcesResponse.FromString(data)
        entry = response.pod_resources
        await self._looked_up_again([(entry.namespace, entry.name)], self._pod_index().by_key)
        merged, problems = merge_get(response, self._pod_index().by_key)
        self._report(problems, prune=False)
        return merged.SerializeToString()

    # -- List merge, cached ------------------------------------------------------------------------------------
    async def _merged_list(self, answer: ListAnswer) -> _Merged:
        merged = self._merged
        if merged is not None and merged.key == (answer.version, id(self.pods())):
            return merged
        async with self._merging:  # one merge per change, however many callers are waiting for it
            merged = self._merged
            if merged is not None and merged.key == (answer.version, id(self.pods())):
                return merged
            response = v1.ListPodResourcesResponse.FromString(answer.data)
            keys = [(e.namespace, e.name) for e in response.pod_resources]
            await self._looked_up_again(keys, self._pod_index().by_key)
            index = self._pod_index()
            out, problems = merge_list(response, index.by_key)
            self._report(problems, prune=True)
            self._looked_up = {k: t for k, t in self._looked_up.items() if k in set(keys)}
            merged = self._merged = _Merged((answer.version, id(index.pods)), out.SerializeToString(), index.pods)
            return merged

    def _pod_index(self) -> _Index:
        pods = self.pods()
        index = self._index
        if index is None or index.pods is not pods:
            index = self._index = _Index(pods, index_pods(pods))
        return index

    async def _looked_up_again(self, keys: Sequence[PodKey], known: dict[PodKey, PodMeta]) -> bool:
        """Ask for a pod sync when kubelet names a pod the pod list lacks or has as being deleted (at most once per
        pod every REFRESH_RETRY_SECONDS, so a pod no source knows does not cost a sync per request)."""
        if self.refresh_pods is None:
            return False
        now = self.clock()
        wanted = [k for k in keys if (k not in known or terminating(known[k]))
                  and now - self._looked_up.get(k, -REFRESH_RETRY_SECONDS) >= REFRESH_RETRY_SECONDS]
        if not wanted:
            return False
        for k in wanted:
            self._looked_up[k] = now
        try:
            await asyncio.wait_for(self.refresh_pods(), self.refresh_timeout)
        except TimeoutError:
            log.warning("PodResources proxy: the pod sync asked for %s/%s did not finish within %.0fs; answering "
                        "with the pods known", wanted[0][0], wanted[0][1], self.refresh_timeout)
        return True

    def _report(self, problems: list[Problem], *, prune: bool) -> None:
        """Report each problem once while it lasts (a List merge prunes the ones gone; a Get only adds)."""
        fresh = [p for p in problems if p not in self._reported]
        if prune:
            self._reported = set(problems)
        else:
            self._reported.update(fresh)
        if fresh and self.report is not None:
            try:
                self.report(fresh)
            except Exception:  # reporting must not cost the answer
                log.exception("PodResources proxy: reporting %d problems failed", len(fresh))


async def _sleep(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


class _Routes(grpc.GenericRpcHandler):
    def __init__(self, handlers: dict[str, grpc.RpcMethodHandler[bytes, bytes]]) -> None:
        self.handlers = handlers

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler[bytes, bytes] | None:
        return self.handlers.get(handler_call_details.method)  # None: UNIMPLEMENTED, as any gRPC server answers
