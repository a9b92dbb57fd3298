"""Pod, container and host-application usage from cgroups: CPU rate, memory and throttling in one read pass.

Upstream splits this over PodResourceCollector, PodThrottledCollector and HostApplicationCollector
(pkg/koordlet/metricsadvisor/collectors/{podresource,podthrottled,hostapplication}); reading each cgroup's files
once per tick is what keeps the cost proportional to pods × containers.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat

import numpy as np

from apis.core.errors import HostReadError, InvalidInput
from koordlet.collectors.rates import PREV_TTL_TICKS, Rates
from koordlet.collectors.usage import Bools, TickUsage, UsageId
from koordlet.collectors.usage import CgroupUsage as CgroupUsage  # re-exported: what the mapping holds
from koordlet.health import Health
from koordlet.host.cgroup import CgroupBackend
from koordlet.host.files import OpenFiles, descriptor_cap
from koordlet.states.model import PodMeta

_CHUNK = 65536  # bytes asked of one pread: each stat file is a few KiB, so one pread from offset 0 reads it whole
# A container no per-second reader needs is read at this interval: kubelet's embedded cAdvisor housekeeping interval
# (10 s). Pods and host applications (NodeMetric, system usage, evictions) are read every tick. Decision: "Containers
# every 10 s" in docs/decisions.md.
CONTAINER_INTERVAL_SECONDS = 10.0
MAX_STRIDE = 60  # ticks between a container's reads at most (a read plan holds a row list per tick of the stride)


@dataclass(frozen=True, slots=True)
class Target:
    """One cgroup to sample: scope is `pod`, `container` or `hostapp`; key is uid / container id / app name."""

    scope: str
    key: str
    rel_dir: str
    label: str  # for log lines: `ns/name` or `ns/name/container`
    quiet: bool = False  # a pod not Running may have no cgroup: count the miss, do not warn


class _Row:
    """One target's files, and their kept descriptors while valid."""

    __slots__ = ("error", "fds", "generation", "paths", "target")

    def __init__(self, target: Target, paths: tuple[str, ...] = (), error: InvalidInput | None = None) -> None:
        self.target, self.paths, self.error = target, paths, error
        self.fds: tuple[int, ...] | None = None
        self.generation = -1  # OpenFiles.generation the descriptors belong to


class _Plan:
    """The read plan of one target list, held between ticks: its rows, and for each phase of the stride the rows
    due then (`due`: every pod, host application and container read every tick, plus a `stride`-th of the other
    containers), split into the rows whose descriptors are all kept (`fast`, read by one `map` of pread over
    `fast_fds` while OpenFiles.generation is `fast_generation`) and the others (`slow`, read row by row)."""

    __slots__ = ("due", "due_rows", "every_tick", "fast", "fast_fds", "fast_generation", "index", "index_of", "paths",
                 "rows", "slow", "stride", "targets", "width")

    def __init__(self, targets: list[Target], rows: list[_Row], width: int, every_tick: frozenset[str],
                 stride: int) -> None:
        self.targets, self.rows, self.width = targets, rows, width
        self.every_tick, self.stride = every_tick, stride
        self.paths = [r.paths for r in rows]
        self.index: dict[UsageId, int] = {(r.target.scope, r.target.key): i for i, r in enumerate(rows)}
        self.index_of: list[UsageId] = [(r.target.scope, r.target.key) for r in rows]
        phase = [-1] * len(rows)
        if stride > 1:
            strided = [i for i, t in enumerate(targets) if t.scope == "container" and t.key not in every_tick]
            for k, i in enumerate(strided):
                phase[i] = k % stride
        self.due = [[i for i, ph in enumerate(phase) if ph < 0 or ph == p] for p in range(stride)]
        self.due_rows = [np.array(d, dtype=np.intp) for d in self.due]
        self.fast: list[list[int]] = [[] for _ in range(stride)]
        self.fast_fds: list[list[int]] = [[] for _ in range(stride)]
        self.slow = [list(d) for d in self.due]
        self.fast_generation = -1

    def split(self, generation: int) -> None:
        """Rows with descriptors of this generation go to the one-map read; the others are read row by row."""
        rows = self.rows
        for p, due in enumerate(self.due):
            fast = [i for i in due if rows[i].fds is not None and rows[i].generation == generation]
            self.fast[p] = fast
            self.fast_fds[p] = [fd for i in fast for fd in rows[i].fds or ()]
            kept = set(fast)
            self.slow[p] = [i for i in due if i not in kept]
        self.fast_generation = generation


