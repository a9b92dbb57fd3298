"""The extender over HTTPS as kube-scheduler reaches an `enableHTTPS: true` extender: a real self-signed certificate
made by openssl for 127.0.0.1, trusted by the client as its tlsConfig caFile; with --client-ca-file, the client's
own certificate (tlsConfig certFile/keyFile) is required. Bad TLS flags are refused in one line."""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import logging
import shutil
import ssl
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import kmock
import pytest

from apis.client.kubeapi import KubeClient, KubeConfig
from scheduler import tlsserve
from scheduler.cli import main, profile
from scheduler.cluster import Cluster
from scheduler.extender import ClusterSource, Extender, ExtenderServer
from scheduler.framework import Scheduler

from conftest import require
from gpu_cluster import pod, seed


def make_cert(where: Path, name: str) -> tuple[Path, Path]:
    """A self-signed P-256 certificate for 127.0.0.1 and its key, by the openssl CLI."""
    openssl = shutil.which("openssl")
    require(openssl is not None, "the openssl command is not installed")
    assert openssl is not None
    cert, key = where / f"{name}.crt", where / f"{name}.key"
    subprocess.run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", f"/CN={name}",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True, timeout=30)
    return cert, key


def flags(cert: Path | None = None, key: Path | None = None, ca: Path | None = None) -> argparse.Namespace:
    return argparse.Namespace(tls_cert_file=cert and str(cert), tls_private_key_file=key and str(key),
                              client_ca_file=ca and str(ca))


@pytest.fixture
def ext(kmock: kmock.KubernetesEmulator) -> Extender:
    seed(kmock)

    def make(cluster: Cluster) -> Scheduler:
        return Scheduler(cluster, profile(None))

    return Extender(ClusterSource(KubeClient(KubeConfig(server=str(kmock.url)))), make)


@contextmanager
def serving(ext: Extender, tls: ssl.SSLContext | None) -> Iterator[int]:
    server = ExtenderServer(("127.0.0.1", 0), ext, prefix="/extender")
    server.tls = tls
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def filter_over(url: str, ctx: ssl.SSLContext | None) -> dict[str, Any]:
    body = {"Pod": pod("eight", {"nvidia.com/gpu": 8}), "NodeNames": ["gpu-a", "gpu-b"]}
    req = urllib.request.Request(f"{url}/extender/filter", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10, context=ctx) as resp:
        assert resp.status == 200
        out: dict[str, Any] = json.loads(resp.read())
        return out


def client(ca: Path, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    """kube-scheduler's side: tlsConfig caFile, and certFile/keyFile when given."""
    ctx = ssl.create_default_context(cafile=str(ca))
    if cert is not None and key is not None:
        ctx.load_cert_chain(str(cert), str(key))
    return ctx


# kmock answers from the test's event loop: the extender and its clients run in a thread (asyncio.to_thread)
async def test_filter_over_https_with_a_self_signed_certificate(ext: Extender, tmp_path: Path) -> None:
    await asyncio.to_thread(over_https, ext, tmp_path)


def over_https(ext: Extender, tmp_path: Path) -> None:
    ext.refresh()
    cert, key = make_cert(tmp_path, "koord-sched")
    with serving(ext, tlsserve.server_context(flags(cert, key))) as port:
        res = filter_over(f"https://127.0.0.1:{port}", client(cert))
        assert res["NodeNames"] == ["gpu-b"] and res["Error"] == ""
        # a client that does not trust the certificate is refused by its own verification
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            filter_over(f"https://127.0.0.1:{port}", ssl.create_default_context())
        # plain HTTP on the TLS port gets no answer, and the server goes on serving
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        with pytest.raises((http.client.HTTPException, OSError)):
            conn.request("POST", "/extender/filter", body=b"{}")
            conn.getresponse().read()
        conn.close()
        assert filter_over(f"https://127.0.0.1:{port}", client(cert))["NodeNames"] == ["gpu-b"]


async def test_client_certificates_are_required_with_a_client_ca(ext: Extender, tmp_path: Path) -> None:
    await asyncio.to_thread(mutual_tls, ext, tmp_path)


def mutual_tls(ext: Extender, tmp_path: Path) -> None:
    ext.refresh()
    cert, key = make_cert(tmp_path, "koord-sched")
    scheduler_cert, scheduler_key = make_cert(tmp_path, "kube-scheduler")
    stranger_cert, stranger_key = make_cert(tmp_path, "stranger")
    with serving(ext, tlsserve.server_context(flags(cert, key, scheduler_cert))) as port:
        url = f"https://127.0.0.1:{port}"
        assert filter_over(url, client(cert, scheduler_cert, scheduler_key))["NodeNames"] == ["gpu-b"]
        for who in (client(cert), client(cert, stranger_cert, stranger_key)):
            with pytest.raises((urllib.error.URLError, OSError)):
                filter_over(url, who)


async def test_plain_http_without_tls_flags(ext: Extender) -> None:
    await asyncio.to_thread(plain_http, ext)


def plain_http(ext: Extender) -> None:
    ext.refresh()
    assert tlsserve.server_context(flags()) is None
    with serving(ext, None) as port:
        assert filter_over(f"http://127.0.0.1:{port}", None)["NodeNames"] == ["gpu-b"]


def test_bad_tls_flags_are_refused_in_one_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cert, key = make_cert(tmp_path, "koord-sched")
    cases = [
        (["--tls-cert-file", str(cert)], "--tls-cert-file and --tls-private-key-file go together"),
        (["--client-ca-file", str(cert)], "--client-ca-file needs --tls-cert-file"),
        (["--tls-cert-file", str(tmp_path / "nope.crt"), "--tls-private-key-file", str(key)], "nope.crt"),
        (["--tls-cert-file", str(cert), "--tls-private-key-file", str(cert)], "--tls-private-key-file"),
        (["--tls-cert-file", str(cert), "--tls-private-key-file", str(key), "--client-ca-file", str(key)],
         "--client-ca-file"),
    ]
    for argv, said in cases:
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="koord-sched"):
            assert main(["extender", "--kubeconfig", str(tmp_path / "none"), *argv]) == 2
        [record] = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert said in record.getMessage() and "\n" not in record.getMessage() and record.exc_info is None
