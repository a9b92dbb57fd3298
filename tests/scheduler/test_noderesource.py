"""The noderesource loop: upstream's batch/mid/device calculations, its write thresholds, and the loop against kmock."""

from __future__ import annotations

import asyncio
import copy
import json
import time
from pathlib import Path
from typing import Any

import kmock
import pytest
import yaml

from apis.client.kubeapi import KubeClient, KubeConfig
from scheduler.cli import main
from scheduler.noderesource.apply import plan
from scheduler.noderesource.calculate import (
    NodeResource,
    annotation_reservation,
    batch,
    calculate,
    gpu,
    mid,
    node_reserved,
    rdma,
)
from scheduler.noderesource.controller import NodeResourceController
from scheduler.noderesource.strategy import DEFAULT_STRATEGY, ConfigError, overlay, parse_config_map

from conftest import agent_device

NOW = 1_700_000_000.0
DEVICES = "scheduling.koordinator.sh/v1alpha1/devices"
NM = "slo.koordinator.sh/v1alpha1/nodemetrics"
CMS = "v1/configmaps"
G = 10**9


def rfc3339(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def node(name: str = "test-node1", cpu: str = "100", memory: str = "120G", *, alloc_memory: str | None = None,
         labels: dict[str, str] | None = None, extra: dict[str, str] | None = None) -> dict[str, Any]:
    alloc = {"cpu": cpu, "memory": alloc_memory or memory, **(extra or {})}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": dict(labels or {})},
            "status": {"capacity": {"cpu": cpu, "memory": memory, **(extra or {})}, "allocatable": alloc}}


def pod(name: str, cpu: str, memory: str, *, containers: int = 1, qos: str | None = None, priority: int | None = None,
        phase: str = "Running", node_name: str = "test-node1", limits: bool = True) -> dict[str, Any]:
    res: dict[str, Any] = {"requests": {"cpu": cpu, "memory": memory}}
    if limits:
        res["limits"] = {"cpu": cpu, "memory": memory}
    spec: dict[str, Any] = {"nodeName": node_name, "containers": [{"name": f"c{i}", "resources": res}
                                                                  for i in range(containers)]}
    if priority is not None:
        spec["priority"] = priority
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "test", "labels": {"koordinator.sh/qosClass": qos} if qos else {}},
            "spec": spec, "status": {"phase": phase}}


def pod_metric(name: str, cpu: str, memory: str) -> dict[str, Any]:
    return {"namespace": "test", "name": name, "podUsage": {"resources": {"cpu": cpu, "memory": memory}}}


def nodemetric(name: str = "test-node1", *, node_usage: tuple[str, str] = ("50", "55G"),
               system: tuple[str, str] | None = ("7", "12G"), pods: list[dict[str, Any]] | None = None,
               reclaimable: tuple[str, str] | None = None, updated: float = NOW) -> dict[str, Any]:
    nm: dict[str, Any] = {"nodeUsage": {"resources": {"cpu": node_usage[0], "memory": node_usage[1]}}}
    if system:
        nm["systemUsage"] = {"resources": {"cpu": system[0], "memory": system[1]}}
    status: dict[str, Any] = {"updateTime": rfc3339(updated), "nodeMetric": nm, "podsMetric": pods or []}
    if reclaimable:
        status["prodReclaimableMetric"] = {"resource": {"resources": {"cpu": reclaimable[0],
                                                                      "memory": reclaimable[1]}}}
    return {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": name},
            "spec": {}, "status": status}


def strategy(**over: Any) -> dict[str, Any]:
    return overlay(DEFAULT_STRATEGY, {"enable": True, **over})


# -- batch: cases of upstream batchresource/plugin_test.go TestPluginCalculate ----------------------------------------
def upstream_pod_list() -> list[dict[str, Any]]:
    """getTestPodList: an LS pod, a BE pod, a pod with no labels (Guaranteed → LSR → prod), a finished BE pod."""
    return [pod("podA", "20", "20G", qos="LS"),
            {**pod("podB", "0", "0", qos="BE"), "spec": {"nodeName": "test-node1", "containers": [{"name": "c"}]}},
            pod("podC", "10", "20G", containers=2, phase="Pending"),
            pod("podD", "10", "10G", qos="BE", phase="Succeeded")]


def upstream_metrics() -> dict[str, Any]:
    return nodemetric(pods=[pod_metric("podA", "11", "11G"), pod_metric("podB", "10", "10G"),
                            pod_metric("podC", "22", "22G")])


