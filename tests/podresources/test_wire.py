"""Spec §7 item 16 on the wire: the List answer's bytes and gRPC message prefixes, captured between a client and the
proxy; the paths the proxy calls on kubelet."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from koordlet.pb import podresources_v1_pb2 as v1

from fakekubelet import LIST, entry, short_dir
from multusclient import list_once
from proxyharness import proxy

ITEM_16 = bytes.fromhex("0a 39 0a 01 70 12 07") + b"default" + bytes.fromhex("1a 2b 0a 04") + b"main" + \
    bytes.fromhex("12 23 0a 13") + b"koordinator.sh/rdma" + bytes.fromhex("12 0c") + b"0000:1f:00.2"


@pytest.fixture
def root() -> Any:
    with short_dir() as d:
        yield d


def test_item_16_encoding() -> None:
    msg = v1.ListPodResourcesResponse(pod_resources=[v1.PodResources(name="p", namespace="default", containers=[
        v1.ContainerResources(name="main", devices=[v1.ContainerDevices(resource_name="koordinator.sh/rdma",
                                                                       device_ids=["0000:1f:00.2"])])])])
    assert msg.SerializeToString() == ITEM_16
    assert len(ITEM_16) == 59


def _data_frames(stream: bytes, client: bool) -> list[bytes]:
    """Payloads of the HTTP/2 DATA frames in one direction of a connection."""
    if client:
        assert stream.startswith(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        stream = stream[24:]
    out = []
    while len(stream) >= 9:
        length = int.from_bytes(stream[:3], "big")
        kind, payload = stream[3], stream[9:9 + length]
        if kind == 0 and payload:
            out.append(payload)
        stream = stream[9 + length:]
    return out


async def test_item_16_on_the_wire(root: str) -> None:
    response = v1.ListPodResourcesResponse(pod_resources=[entry("p", containers=("main",))])
    response.pod_resources[0].containers[0].ClearField("cpu_ids")
    response.pod_resources[0].containers[0].devices.add(resource_name="koordinator.sh/rdma",
                                                        device_ids=["0000:1f:00.2"])
    sent, received = bytearray(), bytearray()

    async with proxy(root, [], response) as h:
        async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            up_reader, up_writer = await asyncio.open_unix_connection(h.socket)

            async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, seen: bytearray) -> None:
                while data := await src.read(65536):
                    seen += data
                    dst.write(data)
                    await dst.drain()
                dst.close()

            await asyncio.gather(pump(reader, up_writer, sent), pump(up_reader, writer, received),
                                 return_exceptions=True)

        relay_path = os.path.join(root, "relay.sock")
        server = await asyncio.start_unix_server(relay, relay_path)
        async with server:
            got = await list_once(relay_path)
        assert got == response
    assert bytes.fromhex("00 00 00 00 00") in _data_frames(bytes(sent), client=True)  # the empty List request
    assert bytes.fromhex("00 00 00 00 3b") + ITEM_16 in _data_frames(bytes(received), client=False)
    assert h.kubelet.calls == {LIST: 1}  # /v1.PodResourcesLister/List on kubelet's socket
