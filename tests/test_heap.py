"""The C heap under churn (koordlet/heap.py, glibc): big buffers stay mapped after one is freed, and free pages
between live blocks go back to the kernel at trim."""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

import numpy as np

from koordlet import heap

from conftest import require


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                       "fsmblks", "uordblks", "fordblks", "keepcost")]


def _mallinfo2() -> _MallInfo2 | None:
    libc = ctypes.util.find_library("c")
    try:
        fn = ctypes.CDLL(libc).mallinfo2 if libc else None
    except (OSError, AttributeError):
        return None
    if fn is None:
        return None
    fn.restype = _MallInfo2
    info: _MallInfo2 = fn()
    return info


def _glibc() -> bool:
    return platform.libc_ver()[0] == "glibc" and _mallinfo2() is not None


def test_a_freed_big_buffer_does_not_send_the_next_ones_into_the_heap() -> None:
    """glibc raises its mmap threshold to the size of a mapped block when it is freed, so the next buffers of up to
    that size are carved from the heap (where churn leaves holes RSS keeps); pinned, a 512 KiB buffer made after a
    2 MiB one was freed is still a mapping of its own."""
    require(_glibc(), "glibc with mallinfo2")
    heap.settle()
    big = np.ones(1 << 18)  # 2 MiB
    del big
    before = _mallinfo2()
    buf = np.ones(1 << 16)  # 512 KiB
    after = _mallinfo2()
    assert before is not None and after is not None
    assert after.hblks == before.hblks + 1 and after.hblkhd >= before.hblkhd + buf.nbytes
    del buf


def test_trim_gives_back_free_pages_between_live_blocks() -> None:
    """Blocks below the threshold come from the heap; freeing every other one leaves free pages between live
    ones, which glibc keeps until trimmed."""
    require(_glibc(), "glibc with mallinfo2")
    heap.settle()
    blocks = [bytearray(64 << 10) for _ in range(64)]  # 4 MiB of 64 KiB blocks, in the heap
    del blocks[::2]
    assert heap.trim()  # pages went back
    del blocks