def test_batch_by_usage_with_pods_of_every_priority() -> None:
    """"calculate with pods in multiple priority classes": Prod and Mid count by usage, Batch and finished pods
    do not: 100 − 35 (margin) − 7 (system) − (5 + 6 + 22) = 25 cores, 120 − 42 − 12 − 33 = 33 G."""
    pods = [pod("podProd", "10", "10G", qos="LS"), pod("podProd1", "10", "10G", priority=9999),
            pod("podBatch", "10", "10G", qos="BE"), pod("podMid", "10", "20G", containers=2, qos="BE", priority=7000,
                                                        phase="Pending"),
            pod("podProd2", "10", "10G", phase="Succeeded")]
    nm = nodemetric(pods=[pod_metric("podProd", "5", "5G"), pod_metric("podProd1", "6", "6G"),
                          pod_metric("podBatch", "10", "10G"), pod_metric("podMid", "22", "22G")])
    nr = NodeResource()
    batch(strategy(cpuReclaimThresholdPercent=65, memoryReclaimThresholdPercent=65), node(), pods, nm, NOW, nr)
    assert nr.resources == {"kubernetes.io/batch-cpu": 25000, "kubernetes.io/batch-memory": 33 * G}
    assert "podHPUsed:33000" in nr.messages["kubernetes.io/batch-cpu"]


def test_batch_by_max_usage_request_cpu_and_request_memory() -> None:
    """"calculate with cpu maxUsageRequest and memory request": 100 − 30 − 7 − (max(20, 11) + max(20, 22)) = 21
    cores; memory by request: 120 − 24 − 0 − 60 = 36 G."""
    s = strategy(cpuReclaimThresholdPercent=70, cpuCalculatePolicy="maxUsageRequest",
                 memoryReclaimThresholdPercent=80, memoryCalculatePolicy="request")
    nr = NodeResource()
    batch(s, node(), upstream_pod_list(), upstream_metrics(), NOW, nr)
    assert nr.resources == {"kubernetes.io/batch-cpu": 21000, "kubernetes.io/batch-memory": 36 * G}


def test_batch_threshold_percent_caps_the_result() -> None:
    s = strategy(cpuReclaimThresholdPercent=65, memoryReclaimThresholdPercent=65, batchCPUThresholdPercent=20,
                 batchMemoryThresholdPercent=10)
    nr = NodeResource()
    batch(s, node(), upstream_pod_list(), upstream_metrics(), NOW, nr)
    assert nr.resources == {"kubernetes.io/batch-cpu": 20000, "kubernetes.io/batch-memory": 12 * G}


def test_batch_and_mid_reset_when_the_nodemetric_is_stale_or_missing() -> None:
    for nm in (nodemetric(updated=NOW - 16 * 60), None):
        nr = calculate(strategy(), True, node(), upstream_pod_list(), nm, None, NOW)
        assert {"kubernetes.io/batch-cpu", "kubernetes.io/mid-memory"} <= nr.resets
        assert not nr.resources
    fresh = calculate(strategy(), True, node(), upstream_pod_list(), nodemetric(updated=NOW - 14 * 60), None, NOW)
    assert "kubernetes.io/batch-cpu" in fresh.resources


# -- mid: upstream midresource/plugin_test.go ---------------------------------------------------------------------
def mid_node() -> dict[str, Any]:
    """getTestNode: 100 cores, capacity 210G, allocatable 200G (10G reserved by kubelet)."""
    return node("test-node", "100", "210G", alloc_memory="200G")


def mid_pods() -> list[dict[str, Any]]:
    return [pod("podA", "20", "40G", qos="LS", priority=9000, node_name="test-node"),
            pod("podB", "15", "30G", qos="BE", priority=5999, node_name="test-node")]


def test_mid_where_prod_reclaimable_exceeds_the_threshold() -> None:
    """min(min(15, 70) + 80 × 0.1, 100 × 0.1) = 10 cores; min(min(30, 160) + 160 × 0.1, 210 × 0.2) = 42 G."""
    s = strategy(degradeTimeMinutes=10, midCPUThresholdPercent=10, midMemoryThresholdPercent=20,
                 midUnallocatedPercent=10, midStaticCPUReservedPercent=10, midStaticMemoryReservedPercent=10)
    nm = nodemetric("test-node", node_usage=("30", "50G"), system=None, reclaimable=("15", "30G"), updated=NOW - 20)
    nr = NodeResource()
    mid(s, mid_node(), mid_pods(), nm, NOW, nr)
    assert nr.resources == {"kubernetes.io/mid-cpu": 10000, "kubernetes.io/mid-memory": 42 * G}
    assert nr.messages["kubernetes.io/mid-cpu"].startswith(
        "midAllocatable[CPU(milli-core)]:10000 = min(min(ProdReclaimable:15000, NodeUnused:70000) + "
        "Unallocated:80000 * midUnallocatedRatio:0.1")


