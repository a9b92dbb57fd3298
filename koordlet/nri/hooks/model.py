"""Plain records the runtime hooks read and return, free of protobuf, so the hooks and the wire code stay apart."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from koordlet.errors import PlanError
from koordlet.qos.model import Plan


@dataclass(frozen=True)
class PodInfo:
    """A pod sandbox as the runtime describes it (NRI PodSandbox): no kubelet or API server needed."""

    sandbox_id: str
    uid: str
    namespace: str
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    cgroup_parent: str = ""  # linux.cgroup_parent as sent: a path (cgroupfs) or a slice name (systemd)
    runtime_handler: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class ContainerInfo:
    """A container as the runtime describes it at creation (NRI Container)."""

    container_id: str
    sandbox_id: str
    name: str
    env: tuple[str, ...] = ()  # "K=V" as in the OCI spec
    cgroups_path: str = ""


@dataclass(frozen=True)
class DeviceNode:
    """A device node to add to a container; the runtime also adds the device-cgroup allow rule for it."""

    path: str
    type: str  # "c" or "b"
    major: int
    minor: int
    file_mode: int | None = 0o666


@dataclass(frozen=True)
class Mount:
    destination: str
    source: str
    type: str = "bind"
    options: tuple[str, ...] = ("rbind",)


@dataclass
class Adjustment:
    """What koordlet changes in a container's OCI spec; empty when no hook applies."""

    env: dict[str, str] = field(default_factory=dict)  # insertion order is the order sent
    mounts: list[Mount] = field(default_factory=list)
    devices: list[DeviceNode] = field(default_factory=list)
    rdt_class: str | None = None

    def __bool__(self) -> bool:
        return bool(self.env or self.mounts or self.devices or self.rdt_class is not None)


@dataclass
class HookResult:
    """A hook stage's outcome: the adjustment, host writes for the one writer (pod cgroup files, resctrl group),
    and what was skipped because of bad input (each becomes a log line and an Event naming the pod and field)."""

    adjustment: Adjustment = field(default_factory=Adjustment)
    plan: Plan = field(default_factory=Plan)
    failures: list[PlanError] = field(default_factory=list)
