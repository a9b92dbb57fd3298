"""The C heap under churn (koordlet/heap.py, glibc): big buffers stay mapped after one is freed, and free pages
between live blocks go back to the kernel at trim."""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
import subprocess
import sys
from pathlib import Path

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


_CHILD = """
import ctypes, ctypes.util, sys
import numpy as np
from koordlet import heap

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                               "fsmblks", "uordblks", "fordblks", "keepcost")]

info = ctypes.CDLL(ctypes.util.find_library("c")).mallinfo2
info.restype = MallInfo2
if sys.argv[1] == "pinned":
    heap.settle()
big = np.ones(1 << 18)  # 2 MiB: mapped, and when freed glibc would raise its threshold to its size
del big
before = info()
buf = np.ones(1 << 16)  # 512 KiB
after = info()
print(after.hblks - before.hblks, after.hblkhd - before.hblkhd - buf.nbytes)
"""


def _mapped_after_a_big_free(mode: str) -> tuple[int, int]:
    """(mapped blocks added, mapped bytes added beyond the buffer) for a 512 KiB buffer made after a 2 MiB one was
    freed, in a process of its own: no other thread allocates between the two readings."""
    out = subprocess.run([sys.executable, "-c", _CHILD, mode], capture_output=True, text=True, timeout=60,
                         check=True, cwd=str(Path(__file__).resolve().parents[1]))
    blocks, extra = out.stdout.split()
    return int(blocks), int(extra)


def test_a_freed_big_buffer_does_not_send_the_next_ones_into_the_heap() -> None:
    """glibc raises its mmap threshold to the size of a mapped block when it is freed, so the next buffers of up to
    that size are carved from the heap (where churn leaves holes RSS keeps); pinned, a 512 KiB buffer made after a
    2 MiB one was freed is still a mapping of its own."""
    require(_glibc(), "glibc with mallinfo2")
    blocks, extra = _mapped_after_a_big_free("pinned")
    assert blocks == 1 and extra >= 0
    assert _mapped_after_a_big_free("default")[0] == 0  # what the pin prevents: glibc's own adjustment


def test_trim_gives_back_free_pages_between_live_blocks() -> None:
    """Blocks below the threshold come from the heap; freeing every other one leaves free pages between live
    ones, which glibc keeps until trimmed."""
    require(_glibc(), "glibc with mallinfo2")
    heap.settle()
    blocks = [bytearray(64 << 10) for _ in range(64)]  # 4 MiB of 64 KiB blocks, in the heap
    del blocks[::2]
    assert heap.trim()  # pages went back
    del blocks