def test_mid_without_prod_reclaimable_is_the_unallocated_share_only() -> None:
    """The v1.6 change: an empty node still gets ProdUnallocated × midUnallocatedPercent."""
    s = strategy(midUnallocatedPercent=50)
    nm = nodemetric("test-node", node_usage=("30", "50G"), system=None)
    nr = NodeResource()
    mid(s, mid_node(), mid_pods(), nm, NOW, nr)
    assert nr.resources == {"kubernetes.io/mid-cpu": 40000, "kubernetes.io/mid-memory": 80 * G}


def test_mid_static_mode() -> None:
    s = strategy(midReclaimMode="static", midStaticCPUReservedPercent=10, midStaticMemoryReservedPercent=30,
                 midMemoryThresholdPercent=20)
    nr = NodeResource()
    mid(s, mid_node(), mid_pods(), nodemetric("test-node"), NOW, nr)
    assert nr.resources == {"kubernetes.io/mid-cpu": 10000, "kubernetes.io/mid-memory": 42 * G}


# -- devices ------------------------------------------------------------------------------------------------------
def test_gpu_resources_and_labels_from_the_agents_device() -> None:
    nr = NodeResource()
    gpu(agent_device("l20-pcie"), nr)
    assert nr.resources["koordinator.sh/gpu-core"] == 800
    assert nr.resources["koordinator.sh/gpu"] == 800  # NVIDIA: the wrapper resource too
    assert nr.resources["koordinator.sh/gpu-memory-ratio"] == 800
    assert nr.resources["koordinator.sh/gpu-memory"] == 8 * 46068 * 2**20
    assert "koordinator.sh/gpu.shared" not in nr.resources
    assert nr.labels == {"node.koordinator.sh/gpu-vendor": "nvidia", "node.koordinator.sh/gpu-model": "L20",
                         "node.koordinator.sh/gpu-driver-version": "535.161.08"}
    shared = NodeResource()
    gpu(agent_device("l20-pcie"), shared, sync_gpu_shared=True)
    assert shared.resources["koordinator.sh/gpu.shared"] == 800


def test_vendor_devices_npu_and_mlu() -> None:
    npu = NodeResource()
    gpu(agent_device("ascend-910b"), npu)
    assert npu.resources["huawei.com/npu-core"] == 8 * 24 and npu.resources["huawei.com/npu-dvpp"] == 800
    assert "koordinator.sh/gpu" not in npu.resources  # only NVIDIA (or no vendor) gets the wrapper
    mlu_device = agent_device("mlu370")
    for d in mlu_device["spec"]["devices"]:
        d["resources"]["cambricon.com/mlu.smlu.vcore"] = "100"
    mlu = NodeResource()
    gpu(mlu_device, mlu)
    assert mlu.resources["koordinator.sh/gpu-core"] == 200
    assert not any(k.startswith("cambricon.com/") for k in mlu.resources)  # the vendor device plugin's


def test_unhealthy_gpus_and_rdma_are_not_counted() -> None:
    device = agent_device("l20-pcie")
    gpus = [d for d in device["spec"]["devices"] if d["type"] == "gpu"]
    rdmas = [d for d in device["spec"]["devices"] if d["type"] == "rdma"]
    gpus[0]["health"] = False
    nr = NodeResource()
    gpu(device, nr)
    rdma(device, nr)
    assert nr.resources["koordinator.sh/gpu-core"] == 100 * (len(gpus) - 1)
    assert nr.resources["koordinator.sh/rdma"] == 100 * len(rdmas) and rdmas
    for d in device["spec"]["devices"]:
        d["health"] = False
    gone = NodeResource()
    gpu(device, gone)
    rdma(device, gone)
    assert {"koordinator.sh/gpu-core", "koordinator.sh/rdma", "huawei.com/npu-core"} <= gone.resets


