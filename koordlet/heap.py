"""The C heap under churn (glibc, Linux only): big buffers kept out of the heap, free pages given back at each GC."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

_lock = threading.Lock()
_trim: Callable[[int], int] | None = None
_looked_up = False
M_MMAP_THRESHOLD = -3  # mallopt's parameter (malloc.h)
MMAP_THRESHOLD = 256 << 10  # blocks from this size are mapped on their own and unmapped when freed


def _glibc() -> Callable[[int], int] | None:
    """Once per process: the mmap threshold pinned, and glibc's malloc_trim; None elsewhere (musl, macOS), said
    once. glibc raises its threshold to the size of any mapped block freed (up to 32 MiB), so after the first
    metric frame or eBPF read buffer is freed, every later one is carved from the heap, where it leaves holes the
    heap never gives back: pinning the threshold turns that adjustment off."""
    global _trim, _looked_up
    with _lock:
        if not _looked_up:
            _looked_up = True
            libc = ctypes.util.find_library("c") if sys.platform.startswith("linux") else None
            try:
                lib = ctypes.CDLL(libc) if libc else None
                mallopt, fn = (lib.mallopt, lib.malloc_trim) if lib is not None else (None, None)
            except (OSError, AttributeError):
                mallopt = fn = None
            if mallopt is None or fn is None:
                log.info("not glibc: the C heap is left to its allocator (no pinned mmap threshold, no malloc_trim)")
            else:
                mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
                mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
                fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
                _trim = fn
        return _trim


def settle() -> None:
    """Pin glibc's mmap threshold (at start; later calls do nothing)."""
    _glibc()


def trim() -> bool:
    """Give the C heap's free pages back to the kernel (malloc_trim(0)): under pod churn the heap's free chunks
    are spread between live ones, and glibc only returns the top of the heap on its own, so RSS would keep the
    highest the heap ever reached. Returns whether anything was given back."""
    fn = _glibc()
    return bool(fn(0)) if fn is not None else False
