"""Cost of one Prometheus scrape at N pods × M containers, with and without the per-pod usage series.

No cgroups needed: the advisor's latest sample is filled in memory (what a scrape reads), so this measures only
family building and text rendering: with the per-pod usage series through prometheus_client's generate_latest
and through the exporter's renderer, and without usage samples (requests, limits, health and process families:
what the exporter had before the per-pod series).
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable

from prometheus_client import generate_latest

from koordlet.collectors.advisor import Latest
from koordlet.collectors.cgroups import CgroupUsage
from koordlet.exporter import AgentMetrics
from koordlet.health import Health
from koordlet.metriccache import MetricCache
from koordlet.states.model import ContainerMeta, PodMeta


def fill(latest: Latest, n_pods: int, n_ctrs: int) -> None:
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
        usage[("pod", uid)] = CgroupUsage(0.25 * n_ctrs, 300 << 20, 400 << 20, 0.1)
        for c in ctrs:
            usage[("container", c.container_id)] = CgroupUsage(0.25, 100 << 20, 130 << 20, 0.1)
    latest.pods, latest.usage = pods, usage


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
    ap.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    ap.add_argument("--interval", type=float, default=15.0, help="scrape interval for the %% of a core")
    args = ap.parse_args()

    latest = Latest()
    fill(latest, args.pods, args.containers)
    m = AgentMetrics("bench-node", Health(), latest, MetricCache(lambda _: 300.0))
    rows = [("with usage, generate_latest", per_scrape_ms(
        lambda: generate_latest(m.internal) + generate_latest(m.external), args.seconds))]
    rows.append(("with usage", per_scrape_ms(m.render, args.seconds)))
    usage, latest.usage = latest.usage, {}
    rows.append(("without usage", per_scrape_ms(m.render, args.seconds)))
    latest.usage = usage

    print(f"one scrape of /metrics, {args.pods} pods × {args.containers} containers")
    w = max(len(r[0]) for r in rows)
    print(f"{'':<{w}}  {'CPU ms':>7}  {'% core':>7}  {'KiB':>5}")
    for label, (ms, size) in rows:
        print(f"{label:<{w}}  {ms:>7.1f}  {ms / args.interval / 10:>7.3f}  {size / 1024:>5.0f}")
    print(f"(% of one core at one scrape every {args.interval:g} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