# -- write thresholds ---------------------------------------------------------------------------------------------
def test_small_changes_wait_for_the_update_time_threshold() -> None:
    n = node(extra={"kubernetes.io/batch-cpu": "25k", "kubernetes.io/batch-memory": str(33 * G)})
    nr = NodeResource()
    nr.set("kubernetes.io/batch-cpu", 26000)  # +4 %: below resourceDiffThreshold 0.1
    nr.set("kubernetes.io/batch-memory", 33 * G)
    nr.reset(["kubernetes.io/mid-cpu", "kubernetes.io/mid-memory"], "off")
    assert plan(n, nr, strategy(), expired=False).empty
    assert plan(n, nr, strategy(), expired=True).status == {"kubernetes.io/batch-cpu": "26k"}
    nr.set("kubernetes.io/batch-cpu", 30000)  # +20 %
    assert plan(n, nr, strategy(), expired=False).status == {"kubernetes.io/batch-cpu": "30k"}
    nr.set("kubernetes.io/batch-cpu", 25000)
    nr.set("kubernetes.io/batch-memory", 33 * G)
    assert plan(n, nr, strategy(), expired=True).empty  # nothing differs: no write even when due


# -- configuration ------------------------------------------------------------------------------------------------
def cm(config: dict[str, Any] | str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "slo-controller-config", "namespace": "koordinator-system"},
            "data": {"colocation-config": config if isinstance(config, str) else json.dumps(config)}}


def test_config_defaults_node_configs_and_refusals() -> None:
    assert parse_config_map(None).strategy == DEFAULT_STRATEGY and not parse_config_map(None).strategy["enable"]
    cfg = parse_config_map(cm({"enable": True, "midUnallocatedPercent": 20, "nodeConfigs": [
        {"name": "gpu", "nodeSelector": {"matchLabels": {"pool": "gpu"}}, "cpuReclaimThresholdPercent": 40},
        {"name": "bad", "nodeSelector": {"matchExpressions": [{"key": "pool", "operator": "Exists"}]},
         "midCPUThresholdPercent": 120}]}))
    gpu_node, other = node(labels={"pool": "gpu"}), node(labels={"pool": "cpu"})
    assert cfg.for_node(gpu_node)["cpuReclaimThresholdPercent"] == 40
    assert cfg.for_node(gpu_node)["midUnallocatedPercent"] == 20  # merged over the cluster strategy
    assert cfg.for_node(other)["midCPUThresholdPercent"] == 100  # invalid node config: the cluster's
    assert cfg.for_node(node())["cpuReclaimThresholdPercent"] == 60
    labelled = node(labels={"node.koordinator.sh/cpu-reclaim-ratio": "0.7"})
    assert cfg.for_node(labelled)["cpuReclaimThresholdPercent"] == 70
    assert cfg.enabled_for(other)
    with pytest.raises(ConfigError, match=r"midCPUThresholdPercent=120 \(want >= 0 and <= 100\)"):
        parse_config_map(cm({"enable": True, "midCPUThresholdPercent": 120}))
    with pytest.raises(ConfigError, match="cpuReclaimThresholdPercent: want an integer"):
        parse_config_map(cm({"cpuReclaimThresholdPercent": "60"}))
    with pytest.raises(ConfigError, match="colocation-config: invalid JSON"):
        parse_config_map(cm("{enable: true"))


