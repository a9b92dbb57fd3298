"""Cost of one Prometheus scrape at N pods × M containers, then the real agent under 1, 20 and 50 scrapers.

First in-process, no cgroups needed: the advisor's latest sample is filled in memory (what a render reads), so this
measures only family building and text rendering: with the per-pod usage series through prometheus_client's
generate_latest and through the exporter's renderer, without usage samples (requests, limits, health and process
families: what the exporter had before the per-pod series), and the gzip of the rendered body. One render is the
floor of what serving scrapers can cost the agent per collection tick. Then the number of series on /metrics, with
and without --disable-container-metrics, and on the real cgroups below the cost of the scrape's working-set read.

Then the real `koordlet run` on N pods × M containers of real cgroups (v1, as benchmarks.collection builds them):
for a window with no scraper (the agent's own cost), then with 1, 20 and 50 scrapers that each scrape /metrics
once a period, all at the same moment (the herd; `Accept-Encoding: gzip`, as Prometheus asks), the scrape latency
p50/p99/max, timeouts (10 s, Prometheus' default), and the agent's CPU: % of one core, and above the idle window
per collection tick, beside the in-process render floor. The scrapers are threads of this process: on a small
machine their own CPU competes with the agent's, so latencies are an upper bound.

Last, on the same cgroups, one scrape of the agent on bundled GPU snapshot nodes beside Debian's node_exporter scraping
this host (benchmarks.scrape_compare).
"""

from __future__ import annotations

import argparse
import gzip
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path

import psutil
from prometheus_client import generate_latest

from benchmarks import scrape_compare
from benchmarks.collection import bench_node, have_real_cgroups
from benchmarks.daemon import free_port, stop_agent, wait_ready
from koordlet.agent import Agent
from koordlet.collectors.advisor import Latest
from koordlet.collectors.cgroups import CgroupUsage
from koordlet.config import Config
from koordlet.exporter import AgentMetrics
from koordlet.exposition import GZIP_LEVEL
from koordlet.health import Health
from koordlet.host.paths import HostPaths
from koordlet.metriccache import MetricCache
from koordlet.states.model import ContainerMeta, PodMeta


def fill(latest: Latest, n_pods: int, n_ctrs: int) -> dict[tuple[str, str], int]:
    """Pods, their usage and (returned) their working sets, as a collection tick and a scrape would have them."""
    pods = []
    usage: dict[tuple[str, str], CgroupUsage] = {}
    for i in range(n_pods):
        uid = str(uuid.uuid4())
        ctrs = tuple(ContainerMeta(f"c{c}", f"containerd://{uuid.uuid4().hex}{uuid.uuid4().hex}", None, True)
                     for c in range(n_ctrs))
        spec = {"containers": [{"name": c.name, "resources": {"requests": {"kubernetes.io/batch-cpu": "1000"}}}
                               for c in ctrs]}
        pods.append(PodMeta(uid, "bench", f"bench-{i}", "Burstable", "BE", "koord-batch", "Running", "", ctrs,
                            {"spec": spec}))
        usage[("pod", uid)] = CgroupUsage(0.25 * n_ctrs, 300 << 20, 400 << 20, 0.1, 10**12, 10**5, 10**4, 10**11)
        for c in ctrs:
            usage[("container", c.container_id)] = CgroupUsage(0.25, 100 << 20, 130 << 20, 0.1, 10**12, 10**5,
                                                               10**4, 10**11)
    latest.pods, latest.usage = pods, usage
    return {id_: u.memory + (10 << 20) for id_, u in usage.items()}


def series(text: bytes) -> tuple[int, int]:
    """Series in an exposition (sample lines), and those of the per-pod and per-container usage families."""
    lines = [ln for ln in text.split(b"\n") if ln and not ln.startswith(b"#")]
    usage = (b"koordlet_pod_cpu_", b"koordlet_pod_memory_", b"koordlet_container_cpu_", b"koordlet_container_memory_")
    return len(lines), sum(1 for ln in lines if ln.startswith(usage))


