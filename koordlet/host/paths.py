"""Every host path the agent touches, under injectable roots, so a simulated node dir works like `/`."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace

from apis.core.errors import InvalidInput

log = logging.getLogger(__name__)

# Upstream defaults (pkg/koordlet/util/system/config.go): DaemonSet mode mounts the host under /host-*.
DS_DEFAULTS = {
    "cgroup_root": "/host-cgroup/",
    "sys_root": "/host-sys/",
    "sys_fs_root": "/host-sys-fs/",
    "proc_root": "/proc/",
    "var_run_root": "/host-var-run/",
    "var_lib_kubelet": "/var/lib/kubelet/",
    "run_root": "/host-run/",
    "dev_root": "/dev/",  # the DaemonSet mounts the host's /dev at /dev, as upstream's does
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
    "dev_root": "/dev/",
}
# The upstream flag that sets each root (cmd/koordlet flags, pkg/koordlet/util/system/config.go); `--dev-root-dir`
# is ours: upstream reads device nodes at a fixed /dev (runtime hooks: RDMA uverbs, and our Ascend/Cambricon nodes).
ROOT_FLAGS = {
    "cgroup_root": "--cgroup-root-dir", "sys_root": "--sys-root-dir", "sys_fs_root": "--sys-fs-root-dir",
    "proc_root": "--proc-root-dir", "var_run_root": "--var-run-root-dir",
    "var_lib_kubelet": "--var-lib-kubelet-dir", "run_root": "--run-root-dir", "dev_root": "--dev-root-dir",
}


class HostRootMissing(InvalidInput):
    """A host root the command needs does not exist; the message names the flag that sets it."""


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
    dev_root: str = "/dev/"  # host device nodes (st_rdev of /dev/infiniband/uverbsN, /dev/davinciN, ...)

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

    def dev(self, *parts: str) -> str:
        return os.path.join(self.dev_root, *parts)


def resolve_roots(explicit: Mapping[str, str | None], *, host_root: str | None = None,
                  env: Mapping[str, str] | None = None, required: Collection[str] = (),
                  isdir: Callable[[str], bool] = os.path.isdir,
                  ds_defaults: Mapping[str, str] = DS_DEFAULTS,
                  host_defaults: Mapping[str, str] = HOST_MODE_DEFAULTS) -> tuple[HostPaths, list[str]]:
    """The roots a command runs with, and one line per default that fell back to the host's own path.

    Off a DaemonSet, upstream's `/host-*` defaults do not exist: a missing default root becomes the host's path
    when that exists. An explicit flag or `--host-root` that does not exist, and a `required` root that exists in
    neither place, raise HostRootMissing naming the flag to set. Roots derived from `--host-root` may be missing
    (a simulated node may model only its devices); optional roots missing everywhere keep their default."""
    env = dict(os.environ) if env is None else env
    if host_root is not None:
        if not isdir(host_root):
            raise HostRootMissing(f"--host-root: {host_root} does not exist")
        base = HostPaths.under(host_root)
        defaults: Mapping[str, str] = {}
    else:
        in_host_mode = env.get("agent_mode") == "hostMode"
        defaults = host_defaults if in_host_mode else ds_defaults
        base = HostPaths(**defaults)
    chosen: dict[str, str] = {}
    notes: list[str] = []
    for name, flag in ROOT_FLAGS.items():
        given = explicit.get(name)
        if given:
            if not isdir(given):
                raise HostRootMissing(f"{flag}: {given} does not exist")
            chosen[name] = given
            continue
        if name not in defaults:  # derived from --host-root
            continue
        default, fallback = defaults[name], host_defaults[name]
        if isdir(default):
            continue
        if fallback != default and isdir(fallback):
            chosen[name] = fallback
            notes.append(f"{flag}: {default} does not exist (not in the DaemonSet), using the host's {fallback}")
        elif name in required:
            neither = f" and neither does {fallback}" if fallback != default else ""
            raise HostRootMissing(f"{flag}: {default} does not exist{neither}; set {flag}")
        else:
            log.debug("%s: %s does not exist; features reading it find nothing", flag, default)
    return base.with_overrides(**chosen), notes
