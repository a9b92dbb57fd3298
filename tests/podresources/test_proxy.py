"""The proxy in front of a fake kubelet on real Unix sockets, read by a client that does what Multus does (spec §4):
the VF bus ids koord-scheduler allocated reach the delegate CNI's `deviceID`, for every case of issue #10."""

from __future__ import annotations

import asyncio
import os
import stat
from typing import Any

import grpc
import grpc.aio
import pytest

from koordlet.pb import podresources_v1_pb2 as v1
from koordlet.pb import podresources_v1alpha1_pb2 as v1alpha1
from koordlet.podresources import listen

from fakekubelet import ALLOCATABLE, GET, FakeKubelet, entry, pod, rdma_vfs, short_dir
from multusclient import delegates, list_once, resource_map
from proxyharness import proxy

RDMA, GPU = "koordinator.sh/rdma", "nvidia.com/gpu"
SRIOV = {"cniVersion": "1.0.0", "type": "sriov", "name": "rdma-net"}
# spec §7 item 17: the PF's VFs in the annotation in this order; Multus sorts them
GPU_RDMA = {"rdma": [{"minor": 0, "id": "0000:09:00.0", "extension": {
    "vfs": [{"busID": "0000:09:00.3"}, {"busID": "0000:09:00.2"}]}}], "gpu": [{"minor": 1, "id": "GPU-abc"}]}


@pytest.fixture
def root() -> Any:
    with short_dir() as d:
        yield d


async def call(socket_path: str, path: str, request: bytes = b"", timeout: float = 5.0) -> bytes:
    async with grpc.aio.insecure_channel(f"unix:{socket_path}") as ch:
        answer: bytes = await ch.unary_unary(path)(request, timeout=timeout)
        return answer


def first_devices(response: v1.ListPodResourcesResponse, name: str) -> list[tuple[str, list[str]]]:
    [e] = [e for e in response.pod_resources if e.name == name]
    return [(d.resource_name, list(d.device_ids)) for d in e.containers[0].devices]


async def test_gpu(root: str) -> None:
    async with proxy(root, [pod("cuda", allocation={"gpu": [{"minor": 0, "id": "GPU-fd971b33"},
                                                             {"minor": 1, "id": "GPU-0a1b2c3d"}]})]) as h:
        response = await list_once(h.socket)
        assert first_devices(response, "cuda") == [(GPU, ["GPU-fd971b33", "GPU-0a1b2c3d"])]
        assert resource_map(response, "default", "cuda")[GPU].device_ids == ["GPU-0a1b2c3d", "GPU-fd971b33"]
        assert h.problems == []


async def test_gpu_and_rdma_vfs_reach_the_delegates_in_multus_order(root: str) -> None:
    """Spec §7 items 17 and 18: both types on containers[0] sorted by resource name, the PF left out; two networks of
    the NAD annotated koordinator.sh/rdma get .2 then .3 as top-level deviceID/pciBusID; other containers as kubelet
    has them."""
    response = v1.ListPodResourcesResponse(pod_resources=[entry("train", "ml", ("main", "sidecar"))])
    async with proxy(root, [pod("train", "ml", GPU_RDMA)], response) as h:
        got = await list_once(h.socket)
        assert first_devices(got, "train") == [(RDMA, ["0000:09:00.3", "0000:09:00.2"]), (GPU, ["GPU-abc"])]
        assert got.pod_resources[0].containers[1] == response.pod_resources[0].containers[1]
        assert not got.pod_resources[0].containers[0].devices[0].HasField("topology")
        confs = delegates(resource_map(got, "ml", "train"), [(RDMA, SRIOV), ("", {"type": "bridge"}), (RDMA, SRIOV)])
        assert [(c.get("deviceID"), c.get("pciBusID")) for c in confs] == [
            ("0000:09:00.2", "0000:09:00.2"), (None, None), ("0000:09:00.3", "0000:09:00.3")]
        assert "runtimeConfig" not in confs[0] and confs[0]["type"] == "sriov"


