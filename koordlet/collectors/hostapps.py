"""Cgroup dirs of NodeSLO `hostApplications` (processes outside Kubernetes whose usage NodeMetric reports).

Upstream: pkg/koordlet/util/host_application.go (dir rules), collectors/hostapplication.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

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


def hostapp_dir(spec: dict[str, Any], driver: CgroupDriver) -> str:
    name = str(spec.get("name", ""))
    cgroup_path = spec.get("cgroupPath")
    if not isinstance(cgroup_path, dict):
        qos = spec.get("qos", "")
        base = "host-latency-sensitive" if qos in _LS_QOS else "host-best-effort" if qos == "BE" else ""
        return os.path.join(base, name)
    base_qos = _BASES.get(str(cgroup_path.get("base", "")))
    base = qos_dir(driver, base_qos) if base_qos is not None else ""
    return os.path.join(base, str(cgroup_path.get("parentDir", "")), str(cgroup_path.get("relativePath", "")))


def host_apps(nodeslo_spec: dict[str, Any] | None, driver: CgroupDriver) -> list[HostApp]:
    apps = (nodeslo_spec or {}).get("hostApplications") or []
    out = []
    for spec in apps if isinstance(apps, list) else []:
        if isinstance(spec, dict) and spec.get("name"):
            out.append(HostApp(str(spec["name"]), str(spec.get("priority", "")), str(spec.get("qos", "")),
                               hostapp_dir(spec, driver)))
    return out


def hostapp_targets(apps: list[HostApp]) -> list[Target]:
    return [Target("hostapp", a.name, a.rel_dir, f"hostApplication/{a.name}") for a in apps]
