"""Small, allocation-light readers for host files: the only place the agent reads /proc, /sys and cgroupfs."""

from __future__ import annotations

import os

from koordlet.errors import HostReadError

_CHUNK = 65536
_FLAGS = os.O_RDONLY | os.O_CLOEXEC
_open, _read, _close = os.open, os.read, os.close  # bound once: called ~3000 times a second


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

    Give the keys in the order the kernel prints them: when they are adjacent (memory.stat's anon/file/unevictable
    block, cpu.stat), one find plus one short split reads them all; otherwise each key is searched for.
    """

    __slots__ = ("_anchor", "_first", "_keys", "_needles")

    def __init__(self, *keys: bytes) -> None:
        self._keys = keys
        self._needles = tuple((b"\n" + k + b" ", len(k) + 2) for k in keys)
        self._first = tuple(k + b" " for k in keys)
        self._anchor = self._needles[0][0]

    def __call__(self, data: bytes) -> list[int | None]:
        n = len(self._keys)
        i = data.find(self._anchor) + 1
        if i == 0 and data.startswith(self._first[0]):
            i = 0
        elif i == 0:
            return self._search(data)
        tokens = data[i:].split(None, 2 * n)
        if tokens[0:2 * n:2] == list(self._keys):
            try:
                return [int(v) for v in tokens[1:2 * n:2]]
            except ValueError:
                pass
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
