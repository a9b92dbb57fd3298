"""Per-pod run-queue wait (koordlet/schedlat): pure aggregation, attribution, the schedstat fallback on files, the
collector's one-time backend choice, and the exporter's histogram."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import pytest

from koordlet.collectors.advisor import Latest
from koordlet.exporter import AgentMetrics
from koordlet.health import Health
from koordlet.host.paths import HostPaths
from koordlet.metriccache import MetricCache
from koordlet.schedlat.attribution import PodIndex, cgroup_path
from koordlet.schedlat.collector import CAPABILITY, RAW_CAPABILITY, SCHEDSTAT_EVERY_SECONDS, SchedLatency, recent
from koordlet.schedlat.hist import SLOTS, Totals, cumulative_buckets, quantile
from koordlet.schedlat.schedstat import SchedstatBackend
from koordlet.schedlat.slots import SlotPool
from koordlet.states.model import PodMeta


def pod(uid: str, cgroup_dir: str, name: str = "p", qos: str = "LS") -> PodMeta:
    return PodMeta(uid=uid, namespace="ns", name=name, k8s_qos="Burstable", koord_qos=qos, priority_class="",
                   phase="Running", cgroup_dir=cgroup_dir, containers=(), raw={})


def test_quantile_interpolates_inside_the_log2_slot() -> None:
    hist = [0] * SLOTS
    hist[11] = 100  # waits of 1024..2047 µs
    assert quantile(hist, 0.5) == pytest.approx(1536e-6)
    assert quantile(hist, 0.99) == pytest.approx((1024 + 1024 * 0.99) * 1e-6)
    assert quantile([0] * SLOTS, 0.5) is None
    hist[1] = 100  # 1 µs
    assert quantile(hist, 0.25) == pytest.approx(1.5e-6)


def test_cumulative_buckets_are_exact_at_slot_bounds() -> None:
    hist = [0] * SLOTS
    hist[0], hist[2], hist[5] = 1, 2, 3
    assert cumulative_buckets(hist, (1, 3, 5, 7)) == [(2e-6, 1), (8e-6, 3), (32e-6, 6), (128e-6, 6)]


def test_totals_minus_counts_from_zero_and_never_negative() -> None:
    a = Totals(10, 1000, (1,) * SLOTS)
    assert a.minus(None) is a
    assert a.minus(Totals(4, 400, (1,) * SLOTS)) == Totals(6, 600, (0,) * SLOTS)
    assert Totals(3, 30).minus(Totals(5, 50)) == Totals(0, 0)
    assert Totals(2, 3_000_000_000).mean_seconds == 1.5


def test_attribution_by_pod_dir_component_v1_and_v2() -> None:
    v1 = "12:memory:/x\n4:cpu:/koordlet-test-1/kubepods/burstable/podabc/ctr\n3:cpuacct:/y\n0::/\n"
    assert cgroup_path(v1, 1) == "/koordlet-test-1/kubepods/burstable/podabc/ctr"
    assert cgroup_path(v1, 2) == "/"
    assert cgroup_path("5:cpu,cpuacct:/a\n", 1) == "/a"
    sysd = "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-poda_b.slice/cri-containerd-1.scope\n"
    index = PodIndex([pod("abc", "kubepods/burstable/podabc"),
                      pod("a-b", "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-poda_b.slice")])
    assert index.pod_of(cgroup_path(v1, 1) or "") == "abc"
    assert index.pod_of(cgroup_path(sysd, 2) or "") == "a-b"
    assert index.pod_of("/system.slice/sshd.service") is None


def _fake_host(tmp_path: Path, tasks: dict[str, dict[int, tuple[int, int]]]) -> HostPaths:
    """cgroup v1 cpu dirs with `tasks` files and <proc>/<tid>/schedstat: rel dir → tid → (run delay, slices)."""
    for rel, by_tid in tasks.items():
        d = tmp_path / "cgroup" / "cpu" / rel
        d.mkdir(parents=True, exist_ok=True)
        (d / "tasks").write_text("".join(f"{t}\n" for t in by_tid))
        for tid, (delay, slices) in by_tid.items():
            (tmp_path / "proc" / str(tid)).mkdir(parents=True, exist_ok=True)
            (tmp_path / "proc" / str(tid) / "schedstat").write_text(f"123 {delay} {slices}\n")
    return HostPaths.under(str(tmp_path)).with_overrides(cgroup_root=str(tmp_path / "cgroup"),
                                                         proc_root=str(tmp_path / "proc"))


def test_schedstat_backend_sums_task_deltas_per_pod(tmp_path: Path) -> None:
    paths = _fake_host(tmp_path, {"kubepods/poda/c1": {10: (1000, 10)}, "kubepods/poda": {11: (500, 5)}})
    backend = SchedstatBackend(paths, 1)
    pods = [pod("a", "kubepods/poda")]
    assert backend.read(pods) == {"a": Totals(0, 0)}  # first sight: a baseline
    # tid 10 waited 2000 ns more over 4 runs; tid 11 exited; tid 12 is new in a pod already seen: all of it counts
    _fake_host(tmp_path, {"kubepods/poda/c1": {10: (3000, 14), 12: (700, 3)}, "kubepods/poda": {}})
    assert backend.read(pods) == {"a": Totals(7, 2700)}
    assert backend.read([]) == {} and backend.read(pods) == {"a": Totals(0, 0)}  # a gone pod is forgotten


class _Fixed:
    """A backend returning given totals."""

    source = "ebpf"

    def __init__(self) -> None:
        self.totals: dict[str, Totals] = {}
        self.closed = False

    def read(self, pods: list[PodMeta]) -> dict[str, Totals]:
        return dict(self.totals)

    def close(self) -> None:
        self.closed = True


def test_bcc_failure_is_said_once_and_schedstat_serves_for_good(tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    calls: list[bool] = []

    def make(paths: HostPaths, version: int, use_bcc: bool) -> Any:
        calls.append(use_bcc)
        if use_bcc:
            raise RuntimeError("no kernel headers")
        return SchedstatBackend(paths, version)

    health = Health()
    sl = SchedLatency(HostPaths.under(str(tmp_path)), 1, health, use_bcc=True, make=make)
    with caplog.at_level(logging.INFO, logger="koordlet"):
        assert sl.wait_ready(10)
        for _ in range(5):
            sl.collect([], 0)
    assert calls == [True, False] and sl.source == "schedstat"
    assert health.capabilities[CAPABILITY] is False
    assert sum("no kernel headers" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.parametrize("attach", ["raw_tracepoint", "tracepoint"])
def test_which_tracepoints_the_program_runs_on_is_said_once(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                            attach: str) -> None:
    backend = _Fixed()
    backend.attach = attach  # type: ignore[attr-defined]
    backend.attach_reason = "no usable BTF (nope)"  # type: ignore[attr-defined]
    health = Health()
    sl = SchedLatency(HostPaths.under(str(tmp_path)), 1, health, use_bcc=True, make=lambda *_: backend)
    with caplog.at_level(logging.INFO, logger="koordlet"):
        assert sl.wait_ready(10)
        for _ in range(3):
            sl.collect([], 0)
    assert health.capabilities[CAPABILITY] is True
    assert health.capabilities[RAW_CAPABILITY] is (attach == "raw_tracepoint")
    said = [r.getMessage() for r in caplog.records]
    assert sum(f"from ebpf on {attach.replace('_', ' ')}s" in m for m in said) == 1
    assert sum("no usable BTF" in m for m in said) == (attach == "tracepoint")


def test_forced_fallback_when_bcc_cannot_be_imported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The program is loaded by a child interpreter: a `bcc` first on its path that refuses to import blocks it there.
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "bcc.py").write_text("raise ImportError('blocked by the test')\n")
    monkeypatch.setenv("PYTHONPATH", f"{blocker}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    paths = _fake_host(tmp_path, {"kubepods/poda": {10: (1000, 10)}})
    health = Health()
    sl = SchedLatency(paths, 1, health, use_bcc=True)
    assert sl.wait_ready(10) and sl.source == "schedstat"
    assert "python3-bpfcc" in sl.reason and health.capabilities[CAPABILITY] is False
    p = pod("a", "kubepods/poda")
    sl.collect([p], 1000)
    _fake_host(tmp_path, {"kubepods/poda": {10: (5000, 12)}})
    sl.collect([p], 2000)  # the fallback opens a file per thread: not every tick
    [row] = sl.latest
    assert row.tick == Totals(0, 0)
    sl.collect([p], 1000 + int(SCHEDSTAT_EVERY_SECONDS * 1000))
    [row] = sl.latest
    assert (row.source, row.tick) == ("schedstat", Totals(2, 4000))
    _fake_host(tmp_path, {"kubepods/poda": {10: (6000, 13)}})
    sl.collect([p], 1000 + int(SCHEDSTAT_EVERY_SECONDS * 1000) + 1, force=True)  # `koordlet sched-latency`
    [row] = sl.latest
    assert row.tick == Totals(1, 1000)


def test_ticks_go_to_the_metric_cache_and_the_exporter(tmp_path: Path) -> None:
    backend = _Fixed()
    sl = SchedLatency(HostPaths.under(str(tmp_path)), 1, Health(), use_bcc=True, make=lambda *a: backend)
    assert sl.wait_ready(10)
    cache = MetricCache(lambda kind: 600)
    p = pod("u1", "kubepods/podu1", name="web")
    hist = [0] * SLOTS
    hist[11] = 4  # four waits of 1-2 ms
    backend.totals = {"u1": Totals(0, 0, (0,) * SLOTS)}
    sl.collect([p], 1000, cache)
    backend.totals = {"u1": Totals(4, 6_000_000, tuple(hist))}
    sl.collect([p], 2000, cache)
    r = recent(cache, "u1", 0, 3000)
    assert r is not None and r.count == 4 and r.mean_seconds == pytest.approx(1.5e-3)
    assert r.p99_seconds == pytest.approx(quantile(hist, 0.99))
    metrics = AgentMetrics("node-a", Health(), Latest(), cache, schedlat=sl)
    text = metrics.render("external").decode()
    labels = 'namespace="ns",node="node-a",pod="web",qos="LS",source="ebpf",uid="u1"'
    assert f'koordlet_pod_cpu_schedule_latency_seconds_bucket{{le="0.000512",{labels}}} 0.0' in text
    assert f'koordlet_pod_cpu_schedule_latency_seconds_bucket{{le="0.002048",{labels}}} 4.0' in text
    assert f"koordlet_pod_cpu_schedule_latency_seconds_count{{{labels}}} 4.0" in text
    assert f"koordlet_pod_cpu_schedule_latency_seconds_sum{{{labels}}} 0.006" in text
    sl.close()
    assert backend.closed


def test_a_slow_load_never_blocks_the_tick(tmp_path: Path) -> None:
    def slow(paths: HostPaths, version: int, use_bcc: bool) -> Any:
        time.sleep(0.5)
        return _Fixed()

    sl = SchedLatency(HostPaths.under(str(tmp_path)), 1, Health(), use_bcc=True, make=slow)
    t0 = time.monotonic()
    sl.collect([], 0)  # starts the load in its thread and returns
    assert time.monotonic() - t0 < 0.2 and sl.backend is None
    assert sl.wait_ready(10) and sl.backend is not None


def test_slots_read_each_tick_follow_the_live_pods_under_churn() -> None:
    """Four pods, one replaced every read, for 10 000 reads: the slots in use (and read each tick) stay below live
    pods + one quarantine, not every slot the program has (handing slots out in turn walked all 2 048); a freed slot
    serves no new pod before its quarantine ends, then the lowest goes first; with every slot live, none is given."""
    pool = SlotPool(2048, quarantine=60)
    live = [pool.take() for _ in range(4)]
    assert live == [1, 2, 3, 4]
    freed_at: dict[int, int] = {}
    highest = 0
    for n in range(10_000):
        gone = live.pop(0)
        assert gone is not None
        pool.free(gone)
        freed_at[gone] = n
        slot = pool.take()
        assert slot is not None and n - freed_at.get(slot, -10**9) >= 60, (slot, n)
        live.append(slot)
        pool.read()
        highest = max(highest, pool.high)
    assert highest <= 1 + 4 + 60 + 1, highest
    # a quiet node gives the top back
    for slot in live:
        assert slot is not None
        pool.free(slot)
    for _ in range(61):
        pool.read()
    assert pool.high == 1 and pool.take() == 1

    small = SlotPool(3, quarantine=5)
    assert [small.take(), small.take(), small.take()] == [1, 2, None]
    small.free(2)
    assert small.take() == 2  # every slot taken or waiting: the one freed longest ago, not none
