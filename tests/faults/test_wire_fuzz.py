"""Every wire decoder fed 10 000 generated inputs each (hypothesis): ttrpc and mux frames, NRI requests, kubelet's
PodResources answers, the annotations the agent decodes, and Pod objects. Each must answer or refuse in its
documented way — never raise anything else, never hang."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apis.core.errors import KoordletError
from apis.extension.device_allocated import ANNOTATION_DEVICE_ALLOCATED, decode_device_allocations
from apis.extension.resource_status import parse_cpuset, resource_status
from koordlet.health import Health
from koordlet.host.driver import CgroupDriver
from koordlet.host.paths import HostPaths
from koordlet.nri.mux import PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN, Mux
from koordlet.nri.ttrpc import REQUEST, RESPONSE, TtrpcClient, TtrpcServer, frame
from koordlet.pb import nri_pb2 as api
from koordlet.pb import podresources_v1_pb2 as v1
from koordlet.pb import ttrpc_pb2
from koordlet.podresources.merge import index_pods, merge_list
from koordlet.states.cpupools import decode_pools
from koordlet.states.kubeletcpu import parse_cpu_manager_state
from koordlet.states.pods import PodState

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "nri"))
from test_plugin_session import build_agent, create_request, pod_msg

N = 10_000  # generated inputs per decoder
FUZZ = settings(max_examples=N, deadline=None, database=None, derandomize=False,
                suppress_health_check=list(HealthCheck))
SVC = "koordlet.fuzz.Echo"
_TTRPC_HEADER = struct.Struct(">IIBB")
_MUX_HEADER = struct.Struct(">II")
_LOOP = asyncio.new_event_loop()


def _run(coro: Any) -> Any:
    return _LOOP.run_until_complete(asyncio.wait_for(coro, 5))  # a decoder that hangs fails the test


def _mutated(valid: bytes) -> st.SearchStrategy[bytes]:
    """A valid message with bytes flipped, cut short, or grown: what a broken or hostile peer sends."""
    flips = st.lists(st.tuples(st.integers(0, max(len(valid) - 1, 0)), st.integers(0, 255)), max_size=6)

    def apply(edit: tuple[list[tuple[int, int]], int, bytes]) -> bytes:
        changes, cut, tail = edit
        out = bytearray(valid)
        for i, b in changes:
            if out:
                out[i] = b
        return bytes(out[:cut]) + tail

    return st.tuples(flips, st.integers(0, len(valid)), st.binary(max_size=16)).map(apply)


def _ttrpc_frames() -> st.SearchStrategy[bytes]:
    request = ttrpc_pb2.Request(service=SVC, method="Echo", payload=b"x" * 8, timeout_nano=10**9).SerializeToString()
    data = st.one_of(st.binary(max_size=64), _mutated(request), st.just(request))
    one = st.builds(frame, st.integers(0, 2**32 - 1), st.sampled_from([REQUEST, RESPONSE, 0, 3, 255]), data)
    raw = st.builds(lambda n, s, t, f, d: _TTRPC_HEADER.pack(n, s, t, f) + d, st.integers(0, 2**32 - 1),
                    st.integers(0, 2**32 - 1), st.integers(0, 255), st.integers(0, 255), st.binary(max_size=32))
    return st.lists(st.one_of(one, raw), max_size=4).map(b"".join) | st.binary(max_size=200)


def _reader(data: bytes) -> asyncio.StreamReader:
    reader = asyncio.StreamReader(loop=_LOOP)
    reader.feed_data(data)
    reader.feed_eof()
    return reader


@FUZZ
@given(_ttrpc_frames())
def test_ttrpc_server_10000_streams(data: bytes) -> None:
    """Any byte stream from the runtime: the server ends at EOF without raising, and everything it sent back is a
    well-formed RESPONSE frame whose body decodes as a ttrpc Response."""
    sent: list[bytes] = []

    async def echo(payload: bytes, deadline: float | None) -> bytes:
        return payload

    async def send(b: bytes) -> None:
        sent.append(b)

    _run(TtrpcServer({SVC: {"Echo": echo}}).serve(_reader(data), send))
    for out in sent:
        length, _, msg_type, _ = _TTRPC_HEADER.unpack(out[:10])
        assert msg_type == RESPONSE and length == len(out) - 10
        ttrpc_pb2.Response.FromString(out[10:])


@FUZZ
@given(_ttrpc_frames())
def test_ttrpc_client_10000_streams(data: bytes) -> None:
    """Any byte stream as replies: the client's reader ends without raising and refuses later calls as closed."""
    client = TtrpcClient(_reader(data), lambda b: asyncio.sleep(0))
    _run(client.run())
    assert client.closed


