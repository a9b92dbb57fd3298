"""Per-process GPU usage folded into node, pod and container samples (upstream collector_gpu_linux.go).

A process counts only when NVML lists it both as a compute process (memory) and in the utilization samples (SM %);
pods and containers own the PIDs in their cgroups' `cgroup.procs`. The folding is pure; GpuUsageCollector is the
one-tick glue the advisor calls.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from apis.core.errors import HostReadError, InvalidInput
from koordlet.devices.nvidia.backend import ComputeProcess, GpuInfo, NvmlBackend, NvmlError, UtilizationSample
from koordlet.devices.nvidia.telemetry import TelemetryCollector
from koordlet.health import Health
from koordlet.host.cgroup import CgroupBackend
from koordlet.host.files import read_bytes
from koordlet.states.model import PodMeta

NODE_CORE = "node_gpu_core_usage"
NODE_MEMORY = "node_gpu_memory_usage"
NODE_MEMORY_TOTAL = "node_gpu_memory_total"
POD_CORE = "pod_gpu_core_usage"
POD_MEMORY = "pod_gpu_memory_usage"
CONTAINER_CORE = "container_gpu_core_usage"
CONTAINER_MEMORY = "container_gpu_memory_usage"


class ProcessUsage(NamedTuple):
    sm_util: int  # percent of the GPU's SMs
    memory: int  # bytes


class Sample(NamedTuple):
    """One metric-cache sample: kind, its labels (exactly KIND_PROPERTIES[kind]) and the value."""

    kind: str
    labels: dict[str, str]
    value: float


class Owner(NamedTuple):
    pod_uid: str
    container_id: str  # "" for a process directly in the pod cgroup


def join_processes(compute: Iterable[ComputeProcess], utilization: Iterable[UtilizationSample]) -> dict[
        int, ProcessUsage]:
    """PID → usage for processes present in both lists.

    **[quirk]** NVML can hold several utilization samples of one PID; upstream takes whichever sorts first (an
    unstable sort); we take the newest by timestamp.
    """
    newest: dict[int, UtilizationSample] = {}
    for u in utilization:
        old = newest.get(u.pid)
        if old is None or u.timestamp >= old.timestamp:
            newest[u.pid] = u
    out: dict[int, ProcessUsage] = {}
    for p in compute:
        sample = newest.get(p.pid)
        if sample is not None:
            out[p.pid] = ProcessUsage(sample.sm_util, p.used_memory)
    return out


def _labels(g: GpuInfo) -> dict[str, str]:
    return {"gpu_minor": str(g.minor), "gpu_device_uuid": g.uuid}


def fold(gpus: Sequence[GpuInfo], per_gpu: Mapping[str, Mapping[int, ProcessUsage]],
         owners: Mapping[int, Owner]) -> list[Sample]:
    """Samples of one tick. `per_gpu` maps bus id → PID usage for every GPU NVML answered for; a GPU missing
    there gets only its memory-total sample (upstream would report 0 usage for it: **[quirk]** we report none
    rather than a false idle)."""
    out: list[Sample] = []
    for g in sorted(gpus, key=lambda x: (x.minor, x.uuid)):
        gl = _labels(g)
        out.append(Sample(NODE_MEMORY_TOTAL, gl, float(g.memory_total)))
        procs = per_gpu.get(g.bus_id)
        if procs is None:
            continue
        out.append(Sample(NODE_CORE, gl, float(sum(p.sm_util for p in procs.values()))))
        out.append(Sample(NODE_MEMORY, gl, float(sum(p.memory for p in procs.values()))))
        pods: dict[str, list[int]] = {}
        containers: dict[str, list[int]] = {}
        for pid, p in procs.items():
            owner = owners.get(pid)
            if owner is None:
                continue
            acc = pods.setdefault(owner.pod_uid, [0, 0])
            acc[0] += p.sm_util
            acc[1] += p.memory
            if owner.container_id:
                acc = containers.setdefault(owner.container_id, [0, 0])
                acc[0] += p.sm_util
                acc[1] += p.memory
        for uid, (sm, mem) in sorted(pods.items()):
            labels = {"pod_uid": uid, **gl}
            out.append(Sample(POD_CORE, labels, float(sm)))
            out.append(Sample(POD_MEMORY, labels, float(mem)))
        for cid, (sm, mem) in sorted(containers.items()):
            labels = {"container_id": cid, **gl}
            out.append(Sample(CONTAINER_CORE, labels, float(sm)))
            out.append(Sample(CONTAINER_MEMORY, labels, float(mem)))
    return out


def parse_procs(data: bytes) -> list[int]:
    """`cgroup.procs`: one PID per line; anything else on a line is ignored."""
    return [int(line) for line in data.split() if line.isdigit()]


def pid_owners(cgroups: CgroupBackend, pods: Sequence[PodMeta], health: Health) -> dict[int, Owner]:
    """PID → (pod, container) from the cgroup.procs of running containers (upstream GetPIDsInPod /
    GetPIDsInContainer), plus processes sitting directly in a pod's cgroup."""
    out: dict[int, Owner] = {}
    for pod in pods:
        if not any(c.running for c in pod.containers):
            continue  # upstream: a pod without running containers has no GPU usage
        dirs = [(pod.cgroup_dir, "", f"{pod.namespace}/{pod.name}")]
        dirs += [(c.cgroup_dir, c.container_id, f"{pod.namespace}/{pod.name}/{c.name}")
                 for c in pod.containers if c.running and c.cgroup_dir is not None]
        for rel, cid, label in dirs:
            try:
                pids = parse_procs(read_bytes(cgroups.procs_path(rel)))
            except (HostReadError, InvalidInput) as e:
                if cid:  # a pod dir without processes of its own is normal; a container without procs is not
                    health.skip("container", "procs-unreadable", label, str(e))
                continue
            for pid in pids:
                out[pid] = Owner(pod.uid, cid)
    return out


class GpuUsageCollector:
    """The advisor's GPU hook: one NVML pass per tick over the inventory, folded with cgroup PID ownership; the
    device telemetry (when given) is read on the same tick when its period is due."""

    def __init__(self, backend: NvmlBackend, cgroups: CgroupBackend, health: Health,
                 gpus: Sequence[GpuInfo] = (), telemetry: TelemetryCollector | None = None) -> None:
        self.backend = backend
        self.cgroups = cgroups
        self.health = health
        self.gpus: list[GpuInfo] = list(gpus)  # replace when discovery finds a new inventory
        self.telemetry = telemetry

    def read(self) -> dict[str, dict[int, ProcessUsage]]:
        out: dict[str, dict[int, ProcessUsage]] = {}
        for g in self.gpus:
            try:
                procs = self.backend.compute_processes(g.bus_id)
                util = self.backend.process_utilization(g.bus_id)
            except NvmlError as e:
                self.health.skip("gpu", "usage-unreadable", g.bus_id, str(e))
                continue
            self.health.recovered("gpu", "usage-unreadable", g.bus_id)
            out[g.bus_id] = join_processes(procs, util)
        return out

    def collect(self, pods: Sequence[PodMeta]) -> list[Sample]:
        if not self.gpus:
            return []
        if self.telemetry is not None:
            self.telemetry.collect([g.bus_id for g in self.gpus])
        per_gpu = self.read()
        owners = pid_owners(self.cgroups, pods, self.health) if any(per_gpu.values()) else {}
        return fold(self.gpus, per_gpu, owners)
