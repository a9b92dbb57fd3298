"""BPF maps read and written through the bpf(2) system call by fd, so the agent reads the program's maps without
importing bcc (whose LLVM would stay mapped in the agent: docs/decisions.md, "Run-queue wait")."""

from __future__ import annotations

import ctypes
import errno
import os
import platform
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

_SYSCALL_NR = {"x86_64": 321, "aarch64": 280}
# enum bpf_cmd (include/uapi/linux/bpf.h)
_LOOKUP_ELEM, _UPDATE_ELEM, _DELETE_ELEM, _GET_NEXT_KEY = 1, 2, 3, 4
_OBJ_GET_INFO_BY_FD = 15
_LOOKUP_BATCH, _LOOKUP_AND_DELETE_BATCH = 24, 25
ENABLE_STATS = 32
BPF_EXIST = 2  # update flag: only an element that exists
# enum bpf_map_type values this module reads specially
MAP_PERCPU_HASH, MAP_PERCPU_ARRAY, MAP_LRU_PERCPU_HASH = 5, 6, 10
_PERCPU = {MAP_PERCPU_HASH, MAP_PERCPU_ARRAY, MAP_LRU_PERCPU_HASH}


class _ElemAttr(ctypes.Structure):  # the map-element commands' part of union bpf_attr
    _fields_ = [("map_fd", ctypes.c_uint32), ("_pad", ctypes.c_uint32), ("key", ctypes.c_uint64),
                ("value", ctypes.c_uint64), ("flags", ctypes.c_uint64)]


class _BatchAttr(ctypes.Structure):  # the batch commands' part
    _fields_ = [("in_batch", ctypes.c_uint64), ("out_batch", ctypes.c_uint64), ("keys", ctypes.c_uint64),
                ("values", ctypes.c_uint64), ("count", ctypes.c_uint32), ("map_fd", ctypes.c_uint32),
                ("elem_flags", ctypes.c_uint64), ("flags", ctypes.c_uint64)]


class _InfoAttr(ctypes.Structure):  # BPF_OBJ_GET_INFO_BY_FD
    _fields_ = [("bpf_fd", ctypes.c_uint32), ("info_len", ctypes.c_uint32), ("info", ctypes.c_uint64)]


class _MapInfo(ctypes.Structure):  # the leading fields of struct bpf_map_info
    _fields_ = [("type", ctypes.c_uint32), ("id", ctypes.c_uint32), ("key_size", ctypes.c_uint32),
                ("value_size", ctypes.c_uint32), ("max_entries", ctypes.c_uint32), ("map_flags", ctypes.c_uint32),
                ("name", ctypes.c_char * 16), ("_rest", ctypes.c_uint8 * 64)]


_libc: ctypes.CDLL | None = None


def bpf(cmd: int, attr: ctypes.Structure | ctypes.Array[Any]) -> int:
    """bpf(cmd, &attr): the result, or OSError with the kernel's errno."""
    global _libc
    nr = _SYSCALL_NR.get(platform.machine())
    if nr is None:
        raise OSError(errno.ENOSYS, f"no bpf(2) number known for {platform.machine()}")
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    res = int(_libc.syscall(nr, cmd, ctypes.byref(attr), ctypes.sizeof(attr)))
    if res < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return res


def possible_cpus(path: str = "/sys/devices/system/cpu/possible") -> int:
    """How many values a per-CPU map holds per key: the highest possible CPU + 1 (the kernel's nr_cpu_ids)."""
    with open(path, encoding="ascii") as f:
        last = f.read().strip().split(",")[-1]
    return int(last.split("-")[-1]) + 1


@dataclass(frozen=True)
class MapInfo:
    type: int
    key_size: int
    value_size: int
    max_entries: int
    name: str


def map_info(fd: int) -> MapInfo:
    info = _MapInfo()
    bpf(_OBJ_GET_INFO_BY_FD, _InfoAttr(fd, ctypes.sizeof(info), ctypes.addressof(info)))
    return MapInfo(info.type, info.key_size, info.value_size, info.max_entries, info.name.decode(errors="replace"))


