"""Cgroup dirs of NodeSLO `hostApplications` (processes outside Kubernetes whose usage NodeMetric reports).

Upstream: pkg/koordlet/util/host_application.go (dir rules), collectors/hostapplication.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from apis.slo.types import HostApplication
from koordlet.collectors.cgroups import Target
from koordlet.host.driver import CgroupDriver, K8sQoS, qos_dir

_LS_QOS = {"LSE", "LSR", "LS"}
_BASES = {"Kubepods": K8sQoS.GUARANTEED, "KubepodsBurstable": K8sQoS.BURSTABLE,
          "KubepodsBesteffort": K8sQoS.BESTEFFORT}


@dataclass(frozen=True, slots=True)
class HostApp:
    name: str
    priority: str
    qos: str
    rel_dir: str


def hostapp_dir(app: HostApplication, driver: CgroupDriver) -> str:
    path = app.cgroup_path
    if path is None:
        base = "host-latency-sensitive" if app.qos in _LS_QOS else "host-best-effort" if app.qos == "BE" else ""
        return os.path.join(base, app.name)
    base_qos = _BASES.get(path.base)
    base = qos_dir(driver, base_qos) if base_qos is not None else ""
    return os.path.join(base, path.parent_dir, path.relative_path)


def host_apps(apps: Sequence[HostApplication], driver: CgroupDriver) -> list[HostApp]:
    """The named host applications of a NodeSLO spec, with their cgroup dirs."""
    return [HostApp(app.name, app.priority, app.qos, hostapp_dir(app, driver)) for app in apps if app.name]


def hostapp_targets(apps: list[HostApp]) -> list[Target]:
    return [Target("hostapp", a.name, a.rel_dir, f"hostApplication/{a.name}") for a in apps]
