"""Scrape cost of the agent on a bundled GPU snapshot node with N pods × M containers of real cgroups, beside Debian's
node_exporter (default collectors) scraping the same host, in the same run.

Both run side by side. First an idle window (no scraper) gives each process's own CPU rate; then one scraper (a
thread of this process, as Prometheus: one scrape at a time, `Accept-Encoding: gzip`) scrapes each target the same
number of times, alternating between them, every `--period` seconds — longer than the agent's 1 s collection tick,
so each of its scrapes renders anew, as at Prometheus' 15–30 s. Per target: CPU per scrape (its CPU over the scrape
window minus its idle rate over the same wall time, ÷ scrapes), the same per 1000 series, bytes (gzip and plain)
and series per scrape, wall p50/p99, and the agent ÷ node_exporter ratio of CPU per scrape. Both exports are broken
down by family group, so the ratio reads against what each one serves.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import subprocess
import sys
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from benchmarks import calibration, node_exporter
from benchmarks.collection import bench_node, have_real_cgroups
from benchmarks.daemon import free_port, stop_agent, wait_ready
from koordlet.devices.rdma_stats import read_infiniband
from koordlet.host.paths import HostPaths

NODES = Path(__file__).resolve().parents[1] / "examples" / "nodes"
# h100-hgx-smi: 8 H100s with the richest bundled NVML telemetry (no NICs); l20-pcie: 8 L20s without telemetry reads
# but 4 ConnectX NICs with 32 VFs (36 RDMA ports). Each has its own agent, both on the same cgroups.
DEFAULT_NODES = ["h100-hgx-smi", "l20-pcie"]
SCRAPE_INTERVAL = 15.0  # Prometheus' usual scrape interval, for the whole-cost column
GATES = "Accelerators=true,RDMADevices=true"
# series name prefix → group, first match wins (the agent's, then node_exporter's)
GROUPS = (("koordlet_gpu_", "GPU"), ("koordlet_rdma_", "RDMA"), ("koordlet_pod_", "pod/container"),
          ("koordlet_container_", "pod/container"), ("node_", "node_* collectors"), ("go_", "go/process/promhttp"),
          ("process_", "go/process/promhttp"), ("promhttp_", "go/process/promhttp"))


@dataclass
class Target:
    """One scrape target and what was measured of it."""

    name: str
    proc: psutil.Process
    port: int
    idle_cpu_s: float = 0.0
    idle_wall: float = 0.0
    cpu_s: float = 0.0
    wall: float = 0.0
    latencies: list[float] = field(default_factory=list)
    gz_bytes: list[int] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)  # plain text of the first and the last scrape
    errors: list[str] = field(default_factory=list)

    def cpu(self) -> float:
        t = self.proc.cpu_times()
        return float(t.user + t.system)

    @property
    def cpu_ms_per_scrape(self) -> float:
        above = self.cpu_s - self.idle_cpu_s * self.wall / self.idle_wall
        return 1000 * above / max(len(self.latencies), 1)

    def pct(self, p: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))] if ordered else float("nan")


def sample_lines(text: bytes) -> list[bytes]:
    return [ln for ln in text.split(b"\n") if ln and not ln.startswith(b"#")]


def groups(text: bytes) -> Counter[str]:
    """Series of an exposition by family group (GROUPS; anything else is "other")."""
    out: Counter[str] = Counter()
    for ln in sample_lines(text):
        name = ln.split(b"{", 1)[0].split(b" ", 1)[0].decode()
        out[next((g for prefix, g in GROUPS if name.startswith(prefix)), "other")] += 1
    return out


def get_metrics(port: int, timeout: float) -> tuple[int, bytes, str | None]:
    """One GET /metrics asking gzip, as Prometheus does: (status, body as sent, its Content-Encoding)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"})
        r = conn.getresponse()
        return r.status, r.read(), r.getheader("Content-Encoding")
    finally:
        conn.close()