async def test_rdma_pf_without_vfs(root: str) -> None:
    """A whole PF: its own bus id. Also with an empty `extension` (upstream would list nothing: [quirk])."""
    pods = [pod("pf", allocation={"rdma": [{"minor": 0, "id": "0000:1f:00.0"}]}),
            pod("pf-ext", allocation={"rdma": [{"minor": 1, "id": "0000:2f:00.0", "extension": {}}]})]
    async with proxy(root, pods) as h:
        got = await list_once(h.socket)
        assert first_devices(got, "pf") == [(RDMA, ["0000:1f:00.0"])]
        assert first_devices(got, "pf-ext") == [(RDMA, ["0000:2f:00.0"])]
        assert delegates(resource_map(got, "default", "pf"), [(RDMA, SRIOV)])[0]["deviceID"] == "0000:1f:00.0"


async def test_no_allocation_is_kubelets_answer_byte_for_byte(root: str) -> None:
    response = v1.ListPodResourcesResponse(pod_resources=[
        entry("web", devices={"example.com/foo": ["b", "a"], "example.com/bar": ["x"]}), entry("plain")])
    async with proxy(root, [pod("web"), pod("plain", allocation={})], response) as h:
        assert await call(h.socket, "/v1.PodResourcesLister/List") == response.SerializeToString()


async def test_250_pods_one_list(root: str) -> None:
    """A node's worth of pods with mixed allocations: each pod's Multus resource map is its own allocation."""
    manifests, expected = [], {}
    for i in range(250):
        kind = i % 4
        pfx = f"0000:{0x10 + i // 8:02x}:00"
        if kind == 0:
            alloc: dict[str, Any] | None = {"gpu": [{"minor": i % 8, "id": f"GPU-{i:04d}"}]}
            expected[f"p{i}"] = {GPU: [f"GPU-{i:04d}"]}
        elif kind == 1:
            alloc = {"gpu": [{"minor": i % 8, "id": f"GPU-{i:04d}"}],
                     "rdma": [rdma_vfs(f"{pfx}.0", [f"{pfx}.{2 + i % 6}", f"{pfx}.1"])]}
            expected[f"p{i}"] = {GPU: [f"GPU-{i:04d}"], RDMA: sorted([f"{pfx}.{2 + i % 6}", f"{pfx}.1"])}
        elif kind == 2:
            alloc = {"rdma": [{"minor": 0, "id": f"{pfx}.0"}]}
            expected[f"p{i}"] = {RDMA: [f"{pfx}.0"]}
        else:
            alloc, expected[f"p{i}"] = None, {}
        manifests.append(pod(f"p{i}", "batch", alloc))
    response = v1.ListPodResourcesResponse(pod_resources=[entry(f"p{i}", "batch", ("a", "b", "c"))
                                                          for i in range(250)])
    async with proxy(root, manifests, response) as h:
        got = await list_once(h.socket)
        assert len(got.pod_resources) == 250
        for name, want in expected.items():
            rmap = resource_map(got, "batch", name)
            assert {k: v.device_ids for k, v in rmap.items()} == want, name
        assert h.kubelet.count("/v1.PodResourcesLister/List") == 1


async def test_kubelet_restart(root: str) -> None:
    """While kubelet is away the proxy keeps its socket and answers UNAVAILABLE naming kubelet's socket; it
    reconnects by itself once kubelet is back."""
    async with proxy(root, [pod("train", "ml", GPU_RDMA)], max_age=0) as h:
        assert first_devices(await list_once(h.socket), "train")[0][0] == RDMA
        await h.kubelet.stop()
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await list_once(h.socket)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert h.kubelet.socket_path in (err.value.details() or "")
        assert h.server.socket_present
        await h.kubelet.start()
        got = await _eventually_listed(h.socket)
        assert first_devices(got, "train")[0] == (RDMA, ["0000:09:00.3", "0000:09:00.2"])
        assert 'koordlet_pod_resources_proxy_requests_total{code="UNAVAILABLE",method="List"}' in h.metrics()


