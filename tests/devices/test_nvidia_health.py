"""XID health: ignored application XIDs, critical XIDs, recovery after the quiet period, NOT_SUPPORTED, watcher."""

from __future__ import annotations

import time
from typing import Any

import pytest

from koordlet.devices.nvidia.backend import NvmlError, XidEvent
from koordlet.devices.nvidia.health import IGNORED_XIDS, GpuHealth, XidHealth, XidWatcher
from koordlet.devices.nvidia.snapshot import SNAPSHOT_FORMAT, SnapshotBackend
from koordlet.health import Health

A, B, C = "0000:19:00.0", "0000:3b:00.0", "0000:4c:00.0"


@pytest.mark.parametrize("xid", sorted(IGNORED_XIDS))
def test_application_xids_are_ignored(xid: int) -> None:
    state = XidHealth()
    assert state.event(XidEvent(xid, A, "GPU-a"), [A, B], now=0.0) == []
    assert state.status(A, 1.0) == GpuHealth(True)


def test_ignored_set_is_upstreams() -> None:
    assert frozenset({13, 31, 43, 45, 68, 109}) == IGNORED_XIDS


def test_critical_xid_then_recovery_after_quiet_period() -> None:
    state = XidHealth(quiet_period=300)
    assert state.event(XidEvent(79, A, "GPU-a"), [A, B], now=1000.0) == [A]
    sick = GpuHealth(False, "Xid79", "Xid error detected on device, error code: 79")
    assert state.status(A, 1000.0) == sick
    assert state.status(B, 1000.0) == GpuHealth(True)
    # A second critical XID restarts the quiet period.
    state.event(XidEvent(48, A, "GPU-a"), [A, B], now=1200.0)
    assert state.status(A, 1499.0) == GpuHealth(False, "Xid48", "Xid error detected on device, error code: 48")
    # An ignored XID does not.
    state.event(XidEvent(13, A, "GPU-a"), [A, B], now=1450.0)
    assert state.status(A, 1500.0) == GpuHealth(True)


def test_event_without_uuid_marks_every_gpu() -> None:
    state = XidHealth()
    assert state.event(XidEvent(79, None, ""), [A, B, C], now=0.0) == [A, B, C]
    assert not any(state.status(b, 1.0).healthy for b in (A, B, C))


def test_event_of_unknown_gpu_marks_nothing() -> None:
    state = XidHealth()
    assert state.event(XidEvent(79, "0000:ff:00.0", "GPU-x"), [A, B], now=0.0) == []


def test_not_supported_is_sticky() -> None:
    state = XidHealth(quiet_period=10)
    state.not_supported(A, now=0.0)
    state.event(XidEvent(79, A, "GPU-a"), [A], now=1.0)  # cannot overwrite the permanent reason
    assert state.status(A, 10_000.0) == GpuHealth(False, "DeviceHealthCheckNotSupported",
                                                  "device does not support health checking")


def test_lost_gpu_recovers_like_an_xid() -> None:
    state = XidHealth(quiet_period=60)
    state.lost(B, "GPU_IS_LOST", now=0.0)
    assert state.status(B, 59.0) == GpuHealth(False, "Unknown", "failed to get device, error: GPU_IS_LOST")
    assert state.status(B, 60.0).healthy


