"""Gate CPUSchedLatency: one backend chosen once at start (bcc compiled in a thread, else schedstat), read on the
collection tick into per-pod running totals, per-tick series in the metric cache, and the exporter's histogram."""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from koordlet.health import Health
from koordlet.host.paths import HostPaths
from koordlet.metriccache import ColumnWriter, MetricCache
from koordlet.schedlat.hist import SLOTS, Totals, quantile
from koordlet.states.model import PodMeta

log = logging.getLogger(__name__)

CAPABILITY = "cpu-schedule-latency-ebpf"
# The eBPF program on raw tracepoints (task_struct offsets from the kernel's BTF), else on classic ones.
RAW_CAPABILITY = "cpu-schedule-latency-raw-tracepoint"
# The fallback opens a file per thread: read every this many seconds rather than every tick (the waits in between
# are not lost, they arrive with the next read), so a node without bcc pays ~1/10 of its cost (docs/decisions.md).
SCHEDSTAT_EVERY_SECONDS = 10.0
_NAN = float("nan")
KIND_SUM, KIND_COUNT, KIND_P99 = ("pod_cpu_schedule_latency_sum", "pod_cpu_schedule_latency_count",
                                  "pod_cpu_schedule_latency_p99")


class Backend(Protocol):
    source: str

    def read(self, pods: list[PodMeta]) -> dict[str, Totals]:
        """Per pod uid: its waits since the backend first saw it (monotonic)."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class PodLatency:
    pod: PodMeta
    source: str
    total: Totals  # since first seen: the Prometheus histogram
    tick: Totals  # since the previous tick


def _default_backends(paths: HostPaths, version: int, use_bcc: bool) -> Backend:
    from koordlet.schedlat.schedstat import SchedstatBackend

    if use_bcc:
        from koordlet.schedlat.ebpf import EbpfBackend

        return EbpfBackend(paths, version)
    return SchedstatBackend(paths, version)


class SchedLatency:
    """`start` loads the backend off the caller's thread; until it is ready a tick reads nothing. A failed bcc load
    is said once (log, Health capability, `koordlet_agent_kernel_capability`) and schedstat is used for good."""

    def __init__(self, paths: HostPaths, cgroup_version: int, health: Health, *, use_bcc: bool | None = None,
                 make: Callable[[HostPaths, int, bool], Backend] = _default_backends) -> None:
        self.paths = paths
        self.version = cgroup_version
        self.health = health
        # The program sees this kernel's tasks: it can only be matched to pods through this kernel's /proc (a
        # simulated node's proc root gets schedstat, read from its files).
        self.use_bcc = _is_this_kernel(paths.proc_root) if use_bcc is None else use_bcc
        self._make = make
        self.backend: Backend | None = None
        self.reason = ""  # why bcc is not used, once known
        self.latest: list[PodLatency] = []
        self._before: dict[str, Totals] = {}
        self._rows: dict[str, PodLatency] = {}  # the last tick's row of each pod: reused while the pod did not wait
        self._read_ms: int | None = None
        # (pods, cache, its generation, the writer of the pods' series) for the pods list last written
        self._writer: tuple[list[PodMeta], MetricCache, int, ColumnWriter] | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._closed = False

    @property
    def source(self) -> str | None:
        return None if self.backend is None else self.backend.source

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._load, name="schedlat-load", daemon=True)
            self._thread.start()

    def wait_ready(self, timeout: float | None = None) -> bool:
        self.start()
        return self._ready.wait(timeout)

    def _load(self) -> None:
        t0 = time.monotonic()
        backend: Backend | None = None
        if self.use_bcc:
            try:
                backend = self._make(self.paths, self.version, True)
            except Exception as e:  # BccUnavailable, or anything else bcc raised: never take the agent down
                self.reason = str(e)
            self.health.capability(CAPABILITY, backend is not None,
                                   f"{self.reason}; run-queue wait falls back to per-task schedstat (mean only)",
                                   fallback=True)
        else:
            self.reason = "bcc not used"
        if backend is None:
            try:
                backend = self._make(self.paths, self.version, False)
            except Exception as e:
                self.health.once("schedlat/none", logging.WARNING, "no run-queue wait source: %s", e)
        attach = getattr(backend, "attach", None)
        if attach is not None:
            self.health.capability(RAW_CAPABILITY, attach == "raw_tracepoint",
                                   f"{getattr(backend, 'attach_reason', '')}; the program runs on classic tracepoints",
                                   fallback=True)
        if backend is not None:
            how = "" if attach is None else f" on {attach.replace('_', ' ')}s"
            log.info("per-pod run-queue wait from %s%s (ready in %.1f s)", backend.source, how,
                     time.monotonic() - t0)
        if self._closed and backend is not None:
            backend.close()
            backend = None
        if backend is not None:
            weakref.finalize(self, backend.close)  # an agent dropped without close() detaches its program too
        self.backend = backend
        self._ready.set()

    def collect(self, pods: list[PodMeta], ts_ms: int, cache: MetricCache | None = None, *,
                force: bool = False) -> None:
        """Read the backend (the schedstat fallback at most every SCHEDSTAT_EVERY_SECONDS unless forced)."""
        backend = self.backend
        if backend is None:
            self.start()
            return
        if (backend.source == "schedstat" and not force and self._read_ms is not None
                and ts_ms - self._read_ms < SCHEDSTAT_EVERY_SECONDS * 1000):
            return
        self._read_ms = ts_ms
        try:
            totals = backend.read(pods)
        except Exception as e:  # a map or file read failing must not stop the collection tick
            self.health.skip("schedlat", "read-failed", backend.source, f"{type(e).__name__}: {e}")
            return
        self.health.recovered("schedlat", "read-failed", backend.source)
        latest = []
        before_all, last_rows = self._before, self._rows
        rows: dict[str, PodLatency] = {}
        source = backend.source
        # a pod's three series of this tick, NaN where it has no sample (not seen yet; p99 of no waits)
        sums: list[float] = []
        counts: list[float] = []
        p99s: list[float] = []
        for pod in pods:
            uid = pod.uid
            total = totals.get(uid)
            if total is None:
                sums.append(_NAN)
                counts.append(_NAN)
                p99s.append(_NAN)
                continue
            before = before_all.get(uid)
            if total is before:  # the backend kept the pod's totals: it did not wait since the last tick
                last, nothing = last_rows.get(uid), _nothing(total)
                row = last if last is not None and last.pod is pod and last.total is total and \
                    last.tick is nothing else PodLatency(pod, source, total, nothing)
            else:  # an equal total needs no subtraction either
                tick = _nothing(total) if before is not None and total == before else total.minus(before)
                row = PodLatency(pod, source, total, tick)
            rows[uid] = row
            latest.append(row)
            tick = row.tick
            sums.append(tick.sum_ns / 1e9)
            counts.append(float(tick.count))
            p99 = quantile(tick.hist, 0.99) if tick.hist is not None and tick.count else None
            p99s.append(_NAN if p99 is None else p99)
        if cache is not None:
            self._writer_for(pods, cache).add(ts_ms, np.array(sums + counts + p99s))
        self._before, self._rows = totals, rows
        self.latest = latest

    def _writer_for(self, pods: list[PodMeta], cache: MetricCache) -> ColumnWriter:
        """The pods' series as one row a tick in the cache's `schedlat` frame (a sample per series and tick, as
        the collection tick writes usage): rebuilt when the pods change or the cache's gc moved columns."""
        held = self._writer
        if held is None or held[0] is not pods or held[1] is not cache or held[2] != cache.generation:
            key = cache.key
            keys = [key(kind, pod_uid=p.uid) for kind in (KIND_SUM, KIND_COUNT, KIND_P99) for p in pods]
            held = self._writer = (pods, cache, cache.generation, cache.columns(keys, frame="schedlat"))
        return held[3]

    def program_stats(self) -> dict[str, tuple[int, int]]:
        stats = getattr(self.backend, "program_stats", None)
        return stats() if stats is not None else {}

    def close(self) -> None:
        self._closed = True
        backend, self.backend = self.backend, None
        if backend is not None:
            backend.close()