async def test_kubelet_absent_at_start(root: str) -> None:
    async with proxy(root, [pod("cuda", allocation={"gpu": [{"minor": 0, "id": "GPU-1"}]})], kubelet_up=False) as h:
        assert h.server.socket_present  # serving without kubelet
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await list_once(h.socket)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert err.value.details() == f"kubelet PodResources socket {h.kubelet.socket_path} does not exist (kubelet " \
                                      "not running, or another --var-lib-kubelet-dir)"
        await h.kubelet.start()
        assert first_devices(await _eventually_listed(h.socket), "cuda") == [(GPU, ["GPU-1"])]


async def _eventually_listed(socket_path: str, seconds: float = 10.0) -> v1.ListPodResourcesResponse:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        try:
            return await list_once(socket_path)
        except grpc.aio.AioRpcError as e:
            if e.code() != grpc.StatusCode.UNAVAILABLE or loop.time() > deadline:
                raise
            await asyncio.sleep(0.05)


async def test_stale_socket_is_replaced_and_permissions_are_owner_only(root: str) -> None:
    os.makedirs(os.path.join(root, "proxy"), mode=0o755)
    os.chmod(os.path.join(root, "proxy"), 0o755)
    stale = os.path.join(root, "proxy", "kubelet.sock")
    import socket as sk

    s = sk.socket(sk.AF_UNIX, sk.SOCK_STREAM)
    s.bind(stale)
    s.close()  # the file stays, nobody listens: what a killed agent leaves behind
    assert not listen.answers(stale)
    async with proxy(root, [pod("cuda", allocation={"gpu": [{"minor": 0, "id": "GPU-1"}]})]) as h:
        assert h.server.socket_present
        assert stat.S_IMODE(os.stat(h.socket).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(os.path.dirname(h.socket)).st_mode) == 0o700
        assert first_devices(await list_once(h.socket), "cuda") == [(GPU, ["GPU-1"])]
    assert not os.path.exists(stale)  # removed on stop: it was ours


async def test_a_live_servers_socket_is_not_taken_over(root: str) -> None:
    """Another server on the proxy's path keeps it; once it is gone the proxy takes the path."""
    path = os.path.join(root, "proxy", "kubelet.sock")
    os.makedirs(os.path.dirname(path), mode=0o700)
    other = await FakeKubelet(path, v1.ListPodResourcesResponse(pod_resources=[entry("other")])).start()
    try:
        async with proxy(root, [pod("mine")]) as h:
            assert not h.server.socket_present
            assert [e.name for e in (await list_once(path)).pod_resources] == ["other"]
            await other.stop()
            for _ in range(400):
                if h.server.socket_present:
                    break
                await asyncio.sleep(0.01)
            assert [e.name for e in (await _eventually_listed(path)).pod_resources] == ["mine"]
    finally:
        await other.stop()


@pytest.mark.parametrize("annotation, field", [
    ("{not json", ""),
    ('{"rdma": {"minor": 0}}', "rdma"),
    ('{"rdma": [null]}', "rdma[0]"),
    ('{"gpu": [{"minor": "0", "id": "GPU-1"}]}', "gpu[0].minor"),
    ('{"rdma": [{"minor": 0, "extension": {"vfs": [{"busID": 7}]}}]}', "rdma[0].extension.vfs[0].busID"),
    (17, ""),
])
async def test_malformed_annotation_leaves_the_pod_as_kubelet_has_it(root: str, annotation: Any, field: str) -> None:
    response = v1.ListPodResourcesResponse(pod_resources=[entry("bad", devices={"example.com/nic": ["n1"]}),
                                                          entry("good")])
    pods = [pod("bad", raw_annotation=annotation), pod("good", allocation={"gpu": [{"minor": 0, "id": "GPU-9"}]})]
    async with proxy(root, pods, response) as h:
        got = await list_once(h.socket)
        assert got.pod_resources[0] == response.pod_resources[0]
        assert first_devices(got, "good") == [(GPU, ["GPU-9"])]
        [problem] = h.problems
        assert (problem.pod, problem.uid, problem.kind, problem.field) == ("default/bad", "uid-default-bad",
                                                                          "malformed", field)
        await list_once(h.socket)
        assert len(h.problems) == 1  # reported once while it lasts