class BpfMap:
    """One map by fd (owned: closed by close()). Keys and values are bytes of the map's sizes; a per-CPU map's
    value is every possible CPU's value, each padded to 8 bytes, one after the other (as the kernel copies them)."""

    def __init__(self, fd: int, expect_name: str | None = None) -> None:
        self.fd = fd
        self.info = map_info(fd)
        if expect_name is not None and self.info.name != expect_name[:15]:
            raise ValueError(f"fd {fd} is map {self.info.name!r}, not {expect_name!r}")
        self.key_size = self.info.key_size
        self.percpu = self.info.type in _PERCPU
        self.ncpus = possible_cpus() if self.percpu else 1
        self.cpu_stride = (self.info.value_size + 7) // 8 * 8 if self.percpu else self.info.value_size
        self.value_size = self.cpu_stride * self.ncpus

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def lookup(self, key: bytes) -> bytes | None:
        k = ctypes.create_string_buffer(key, self.key_size)
        v = ctypes.create_string_buffer(self.value_size)
        try:
            bpf(_LOOKUP_ELEM, _ElemAttr(self.fd, 0, ctypes.addressof(k), ctypes.addressof(v), 0))
        except OSError as e:
            if e.errno == errno.ENOENT:
                return None
            raise
        return v.raw

    def update(self, key: bytes, value: bytes, flags: int = 0) -> bool:
        """Set key's value; False when `flags` refused it (BPF_EXIST and the key is gone)."""
        k = ctypes.create_string_buffer(key, self.key_size)
        v = ctypes.create_string_buffer(value, self.value_size)
        try:
            bpf(_UPDATE_ELEM, _ElemAttr(self.fd, 0, ctypes.addressof(k), ctypes.addressof(v), flags))
        except OSError as e:
            if e.errno == errno.ENOENT and flags == BPF_EXIST:
                return False
            raise
        return True

    def delete(self, key: bytes) -> bool:
        k = ctypes.create_string_buffer(key, self.key_size)
        try:
            bpf(_DELETE_ELEM, _ElemAttr(self.fd, 0, ctypes.addressof(k), 0, 0))
        except OSError as e:
            if e.errno == errno.ENOENT:
                return False
            raise
        return True

    def keys(self) -> Iterator[bytes]:
        """Every key (BPF_MAP_GET_NEXT_KEY from the start); keys deleted meanwhile may restart the walk, as the
        kernel's hash walk does."""
        cur = ctypes.create_string_buffer(self.key_size)
        nxt = ctypes.create_string_buffer(self.key_size)
        first = True
        while True:
            try:
                bpf(_GET_NEXT_KEY, _ElemAttr(self.fd, 0, 0 if first else ctypes.addressof(cur),
                                             ctypes.addressof(nxt), 0))
            except OSError as e:
                if e.errno == errno.ENOENT:
                    return
                raise
            first = False
            ctypes.memmove(cur, nxt, self.key_size)
            yield nxt.raw

    def lookup_batch(self, keys: ctypes.Array[ctypes.c_char], values: ctypes.c_void_p, n: int,
                     *, delete: bool = False) -> int:
        """Up to n elements from the start into `keys`/`values` (caller's buffers of n keys and n values) in one
        call (BPF_MAP_LOOKUP[_AND_DELETE]_BATCH); returns how many were copied."""
        out_batch = ctypes.create_string_buffer(max(self.key_size, 8))
        attr = _BatchAttr(0, ctypes.addressof(out_batch), ctypes.addressof(keys), values.value or 0, n, self.fd,
                          0, 0)
        try:
            bpf(_LOOKUP_AND_DELETE_BATCH if delete else _LOOKUP_BATCH, attr)
        except OSError as e:
            if e.errno != errno.ENOENT:  # ENOENT: the end of the map was reached, `count` says how far
                raise
        return int(attr.count)