def _mux_streams() -> st.SearchStrategy[bytes]:
    ids = st.sampled_from([0, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN, 7, 2**32 - 1])
    one = st.builds(lambda c, d: _MUX_HEADER.pack(c, len(d)) + d, ids, st.binary(max_size=64))
    lying = st.builds(lambda c, n, d: _MUX_HEADER.pack(c, n) + d, ids, st.integers(0, 2**32 - 1),
                      st.binary(max_size=32))
    return st.lists(st.one_of(one, lying), max_size=5).map(b"".join) | st.binary(max_size=200)


@pytest.fixture(scope="module")
def trunk_writer() -> Iterator[asyncio.StreamWriter]:
    """One real socket's writer for the muxes (each mux closes it when its trunk ends; closing again is a no-op)."""
    a, b = socket.socketpair()

    async def open_writer() -> asyncio.StreamWriter:
        return (await asyncio.open_connection(sock=a))[1]

    writer = _LOOP.run_until_complete(open_writer())
    yield writer
    writer.close()
    b.close()


@FUZZ
@given(data=_mux_streams())
def test_mux_10000_trunks(trunk_writer: asyncio.StreamWriter, data: bytes) -> None:
    """Any trunk bytes: the mux ends without raising, and its channels get exactly the payloads of complete frames
    addressed to them, then EOF."""

    async def through_the_mux() -> bytes:
        mux = Mux(_reader(data), trunk_writer)
        plugin_in, _ = mux.channel(PLUGIN_SERVICE_CONN)
        await mux.run()
        return await plugin_in.read()

    got = _run(through_the_mux())
    expected, rest = b"", data
    while len(rest) >= 8:
        conn, size = _MUX_HEADER.unpack(rest[:8])
        if size > 1 << 20 or len(rest) - 8 < size:
            break
        if conn == PLUGIN_SERVICE_CONN:
            expected += rest[8:8 + size]
        rest = rest[8 + size:]
    assert got == expected


_NRI_METHODS = {"CreateContainer": api.CreateContainerResponse, "UpdateContainer": api.UpdateContainerResponse,
                "StopContainer": api.StopContainerResponse, "Configure": api.ConfigureResponse,
                "Synchronize": api.SynchronizeResponse, "StateChange": api.Empty,
                "RunPodSandbox": api.Empty, "RemoveContainer": api.Empty}


@pytest.fixture(scope="module")
def nri_handlers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("nri-fuzz")
    agent = build_agent(HostPaths.under(str(root / "node")), root / "unused.sock")
    return dict(agent.plugin.methods())


def _nri_payloads() -> st.SearchStrategy[bytes]:
    annotations = {ANNOTATION_DEVICE_ALLOCATED: json.dumps({"gpu": [{"minor": 0, "resources": {
        "koordinator.sh/gpu-core": "100"}}]}), "koordinator.sh/qosClass": "BE"}
    valid = create_request(pod_msg(annotations=annotations)).SerializeToString()
    return st.one_of(st.binary(max_size=256), _mutated(valid))


@FUZZ
@given(method=st.sampled_from(sorted(_NRI_METHODS)), payload=_nri_payloads())
def test_nri_plugin_10000_requests(nri_handlers: dict[str, Any], method: str, payload: bytes) -> None:
    """Any request body for any method: answered (never an exception: a failed hook must not fail the container)
    with bytes that decode as that method's response."""
    reply = _run(nri_handlers[method](payload, None))
    _NRI_METHODS[method].FromString(reply)


