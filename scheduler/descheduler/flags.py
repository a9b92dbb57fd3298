"""koord-descheduler's command line on `run` (upstream cmd/koord-descheduler/app/options): `--config`, the
component-base leader-election flags, the deprecated insecure serving pair `--address`/`--port`, secure serving,
`--feature-gates` (Koordinator's gates, config.features), `--v`; and `--kubeconfig` (upstream reads
clientConnection.kubeconfig; this program takes the flag too, as koord-sched does). Boolean and duration values
are Go's (scheduler.kubeflags).

Each flag is either acted on or named once at start as accepted and not acted on: secure serving (no certificate
is made as the apiserver library makes one), `--write-config-to`; and `--address`/`--port` when a
`--config` is given (upstream ignores them then: the file's healthzBindAddress and metricsBindAddress win).
"""

from __future__ import annotations

import argparse
import ipaddress
from dataclasses import replace

from scheduler.descheduler.config.features import DISABLE_PVC_RESERVATION, FeatureGates, parse_feature_gates
from scheduler.descheduler.config.types import DeschedulerConfig
from scheduler.kubeflags import go_bool, go_duration

SECURE_PORT = 10258  # upstream's DefaultDeschedulerPort
INSECURE_PORT = 10251
LEASES = "leases"
# dest → flag, accepted and not acted on
NOT_ACTED_ON = {"bind_address": "--bind-address", "secure_port": "--secure-port", "cert_dir": "--cert-dir",
                "tls_cert_file": "--tls-cert-file", "tls_private_key_file": "--tls-private-key-file",
                "write_config_to": "--write-config-to"}
_LEADER = {"leader_elect_lease_duration": "lease_duration", "leader_elect_renew_deadline": "renew_deadline",
           "leader_elect_retry_period": "retry_period", "leader_elect_resource_lock": "resource_lock",
           "leader_elect_resource_name": "resource_name", "leader_elect_resource_namespace": "resource_namespace"}


def add_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=None,
                   help="DeschedulerConfiguration (descheduler/v1alpha2) file, or the ConfigMap holding one")
    p.add_argument("--kubeconfig", default=None,
                   help="kubeconfig (default: the config's clientConnection.kubeconfig, $KUBECONFIG, in-cluster)")
    p.add_argument("-v", "--v", type=int, default=None, dest="verbosity",
                   help="klog verbosity: 4 and above log at debug level, below at info")
    le = p.add_argument_group("leader election (override the config's leaderElection)")
    le.add_argument("--leader-elect", type=go_bool, nargs="?", const=True, default=None)
    le.add_argument("--leader-elect-lease-duration", type=go_duration, default=None)
    le.add_argument("--leader-elect-renew-deadline", type=go_duration, default=None)
    le.add_argument("--leader-elect-retry-period", type=go_duration, default=None)
    le.add_argument("--leader-elect-resource-lock", default=None, help="leases (the only lock supported)")
    le.add_argument("--leader-elect-resource-name", default=None)
    le.add_argument("--leader-elect-resource-namespace", default=None)
    ins = p.add_argument_group("insecure serving: /healthz and /metrics (ignored with --config, as upstream)")
    ins.add_argument("--address", default=None, help="DEPRECATED upstream: the IP of --port (default 0.0.0.0)")
    ins.add_argument("--port", type=int, default=None, help=f"DEPRECATED upstream: the port (default "
                                                            f"{INSECURE_PORT}; 0: none)")
    sec = p.add_argument_group("secure serving (accepted, not acted on)")
    sec.add_argument("--bind-address", default=None, help=argparse.SUPPRESS)
    sec.add_argument("--secure-port", type=int, default=None, help=f"(upstream default {SECURE_PORT})")
    sec.add_argument("--cert-dir", default=None, help=argparse.SUPPRESS)
    sec.add_argument("--tls-cert-file", default=None, help=argparse.SUPPRESS)
    sec.add_argument("--tls-private-key-file", default=None, help=argparse.SUPPRESS)
    p.add_argument("--write-config-to", default=None, help=argparse.SUPPRESS)
    add_feature_gates(p)


def add_feature_gates(p: argparse.ArgumentParser) -> None:
    """`--feature-gates`, on `run` and `simulate` alike."""
    p.add_argument("--feature-gates", default=None,
                   help=f"Name=true|false,... over Koordinator's gates (acted on: {DISABLE_PVC_RESERVATION}; "
                        f"default off)")


def applied(ns: argparse.Namespace, config: DeschedulerConfig) -> DeschedulerConfig:
    """The configuration with the command line's overrides (upstream ApplyLeaderElectionTo and the insecure serving
    options); ValueError in one line naming the flag."""
    le = config.leader_election
    if ns.leader_elect is not None:
        le = replace(le, leader_elect=ns.leader_elect)
    for dest, attr in _LEADER.items():
        value = getattr(ns, dest)
        if value is not None:
            le = replace(le, **{attr: value})
    if le.leader_elect:
        if le.resource_lock != LEASES:
            raise ValueError(f"leader election: resourceLock {le.resource_lock!r} is not supported (leases only)")
        if le.lease_duration <= le.renew_deadline:
            raise ValueError("leader election: the lease duration must be greater than the renew deadline")
        if min(le.lease_duration, le.renew_deadline, le.retry_period) <= 0:
            raise ValueError("leader election: lease duration, renew deadline and retry period must be positive")
    config = replace(config, leader_election=le)
    if ns.config is None and (ns.address is not None or ns.port is not None):
        port = INSECURE_PORT if ns.port is None else ns.port
        address = "0.0.0.0" if ns.address is None else ns.address
        if not 0 <= port <= 65535:
            raise ValueError(f"--port {port} must be between 0 and 65535, inclusive. 0 for turning off insecure "
                             f"(HTTP) port")
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            raise ValueError(f"--address {address} is an invalid IP address") from None
        served = "" if port == 0 else f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"
        config = replace(config, healthz_bind_address=served, metrics_bind_address=served)
    return config


def feature_gates(ns: argparse.Namespace) -> FeatureGates:
    """`--feature-gates`; ValueError in one line naming the pair (an unknown gate, as upstream, is refused)."""
    return parse_feature_gates(ns.feature_gates)


def not_acted_on(ns: argparse.Namespace) -> list[str]:
    """The flags given that this program accepts and does nothing with, as `--flag=value`."""
    out = [f"{flag}={getattr(ns, dest)}" for dest, flag in NOT_ACTED_ON.items() if getattr(ns, dest) is not None]
    if ns.config is not None:
        out += [f"--{name}={getattr(ns, name)}" for name in ("address", "port") if getattr(ns, name) is not None]
    return out
