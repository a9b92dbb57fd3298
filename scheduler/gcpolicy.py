"""The cyclic GC's thresholds while koord-sched schedules (as the koordlet daemon's): a cycle leaves some dozens of
container objects alive (the pod's annotations, the plugins' per-node records), so with Python's default gen-0
threshold (700) a collection ran every ~10 pods and a gen-1 one every ~100, ~6 % of a 5 000-node GPU pod's CPU.
Raised, a collection runs every few hundred pods and costs about the same per object."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

GC_THRESHOLDS = (20_000, 20, 20)


@contextmanager
def scheduling_thresholds() -> Iterator[None]:
    """GC_THRESHOLDS inside, the previous thresholds restored on the way out."""
    was = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*was)
