"""Small, allocation-light readers for host files: the only place the agent reads /proc, /sys and cgroupfs."""

from __future__ import annotations

import os

from koordlet.errors import HostReadError

_CHUNK = 65536


def read_bytes(path: str) -> bytes:
    """Whole file as bytes in as few syscalls as possible; HostReadError on any OS error."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        raise HostReadError(f"{path}: {e.strerror}") from e
    try:
        data = os.read(fd, _CHUNK)
        if len(data) == _CHUNK:
            parts = [data]
            while chunk := os.read(fd, _CHUNK):
                parts.append(chunk)
            data = b"".join(parts)
        return data
    except OSError as e:
        raise HostReadError(f"{path}: {e.strerror}") from e
    finally:
        os.close(fd)


def read_int(path: str) -> int:
    data = read_bytes(path)
    try:
        return int(data.strip())
    except ValueError as e:
        raise HostReadError(f"{path}: not an integer: {data[:40]!r}") from e


def read_text(path: str) -> str:
    return read_bytes(path).decode("utf-8", "replace")


def parse_kv(data: bytes, wanted: frozenset[bytes]) -> dict[bytes, int]:
    """`key value` lines (memory.stat, cpu.stat) → the wanted keys as ints; other keys are not converted."""
    out: dict[bytes, int] = {}
    for line in data.split(b"\n"):
        key, _, value = line.partition(b" ")
        if key in wanted:
            try:
                out[key] = int(value)
            except ValueError:
                continue
    return out
