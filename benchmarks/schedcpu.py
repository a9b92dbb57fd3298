"""One tree's koord-sched timed in CPU on the benchmarks' GPU cluster: per pod after `prepare()`, and a cold start
(`prepare()` plus the pods); prints one JSON object. Imports `scheduler` from the path it is started with, so
benchmarks.scheduler_filed runs it against an older commit's scheduler as well as this tree's."""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import json
import os
import statistics
import sys
import time
from typing import Any

import scheduler
from benchmarks import calibration
from benchmarks.gpucluster import KINDS, bench_pod, node_objects
from scheduler.cli import profile
from scheduler.cluster import build_cluster
from scheduler.framework import Scheduler


def _scheduler(cluster: Any) -> Any:
    """A Scheduler of the default profile; before #19 `profile()` answered a (filters, scorers, reservers) tuple."""
    chosen: Any = profile(None)
    return Scheduler(cluster, *chosen) if isinstance(chosen, tuple) else Scheduler(cluster, chosen)


def _thresholds() -> contextlib.AbstractContextManager[Any]:
    """The cyclic GC's thresholds `koord-sched run` schedules under in that tree (none before scheduler.gcpolicy)."""
    try:
        from scheduler.gcpolicy import scheduling_thresholds  # absent from older trees: this is the probe
    except ImportError:
        return contextlib.nullcontext()
    return scheduling_thresholds()


def one_run(objects: list[dict[str, Any]], kind: str, pods: int) -> dict[str, float]:
    """CPU seconds of prepare, of each pod, and of the whole cold start on a fresh cluster of `objects`."""
    cluster = build_cluster(copy.deepcopy(objects))
    sched = _scheduler(cluster)
    start = time.process_time()
    sched.prepare()
    prepare = time.process_time() - start
    each = []
    with _thresholds():
        for k in range(pods):
            t = time.process_time()
            sched.schedule(bench_pod(f"{kind}-{k}", kind))
            each.append(time.process_time() - t)
    cold = time.process_time() - start
    del sched, cluster
    gc.unfreeze()
    gc.collect()  # between runs, untimed
    return {"prepare": prepare, "median": statistics.median(each), "mean": statistics.fmean(each), "cold": cold}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nodes", type=int, required=True)
    ap.add_argument("--kinds", default=",".join(k for k in KINDS if k != "cpu"))
    ap.add_argument("--pods", type=int, default=200)
    ap.add_argument("--runs", type=int, default=3, help="fresh clusters per kind; the least of each figure is kept")
    args = ap.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    if args.nodes < 1 or args.pods < 1 or args.runs < 1 or not kinds or set(kinds) - set(KINDS):
        ap.error(f"--nodes, --pods and --runs take a positive count; --kinds a comma list of {', '.join(KINDS)}")
    objects = [o for i in range(args.nodes) for o in node_objects(i)]
    objects += [bench_pod(f"running-{j}", "cpu", f"node-{j % args.nodes:04d}") for j in range(5 * args.nodes)]
    result: dict[str, Any] = {"calibration_ms": calibration.python_loop_ms(3), "kinds": {},
                              "tree": os.path.dirname(os.path.dirname(os.path.abspath(scheduler.__file__)))}
    for kind in kinds:
        runs = [one_run(objects, kind, args.pods) for _ in range(args.runs)]
        result["kinds"][kind] = {name: min(r[name] for r in runs) for name in runs[0]}
    json.dump(result, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
