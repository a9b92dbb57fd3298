"""A small synchronous Kubernetes API client on urllib3: importing even `kubernetes.config` costs ~32 MiB RSS."""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import random
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.parse
import warnings
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol, TypeVar

import urllib3

from apis.core.errors import ApiError, Conflict, InvalidInput, NotFound
from apis.core.objects import JSON

log = logging.getLogger(__name__)

T = TypeVar("T")

# Upstream `kube-api-qps` / `kube-api-burst` defaults (cmd/koordlet/options/options.go).
DEFAULT_QPS = 20.0
DEFAULT_BURST = 30
DEFAULT_TIMEOUT = 30.0
USER_AGENT = "koordlet"

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

# client-go transport/token_source.go NewCachedFileTokenSource: the token file is re-read once the cached copy
# is older than one minute minus a 10 s leeway, so rotated projected tokens are picked up.
TOKEN_FILE_REFRESH_SECONDS = 50.0


class Gone(ApiError):
    """HTTP 410, or a watch ERROR event with code 410: resourceVersion expired: relist, then watch."""

    def __init__(self, message: str) -> None:
        super().__init__(410, message)


class Unreachable(ApiError):
    """No HTTP answer at all (connect/read failure, timeout, TLS error); status is 0 by convention."""

    def __init__(self, message: str) -> None:
        super().__init__(0, message)


# ------------------------------------------------------------------------------------------------------------
# Configuration


