"""GPU usage: process join, node/pod/container folding, cgroup.procs attribution, advisor hook and NodeMetric."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from koordlet.agent import Agent
from koordlet.config import Config
from koordlet.devices.nvidia import GpuUsageCollector, SnapshotBackend
from koordlet.devices.nvidia.backend import ComputeProcess, GpuInfo, UtilizationSample
from koordlet.devices.nvidia.snapshot import SNAPSHOT_FORMAT
from koordlet.devices.nvidia.usage import Owner, ProcessUsage, Sample, fold, join_processes, parse_procs
from koordlet.host.driver import K8sQoS
from koordlet.metriccache import MetricCache

from simhost import SimCgroup, SimHost, make_pod

GIB = 1 << 30
UID_A = "11111111-2222-3333-4444-555555555555"
UID_B = "66666666-7777-8888-9999-000000000000"
G0 = GpuInfo(bus_id="0000:19:00.0", index=0, name="NVIDIA H800", uuid="GPU-aaaa", minor=0, memory_total=80 * GIB)
G1 = GpuInfo(bus_id="0000:3b:00.0", index=1, name="NVIDIA H800", uuid="GPU-bbbb", minor=1, memory_total=80 * GIB)
T0 = 1_800_000_000.0
SEC = 1_000_000_000


def test_join_keeps_processes_in_both_lists() -> None:
    compute = [ComputeProcess(10, 1 * GIB), ComputeProcess(11, 2 * GIB), ComputeProcess(12, 3 * GIB)]
    util = [UtilizationSample(10, 30, 5), UtilizationSample(10, 50, 9), UtilizationSample(12, 20, 1),
            UtilizationSample(99, 90, 1)]
    # 11 has no utilization sample, 99 no compute entry; of 10's two samples the newest counts.
    assert join_processes(compute, util) == {10: ProcessUsage(50, 1 * GIB), 12: ProcessUsage(20, 3 * GIB)}


def test_fold_node_pod_container() -> None:
    per_gpu = {G0.bus_id: {10: ProcessUsage(50, GIB), 11: ProcessUsage(20, 2 * GIB), 12: ProcessUsage(5, GIB)},
               G1.bus_id: {}}
    owners = {10: Owner("pod-a", "containerd://c1"), 11: Owner("pod-a", "containerd://c2"), 13: Owner("pod-b", "")}
    g0 = {"gpu_minor": "0", "gpu_device_uuid": "GPU-aaaa"}
    g1 = {"gpu_minor": "1", "gpu_device_uuid": "GPU-bbbb"}
    assert fold([G1, G0], per_gpu, owners) == [
        Sample("node_gpu_memory_total", g0, 80.0 * GIB),
        Sample("node_gpu_core_usage", g0, 75.0),  # every process counts for the node, owned or not
        Sample("node_gpu_memory_usage", g0, 4.0 * GIB),
        Sample("pod_gpu_core_usage", {"pod_uid": "pod-a", **g0}, 70.0),
        Sample("pod_gpu_memory_usage", {"pod_uid": "pod-a", **g0}, 3.0 * GIB),
        Sample("container_gpu_core_usage", {"container_id": "containerd://c1", **g0}, 50.0),
        Sample("container_gpu_memory_usage", {"container_id": "containerd://c1", **g0}, 1.0 * GIB),
        Sample("container_gpu_core_usage", {"container_id": "containerd://c2", **g0}, 20.0),
        Sample("container_gpu_memory_usage", {"container_id": "containerd://c2", **g0}, 2.0 * GIB),
        Sample("node_gpu_memory_total", g1, 80.0 * GIB),
        Sample("node_gpu_core_usage", g1, 0.0),  # an idle GPU reports 0, as upstream
        Sample("node_gpu_memory_usage", g1, 0.0),
    ]
    # A GPU NVML failed for this tick reports no usage at all (not a false 0).
    assert [s.kind for s in fold([G0], {}, owners)] == ["node_gpu_memory_total"]


def test_parse_procs() -> None:
    assert parse_procs(b"12\n345\n\n") == [12, 345]
    assert parse_procs(b"") == []


def _backend(processes: dict[str, list[tuple[int, int, int]]], errors: dict[str, str] | None = None) -> SnapshotBackend:
    devices = []
    for g in (G0, G1):
        procs = processes.get(g.bus_id, [])
        d: dict[str, Any] = {
            "pciBusId": g.bus_id, "index": g.index, "minor": g.minor, "name": g.name, "uuid": g.uuid,
            "memoryTotal": g.memory_total,
            "processes": [{"pid": pid, "usedGpuMemory": mem} for pid, _, mem in procs],
            "utilization": [{"pid": pid, "smUtil": sm, "timeStamp": 1} for pid, sm, _ in procs],
        }
        if errors and g.bus_id in errors:
            d["errors"] = {"utilization": errors[g.bus_id]}
        devices.append(d)
    return SnapshotBackend({"format": SNAPSHOT_FORMAT, "driverVersion": "535.161.08", "devices": devices})


def _agent(simhost: SimHost, tmp_path: Path, pods: list[dict[str, Any]]) -> Agent:
    pods_dir = tmp_path / "pods"
    pods_dir.mkdir(exist_ok=True)
    for p in pods:
        (pods_dir / f"{p['metadata']['name']}.yaml").write_text(yaml.safe_dump(p))
    agent = Agent(Config(node_name="node-1", paths=simhost.paths, pods_dir=str(pods_dir),
                         state_dir=str(tmp_path / "st")))
    assert agent.sync_pods()
    return agent


def _write_procs(agent: Agent, rel: str, pids: list[int]) -> None:
    path = Path(agent.backend.procs_path(rel))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{p}\n" for p in pids))


def test_nodemetric_gpu_devices(simhost: SimHost, tmp_path: Path, validate_crd: Any) -> None:
    pod_a = make_pod("a", UID_A, "Burstable", containers=2)
    pod_b = make_pod("b", UID_B, "BestEffort", containers=1, namespace="batch")
    agent = _agent(simhost, tmp_path, [pod_a, pod_b])
    rels = {}
    for pod, qos in ((pod_a, K8sQoS.BURSTABLE), (pod_b, K8sQoS.BESTEFFORT)):
        rel = simhost.pod_dir(qos, pod["metadata"]["uid"])  # type: ignore[index]
        ctrs = [simhost.container_dir(rel, cs["containerID"])
                for cs in pod["status"]["containerStatuses"]]  # type: ignore[index]
        rels[pod["metadata"]["name"]] = (rel, ctrs)  # type: ignore[index]
    rel_a, (a0, a1) = rels["a"]
    rel_b, (b0,) = rels["b"]
    _write_procs(agent, a0, [100, 101])
    _write_procs(agent, a1, [200])
    _write_procs(agent, b0, [300])
    # GPU 0: pod a's 100 (40 %, 10 GiB) and 200 (20 %, 6 GiB), an unowned host process 999 (10 %, 4 GiB);
    # GPU 1: nothing; pod b runs nothing on a GPU.
    backend = _backend({G0.bus_id: [(100, 40, 10 * GIB), (200, 20, 6 * GIB), (999, 10, 4 * GIB)]})
    agent.advisor.gpu = GpuUsageCollector(backend, agent.backend, agent.health, [G0, G1])

    for tick in range(6):  # 5 CPU rates over 4 minutes: past the 5-minute aggregate's cold start
        for rel in (rel_a, a0, a1, rel_b, b0):
            simhost.write_cgroup(rel, SimCgroup(cpu_ns=SEC * tick // 4, anon=GIB, file=0))
        simhost.busy({0: 100, 1: 100})
        agent.collect(now=T0 + tick * 60, mono_ns=tick * 60 * SEC)
    obj = agent.build_nodemetric(now=T0 + 300)
    status = obj["status"]

    def dev(uuid: str, minor: int, core: str, mem: str, ratio: str) -> dict[str, Any]:
        return {"id": uuid, "minor": minor, "type": "gpu", "health": False,
                "resources": {"koordinator.sh/gpu-core": core, "koordinator.sh/gpu-memory": mem,
                              "koordinator.sh/gpu-memory-ratio": ratio}}

    assert status["nodeMetric"]["nodeUsage"]["devices"] == [
        dev("GPU-aaaa", 0, "70", "20Gi", "25"), dev("GPU-bbbb", 1, "0", "0", "0")]
    # Upstream adds devices to every non-empty node ResourceMap, the percentile aggregates included.
    p50 = status["nodeMetric"]["aggregatedNodeUsages"][0]["usage"]["p50"]
    assert [d["resources"]["koordinator.sh/gpu-core"] for d in p50["devices"]] == ["70", "0"]
    pods = {p["name"]: p["podUsage"] for p in status["podsMetric"]}
    assert pods["a"]["devices"] == [dev("GPU-aaaa", 0, "60", "16Gi", "20")]
    assert "devices" not in pods["b"]  # no GPU process: no device entries at all
    cache: MetricCache = agent.cache
    c0 = next(p for p in agent.state.pods() if p.name == "a").containers[0].container_id
    key = cache.key("container_gpu_core_usage", container_id=c0, gpu_minor="0", gpu_device_uuid="GPU-aaaa")
    assert cache.last(key) is not None and cache.last(key)[1] == 40.0  # type: ignore[index]
    validate_crd("slo.koordinator.sh_nodemetrics.yaml", obj)


def test_no_gpu_samples_no_devices(simhost: SimHost, tmp_path: Path) -> None:
    agent = _agent(simhost, tmp_path, [])
    for tick in range(3):
        simhost.busy({0: 100})
        agent.collect(now=T0 + tick * 60, mono_ns=tick * 60 * SEC)
    assert "devices" not in agent.build_nodemetric(now=T0 + 120)["status"]["nodeMetric"]["nodeUsage"]


def test_usage_errors_skip_the_gpu_and_log_once(simhost: SimHost, tmp_path: Path) -> None:
    agent = _agent(simhost, tmp_path, [])
    backend = _backend({G1.bus_id: [(5, 10, GIB)]}, errors={G0.bus_id: "NOT_SUPPORTED"})  # e.g. MIG enabled
    collector = GpuUsageCollector(backend, agent.backend, agent.health, [G0, G1])
    for _ in range(3):
        kinds = {(s.kind, s.labels["gpu_minor"]) for s in collector.collect([])}
        assert ("node_gpu_core_usage", "0") not in kinds and ("node_gpu_core_usage", "1") in kinds
    assert agent.health.skipped[("gpu", "usage-unreadable")] == 3
    assert GpuUsageCollector(backend, agent.backend, agent.health).collect([]) == []
