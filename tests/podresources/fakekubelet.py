"""A fake kubelet PodResourcesLister (grpcio asyncio server, the same protos) on a real Unix socket, and helpers to
build kubelet's answers and pods with allocations."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import grpc
import grpc.aio

from apis.extension.device_allocated import ANNOTATION_DEVICE_ALLOCATED
from koordlet.pb import podresources_v1_pb2 as v1

LIST = "/v1.PodResourcesLister/List"
GET = "/v1.PodResourcesLister/Get"
ALLOCATABLE = "/v1.PodResourcesLister/GetAllocatableResources"


class FakeKubelet:
    """Serves `response` for List, the matching entry for Get (UNKNOWN "pod ... not found" otherwise, as kubelet
    answers), `allocatable` for GetAllocatableResources; counts calls and records the method paths seen."""

    def __init__(self, socket_path: str, response: v1.ListPodResourcesResponse | None = None) -> None:
        self.socket_path = socket_path
        self.response = response or v1.ListPodResourcesResponse()
        self.allocatable = v1.AllocatableResourcesResponse(
            devices=[v1.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=["GPU-a", "GPU-b"])],
            cpu_ids=[0, 1, 2, 3])
        self.calls: dict[str, int] = {}
        self.delay = 0.0
        self.get_unimplemented = False
        self._server: grpc.aio.Server | None = None
        self._encoded: tuple[int, bytes] | None = None

    def set_response(self, response: v1.ListPodResourcesResponse) -> None:
        self.response, self._encoded = response, None

    async def start(self) -> FakeKubelet:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((_Routes(self),))
        server.add_insecure_port(f"unix:{self.socket_path}")
        await server.start()
        self._server = server
        return self

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(0)
            self._server = None
        if os.path.exists(self.socket_path):  # kubelet removes its socket when it stops
            os.unlink(self.socket_path)

    def count(self, path: str) -> int:
        return self.calls.get(path, 0)

    async def _answer(self, path: str, request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        self.calls[path] = self.calls.get(path, 0) + 1
        if self.delay:
            await asyncio.sleep(self.delay)
        if path == LIST:
            if self._encoded is None or self._encoded[0] != id(self.response):
                self._encoded = (id(self.response), self.response.SerializeToString())
            return self._encoded[1]
        if path == ALLOCATABLE:
            return self.allocatable.SerializeToString()
        if self.get_unimplemented:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "PodResources API Get method disabled")
        req = v1.GetPodResourcesRequest.FromString(request)
        for entry in self.response.pod_resources:
            if (entry.name, entry.namespace) == (req.pod_name, req.pod_namespace):
                return v1.GetPodResourcesResponse(pod_resources=entry).SerializeToString()
        await context.abort(grpc.StatusCode.UNKNOWN, f"pod {req.pod_name} not found in {req.pod_namespace}")
        raise AssertionError("unreachable")


class _Routes(grpc.GenericRpcHandler):
    def __init__(self, kubelet: FakeKubelet) -> None:
        self.kubelet = kubelet

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler[bytes, bytes] | None:
        path = details.method
        if path not in (LIST, GET, ALLOCATABLE):
            return None

        async def handle(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
            return await self.kubelet._answer(path, request, context)

        return grpc.unary_unary_rpc_method_handler(handle)


@asynccontextmanager
async def running(socket_path: str, response: v1.ListPodResourcesResponse | None = None) -> AsyncIterator[FakeKubelet]:
    kubelet = await FakeKubelet(socket_path, response).start()
    try:
        yield kubelet
    finally:
        await kubelet.stop()


@contextmanager
def short_dir() -> Iterator[str]:
    """A directory with a short path: pytest's tmp_path plus a socket path can pass the 107-byte Unix limit."""
    d = tempfile.mkdtemp(prefix="pr", dir="/tmp")
    try:
        yield d
    finally:
        import shutil

        shutil.rmtree(d, ignore_errors=True)


def entry(name: str, namespace: str = "default", containers: tuple[str, ...] = ("main",),
          devices: dict[str, list[str]] | None = None) -> v1.PodResources:
    """One pod as kubelet lists it; `devices` (resource → ids) are kubelet's own, on the first container."""
    e = v1.PodResources(name=name, namespace=namespace)
    for i, c in enumerate(containers):
        cr = e.containers.add(name=c, cpu_ids=[2 * i, 2 * i + 1])
        if i == 0 and devices:
            for resource, ids in devices.items():
                cr.devices.add(resource_name=resource, device_ids=ids,
                               topology=v1.TopologyInfo(nodes=[v1.NUMANode(ID=0)]))
    return e


def pod(name: str, namespace: str = "default", allocation: Any = None, *, uid: str | None = None,
        raw_annotation: Any = None, deleting: bool = False) -> dict[str, Any]:
    """A Pod manifest; `allocation` is JSON-encoded into device-allocated, `raw_annotation` is used as is."""
    annotations: dict[str, Any] = {}
    if allocation is not None:
        annotations[ANNOTATION_DEVICE_ALLOCATED] = json.dumps(allocation)
    if raw_annotation is not None:
        annotations[ANNOTATION_DEVICE_ALLOCATED] = raw_annotation
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid or f"uid-{namespace}-{name}",
                            "annotations": annotations}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "main"}]}, "status": {"phase": "Running"}}


def rdma_vfs(pf: str, vfs: list[str], minor: int = 0) -> dict[str, Any]:
    return {"minor": minor, "id": pf, "resources": {"koordinator.sh/rdma": "1"},
            "extension": {"vfs": [{"minor": -1, "busID": vf} for vf in vfs]}}
