"""The one writer of cgroupfs, resctrl and sysctl files: validate, write only on change, audit, dry-run.

Upstream: pkg/koordlet/resourceexecutor (executor.go, cgroup.go, updater.go, resctrl_updater.go): check the file is
supported, validate the value, read and compare, write with truncate; remember what was written and skip an equal
value for `--resource-force-update-seconds` (60 s). A vanished cgroup is normal (the pod just left).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import json
import logging
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from apis.core.errors import InvalidInput
from koordlet.health import Health
from koordlet.host.paths import HostPaths
from koordlet.host.resources import RESOURCES, v1_memory_unlimited
from koordlet.qos.model import Plan, Write

log = logging.getLogger(__name__)

FORCE_UPDATE_SECONDS = 60.0
_MOUNTABLE = frozenset({"resctrl"})
_MS_RELATIME = 1 << 21
AUDIT_MAX_BYTES = 16 << 20  # upstream --audit-max-disk-space-mb default; one rotated file is kept


class UpdateObserver(Protocol):
    """Told of every write the executor carried out or tried (not of cached, dry-run, rmdir or mount ones)."""

    def updated(self, write: Write, kind: str, result: str, seconds: float) -> None: ...


@dataclass(frozen=True)
class Result:
    write: Write
    result: str  # written | unchanged | cached | planned | invalid | vanished | unsupported | error
    detail: str = ""


@dataclass(frozen=True)
class _Held:
    """The leading writes of the last plan that were cache hits (or if_changed writes skipped: nothing before them
    changed). The same writes (the same objects: a planner's plan is reused while its facts hold) at the head of the
    next plan find the same cache entries while the oldest of them is within the force window and none of their
    paths was cached anew or forgotten since, so each would be a cache hit again: apply takes them as such at once.
    """

    writes: list[Write]
    results: list[Result]  # the cache hits among them, in order
    keys: list[tuple[str, str]]  # their write counters' keys, (file name, "cached")
    upto: list[int]  # upto[i]: how many of `results` come from writes[:i]
    oldest: list[float]  # oldest[i]: the oldest cache entry the hits among writes[:i + 1] found (non-increasing)
    first: dict[str, int]  # path → the index of the first of the writes to it

    @functools.cached_property
    def counts(self) -> Counter[tuple[str, str]]:
        """The write counters' increments of the whole head (file name, "cached") → n."""
        return Counter(self.keys)


def _common_prefix(held: list[Write], writes: list[Write]) -> int:
    """How many leading writes are the same (equal writes, in the common case the very objects: a list comparison
    in C)."""
    n = len(held)
    if writes[:n] == held:
        return n
    m = 0
    for x, y in zip(held, writes, strict=False):
        if x is not y and x != y:
            break
        m += 1
    return m


class Executor:
    def __init__(self, paths: HostPaths, cgroup_version: int, health: Health, *, audit_path: str | None = None,
                 dry_run: bool = False, force_seconds: float = FORCE_UPDATE_SECONDS,
                 clock: Callable[[], float] = time.monotonic, observer: UpdateObserver | None = None) -> None:
        self.paths = paths
        self.observer = observer
        self.version = cgroup_version
        self.health = health
        self.audit_path = audit_path
        self.dry_run = dry_run
        self.force_seconds = force_seconds
        self.clock = clock
        self._cache: dict[str, tuple[str, float]] = {}  # path → (value, when written or confirmed)
        self._names: dict[str, str] = {}  # path → its file name, the write counters' label
        self._pruned = clock()
        self.mounts = 0  # filesystems mounted so far
        self._held: _Held | None = None
        self._recached: set[str] = set()  # paths whose cache entry changed during this apply
        self._forgot = False  # forget() ran during this apply
        self._roots = tuple(sorted({os.path.join(os.path.normpath(r), "") for r in (
            paths.cgroup_root, paths.sys_fs_root, paths.proc_root, paths.sys_root)}, key=len, reverse=True))
        self._cgroup_root = os.path.join(os.path.normpath(paths.cgroup_root), "")

    # -- public ----------------------------------------------------------------------------------------------
    def apply(self, plan: Plan) -> list[Result]:
        """Every write in order; a write with `if_changed` only when that earlier write changed its file.

        A plan may create a directory (a resctrl group, a cgroup) and then write into it: the dry run cannot read
        files that do not exist yet, so such writes are reported as planned — what applying the plan does, in order.
        """
        self._prune()
        writes = plan.writes
        held = self._held
        m = _common_prefix(held.writes, writes) if held is not None else 0
        if m and self.clock() - held.oldest[m - 1] >= self.force_seconds:  # type: ignore[union-attr]
            m = 0  # a held value aged out of the force window: every write checks its own (once a window)
        head: list[Result] = held.results[:held.upto[m]] if m and held is not None else []
        counts = self.health.resource_writes
        if head and held is not None:
            counts.update(held.counts if m == len(held.writes) else held.keys[:len(head)])
        self._recached.clear()
        self._forgot = False
        results = list(head)
        tail: list[Result | None] = []  # per write after the held head: its result, None where skipped
        changed: set[str] = set()  # (the held head changed nothing)
        made: set[str] = set()  # directories this dry run would create
        for w in writes[m:] if m else writes:
            if w.if_changed is not None and w.if_changed not in changed:
                tail.append(None)
                continue  # not part of this pass: the change it repairs did not happen
            if w.op in ("write", "tids") and made and os.path.dirname(os.path.normpath(w.path)) in made:
                problem = self._validate(w)
                r = self._invalid(w, problem) if problem else Result(w, "planned")
            else:
                r = self._one(w)
            if r.result in ("written", "planned"):
                changed.add(w.path)
                if w.op == "mkdir" and r.result == "planned":
                    made.add(os.path.normpath(w.path))
            results.append(r)
            tail.append(r)
        names = self._names
        made_now = results[len(head):]
        for r in made_now:
            path = r.write.path
            name = names.get(path)
            if name is None:
                name = names[path] = os.path.basename(path)
            counts[(name, r.result)] += 1
        self._audit([r for r in made_now if r.result in ("written", "planned", "invalid", "error")])
        self._hold(writes, held, m, head, tail)
        return results

    def _hold(self, writes: list[Write], held: _Held | None, m: int, head: list[Result],
              tail: list[Result | None]) -> None:
        """Keep the plan's leading cache hits for the next apply. Without a held head, every write up to the first
        that was not a cache hit (or skipped); with one, the part of it this plan repeated: what follows changed
        from the last plan, so it may change again (BE CPU suppress re-plans with each usage sample). The held head
        grows again when it is dropped (the force window, a forgotten dir)."""
        if self._forgot:
            self._held = None
            return
        if held is not None and m:
            if len(held.writes) > m:
                n = held.upto[m]
                held = _Held(held.writes[:m], held.results[:n], held.keys[:n], held.upto[:m + 1], held.oldest[:m],
                             {p: i for p, i in held.first.items() if i < m})
            if any(p in held.first for p in self._recached):
                self._held = None
                return
        else:
            held, m = None, 0
        k = 0
        for r in tail:
            if r is not None and r.result != "cached":
                break
            k += 1
        if k == 0:
            self._held = held  # nothing to add (none to hold, without a held head)
            return
        first = dict(held.first) if held is not None else {}
        for j, w in enumerate(writes[m:m + k], m):
            first.setdefault(w.path, j)
        if any(p in first for p in self._recached):
            self._held = None  # a held value was cached anew after it was taken
            return
        results = list(held.results) if held is not None else []
        keys = list(held.keys) if held is not None else []
        upto = list(held.upto) if held is not None else [0]
        oldest = list(held.oldest) if held is not None else []
        low = oldest[-1] if oldest else float("inf")
        cache, names = self._cache, self._names
        for r in tail[:k]:
            if r is not None:
                results.append(r)
                keys.append((names[r.write.path], "cached"))
                low = min(low, cache[r.write.path][1])
            upto.append(len(results))
            oldest.append(low)
        self._held = _Held(writes[:m + k], results, keys, upto, oldest, first)

    def _prune(self) -> None:
        """Once a force window: drop cached values older than two of them, so the files of pods long gone do not
        stay in memory. A live file's value is confirmed once a window, so it stays: its value, validated when it
        was cached, need not be validated again when the window sends the write back to the file."""
        now = self.clock()
        if now - self._pruned < self.force_seconds:
            return
        self._pruned = now
        self._cache = {p: v for p, v in self._cache.items() if now - v[1] < 2 * self.force_seconds}
        self._names = {}
        self._held = None

    def forget(self, prefix: str) -> None:
        """Drop cached values under a path (a pod left: a new pod may reuse nothing, but keep the cache small)."""
        self._held = None
        self._forgot = True
        for path in [p for p in self._cache if p.startswith(prefix)]:
            del self._cache[path]
        for path in [p for p in self._names if p.startswith(prefix)]:
            del self._names[path]

    def retain(self, plan: Plan) -> int:
        """Drop the cached values of files `plan` does not write (pods gone, a feature turned off): a new plan after
        the pods changed names every file a pass may write, so the rest would only wait for the force window's
        prune, and under churn that is thousands of gone pods' files. Returns how many were dropped."""
        keep = {w.path for w in plan.writes}
        gone = [p for p in self._cache if p not in keep]
        for path in gone:
            del self._cache[path]
        for path in [p for p in self._names if p not in keep]:
            del self._names[path]
        if gone and self._held is not None and any(p in self._held.first for p in gone):
            self._held = None
        return len(gone)

    # -- one write -------------------------------------------------------------------------------------------
    def _one(self, w: Write) -> Result:
        now = self.clock()
        cached = self._cache.get(w.path)
        # this very value passed validation when it was cached: valid again once the force window sends it back
        # to the file (the path, and so its resource, is the cache's key)
        valid = w.op == "write" and cached is not None and cached[0] == w.value
        if valid and cached is not None and w.compare != "always" and now - cached[1] < self.force_seconds:
            return Result(w, "cached")
        observer = self.observer
        if observer is None or self.dry_run or w.op in ("rmdir", "mount"):
            return self._update(w, now, valid)
        # upstream times each update it carries out (executor.go update/updateByCache), not its cache hits
        started = time.perf_counter()
        r = self._update(w, now, valid)
        observer.updated(w, self._kind(w), r.result, time.perf_counter() - started)
        return r

    def _kind(self, w: Write) -> str:
        """Upstream's updater name (resourceexecutor updater.go, resctrl_updater.go): `cgroup` for cgroup files,
        `resctrl-schema` for schemata lines, `default` for the rest (resctrl groups and tasks, sysctls)."""
        if w.op == "write":
            if w.path.startswith(self._cgroup_root):
                return "cgroup"
            if os.path.basename(w.path) == "schemata":
                return "resctrl-schema"
        return "default"

    def _update(self, w: Write, now: float, valid: bool = False) -> Result:
        problem = None if valid else self._validate(w)
        if problem:
            return self._invalid(w, problem)
        if w.op == "mkdir":
            return self._mkdir(w)
        if w.op == "rmdir":
            return self._rmdir(w)
        if w.op == "mount":
            r = self._mount(w)
            self.mounts += r.result == "written"
            return r
        try:
            current = _read(w.path)
        except (OSError, ValueError) as e:  # ValueError: a NUL in the path
            if not os.path.isdir(os.path.dirname(w.path)):
                return Result(w, "vanished")  # the cgroup (pod) is gone: normal, nothing to say
            if isinstance(e, ValueError):
                return self._invalid(w, str(e))
            if isinstance(e, FileNotFoundError):
                self.health.capability(f"file:{os.path.basename(w.path)}", False, f"{w.path} does not exist")
                return Result(w, "unsupported", "file does not exist")
            return self._failed(w, e)
        if w.op == "write" and _holds(current, w, self.version):
            self._cache[w.path] = (w.value, now)
            self._recached.add(w.path)
            return Result(w, "unchanged")
        if self.dry_run:
            return Result(w, "planned")
        try:
            if w.op == "tids":
                failed = _write_ids(w.path, w.value)
                if failed:
                    # a thread that exited meanwhile is normal (ESRCH); the rest were moved
                    return Result(w, "written", f"{failed} ids gone")
            else:
                _write(w.path, w.value)
        except OSError as e:
            if e.errno == errno.ENOENT:
                return Result(w, "vanished")
            return self._failed(w, e)
        self._cache[w.path] = (w.value, now)
        self._recached.add(w.path)
        self.health.cgroup_writes += 1
        return Result(w, "written")

    def _validate(self, w: Write) -> str | None:
        path = os.path.normpath(w.path)
        if ".." in w.path.split(os.sep) or not any(os.path.join(path, "").startswith(r) or
                                                    path.startswith(r) for r in self._roots):
            return f"{w.path} is outside the host roots"
        if w.op in ("mkdir", "rmdir"):
            return None
        if w.op == "mount":
            return None if w.value in _MOUNTABLE else f"refusing to mount {w.value!r}"
        if "\n" in w.value.strip() and w.op == "write":
            return "a single write must not span lines"
        if w.resource is not None:
            res = RESOURCES.get(w.resource)
            if res is None:
                return f"unknown cgroup resource {w.resource!r}"
            try:
                return res.validate(w.value, self.version)
            except InvalidInput as e:
                return str(e)
        return None

    def _invalid(self, w: Write, problem: str) -> Result:
        self.health.skip("write", "invalid-value", w.path, f"{problem} ({w.reason})")
        return Result(w, "invalid", problem)

    def _mkdir(self, w: Write) -> Result:
        if os.path.isdir(w.path):
            return Result(w, "unchanged")
        if self.dry_run:
            return Result(w, "planned")
        try:
            os.mkdir(w.path, 0o755)
        except FileExistsError:
            return Result(w, "unchanged")
        except OSError as e:
            return self._failed(w, e)
        return Result(w, "written")

    def _rmdir(self, w: Write) -> Result:
        if not os.path.isdir(w.path):
            return Result(w, "unchanged")
        if self.dry_run:
            return Result(w, "planned")
        try:
            os.rmdir(w.path)
        except FileNotFoundError:
            return Result(w, "unchanged")
        except OSError as e:
            return self._failed(w, e)
        self.forget(os.path.join(w.path, ""))
        return Result(w, "written")

    def _mount(self, w: Write) -> Result:
        if os.path.ismount(w.path):
            return Result(w, "unchanged")
        if self.dry_run:
            return Result(w, "planned")
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.mount(w.value.encode(), w.path.encode(), w.value.encode(), _MS_RELATIME, None) != 0:
            err = ctypes.get_errno()
            return self._failed(w, OSError(err, os.strerror(err)))
        return Result(w, "written")

    def _failed(self, w: Write, e: OSError) -> Result:
        reason = errno.errorcode.get(e.errno or 0, "error")
        self.health.cgroup_write_errors[reason] += 1
        self.health.skip("write", reason, w.path, f"{e.strerror} ({w.reason})")
        return Result(w, "error", f"{reason}: {e.strerror}")

    # -- audit -----------------------------------------------------------------------------------------------
    def _audit(self, results: list[Result]) -> None:
        if not self.audit_path or not results:
            return
        try:
            os.makedirs(os.path.dirname(self.audit_path), exist_ok=True)
            if os.path.exists(self.audit_path) and os.path.getsize(self.audit_path) > AUDIT_MAX_BYTES:
                os.replace(self.audit_path, self.audit_path + ".1")
            ts = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            with open(self.audit_path, "a", encoding="utf-8") as f:
                for r in results:
                    f.write(json.dumps({"time": ts, "path": self.paths.host_relative(r.write.path),
                                        "value": r.write.value, "op": r.write.op, "reason": r.write.reason,
                                        "result": r.result, **({"detail": r.detail} if r.detail else {})}) + "\n")
        except OSError as e:
            self.health.skip("audit", "unwritable", self.audit_path, str(e))


_CHUNK = 65536


def _read(path: str) -> str:
    """The file's text; a read shorter than asked is taken as its end, so a value is one read, not two. That holds
    for what is compared: a cgroup value file, a resctrl schemata and a sysctl are one seq_file record, whole in one
    read. A multi-record file (`tasks`, `cgroup.procs`) may read short before its end, but it is only written to
    (task moves), never compared."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.read(fd, _CHUNK)
        if len(data) == _CHUNK:
            chunks = [data, os.read(fd, _CHUNK)]
            while chunks[-1]:
                chunks.append(os.read(fd, _CHUNK))
            data = b"".join(chunks)
    finally:
        os.close(fd)
    return data.decode("utf-8", "replace")


def _holds(current: str, w: Write, version: int) -> bool:
    if w.compare == "always":
        return False
    if version == 1 and w.resource == "memory.limit_in_bytes" and w.value.strip() == "-1":
        return v1_memory_unlimited(current)  # -1 never reads back as -1
    if w.compare == "line":
        return any(line.strip() == w.value.strip() for line in current.splitlines())
    return current.strip() == w.value.strip()


def _write(path: str, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _write_ids(path: str, ids: str) -> int:
    """One write() per id (the kernel takes one task per write); returns how many were refused."""
    failed = 0
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    try:
        for tid in ids.split():
            try:
                os.write(fd, tid.encode())
            except OSError as e:
                if e.errno not in (errno.ESRCH, errno.EINVAL):
                    raise
                failed += 1
    finally:
        os.close(fd)
    return failed
