"""Agent memory under pod churn on real cgroups (v1): RSS after warm-up, at 2 000 and at 10 000 add/delete cycles.

In-process, as the daemon's loops run it: each cycle replaces the oldest pod as kubelet does (its cgroup dirs go
first, so the agent lists it once more without them, its manifest the cycle after; the new pod has a new name, UID
and container ids), then runs a pod sync of the pods dir, a collection tick, a QoS pass with the colocation
features writing (CPU QoS, memory QoS, BE CPU suppress, CPU burst, BatchResource, CPUSetAllocator), a round of the
BE eviction strategies, the NodeResourceTopology and a render of /metrics; every simulated minute the metric
cache's GC, a NodeMetric build, a prediction training round and the models' GC and checkpoints. Time is simulated
(a second a cycle by default: one pod replaced every second, and pods' series and models age out as in a daemon);
the files are real. The floor is the steady RSS: the same node after the warm-up cycles without churn. RSS at a
mark is the highest over the simulated minute before it (one whole GC period, so marks compare alike). The run is
sized to take a few minutes: a small node, 4 pods of one container (`--pods`/`--containers` for more).
"""

from __future__ import annotations

import argparse
import copy
import gc
import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

from benchmarks import qos_reconcile
from benchmarks.collection import SUBSYSTEMS, add_pod, bench_node, have_real_cgroups, print_table
from koordlet.agent import Agent
from koordlet.config import Config, parse_feature_gates
from koordlet.host.cgtree import CgroupTree
from koordlet.host.paths import HostPaths
from koordlet.prediction.server import PredictionConfig

GATES = "CgroupReconcile=true,BECPUEvict=true,BEMemoryEvict=true,NodeMetricPromMetrics=true,CPUSchedLatency=true"
MARKS = (2000, 10_000)
TARGET_GROWTH_MIB = 2.0  # RSS at 10 000 cycles over RSS at 2 000: flat, give or take the allocator


def nodeslo() -> dict[str, Any]:
    """The NodeSLO of benchmarks.qos_reconcile's colocation run: every QoS feature plans for every pod."""
    obj = copy.deepcopy(qos_reconcile.NODESLO)
    qos = obj["spec"]["resourceQOSStrategy"]
    for cls in ("lsrClass", "lsClass", "beClass"):
        qos[cls]["memoryQOS"] = dict(qos_reconcile.MEMORY_QOS)
    obj["spec"] = {**obj["spec"], **copy.deepcopy(qos_reconcile.COLOCATION)}
    return obj


class ChurnNode:
    """`n_pods` real-cgroup pods (every other one BE, every tenth LSR) and an agent over them; `cycle()` replaces
    the oldest pod and runs one round of the agent's work, `step` simulated seconds later than the last."""

    def __init__(self, paths: HostPaths, pods_dir: Path, state_dir: Path, n_pods: int, n_ctrs: int, *,
                 gates: str = GATES, step: float = 1.0, gc_every: int = 60, render_every: int = 1,
                 prediction: PredictionConfig | None = None) -> None:
        self.pods_dir, self.n_ctrs = pods_dir, n_ctrs
        self.step, self.gc_every, self.render_every = step, gc_every, render_every
        self.root = Path(paths.cgroup_root)
        self.subsystems = (*SUBSYSTEMS, "cpuset")
        for qos_dir in ("besteffort", "burstable"):  # the QoS dirs the planners address
            for sub in self.subsystems:
                (self.root / sub / "kubepods" / qos_dir).mkdir(parents=True, exist_ok=True)
        self.lsr_cpu = max(os.sched_getaffinity(0))
        self.live: list[tuple[int, CgroupTree]] = []
        self.next = 0
        self.dying: str | None = None  # the manifest of the pod whose dirs went last cycle
        self.dying_tree: CgroupTree | None = None
        for _ in range(n_pods):
            self._add()
        self.agent = Agent(Config(node_name="churn", paths=paths, pods_dir=str(pods_dir), state_dir=str(state_dir),
                                  feature_gates=parse_feature_gates(gates),
                                  prediction=prediction or PredictionConfig()))
        self.now = time.time()
        self.mono_ns = time.monotonic_ns()
        self.cycles = 0
        self.agent.sync_pods()
        self.agent.collect(self.now, self.mono_ns)
        self.agent.set_nodeslo(nodeslo())
        self.qos = self.agent.qos_manager()
        self.rendered = b""  # the last /metrics render

    def _add(self) -> None:
        j = self.next
        self.next += 1
        tree = CgroupTree(self.root, 1, self.subsystems)
        be = j % 2 == 0
        add_pod(tree, self.pods_dir, j, self.n_ctrs, be=be, lsr=not be and j % 10 == 1, colocation=True,
                lsr_cpu=self.lsr_cpu, manifest="json")
        self.live.append((j, tree))

    def churn(self) -> None:
        """Replace the oldest pod as kubelet does: its cgroup dirs go first (the agent then lists it one more cycle
        without them), its manifest the cycle after; a new pod comes with its dirs and manifest."""
        if self.dying is not None:
            (self.pods_dir / self.dying).unlink()
        i, tree = self.live.pop(0)
        tree.remove()
        self.dying = f"pod-{i}.json"
        self._add()

    def work(self) -> None:
        """One round of everything the daemon's loops do with pods."""
        agent = self.agent
        self.now += self.step
        self.mono_ns += int(self.step * 1e9)
        self.cycles += 1
        agent.sync_pods()
        agent.collect(self.now, self.mono_ns)
        self.qos.reconcile(agent.qos_state())
        for strategy in agent.evict_strategies:
            strategy.plan(agent.qos_state(), int(self.now * 1000), ignore_cool_down=True)
        agent.write_nrt(agent.nrt_status())
        if self.cycles % self.render_every == 0:
            self.rendered = agent.metrics.render()
        if self.cycles % self.gc_every == 0:
            agent.gc(self.now)
            agent.build_nodemetric(self.now)
            agent.train_prediction(self.now)
            agent.checkpoint_prediction(self.now)

    def cycle(self) -> None:
        self.churn()
        self.work()

    def close(self) -> None:
        self.agent.close()
        for _, tree in self.live:
            tree.remove()


