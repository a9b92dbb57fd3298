"""`koord-sched run` with ElasticQuota against kmock: status.used and runtime written back; the diagnosis API."""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.error
import urllib.request
from typing import Any

import kmock
import pytest
from test_preemption_run import PODGROUPS, QUOTAS, pod

from apis.client.kubeapi import KubeClient, KubeConfig
from scheduler import debug
from scheduler.cli import profile
from scheduler.cluster import Cluster
from scheduler.framework import Scheduler
from scheduler.runner import SecondaryScheduler
from scheduler.services import DiagnosisAPI, DiagnosisServer

from gpu_cluster import DEVICES, seed
from kubedouble import driver_client

NAME = "koord-py"


def quota(name: str, mx: dict[str, Any], mn: dict[str, Any], labels: dict[str, str] | None = None
          ) -> dict[str, Any]:
    return {"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "ElasticQuota",
            "metadata": {"name": name, "namespace": "default", "labels": labels or {}},
            "spec": {"max": mx, "min": mn}}


@pytest.fixture
def km(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    seed(kmock, (PODGROUPS, QUOTAS))
    kmock.objects[QUOTAS, "default", "parent"] = quota("parent", {"cpu": 40, "memory": "100Gi"},
                                                       {"cpu": 20, "memory": "40Gi"},
                                                       {"quota.scheduling.koordinator.sh/is-parent": "true"})
    kmock.objects[QUOTAS, "default", "team"] = quota("team", {"cpu": 10, "memory": "20Gi"},
                                                     {"cpu": 4, "memory": "8Gi"},
                                                     {"quota.scheduling.koordinator.sh/parent": "parent"})
    kmock.objects[QUOTAS, "default", "bad"] = quota("bad", {"cpu": 1}, {"cpu": 2})
    return kmock


@pytest.fixture
def runner(km: kmock.KubernetesEmulator) -> SecondaryScheduler:
    def make(cluster: Cluster) -> Scheduler:
        return Scheduler(cluster, *profile(None))

    return SecondaryScheduler(KubeClient(KubeConfig(server=str(km.url))), NAME, make)


def team_pod(name: str, cpu: int) -> dict[str, Any]:
    return pod(name, cpu, 0, labels={"quota.scheduling.koordinator.sh/name": "team"})


async def test_status_used_and_runtime_written_back(km: kmock.KubernetesEmulator, runner: SecondaryScheduler,
                                                    validate_crd: Any) -> None:
    for p in (team_pod("t1", 6), team_pod("t2", 6)):
        km.objects["v1/pods", "default", p["metadata"]["name"]] = p
    placements = await asyncio.to_thread(runner.run_once)
    by = {p.pod: p for p in placements}
    assert by["default/t1"].node is not None
    assert by["default/t2"].reason.startswith("0/3 nodes are available: Insufficient quotas, quotaName: team, "
                                              "runtime: cpu:10")
    team = km.objects[QUOTAS, "default", "team"].raw
    parent = km.objects[QUOTAS, "default", "parent"].raw
    validate_crd("scheduling.sigs.k8s.io_elasticquotas.yaml", team)
    assert team["status"]["used"] == {"cpu": "6"} and parent["status"]["used"] == {"cpu": "6"}
    ann = team["metadata"]["annotations"]
    assert json.loads(ann["quota.scheduling.koordinator.sh/runtime"])["cpu"] == "10"
    assert json.loads(ann["quota.scheduling.koordinator.sh/request"]) == {"cpu": "12"}
    # the parent sees the child's request capped at the child's max
    assert json.loads(parent["metadata"]["annotations"]["quota.scheduling.koordinator.sh/request"]) == {"cpu": "10"}
    assert "status" not in km.objects[QUOTAS, "default", "bad"].raw  # left out, never written
    patches = [r for r in km if r.method.value == "PATCH" and "/elasticquotas/" in r.url.path]
    assert patches[0].headers["Content-Type"] == "application/merge-patch+json"
    # nothing changed: nothing written again
    await asyncio.to_thread(runner.run_once)
    assert len([r for r in km if r.method.value == "PATCH" and "/elasticquotas/" in r.url.path]) == len(patches)


def get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def put(url: str, body: str) -> tuple[int, str]:
    req = urllib.request.Request(url, data=body.encode(), method="PUT")
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


async def test_diagnosis_api(km: kmock.KubernetesEmulator, runner: SecondaryScheduler,
                             caplog: pytest.LogCaptureFixture) -> None:
    km.objects[PODGROUPS, "default", "job"] = {"metadata": {"name": "job", "namespace": "default"},
                                               "spec": {"minMember": 2}}
    for i in range(2):
        p = pod(f"g{i}", 1, 0, gang="job")
        p["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "1"
        km.objects["v1/pods", "default", f"g{i}"] = p
    km.objects["v1/pods", "default", "t1"] = team_pod("t1", 2)
    await asyncio.to_thread(runner.run_once)
    server = DiagnosisServer(("127.0.0.1", 0), DiagnosisAPI(runner.state))
    server.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        status, services = await asyncio.to_thread(get, base + "/apis/v1/__services__")
        assert status == 200
        assert "/apis/v1/plugins/ElasticQuota/quotas/:name" in services["GET"]
        assert "/apis/v1/plugins/DeviceShare/nodeDeviceSummaries/:name" in services["GET"]
        assert "/apis/v1/plugins/Coscheduling/gang/:namespace/:name" in services["GET"]

        status, team = await asyncio.to_thread(get, base + "/apis/v1/plugins/ElasticQuota/quotas/team?includePods=true")
        assert status == 200 and team["name"] == "team" and team["parentName"] == "parent"
        assert team["used"]["cpu"] == "2" and team["max"]["cpu"] == "10" and team["runtime"]["cpu"] == "2"
        assert team["podCache"]["default/t1"]["isAssigned"] is True
        assert (await asyncio.to_thread(get, base + "/apis/v1/plugins/ElasticQuota/quotas/nope"))[0] == 404

        status, dev = await asyncio.to_thread(get, base + "/apis/v1/plugins/DeviceShare/nodeDeviceSummaries/gpu-a")
        assert status == 200 and dev["deviceTotal"]["koordinator.sh/gpu-core"] == "800"
        assert "default/old" in dev["allocateSet"]["gpu"]
        assert (await asyncio.to_thread(get, base + "/apis/v1/plugins/DeviceShare/nodeDeviceSummaries/x"))[0] == 404

        status, gang = await asyncio.to_thread(get, base + "/apis/v1/plugins/Coscheduling/gang/default/job")
        assert status == 200 and gang["minRequiredNumber"] == 2 and gang["gangFrom"] == "GangFromPodGroupCrd"
        assert sorted(gang["boundChildren"]) == ["default/g0", "default/g1"]
        assert (await asyncio.to_thread(get, base + "/apis/v1/plugins/Coscheduling/gang/default/nope"))[0] == 404

        status, text = await asyncio.to_thread(put, base + "/debug/flags/s", "abc")
        assert status == 400 and "failed set debugTopNScores abc" in text
        status, text = await asyncio.to_thread(put, base + "/debug/flags/s", "3")
        assert status == 200 and text.strip() == "successfully set debugTopNScores to 3"
        km.objects["v1/pods", "default", "t2"] = team_pod("t2", 1)
        with caplog.at_level(logging.INFO, logger="scheduler.framework"):
            await asyncio.to_thread(runner.run_once)
        [table] = [m for m in (r.getMessage() for r in caplog.records)
                   if m.startswith("Top3 scores for Pod: default/t2")]
        assert "| # | Pod | Node | Score |" in table and "LoadAwareScheduling" in table
        assert len([ln for ln in table.splitlines() if ln.startswith("| ") and "default/t2" in ln]) == 3
    finally:
        debug.top_n_scores = 0
        server.shutdown()
        server.server_close()


async def test_extender_serves_diagnosis(km: kmock.KubernetesEmulator) -> None:
    from scheduler.extender import ClusterSource, Extender, ExtenderServer

    ext = Extender(ClusterSource(KubeClient(KubeConfig(server=str(km.url)))),
                   lambda c: Scheduler(c, *profile(None)))
    await asyncio.to_thread(ext.refresh)
    server = ExtenderServer(("127.0.0.1", 0), ext)
    import threading
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        status, dev = await asyncio.to_thread(get, base + "/apis/v1/plugins/DeviceShare/nodeDeviceSummaries")
        assert status == 200 and sorted(dev) == ["gpu-a", "gpu-b"]
        status, quotas = await asyncio.to_thread(get, base + "/apis/v1/plugins/ElasticQuota/quotas")
        assert status == 200 and "koordinator-default-quota" in quotas
    finally:
        server.shutdown()
        server.server_close()


assert DEVICES  # the seeded cluster carries Device CRs


async def test_extender_watch_releases_a_deleted_pods_quota(km: kmock.KubernetesEmulator) -> None:
    """A pending pod the extender filtered counts in its quota's request; deleted (or finished), it leaves it."""
    from scheduler.extender import ClusterSource, Extender

    api = driver_client(km)
    ext = Extender(ClusterSource(KubeClient(KubeConfig(server=str(km.url)))), lambda c: Scheduler(c, *profile(None)))
    await asyncio.to_thread(ext.refresh)
    ext.start_watches(timeout_seconds=5)
    try:
        def team() -> Any:
            return ext.scheduler.plugin("ElasticQuota").manager.quotas["team"]

        pending, done = team_pod("waits", 6), team_pod("runs", 2)
        for p in (pending, done):
            await asyncio.to_thread(api.post, "/api/v1/namespaces/default/pods", p)
            ext.filter({"Pod": p, "NodeNames": ["gpu-a"]})
        assert team().request == {"cpu": 8000}
        # the watch's list of the same quotas, and a status-only change, keep the pending pods' requests
        await asyncio.sleep(0.3)
        await asyncio.to_thread(api.patch, "/apis/scheduling.sigs.k8s.io/v1alpha1/namespaces/default/"
                                "elasticquotas/team", {"status": {"used": {"cpu": "1"}}})
        await asyncio.sleep(0.3)
        assert team().request == {"cpu": 8000}

        await asyncio.to_thread(api.request, "DELETE", "/api/v1/namespaces/default/pods/waits")
        await asyncio.to_thread(api.patch, "/api/v1/namespaces/default/pods/runs",
                                {"status": {"phase": "Succeeded"}})
        deadline = asyncio.get_running_loop().time() + 5
        while any(team().request.values()):
            assert asyncio.get_running_loop().time() < deadline, team().request
            await asyncio.sleep(0.02)

        # a new max is read from the watch: the tree is rebuilt
        await asyncio.to_thread(api.patch, "/apis/scheduling.sigs.k8s.io/v1alpha1/namespaces/default/"
                                "elasticquotas/team", {"spec": {"max": {"cpu": 3}, "min": {"cpu": 1}}})
        deadline = asyncio.get_running_loop().time() + 5
        while team().max.get("cpu") != 3000:
            assert asyncio.get_running_loop().time() < deadline, team().max
            await asyncio.sleep(0.02)
        refused = ext.filter({"Pod": team_pod("big", 4), "NodeNames": ["gpu-a"]})
        assert "Insufficient quotas, quotaName: team" in refused["FailedNodes"]["gpu-a"]
    finally:
        ext.stop_watches()