@dataclass
class KubeConfig:
    """Where the API server is and how to authenticate: the part of client-go rest.Config we need."""

    server: str
    token: str | None = field(default=None, repr=False)
    token_file: str | None = None
    ca_file: str | None = None
    ca_data: str | None = field(default=None, repr=False)  # PEM text
    cert_file: str | None = None
    key_file: str | None = None
    cert_data: bytes | None = field(default=None, repr=False)  # PEM
    key_data: bytes | None = field(default=None, repr=False)  # PEM
    insecure: bool = False
    tls_server_name: str | None = None
    qps: float = DEFAULT_QPS
    burst: int = DEFAULT_BURST
    timeout: float = DEFAULT_TIMEOUT
    user_agent: str = USER_AGENT
    token_refresh_seconds: float = TOKEN_FILE_REFRESH_SECONDS
    # For exec credential plugins: returns the current bearer token (refreshing it itself).
    token_provider: Callable[[], str | None] | None = field(default=None, repr=False, compare=False)
    _cached_token: str | None = field(default=None, init=False, repr=False, compare=False)
    _cached_at: float = field(default=float("-inf"), init=False, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.server = self.server.rstrip("/")

    def bearer_token(self) -> str | None:
        """The token to send now: the provider's, else the token file's (cached), else the static one."""
        if self.token_provider is not None:
            return self.token_provider()
        if not self.token_file:
            return self.token
        with self._lock:
            now = time.monotonic()
            if self._cached_token is None or now - self._cached_at >= self.token_refresh_seconds:
                try:
                    with open(self.token_file, encoding="utf-8") as f:
                        self._cached_token = f.read().strip()
                    self._cached_at = now
                except OSError as e:
                    # client-go keeps serving the last good token when a refresh fails.
                    log.error("reading token file %s: %s", self.token_file, e)
                    if self._cached_token is None:
                        return self.token
            return self._cached_token

    @classmethod
    def in_cluster(cls, env: Mapping[str, str] | None = None, sa_dir: str | None = None) -> KubeConfig:
        """The pod's service account (client-go rest.InClusterConfig); InvalidInput outside a pod."""
        env = os.environ if env is None else env
        sa_dir = SERVICE_ACCOUNT_DIR if sa_dir is None else sa_dir
        host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "")
        if not host or not port:
            raise InvalidInput("not in a cluster: KUBERNETES_SERVICE_HOST/PORT are not set")
        token_file = os.path.join(sa_dir, "token")
        if not os.path.isfile(token_file):
            raise InvalidInput(f"not in a cluster: {token_file} is missing")
        ca_file = os.path.join(sa_dir, "ca.crt")
        return cls(
            server=f"https://{_join_host_port(host, port)}",
            token_file=token_file,
            ca_file=ca_file if os.path.isfile(ca_file) else None,
        )

    @classmethod
    def from_kubeconfig(cls, path: str, context: str | None = None) -> KubeConfig:
        """One context of a kubeconfig file (the current one by default); InvalidInput when it is unusable."""
        import yaml  # only on this path: in-cluster agents never parse YAML

        try:
            with open(path, encoding="utf-8") as f:
                doc = yaml.safe_load(f) or {}
        except (OSError, yaml.YAMLError) as e:
            raise InvalidInput(f"kubeconfig {path}: {e}") from e
        if not isinstance(doc, dict):
            raise InvalidInput(f"kubeconfig {path}: not a mapping")
        base = os.path.dirname(os.path.abspath(path))
        ctx_name = context or doc.get("current-context") or ""
        ctx = _named(doc, "contexts", "context", ctx_name, path)
        cluster = _named(doc, "clusters", "cluster", str(ctx.get("cluster", "")), path)
        user = _named(doc, "users", "user", str(ctx.get("user", "")), path) if ctx.get("user") else {}
        server = cluster.get("server")
        if not server:
            raise InvalidInput(f"kubeconfig {path}: cluster of context {ctx_name!r} has no server")

        def file_path(value: Any) -> str | None:
            return os.path.join(base, str(value)) if value else None

        cfg = cls(
            server=str(server),
            token=str(user["token"]) if user.get("token") else None,
            token_file=file_path(user.get("tokenFile")),
            ca_file=file_path(cluster.get("certificate-authority")),
            ca_data=_b64(cluster.get("certificate-authority-data"), path).decode("ascii", "replace") or None,
            cert_file=file_path(user.get("client-certificate")),
            key_file=file_path(user.get("client-key")),
            cert_data=_b64(user.get("client-certificate-data"), path) or None,
            key_data=_b64(user.get("client-key-data"), path) or None,
            insecure=bool(cluster.get("insecure-skip-tls-verify", False)),
            tls_server_name=cluster.get("tls-server-name") or None,
        )
        if isinstance(user.get("exec"), dict):
            cfg.token_provider = _ExecTokenProvider(user["exec"], base)
        elif user.get("auth-provider"):
            log.warning("kubeconfig %s: auth-provider is unsupported; requests go unauthenticated", path)
        return cfg

    @classmethod
    def load(cls, kubeconfig: str | None = None) -> KubeConfig | None:
        """controller-runtime's GetConfig order: explicit path, $KUBECONFIG, in-cluster, ~/.kube/config."""
        if kubeconfig:
            return cls.from_kubeconfig(kubeconfig)
        # client-go merges a KUBECONFIG list; the agent only needs the first file that exists.
        for candidate in os.environ.get("KUBECONFIG", "").split(os.pathsep):
            if candidate and os.path.isfile(candidate):
                return cls.from_kubeconfig(candidate)
        try:
            return cls.in_cluster()
        except InvalidInput:
            pass
        home = os.path.expanduser("~/.kube/config")
        if os.path.isfile(home):
            return cls.from_kubeconfig(home)
        return None


