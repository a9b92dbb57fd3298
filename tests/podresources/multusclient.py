"""A client that does what Multus does with PodResources (spec §4; k8snetworkplumbingwg/multus-cni
pkg/kubeletclient/kubeletclient.go, pkg/k8sclient/k8sclient.go, pkg/types/conf.go), restated for the tests."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import grpc
import grpc.aio

from koordlet.pb import podresources_v1_pb2 as v1

MAX_RECEIVE = 16 * 1024 * 1024


@dataclass
class ResourceInfo:
    device_ids: list[str] = field(default_factory=list)
    index: int = 0


async def list_once(socket_path: str, timeout: float = 10.0) -> v1.ListPodResourcesResponse:
    """One List on the socket, as GetResourceClient("") + GetPodResourceMap do (16 MiB max receive)."""
    async with grpc.aio.insecure_channel(f"unix:{socket_path}",
                                         options=(("grpc.max_receive_message_length", MAX_RECEIVE),)) as ch:
        call = ch.unary_unary("/v1.PodResourcesLister/List",
                              request_serializer=v1.ListPodResourcesRequest.SerializeToString,
                              response_deserializer=v1.ListPodResourcesResponse.FromString)
        response: v1.ListPodResourcesResponse = await call(v1.ListPodResourcesRequest(), timeout=timeout)
        return response


def resource_map(response: v1.ListPodResourcesResponse, namespace: str, name: str) -> dict[str, ResourceInfo]:
    """The pod's entry by name and namespace; device ids concatenated per resource across all containers, each list
    sorted (types.SortDeviceIDs)."""
    out: dict[str, ResourceInfo] = {}
    for pr in response.pod_resources:
        if pr.name != name or pr.namespace != namespace:
            continue
        for c in pr.containers:
            for d in c.devices:
                out.setdefault(d.resource_name, ResourceInfo()).device_ids.extend(d.device_ids)
    for info in out.values():
        info.device_ids.sort()
    return out


def delegates(rmap: dict[str, ResourceInfo], networks: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """For each network (NAD resourceName annotation, delegate CNI config) in the pod's order: the next device id of
    that resource as top-level `deviceID` and `pciBusID` of the delegate's JSON (delegateAddDeviceID)."""
    out = []
    for resource_name, conf in networks:
        conf = json.loads(json.dumps(conf))
        info = rmap.get(resource_name)
        if resource_name and info is not None and len(info.device_ids) > info.index:
            device_id = info.device_ids[info.index]
            info.index += 1
            conf["deviceID"] = device_id
            conf["pciBusID"] = device_id
        out.append(conf)
    return out
