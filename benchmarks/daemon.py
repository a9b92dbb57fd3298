"""The real `koordlet run` on N pods × M containers of real cgroups (v1), for a measured window.

Two configurations, one after the other in the same run: today's (upstream's default gates, no NodeSLO) and
Koordinator's own chart's (benchmarks/chart.py: its container args where they apply to a standalone run, its
`-feature-gates` and `--v=4`, and the NodeSLO koord-manager writes from the chart's slo-controller-config, as a
file: CPU suppress at 65 %, BE memory evict at 70 %, CgroupReconcile), on a node shaped for the colocation guards
(BE pods with batch resources, LS pods with CPU limits, the cpuset hierarchy). Each prints the daemon's CPU as % of
one core, its RSS, the per-loop CPU split (from its own `koordlet_agent_loop_cpu_seconds_total`), and beside the
collection tick the floor measured in the same run: the CPU of one `pread` of every file the ticks read (the pods'
every second, each container's every 10 s, spread over the ticks), through descriptors kept open, as the tick itself
does. CPU time, not wall time, on both sides: a busy machine stretches
wall time, not the work done.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import IO

import psutil
import yaml

from benchmarks import calibration, chart
from benchmarks.collection import bench_node, have_real_cgroups, print_table, tick_schedule
from demo.processes import stop, wait_answering
from koordlet.collectors.cgroups import CONTAINER_INTERVAL_SECONDS
from koordlet.health import Health
from koordlet.host.cgroup import CgroupV1
from koordlet.host.driver import CgroupDriver
from koordlet.host.paths import HostPaths
from koordlet.states.pods import PodsDirSource, PodState

_LOOP_SERIES = re.compile(r'^koordlet_agent_loop_(duration_seconds_count|cpu_seconds_total)\{loop="([^"]+)"\} (\S+)$',
                          re.M)
CPU_TARGET, RATIO_TARGET, RSS_TARGET = 2.0, 1.5, 120.0


def _daemonset_rows(core_pct: float, rss_mib: float) -> list[tuple[str, str, str, str]]:
    """deploy/daemonset.yaml's requests beside what this run measured: a request below the steady use starves the
    agent on a full node, one far above it reserves what the node's pods could use."""
    from apis.core.quantity import parse_quantity

    ds = yaml.safe_load((Path(__file__).resolve().parents[1] / "deploy" / "daemonset.yaml").read_text())
    res = ds["spec"]["template"]["spec"]["containers"][0]["resources"]
    cpu_m = 1000 * float(parse_quantity(str(res["requests"]["cpu"])))
    mem_mib = float(parse_quantity(str(res["requests"]["memory"]))) / (1 << 20)
    limit_mib = float(parse_quantity(str(res["limits"]["memory"]))) / (1 << 20)
    return [
        ("DaemonSet cpu request (m) vs measured", f"{cpu_m:.0f} vs {10 * core_pct:.1f}", "≥ measured",
         "ok" if cpu_m >= 10 * core_pct else "MISS"),
        ("DaemonSet memory request (MiB) vs RSS", f"{mem_mib:.0f} vs {rss_mib:.0f}", "≥ RSS",
         "ok" if mem_mib >= rss_mib else "MISS"),
        ("DaemonSet memory limit (MiB) vs RSS", f"{limit_mib:.0f} vs {rss_mib:.0f}", "≥ RSS + eBPF loader 115",
         "ok" if limit_mib >= rss_mib + 115 else "MISS"),
    ]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _loops(port: int) -> dict[str, tuple[float, float]]:
    """loop → (CPU seconds of the loop thread, runs) so far, from the daemon's own metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out: dict[str, list[float]] = {}
    for kind, loop, value in _LOOP_SERIES.findall(text):
        out.setdefault(loop, [0.0, 0.0])[0 if kind.startswith("cpu") else 1] = float(value)
    return {k: (v[0], v[1]) for k, v in out.items()}


def wait_ready(port: int, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    wait_answering(f"http://127.0.0.1:{port}/readyz", proc, "koordlet", timeout, interval=0.5)


def stop_agent(proc: subprocess.Popen[bytes], log: IO[bytes]) -> None:
    """SIGTERM the agent, wait for it (a kill after 30 s), then close its log."""
    stop(proc, timeout=30)
    log.close()


def tick_files(paths: HostPaths, pods_dir: Path, stride: int) -> list[list[str]]:
    """The files the collection ticks read (benchmarks.collection.tick_schedule) for the pods in `pods_dir`."""
    state = PodState(CgroupDriver.CGROUPFS, Health())
    state.update(PodsDirSource(str(pods_dir), Health()).list_pods())
    return tick_schedule(CgroupV1(paths), state.pods, stride, (paths.proc("stat"), paths.proc("meminfo")))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pods", type=int, default=250)
    ap.add_argument("--containers", type=int, default=3)
    ap.add_argument("--warmup", type=float, default=15.0, help="seconds before the window (first report included)")
    ap.add_argument("--duration", type=float, default=60.0, help="seconds measured")
    ap.add_argument("--config", choices=("both", "today", "chart"), default="both",
                    help="which configuration(s) to run")
    args = ap.parse_args()
    if not have_real_cgroups():
        return 2
    print(calibration.line())
    measured: dict[str, tuple[float, float]] = {}
    if args.config in ("both", "today"):
        print("today's configuration: upstream's default gates, no NodeSLO")
        with bench_node(args.pods, args.containers, be_every=5) as (paths, pods_dir, tmp):
            measured["today"] = run(args, paths, pods_dir, tmp, [])
    if args.config in ("both", "chart"):
        print(f"\nKoordinator's chart: -feature-gates={chart.GATES} --v=4, its NodeSLO (spec dropin.md §d.1), "
              "a colocation-shaped node")
        with bench_node(args.pods, args.containers, be_every=5, colocation=True) as (paths, pods_dir, tmp):
            nodeslo = tmp / "nodeslo.yaml"
            nodeslo.write_text(yaml.safe_dump(chart.nodeslo("bench")))
            measured["chart"] = run(args, paths, pods_dir, tmp, [
                f"-feature-gates={chart.GATES}", f"--nodeslo={nodeslo}",
                f"-runtime-hooks-host-endpoint={tmp / 'koordlet.sock'}", "--logtostderr=true", "--v=4"])
    if len(measured) == 2:  # machines differ 2-3× in speed: the same run's ratios travel, the absolute % does not
        (today, today_floor), (charted, chart_floor) = measured["today"], measured["chart"]
        print("\nthe two, same run")
        print_table([
            ("chart / today's daemon CPU", f"{charted / today:.2f}", "", ""),
            ("daemon CPU (% of a core) per ms of pread floor, today / chart",
             f"{today / today_floor:.3f} / {charted / chart_floor:.3f}", "", ""),
        ], value_width=16)
    return 0


def run(args: argparse.Namespace, paths: HostPaths, pods_dir: Path, tmp: Path,
        extra: list[str]) -> tuple[float, float]:
    """One configuration's table; returns (daemon CPU as % of one core, the pread floor in ms)."""
    port = free_port()
    cmd = [sys.executable, "-m", "koordlet", "run", "--host-root", "/", "--cgroup-root-dir", paths.cgroup_root,
           "--pods-dir", str(pods_dir), "--state-dir", str(tmp / "state"), "--node-name", "bench",
           "--addr", f"127.0.0.1:{port}", *extra]
    log = open(tmp / "koordlet.log", "wb")  # noqa: SIM115 - closed below, after the process
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    opened: dict[str, int] = {}
    try:
        wait_ready(port, proc)
        time.sleep(args.warmup)
        stride = round(CONTAINER_INTERVAL_SECONDS)  # the daemon's collection interval is 1 s
        schedule = tick_files(paths, pods_dir, stride)
        opened = {f: os.open(f, os.O_RDONLY | os.O_CLOEXEC) for files in schedule for f in files}
        due = [[opened[f] for f in files] for files in schedule]
        files = sum(map(len, due)) / stride
        ps = psutil.Process(proc.pid)
        loops0, cpu0, wall0 = _loops(port), ps.cpu_times(), time.monotonic()
        floor, floor_n = 0.0, 0
        next_at = wall0 + 0.5  # half a period away from the daemon's ticks
        while time.monotonic() - wall0 < args.duration:
            time.sleep(max(next_at - time.monotonic(), 0))
            t = time.process_time()
            for fd in due[floor_n % stride]:
                os.pread(fd, 65536, 0)
            floor += time.process_time() - t
            floor_n += 1
            next_at += 1.0
        cpu1, wall1, loops1 = ps.cpu_times(), time.monotonic(), _loops(port)
        rss = ps.memory_info().rss / (1 << 20)
        open_fds = ps.num_fds()
    finally:
        for fd in opened.values():
            os.close(fd)
        stop_agent(proc, log)
    wall = wall1 - wall0
    cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    core_pct = 100 * cpu / wall
    floor_ms = 1000 * floor / max(floor_n, 1)
    rows = [
        ("pods × containers", f"{args.pods} × {args.containers}", "", ""),
        ("files read per collection tick (pods every tick, containers every "
         f"{CONTAINER_INTERVAL_SECONDS:g} s)", f"{files:.0f}", "", ""),
        ("daemon descriptors open", str(open_fds), "", ""),
        (f"daemon CPU over {wall:.0f} s, % of one core", f"{core_pct:.2f}", f"≤ {CPU_TARGET:g}",
         "ok" if core_pct <= CPU_TARGET else "MISS"),
        ("daemon RSS (MiB)", f"{rss:.1f}", f"≤ {RSS_TARGET:g}", "ok" if rss <= RSS_TARGET else "MISS"),
        *_daemonset_rows(core_pct, rss),
        ("floor: CPU of pread of the tick's files (ms)", f"{floor_ms:.2f}", "", ""),
    ]
    ratio = None
    for loop in sorted(loops1):
        secs = loops1[loop][0] - loops0.get(loop, (0.0, 0.0))[0]
        runs = loops1[loop][1] - loops0.get(loop, (0.0, 0.0))[1]
        if runs <= 0:
            continue
        per_run = 1000 * secs / runs
        rows.append((f"loop {loop}: CPU ms per run × runs", f"{per_run:.2f} × {runs:.0f}", "", ""))
        rows.append((f"loop {loop}: % of one core", f"{100 * secs / wall:.3f}", "", ""))
        if loop == "collect":
            ratio = per_run / floor_ms if floor_ms else float("inf")
    if ratio is not None:
        rows.append(("collection tick / pread floor", f"{ratio:.2f}", f"≤ {RATIO_TARGET:g}",
                     "ok" if ratio <= RATIO_TARGET else "MISS"))
    print_table(rows, value_width=16)
    return core_pct, floor_ms


if __name__ == "__main__":
    sys.exit(main())
