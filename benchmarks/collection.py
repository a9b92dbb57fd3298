"""Collection cost with N pods × M containers as real cgroups (v1) on this machine, at a 1 s interval.

In-process, the agent's collection alone: agent CPU per cycle, % of one core over the run, RSS at the end, and
the same-run ratio of the agent's collection cost to the floor, a bare loop that only preads the same files through
descriptors kept open (what the tick itself does). `benchmarks.daemon` measures the whole `koordlet run`.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import yaml

from koordlet.agent import Agent
from koordlet.collectors.cgroups import pod_targets
from koordlet.config import Config
from koordlet.host.cgroup import CgroupBackend
from koordlet.host.cgtree import V1_SUBSYSTEMS, CgroupTree, remove_cgroup_tree
from koordlet.host.driver import CgroupDriver, K8sQoS, container_dir, pod_dir
from koordlet.host.paths import HostPaths
from koordlet.states.model import PodMeta

V1 = Path("/sys/fs/cgroup")
SUBSYSTEMS = V1_SUBSYSTEMS


def build_tree(root: Path, name: str, pods_dir: Path, n_pods: int, n_ctrs: int, be_every: int = 0,
               colocation: bool = False) -> None:
    """Pods are Burstable; with `be_every` = N every Nth pod is a BestEffort pod labelled koordinator BE.

    `colocation`: the shape the colocation guards act on, as a cluster with koord-manager and koord-scheduler gives
    it: the cpuset hierarchy too (children inherit the CPUs); BE containers request and limit
    `kubernetes.io/batch-cpu`/`batch-memory`; LS containers have CPU limits (CPU burst); every 10th LS pod is LSR
    with a `resource-status` cpuset of the highest CPU (CPUSetAllocator)."""
    subsystems = (*SUBSYSTEMS, "cpuset") if colocation else SUBSYSTEMS
    for sub in subsystems:
        (V1 / sub / name).mkdir()
        if sub == "cpuset":
            for f in ("cpuset.cpus", "cpuset.mems"):
                (V1 / sub / name / f).write_text((V1 / sub / f).read_text())
            (V1 / sub / name / "cgroup.clone_children").write_text("1")
        (root / sub).symlink_to(V1 / sub / name)
    tree = CgroupTree(root, 1, subsystems)
    last_cpu = max(os.sched_getaffinity(0))
    for i in range(n_pods):
        be = be_every > 0 and i % be_every == 0
        add_pod(tree, pods_dir, i, n_ctrs, be=be, lsr=colocation and not be and i % 10 == 1, colocation=colocation,
                lsr_cpu=last_cpu)


def add_pod(tree: CgroupTree, pods_dir: Path, i: int, n_ctrs: int, *, be: bool, lsr: bool = False,
            colocation: bool = False, lsr_cpu: int = 0, manifest: str = "yaml") -> str:
    """One pod `bench-<i>`: its cgroup dirs in `tree` and its manifest `pod-<i>.<manifest>` (yaml or json; see
    build_tree); its UID."""
    uid = str(uuid.uuid4())
    qos = K8sQoS.BESTEFFORT if be else K8sQoS.BURSTABLE
    koord = "BE" if be else ("LSR" if lsr else "LS")
    prel = pod_dir(CgroupDriver.CGROUPFS, qos, uid)
    statuses = []
    for c in range(n_ctrs):
        cid = f"containerd://{uuid.uuid4().hex}{uuid.uuid4().hex}"
        statuses.append({"name": f"c{c}", "containerID": cid, "state": {"running": {}}})
        tree.mkdir(container_dir(CgroupDriver.CGROUPFS, prel, cid))
    containers: list[dict[str, object]] = [{"name": s["name"]} for s in statuses]
    annotations: dict[str, str] = {}
    if colocation:
        if be:
            batch = {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "256Mi"}
            limit = {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "512Mi"}
            resources = {"requests": batch, "limits": limit}
        else:
            resources = {"requests": {"cpu": "100m", "memory": "64Mi"},
                         "limits": {"cpu": "500m", "memory": "128Mi"}}
        containers = [{**c, "resources": resources} for c in containers]
        if koord == "LSR":
            annotations["scheduling.koordinator.sh/resource-status"] = f'{{"cpuset": "{lsr_cpu}"}}'
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": f"bench-{i}", "namespace": "bench", "uid": uid,
                        "labels": {"koordinator.sh/qosClass": koord}, "annotations": annotations},
           "spec": {"containers": containers},
           "status": {"phase": "Running", "qosClass": qos.value, "containerStatuses": statuses}}
    text = json.dumps(pod) if manifest == "json" else yaml.safe_dump(pod)
    (pods_dir / f"pod-{i}.{manifest}").write_text(text)
    return uid


def remove_tree(name: str) -> None:
    for sub in (*SUBSYSTEMS, "cpuset"):
        remove_cgroup_tree(V1 / sub / name)


@contextmanager
def bench_node(n_pods: int, n_ctrs: int, be_every: int = 0,
               colocation: bool = False) -> Iterator[tuple[HostPaths, Path, Path]]:
    """A kubepods tree of real v1 cgroups under a unique parent, seen through a cgroup root of symlinks:
    yields (host paths, pods dir of matching manifests, scratch dir); the tree is removed afterwards."""
    name = f"koordlet-bench-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp:
        root, pods_dir = Path(tmp) / "cgroup", Path(tmp) / "pods"
        root.mkdir()
        pods_dir.mkdir()
        try:
            build_tree(root, name, pods_dir, n_pods, n_ctrs, be_every, colocation)
            yield HostPaths.under("/").with_overrides(cgroup_root=str(root)), pods_dir, Path(tmp)
        finally:
            remove_tree(name)


def have_real_cgroups() -> bool:
    if os.geteuid() == 0 and all((V1 / sub / "cgroup.procs").exists() for sub in SUBSYSTEMS):
        return True
    print("benchmark needs root and cgroup v1 " + "/".join(SUBSYSTEMS) + " hierarchies", file=sys.stderr)
    return False


def print_table(rows: list[tuple[str, str, str, str]], value_width: int = 14) -> None:
    w = max(len(r[0]) for r in rows)
    print(f"{'metric':<{w}}  {'value':>{value_width}}  {'target':>7}  result")
    for r in rows:
        print(f"{r[0]:<{w}}  {r[1]:>{value_width}}  {r[2]:>7}  {r[3]}")


def bare_cycle(fds: list[int]) -> None:
    for fd in fds:
        os.pread(fd, 65536, 0)


def tick_schedule(backend: CgroupBackend, pods: list[PodMeta], stride: int,
                  node_files: tuple[str, ...] = ("/proc/stat", "/proc/meminfo")) -> list[list[str]]:
    """The files the collection ticks read, one list per tick of the container stride: the node counters and every
    pod's stat files each tick, each container's every `stride` ticks, the containers spread over the ticks."""
    every = list(node_files)
    containers: list[tuple[str, ...]] = []
    for t in pod_targets(pods):
        if t.scope == "container":
            containers.append(backend.stat_paths(t.rel_dir))
        else:
            every += backend.stat_paths(t.rel_dir)
    return [every + [f for c in containers[p::stride] for f in c] for p in range(stride)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pods", type=int, default=250)
    ap.add_argument("--containers", type=int, default=3)
    ap.add_argument("--duration", type=float, default=600.0, help="seconds of 1 s-interval running for RSS/CPU")
    ap.add_argument("--cycles", type=int, default=30, help="cycles for the bare-loop ratio")
    args = ap.parse_args()
    if not have_real_cgroups():
        return 2
    with bench_node(args.pods, args.containers) as (paths, pods_dir, tmp):
        return run(args, paths, pods_dir, tmp / "state")


def run(args: argparse.Namespace, paths: HostPaths, pods_dir: Path, state: Path) -> int:
    agent = Agent(Config(node_name="bench", paths=paths, pods_dir=str(pods_dir), state_dir=str(state)))
    agent.sync_pods()
    stride = agent.advisor.cgroups.container_stride
    due = tick_schedule(agent.backend, agent.state.pods(), stride)
    for _ in range(stride):  # every container read once: all descriptors kept
        agent.collect()
    gc.collect()
    gc.freeze()  # as the daemon does once pods and series are built
    opened = {f: os.open(f, os.O_RDONLY | os.O_CLOEXEC) for files in due for f in files}
    fds = [[opened[f] for f in files] for files in due]

    # Same-run ratio: interleave bare and agent cycles so machine noise hits both alike.
    bare = agent_cost = 0.0
    for cycle in range(args.cycles):
        t = time.process_time()
        bare_cycle(fds[cycle % stride])
        bare += time.process_time() - t
        t = time.process_time()
        agent.collect()
        agent_cost += time.process_time() - t
    ratio = agent_cost / bare if bare else float("inf")
    for fd in opened.values():
        os.close(fd)

    # Steady state at a 1 s interval: CPU share and RSS at the end (GC and NodeMetric builds included).
    proc = psutil.Process()
    cpu0, wall0 = time.process_time(), time.monotonic()
    next_at, cycles, last_report = wall0, 0, wall0
    while time.monotonic() - wall0 < args.duration:
        agent.collect()
        cycles += 1
        now = time.monotonic()
        if now - last_report >= 60:
            agent.gc()
            agent.write_state(agent.build_nodemetric())
            last_report = now
        next_at += 1.0
        time.sleep(max(next_at - time.monotonic(), 0))
    cpu = time.process_time() - cpu0
    wall = time.monotonic() - wall0
    gc.collect()
    rss = proc.memory_info().rss / (1 << 20)

    rows = [
        ("pods × containers", f"{args.pods} × {args.containers}", "", ""),
        ("files read per cycle (pods every cycle, containers every 10 s)", f"{sum(map(len, due)) / stride:.0f}",
         "", ""),
        ("agent CPU per cycle (ms)", f"{1000 * cpu / max(cycles, 1):.1f}", "", ""),
        ("agent CPU, % of one core", f"{100 * cpu / wall:.2f}", "≤ 2", "ok" if 100 * cpu / wall <= 2 else "MISS"),
        (f"RSS after {wall:.0f} s (MiB)", f"{rss:.1f}", "≤ 120", "ok" if rss <= 120 else "MISS"),
        ("collection / pread floor", f"{ratio:.2f}", "≤ 1.5", "ok" if ratio <= 1.5 else "MISS"),
        ("metric-cache series / samples", f"{agent.cache.series_count()} / {agent.cache.sample_count()}", "", ""),
    ]
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
