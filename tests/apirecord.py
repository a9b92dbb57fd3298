"""Every (verb, resource) the agent's API client sent to the API double, as Kubernetes RBAC names them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

# kubelet's authorizer (pkg/kubelet/server/auth.go): these path prefixes are their own subresources of nodes, every
# other kubelet path (/pods, /configz, ...) is nodes/proxy
_KUBELET_SUBRESOURCES = {"stats": "nodes/stats", "metrics": "nodes/metrics", "logs": "nodes/log",
                         "spec": "nodes/spec"}
_WRITE_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


class Call(NamedTuple):
    group: str  # "" for the core group
    resource: str  # plural, "/subresource" appended
    verb: str


def rbac_call(method: str, path: str, params: dict[str, str]) -> Call | None:
    """The RBAC attributes of one request (k8s.io/apiserver's RequestInfoFactory, shortened), or None when the path
    is neither the API nor kubelet's."""
    parts = [p for p in path.split("/") if p]
    if not parts:
        return None
    if parts[0] == "api" and len(parts) >= 3:
        group, rest = "", parts[2:]
    elif parts[0] == "apis" and len(parts) >= 4:
        group, rest = parts[1], parts[3:]
    elif parts[0] in ("api", "apis"):
        return None  # discovery
    else:  # kubelet, authorized by kubelet itself against the API server as a nodes subresource
        return Call("", _KUBELET_SUBRESOURCES.get(parts[0], "nodes/proxy"), "get" if method == "GET" else "create")
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) != 2:
        rest = rest[2:]  # namespaced: namespaces/<ns>/<plural>/...; a bare namespaces/<name> is the object itself
    plural = rest[0]
    name = rest[1] if len(rest) > 1 else None
    sub = "/".join(rest[2:])
    resource = f"{plural}/{sub}" if sub else plural
    watch = params.get("watch", "").lower() in ("1", "true")
    if method == "GET":
        verb = "watch" if watch else "get" if name else "list"
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = _WRITE_VERBS.get(method, method.lower())
    return Call(group, resource, verb)


def calls_of(requests: Iterable[Any]) -> set[Call]:
    """The calls of kmock's recorded requests sent by the agent (User-Agent koordlet, kubeapi.USER_AGENT); a test
    acting as another client (a person editing a NodeSLO) sends its own User-Agent."""
    out: set[Call] = set()
    for r in requests:
        if not str(r.headers.get("User-Agent", "")).startswith("koordlet"):
            continue
        call = rbac_call(str(r.method.value if hasattr(r.method, "value") else r.method).upper(), r.url.path,
                         dict(r.params))
        if call is not None:
            out.add(call)
    return out


def granted(role: dict[str, Any]) -> set[Call]:
    """The (group, resource, verb) triples a ClusterRole grants (no wildcards: a wildcard is itself a finding)."""
    out: set[Call] = set()
    for rule in role.get("rules", []):
        for group in rule.get("apiGroups", []):
            for resource in rule.get("resources", []):
                for verb in rule.get("verbs", []):
                    out.add(Call(group, resource, verb))
    return out
