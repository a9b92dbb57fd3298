"""Kubelet /pods and API-server pod sources over real HTTP(S) against kmock."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import kmock
import pytest

from apis.client.kubeapi import KubeClient, KubeConfig, Unreachable
from apis.core.errors import ApiError, InvalidInput
from koordlet.states.kubelet import ApiServerPodSource, KubeletPodSource, kubelet_address, kubelet_port
from koordlet.states.model import PodSource

POD_LIST = {
    "kind": "PodList",
    "apiVersion": "v1",
    "metadata": {},
    "items": [
        {"metadata": {"name": "a", "namespace": "default", "uid": "u-a"}, "spec": {"nodeName": "node-1"}},
        {"metadata": {"name": "b", "namespace": "kube-system", "uid": "u-b"}, "spec": {"nodeName": "node-1"}},
    ],
}


def node(port: int = 10250, **addresses: str) -> dict[str, Any]:
    addrs = addresses or {"InternalIP": "127.0.0.1"}
    return {
        "metadata": {"name": "node-1"},
        "status": {
            "addresses": [{"type": t, "address": a} for t, a in addrs.items()],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
        },
    }


class Observed:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str, float]] = []

    def __call__(self, verb: str, path: str, code: str, seconds: float) -> None:
        self.calls.append((verb, path, code, seconds))


def insecure_source(kmock: kmock.KubernetesEmulator, **kwargs: Any) -> KubeletPodSource:
    return KubeletPodSource.from_node(
        node(), None, insecure_tls=True, read_only_port=int(kmock.url.port or 0), **kwargs
    )


@pytest.fixture
def tls_port(tls_server: Any) -> int:
    """The kubelet's secure port: an HTTPS listener with a self-signed cert on the kmock handler."""
    assert tls_server.port is not None
    return int(tls_server.port)


async def test_insecure_read_only_port_lists_pods(kmock: kmock.KubernetesEmulator) -> None:
    kmock["get /pods/"] << POD_LIST
    observed = Observed()
    source: PodSource = insecure_source(kmock, observe=observed)

    pods = await asyncio.to_thread(source.list_pods)

    assert source.name == "kubelet"
    assert [p["metadata"]["name"] for p in pods] == ["a", "b"]
    request = kmock["get /pods/"][0]
    assert "Authorization" not in request.headers  # upstream sends no credentials to the read-only port
    assert [(v, p, c) for v, p, c, _ in observed.calls] == [("get", "/pods/", "200")]
    assert observed.calls[0][3] >= 0


async def test_secure_port_sends_token_without_verifying_the_kubelet_cert(
    kmock: kmock.KubernetesEmulator, tls_port: int, tmp_path: Path
) -> None:
    kmock["get /pods/"] << POD_LIST
    token_file = tmp_path / "token"
    token_file.write_text("sa-token\n")
    # A CA that did not sign the kubelet cert: ignored, as upstream clears CA data for the kubelet.
    config = KubeConfig(
        server="https://apiserver:6443", token_file=str(token_file), ca_file="/nonexistent/ca.crt"
    )
    source = KubeletPodSource.from_node(node(port=tls_port), config)

    pods = await asyncio.to_thread(source.list_pods)

    assert source.base_url == f"https://127.0.0.1:{tls_port}"
    assert len(pods) == 2
    request = kmock["get /pods/"][0]
    assert request.headers["Authorization"] == "Bearer sa-token"
    assert request.headers["User-Agent"] == "koordlet"


def test_secure_port_needs_credentials() -> None:
    with pytest.raises(InvalidInput):
        KubeletPodSource.from_node(node(), None)


async def test_empty_pod_list_is_an_error(kmock: kmock.KubernetesEmulator) -> None:
    kmock["get /pods/"] << {"kind": "PodList", "items": []}
    observed = Observed()
    source = insecure_source(kmock, observe=observed)

    with pytest.raises(ApiError, match="empty pod list"):
        await asyncio.to_thread(source.list_pods)
    assert [c[2] for c in observed.calls] == ["200"]


