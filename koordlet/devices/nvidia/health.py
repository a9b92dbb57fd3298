"""GPU health from NVML critical XID events: a pure state machine (with recovery) and the thread that feeds it.

Upstream: pkg/koordlet/statesinformer/impl/states_device_linux.go (gpuHealCheck, checkHealth). Differences, each
a decision: a GPU recovers after `quiet_period` seconds without a critical XID (upstream: unhealthy until restart);
a failing wait does not spin.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from koordlet.devices.nvidia.backend import NvmlBackend, NvmlError, XidEvent
from koordlet.devices.nvidia.telemetry import XidCounts
from koordlet.health import Health

log = logging.getLogger(__name__)

# Application errors (bad program, not bad GPU): https://docs.nvidia.com/deploy/xid-errors/ — 13 graphics engine
# exception, 31 memory page fault, 43 GPU stopped processing, 45 preemptive cleanup, 68 video processor
# exception, 109 context switch timeout; upstream ignores exactly these.
IGNORED_XIDS = frozenset({13, 31, 43, 45, 68, 109})
DEFAULT_QUIET_PERIOD = 300.0
WAIT_MS = 5000  # upstream eventSet.Wait(5000)
REASON_NOT_SUPPORTED = "DeviceHealthCheckNotSupported"
MESSAGE_NOT_SUPPORTED = "device does not support health checking"


@dataclass(frozen=True)
class GpuHealth:
    healthy: bool
    reason: str = ""
    message: str = ""


@dataclass
class _Bad:
    reason: str
    message: str
    last: float  # time of the latest critical event
    sticky: bool  # health cannot be checked at all: no quiet period can prove it healthy


class XidHealth:
    """Unhealthy GPUs by bus id. Thread-safe: the watcher thread feeds it, the Device reporter reads it."""

    def __init__(self, quiet_period: float = DEFAULT_QUIET_PERIOD, ignored: Iterable[int] = IGNORED_XIDS) -> None:
        self.quiet_period = quiet_period
        self.ignored = frozenset(ignored)
        self._bad: dict[str, _Bad] = {}
        self._lock = threading.Lock()

    def not_supported(self, bus_id: str, now: float) -> None:
        with self._lock:
            self._bad[bus_id] = _Bad(REASON_NOT_SUPPORTED, MESSAGE_NOT_SUPPORTED, now, sticky=True)

    def event(self, ev: XidEvent, bus_ids: Iterable[str], now: float) -> list[str]:
        """Apply one event to the watched GPUs; returns the bus ids it marked unhealthy."""
        if ev.xid in self.ignored:
            return []
        watched = list(bus_ids)
        # NVML could not name the device: upstream marks every GPU unhealthy.
        hit = watched if not ev.uuid else [b for b in watched if b == ev.bus_id]
        message = f"Xid error detected on device, error code: {ev.xid}"
        for b in hit:
            self._mark(b, f"Xid{ev.xid}", message, now)
        return hit

    def lost(self, bus_id: str, detail: str, now: float) -> None:
        """NVML no longer finds the GPU (upstream checks this after every event)."""
        self._mark(bus_id, "Unknown", f"failed to get device, error: {detail}", now)

    def _mark(self, bus_id: str, reason: str, message: str, now: float) -> None:
        with self._lock:
            old = self._bad.get(bus_id)
            if old is not None and old.sticky:
                return
            self._bad[bus_id] = _Bad(reason, message, now, sticky=False)

    def status(self, bus_id: str, now: float) -> GpuHealth:
        with self._lock:
            bad = self._bad.get(bus_id)
            if bad is None:
                return GpuHealth(True)
            if not bad.sticky and now - bad.last >= self.quiet_period:
                del self._bad[bus_id]  # recovered: quiet for a whole period
                return GpuHealth(True)
            return GpuHealth(False, bad.reason, bad.message)


class XidWatcher:
    """Registers the GPUs for critical XID events and feeds XidHealth from a daemon thread."""

    def __init__(self, backend: NvmlBackend, state: XidHealth, bus_ids: Iterable[str], health: Health,
                 wait_ms: int = WAIT_MS, clock: Callable[[], float] = time.time,
                 counts: XidCounts | None = None) -> None:
        self.backend = backend
        self.counts = counts  # every event by GPU and code, for the koordlet_gpu_xid_errors series
        self.state = state
        self.bus_ids = list(bus_ids)
        self.health = health
        self.wait_ms = wait_ms
        self.clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.registered: list[str] = []

    def register(self) -> list[str]:
        """Register every GPU; NOT_SUPPORTED marks it unhealthy for good (upstream), other errors skip it."""
        now = self.clock()
        for bus in self.bus_ids:
            try:
                self.backend.register_xid(bus)
            except NvmlError as e:
                if e.name == "NOT_SUPPORTED":
                    self.state.not_supported(bus, now)
                else:
                    self.health.skip("gpu", "xid-register-failed", bus, str(e))
                continue
            self.registered.append(bus)
        return self.registered

    def step(self) -> XidEvent | None:
        """One wait; returns the event it applied (None on timeout or error)."""
        try:
            ev = self.backend.wait_xid(self.wait_ms)
        except NvmlError as e:
            self.health.skip("gpu", "xid-wait-failed", self.backend.name, str(e))
            # **[quirk]** upstream retries a failing wait at once (a busy loop); we back off for one wait period.
            self._stop.wait(self.wait_ms / 1000)
            return None
        if ev is None:
            return None
        if self.counts is not None:
            self.counts.record(ev, self.bus_ids)
        now = self.clock()
        hit = self.state.event(ev, self.bus_ids, now)
        if hit:
            log.warning("GPU %s unhealthy: Xid %d", ",".join(hit), ev.xid)
        if ev.xid not in self.state.ignored:
            for bus in self.bus_ids:
                try:
                    self.backend.device(bus)
                except NvmlError as e:
                    self.state.lost(bus, str(e), now)
        return ev

    def start(self) -> None:
        if self._thread is not None:
            return
        self.register()
        if not self.registered:
            return
        self._thread = threading.Thread(target=self._run, name="gpu-xid-watcher", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.step()

    def stop(self, timeout: float | None = None) -> None:
        self._stop.set()
        self.backend.wake()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