def scrape(target: Target, keep: bool) -> None:
    t0 = time.perf_counter()
    try:
        status, raw, encoding = get_metrics(target.port, 10.0)
        target.latencies.append(1000 * (time.perf_counter() - t0))
        if status != 200:
            raise OSError(f"HTTP {status}")
        target.gz_bytes.append(len(raw))
        if keep:
            target.bodies.append(gzip.decompress(raw) if encoding == "gzip" else raw)
    except OSError as e:
        target.errors.append(f"{target.name}: {e}")


def measure(targets: list[Target], scrapes: int, period: float) -> None:
    """An idle window, then `scrapes` scrapes of each target, the targets spread evenly over each period."""
    window = scrapes * period
    cpu0 = [t.cpu() for t in targets]
    start = time.monotonic()
    time.sleep(window)
    for t, c in zip(targets, cpu0, strict=True):
        t.idle_cpu_s, t.idle_wall = t.cpu() - c, time.monotonic() - start
    cpu0 = [t.cpu() for t in targets]
    start = time.monotonic()
    for i in range(scrapes):
        for k, t in enumerate(targets):
            time.sleep(max(start + (i + k / len(targets)) * period - time.monotonic(), 0))
            scrape(t, keep=i in (0, scrapes - 1))
    time.sleep(max(start + window - time.monotonic(), 0))
    for t, c in zip(targets, cpu0, strict=True):
        t.cpu_s, t.wall = t.cpu() - c, time.monotonic() - start


def agent_cmd(node: Path, cgroup_root: str, pods_dir: Path, tmp: Path, port: int) -> list[str]:
    """`koordlet run` on the simulated GPU node's sysfs and NVML snapshot with this host's /proc and the bench's real
    cgroups (as tests/devices/test_gpu_telemetry_run.py starts it, at the default 1 s collection interval)."""
    for d in ("vr", "kl", "state"):
        (tmp / d).mkdir(exist_ok=True)
    return [sys.executable, "-m", "koordlet", "run", f"--sys-root-dir={node / 'sys'}/",
            f"--cgroup-root-dir={cgroup_root}", "--sys-fs-root-dir=/sys/fs/", "--proc-root-dir=/proc/",
            "--run-root-dir=/run/", f"--var-run-root-dir={tmp / 'vr'}/", f"--var-lib-kubelet-dir={tmp / 'kl'}/",
            "--enable-nri-runtime-hook=false", f"--nvml-snapshot={node / 'nvml-snapshot.json'}",
            f"--pods-dir={pods_dir}", "--node-name=bench", f"--state-dir={tmp / 'state'}",
            f"--addr=127.0.0.1:{port}", f"--feature-gates={GATES}"]


def settle(proc: psutil.Process, timeout: float = 90.0) -> None:
    """Past the agent's start-up: its children (bcc compiling the run-queue program) gone, then its first ticks."""
    deadline = time.monotonic() + timeout
    while proc.children() and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(3.0)


def compare(args: argparse.Namespace, cgroup_root: str, pods_dir: Path, tmp: Path) -> int:
    """The comparison on an already built bench node (benchmarks.scrape calls this inside its own)."""
    binary = node_exporter.find()
    with ExitStack() as stack:
        targets = [start_agent(stack, name, cgroup_root, pods_dir, tmp / name) for name in args.gpu_nodes]
        if args.baseline is not None:  # the same nodes with an earlier checkout's agent: before/after, same run
            targets += [start_agent(stack, name, cgroup_root, pods_dir, tmp / f"baseline-{name}", args.baseline)
                        for name in args.gpu_nodes]
        for t in targets:
            settle(t.proc)
        if binary is None:
            print("node_exporter not installed (Debian's prometheus-node-exporter; scripts/install.sh dev installs "
                  "it): the agent alone")
        else:
            port = free_port()
            ne = stack.enter_context(node_exporter.running(binary, port))
            targets.append(Target("node_exporter", psutil.Process(ne.pid), port))
            time.sleep(1.0)
        measure(targets, args.compare_scrapes, args.compare_period)
    report(args, targets)
    errors = [e for t in targets for e in t.errors]
    for e in errors[:3]:
        print(f"error: {e}")
    return 1 if errors else 0


