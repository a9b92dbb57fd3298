"""The resolved profile in words: per extension point, the plugins in the order they run, with score weights."""

from __future__ import annotations

from scheduler.config.plugins import LATER, NOOP, PLUGINS, POINTS, SCORE
from scheduler.config.profile import KUBE, SchedulerConfig

_MARKS = {NOOP: " (no-op)", LATER: " (not run)"}


def point_line(cfg: SchedulerConfig, point: str) -> str:
    """`A, B(3), C (no-op)`: the plugins enabled at `point`, weights at score; `-` for none."""
    shown = []
    for name in cfg.points.get(point, []):
        weight = f"({cfg.weight(name)})" if point == SCORE else ""
        info = PLUGINS.get(name)
        shown.append(name + weight + (_MARKS.get(info.status, "") if info is not None else ""))
    return ", ".join(shown) or "-"


def describe(cfg: SchedulerConfig) -> list[str]:
    """One line per extension point, after a heading naming the profile and what it was merged onto."""
    merged = f"the file's plugins merged onto {KUBE}" if cfg.base == KUBE else cfg.base
    lines = [f"profile {cfg.scheduler_name} ({merged}):"]
    lines += [f"  {point}: {point_line(cfg, point)}" for point in POINTS]
    if cfg.left_out:
        lines.append(f"  left out (not built by koord-sched): {', '.join(cfg.left_out)}")
    return lines