@contextmanager
def churn_node(n_pods: int, n_ctrs: int, **options: Any) -> Iterator[ChurnNode]:
    """A ChurnNode on a kubepods tree of real v1 cgroups (benchmarks.collection.bench_node), removed afterwards."""
    with bench_node(0, n_ctrs, colocation=True) as (paths, pods_dir, tmp):
        node = ChurnNode(paths, pods_dir, tmp / "state", n_pods, n_ctrs, **options)
        try:
            yield node
        finally:
            node.close()


def rss_mib() -> float:
    gc.collect()
    return float(psutil.Process().memory_info().rss) / (1 << 20)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pods", type=int, default=4)
    ap.add_argument("--containers", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=600, help="cycles without churn before the floor is read")
    ap.add_argument("--cycles", type=int, default=MARKS[-1])
    args = ap.parse_args()
    if not have_real_cgroups():
        return 2
    logging.disable(logging.WARNING)  # each churned pod's cgroup goes before the pod does: a line per pod, expected
    marks = sorted({m for m in MARKS if m < args.cycles} | {args.cycles})
    started = time.monotonic()
    with churn_node(args.pods, args.containers) as node:
        for _ in range(args.warmup):
            node.work()
        steady = rss_mib()
        rss: dict[int, float] = {}
        for n in range(1, args.cycles + 1):
            node.cycle()
            # the highest RSS over the simulated minute before a mark: every mark sees one whole GC period
            if any(m - node.gc_every < n <= m for m in marks):
                mark = next(m for m in marks if m - node.gc_every < n <= m)
                rss[mark] = max(rss.get(mark, 0.0), psutil.Process().memory_info().rss / (1 << 20))
        cache = node.agent.cache
        series = f"{cache.series_count()} / {cache.sample_count()}"
    wall = time.monotonic() - started
    rows = [("pods × containers, one replaced a (simulated) second", f"{args.pods} × {args.containers}", "", ""),
            (f"RSS after {args.warmup} cycles without churn (MiB): the floor", f"{steady:.1f}", "", "")]
    rows += [(f"RSS after {n} churn cycles, highest over its last minute (MiB)", f"{v:.1f}", "", "")
             for n, v in rss.items()]
    if len(rss) >= 2:
        first, last = marks[0], marks[-1]
        growth = rss[last] - rss[first]
        rows.append((f"RSS growth from {first} to {last} cycles (MiB)", f"{growth:+.1f}", f"≤ {TARGET_GROWTH_MIB:g}",
                     "ok" if growth <= TARGET_GROWTH_MIB else "MISS"))
    rows += [("metric-cache series / samples at the end", series, "", ""), ("wall time (s)", f"{wall:.0f}", "", "")]
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