def start_agent(stack: ExitStack, node: str, cgroup_root: str, pods_dir: Path, tmp: Path,
                checkout: Path | None = None) -> Target:
    """`koordlet run` on GPU node `node` (from `checkout`, a koordlet source tree, if given), ready, stopped when
    `stack` closes."""
    tmp.mkdir(parents=True)
    port = free_port()
    log = open(tmp / "koordlet.log", "wb")  # noqa: SIM115 - closed by stop_agent
    proc = subprocess.Popen(agent_cmd(NODES / node, cgroup_root, pods_dir, tmp, port), stdout=log,
                            stderr=subprocess.STDOUT, cwd=checkout)
    stack.callback(stop_agent, proc, log)
    wait_ready(port, proc)
    return Target(f"{'baseline' if checkout else 'koordlet'} {node}", psutil.Process(proc.pid), port)


def rdma_read_ms(node: str, seconds: float = 1.0) -> tuple[int, float] | None:
    """(ports, CPU ms) of one read of `node`'s InfiniBand sysfs tree, in-process: what a scrape pays on top when
    the agent's last RDMA read is 5 s old or more (always at Prometheus' 15 s); None when the node has no RDMA."""
    paths = HostPaths.under("/").with_overrides(sys_root=f"{NODES / node / 'sys'}/")
    devices = read_infiniband(paths)
    if not devices:
        return None
    n, start, wall = 0, time.process_time(), time.perf_counter()
    while time.perf_counter() - wall < seconds:
        read_infiniband(paths)
        n += 1
    return sum(len(d.ports) for d in devices), 1000 * (time.process_time() - start) / n


def report(args: argparse.Namespace, targets: list[Target]) -> None:
    has_ne = targets[-1].name == "node_exporter"
    beside = ", beside node_exporter (default collectors) on the same host" if has_ne else ""
    print(f"\none scrape at {args.pods} pods × {args.containers} containers of real cgroups: the agent on bundled GPU "
          f"snapshot nodes (gates {GATES}){beside}, side by side; {args.compare_scrapes} scrapes of each, one every "
          f"{args.compare_period:g} s, alternating, gzip")
    print(calibration.line())
    head = ("target", "series", "KiB gzip", "KiB plain", "CPU ms/scrape", "ms/1000 series", "idle % core",
            f"% core, {SCRAPE_INTERVAL:g} s scrapes", "p50 ms", f"p99 ms (of {args.compare_scrapes})")
    rows = []
    for t in targets:
        n = len(sample_lines(t.bodies[-1])) if t.bodies else 0
        plain = len(t.bodies[-1]) if t.bodies else 0
        gz = sum(t.gz_bytes) / max(len(t.gz_bytes), 1)
        idle = t.idle_cpu_s / t.idle_wall
        rows.append((t.name, str(n), f"{gz / 1024:.0f}", f"{plain / 1024:.0f}", f"{t.cpu_ms_per_scrape:.1f}",
                     f"{1000 * t.cpu_ms_per_scrape / max(n, 1):.2f}", f"{100 * idle:.2f}",
                     f"{100 * idle + t.cpu_ms_per_scrape / SCRAPE_INTERVAL / 10:.2f}",
                     f"{t.pct(50):.1f}", f"{t.pct(99):.1f}"))
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    for r in (head, *rows):
        print("  ".join(f"{c:<{w}}" if i == 0 else f"{c:>{w}}" for i, (c, w) in enumerate(zip(r, widths, strict=True))))
    ne = targets[-1] if targets[-1].name == "node_exporter" else None
    if ne is not None and ne.cpu_ms_per_scrape > 0:
        for a in targets[:-1]:
            print(f"{a.name} ÷ node_exporter: CPU per scrape {a.cpu_ms_per_scrape / ne.cpu_ms_per_scrape:.1f}×, "
                  f"p50 wall {a.pct(50) / ne.pct(50):.1f}×")
    before_after(targets)
    for t in targets:
        if t.bodies:
            parts = ", ".join(f"{g} {c}" for g, c in groups(t.bodies[-1]).most_common())
            print(f"{t.name} exports: {parts}")
    print(f"(idle: the process's own CPU with no scraper; the agent collects on its 1 s tick, node_exporter on the "
          f"scrape, so `% core, {SCRAPE_INTERVAL:g} s scrapes` is the whole cost of each at that interval)")
    for node in args.gpu_nodes:
        rdma = rdma_read_ms(node)
        if rdma is not None:
            print(f"{node}: its RDMA sysfs read ({rdma[0]} ports) is made by a scrape at most every 5 s, {rdma[1]:.1f} "
                  f"CPU ms in-process: add it to that row's CPU/scrape for scrapes 5 s or more apart")


