"""A DaemonSet's container on this machine: its hostPath/emptyDir mounts in a private mount namespace and chroot.

Kernel filesystems (/sys, /sys/fs/cgroup, /dev, /etc/localtime) are this host's real ones; every other hostPath
is a directory under a temporary "host" tree (what kubelet would create, without touching this machine's /var,
/etc, /usr). The image is this machine's /usr, /lib, /etc plus the checkout (its venv), and `/koordlet` is the
image's entry point. The container gets its own network namespace (only loopback), so its ports never collide.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
_REAL = ("/sys", "/dev", "/etc/localtime", "/proc")  # host paths taken from this machine as they are
_IMAGE_DIRS = ("/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc")


def _real(host_path: str) -> bool:
    p = host_path.rstrip("/") or "/"
    return any(p == r or p.startswith(r + "/") for r in _REAL)


def mount_script(container: Mapping[str, Any], volumes: Sequence[Mapping[str, Any]], root: Path,
                 fake_host: Path) -> list[str]:
    """Shell lines that build `root` as the container sees it (run inside `unshare --mount`)."""
    by_name = {v["name"]: v for v in volumes}
    lines = ["set -e", "mount --make-rprivate /", "ip link set lo up"]
    for d in _IMAGE_DIRS:
        if os.path.isdir(d) and not os.path.islink(d):
            lines.append(f"mkdir -p {root}{d} && mount --rbind {d} {root}{d}")
        elif os.path.islink(d):
            lines.append(f"ln -sfn {os.readlink(d)} {root}{d}")
    for d in ("/proc", "/tmp", str(REPO)):
        lines.append(f"mkdir -p {root}{d}")
    lines += [f"mount --rbind /proc {root}/proc", f"mount -t tmpfs tmpfs {root}/tmp",
              f"mount --rbind {REPO} {root}{REPO}"]
    for m in container.get("volumeMounts") or []:
        vol = by_name[m["name"]]
        target = f"{root}{m['mountPath'].rstrip('/') or '/'}"
        if "hostPath" in vol:
            src = vol["hostPath"]["path"].strip()
            if not _real(src):
                fake = f"{fake_host}{src.rstrip('/')}"
                lines.append(f"mkdir -p {fake}")
                src = fake
        else:  # emptyDir
            src = str(fake_host / "emptydir" / vol["name"])
            lines.append(f"mkdir -p {src}")
        kind = "file" if os.path.isfile(src) else "dir"
        lines.append(f"mkdir -p {os.path.dirname(target)}" if kind == "file" else f"mkdir -p {target}")
        if kind == "file":
            lines.append(f"touch {target}")
        lines.append(f"mount --rbind {src} {target}")
        if m.get("readOnly"):
            lines.append(f"mount -o remount,bind,ro {target}")
    return lines


def start(container: Mapping[str, Any], volumes: Sequence[Mapping[str, Any]], tmp: Path, env: Mapping[str, str],
          files: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start the container's exact command and args in its pod root; `files` are written into the root first
    (path inside the container -> text), `env` is the container's environment."""
    root, fake_host = tmp / "root", tmp / "host"
    root.mkdir(parents=True)
    fake_host.mkdir()
    entry = root / "koordlet"  # the image's entry point: the agent, as the Dockerfile installs it
    entry.write_text(f"#!/bin/sh\nexec {REPO}/.venv/bin/python -m koordlet \"$@\"\n")
    entry.chmod(0o755)
    lines = mount_script(container, volumes, root, fake_host)
    for path, text in (files or {}).items():
        lines.append(f"mkdir -p {root}{os.path.dirname(path)} && printf %s {shlex.quote(text)} > {root}{path}")
    argv = [*container.get("command", []), *container.get("args", [])]
    envs = " ".join(shlex.quote(f"{k}={v}") for k, v in {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **env}.items())
    lines.append(f"cd {root} && exec chroot {root} env -i {envs} {' '.join(shlex.quote(a) for a in argv)}")
    return subprocess.Popen(["unshare", "--mount", "--net", "--fork", "--kill-child=SIGTERM", "sh", "-c",
                             "\n".join(lines)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def http_get(proc: subprocess.Popen[bytes], url: str) -> tuple[int, str]:
    """GET `url` from inside the container's network namespace (status 0: no answer)."""
    child = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
    pid = child[0] if child else str(proc.pid)
    code = ("import sys,urllib.request,urllib.error\ntry:\n r=urllib.request.urlopen(sys.argv[1],timeout=2)\n"
            " print(r.status);print(r.read().decode())\nexcept urllib.error.HTTPError as e:\n print(e.code)\n"
            "except Exception:\n print(0)\n")
    out = subprocess.run(["nsenter", "-t", pid, "-n", sys.executable, "-c", code, url], capture_output=True,
                         text=True, timeout=10).stdout
    status, _, body = out.partition("\n")
    return int(status or 0), body
