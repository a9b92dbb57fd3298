"""The node snapshot every QoS planner reads: pods, merged NodeSLO, host apps and the cgroup layout."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from apis.core.errors import PlanError
from apis.core.objects import JSON
from apis.slo.types import NodeSLOSpec
from koordlet.collectors.hostapps import HostApp
from koordlet.host.driver import CgroupDriver, K8sQoS, qos_dir
from koordlet.host.paths import HostPaths
from koordlet.host.resources import resource_path
from koordlet.metriccache import MetricCache
from koordlet.states.cpupools import CPUTopology
from koordlet.states.model import PodMeta


@dataclass(frozen=True)
class QoSState:
    paths: HostPaths
    cgroup_version: int
    driver: CgroupDriver
    pods: list[PodMeta]
    nodeslo: NodeSLOSpec  # merged, typed (apis.slo.decode.decode_nodeslo)
    host_apps: list[HostApp] = field(default_factory=list)
    nodeslo_present: bool = True
    input_errors: tuple[PlanError, ...] = ()  # found before planning (a refused NodeSLO): in every plan's errors
    # Usage-driven features (BE suppress, CPU burst) read the collection tick's latest values here, each pass: they
    # are never kept as steady facts. None when nothing collects (tests of rules that need no usage).
    cache: MetricCache | None = field(default=None, compare=False)
    node: JSON | None = field(default=None, compare=False)  # the Node object, when the API serves one
    # kubelet's running configuration (/configz) when the cluster link fetched it; else planners that need the CPU
    # manager policy read kubelet's config file themselves
    kubelet_config: JSON | None = field(default=None, compare=False)
    # the CPU topology the node info loop last read (upstream's node info collector); None: read it from sysfs
    cpu_topology: CPUTopology | None = field(default=None, compare=False)

    def qos_dir(self, qos: K8sQoS) -> str:
        return qos_dir(self.driver, qos)

    def cgroup_file(self, resource: str, rel_dir: str) -> str:
        """Absolute path of a cgroup resource file for a dir (v1: under its subsystem; v2: unified)."""
        return CGROUP_FILES.get(self.cgroup_version, self.paths, resource, rel_dir)

    def resctrl(self, *parts: str) -> str:
        return self.paths.resctrl(*parts)

    def proc(self, *parts: str) -> str:
        return self.paths.proc(*parts)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)


class CgroupFiles:
    """resource_path's answers, asked for the same pod files every pass by several planners: those asked for since
    the last `rotate` and the one before (the QoS manager rotates when the pods or the NodeSLO change), so the paths
    of pods gone are dropped within two changes, however many pods came and went (an LRU cache sized for a full
    node kept tens of thousands of gone pods' paths under churn). A hard cap rotates early if no one rotates."""

    def __init__(self, cap: int = 1 << 15) -> None:
        self.cap = cap
        self._now: dict[tuple[int, HostPaths, str, str], str] = {}
        self._before: dict[tuple[int, HostPaths, str, str], str] = {}

    def get(self, version: int, paths: HostPaths, resource: str, rel_dir: str) -> str:
        key = (version, paths, resource, rel_dir)
        path = self._now.get(key)
        if path is None:
            path = self._before.get(key)
            if path is None:
                path = resource_path(version, paths, resource, rel_dir)
            if len(self._now) >= self.cap:
                self.rotate()
            self._now[key] = path
        return path

    def rotate(self) -> None:
        self._before, self._now = self._now, {}

    def __len__(self) -> int:
        return len(self._now) + len(self._before)


CGROUP_FILES = CgroupFiles()