def per_scrape_ms(render: Callable[[], bytes], seconds: float) -> tuple[float, int]:
    """CPU milliseconds of one render (process time, so other load on the machine does not count)."""
    body = render()
    n, start, wall = 0, time.process_time(), time.perf_counter()
    while time.perf_counter() - wall < seconds:
        render()
        n += 1
    return (time.process_time() - start) / n * 1000, len(body)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pods", type=int, default=250)
    ap.add_argument("--containers", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2.0, help="per in-process measurement")
    ap.add_argument("--interval", type=float, default=15.0, help="scrape interval for the %% of a core")
    ap.add_argument("--scrapers", default="1,20,50", help="concurrent scrapers against the real agent")
    ap.add_argument("--period", type=float, default=1.0, help="seconds between one scraper's scrapes")
    ap.add_argument("--window", type=float, default=12.0, help="seconds measured per number of scrapers")
    scrape_compare.add_arguments(ap)
    args = ap.parse_args()

    latest = Latest()
    working_set = fill(latest, args.pods, args.containers)
    m = AgentMetrics("bench-node", Health(), latest, MetricCache(lambda _: 300.0), working_set=lambda: working_set)
    rows = [("with usage, generate_latest", per_scrape_ms(
        lambda: generate_latest(m.internal) + generate_latest(m.external), args.seconds))]
    rows.append(("with usage", per_scrape_ms(m.render, args.seconds)))
    body = m.render()
    for level in sorted({GZIP_LEVEL, 6}):  # the level served, and zlib's default
        rows.append((f"gzip of that body at level {level}{' (served)' if level == GZIP_LEVEL else ''}",
                     per_scrape_ms(partial(gzip.compress, body, compresslevel=level, mtime=0), args.seconds)))
    usage, latest.usage = latest.usage, {}
    rows.append(("without usage", per_scrape_ms(m.render, args.seconds)))
    latest.usage = usage

    print(f"one render of /metrics, in-process, {args.pods} pods × {args.containers} containers")
    w = max(len(r[0]) for r in rows)
    print(f"{'':<{w}}  {'CPU ms':>7}  {'% core':>7}  {'KiB':>5}")
    for label, (ms, size) in rows:
        print(f"{label:<{w}}  {ms:>7.1f}  {ms / args.interval / 10:>7.3f}  {size / 1024:>5.0f}")
    print(f"(% of one core at one scrape every {args.interval:g} s)")
    counts = {}
    for off in (False, True):
        m.container_series = not off
        counts[off] = series(m.render())
    m.container_series = True
    print(f"series on /metrics at {args.pods} pods × {args.containers} containers: {counts[False][0]} "
          f"({counts[False][1]} pod/container usage series); with --disable-container-metrics: {counts[True][0]} "
          f"({counts[True][1]})")
    if not have_real_cgroups():
        return 2
    levels = [int(n) for n in args.scrapers.split(",")]
    with bench_node(args.pods, args.containers) as (paths, pods_dir, tmp):
        floor = render_floor(args, paths, pods_dir, tmp / "floor")
        loaded = under_load(args, paths.cgroup_root, pods_dir, tmp, levels, floor)
        return max(loaded, scrape_compare.compare(args, paths.cgroup_root, pods_dir, tmp / "compare"))


def render_floor(args: argparse.Namespace, paths: HostPaths, pods_dir: Path, state: Path) -> float:
    """CPU ms of one render of /metrics and its gzip by an in-process agent on the same node and configuration as
    the daemon below, once every cgroup has been read: what one collection tick may cost the server, at least."""
    agent = Agent(Config(node_name="bench", paths=paths, pods_dir=str(pods_dir), state_dir=str(state)))
    try:
        agent.sync_pods()
        agent.collect()  # starts loading the scheduling-latency backend (gate CPUSchedLatency), as in the daemon
        if agent.schedlat is not None:
            agent.schedlat.wait_ready(30.0)
        # a whole container stride of ticks: each container is read every `container_stride` ticks, and the
        # working set (and the render) covers only cgroups read once at least
        for _ in range(max(agent.advisor.cgroups.container_stride, 2)):
            time.sleep(0.2)
            agent.collect()
        ms, _ = per_scrape_ms(lambda: gzip.compress(agent.metrics.render(), compresslevel=GZIP_LEVEL, mtime=0),
                              args.seconds)
        ws_ms, _ = per_scrape_ms(lambda: repr(agent.advisor.cgroups.working_set()).encode(), args.seconds)
        print(f"real cgroups: one render + gzip {ms:.1f} CPU ms, of which the working-set read (the scrape's only "
              f"file reads, {len(agent.advisor.cgroups.working_set())} cgroups) {ws_ms:.1f} ms")
    finally:
        agent.close()
    return ms


