"""Pod churn on real cgroups (issue #23, defect 5): what the agent keeps per pod follows the pods, memory stays flat.

Fault injected: pods replaced one a cycle as kubelet does (cgroup dirs removed first, so the agent lists the pod once
more without them, then its manifest), in-process through the pods-dir source, with every cycle running a pod sync,
a collection tick, a QoS pass with the colocation features writing, the eviction strategies, the NRT and a /metrics
render (benchmarks.churn.ChurnNode; the metric cache's GC, NodeMetric, prediction training and model GC every
simulated minute). 420 cycles of 3 pods, ten simulated seconds apart, so retention windows turn over many times.
"""

from __future__ import annotations

import gc
import logging
import os
import re
import statistics
import tracemalloc
from pathlib import Path

from benchmarks.churn import GATES, ChurnNode, churn_node
from benchmarks.collection import SUBSYSTEMS
from koordlet.prediction.server import PredictionConfig
from koordlet.qos.state import CGROUP_FILES

from conftest import require

_POD_LABEL = re.compile(rb'\b(?:pod_uid|uid)="([^"]*)"')
STEP = 10.0  # simulated seconds a cycle: retention (6 min) and model expiry (5 min) turn over every ~36 cycles
GC_EVERY = 6  # a simulated minute: the daemon's metric-cache GC, NodeMetric report and prediction rounds
WARMUP = 60  # untraced cycles: past the first retention (36 cycles) and model expiry (30)
CYCLES = 360  # traced cycles after the warm-up; the second half is judged
GROWTH_LIMIT = 256 << 10  # traced bytes the second half may gain (main's leaks gained MiBs)


def _sizes(node: ChurnNode) -> dict[str, int]:
    """Every structure that holds something per pod, container, cgroup file or series: its entry count."""
    agent, executor = node.agent, node.qos.executor
    frame_rows, frame_columns = agent.cache.frame().held()
    scaled = agent.qos_metrics.scaled
    return {
        "metric-cache series": agent.cache.series_count(),
        "metric-cache samples": agent.cache.sample_count(),
        "frame cells held": frame_rows * frame_columns,
        "QoS cgroup paths": len(CGROUP_FILES),
        "executor cached values": len(executor._cache),
        "executor file names": len(executor._names),
        "log-once keys": len(agent.health._once),
        "prediction models": len(agent.predict_server.models),
        "previous cgroup reads": agent.advisor.cgroups.remembered(),
        "cgroup descriptors": len(agent.advisor.cgroups.files),
        "CPU burst scaled values": sum(len(v) for v in scaled.values()),
        "QoS metric children": len(agent.qos_metrics._child._children),
        # pods named in /metrics (a gone pod's series kept would grow it); not its lines: families such as the CFS
        # counters appear only while some pod's quota has run, which comes and goes with the churned pods
        "pods in /metrics": len(set(_POD_LABEL.findall(node.rendered))),
        "pods-dir files": len(agent.pod_source._files) if agent.pod_source is not None else 0,
    }


def _theil_sen(xs: list[int], ys: list[int]) -> float:
    """The median of the pairwise slopes: a trend one noisy sample (a GC, a resize) cannot make."""
    return statistics.median((ys[j] - ys[i]) / (xs[j] - xs[i]) for i in range(len(xs)) for j in range(i + 1, len(xs)))


def _have_v1() -> bool:
    return os.geteuid() == 0 and all((Path("/sys/fs/cgroup") / s / "cgroup.procs").exists()
                                     for s in (*SUBSYSTEMS, "cpuset"))


def test_what_the_agent_keeps_per_pod_follows_the_pods_and_memory_stays_flat() -> None:
    """Pods replaced one a cycle: every per-pod structure returns to its steady size (the largest seen in the first
    half after warm-up is never exceeded in the second), and traced memory does not trend upward over the second
    half. Before the fix the QoS path cache, the executor's cached values, the log-once keys of gone pods' cgroups
    grew every cycle and the metric frame kept a column per gone series for the whole retention."""
    require(_have_v1(), "pod churn needs root and the cgroup v1 cpu, cpuacct, memory, blkio, cpuset hierarchies")
    gates = GATES.replace("CPUSchedLatency=true", "CPUSchedLatency=false")  # no bcc compile in a unit-sized test
    samples: list[tuple[int, dict[str, int], int]] = []
    with churn_node(3, 1, gates=gates, step=STEP, gc_every=GC_EVERY,
                    prediction=PredictionConfig(model_expiration_duration=300.0)) as node:
        for _ in range(WARMUP):
            node.cycle()
        logging.disable(logging.WARNING)  # each gone pod's cgroup is logged once: pytest would keep every record
        tracemalloc.start(1)
        try:
            for n in range(1, CYCLES + 1):
                node.cycle()
                if n % GC_EVERY == 0:  # right after the minute's GC: every sample at the same phase
                    gc.collect()  # what is garbage is not kept
                    samples.append((n, _sizes(node), tracemalloc.get_traced_memory()[0]))
        finally:
            tracemalloc.stop()
            logging.disable(logging.NOTSET)

    early = [s for s in samples if s[0] <= CYCLES // 2]
    late = [s for s in samples if s[0] > CYCLES // 2]
    steady = {k: max(s[1][k] for s in early) for k in early[0][1]}
    grown = {k: (steady[k], max(s[1][k] for s in late)) for k in steady if max(s[1][k] for s in late) > steady[k]}
    assert not grown, f"entries beyond their steady count (steady, later): {grown}"
    assert steady["executor cached values"] > 0 and steady["metric-cache series"] > 0  # the QoS pass wrote

    xs, ys = [s[0] for s in late], [s[2] for s in late]
    gained = _theil_sen(xs, ys) * (xs[-1] - xs[0])
    assert gained < GROWTH_LIMIT, f"traced memory trends upward: +{gained / 1024:.0f} KiB over the second half"