def _backend(events: list[dict[str, Any]], b_supported: bool = True, c_error: str | None = None) -> SnapshotBackend:
    def dev(bus: str, m: int, **kw: Any) -> dict[str, Any]:
        return {"pciBusId": bus, "index": m, "minor": m, "name": "NVIDIA H800", "uuid": f"GPU-{m}",
                "memoryTotal": 1, **kw}

    c = dev(C, 2) if c_error is None else {"pciBusId": C, "errors": {"device": c_error}}
    return SnapshotBackend({"format": SNAPSHOT_FORMAT, "driverVersion": "1", "xidEvents": events,
                            "devices": [dev(A, 0), dev(B, 1, xidSupported=b_supported), c]})


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_watcher_registers_and_applies_events() -> None:
    events = [{"xid": 31, "pciBusId": A, "uuid": "GPU-0"}, {"xid": 79, "pciBusId": A, "uuid": "GPU-0"},
              {"xid": 64, "pciBusId": "0000:99:00.0", "uuid": "GPU-9"}]
    backend = _backend(events, b_supported=False)
    state, clock, health = XidHealth(quiet_period=300), Clock(), Health()
    watcher = XidWatcher(backend, state, [A, B], health, wait_ms=1, clock=clock)
    assert watcher.register() == [A]  # B: NOT_SUPPORTED → unhealthy for good
    assert state.status(B, clock.now).reason == "DeviceHealthCheckNotSupported"
    assert watcher.step() == XidEvent(31, A, "GPU-0")
    assert state.status(A, clock.now).healthy
    assert watcher.step() == XidEvent(79, A, "GPU-0")
    assert state.status(A, clock.now).reason == "Xid79"
    assert watcher.step() is None  # an unregistered device's event is never delivered
    clock.now += 300
    assert state.status(A, clock.now).healthy and not state.status(B, clock.now).healthy


def test_watcher_marks_vanished_gpus_after_a_critical_event() -> None:
    backend = _backend([{"xid": 79, "pciBusId": A, "uuid": "GPU-0"}], c_error="GPU_IS_LOST")
    state, health = XidHealth(), Health()
    watcher = XidWatcher(backend, state, [A, B, C], health, wait_ms=1, clock=Clock())
    assert watcher.register() == [A, B]  # C's registration failure is logged, not fatal
    assert health.skipped[("gpu", "xid-register-failed")] == 1
    watcher.step()
    assert state.status(C, 1000.0).message.startswith("failed to get device, error:")


def test_watcher_thread_starts_and_stops() -> None:
    backend = _backend([{"xid": 94, "pciBusId": B, "uuid": "GPU-1"}])
    state = XidHealth()
    watcher = XidWatcher(backend, state, [A, B], Health(), wait_ms=20)
    watcher.start()
    deadline = time.monotonic() + 5
    while state.status(B, time.time()).healthy and time.monotonic() < deadline:
        time.sleep(0.01)
    assert state.status(B, time.time()).reason == "Xid94"
    watcher.stop(timeout=5)
    backend.shutdown()
    assert watcher._thread is None


def test_stop_ends_a_wait_in_progress_where_the_backend_can() -> None:
    """The snapshot backend's wait ends on wake() (the agent stops at once, not after WAIT_MS); one wake ends one
    wait, and the backend still answers later events."""
    backend = _backend([])
    backend.init()
    watcher = XidWatcher(backend, XidHealth(), [A, B], Health(), wait_ms=60_000)
    watcher.start()
    time.sleep(0.05)  # the thread is inside its minute-long wait
    started = time.monotonic()
    watcher.stop(timeout=30)
    assert watcher._thread is None and time.monotonic() - started < 10
    started = time.monotonic()
    assert backend.wait_xid(50) is None and time.monotonic() - started >= 0.04  # the wake was spent


def test_failing_wait_backs_off_and_logs_once() -> None:
    class Failing(SnapshotBackend):
        calls = 0

        def wait_xid(self, timeout_ms: int) -> XidEvent | None:
            self.calls += 1
            raise NvmlError.named("GPU_IS_LOST")

    backend = Failing({"format": SNAPSHOT_FORMAT, "driverVersion": "1", "devices": []})
    health = Health()
    watcher = XidWatcher(backend, XidHealth(), [], health, wait_ms=30)
    started = time.monotonic()
    assert watcher.step() is None and watcher.step() is None
    assert time.monotonic() - started >= 0.05  # waited one period per failure instead of spinning
    assert health.skipped[("gpu", "xid-wait-failed")] == 2