def _join_host_port(host: str, port: str | int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def _named(doc: Mapping[str, Any], section: str, key: str, name: str, path: str) -> dict[str, Any]:
    for entry in doc.get(section) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            value = entry.get(key) or {}
            if isinstance(value, dict):
                return value
    raise InvalidInput(f"kubeconfig {path}: no {key} named {name!r}")


def _b64(value: Any, path: str) -> bytes:
    if not value:
        return b""
    try:
        return base64.b64decode(str(value), validate=False)
    except ValueError as e:
        raise InvalidInput(f"kubeconfig {path}: bad base64 data: {e}") from e


class _ExecTokenProvider:
    """client.authentication.k8s.io exec plugins (token credentials only), cached until their expiry."""

    def __init__(self, spec: Mapping[str, Any], base_dir: str) -> None:
        command = str(spec.get("command", ""))
        if not command:
            raise InvalidInput("kubeconfig exec plugin without a command")
        # client-go resolves a relative command containing a separator against the kubeconfig directory.
        if os.sep in command and not os.path.isabs(command):
            command = os.path.join(base_dir, command)
        self._argv = [command, *(str(a) for a in spec.get("args") or [])]
        self._env = {str(e["name"]): str(e["value"]) for e in spec.get("env") or [] if "name" in e}
        self._api_version = str(spec.get("apiVersion", "client.authentication.k8s.io/v1"))
        self._token: str | None = None
        self._expiry = float("-inf")
        self._lock = threading.Lock()

    def __call__(self) -> str | None:
        with self._lock:
            if self._token is None or time.time() >= self._expiry:
                self._refresh()
            return self._token

    def _refresh(self) -> None:
        exec_info = {
            "apiVersion": self._api_version,
            "kind": "ExecCredential",
            "spec": {"interactive": False},
        }
        env = {**os.environ, **self._env, "KUBERNETES_EXEC_INFO": json.dumps(exec_info)}
        try:
            out = subprocess.run(self._argv, env=env, capture_output=True, check=True, timeout=60).stdout
            status = json.loads(out).get("status") or {}
        except (OSError, subprocess.SubprocessError, ValueError) as e:
            raise InvalidInput(f"kubeconfig exec plugin {self._argv[0]}: {e}") from e
        if not status.get("token"):
            raise InvalidInput(f"kubeconfig exec plugin {self._argv[0]}: no token (client certs unsupported)")
        self._token = str(status["token"])
        expiry = status.get("expirationTimestamp")
        try:
            self._expiry = (
                datetime.fromisoformat(str(expiry).replace("Z", "+00:00")).timestamp() if expiry else 1e18
            )
        except ValueError:
            self._expiry = time.time() + 60


# ------------------------------------------------------------------------------------------------------------
# Transport


class StreamResponse(Protocol):
    """An HTTP response whose body is read incrementally (watch streams)."""

    status: int

    def iter_lines(self) -> Iterator[bytes]: ...

    def read(self) -> bytes: ...

    def close(self) -> None: ...


class Transport(Protocol):
    """Sends one HTTP request: raises Unreachable when no HTTP answer arrives, never on an HTTP status."""

    def request(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None, timeout: float
    ) -> tuple[int, Mapping[str, str], bytes]: ...

    def stream(
        self, method: str, url: str, headers: Mapping[str, str], timeout: float, read_timeout: float | None
    ) -> StreamResponse: ...


class _Urllib3Stream:
    def __init__(self, resp: urllib3.BaseHTTPResponse) -> None:
        self._resp = resp
        self.status = resp.status

    def iter_lines(self) -> Iterator[bytes]:
        try:
            yield from self._resp
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise Unreachable(f"stream interrupted: {e}") from e

    def read(self) -> bytes:
        try:
            return self._resp.read()
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise Unreachable(f"reading response: {e}") from e

    def close(self) -> None:
        # A half-read watch body cannot go back to the pool: drop the connection.
        self._resp.close()
        self._resp.release_conn()

    def abort(self) -> None:
        """From another thread: wake a reader blocked in recv (close() alone does not on Linux)."""
        sock = getattr(getattr(self._resp, "connection", None), "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class Urllib3Transport:
    """The default transport: one urllib3 pool manager with TLS settings taken from a KubeConfig."""

    # One retry for a failed connect only; reads are never retried (a PUT may have been applied).
    _RETRIES = urllib3.Retry(total=1, connect=1, read=0, redirect=0, status=0, other=0, raise_on_status=False)

    def __init__(self, config: KubeConfig | None = None, *, maxsize: int = 4) -> None:
        kwargs: dict[str, Any] = {"maxsize": maxsize, "block": False, "retries": self._RETRIES}
        if config is not None:  # the context is only used for https:// pools
            kwargs["ssl_context"] = _ssl_context(config)
            if config.insecure:
                kwargs["cert_reqs"] = "CERT_NONE"
                kwargs["assert_hostname"] = False
                # Verification is off on purpose (kubelet, insecure-skip-tls-verify): no warning per request.
                warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)
            else:
                kwargs["cert_reqs"] = "CERT_REQUIRED"
            if config.tls_server_name:
                kwargs["server_hostname"] = config.tls_server_name
        self._pool = urllib3.PoolManager(**kwargs)

    def request(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None, timeout: float
    ) -> tuple[int, Mapping[str, str], bytes]:
        try:
            resp = self._pool.request(
                method,
                url,
                body=body,
                headers=dict(headers),
                timeout=urllib3.Timeout(total=timeout),
                redirect=False,
            )
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise Unreachable(f"{method} {_strip_query(url)}: {_reason(e)}") from e
        return resp.status, resp.headers, resp.data

    def stream(
        self, method: str, url: str, headers: Mapping[str, str], timeout: float, read_timeout: float | None
    ) -> StreamResponse:
        try:
            resp = self._pool.request(
                method,
                url,
                headers=dict(headers),
                timeout=urllib3.Timeout(connect=timeout, read=read_timeout),
                preload_content=False,
                redirect=False,
            )
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise Unreachable(f"{method} {_strip_query(url)}: {_reason(e)}") from e
        return _Urllib3Stream(resp)

    def close(self) -> None:
        self._pool.clear()


def _reason(e: Exception) -> str:
    inner = getattr(e, "reason", None)
    return str(inner) if inner is not None else str(e)


def _strip_query(url: str) -> str:
    return url.split("?", 1)[0]


def _ssl_context(config: KubeConfig) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    if config.insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        try:
            if config.ca_file or config.ca_data:
                ctx.load_verify_locations(cafile=config.ca_file, cadata=config.ca_data)
        except (OSError, ssl.SSLError) as e:
            raise InvalidInput(f"loading the cluster CA: {e}") from e
    if config.cert_file or config.cert_data:
        _load_client_cert(ctx, config)
    return ctx


def _load_client_cert(ctx: ssl.SSLContext, config: KubeConfig) -> None:
    # ssl loads a client key pair only from files: inline data goes via private temp files.
    with tempfile.TemporaryDirectory(prefix="koordlet-tls-") as tmp:
        cert_file, key_file = config.cert_file, config.key_file
        if config.cert_data:
            cert_file = os.path.join(tmp, "tls.crt")
            _write_private(cert_file, config.cert_data)
        if config.key_data:
            key_file = os.path.join(tmp, "tls.key")
            _write_private(key_file, config.key_data)
        try:
            ctx.load_cert_chain(certfile=str(cert_file), keyfile=key_file)
        except (OSError, ssl.SSLError) as e:
            raise InvalidInput(f"loading the client certificate: {e}") from e


def _write_private(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


# ------------------------------------------------------------------------------------------------------------
# Rate limiting and retries


class TokenBucket:
    """x/time/rate semantics: starts full with `burst` tokens, refills at `qps`; qps <= 0 means no limit."""

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.qps = qps
        self.burst = max(1, burst)
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(self.burst)
        self._last = clock()
        self._lock = threading.Lock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now

    def available(self) -> float:
        if self.qps <= 0:
            return float(self.burst)
        with self._lock:
            self._refill()
            return self._tokens

    def try_acquire(self) -> bool:
        """Take a token if one is there now (rate.Limiter.Allow)."""
        if self.qps <= 0:
            return True
        with self._lock:
            self._refill()
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return True
            return False

    def acquire(self) -> None:
        """Take a token, sleeping until it is due (rate.Limiter.Wait: reserved before sleeping)."""
        if self.qps <= 0:
            return
        with self._lock:
            self._refill()
            self._tokens -= 1.0
            wait = -self._tokens / self.qps if self._tokens < 0 else 0.0
        if wait > 0:
            self._sleep(wait)


@dataclass(frozen=True, slots=True)
class Backoff:
    """apimachinery wait.Backoff: `steps` attempts; sleeps `duration` (times `factor` per step) + jitter."""

    duration: float = 0.01
    factor: float = 1.0
    jitter: float = 0.1
    steps: int = 5
    cap: float = 0.0  # 0 = no cap


# client-go util/retry/util.go
DEFAULT_RETRY = Backoff(duration=0.01, factor=1.0, jitter=0.1, steps=5)
DEFAULT_BACKOFF = Backoff(duration=0.01, factor=5.0, jitter=0.1, steps=4)


def retry_on_conflict(
    fn: Callable[[], T],
    attempts: int | None = None,
    backoff: Backoff = DEFAULT_RETRY,
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """client-go retry.RetryOnConflict: re-call fn while it raises Conflict, re-raise at the end.

    fn must re-read the object itself on each call so the retry carries a fresh resourceVersion.
    """
    steps = max(1, attempts if attempts is not None else backoff.steps)
    delay = backoff.duration
    for attempt in range(1, steps + 1):
        try:
            return fn()
        except Conflict:
            if attempt >= steps:
                raise
            pause = delay + (random.random() * backoff.jitter * delay if backoff.jitter > 0 else 0.0)
            log.debug("conflict on attempt %d/%d, retrying in %.3fs", attempt, steps, pause)
            sleep(pause)
            delay *= backoff.factor
            if backoff.cap > 0:
                delay = min(delay, backoff.cap)
    raise AssertionError("unreachable")


# ------------------------------------------------------------------------------------------------------------
# Client


def api_error(status: int, body: bytes, fallback: str = "") -> ApiError:
    """The error for an HTTP status, using the message of a metav1.Status body when there is one."""
    message = ""
    try:
        obj = json.loads(body) if body else None
    except ValueError:
        obj = None
    if isinstance(obj, dict):
        message = str(obj.get("message") or obj.get("reason") or "")
    if not message:
        message = body[:200].decode("utf-8", "replace").strip() or fallback or f"HTTP {status}"
    if status == 404:
        return NotFound(message)
    if status == 409:
        return Conflict(message)
    if status == 410:
        return Gone(message)
    return ApiError(status, message)


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """A Retry-After header in whole seconds (client-go rest/request.go retryAfterSeconds: the HTTP-date form is
    not read), None when absent or unusable."""
    for name, value in headers.items():
        if name.lower() == "retry-after":
            try:
                seconds = int(str(value).strip())
            except ValueError:
                return None
            return float(seconds) if seconds >= 0 else None
    return None


class KubeClient:
    """JSON requests to the API server under a client-side rate limit; errors become ApiError subclasses."""

    def __init__(
        self, config: KubeConfig, transport: Transport | None = None, *, limiter: TokenBucket | None = None
    ) -> None:
        self.config = config
        self.transport: Transport = transport if transport is not None else Urllib3Transport(config)
        self.limiter = limiter if limiter is not None else TokenBucket(config.qps, config.burst)
        self._streams: set[StreamResponse] = set()
        self._streams_lock = threading.Lock()

    def url(self, path: str, params: Mapping[str, str] | None = None) -> str:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        return f"{self.config.server}{path}{query}"

    def _headers(self, content_type: str | None = None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": self.config.user_agent}
        token = self.config.bearer_token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> JSON:
        """One JSON round trip: NotFound/Conflict/Gone/ApiError on HTTP errors, Unreachable if no answer."""
        data: bytes | None = None
        if body is not None:
            try:
                data = json.dumps(body, separators=(",", ":")).encode()
            except (TypeError, ValueError) as e:
                raise InvalidInput(f"{method} {path}: body is not JSON-serializable: {e}") from e
        self.limiter.acquire()
        status, headers, raw = self.transport.request(
            method,
            self.url(path, params),
            self._headers(content_type if data is not None else None),
            data,
            self.config.timeout,
        )
        log.debug("%s %s -> %d", method, path, status)
        if not 200 <= status < 300:
            error = api_error(status, raw)
            error.retry_after = retry_after_seconds(headers)
            raise error
        try:
            obj = json.loads(raw) if raw else {}
        except ValueError as e:
            raise ApiError(status, f"{method} {path}: response is not JSON: {e}") from e
        if not isinstance(obj, dict):
            raise ApiError(status, f"{method} {path}: response is not a JSON object")
        return obj

    def get(self, path: str, params: Mapping[str, str] | None = None) -> JSON:
        return self.request("GET", path, params=params)

    def list(
        self,
        path: str,
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
        params: Mapping[str, str] | None = None,
    ) -> JSON:
        """The List object (`items`, `metadata.resourceVersion`) of a collection path."""
        query = dict(params or {})
        if field_selector:
            query["fieldSelector"] = field_selector
        if label_selector:
            query["labelSelector"] = label_selector
        return self.request("GET", path, params=query or None)

    def put(self, path: str, obj: Mapping[str, Any]) -> JSON:
        return self.request("PUT", path, body=obj)

    def post(self, path: str, obj: Mapping[str, Any]) -> JSON:
        return self.request("POST", path, body=obj)

    def patch(self, path: str, patch: Any, *, patch_type: str = "application/merge-patch+json") -> JSON:
        return self.request("PATCH", path, body=patch, content_type=patch_type)

    def watch(
        self,
        path: str,
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
        resource_version: str | None = None,
        timeout_seconds: int = 300,
        allow_bookmarks: bool = False,
    ) -> Generator[JSON, None, None]:
        """Watch events (`{"type": ADDED|MODIFIED|DELETED|BOOKMARK, "object": ...}`) until the stream ends.

        An expired resourceVersion (HTTP 410, or an ERROR event with code 410) raises Gone: relist, then watch
        from the list's resourceVersion. Other ERROR events raise the matching ApiError. Close the generator
        to stop early.
        """
        query: dict[str, str] = {"watch": "true", "timeoutSeconds": str(int(timeout_seconds))}
        if field_selector:
            query["fieldSelector"] = field_selector
        if label_selector:
            query["labelSelector"] = label_selector
        if resource_version:
            query["resourceVersion"] = resource_version
        if allow_bookmarks:
            query["allowWatchBookmarks"] = "true"
        self.limiter.acquire()
        # The server ends the watch after timeoutSeconds; the read timeout only guards against a silent peer.
        resp = self.transport.stream(
            "GET", self.url(path, query), self._headers(), self.config.timeout, float(timeout_seconds) + 30.0
        )
        with self._streams_lock:
            self._streams.add(resp)
        try:
            if resp.status != 200:
                raise api_error(resp.status, resp.read())
            for line in resp.iter_lines():
                line = line.strip()
                if not line:
                    continue
                try:
                    event = json.loads(line)
                except ValueError as e:
                    raise ApiError(200, f"watch {path}: malformed event: {line[:120]!r}") from e
                if not isinstance(event, dict):
                    raise ApiError(200, f"watch {path}: malformed event: {line[:120]!r}")
                if event.get("type") == "ERROR":
                    obj = event.get("object") or {}
                    code = int(obj.get("code") or 500) if isinstance(obj, dict) else 500
                    raise api_error(code, json.dumps(obj).encode())
                yield event
        finally:
            with self._streams_lock:
                self._streams.discard(resp)
            resp.close()

    def close(self) -> None:
        """Close the pool and abort open watches (their threads see an error and exit)."""
        with self._streams_lock:
            streams = list(self._streams)
        for stream in streams:
            abort = getattr(stream, "abort", None)
            if callable(abort):
                abort()
        close = getattr(self.transport, "close", None)
        if callable(close):
            close()


def kubelet_config(config: KubeConfig) -> KubeConfig:
    """The API credentials with TLS verification off, as upstream dials the kubelet (states_pods.go)."""
    return replace(config, insecure=True, ca_file=None, ca_data=None, tls_server_name=None)


__all__ = [
    "DEFAULT_BACKOFF",
    "DEFAULT_BURST",
    "DEFAULT_QPS",
    "DEFAULT_RETRY",
    "Backoff",
    "Gone",
    "KubeClient",
    "KubeConfig",
    "StreamResponse",
    "TokenBucket",
    "Transport",
    "Unreachable",
    "Urllib3Transport",
    "api_error",
    "kubelet_config",
    "retry_after_seconds",
    "retry_on_conflict",
]