@pytest.mark.parametrize("status", [401, 500, 503])
async def test_non_200_is_an_error(kmock: kmock.KubernetesEmulator, status: int) -> None:
    kmock["get /pods/"] << status << b"nope"
    observed = Observed()
    source = insecure_source(kmock, observe=observed)

    with pytest.raises(ApiError) as exc:
        await asyncio.to_thread(source.list_pods)
    assert exc.value.status == status
    assert f"code {status}" in exc.value.message
    assert [c[2] for c in observed.calls] == [str(status)]


async def test_malformed_body_is_an_error(kmock: kmock.KubernetesEmulator) -> None:
    kmock["get /pods/"] << b"<html>not json</html>"
    source = insecure_source(kmock)

    with pytest.raises(ApiError, match="parse kubelet"):
        await asyncio.to_thread(source.list_pods)


async def test_timeout_is_unreachable_and_not_observed(kmock: kmock.KubernetesEmulator) -> None:
    async def slow() -> dict[str, Any]:
        await asyncio.sleep(3)
        return POD_LIST

    kmock["get /pods/"] << slow
    observed = Observed()
    source = insecure_source(kmock, observe=observed, timeout=0.3)

    with pytest.raises(Unreachable):
        await asyncio.to_thread(source.list_pods)
    assert observed.calls == []


async def test_configz(kmock: kmock.KubernetesEmulator) -> None:
    kmock["get /configz"] << {"kubeletconfig": {"cpuManagerPolicy": "static", "logging": {"format": "text"}}}
    observed = Observed()
    source = insecure_source(kmock, observe=observed)

    config = await asyncio.to_thread(source.get_configz)

    assert config["cpuManagerPolicy"] == "static"
    assert observed.calls[0][:3] == ("get", "/configz", "200")


def test_address_selection() -> None:
    n = node(InternalIP="10.0.0.5", Hostname="node-1.local", ExternalIP="1.2.3.4")
    assert kubelet_address(n) == "10.0.0.5"
    assert kubelet_address(n, "Hostname") == "node-1.local"
    assert kubelet_address(n, "ExternalIP") == "1.2.3.4"
    assert kubelet_address(n, "Bogus") == "10.0.0.5"  # invalid type falls back to InternalIP
    with pytest.raises(InvalidInput):
        kubelet_address(n, "InternalDNS")
    assert kubelet_port(n) == 10250
    with pytest.raises(InvalidInput):
        kubelet_port({"status": {}})


def test_ipv6_address_is_bracketed() -> None:
    source = KubeletPodSource.from_node(node(InternalIP="fd00::5"), None, insecure_tls=True)
    assert source.base_url == "http://[fd00::5]:10255"


async def test_apiserver_source_uses_node_field_selector(kmock: kmock.KubernetesEmulator) -> None:
    for item in POD_LIST["items"]:
        meta = item["metadata"]
        kmock.objects["v1/pods", meta["namespace"], meta["name"]] = item
    client = KubeClient(KubeConfig(server=str(kmock.url), token="api-token"))
    source: PodSource = ApiServerPodSource(client, "node-1")

    pods = await asyncio.to_thread(source.list_pods)

    assert source.name == "apiserver"
    assert sorted(p["metadata"]["name"] for p in pods) == ["a", "b"]
    request = kmock["get /api/v1/pods"][0]
    assert request.params == {"fieldSelector": "spec.nodeName=node-1"}
    assert request.headers["Authorization"] == "Bearer api-token"


async def test_apiserver_source_errors_propagate(kmock: kmock.KubernetesEmulator) -> None:
    kmock["get /api/v1/pods"] << 503 << {"kind": "Status", "code": 503, "message": "etcd down"}
    source = ApiServerPodSource(KubeClient(KubeConfig(server=str(kmock.url))), "node-1")

    with pytest.raises(ApiError) as exc:
        await asyncio.to_thread(source.list_pods)
    assert (exc.value.status, exc.value.message) == (503, "etcd down")
