"""A fixed pure-Python workload's CPU time, printed beside absolute figures so runs on different machines compare."""

from __future__ import annotations

import time

LOOP_STEPS = 1_000_000


def _loop(steps: int) -> int:
    acc = 0
    for i in range(steps):
        acc = (acc + i * i) % 1_000_003
    return acc


def python_loop_ms(repeat: int = 5) -> float:
    """The least CPU time (ms) of `repeat` runs of one fixed interpreter loop: a machine twice as fast prints half."""
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        _loop(LOOP_STEPS)
        best = min(best, time.process_time() - start)
    return 1000 * best


def line() -> str:
    """The line a benchmark prints: the figure and how to use it."""
    return (f"CPU calibration: a fixed pure-Python loop ({LOOP_STEPS:,} steps) takes {python_loop_ms():.0f} ms of CPU "
            "here; scale absolute figures by it to compare machines")