def series_and_headers(text: bytes) -> tuple[list[bytes], list[bytes]]:
    """An exposition's series (name and labels, no value) and its HELP/TYPE lines, sorted."""
    lines = text.split(b"\n")
    return (sorted(ln.rsplit(b" ", 1)[0] for ln in lines if ln and not ln.startswith(b"#")),
            sorted(ln for ln in lines if ln.startswith(b"#")))


def before_after(targets: list[Target]) -> None:
    """Each agent against the baseline checkout's on the same node (--baseline): CPU per scrape, and whether both
    serve the same series and HELP/TYPE lines."""
    by_name = {t.name: t for t in targets}
    for t in targets:
        base = by_name.get(t.name.replace("koordlet ", "baseline ", 1)) if t.name.startswith("koordlet ") else None
        if base is None or not t.bodies or not base.bodies:
            continue
        mine, theirs = ({*series, *headers} for series, headers in (series_and_headers(x.bodies[-1])
                                                                     for x in (t, base)))
        print(f"{t.name} ÷ baseline: CPU per scrape {t.cpu_ms_per_scrape / base.cpu_ms_per_scrape:.2f}× "
              f"({base.cpu_ms_per_scrape:.1f} → {t.cpu_ms_per_scrape:.1f} ms); same series and HELP/TYPE lines: "
              f"{'yes' if mine == theirs else 'NO'}")
        for label, lines in (("only here", mine - theirs), ("only in the baseline", theirs - mine)):
            if lines:  # e.g. a loop's first run seen by one agent and not yet by the other
                print(f"  {label}: " + ", ".join(ln.decode()[:100] for ln in sorted(lines)[:5]))


def gpu_nodes(text: str) -> list[str]:
    known = sorted(p.parent.name for p in NODES.glob("*/nvml-snapshot.json"))
    nodes = [n for n in text.split(",") if n]
    for n in nodes:
        if n not in known:
            raise argparse.ArgumentTypeError(f"{n!r} is not a bundled GPU snapshot node ({', '.join(known)})")
    return nodes


def checkout(text: str) -> Path:
    path = Path(text).resolve()
    if not (path / "koordlet" / "__main__.py").is_file():
        raise argparse.ArgumentTypeError(f"{text}: not a koordlet source tree (no koordlet/__main__.py)")
    return path


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--gpu-nodes", type=gpu_nodes, default=DEFAULT_NODES,
                    help="bundled GPU snapshot nodes (examples/nodes/), comma-separated: one agent on each")
    ap.add_argument("--compare-scrapes", type=int, default=20,
                    help="agent vs node_exporter: scrapes of each (the idle window lasts as long)")
    ap.add_argument("--baseline", type=checkout, default=None, metavar="DIR",
                    help="a koordlet source tree (e.g. a worktree of main): its agent on the same nodes too, in the "
                         "same run, for a before/after")
    ap.add_argument("--compare-period", type=float, default=1.2,
                    help="agent vs node_exporter: seconds between one target's scrapes (above the agent's 1 s tick, "
                         "so each scrape renders anew)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pods", type=int, default=250)
    ap.add_argument("--containers", type=int, default=3)
    add_arguments(ap)
    args = ap.parse_args()
    if not have_real_cgroups():
        return 2
    with bench_node(args.pods, args.containers) as (paths, pods_dir, tmp):
        return compare(args, paths.cgroup_root, pods_dir, tmp)


if __name__ == "__main__":
    raise SystemExit(main())
