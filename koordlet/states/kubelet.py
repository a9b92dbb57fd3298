"""Pod sources over HTTP: the kubelet's /pods endpoint (upstream's only source) and an API server fallback."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable

from apis.client.kubeapi import KubeClient, KubeConfig, Transport, Urllib3Transport, kubelet_config
from apis.core.errors import ApiError, InvalidInput
from apis.core.objects import JSON

log = logging.getLogger(__name__)


# observe(verb, path, code, seconds): feeds koordlet_kubelet_request_duration_seconds.
ObserveFn = Callable[[str, str, str, float], None]

# Defaults of the statesInformer flags (pkg/koordlet/statesinformer/impl/config.go).
DEFAULT_ADDRESS_TYPE = "InternalIP"
DEFAULT_READ_ONLY_PORT = 10255
DEFAULT_SYNC_TIMEOUT = 3.0

# pkg/util/node.go IsNodeAddressTypeSupported
SUPPORTED_ADDRESS_TYPES = frozenset({"Hostname", "ExternalIP", "ExternalDNS", "InternalIP", "InternalDNS"})

PODS_PATH = "/pods/"
CONFIGZ_PATH = "/configz"


def kubelet_address(node: JSON, preferred_type: str = DEFAULT_ADDRESS_TYPE) -> str:
    """The node address to dial (states_pods.go): the preferred type's entry; InternalIP for a bad type."""
    if preferred_type not in SUPPORTED_ADDRESS_TYPES:
        log.warning("kubelet address type %r is not supported, using InternalIP", preferred_type)
        preferred_type = "InternalIP"
    for entry in (node.get("status") or {}).get("addresses") or []:
        if isinstance(entry, dict) and entry.get("type") == preferred_type and entry.get("address"):
            return str(entry["address"])
    name = (node.get("metadata") or {}).get("name", "")
    raise InvalidInput(f"node {name}: no address of type {preferred_type}")


def kubelet_port(node: JSON) -> int:
    """`status.daemonEndpoints.kubeletEndpoint.port` of the Node (normally 10250)."""
    endpoint = ((node.get("status") or {}).get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}
    try:
        port = int(endpoint.get("Port", endpoint.get("port", 0)))
    except (TypeError, ValueError):
        port = 0
    if port <= 0:
        name = (node.get("metadata") or {}).get("name", "")
        raise InvalidInput(f"node {name}: no kubelet endpoint port in status.daemonEndpoints")
    return port


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


class KubeletPodSource:
    """GET /pods/ on this node's kubelet (upstream kubelet_stub.go): the pod list the agent works from."""

    name = "kubelet"

    def __init__(
        self,
        base_url: str,
        *,
        transport: Transport | None = None,
        token: Callable[[], str | None] | None = None,
        timeout: float = DEFAULT_SYNC_TIMEOUT,
        observe: ObserveFn | None = None,
        user_agent: str = "koordlet",
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._transport: Transport = transport if transport is not None else Urllib3Transport()
        self._token = token
        self._timeout = timeout
        self._observe = observe
        self._user_agent = user_agent

    @classmethod
    def from_node(
        cls,
        node: JSON,
        kube_config: KubeConfig | None,
        *,
        preferred_address_type: str = DEFAULT_ADDRESS_TYPE,
        insecure_tls: bool = False,
        read_only_port: int = DEFAULT_READ_ONLY_PORT,
        timeout: float = DEFAULT_SYNC_TIMEOUT,
        observe: ObserveFn | None = None,
    ) -> KubeletPodSource:
        """Dial the kubelet as upstream does (states_pods.go).

        Secure: https://<addr>:<kubelet port> with the agent's API credentials, certificates unverified.
        `insecure_tls`: plain http://<addr>:<read-only port> without credentials.
        """
        host = _host(kubelet_address(node, preferred_address_type))
        if insecure_tls:
            return cls(f"http://{host}:{read_only_port}", timeout=timeout, observe=observe)
        if kube_config is None:
            raise InvalidInput("the secure kubelet port needs API credentials (kubeconfig or in-cluster)")
        cfg = kubelet_config(kube_config)
        return cls(
            f"https://{host}:{kubelet_port(node)}",
            transport=Urllib3Transport(cfg, maxsize=1),
            token=cfg.bearer_token,
            timeout=timeout,
            observe=observe,
            user_agent=cfg.user_agent,
        )

    def _get(self, path: str) -> tuple[int, bytes]:
        headers = {"Accept": "application/json", "User-Agent": self._user_agent}
        token = self._token() if self._token is not None else None
        if token:
            headers["Authorization"] = f"Bearer {token}"
        url = self.base_url + path
        start = time.monotonic()
        # Unreachable (an ApiError) propagates; like upstream, only answered requests are observed.
        status, _, body = self._transport.request("GET", url, headers, None, self._timeout)
        if self._observe is not None:
            try:
                self._observe("get", path, str(status), time.monotonic() - start)
            except Exception:  # a metrics hook must never break the pod sync
                log.exception("kubelet request observer failed")
        if status != 200:
            raise ApiError(status, f"request {url} failed, code {status}")
        return status, body

    def _get_json(self, path: str) -> JSON:
        status, body = self._get(path)
        try:
            obj = json.loads(body)
        except ValueError as e:
            raise ApiError(status, f"parse kubelet {path} response failed: {e}") from e
        if not isinstance(obj, dict):
            raise ApiError(status, f"parse kubelet {path} response failed: not a JSON object")
        return obj

    def list_pods(self) -> list[JSON]:
        """The kubelet's PodList items. An empty list raises: upstream reads it as a restarting kubelet."""
        items = self._get_json(PODS_PATH).get("items") or []
        if not isinstance(items, list):
            raise ApiError(200, "parse kubelet pod list failed: items is not a list")
        if not items:
            raise ApiError(200, "kubelet returned an empty pod list (kubelet restarting?)")
        return [p for p in items if isinstance(p, dict)]

    def get_configz(self) -> JSON:
        """The kubelet's running configuration: the `kubeletconfig` object of GET /configz."""
        config = self._get_json(CONFIGZ_PATH).get("kubeletconfig")
        if not isinstance(config, dict):
            raise ApiError(200, "kubelet /configz has no kubeletconfig object")
        return config


class ApiServerPodSource:
    """This node's pods from the API server (`spec.nodeName` field selector), for an unreachable kubelet."""

    name = "apiserver"

    def __init__(self, client: KubeClient, node_name: str) -> None:
        self._client = client
        self._node_name = node_name

    def list_pods(self) -> list[JSON]:
        pod_list = self._client.list("/api/v1/pods", field_selector=f"spec.nodeName={self._node_name}")
        items = pod_list.get("items") or []
        return [p for p in items if isinstance(p, dict)]
