"""Real cgroup dirs we make ourselves (example pods of `make run`, benchmark and test trees), removed bottom-up.

Only these helpers create or remove cgroup dirs outside the QoS executor: they never touch a dir they did not
make or were not told to own, so a failed start or stop leaves the host's own cgroups alone.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import time
from pathlib import Path

log = logging.getLogger(__name__)

# The v1 hierarchies the agent reads (cpuacct, memory, cpu) or writes QoS into (cpu, blkio). cpuset is left out: a
# new v1 cpuset cgroup has no CPUs until someone copies them in, and no process can join it until then.
V1_SUBSYSTEMS = ("cpu", "cpuacct", "memory", "blkio")
V2_CONTROLLERS = ("cpu", "memory", "io")


def remove_cgroup_tree(path: str | Path) -> None:
    """Remove a cgroup dir and everything below it, deepest first (cgroupfs refuses a dir that has children)."""
    base = Path(path)
    if not base.is_dir():
        return
    for child in sorted((p for p in base.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        child.rmdir()
    base.rmdir()


class CgroupTree:
    """Dirs made below one cgroup root: in each v1 subsystem mounted there, or once in a v2 unified root.

    `mkdir` remembers what it created (and, with `own`, the leaf even when it already existed, e.g. left over by
    a killed run); `remove` takes away exactly those, deepest first, and returns what it could not remove."""

    def __init__(self, cgroup_root: str | Path, version: int, subsystems: tuple[str, ...] = V1_SUBSYSTEMS) -> None:
        root = Path(cgroup_root)
        self.version = version
        self.bases = [root] if version == 2 else [root / s for s in subsystems if (root / s).is_dir()]
        self.made: list[Path] = []

    def mkdir(self, rel_dir: str, *, own: bool = False) -> None:
        """Create `rel_dir` (and missing parents) in every base; raises OSError (what was made stays recorded)."""
        parts = Path(rel_dir).parts
        if not parts or Path(rel_dir).is_absolute() or ".." in parts:
            raise ValueError(f"cgroup dir {rel_dir!r} is not a relative path inside the hierarchy")
        for base in self.bases:
            path = base
            for i, part in enumerate(parts):
                parent, path = path, path / part
                if path.is_dir():
                    if own and i == len(parts) - 1 and path not in self.made:
                        self.made.append(path)
                    continue
                if self.version == 2 and parent in self.made:
                    self._delegate(parent)
                path.mkdir()
                self.made.append(path)

    def _delegate(self, parent: Path) -> None:
        """v2: a child only gets the controllers its parent enables for its subtree; enable ours on a dir we made
        (never on one we did not), as far as the parent itself has them."""
        try:
            available = set((parent / "cgroup.controllers").read_text().split())
            wanted = [c for c in V2_CONTROLLERS if c in available]
            if wanted:
                (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))
        except OSError as e:
            log.debug("cannot enable controllers under %s: %s", parent, e)

    def procs_files(self, rel_dir: str) -> list[Path]:
        """The `cgroup.procs` a process writes itself into to join `rel_dir` in every base."""
        return [base / rel_dir / "cgroup.procs" for base in self.bases]

    def remove(self) -> list[str]:
        """rmdir what was made, deepest first; a dir still busy (EBUSY: a process inside) is retried once."""
        failed = []
        for path in sorted(self.made, key=lambda p: len(p.parts), reverse=True):
            try:
                _rmdir(path)
            except OSError as e:
                failed.append(f"{path}: {e.strerror or e}")
        self.made = []
        return failed


def _rmdir(path: Path) -> None:
    try:
        path.rmdir()
    except FileNotFoundError:
        return
    except OSError as e:
        if e.errno != errno.EBUSY:
            raise
        # A process just killed can still be leaving the cgroup; one short wait covers it.
        time.sleep(0.05)
        with contextlib.suppress(FileNotFoundError):
            path.rmdir()
