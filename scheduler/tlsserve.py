"""HTTPS for koord-sched's servers: the extender as kube-scheduler reaches an `enableHTTPS` extender (its tlsConfig
caFile verifies our --tls-cert-file; its certFile/keyFile are checked against --client-ca-file when given), and
`run`'s --secure-port. Each connection's handshake runs in its own handler thread, never in the accept loop."""

from __future__ import annotations

import argparse
import logging
import ssl
from http.server import ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)
HANDSHAKE_TIMEOUT = 10.0  # seconds a client has to finish its handshake and send its request


def add_flags(p: argparse.ArgumentParser) -> None:
    """kube-apiserver's (and kube-scheduler's secure serving) flag names."""
    p.add_argument("--tls-cert-file", default=None,
                   help="serve HTTPS with this PEM certificate (chain); needs --tls-private-key-file")
    p.add_argument("--tls-private-key-file", default=None, help="the PEM private key of --tls-cert-file")
    p.add_argument("--client-ca-file", default=None,
                   help="require client certificates signed by these PEM CAs (kube-scheduler's tlsConfig "
                        "certFile/keyFile)")


def server_context(ns: argparse.Namespace) -> ssl.SSLContext | None:
    """The flags' TLS context, None for plain HTTP; ValueError in one line naming the flag when they do not load."""
    cert, key, ca = ns.tls_cert_file, ns.tls_private_key_file, ns.client_ca_file
    if not cert and not key:
        if ca:
            raise ValueError("--client-ca-file needs --tls-cert-file and --tls-private-key-file")
        return None
    if not cert or not key:
        raise ValueError("--tls-cert-file and --tls-private-key-file go together")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"--tls-cert-file {cert} / --tls-private-key-file {key}: {_reason(e)}") from None
    if ca:
        try:
            ctx.load_verify_locations(cafile=ca)
        except (OSError, ssl.SSLError) as e:
            raise ValueError(f"--client-ca-file {ca}: {_reason(e)}") from None
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def _reason(e: BaseException) -> str:
    if isinstance(e, ssl.SSLError):
        return str(e.reason or e)
    if isinstance(e, OSError):
        return e.strerror or str(e)
    return str(e)


class TLSHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server that speaks TLS when `tls` is set (before serving)."""

    daemon_threads = True
    tls: ssl.SSLContext | None = None

    @property
    def scheme(self) -> str:
        return "https" if self.tls is not None else "http"

    def get_request(self) -> tuple[Any, Any]:
        conn, addr = super().get_request()
        if self.tls is None:
            return conn, addr
        conn.settimeout(HANDSHAKE_TIMEOUT)
        # the handshake happens on the handler thread's first read, so a slow client holds no one else up
        return self.tls.wrap_socket(conn, server_side=True, do_handshake_on_connect=False), addr

    def finish_request(self, request: Any, client_address: Any) -> None:
        if isinstance(request, ssl.SSLSocket):
            try:
                request.do_handshake()
            except (ssl.SSLError, OSError) as e:  # plain HTTP on the TLS port, an untrusted client certificate
                log.debug("TLS handshake with %s failed: %s", client_address[0], _reason(e))
                return
            request.settimeout(None)
        super().finish_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("connection from %s ended with an error", client_address[0], exc_info=True)
