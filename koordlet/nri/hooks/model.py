"""Plain records the runtime hooks read and return, free of protobuf, so the hooks and the wire code stay apart."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from apis.core.errors import PlanError
from apis.extension.pod import AnnotationCache
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
    decoded: AnnotationCache = field(default_factory=AnnotationCache, repr=False, compare=False)

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
    uid: int | None = None  # owner inside the container; None leaves it to the runtime (root)
    gid: int | None = None


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
    cpuset_cpus: str | None = None  # linux.resources.cpu.cpus; None (or "") leaves it to the runtime
    cpu_quota: int | None = None  # linux.resources.cpu.quota (-1: unlimited)
    cpu_shares: int | None = None  # linux.resources.cpu.shares (v1 units: the runtime converts for cgroup v2)
    memory_limit: int | None = None  # linux.resources.memory.limit in bytes (-1: unlimited)

    @property
    def resources(self) -> bool:
        """Whether it sets any cgroup resource (what an UpdateContainer answer may carry)."""
        return (self.rdt_class is not None or bool(self.cpuset_cpus) or self.cpu_quota is not None
                or self.cpu_shares is not None or self.memory_limit is not None)

    def __bool__(self) -> bool:
        return bool(self.env or self.mounts or self.devices or self.resources)


@dataclass(frozen=True)
class HostDir:
    """A host directory the caller must (re)create before the container starts: a side effect no hook performs.

    `path` is the host's own path, the one a mount's `source` names (the DaemonSet mounts it at the same path).
    With `recreate`, whatever is there is removed first; then the directory is created with its parents and
    chmod'ed to `mode` (umask does not apply). Used for HAMi-core's per-container vGPU monitor directory, which
    lies outside the executor's roots."""

    path: str
    mode: int = 0o777
    recreate: bool = True
    reason: str = ""


# Which cached node facts a hook found missing (NodeFactsReader.refresh takes them).
FACT_DEV = "dev"  # device nodes under the dev root
FACT_PCI = "pci"  # PCI address -> uverbs node
FACT_RESCTRL = "resctrl"  # the resctrl mount and its groups


@dataclass
class HookResult:
    """A hook stage's outcome: the adjustment, host writes for the one writer (pod cgroup files, resctrl group),
    and what was skipped because of bad input (each becomes a log line and an Event naming the pod and field).

    - `stale_facts`: kinds of cached facts (FACT_*) a hook looked for and did not find, e.g. the uverbs node of a
      VF created after the facts were read. Non-empty: refresh those facts once and run the stage again.
    - `host_dirs`: directories the caller creates on the host before answering the runtime (see HostDir).
    - `timings`: (hook name, succeeded, seconds) per hook that ran, in order."""

    adjustment: Adjustment = field(default_factory=Adjustment)
    plan: Plan = field(default_factory=Plan)
    failures: list[PlanError] = field(default_factory=list)
    stale_facts: frozenset[str] = frozenset()
    host_dirs: list[HostDir] = field(default_factory=list)
    timings: list[tuple[str, bool, float]] = field(default_factory=list)
