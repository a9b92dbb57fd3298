"""Ready the node for bcc at the agent's start, whatever `command` the manifest runs: kernel headers and tracefs."""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import re
from collections.abc import Callable, MutableMapping

log = logging.getLogger(__name__)

# The image's Debian headers merged into one tree (scripts/install.sh merge_headers); bcc's BCC_KERNEL_SOURCE takes
# that single directory. Our program takes struct offsets from BTF, so their kernel version does not matter.
IMAGE_HEADERS = "/usr/lib/koordlet/kernel-headers"
# bcc reads tracepoint formats and ids from tracefs, older bcc through debugfs' tracing directory
TRACE_MOUNTS = (("tracefs", "/sys/kernel/tracing"), ("debugfs", "/sys/kernel/debug"))

_logged: set[str] = set()


def _once(level: int, msg: str, *args: object) -> None:
    key = msg % args
    if key not in _logged:
        _logged.add(key)
        log.log(level, msg, *args)


def _unescape(field: str) -> str:
    """mountinfo's octal escapes (`\\040` for a space) in a mount point."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mounted_type(path: str, mountinfo: str = "/proc/self/mountinfo") -> str | None:
    """The filesystem type of the topmost mount at exactly `path` in this mount namespace, None when nothing is
    mounted there (a bind of a plain directory counts as its filesystem's type)."""
    path = os.path.normpath(path)
    found = None
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                # `36 35 0:12 / /sys/kernel/tracing rw,relatime shared:9 - tracefs nodev rw`: point in field 5,
                # type after `-`; later lines are mounted over earlier ones
                fields = line.split()
                if "-" in fields and len(fields) > 4 and _unescape(fields[4]) == path:
                    found = fields[fields.index("-") + 1]
    except OSError:
        return None
    return found


def _libc_mount(fstype: str, target: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(b"nodev", target.encode(), fstype.encode(), ctypes.c_ulong(0), None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), target)


def kernel_source(environ: MutableMapping[str, str], release: str | None = None, modules: str = "/lib/modules",
                  image_headers: str = IMAGE_HEADERS) -> str | None:
    """Point bcc at the image's headers when the node's (`<modules>/<release>/build`, mounted from the node) do not
    resolve; an explicit BCC_KERNEL_SOURCE is kept. Returns the directory set, or None."""
    if environ.get("BCC_KERNEL_SOURCE"):
        return None
    release = release or os.uname().release
    build = os.path.join(modules, release, "build")
    if os.path.isdir(os.path.join(build, "include")) or not os.path.isdir(image_headers):
        return None
    environ["BCC_KERNEL_SOURCE"] = image_headers
    _once(logging.INFO, "kernel headers for %s not found at %s: bcc compiles against the image's (%s)", release,
          build, image_headers)
    return image_headers


def trace_mounts(targets: tuple[tuple[str, str], ...] = TRACE_MOUNTS, mountinfo: str = "/proc/self/mountinfo",
                 mount: Callable[[str, str], None] = _libc_mount) -> list[str]:
    """Mount each of tracefs and debugfs where it is not mounted yet (the node's mount, when the manifest binds it,
    is used as it is). Returns the targets mounted now; a failure is logged once and skipped."""
    done = []
    for fstype, target in targets:
        if mounted_type(target, mountinfo) == fstype:
            continue
        try:
            mount(fstype, target)
        except OSError as e:
            reason = errno.errorcode.get(e.errno or 0, str(e.errno))
            _once(logging.WARNING, "%s is not mounted at %s and mounting it failed (%s: %s): the eBPF run-queue "
                  "program may not attach (the agent then falls back to schedstat)", fstype, target, reason,
                  e.strerror)
            continue
        done.append(target)
        _once(logging.INFO, "mounted %s at %s", fstype, target)
    return done


def prepare_host() -> None:
    """What the image's entrypoint used to do, at the start of `koordlet run`: idempotent, never raises."""
    try:
        kernel_source(os.environ)
        trace_mounts()
    except Exception as e:  # a bug here must not stop the agent: bcc then reports what it misses
        _once(logging.WARNING, "host preparation for bcc failed: %s: %s", type(e).__name__, e)
