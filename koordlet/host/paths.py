"""Every host path the agent touches, under injectable roots, so a simulated node dir works like `/`."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

# Upstream defaults (pkg/koordlet/util/system/config.go): DaemonSet mode mounts the host under /host-*.
DS_DEFAULTS = {
    "cgroup_root": "/host-cgroup/",
    "sys_root": "/host-sys/",
    "sys_fs_root": "/host-sys-fs/",
    "proc_root": "/proc/",
    "var_run_root": "/host-var-run/",
    "var_lib_kubelet": "/var/lib/kubelet/",
    "run_root": "/host-run/",
}
# env agent_mode=hostMode: the agent runs directly on the host.
HOST_MODE_DEFAULTS = {
    "cgroup_root": "/sys/fs/cgroup/",
    "sys_root": "/sys/",
    "sys_fs_root": "/sys/fs/",
    "proc_root": "/proc/",
    "var_run_root": "/var/run/",
    "var_lib_kubelet": "/var/lib/kubelet/",
    "run_root": "/run/",
}


@dataclass(frozen=True)
class HostPaths:
    """Roots of the host filesystems; every reader joins its paths onto one of these."""

    cgroup_root: str
    sys_root: str
    sys_fs_root: str
    proc_root: str
    var_run_root: str
    var_lib_kubelet: str
    run_root: str

    @classmethod
    def defaults(cls, env: dict[str, str] | None = None) -> HostPaths:
        env = dict(os.environ) if env is None else env
        table = HOST_MODE_DEFAULTS if env.get("agent_mode") == "hostMode" else DS_DEFAULTS
        return cls(**table)

    @classmethod
    def under(cls, host_root: str) -> HostPaths:
        """All roots at the matching host paths below `host_root` (`--host-root`)."""
        return cls(**{k: os.path.join(host_root, v.lstrip("/")) for k, v in HOST_MODE_DEFAULTS.items()})

    def with_overrides(self, **overrides: str | None) -> HostPaths:
        return replace(self, **{k: v for k, v in overrides.items() if v})

    def host_relative(self, path: str) -> str:
        """A path under one of the roots as the host names it, without the leading "/": with DaemonSet roots
        `/host-cgroup/cpu/x` → `sys/fs/cgroup/cpu/x`; a path under no root is returned unchanged."""
        best = ""
        for field_name, root in sorted(vars(self).items(), key=lambda kv: len(kv[1]), reverse=True):
            norm = os.path.join(os.path.normpath(root), "")
            if os.path.join(path, "").startswith(norm) or path == norm.rstrip("/"):
                rest = path[len(norm):] if len(path) >= len(norm) else ""
                best = os.path.join(HOST_MODE_DEFAULTS[field_name].strip("/"), rest)
                break
        return best.rstrip("/") if best else path

    def proc(self, *parts: str) -> str:
        return os.path.join(self.proc_root, *parts)

    def sys(self, *parts: str) -> str:
        return os.path.join(self.sys_root, *parts)

    def cgroup(self, *parts: str) -> str:
        return os.path.join(self.cgroup_root, *parts)

    def resctrl(self, *parts: str) -> str:
        return os.path.join(self.sys_fs_root, "resctrl", *parts)

    def var_run(self, *parts: str) -> str:
        return os.path.join(self.var_run_root, *parts)

    def kubelet(self, *parts: str) -> str:
        return os.path.join(self.var_lib_kubelet, *parts)