async def test_a_pod_admitted_since_the_last_pod_sync_is_looked_up(root: str) -> None:
    """The CNI ADD of a new pod comes before the periodic pod sync has seen it: the proxy asks for a sync."""
    async with proxy(root, [pod("new", "ml", GPU_RDMA)], known=False) as h:
        got = await list_once(h.socket)
        assert first_devices(got, "new")[0] == (RDMA, ["0000:09:00.3", "0000:09:00.2"])
        assert h.syncs == 1
        await list_once(h.socket)
        assert h.syncs == 1


async def test_a_pod_no_source_knows_costs_one_sync_per_retry_period(root: str) -> None:
    response = v1.ListPodResourcesResponse(pod_resources=[entry("static-only")])
    async with proxy(root, [], response, max_age=0) as h:
        for _ in range(5):
            assert first_devices(await list_once(h.socket), "static-only") == []
        assert h.syncs == 1


async def test_a_replaced_pod_is_looked_up_before_its_old_allocation_is_used(root: str) -> None:
    old = pod("web-0", allocation={"rdma": [rdma_vfs("0000:09:00.0", ["0000:09:00.2"])]}, uid="old", deleting=True)
    new = pod("web-0", allocation={"rdma": [rdma_vfs("0000:09:00.0", ["0000:09:00.5"])]}, uid="new")
    async with proxy(root, [old]) as h:
        h.source = [new]
        assert first_devices(await list_once(h.socket), "web-0") == [(RDMA, ["0000:09:00.5"])]


async def test_get_is_merged_for_one_pod(root: str) -> None:
    async with proxy(root, [pod("train", "ml", GPU_RDMA)]) as h:
        req = v1.GetPodResourcesRequest(pod_name="train", pod_namespace="ml").SerializeToString()
        got = v1.GetPodResourcesResponse.FromString(await call(h.socket, GET, req))
        assert [(d.resource_name, list(d.device_ids)) for d in got.pod_resources.containers[0].devices] == [
            (RDMA, ["0000:09:00.3", "0000:09:00.2"]), (GPU, ["GPU-abc"])]
        with pytest.raises(grpc.aio.AioRpcError) as err:  # kubelet's own error, passed on and attributed
            await call(h.socket, GET, v1.GetPodResourcesRequest(pod_name="x", pod_namespace="ml").SerializeToString())
        assert err.value.code() == grpc.StatusCode.UNKNOWN
        assert err.value.details() == f"kubelet PodResources socket {h.kubelet.socket_path}: pod x not found in ml"
        h.kubelet.get_unimplemented = True
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call(h.socket, GET, req)
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED


async def test_allocatable_passes_through_and_v1alpha1_list_is_served(root: str) -> None:
    async with proxy(root, [pod("train", "ml", GPU_RDMA)]) as h:
        assert await call(h.socket, ALLOCATABLE) == h.kubelet.allocatable.SerializeToString()
        data = await call(h.socket, "/v1alpha1.PodResourcesLister/List")
        want = v1alpha1.ListPodResourcesResponse(pod_resources=[v1alpha1.PodResources(
            name="train", namespace="ml", containers=[v1alpha1.ContainerResources(name="main", devices=[
                v1alpha1.ContainerDevices(resource_name=RDMA, device_ids=["0000:09:00.3", "0000:09:00.2"]),
                v1alpha1.ContainerDevices(resource_name=GPU, device_ids=["GPU-abc"])])])])
        assert data == want.SerializeToString()  # v1-only fields (cpu_ids, topology) left out
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call(h.socket, "/v1.PodResourcesLister/Watch")
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED


