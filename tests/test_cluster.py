"""Cluster mode over real HTTP against kmock: kubelet pods, API-server fallback, watches, NodeMetric status."""

from __future__ import annotations

import asyncio
import copy
import time
from pathlib import Path
from typing import Any

import kmock
import pytest

from apis.client.kubeapi import KubeClient, KubeConfig
from koordlet.agent import Agent
from koordlet.cluster import ClusterLink
from koordlet.config import Config
from koordlet.host.driver import CgroupDriver, K8sQoS

from kubedouble import NM, emulate_status_subresource
from simhost import SimCgroup, SimHost, make_pod

NODE = "node-1"
UID = "cccccccc-0000-4000-8000-000000000003"
NODESLO = "slo.koordinator.sh/v1alpha1/nodeslos"


def _node(port: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "resourceVersion": "5"},
            "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                       "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
                       "allocatable": {"cpu": "4", "kubernetes.io/batch-cpu": "3500",
                                       "kubernetes.io/batch-memory": "8Gi"}}}


@pytest.fixture
def km(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    for res in ("v1/nodes", "v1/pods", NM, NODESLO):
        kmock.resources[res] = {}
    kmock.objects["v1/nodes", None, NODE] = _node(kmock.url.port or 80)
    return kmock


@pytest.fixture
def host(tmp_path: Path) -> SimHost:
    return SimHost(tmp_path / "host", 1, CgroupDriver.SYSTEMD).setup()


def _link(km: kmock.KubernetesEmulator, host: SimHost, tmp_path: Path) -> tuple[Agent, ClusterLink]:
    cfg = Config(node_name=NODE, paths=host.paths, state_dir=str(tmp_path / "st"), kubelet_insecure_tls=True,
                 kubelet_read_only_port=km.url.port or 80)
    agent = Agent(cfg)
    kube = KubeConfig(server=str(km.url), token="sa-token")
    return agent, ClusterLink(cfg, kube, KubeClient(kube), agent)


def _pod_with_cgroups(host: SimHost) -> dict[str, Any]:
    pod = make_pod("web", UID, "Burstable", labels={"koordinator.sh/qosClass": "LS"})
    rel = host.pod_dir(K8sQoS.BURSTABLE, UID)
    host.write_cgroup(rel, SimCgroup(cpu_ns=0, anon=64 << 20))
    return pod


async def test_kubelet_pods_then_status_report(km: kmock.KubernetesEmulator, host: SimHost, tmp_path: Path,
                                               validate_crd: Any) -> None:
    pod = _pod_with_cgroups(host)
    km["get /pods/"] << {"kind": "PodList", "apiVersion": "v1", "items": [pod]}
    km.objects[NM, None, NODE] = {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
                                  "metadata": {"name": NODE, "resourceVersion": "1"},
                                  "spec": {"metricCollectPolicy": {"reportIntervalSeconds": 45}}}
    emulate_status_subresource(km)
    agent, link = _link(km, host, tmp_path)

    await asyncio.to_thread(link.sync_pods, agent)
    assert [p.name for p in agent.pods.pods] == ["web"]
    assert agent.metrics.node_allocatable == {"kubernetes.io/batch-cpu": 3500.0,
                                              "kubernetes.io/batch-memory": float(8 << 30)}
    start = time.time() - 3
    for tick in range(3):
        host.write_cgroup(host.pod_dir(K8sQoS.BURSTABLE, UID), SimCgroup(cpu_ns=tick * 250_000_000, anon=64 << 20))
        agent.collect(now=start + tick, mono_ns=tick * 1_000_000_000)
    await asyncio.to_thread(link.report, agent)

    stored = km.objects[NM, None, NODE].raw
    assert stored["spec"] == {"metricCollectPolicy": {"reportIntervalSeconds": 45}}  # spec untouched
    assert agent.policy.report_period == 45
    status = stored["status"]
    validate_crd("slo.koordinator.sh_nodemetrics.yaml", stored)
    assert status["podsMetric"] == [{"namespace": "default", "name": "web", "priority": "koord-prod", "qos": "LS",
                                     "podUsage": {"resources": {"cpu": "250m", "memory": "64Mi"}}}]
    assert agent.health.report_last_success > 0
    kubelet_get = km["get /pods/"][0]
    assert kubelet_get.headers.get("Authorization") is None  # read-only port: no credentials


async def test_falls_back_to_apiserver_when_kubelet_fails(km: kmock.KubernetesEmulator, host: SimHost,
                                                          tmp_path: Path) -> None:
    pod = _pod_with_cgroups(host)
    pod["spec"]["nodeName"] = NODE
    km["get /pods/"] << 503 << b"kubelet restarting"
    km.objects["v1/pods", "default", "web"] = pod
    agent, link = _link(km, host, tmp_path)
    await asyncio.to_thread(link.sync_pods, agent)
    assert [p.uid for p in agent.pods.pods] == [UID]
    listed = km["get", kmock.resource("v1/pods")][0]
    assert listed.params.get("fieldSelector") == f"spec.nodeName={NODE}"
    assert agent.health.skipped[("pods", "kubelet-failed")] == 1


async def test_missing_nodemetric_is_not_an_error(km: kmock.KubernetesEmulator, host: SimHost,
                                                  tmp_path: Path) -> None:
    agent, link = _link(km, host, tmp_path)
    agent.collect()
    await asyncio.to_thread(link.report, agent)
    assert len(km["put"]) == 0 and len(km["post"]) == 0  # koordlet never creates NodeMetric
    assert agent.health.report_failures == {}


async def test_watch_applies_nodeslo_changes(km: kmock.KubernetesEmulator, host: SimHost, tmp_path: Path) -> None:
    slo = {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO",
           "metadata": {"name": NODE, "resourceVersion": "1"},
           "spec": {"hostApplications": [{"name": "nginx", "qos": "LS", "priority": "koord-prod"}]}}
    km.objects[NODESLO, None, NODE] = slo
    other = copy.deepcopy(slo)
    other["metadata"]["name"] = "someone-else"
    other["spec"]["hostApplications"][0]["name"] = "not-mine"
    km.objects[NODESLO, None, "someone-else"] = other
    agent, link = _link(km, host, tmp_path)
    link.start_watches(agent)
    try:
        for _ in range(100):
            if agent.host_apps:
                break
            await asyncio.sleep(0.05)
        assert [a.name for a in agent.host_apps] == ["nginx"]
        assert agent.host_apps[0].rel_dir == "host-latency-sensitive/nginx"
        client = KubeClient(KubeConfig(server=str(km.url), user_agent="kubectl"))  # a person, not the agent
        patch = {"spec": {"hostApplications": [{"name": "redis", "qos": "BE"}]}}
        await asyncio.to_thread(client.patch, f"/apis/{NODESLO}/{NODE}", patch)
        for _ in range(100):
            if [a.name for a in agent.host_apps] == ["redis"]:
                break
            await asyncio.sleep(0.05)
        assert [a.rel_dir for a in agent.host_apps] == ["host-best-effort/redis"]
    finally:
        link.close()


async def test_one_shot_commands_read_the_nodeslo_by_name(km: kmock.KubernetesEmulator, host: SimHost,
                                                          tmp_path: Path) -> None:
    """`koordlet nodemetric` / `plan` in a cluster: one GET of this node's NodeSLO, applied; none is no error."""
    slo = {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO",
           "metadata": {"name": NODE, "resourceVersion": "1"},
           "spec": {"hostApplications": [{"name": "nginx", "qos": "LS", "priority": "koord-prod"}]}}
    km.objects[NODESLO, None, NODE] = slo
    agent, link = _link(km, host, tmp_path)
    try:
        await asyncio.to_thread(link.load_once, agent)
        assert [a.name for a in agent.host_apps] == ["nginx"]
        del km.objects[NODESLO, None, NODE]
        await asyncio.to_thread(link.load_once, agent)  # 404: defaults, logged, no exception
    finally:
        link.close()
    gets = [r for r in km._requests if r.method.value == "GET" and r.url.path.endswith(f"/nodeslos/{NODE}")]
    assert len(gets) == 2
