"""KubeClient over real HTTP(S) against kmock: requests, errors, watch streams, TLS, limits, retries."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kmock
import pytest
import yaml

from apis.client.kubeapi import (
    DEFAULT_BACKOFF,
    DEFAULT_RETRY,
    Backoff,
    Gone,
    KubeClient,
    KubeConfig,
    TokenBucket,
    Unreachable,
    Urllib3Transport,
    retry_on_conflict,
)
from apis.core.errors import ApiError, Conflict, NotFound

PODS = "v1/pods"
NM = "slo.koordinator.sh/v1alpha1/nodemetrics"


def client_for(server: Any, **kwargs: Any) -> KubeClient:
    return KubeClient(KubeConfig(server=str(server), token="s3cr3t", **kwargs))


def pod(name: str, node: str = "node-1") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default"}, "spec": {"nodeName": node}}


# --- TLS material and an HTTPS listener for the same kmock handler ------------------------------------------


@pytest.fixture
def tls_url(tls_server: Any) -> str:
    return str(tls_server.make_url("")).rstrip("/")


# --- plain requests -----------------------------------------------------------------------------------------


async def test_get_sends_token_user_agent_and_returns_object(kmock: kmock.KubernetesEmulator) -> None:
    kmock.objects[NM, None, "node-1"] = {"metadata": {"name": "node-1"}, "spec": {"x": 1}}
    client = client_for(kmock.url)

    obj = await asyncio.to_thread(client.get, "/apis/slo.koordinator.sh/v1alpha1/nodemetrics/node-1")

    assert obj == {"metadata": {"name": "node-1"}, "spec": {"x": 1}}
    request = kmock["get"][0]
    assert request.headers["Authorization"] == "Bearer s3cr3t"
    assert request.headers["User-Agent"] == "koordlet"
    assert request.headers["Accept"] == "application/json"


async def test_list_passes_selectors(kmock: kmock.KubernetesEmulator) -> None:
    kmock.objects[PODS, "default", "a"] = pod("a")
    client = client_for(kmock.url)

    result = await asyncio.to_thread(
        client.list, "/api/v1/pods", field_selector="spec.nodeName=node-1", label_selector="app=x"
    )

    assert [p["metadata"]["name"] for p in result["items"]] == ["a"]
    assert kmock["get /api/v1/pods"][0].params == {
        "fieldSelector": "spec.nodeName=node-1",
        "labelSelector": "app=x",
    }


async def test_post_sends_json_body(kmock: kmock.KubernetesEmulator) -> None:
    kmock.resources[PODS] = {}
    client = client_for(kmock.url)

    created = await asyncio.to_thread(client.post, "/api/v1/namespaces/default/pods", pod("b"))

    assert created["metadata"]["name"] == "b"
    assert kmock.objects[PODS, "default", "b"] >= {"spec": {"nodeName": "node-1"}}
    assert kmock["post"][0].headers["Content-Type"] == "application/json"


async def test_put_and_patch_send_bodies(kmock: kmock.KubernetesEmulator) -> None:
    kmock["put /api/v1/namespaces/default/pods/c"] << (lambda req: req.data)
    kmock.objects[PODS, "default", "c"] = pod("c")
    client = client_for(kmock.url)

    echoed = await asyncio.to_thread(client.put, "/api/v1/namespaces/default/pods/c", {"spec": {"k": "v"}})
    patched = await asyncio.to_thread(
        client.patch, "/api/v1/namespaces/default/pods/c", {"metadata": {"labels": {"l": "1"}}}
    )

    assert echoed == {"spec": {"k": "v"}}
    assert patched["metadata"]["labels"] == {"l": "1"}
    assert kmock["patch"][0].headers["Content-Type"] == "application/merge-patch+json"


# --- error mapping ------------------------------------------------------------------------------------------


async def test_404_is_not_found_with_status_message(kmock: kmock.KubernetesEmulator) -> None:
    kmock.resources[NM] = {}
    client = client_for(kmock.url)

    with pytest.raises(NotFound) as exc:
        await asyncio.to_thread(client.get, "/apis/slo.koordinator.sh/v1alpha1/nodemetrics/missing")

    assert exc.value.status == 404
    assert "not found" in exc.value.message


async def test_409_is_conflict(kmock: kmock.KubernetesEmulator) -> None:
    (
        kmock["put /api/v1/namespaces/default/pods/c"]
        << 409
        << {"kind": "Status", "code": 409, "message": "stale rv"}
    )
    client = client_for(kmock.url)

    with pytest.raises(Conflict) as exc:
        await asyncio.to_thread(client.put, "/api/v1/namespaces/default/pods/c", pod("c"))

    assert exc.value.message == "stale rv"


@pytest.mark.parametrize("status", [403, 422, 500, 503])
async def test_other_statuses_are_api_errors(kmock: kmock.KubernetesEmulator, status: int) -> None:
    kmock["get /api/v1/nodes/n"] << status << {"kind": "Status", "code": status, "message": f"boom {status}"}
    client = client_for(kmock.url)

    with pytest.raises(ApiError) as exc:
        await asyncio.to_thread(client.get, "/api/v1/nodes/n")

    assert type(exc.value) is ApiError
    assert (exc.value.status, exc.value.message) == (status, f"boom {status}")


async def test_non_json_error_body_becomes_the_message(kmock: kmock.KubernetesEmulator) -> None:
    kmock["get /api/v1/nodes/n"] << 502 << b"bad gateway from proxy"
    client = client_for(kmock.url)

    with pytest.raises(ApiError) as exc:
        await asyncio.to_thread(client.get, "/api/v1/nodes/n")

    assert (exc.value.status, exc.value.message) == (502, "bad gateway from proxy")


def test_connection_refused_is_unreachable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again before the request: nothing listens there
    client = KubeClient(KubeConfig(server=f"http://127.0.0.1:{port}", timeout=2.0))

    with pytest.raises(Unreachable) as exc:
        client.get("/api/v1/nodes")

    assert exc.value.status == 0


# --- watch --------------------------------------------------------------------------------------------------


async def test_watch_yields_events_and_sends_parameters(kmock: kmock.KubernetesEmulator) -> None:
    events = (
        {"type": "ADDED", "object": pod("a")},
        {"type": "MODIFIED", "object": pod("a")},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "7"}}},
    )
    kmock["get /api/v1/pods?watch=true"] << events
    client = client_for(kmock.url)

    got = await asyncio.to_thread(
        lambda: list(
            client.watch(
                "/api/v1/pods",
                field_selector="spec.nodeName=node-1",
                resource_version="5",
                timeout_seconds=60,
                allow_bookmarks=True,
            )
        )
    )

    assert [e["type"] for e in got] == ["ADDED", "MODIFIED", "BOOKMARK"]
    assert kmock["get /api/v1/pods"][0].params == {
        "watch": "true",
        "fieldSelector": "spec.nodeName=node-1",
        "resourceVersion": "5",
        "timeoutSeconds": "60",
        "allowWatchBookmarks": "true",
    }


async def test_watch_error_event_410_raises_gone(kmock: kmock.KubernetesEmulator) -> None:
    kmock["get /api/v1/pods?watch=true"] << (
        {"type": "ADDED", "object": pod("a")},
        {
            "type": "ERROR",
            "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"},
        },
        {"type": "ADDED", "object": pod("never")},
    )
    client = client_for(kmock.url)

    def consume() -> list[dict[str, Any]]:
        seen: list[dict[str, Any]] = []
        with pytest.raises(Gone) as exc:
            for event in client.watch("/api/v1/pods", resource_version="1"):
                seen.append(event)
        assert exc.value.message == "too old"
        return seen

    seen = await asyncio.to_thread(consume)
    assert [e["object"]["metadata"]["name"] for e in seen] == ["a"]


async def test_watch_http_410_raises_gone(kmock: kmock.KubernetesEmulator) -> None:
    kmock["get /api/v1/pods?watch=true"] << 410 << {"kind": "Status", "code": 410, "message": "expired"}
    client = client_for(kmock.url)

    with pytest.raises(Gone):
        await asyncio.to_thread(lambda: list(client.watch("/api/v1/pods", resource_version="1")))


async def test_watch_streams_before_the_response_ends(kmock: kmock.KubernetesEmulator) -> None:
    # kmock's built-in watch never ends: getting the first event proves the body is read incrementally.
    kmock.objects[PODS, "default", "live"] = pod("live")
    client = client_for(kmock.url)

    def first_event() -> dict[str, Any]:
        stream = client.watch("/api/v1/pods", timeout_seconds=5)
        try:
            return next(stream)
        finally:
            stream.close()

    event = await asyncio.wait_for(asyncio.to_thread(first_event), timeout=10)
    assert event["type"] == "ADDED"
    assert event["object"]["metadata"]["name"] == "live"


# --- TLS ----------------------------------------------------------------------------------------------------


async def test_tls_verified_with_cluster_ca(
    kmock: kmock.KubernetesEmulator, tls_url: str, tls_pair: tuple[Path, Path]
) -> None:
    kmock["get /version"] << {"gitVersion": "v1.30.0"}
    client = KubeClient(KubeConfig(server=tls_url, token="t", ca_file=str(tls_pair[0])))

    assert (await asyncio.to_thread(client.get, "/version"))["gitVersion"] == "v1.30.0"


async def test_tls_unknown_ca_is_unreachable(kmock: kmock.KubernetesEmulator, tls_url: str) -> None:
    client = KubeClient(KubeConfig(server=tls_url, token="t"))

    with pytest.raises(Unreachable):
        await asyncio.to_thread(client.get, "/version")


async def test_tls_insecure_skips_verification(kmock: kmock.KubernetesEmulator, tls_url: str) -> None:
    kmock["get /version"] << {"gitVersion": "v1.30.0"}
    client = KubeClient(KubeConfig(server=tls_url, insecure=True))

    assert (await asyncio.to_thread(client.get, "/version"))["gitVersion"] == "v1.30.0"


# --- configuration ------------------------------------------------------------------------------------------


def write_kubeconfig(path: Path, user: dict[str, Any], cluster: dict[str, Any], context: str = "ctx") -> None:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": context,
                "contexts": [
                    {"name": "ctx", "context": {"cluster": "c1", "user": "u1"}},
                    {"name": "other", "context": {"cluster": "c2", "user": "u1"}},
                ],
                "clusters": [
                    {"name": "c1", "cluster": cluster},
                    {"name": "c2", "cluster": {"server": "https://other:6443"}},
                ],
                "users": [{"name": "u1", "user": user}],
            }
        )
    )


def test_kubeconfig_token_and_inline_tls_data(tmp_path: Path, tls_pair: tuple[Path, Path]) -> None:
    cert, key = tls_pair
    b64 = lambda p: base64.b64encode(p.read_bytes()).decode()  # noqa: E731
    cfg_path = tmp_path / "config"
    write_kubeconfig(
        cfg_path,
        {"token": "abc", "client-certificate-data": b64(cert), "client-key-data": b64(key)},
        {"server": "https://10.0.0.1:6443/", "certificate-authority-data": b64(cert)},
    )

    cfg = KubeConfig.from_kubeconfig(str(cfg_path))

    assert cfg.server == "https://10.0.0.1:6443"
    assert cfg.bearer_token() == "abc"
    assert cfg.ca_data is not None and cfg.ca_data.startswith("-----BEGIN CERTIFICATE-----")
    assert cfg.cert_data == cert.read_bytes() and cfg.key_data == key.read_bytes()
    assert (cfg.qps, cfg.burst, cfg.user_agent) == (20.0, 30, "koordlet")
    Urllib3Transport(cfg)  # the inline CA and client key pair load into an SSL context


def test_kubeconfig_files_relative_paths_insecure_and_context(tmp_path: Path) -> None:
    cfg_path = tmp_path / "config"
    write_kubeconfig(
        cfg_path,
        {"client-certificate": "certs/c.crt", "client-key": "/abs/c.key", "tokenFile": "tok"},
        {
            "server": "https://10.0.0.1:6443",
            "certificate-authority": "ca.crt",
            "insecure-skip-tls-verify": True,
        },
    )

    cfg = KubeConfig.from_kubeconfig(str(cfg_path))
    other = KubeConfig.from_kubeconfig(str(cfg_path), context="other")

    assert cfg.cert_file == str(tmp_path / "certs/c.crt")
    assert cfg.key_file == "/abs/c.key"
    assert cfg.ca_file == str(tmp_path / "ca.crt")
    assert cfg.token_file == str(tmp_path / "tok")
    assert cfg.insecure is True
    assert other.server == "https://other:6443"


def test_token_file_is_reread_after_refresh_period(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("one\n")
    cfg = KubeConfig(server="https://x", token_file=str(token_file), token_refresh_seconds=0)
    cached = KubeConfig(server="https://x", token_file=str(token_file))

    assert cfg.bearer_token() == "one" and cached.bearer_token() == "one"
    token_file.write_text("two")
    assert cfg.bearer_token() == "two"
    assert cached.bearer_token() == "one"  # within client-go's refresh period
    token_file.unlink()
    assert cfg.bearer_token() == "two"  # a failed re-read keeps the last good token


def service_account(tmp_path: Path) -> Path:
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("sa-token")
    (sa / "ca.crt").write_text("unused")
    return sa


def test_in_cluster(tmp_path: Path) -> None:
    sa = service_account(tmp_path)
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}

    cfg = KubeConfig.in_cluster(env, str(sa))

    assert cfg.server == "https://[fd00::1]:443"
    assert cfg.bearer_token() == "sa-token"
    assert cfg.ca_file == str(sa / "ca.crt")


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr("apis.client.kubeapi.SERVICE_ACCOUNT_DIR", str(tmp_path / "no-sa"))
    yield tmp_path


def test_load_order(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tmp = clean_env
    assert KubeConfig.load() is None

    home_cfg = tmp / "home" / ".kube" / "config"
    home_cfg.parent.mkdir(parents=True)
    write_kubeconfig(home_cfg, {"token": "home"}, {"server": "https://home:6443"})
    assert KubeConfig.load() == KubeConfig(server="https://home:6443", token="home")

    sa = service_account(tmp)
    monkeypatch.setattr("apis.client.kubeapi.SERVICE_ACCOUNT_DIR", str(sa))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    loaded = KubeConfig.load()
    assert loaded is not None and loaded.server == "https://10.96.0.1:443"

    env_cfg = tmp / "env-config"
    write_kubeconfig(env_cfg, {"token": "env"}, {"server": "https://env:6443"})
    monkeypatch.setenv("KUBECONFIG", f"{tmp / 'absent'}:{env_cfg}")
    loaded = KubeConfig.load()
    assert loaded is not None and loaded.server == "https://env:6443"

    explicit = tmp / "explicit"
    write_kubeconfig(explicit, {"token": "x"}, {"server": "https://explicit:6443"})
    loaded = KubeConfig.load(str(explicit))
    assert loaded is not None and loaded.server == "https://explicit:6443"


def test_exec_plugin_token(tmp_path: Path) -> None:
    plugin = tmp_path / "plugin.sh"
    cred = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": "from-exec", "expirationTimestamp": "2999-01-01T00:00:00Z"},
    }
    plugin.write_text(f"#!/bin/sh\necho '{json.dumps(cred)}'\n")
    plugin.chmod(0o755)
    cfg_path = tmp_path / "config"
    write_kubeconfig(
        cfg_path,
        {"exec": {"command": "./plugin.sh", "apiVersion": cred["apiVersion"]}},
        {"server": "https://x:6443"},
    )

    cfg = KubeConfig.from_kubeconfig(str(cfg_path))

    assert cfg.bearer_token() == "from-exec"


def test_repr_hides_secrets() -> None:
    text = repr(KubeConfig(server="https://x", token="hunter2", key_data=b"PRIVATE"))
    assert "hunter2" not in text and "PRIVATE" not in text


# --- rate limiting and retries ------------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_token_bucket_burst_then_refill() -> None:
    clock = FakeClock()
    bucket = TokenBucket(0.1, 2, clock=clock)

    assert [bucket.try_acquire() for _ in range(3)] == [True, True, False]
    clock.now += 9.9
    assert not bucket.try_acquire()
    clock.now += 0.1
    assert bucket.try_acquire()


def test_token_bucket_acquire_waits_for_its_token() -> None:
    clock = FakeClock()
    bucket = TokenBucket(20.0, 30, clock=clock, sleep=clock.sleep)

    for _ in range(32):
        bucket.acquire()

    assert clock.slept == pytest.approx([0.05, 0.05])


async def test_client_requests_are_rate_limited(kmock: kmock.KubernetesEmulator) -> None:
    kmock["get /version"] << {"gitVersion": "v1"}
    clock = FakeClock()
    client = KubeClient(
        KubeConfig(server=str(kmock.url)), limiter=TokenBucket(1.0, 2, clock=clock, sleep=clock.sleep)
    )

    for _ in range(3):
        await asyncio.to_thread(client.get, "/version")

    assert clock.slept == pytest.approx([1.0])
    assert len(kmock["get /version"]) == 3


def test_default_client_limits_match_upstream_flags() -> None:
    client = KubeClient(KubeConfig(server="http://127.0.0.1:1"))
    assert (client.limiter.qps, client.limiter.burst) == (20.0, 30)


def test_retry_on_conflict_retries_then_succeeds() -> None:
    calls: list[int] = []
    slept: list[float] = []

    def fn() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise Conflict("stale")
        return "ok"

    assert retry_on_conflict(fn, sleep=slept.append) == "ok"
    assert len(calls) == 3
    assert len(slept) == 2 and all(0.01 <= s <= 0.011 for s in slept)


def test_retry_on_conflict_gives_up_after_default_retry_steps() -> None:
    calls: list[int] = []

    def fn() -> None:
        calls.append(1)
        raise Conflict("stale")

    with pytest.raises(Conflict):
        retry_on_conflict(fn, sleep=lambda _: None)
    assert len(calls) == DEFAULT_RETRY.steps == 5

    calls.clear()
    with pytest.raises(Conflict):
        retry_on_conflict(fn, attempts=2, sleep=lambda _: None)
    assert len(calls) == 2


def test_retry_on_conflict_does_not_retry_other_errors() -> None:
    calls: list[int] = []

    def fn() -> None:
        calls.append(1)
        raise ApiError(500, "boom")

    with pytest.raises(ApiError):
        retry_on_conflict(fn, sleep=lambda _: None)
    assert len(calls) == 1


def test_backoff_grows_by_factor() -> None:
    slept: list[float] = []

    def fn() -> None:
        raise Conflict("stale")

    with pytest.raises(Conflict):
        retry_on_conflict(
            fn, backoff=Backoff(duration=0.01, factor=5.0, jitter=0.0, steps=4), sleep=slept.append
        )

    assert slept == pytest.approx([0.01, 0.05, 0.25])
    assert (DEFAULT_BACKOFF.steps, DEFAULT_BACKOFF.factor) == (4, 5.0)