async def test_a_burst_of_lists_shares_kubelet_calls(root: str) -> None:
    """A gang start: 300 concurrent CNI ADDs cost a handful of kubelet calls, not 300."""
    async with proxy(root, [pod(f"w{i}", "gang", {"rdma": [rdma_vfs("0000:09:00.0", [f"0000:09:01.{i % 8}"])]})
                            for i in range(30)]) as h:
        h.kubelet.delay = 0.005
        results = await asyncio.gather(*(list_once(h.socket) for _ in range(300)))
        assert all(len(r.pod_resources) == 30 for r in results)
        assert h.kubelet.count("/v1.PodResourcesLister/List") <= 10
        text = h.metrics()
        assert 'koordlet_pod_resources_proxy_list_cache_total{result="hit"}' in text
        assert 'koordlet_pod_resources_proxy_requests_total{code="OK",method="List"} 300.0' in text


async def test_callers_get_kubelets_limiter(root: str) -> None:
    async with proxy(root, [pod("a")], qps=1.0, burst=3) as h:
        codes = []
        for _ in range(5):
            try:
                await list_once(h.socket)
                codes.append("OK")
            except grpc.aio.AioRpcError as e:
                codes.append(e.code().name)
                assert e.details() == "rejected by rate limit"
        assert codes == ["OK", "OK", "OK", "RESOURCE_EXHAUSTED", "RESOURCE_EXHAUSTED"]


async def test_max_age_zero_asks_kubelet_for_every_request(root: str) -> None:
    async with proxy(root, [pod("a")], max_age=0) as h:
        for _ in range(3):
            await list_once(h.socket)
        assert h.kubelet.count("/v1.PodResourcesLister/List") == 3


async def test_a_slow_kubelet_is_answered_unavailable(root: str) -> None:
    async with proxy(root, [pod("a")], timeout=0.2) as h:
        h.kubelet.delay = 1.0
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await list_once(h.socket)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert err.value.details() == f"kubelet PodResources socket {h.kubelet.socket_path} did not answer within 0.2s"
        h.kubelet.delay = 0
        assert [e.name for e in (await list_once(h.socket)).pod_resources] == ["a"]


async def test_a_socket_removed_under_the_proxy_is_bound_again(root: str) -> None:
    async with proxy(root, [pod("a")], check_every=0.05) as h:
        os.unlink(h.socket)
        for _ in range(200):
            if h.server.socket_present:
                break
            await asyncio.sleep(0.02)
        assert [e.name for e in (await _eventually_listed(h.socket)).pod_resources] == ["a"]


def test_what_the_socket_path_may_not_be(root: str) -> None:
    with pytest.raises(listen.SocketUnusable, match="more than a Unix socket allows"):
        listen.prepare("/tmp/" + "d" * 100 + "/kubelet.sock")
    not_a_socket = os.path.join(root, "pr", "kubelet.sock")
    os.makedirs(os.path.dirname(not_a_socket))
    with open(not_a_socket, "w") as f:
        f.write("keep me")
    with pytest.raises(listen.SocketUnusable, match="exists and is not a socket"):
        listen.prepare(not_a_socket)
    with open(not_a_socket) as f:
        assert f.read() == "keep me"
    shared = os.path.join(root, "shared")
    os.makedirs(shared)
    os.chmod(shared, 0o755)
    with open(os.path.join(shared, "other"), "w"):
        pass
    listen.prepare(os.path.join(shared, "kubelet.sock"))
    assert stat.S_IMODE(os.stat(shared).st_mode) == 0o755  # holds other files: left as it is
