"""The proxy's client of kubelet's PodResources socket: one grpc.aio channel that reconnects by itself, List answers
shared between callers, and every kubelet failure turned into a status that names the socket.

A List answer is reused for callers that arrive within `max_age` of the moment its call was sent, and callers that
arrive while a call is under way share it; past half of `max_age` the next caller also sends a fresh call in the
background, so under load nobody waits and kubelet sees at most 2 / max_age calls a second (20 at the default
100 ms, against its limiter's 100 qps shared with every other client). `max_age=0` asks kubelet for every request
(concurrent ones still share a call that was sent after they arrived). Upstream (states_pod_resources.go) calls
kubelet once per request and dials once at start-up, exiting when the socket is missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc
import grpc.aio

from koordlet.podresources.metrics import ProxyMetrics

log = logging.getLogger(__name__)

SERVICE = "/v1.PodResourcesLister/"
LIST, GET, ALLOCATABLE = "List", "Get", "GetAllocatableResources"
# kubelet_resource_client.go (koordlet) and multus kubeletclient.go both allow 16 MiB answers
MAX_RECEIVE = 16 * 1024 * 1024
# Reconnect quickly after a kubelet restart (gRPC's defaults back off up to 120 s).
CHANNEL_OPTIONS = (
    ("grpc.max_receive_message_length", MAX_RECEIVE),
    ("grpc.enable_http_proxy", 0),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
)
# kubelet gone, restarting or too slow: the caller should retry, and the message names the socket
_UNAVAILABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}


class KubeletError(Exception):
    """kubelet's PodResources call failed; `code` and `message` are what the proxy answers."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class ListAnswer:
    data: bytes  # kubelet's ListPodResourcesResponse, encoded
    sent: float  # when the call that brought it was sent (the client's clock)
    version: int  # changes whenever `data` does


@dataclass(frozen=True)
class _Call:
    sent: float
    task: asyncio.Task[ListAnswer]


class KubeletClient:
    def __init__(self, socket_path: str, *, timeout: float = 5.0, max_age: float = 0.1,
                 metrics: ProxyMetrics | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self.max_age = max(max_age, 0.0)
        self.metrics = metrics or ProxyMetrics()
        self.clock = clock
        self._channel: grpc.aio.Channel | None = None
        self._stubs: dict[str, grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]] = {}
        self._latest: ListAnswer | None = None
        self._inflight: _Call | None = None
        self._version = 0
        self._failing = ""  # the last failure logged, "" while kubelet answers

    # -- List, shared ------------------------------------------------------------------------------------------
    async def list(self) -> ListAnswer:
        """kubelet's List answer from a call sent no earlier than `max_age` before this request; KubeletError."""
        asked = self.clock()
        how = ""
        while True:
            latest = self._latest
            if latest is not None and latest.sent >= asked - self.max_age:
                if self._inflight is None and self.clock() - latest.sent >= self.max_age / 2:
                    self._start()  # refresh ahead: the next callers find a newer answer without waiting
                self.metrics.cache(how or "hit")
                return latest
            call = self._inflight
            if call is None:
                call, how = self._start(), "miss"
            if call.sent >= asked - self.max_age:
                answer = await asyncio.shield(call.task)
                self.metrics.cache(how or "coalesced")
                return answer
            await asyncio.wait([call.task])  # sent too long before this request: wait for it, then ask anew

    def _start(self) -> _Call:
        sent = self.clock()
        call = _Call(sent, asyncio.ensure_future(self._fetch_list(sent)))
        self._inflight = call
        call.task.add_done_callback(lambda t: self._ended(call, t))
        return call

    def _ended(self, call: _Call, task: asyncio.Task[ListAnswer]) -> None:
        if self._inflight is call:
            self._inflight = None
        if not task.cancelled():
            task.exception()  # retrieved here: a background refresh may fail with nobody waiting

    async def _fetch_list(self, sent: float) -> ListAnswer:
        data = await self.call(LIST, b"")
        latest = self._latest
        if latest is not None and latest.data == data:
            answer = ListAnswer(latest.data, sent, latest.version)  # same bytes: the merge made of them stays
        else:
            self._version += 1
            answer = ListAnswer(data, sent, self._version)
        if latest is None or sent >= latest.sent:
            self._latest = answer
        return answer

    # -- one call ----------------------------------------------------------------------------------------------
    async def call(self, method: str, request: bytes) -> bytes:
        """One call of `method` with an encoded request; the encoded answer, or KubeletError."""
        stub = self._stubs.get(method)
        if stub is None:
            if self._channel is None:
                self._channel = grpc.aio.insecure_channel(f"unix:{self.socket_path}", options=CHANNEL_OPTIONS)
            stub = self._stubs[method] = self._channel.unary_unary(SERVICE + method)
        started = time.perf_counter()
        try:
            data = await stub(request, timeout=self.timeout)
        except grpc.aio.AioRpcError as e:
            self.metrics.upstream(method, e.code().name, time.perf_counter() - started)
            raise self._failed(e.code(), e.details() or "") from None
        self.metrics.upstream(method, "OK", time.perf_counter() - started)
        if self._failing:
            log.info("PodResources proxy: kubelet answers again on %s", self.socket_path)
            self._failing = ""
        return data

    def _failed(self, code: grpc.StatusCode, details: str) -> KubeletError:
        if code in _UNAVAILABLE:
            if not os.path.exists(self.socket_path):
                why = "does not exist (kubelet not running, or another --var-lib-kubelet-dir)"
            elif code == grpc.StatusCode.DEADLINE_EXCEEDED:
                why = f"did not answer within {self.timeout:g}s"
            else:
                why = f"is not answering ({details})"
            err = KubeletError(grpc.StatusCode.UNAVAILABLE, f"kubelet PodResources socket {self.socket_path} {why}")
            if err.message != self._failing:  # log when the failure changes, not on every request meanwhile
                log.warning("PodResources proxy: %s; answering UNAVAILABLE until it answers", err.message)
                self._failing = err.message
            return err
        # kubelet's own answer (its limiter, Get of an unknown pod, Get switched off): passed on, attributed
        log.debug("PodResources proxy: kubelet answered %s: %s", code.name, details)
        return KubeletError(code, f"kubelet PodResources socket {self.socket_path}: {details}")

    async def close(self) -> None:
        call = self._inflight
        if call is not None:
            call.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, KubeletError):
                await call.task
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
            self._stubs.clear()