class _Values:
    """Every row's newest values (`has`: read once at least and readable when last due), kept between ticks so a
    container read every few ticks keeps its figures in between."""

    __slots__ = ("counters", "cpu", "has", "mem", "mem_cache", "share")

    def __init__(self, n: int) -> None:
        self.has = np.zeros(n, dtype=bool)
        self.cpu, self.share = np.full(n, np.nan), np.full(n, np.nan)
        self.mem, self.mem_cache = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        self.counters = np.zeros((4, n), dtype=np.int64)  # as TickUsage.counters

    def moved(self, old_index: dict[UsageId, int], new_index: dict[UsageId, int], rows: int) -> _Values:
        """These values re-indexed for a new target list of `rows` rows (a target that stays keeps its figures)."""
        out = _Values(rows)
        pairs = [(i, j) for id_, i in new_index.items() if (j := old_index.get(id_)) is not None]
        if pairs:
            to, frm = np.array(pairs, dtype=np.intp).T
            for name in self.__slots__:
                getattr(out, name)[..., to] = getattr(self, name)[..., frm]
        return out


class CgroupUsageCollector:
    """Turns cumulative cgroup counters into usage, a column per value across all targets (usage.TickUsage);
    remembers only the previous read of each target."""

    def __init__(self, backend: CgroupBackend, health: Health, files: OpenFiles | None = None,
                 container_stride: int = 1) -> None:
        self.backend = backend
        self.health = health
        self.files = OpenFiles() if files is None else files  # descriptors kept between ticks
        self.container_stride = container_stride  # ticks between reads of a container not in `every_tick`
        self._plan: _Plan | None = None
        self._values = _Values(0)
        self._rates = Rates()
        self._tick = 0
        self._logged: dict[tuple[str, str], str] = {}  # (scope, label) → the reason a skip of it was logged for
        # the last tick's plan, rows read, their contents, and which rows have figures (read now or carried)
        self._last: tuple[_Plan, list[int], list[list[bytes]], Bools] | None = None
        # the scrape's working-set reads (another thread than the tick's): their own descriptors, paths per plan
        self._ws_files = OpenFiles(descriptor_cap() // 4)
        self._ws_lock = threading.Lock()
        self._ws_paths: tuple[_Plan, list[tuple[str, str] | None]] | None = None

    def _plan_for(self, targets: list[Target], every_tick: frozenset[str]) -> _Plan:
        """Built when the target list is replaced (pods came or went) or the containers read every tick change,
        which also closes the descriptors of cgroups no longer read; a dir that would leave the hierarchy is never
        read."""
        plan = self._plan
        stride = min(max(self.container_stride, 1), MAX_STRIDE)
        if plan is None or plan.targets is not targets or plan.every_tick != every_tick or plan.stride != stride:
            rows = []
            for t in targets:
                try:
                    rows.append(_Row(t, self.backend.stat_paths(t.rel_dir)))
                except InvalidInput as e:
                    rows.append(_Row(t, error=e))
            old = plan
            plan = self._plan = _Plan(targets, rows, len(self.backend.stat_paths("")), every_tick, stride)
            self._values = self._values.moved(old.index if old is not None else {}, plan.index, len(rows))
            self._rates.retarget([(t.scope, t.key) for t in targets])
            self.files.retain({f for r in rows for f in r.paths})
            self._forget_gone(targets)
        return plan

    def collect(self, targets: list[Target], now_mono_ns: int,
                every_tick: frozenset[str] = frozenset()) -> TickUsage:
        """Usage of every target readable now: CPU cores and throttled share from the change since its previous
        read (none on the first), memory as read. The collection hot path: 1000 cgroups a second at 250 pods,
        read by pread on descriptors kept open (see OpenFiles), parsed and turned into rates a column at a time.
        A container whose ID is not in `every_tick` is read every `container_stride` ticks (containers spread over
        the ticks), its rates then over that span; between its reads it keeps the figures of the last."""
        self._tick += 1
        tick = self._tick
        plan = self._plan_for(targets, every_tick)
        phase = tick % plan.stride
        got, contents = self._read(plan, phase)
        stats = self.backend.parse_columns(contents, list(map(plan.paths.__getitem__, got)))
        read = np.array(got, dtype=np.intp)
        cpu_ns, memory, memory_cache = stats.cpu_usage_ns, stats.memory_usage, stats.memory_with_cache
        periods, throttled, throttled_ns = stats.nr_periods, stats.nr_throttled, stats.throttled_ns
        if stats.failed:
            for pos, e in stats.failed.items():
                self._unreadable(plan.rows[got[pos]], e)
            ok = np.ones(len(got), dtype=bool)
            ok[list(stats.failed)] = False
            read, cpu_ns, memory, memory_cache = read[ok], cpu_ns[ok], memory[ok], memory_cache[ok]
            periods, throttled, throttled_ns = periods[ok], throttled[ok], throttled_ns[ok]
        if plan.fast_generation != self.files.generation:
            plan.split(self.files.generation)
        self.health.cgroup_reads += len(read)
        cpu_read, share_read = self._rates.update(read, now_mono_ns, tick, cpu_ns, periods, throttled)
        if tick % PREV_TTL_TICKS == 0:
            self._rates.expire(tick)

        values = self._values
        fresh = np.zeros(len(plan.rows), dtype=bool)
        fresh[read] = True
        if plan.stride > 1:
            values.has[plan.due_rows[phase]] = False  # due and not read now: no figures until it reads again
        else:
            values.has[:] = False
        values.has[read] = True
        values.cpu[read], values.share[read] = cpu_read, share_read
        values.mem[read], values.mem_cache[read] = memory, memory_cache
        values.counters[:, read] = (cpu_ns, periods, throttled, throttled_ns)
        has = values.has.copy()
        self._last = (plan, got, contents, has)
        return TickUsage(plan.index, has, values.cpu.copy(), values.mem.copy(), values.mem_cache.copy(),
                         values.share.copy(), values.counters.copy(), fresh)

    def last_read(self, file_name: str) -> dict[str, bytes]:
        """The contents of the tick's files named `file_name` (e.g. memory.numa_stat) as the last tick read them, by
        path; empty when the tick reads no such file. Built on demand: a reader every few ticks re-reads nothing."""
        if self._last is None:
            return {}
        plan, got, contents, _ = self._last
        names = [os.path.basename(p) for p in self.backend.stat_paths("")]
        if file_name not in names:
            return {}
        j = names.index(file_name)
        return {plan.paths[i][j]: data for i, data in zip(got, contents[j], strict=True)}

    def working_set(self) -> dict[UsageId, int]:
        """cAdvisor's working set of each pod and container with figures at the last tick (read then, or carried
        from an earlier one), by usage id, read now: the scrape calls this, not the tick (docs/decisions.md "Pod
        series"). memory.stat comes from the tick where the tick read it; the other files are read through
        descriptors kept for this (their own OpenFiles, a quarter of the descriptor budget). A cgroup gone since is
        left out. Safe to call from any thread."""
        last = self._last
        if last is None:
            return {}
        plan, got, contents, has = last
        names = [os.path.basename(p) for p in self.backend.stat_paths("")]
        stat = contents[names.index("memory.stat")] if "memory.stat" in names else None
        from_tick = dict(zip(got, stat, strict=True)) if stat is not None else {}
        out: dict[UsageId, int] = {}
        with self._ws_lock:
            paths = self._ws_paths_for(plan)
            files, working_set = self._ws_files, self.backend.working_set
            for i in np.flatnonzero(has).tolist():
                pair = paths[i]
                if pair is None:
                    continue
                try:
                    data = from_tick.get(i)
                    if data is None:
                        data = files.read(pair[1])
                    out[plan.index_of[i]] = working_set(files.read(pair[0]), data, pair)
                except HostReadError:
                    files.forget(pair)
        return out

    def _ws_paths_for(self, plan: _Plan) -> list[tuple[str, str] | None]:
        """The working-set files of each row of a plan (None: a host application, or a refused dir), kept with
        the plan; a new plan closes the descriptors of cgroups no longer read."""
        if self._ws_paths is None or self._ws_paths[0] is not plan:
            paths: list[tuple[str, str] | None] = []
            for row in plan.rows:
                try:
                    ok = row.error is None and row.target.scope != "hostapp"
                    paths.append(self.backend.working_set_paths(row.target.rel_dir) if ok else None)
                except InvalidInput:
                    paths.append(None)
            self._ws_files.retain({p for pair in paths if pair is not None for p in pair})
            self._ws_paths = (plan, paths)
        return self._ws_paths[1]

    def _read(self, plan: _Plan, phase: int) -> tuple[list[int], list[list[bytes]]]:
        """The rows due at this phase that were read and their files' contents, file by file: contents[j][k] is file
        j of row got[k]."""
        files, width = self.files, plan.width
        got: list[int] = []
        contents: list[list[bytes]] = [[] for _ in range(width)]
        slow: Sequence[int] = plan.due[phase]
        if plan.fast_generation == files.generation:
            fds = plan.fast_fds[phase]
            try:
                data = list(map(os.pread, fds, repeat(_CHUNK, len(fds)), repeat(0, len(fds))))
            except OSError:  # a removed cgroup (ENODEV): this tick reads row by row, which re-opens or reports
                pass
            else:
                got = plan.fast[phase].copy()
                contents = [data[j::width] for j in range(width)]
                slow = plan.slow[phase]
        if self._read_rows(plan, slow, got, contents):
            plan.fast_generation = -1  # a row now holds descriptors: split again
        return got, contents

    def _read_rows(self, plan: _Plan, indices: Sequence[int], got: list[int],
                   contents: list[list[bytes]]) -> bool:
        """Read rows one by one (through their descriptors, else by path); whether one now holds descriptors."""
        files, read, pread = self.files, self.files.read, os.pread
        gained = False
        for i in indices:
            row = plan.rows[i]
            if row.error is not None:
                self._skip(row.target, "bad-cgroup-dir", str(row.error))
                continue
            try:
                data = None
                if row.fds is not None and row.generation == files.generation:
                    try:
                        data = [pread(fd, _CHUNK, 0) for fd in row.fds]
                    except OSError:  # a removed cgroup (ENODEV): `read` below closes and re-opens
                        data = None
                if data is None:
                    data = list(map(read, row.paths))
                    row.fds, row.generation = files.kept(row.paths), files.generation
                    gained = gained or row.fds is not None
            except HostReadError as e:
                self._unreadable(row, e)
                continue
            got.append(i)
            for part, d in zip(contents, data, strict=True):
                part.append(d)
        return gained

    def _unreadable(self, row: _Row, e: HostReadError) -> None:
        self.files.forget(row.paths)
        t = row.target
        self.health.cgroup_read_errors[t.scope] += 1
        if t.quiet:
            return
        if _vanished(e):  # the usual deletion race: kubelet removes the cgroup before the pod leaves its list
            self.health.skipped[(t.scope, "cgroup-unreadable")] += 1
            self.health.expect(t.scope, "cgroup-unreadable", t.label, f"its cgroup is gone (being deleted): {e}")
            self._logged[(t.scope, t.label)] = "cgroup-unreadable"
            return
        self._skip(t, "cgroup-unreadable", str(e))

    def _skip(self, t: Target, reason: str, detail: str) -> None:
        self.health.skip(t.scope, reason, t.label, detail)
        self._logged[(t.scope, t.label)] = reason

    def _forget_gone(self, targets: list[Target]) -> None:
        """The log-once keys of targets no longer listed (a pod's cgroup goes before the pod leaves kubelet's
        list, so under churn every pod gone left one): dropped, and a pod of that name later is logged again."""
        if not self._logged:
            return
        live = {(t.scope, t.label) for t in targets}
        for scope, label in [k for k in self._logged if k not in live]:
            self.health.recovered(scope, self._logged.pop((scope, label)), label)

    def remembered(self) -> int:
        return self._rates.remembered()

    def close(self) -> None:
        self.files.close()
        with self._ws_lock:
            self._ws_files.close()


def pod_targets(pods: list[PodMeta]) -> list[Target]:
    """The pod dirs and their running containers' dirs (terminated pods are attempted too, like upstream)."""
    out: list[Target] = []
    for pod in pods:
        label = f"{pod.namespace}/{pod.name}"
        quiet = pod.phase != "Running"
        out.append(Target("pod", pod.uid, pod.cgroup_dir, label, quiet))
        for c in pod.containers:
            if c.running and c.cgroup_dir is not None:
                out.append(Target("container", c.container_id, c.cgroup_dir, f"{label}/{c.name}", quiet))
    return out


def _vanished(e: HostReadError) -> bool:
    """The cgroup directory is gone (upstream's pod resource collector logs this at V(4), not as a warning)."""
    cause = e.__cause__
    return isinstance(cause, OSError) and cause.errno in (errno.ENOENT, errno.ENODEV)
