"""The decoded DeschedulerConfiguration: top-level fields and profiles (upstream apis/config/types.go)."""

from __future__ import annotations

from dataclasses import dataclass, field

from apis.core.labelselector import LabelSelector

DEFAULT_PROFILE = "koord-descheduler"


@dataclass
class PluginSet:
    """One extension point after merging with the defaults: the enabled plugin names in order."""

    enabled: list[str] = field(default_factory=list)


@dataclass
class Profile:
    """profiles[i]: the merged plugin names per extension point and each plugin's decoded args (the args
    dataclass of its kind, or the raw mapping for a kind this program does not decode)."""

    name: str = DEFAULT_PROFILE
    plugins: dict[str, list[str]] = field(default_factory=dict)  # point → enabled names, merged with defaults
    args: dict[str, object] = field(default_factory=dict)  # plugin name → decoded args
    node_selector: LabelSelector | None = None

    def enabled(self, point: str) -> list[str]:
        return list(self.plugins.get(point, ()))


@dataclass
class LeaderElection:
    """component-base LeaderElectionConfiguration with the descheduler's defaults."""

    leader_elect: bool = True
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    resource_lock: str = "leases"
    resource_namespace: str = "koordinator-system"
    resource_name: str = "koord-descheduler"


@dataclass
class ClientConnection:
    """component-base ClientConnectionConfiguration with the descheduler's defaults."""

    kubeconfig: str = ""
    accept_content_types: str = ""
    content_type: str = "application/vnd.kubernetes.protobuf"
    qps: float = 50.0
    burst: int = 100


@dataclass
class DeschedulerConfig:
    """DeschedulerConfiguration (descheduler/v1alpha2) after defaulting and validation."""

    profiles: list[Profile] = field(default_factory=lambda: [Profile()])
    descheduling_interval: float = 0.0  # seconds; 0 = one round then stop
    dry_run: bool = False
    node_selector: LabelSelector | None = None
    max_pods_per_node: int | None = None
    max_pods_per_namespace: int | None = None
    max_pods_total: int | None = None
    leader_election: LeaderElection = field(default_factory=LeaderElection)
    client_connection: ClientConnection = field(default_factory=ClientConnection)
    enable_profiling: bool = True
    enable_contention_profiling: bool = True
    healthz_bind_address: str = "0.0.0.0:10251"
    metrics_bind_address: str = "0.0.0.0:10251"
