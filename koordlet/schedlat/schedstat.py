"""The fallback backend: per-task run delay and timeslice count from `<proc>/<tid>/schedstat`, summed per pod.

No histogram (so no quantiles): the kernel keeps only each task's total wait and how often it ran. A task's wait
after our last read is lost when it exits; a pod seen for the first time counts from that read.
"""

from __future__ import annotations

import os

from koordlet.host.paths import HostPaths
from koordlet.schedlat.hist import Totals
from koordlet.states.model import PodMeta


def parse_schedstat(data: bytes) -> tuple[int, int]:
    """(run delay ns, timeslices run) from `<cpu time> <run delay> <timeslices>`."""
    _, delay, slices = data.split()[:3]
    return int(delay), int(slices)


class SchedstatBackend:
    source = "schedstat"

    def __init__(self, paths: HostPaths, cgroup_version: int) -> None:
        self.paths = paths
        self.version = cgroup_version
        self._last: dict[str, dict[int, tuple[int, int]]] = {}  # pod uid → tid → last (delay, slices)
        self._totals: dict[str, tuple[int, int]] = {}

    def close(self) -> None:
        pass

    def _tids(self, rel_dir: str) -> list[int]:
        """Every thread in the pod's cgroup subtree (v1: the cpu hierarchy's `tasks`; v2: `cgroup.threads`)."""
        if self.version == 1:
            top, name = os.path.join(self.paths.cgroup_root, "cpu", rel_dir), "tasks"
        else:
            top, name = os.path.join(self.paths.cgroup_root, rel_dir), "cgroup.threads"
        tids: list[int] = []
        for dirpath, _, files in os.walk(top):
            if name in files:
                try:
                    with open(os.path.join(dirpath, name), "rb") as f:
                        tids.extend(map(int, f.read().split()))
                except OSError:
                    continue
        return tids

    def read(self, pods: list[PodMeta]) -> dict[str, Totals]:
        out: dict[str, Totals] = {}
        for pod in pods:
            known = self._last.get(pod.uid)
            last = known or {}
            now: dict[int, tuple[int, int]] = {}
            wait, runs = self._totals.get(pod.uid, (0, 0))
            for tid in self._tids(pod.cgroup_dir):
                try:
                    with open(self.paths.proc(str(tid), "schedstat"), "rb") as f:
                        cur = parse_schedstat(f.read())
                except (OSError, ValueError):
                    continue
                now[tid] = cur
                # A task new in a pod already seen started since the last read: all its waits are new.
                before = last.get(tid, (0, 0) if known is not None else cur)
                wait += max(cur[0] - before[0], 0)
                runs += max(cur[1] - before[1], 0)
            self._last[pod.uid] = now
            self._totals[pod.uid] = (wait, runs)
            out[pod.uid] = Totals(runs, wait)
        live = {p.uid for p in pods}
        for uid in [u for u in self._last if u not in live]:
            del self._last[uid]
            self._totals.pop(uid, None)
        return out