_ZERO_HIST = (0,) * SLOTS
_NO_WAITS = Totals(0, 0, _ZERO_HIST)
_NO_WAITS_MEAN_ONLY = Totals(0, 0)


def _nothing(total: Totals) -> Totals:
    return _NO_WAITS_MEAN_ONLY if total.hist is None else _NO_WAITS


def _is_this_kernel(proc_root: str) -> bool:
    try:
        return os.path.samefile(proc_root, "/proc")
    except OSError:
        return False


@dataclass(frozen=True, slots=True)
class Recent:
    """A pod's run-queue waits over a window from the metric cache (QoS logic): p99 is the highest tick p99
    (an upper bound of the window's p99; None under schedstat)."""

    count: int
    sum_seconds: float
    p99_seconds: float | None

    @property
    def mean_seconds(self) -> float | None:
        return self.sum_seconds / self.count if self.count else None


def recent(cache: MetricCache, pod_uid: str, start_ms: int, end_ms: int) -> Recent | None:
    _, counts = cache.window(cache.key(KIND_COUNT, pod_uid=pod_uid), start_ms, end_ms)
    if not counts:
        return None
    _, sums = cache.window(cache.key(KIND_SUM, pod_uid=pod_uid), start_ms, end_ms)
    _, p99s = cache.window(cache.key(KIND_P99, pod_uid=pod_uid), start_ms, end_ms)
    return Recent(int(sum(counts)), float(sum(sums)), max(p99s) if p99s else None)
