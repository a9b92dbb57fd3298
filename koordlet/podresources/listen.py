"""The proxy's socket file: an owner-only socket in an owner-only directory, a stale file replaced, a live server's
socket never taken over.

Upstream (states_pod_resources.go, cleanup) removes whatever is at the path before listening, with the process
umask's permissions. gRPC core itself unlinks a Unix socket file before binding, so the liveness check below is
what keeps a second agent (or anything else serving there) from losing its socket.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import stat

from apis.core.errors import KoordletError

log = logging.getLogger(__name__)

# sockaddr_un.sun_path holds 108 bytes including the terminating NUL
MAX_SOCKET_PATH = 107
SOCKET_MODE = 0o600
DIR_MODE = 0o700


class SocketUnusable(KoordletError):
    """The proxy cannot listen at its path (taken by a live server, not a socket, too long); the message says which."""


def prepare(path: str) -> None:
    """Make `path` ready to bind: its directory made owner-only, a socket file nobody answers on removed."""
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise SocketUnusable(f"socket path {path} is {len(os.fsencode(path))} bytes, more than a Unix socket "
                             f"allows ({MAX_SOCKET_PATH}); choose a shorter --pod-resources-proxy-path")
    _own_directory(os.path.dirname(path) or ".", os.path.basename(path))
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise SocketUnusable(f"{path} exists and is not a socket; not removing it")
    if answers(path):
        raise SocketUnusable(f"another server is listening on {path}; not taking it over")
    log.info("PodResources proxy: replacing the stale socket file %s", path)
    os.unlink(path)


def answers(path: str, timeout: float = 1.0) -> bool:
    """Whether something accepts connections on the Unix socket at `path` (a refused connection is a stale file)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        try:
            s.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            return False
        except OSError as e:  # EAGAIN: a full backlog is a live server; EACCES: cannot tell, so leave it alone
            return e.errno != errno.ENOENT
    return True


def _own_directory(directory: str, socket_name: str) -> None:
    """Create the socket's directory 0700; an existing one is tightened to 0700 only when it holds nothing but the
    socket (a directory shared with other files, e.g. one named by a flag by mistake, is left as it is)."""
    if not os.path.isdir(directory):
        os.makedirs(os.path.dirname(directory) or ".", exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory, DIR_MODE)
        os.chmod(directory, DIR_MODE)  # mkdir's mode is filtered by the umask
        return
    mode = stat.S_IMODE(os.stat(directory).st_mode)
    if mode & 0o077 == 0:
        return
    others = [n for n in os.listdir(directory) if n != socket_name]
    if others:
        log.warning("PodResources proxy: %s is mode %o and holds other files (%s); leaving its mode, the socket "
                    "itself is %o", directory, mode, ", ".join(sorted(others)[:3]), SOCKET_MODE)
        return
    os.chmod(directory, DIR_MODE)


def bound(path: str) -> tuple[int, int]:
    """Restrict the freshly bound socket to its owner; its identity, to remove it later only if it is still ours."""
    os.chmod(path, SOCKET_MODE)
    st = os.lstat(path)
    return st.st_dev, st.st_ino


def identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def remove_if_ours(path: str, ident: tuple[int, int] | None) -> None:
    if ident is not None and identity(path) == ident:
        try:
            os.unlink(path)
        except OSError as e:
            log.debug("PodResources proxy: cannot remove %s: %s", path, e)