def under_load(args: argparse.Namespace, cgroup_root: str, pods_dir: Path, tmp: Path, levels: list[int],
               floor_ms: float) -> int:
    port = free_port()
    cmd = [sys.executable, "-m", "koordlet", "run", "--host-root", "/", "--cgroup-root-dir", cgroup_root,
           "--pods-dir", str(pods_dir), "--state-dir", str(tmp / "state"), "--node-name", "bench",
           "--addr", f"127.0.0.1:{port}"]
    log = open(tmp / "koordlet.log", "wb")  # noqa: SIM115 - closed below, after the process
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    results: list[tuple[int, Load]] = []
    try:
        wait_ready(port, proc)
        time.sleep(3.0)  # past the first ticks and the first report
        agent = psutil.Process(proc.pid)
        idle = Load.run(agent, port, 0, args.period, args.window)
        for n in levels:
            results.append((n, Load.run(agent, port, n, args.period, args.window)))
    finally:
        stop_agent(proc, log)
    print(f"\nthe real agent (`koordlet run`, 1 s collection ticks), {args.pods} pods × {args.containers} containers "
          f"of real cgroups; each scraper once every {args.period:g} s, all at once, for {args.window:g} s")
    print(f"floor: one render + its gzip by an in-process agent on this node, {floor_ms:.1f} ms of CPU; "
          f"the daemon idle (no scraper) "
          f"{idle.core_pct:.2f} % of a core")
    head = ("scrapers", "scrapes", "timeouts", "p50 ms", "p99 ms", "max ms", "agent % core",
            "ms/tick above idle", "÷ floor")
    print("  ".join(f"{h:>{max(len(h), 8)}}" for h in head))
    for n, load in results:
        above = (load.cpu_s - idle.cpu_s * load.wall / idle.wall) / load.wall * 1000  # per second = per tick
        cells = (str(n), str(len(load.latencies)), str(load.timeouts), f"{load.pct(50):.1f}", f"{load.pct(99):.1f}",
                 f"{load.pct(100):.1f}", f"{load.core_pct:.2f}", f"{above:.1f}", f"{above / floor_ms:.2f}")
        print("  ".join(f"{c:>{max(len(h), 8)}}" for c, h in zip(cells, head, strict=True)))
    bad = [load for _, load in results if load.errors]
    for load in bad:
        print(f"errors: {load.errors[:3]}")
    return 1 if bad else 0



class Load:
    """n scrapers against the agent for a window: latencies (ms), timeouts, errors, and the agent's CPU meanwhile."""

    TIMEOUT = 10.0

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.timeouts = 0
        self.errors: list[str] = []
        self.cpu_s = self.wall = 0.0
        self._lock = threading.Lock()

    @property
    def core_pct(self) -> float:
        return 100 * self.cpu_s / self.wall

    def pct(self, p: float) -> float:
        ordered = sorted(self.latencies)
        if not ordered:
            return float("nan")
        return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))]

    @classmethod
    def run(cls, agent: psutil.Process, port: int, n: int, period: float, window: float) -> Load:
        load = cls()
        start = time.monotonic() + 0.2
        threads = [threading.Thread(target=load._scraper, args=(port, start, period, window)) for _ in range(n)]
        for t in threads:
            t.start()
        time.sleep(max(start - time.monotonic(), 0))
        cpu0 = agent.cpu_times()
        time.sleep(window)
        cpu1 = agent.cpu_times()
        load.wall = time.monotonic() - start
        load.cpu_s = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
        for t in threads:
            t.join()
        return load

    def _scraper(self, port: int, start: float, period: float, window: float) -> None:
        next_at, checked = start, False
        while next_at < start + window:
            time.sleep(max(next_at - time.monotonic(), 0))
            t0 = time.perf_counter()
            try:
                status, raw, encoding = scrape_compare.get_metrics(port, self.TIMEOUT)
                ms = 1000 * (time.perf_counter() - t0)
                if status != 200:
                    raise OSError(f"HTTP {status}")
                if not checked:  # once per scraper: the body is whole (gzip or not)
                    text = gzip.decompress(raw) if encoding == "gzip" else raw
                    if not text.endswith(b"\n") or b"koordlet_container_cpu_usage_seconds_total{" not in text:
                        raise OSError("incomplete exposition")
                    checked = True
                with self._lock:
                    self.latencies.append(ms)
            except TimeoutError:
                with self._lock:
                    self.timeouts += 1
            except OSError as e:
                with self._lock:
                    self.errors.append(str(e))
            next_at = max(next_at + period, time.monotonic())


if __name__ == "__main__":
    raise SystemExit(main())
