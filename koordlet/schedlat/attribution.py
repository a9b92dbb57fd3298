"""Which pod a task belongs to, from its `<proc>/<tid>/cgroup` lines: pure parsing and a pod-dir index."""

from __future__ import annotations

import os
from collections.abc import Iterable

from koordlet.states.model import PodMeta


def cgroup_path(content: str, version: int) -> str | None:
    """The task's cgroup path in the hierarchy the agent reads: v1's cpu controller line (`4:cpu,cpuacct:/a/b`),
    v2's unified line (`0::/a/b`); None when that hierarchy is absent from the file."""
    for line in content.splitlines():
        hid, _, rest = line.partition(":")
        controllers, sep, path = rest.partition(":")
        if not sep:
            continue
        if version == 2 and hid == "0" and controllers == "":
            return path
        if version == 1 and "cpu" in controllers.split(","):
            return path
    return None


class PodIndex:
    """Pod uid by the last component of the pod's cgroup dir (`pod<uid>` or `kubepods-…-pod<uid>.slice`): it names
    the pod alone, so a task's path matches wherever the hierarchy is mounted or nested (a cgroup namespace, a
    test's parent dir)."""

    def __init__(self, pods: Iterable[PodMeta]) -> None:
        self.by_dir: dict[str, str] = {os.path.basename(p.cgroup_dir.rstrip("/")): p.uid for p in pods if p.cgroup_dir}

    def pod_of(self, path: str) -> str | None:
        for part in path.split("/"):
            uid = self.by_dir.get(part)
            if uid is not None:
                return uid
        return None


def looks_like_pod(path: str) -> bool:
    """A kubepods path no known pod matches yet (the pod list lags the runtime): resolved again later."""
    return "kubepods" in path