def _pods_with_allocations() -> dict[tuple[str, str], Any]:
    state = PodState(CgroupDriver.CGROUPFS, Health())
    raw = []
    for i in range(3):
        alloc = {"gpu": [{"minor": i, "resources": {"koordinator.sh/gpu-core": "100"}}],
                 "rdma": [{"minor": 1, "resources": {"koordinator.sh/rdma": "1"},
                           "extension": {"vfs": [{"busID": f"0000:1f:00.{i + 2}"}]}}]}
        raw.append({"metadata": {"name": f"p{i}", "namespace": "ns", "uid": f"u{i}",
                                 "annotations": {ANNOTATION_DEVICE_ALLOCATED: json.dumps(alloc)}},
                    "spec": {"containers": [{"name": "main"}]},
                    "status": {"phase": "Running", "qosClass": "Burstable"}})
    state.update(raw)
    return index_pods(state.pods)


_PODS = _pods_with_allocations()


def _kubelet_answers() -> st.SearchStrategy[bytes]:
    valid = v1.ListPodResourcesResponse()
    for i in range(3):
        entry = valid.pod_resources.add(name=f"p{i}", namespace="ns")
        c = entry.containers.add(name="main")
        c.devices.add(resource_name="nvidia.com/gpu", device_ids=[f"GPU-{i}"])
    return st.one_of(st.binary(max_size=256), _mutated(valid.SerializeToString()))


@FUZZ
@given(_kubelet_answers())
def test_podresources_merge_10000_kubelet_answers(data: bytes) -> None:
    """Any bytes from kubelet: either not a ListPodResourcesResponse (the proxy answers kubelet's failure), or merged
    with our pods' allocations into an answer that serializes, kubelet's entries all kept."""
    try:
        answer = v1.ListPodResourcesResponse.FromString(data)
    except Exception:  # DecodeError: the proxy answers UNAVAILABLE, as it does for any kubelet failure
        return
    merged, problems = merge_list(answer, _PODS)
    assert len(merged.pod_resources) == len(answer.pod_resources)
    v1.ListPodResourcesResponse.FromString(merged.SerializeToString())
    assert all(p.pod and p.message for p in problems)  # each problem names its pod and says what is wrong


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                  max_size=4), max_leaves=12)
_TEXT = st.one_of(st.text(max_size=64), _JSON.map(json.dumps), st.from_regex(r"[0-9,\-\s]{0,20}", fullmatch=True))


@FUZZ
@given(which=st.sampled_from(["device-allocated", "cpu-pools", "cpuset", "cpu-manager-state", "resource-status"]),
       text=_TEXT)
def test_annotation_decoders_10000_texts(which: str, text: str) -> None:
    """Any annotation or state-file text: decoded, or refused with InvalidInput (a KoordletError: the caller skips
    that one pod or file and says so), never another exception."""
    decode = {"device-allocated": decode_device_allocations, "cpu-pools": decode_pools, "cpuset": parse_cpuset,
              "cpu-manager-state": parse_cpu_manager_state,
              "resource-status": lambda t: resource_status({"scheduling.koordinator.sh/resource-status": t}).cpus()}
    with contextlib.suppress(KoordletError):
        decode[which](text)


_POD = st.fixed_dictionaries({"metadata": st.one_of(_JSON, st.fixed_dictionaries(
    {"name": st.text(max_size=8), "uid": st.text(max_size=8), "namespace": st.text(max_size=8),
     "annotations": st.dictionaries(st.sampled_from([ANNOTATION_DEVICE_ALLOCATED, "koordinator.sh/qosClass",
                                                     "scheduling.koordinator.sh/resource-status"]), _TEXT)})),
    "spec": _JSON, "status": st.one_of(_JSON, st.fixed_dictionaries({"qosClass": _TEXT, "phase": _TEXT}))})


@FUZZ
@given(st.lists(_POD, min_size=1, max_size=3))
def test_pod_intake_10000_objects(pods: list[dict[str, Any]]) -> None:
    """Any Pod objects from the API or kubelet: the pod list takes the well-formed ones and skips each malformed one
    with a counted reason, never raising."""
    health = Health()
    state = PodState(CgroupDriver.CGROUPFS, health)
    state.update(pods)
    skipped = sum(n for (kind, _), n in health.skipped.items() if kind == "pod")
    assert len(state.pods) + skipped == len(pods)  # each taken or skipped with its reason counted
