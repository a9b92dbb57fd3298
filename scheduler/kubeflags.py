"""kube-scheduler's (and koord-scheduler's) command line on `koord-sched run`, as the chart renders it:
`--port=10251 --authentication-skip-lookup=true --v=4 --feature-gates= --config=...` (v1.7 adds
`--enable-network-topology-manager=true`), plus `--leader-elect`, `--bind-address` and `--secure-port`.

Each flag is either acted on (`--port` is the diagnosis/metrics port, `--v` the log level, the topology manager
switch, `--bind-address` the address of the secure and services ports, `--secure-port` with a --tls-cert-file) or
named once at start as accepted and not acted on; nothing given is silently ignored.
"""

from __future__ import annotations

import argparse
import logging

from scheduler.gang.model import parse_go_duration

TRUE, FALSE = ("true", "t", "1", "yes"), ("false", "f", "0", "no")


def go_bool(text: str) -> bool:
    """A Go flag's boolean (`--flag`, `--flag=true`, `--flag=false`)."""
    low = text.strip().lower()
    if low in TRUE:
        return True
    if low in FALSE:
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean {text!r} (want true or false)")


def go_duration(text: str) -> float:
    """A Go duration flag (`5m`, `90s`) in seconds."""
    got = parse_go_duration(text)
    if got is None or got < 0:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r} (want a Go duration such as 5m or 30s)")
    return got


# flags koord-sched accepts as kube-scheduler does and does not act on: name → why
NOT_ACTED_ON = {
    "authentication_skip_lookup": "--authentication-skip-lookup",
    "authentication_kubeconfig": "--authentication-kubeconfig",
    "authorization_kubeconfig": "--authorization-kubeconfig",
    "feature_gates": "--feature-gates",
}
# the feature gates koord-sched acts on (--feature-gates Name=true,...); any other gate is named as not acted on
GUARANTEE_USAGE = "ElasticQuotaGuaranteeUsage"  # ElasticQuota: a quota's usage beyond its min is guaranteed
MULTI_QUOTA_TREE = "MultiQuotaTree"  # ElasticQuota trees by tree-id; koord-sched honours them unless it is false
ACTED_GATES = (GUARANTEE_USAGE, MULTI_QUOTA_TREE)
# served only with a certificate (--tls-cert-file): koord-sched makes no self-signed one as kube-scheduler does
SECURE_SERVING = {"secure_port": "--secure-port"}
SECURE_PORT = 10259  # kube-scheduler's default secure port
SERVICES_PORT = 10252  # the plugin services' own port in v0.7's release text


def add_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", type=int, default=None,
                   help="kube-scheduler's insecure port: the diagnosis API, /healthz and /metrics on :PORT (0: none; "
                        "--addr wins when both are given)")
    p.add_argument("-v", "--v", type=int, default=None, dest="verbosity",
                   help="klog verbosity: 4 and above log at debug level, below at info")
    p.add_argument("--leader-elect", type=go_bool, nargs="?", const=True, default=None,
                   help="leader election (overrides the config's leaderElection.leaderElect)")
    p.add_argument("--enable-network-topology-manager", type=go_bool, nargs="?", const=True, default=None,
                   help="the network topology manager: the tree of ClusterNetworkTopology 'default' (its status "
                        "written), needed by gangs with a network-topology-spec (default: off, as upstream's)")
    p.add_argument("--authentication-skip-lookup", type=go_bool, nargs="?", const=True, default=None,
                   help=argparse.SUPPRESS)
    p.add_argument("--authentication-kubeconfig", default=None, help=argparse.SUPPRESS)
    p.add_argument("--authorization-kubeconfig", default=None, help=argparse.SUPPRESS)
    p.add_argument("--pod-max-in-unschedulable-pods-duration", type=go_duration, default=None,
                   dest="pod_max_in_unschedulable",
                   help="how long an unschedulable pod waits for an event before it is tried again anyway (default "
                        "5m, kube-scheduler's)")
    p.add_argument("--feature-gates", default=None,
                   help=f"Name=true|false,...: acted on: {', '.join(ACTED_GATES)}; others accepted and named")
    p.add_argument("--bind-address", default=None,
                   help="address of --secure-port and --services-port (default: all interfaces)")
    p.add_argument("--secure-port", type=int, default=None,
                   help=f"with --tls-cert-file: what --port serves, over HTTPS on this port (default {SECURE_PORT})")
    p.add_argument("--services-port", type=int, default=None,
                   help=f"the plugin services (/apis/v1/) alone on this port (default {SERVICES_PORT}; 0: none)")


def log_level(ns: argparse.Namespace) -> int:
    v = getattr(ns, "verbosity", None)
    return logging.DEBUG if v is not None and v >= 4 else logging.INFO


def diagnosis_addr(ns: argparse.Namespace) -> str:
    """--addr when given, else --port's (0: none), else :10251 (kube-scheduler's insecure port)."""
    if ns.addr is not None:
        return str(ns.addr)
    if ns.port is not None:
        return f":{ns.port}" if ns.port > 0 else ""
    return ":10251"


def secure_port(ns: argparse.Namespace) -> int:
    return SECURE_PORT if ns.secure_port is None else int(ns.secure_port)


def services_port(ns: argparse.Namespace) -> int:
    """--services-port, else 10252; 0 means none."""
    return SERVICES_PORT if ns.services_port is None else max(int(ns.services_port), 0)


def gates(text: str | None) -> dict[str, bool]:
    """`--feature-gates` as Go's map flag: `Name=bool` pairs, comma-separated; ValueError names a bad pair."""
    out: dict[str, bool] = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        name, _, value = item.partition("=")
        try:
            if not name.strip():
                raise argparse.ArgumentTypeError(item)
            out[name.strip()] = go_bool(value)
        except argparse.ArgumentTypeError:
            raise ValueError(f"--feature-gates: {item!r} (want Name=true|false)") from None
    return out


def _unacted_gates(text: str) -> str | None:
    """The --feature-gates text less the gates acted on; None when only those were given."""
    rest = [i for i in text.split(",") if i.strip().partition("=")[0].strip() not in ACTED_GATES]
    return ",".join(rest) if rest or not text.strip() else None


def not_acted_on(ns: argparse.Namespace) -> list[str]:
    """The flags given that koord-sched accepts and does nothing with, as `--flag=value`."""
    out = []
    unused = dict(NOT_ACTED_ON)
    if not getattr(ns, "tls_cert_file", None):
        unused.update(SECURE_SERVING)
    for attr, flag in unused.items():
        value = getattr(ns, attr, None)
        if attr == "feature_gates" and value is not None:
            value = _unacted_gates(str(value))
        if value is not None:
            shown = str(value).lower() if isinstance(value, bool) else value
            out.append(f"{flag}={shown}")
    return out
