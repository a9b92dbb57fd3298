"""Small, allocation-light readers for host files: the only place the agent reads /proc, /sys and cgroupfs."""

from __future__ import annotations

import errno
import logging
import os
import re
import resource
from collections.abc import Iterable

from apis.core.errors import HostReadError

log = logging.getLogger(__name__)

_CHUNK = 65536  # one pread reads a whole cgroup, /proc or sysfs stat file (memory.stat is ~1.5 KiB)
_FLAGS = os.O_RDONLY | os.O_CLOEXEC
_open, _read, _pread, _close = os.open, os.read, os.pread, os.close  # bound once: called ~3000 times a second
# Descriptors the agent keeps for itself beyond the cache: sockets, NVML, the HTTP server, audit files.
_FD_RESERVE = 256


def read_bytes(path: str) -> bytes:
    """Whole file as bytes in as few syscalls as possible; HostReadError on any OS error."""
    try:
        fd = _open(path, _FLAGS)
    except OSError as e:
        raise HostReadError(f"{path}: {e.strerror}") from e
    try:
        data = _read(fd, _CHUNK)
        if len(data) == _CHUNK:
            parts = [data]
            while chunk := _read(fd, _CHUNK):
                parts.append(chunk)
            data = b"".join(parts)
        return data
    except OSError as e:
        raise HostReadError(f"{path}: {e.strerror}") from e
    finally:
        _close(fd)


class OpenFiles:
    """One kept descriptor per file, re-read with `pread(fd, n, 0)`: a collection tick re-reads the same ~3000
    cgroup files every second, and open+close is half of that cost.

    Only files of kernel pseudo-filesystems are kept (cgroup, cgroup2, proc, sysfs): they regenerate their content
    on every read from offset 0, so values are fresh, and a descriptor of a removed cgroup fails with ENODEV
    (kernfs deactivates it); that read closes it and re-opens the path once, so a cgroup recreated under the same
    path is read afresh. A regular file (a simulated node directory) would go on showing the content of a deleted
    or replaced file, so it is opened and closed per read. Past `cap` descriptors, files are opened and closed per
    read as well (counted in `fallback_reads`). Not thread-safe: one owner per instance.

    A hot loop may hold the descriptors themselves (`kept`) and pread them directly; it must drop them when
    `generation` changes (any descriptor was closed, so a held number may now name another file) and go through
    `read` after a failed pread, which re-opens the path.
    """

    __slots__ = ("_fds", "cap", "fallback_reads", "generation")

    def __init__(self, cap: int | None = None) -> None:
        self._fds: dict[str, int] = {}
        self.cap = descriptor_cap() if cap is None else cap
        self.fallback_reads = 0
        self.generation = 0

    def kept(self, paths: tuple[str, ...]) -> tuple[int, ...] | None:
        """Descriptors of all `paths`, each kept (opened now if needed), or None when any cannot be kept: a
        regular file, the cap, or an open error (then `read` reports it)."""
        out = []
        for path in paths:
            fd = self._fds.get(path)
            if fd is None:
                if len(self._fds) >= self.cap:
                    return None
                try:
                    fd = _open(path, _FLAGS)
                except OSError:
                    return None
                try:
                    keep = is_pseudo_fs(os.fstat(fd).st_dev)
                except OSError:
                    keep = False
                if not keep:
                    _close(fd)
                    return None
                self._fds[path] = fd
            out.append(fd)
        return tuple(out)

    def __len__(self) -> int:
        return len(self._fds)

    def read(self, path: str) -> bytes:
        """Whole file as bytes; HostReadError when it cannot be opened or read (its descriptor is then closed)."""
        fd = self._fds.get(path)
        if fd is not None:
            try:
                data = _pread(fd, _CHUNK, 0)
                return data if len(data) < _CHUNK else _pread_all(fd)
            except OSError:
                self._drop(path)  # a removed cgroup (ENODEV) or a replaced file: re-open once below
        elif len(self._fds) >= self.cap:
            self.fallback_reads += 1
            return read_bytes(path)
        try:
            fd = _open(path, _FLAGS)
        except OSError as e:
            raise HostReadError(f"{path}: {e.strerror}") from e
        try:
            data = _pread_all(fd)
            keep = is_pseudo_fs(os.fstat(fd).st_dev)
        except OSError as e:
            _close(fd)
            raise HostReadError(f"{path}: {e.strerror}") from e
        if keep:
            self._fds[path] = fd
        else:
            _close(fd)
        return data

    def retain(self, paths: Iterable[str]) -> int:
        """Close the descriptors of files not in `paths` (cgroups of pods that left); returns how many closed."""
        keep = paths if isinstance(paths, set | frozenset) else set(paths)
        gone = [p for p in self._fds if p not in keep]
        for p in gone:
            self._drop(p)
        return len(gone)

    def forget(self, paths: Iterable[str]) -> None:
        """Close the descriptors of these files (a cgroup that failed to read: do not pin the removed one)."""
        for p in paths:
            self._drop(p)

    def close(self) -> None:
        for p in list(self._fds):
            self._drop(p)

    def _drop(self, path: str) -> None:
        fd = self._fds.pop(path, None)
        if fd is not None:
            self.generation += 1
            try:
                _close(fd)
            except OSError as e:  # EBADF would be our bug; anything else is harmless for a read-only fd
                if e.errno == errno.EBADF:
                    log.error("descriptor of %s was already closed", path)