# -- the loop against the API double ------------------------------------------------------------------------------
@pytest.fixture
def km(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    for res in ("v1/nodes", "v1/pods", DEVICES, NM, CMS):
        kmock.resources[res] = {}
    kmock.objects["v1/nodes", None, "gpu-a"] = node("gpu-a", "96", "512Gi")
    kmock.objects["v1/nodes", None, "cpu-b"] = node("cpu-b", "32", "128Gi")
    kmock.objects[DEVICES, None, "gpu-a"] = agent_device("l20-pcie", "gpu-a")
    kmock.objects["v1/pods", "test", "web"] = pod("web", "8", "16Gi", qos="LS", node_name="cpu-b")
    kmock.objects[NM, None, "cpu-b"] = nodemetric(
        "cpu-b", node_usage=("10", "40Gi"), system=("1", "4Gi"), pods=[pod_metric("web", "4", "10Gi")],
        updated=time.time())
    return kmock


def status_writes(km: kmock.KubernetesEmulator) -> list[str]:
    return [r.url.path for r in km if r.method.value == "PATCH" and r.url.path.endswith("/status")]


def stored(km: kmock.KubernetesEmulator, name: str) -> dict[str, Any]:
    raw: dict[str, Any] = copy.deepcopy(km.objects["v1/nodes", None, name].raw)
    return raw


async def test_loop_writes_devices_then_nothing_and_follows_the_configmap(km: kmock.KubernetesEmulator) -> None:
    import kubernetes_validate

    clock = [time.time()]
    ctl = NodeResourceController(KubeClient(KubeConfig(server=str(km.url))), clock=lambda: clock[0])
    first = await asyncio.to_thread(ctl.run_once)
    assert first.status_writes == 1 and first.label_writes == 1  # no ConfigMap: colocation off, devices synced
    gpu_a = stored(km, "gpu-a")
    for where in ("allocatable", "capacity"):
        assert gpu_a["status"][where]["koordinator.sh/gpu-core"] == "800"
        assert gpu_a["status"][where]["koordinator.sh/gpu"] == "800"
        assert gpu_a["status"][where]["koordinator.sh/rdma"] == "400"
    assert gpu_a["metadata"]["labels"]["node.koordinator.sh/gpu-model"] == "L20"
    assert "kubernetes.io/batch-cpu" not in stored(km, "cpu-b")["status"]["allocatable"]
    kubernetes_validate.validate(gpu_a, "1.30.0", strict=True)

    steady = await asyncio.to_thread(ctl.run_once)
    assert steady.status_writes == 0 and steady.label_writes == 0 and len(status_writes(km)) == 1

    km.objects[CMS, "koordinator-system", "slo-controller-config"] = cm({"enable": True})
    colocated = await asyncio.to_thread(ctl.run_once)
    assert colocated.status_writes == 1  # cpu-b gets batch and mid; gpu-a (no NodeMetric) has none to remove
    cpu_b = stored(km, "cpu-b")["status"]["allocatable"]
    # 32 − 12.8 (margin 40 %) − 1 (system) − 4 (web's usage) = 14.2 cores
    assert cpu_b["kubernetes.io/batch-cpu"] == "14200"
    assert cpu_b["kubernetes.io/mid-cpu"] == "0" and cpu_b["kubernetes.io/mid-memory"] == "0"
    assert "kubernetes.io/batch-cpu" not in stored(km, "gpu-a")["status"]["allocatable"]

    # a small change waits for updateTimeThresholdSeconds; a big one is written at once
    metric = km.objects[NM, None, "cpu-b"].raw
    metric["status"]["podsMetric"][0]["podUsage"]["resources"]["cpu"] = "4500m"
    assert (await asyncio.to_thread(ctl.run_once)).status_writes == 0
    clock[0] += 301
    assert (await asyncio.to_thread(ctl.run_once)).status_writes == 1
    assert stored(km, "cpu-b")["status"]["allocatable"]["kubernetes.io/batch-cpu"] == "13700"
    metric["status"]["podsMetric"][0]["podUsage"]["resources"]["cpu"] = "10"
    assert (await asyncio.to_thread(ctl.run_once)).status_writes == 1

    # a broken ConfigMap keeps the last good config; colocation off again removes batch and mid
    km.objects[CMS, "koordinator-system", "slo-controller-config"] = cm({"enable": True, "resourceDiffThreshold": 0})
    broken = await asyncio.to_thread(ctl.run_once)
    assert "resourceDiffThreshold=0" in broken.config_error and broken.status_writes == 0
    km.objects[CMS, "koordinator-system", "slo-controller-config"] = cm({"enable": False})
    assert (await asyncio.to_thread(ctl.run_once)).status_writes == 1
    assert not any(k.startswith("kubernetes.io/") for k in stored(km, "cpu-b")["status"]["allocatable"])

    # the Device gone: the GPU and RDMA resources go too
    del km.objects[DEVICES, None, "gpu-a"]
    await asyncio.to_thread(ctl.run_once)
    assert not any(k.startswith("koordinator.sh/") for k in stored(km, "gpu-a")["status"]["allocatable"])


async def test_cli_once_prints_the_table_and_dry_run_writes_nothing(km: kmock.KubernetesEmulator, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str],
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "k",
        "clusters": [{"name": "k", "cluster": {"server": str(km.url).rstrip("/")}}],
        "contexts": [{"name": "k", "context": {"cluster": "k", "user": "u"}}], "users": [{"name": "u", "user": {}}]}))
    args = ["noderesource", "--kubeconfig", str(kubeconfig), "--once"]
    assert await asyncio.to_thread(main, [*args, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "gpu-a" in out and "koordinator.sh/gpu-core=800" in out and not status_writes(km)
    assert await asyncio.to_thread(main, [*args, "--feature-gates", "EnableSyncGPUSharedResource=true"]) == 0
    assert stored(km, "gpu-a")["status"]["allocatable"]["koordinator.sh/gpu.shared"] == "800"
    assert await asyncio.to_thread(main, [*args, "--feature-gates", "EnableSyncGPUShared=true"]) == 2
    assert "EnableSyncGPUSharedResource=true|false" in caplog.text


# -- simulate -----------------------------------------------------------------------------------------------------
def test_simulate_fills_missing_device_allocatable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = tmp_path / "cluster"
    cluster.mkdir()
    objs = [node("gpu-a", "96", "512Gi"), agent_device("l20-pcie", "gpu-a"),
            node("gpu-b", "96", "512Gi", extra={"koordinator.sh/gpu-core": "100"}), agent_device("l20-pcie", "gpu-b")]
    (cluster / "nodes.yaml").write_text(yaml.safe_dump_all(objs))
    pods = tmp_path / "pods.yaml"
    want = {"koordinator.sh/gpu-core": "200", "koordinator.sh/gpu-memory-ratio": "200"}
    pods.write_text(yaml.safe_dump_all([
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}", "namespace": "default"},
         "spec": {"containers": [{"name": "c", "resources": {"requests": want, "limits": want}}]}}
        for i in range(2)]))
    assert main(["simulate", "--cluster", str(cluster), "--pods", str(pods), "-o", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    # gpu-b's allocatable says 100 gpu-core: kept as given, so only gpu-a (filled from its Device) fits both
    assert [p["node"] for p in result["placements"]] == ["gpu-a", "gpu-a"]


async def test_run_with_noderesource_starts_the_loop_beside_the_scheduler(km: kmock.KubernetesEmulator) -> None:
    import argparse
    import threading

    from scheduler.noderesource.cli import start_background

    ns = argparse.Namespace(nr_interval="10ms", nr_feature_gates="", nr_config_namespace="koordinator-system",
                            nr_qps=0.0, nr_burst=1)
    stop = threading.Event()
    thread = start_background(KubeConfig(server=str(km.url)), ns, stop)
    for _ in range(200):
        if status_writes(km):
            break
        await asyncio.sleep(0.02)
    stop.set()
    await asyncio.to_thread(thread.join, 5)
    assert not thread.is_alive()
    assert stored(km, "gpu-a")["status"]["allocatable"]["koordinator.sh/gpu-core"] == "800"
    bad = argparse.Namespace(**{**vars(ns), "nr_interval": "soon"})
    with pytest.raises(ValueError, match="--noderesource-interval"):
        start_background(KubeConfig(server=str(km.url)), bad, stop)


@pytest.mark.parametrize(("reserved_cpus", "cores"), [("0-3,2-3", 4), ("0,0,1", 2), ("0,,1", 0), ("3", 1)])
def test_reserved_cpus_count_each_cpu_once_as_cpuset_parse_does(reserved_cpus: str, cores: int) -> None:
    """GetNodeReservationFromAnnotation: reservedCPUs is cpuset.Parse(...).Size(); a list that does not parse
    reserves nothing (the whole annotation is ignored)."""
    n = node(cpu="8", memory="16G")
    n["metadata"]["annotations"] = {"node.koordinator.sh/reservation": json.dumps({"reservedCPUs": reserved_cpus})}
    assert node_reserved(n).get("cpu", 0) == cores * 1000


@pytest.mark.parametrize(("annotation", "cpu"), [
    ('{"ReservedCPUs": "0-3"}', 4000),  # json.Unmarshal matches field names case-insensitively
    ('{"Resources": {"cpu": "1500m"}}', 1500),
    ('{"resources": {"cpu": "2", "memory": "lots"}}', 0),  # a bad quantity fails the whole Unmarshal: ignored
    ('{"reservedCPUs": 3}', 0),  # not a string: ignored, not read as "3"
])
def test_reservation_annotation_is_read_as_go_unmarshals_it(annotation: str, cpu: int) -> None:
    n = node(cpu="8", memory="16G")
    n["metadata"]["annotations"] = {"node.koordinator.sh/reservation": annotation}
    assert annotation_reservation(n).get("cpu", 0) == cpu
