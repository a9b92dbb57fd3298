"""What a QoS planner produces: host writes with a reason, and per-object errors that become Events.

Planners are pure: they get a snapshot of the node (pods, merged NodeSLO, host facts they asked for) and return a
Plan. Only koordlet.qos.executor touches the files, so validation, write-on-change, audit and dry-run hold for every
feature at once (upstream: pkg/koordlet/resourceexecutor).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from apis.core.errors import PlanError
from koordlet.qos.eviction import Eviction

Op = Literal["write", "mkdir", "rmdir", "tids", "mount"]
Compare = Literal["exact", "line", "always"]


@dataclass(frozen=True)
class Write:
    """One change to a host file or directory.

    - `path` is the absolute path as the agent sees it (under the configured host roots).
    - `resource` names the cgroup file in koordlet.host.resources whose validator must accept `value`; None for
      files the planner validated itself (resctrl schemata, sysctls).
    - `op`: `write` replaces the content; `tids` writes each whitespace-separated id with its own write() (resctrl
      and cgroup `tasks`); `mkdir`/`rmdir` create or remove a directory (value unused); `mount` mounts the
      filesystem type named by `value` (only `resctrl`) on `path` when nothing is mounted there.
    - `compare`: `exact` skips when the file already holds the value; `line` skips when any line of the file equals
      it (multi-device blkio files); `always` never skips (task moves).
    - `if_changed`: the path of a write earlier in the same plan; this one is made only when that one changed its
      file (or would, in a dry run): a repair of the kernel's side effect of that change (cpu.shares after cpu.idle
      1 -> 0), which therefore needs no fact about the file's current content.
    - `level`: where upstream does this write with a runtime-hook reconciler, its level (`kubeqos`, `pod`, `sandbox`,
      `container`): the executor's timing of the write feeds
      `koordlet_runtime_hook_reconciler_invoked_duration_milliseconds` (koordlet/qos/metrics.py).
    - `note`: (what, label values, value) the QoS metrics record once the write holds (CPU burst's scaled values:
      upstream sets its gauges after a successful update).
    """

    path: str
    value: str
    reason: str
    resource: str | None = None
    op: Op = "write"
    compare: Compare = "exact"
    if_changed: str | None = None
    level: str | None = None
    note: tuple[str, tuple[str, ...], float] | None = None


@dataclass
class Plan:
    writes: list[Write] = field(default_factory=list)
    errors: list[PlanError] = field(default_factory=list)
    # what the eviction strategies would evict now (`koordlet plan` only; the daemon runs them in their own loops)
    evictions: list[Eviction] = field(default_factory=list)

    def extend(self, other: Plan) -> Plan:
        self.writes.extend(other.writes)
        self.errors.extend(other.errors)
        self.evictions.extend(other.evictions)
        return self