_PSEUDO_FS = frozenset({"cgroup", "cgroup2", "proc", "sysfs"})
_fs_types: dict[int, str] = {}  # st_dev → filesystem type, from this process's mountinfo


def is_pseudo_fs(st_dev: int, mountinfo: str = "/proc/self/mountinfo") -> bool:
    """Whether a device number is a mount of a kernel pseudo-filesystem (in this process's mount namespace);
    mountinfo is read again only for a device not seen before."""
    fs = _fs_types.get(st_dev)
    if fs is None:
        try:
            with open(mountinfo, "rb") as f:
                for line in f:
                    # `36 35 98:0 /root /mnt rw,noatime shared:1 - ext4 /dev/sda1 rw`: dev in field 3, type after `-`
                    fields = line.split()
                    major, _, minor = fields[2].partition(b":")
                    _fs_types[os.makedev(int(major), int(minor))] = fields[fields.index(b"-") + 1].decode()
        except (OSError, ValueError, IndexError):
            pass
        fs = _fs_types.setdefault(st_dev, "")
    return fs in _PSEUDO_FS


def _pread_all(fd: int) -> bytes:
    data = _pread(fd, _CHUNK, 0)
    if len(data) == _CHUNK:
        parts = [data]
        while chunk := _pread(fd, _CHUNK, _CHUNK * len(parts)):
            parts.append(chunk)
        data = b"".join(parts)
    return data


def raise_nofile_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit (as Go's runtime does since 1.19); returns (soft, hard)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        target = max(soft, 1 << 20) if soft != resource.RLIM_INFINITY else soft
    else:
        target = hard
    if soft != resource.RLIM_INFINITY and target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as e:
            log.info("could not raise the open-files limit from %d: %s", soft, e)
    return soft, hard


def descriptor_cap() -> int:
    """How many descriptors OpenFiles may keep: half of what the soft limit leaves after a reserve, so the
    agent never runs out of descriptors for sockets and one-off reads."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max((soft - _FD_RESERVE) // 2, 0)


def read_int(path: str) -> int:
    data = read_bytes(path)
    try:
        return int(data.strip())
    except ValueError as e:
        raise HostReadError(f"{path}: not an integer: {data[:40]!r}") from e


def read_text(path: str) -> str:
    return read_bytes(path).decode("utf-8", "replace")


class IntFields:
    """Values of `key value` lines for a few keys, without splitting every line: memory.stat has ~40 lines and
    we need five of them, every second, for every pod and container.

    Give the keys in the order the kernel prints them: when they are adjacent lines (memory.stat's
    anon/file/unevictable block, v1 cpu.stat's first two lines), one regex match reads them all; otherwise each key
    is searched for.
    """

    __slots__ = ("_first", "_keys", "_needles", "block", "head")

    def __init__(self, *keys: bytes) -> None:
        self._keys = keys
        self._needles = tuple((b"\n" + k + b" ", len(k) + 2) for k in keys)
        self._first = tuple(k + b" " for k in keys)
        body = rb"\n".join(re.escape(k) + rb" (\d+)" for k in keys) + rb"(?:\n|$)"
        # The adjacent block's digits as match groups, for hot paths that convert them inline: after some other
        # line (`block`, a search) or at the start of the file (`head`, a match).
        self.block = re.compile(rb"\n" + body).search
        self.head = re.compile(body).match

    def __call__(self, data: bytes) -> list[int | None]:
        m = self.block(data) or self.head(data)
        if m is not None:
            return [int(v) for v in m.groups()]
        return self._search(data)

    def _search(self, data: bytes) -> list[int | None]:
        out: list[int | None] = []
        for (needle, skip), first in zip(self._needles, self._first, strict=True):
            i = data.find(needle)
            if i >= 0:
                i += skip
            elif data.startswith(first):
                i = skip - 1
            else:
                out.append(None)
                continue
            j = data.find(b"\n", i)
            try:
                out.append(int(data[i:j] if j >= 0 else data[i:]))
            except ValueError:
                out.append(None)
        return out
