"""#25's first Done-when: each chart version's ConfigMap (fixtures/upstream-chart, fed unchanged) places a gang, a
shared-GPU pod and a reservation owner through `koord-sched simulate --config`, and `koord-sched run --config`,
with the chart's own command line, binds them against the API double."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import kmock
import pytest
import yaml

from scheduler.cli import main

from conftest import agent_device
from gpu_cluster import node, seed

# fixtures/upstream-chart's koord-scheduler ConfigMaps as `helm template` renders them, copied unchanged
CHART = Path(__file__).parent / "seeds" / "chart"
VERSIONS = ("1.5.0", "1.6.0", "1.7.0")
NAME = "koord-scheduler"  # the chart profile's schedulerName: `run` takes it from there
PODGROUPS = "scheduling.sigs.k8s.io/v1alpha1/podgroups"
RESV = "scheduling.koordinator.sh/v1alpha1/reservations"
DEVICE_ALLOCATED = "scheduling.koordinator.sh/device-allocated"
RESV_ALLOCATED = "scheduling.koordinator.sh/reservation-allocated"
GANG_ID = "internal.scheduling.koordinator.sh/bind-gang-group-id"
GANG = ("train-0", "train-1")
WORKLOAD = (*GANG, "shared", "owner")


def chart(version: str) -> str:
    return str(CHART / f"koord-scheduler-config-v{version}.yaml")


def pod(name: str, requests: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "labels": dict(labels or {}),
                         "creationTimestamp": "2024-01-01T00:00:00Z"},
            "spec": {"schedulerName": NAME, "containers": [{"name": "c", "resources": {"requests": requests}}]},
            "status": {"phase": "Pending"}}


def workload() -> list[dict[str, Any]]:
    """A Reservation first (its owner comes later), a 2-member gang of 2 GPUs each, a half-GPU pod, the owner."""
    reservation = {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
                   "metadata": {"name": "r1", "uid": "uid-r1"},
                   "spec": {"template": {"metadata": {"namespace": "default"}, "spec": {
                       "schedulerName": NAME, "containers": [{"name": "c", "resources": {"requests": {"cpu": "4"}}}]}},
                       "owners": [{"labelSelector": {"matchLabels": {"app": "serving"}}}]}}
    group = {"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "PodGroup",
             "metadata": {"name": "train", "namespace": "default"}, "spec": {"minMember": 2}}
    gang = [pod(n, {"nvidia.com/gpu": 2}, {"pod-group.scheduling.sigs.k8s.io": "train"}) for n in GANG]
    shared = pod("shared", {"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"})
    owner = pod("owner", {"cpu": "2"}, {"app": "serving"})
    return [reservation, group, *gang, shared, owner]


def cluster_objects() -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = []
    for name in ("gpu-a", "gpu-b"):
        objs += [{"kind": "Node", **node(name, 8)}, agent_device("l20-pcie", name)]
    return [*objs, {"kind": "Node", **node("cpu-only", 0)}]


def check_placed(out: dict[str, Any]) -> None:
    placed = {p["pod"]: p for p in out["placements"]}
    assert {k: p["node"] is not None for k, p in placed.items()} == {f"default/{n}": True for n in WORKLOAD}, out
    assert placed["default/train-0"]["node"] != "cpu-only" and placed["default/train-1"]["node"] != "cpu-only"
    # no chart version enables Coscheduling at preBind: no bind-gang annotations (v1.8's chart adds it there)
    assert GANG_ID not in placed["default/train-0"]["annotations"]
    shared = json.loads(placed["default/shared"]["annotations"][DEVICE_ALLOCATED])
    assert shared["gpu"][0]["resources"]["koordinator.sh/gpu-memory-ratio"] == "50"
    assert json.loads(placed["default/owner"]["annotations"][RESV_ALLOCATED])["name"] == "r1"
    (r,) = out["reservations"]
    assert r["name"] == "r1" and r["node"] == placed["default/owner"]["node"]


@pytest.mark.parametrize("version", VERSIONS)
def test_simulate_with_the_chart_configmap(version: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = chart(version)
    (tmp_path / "cluster").mkdir()
    (tmp_path / "cluster" / "nodes.yaml").write_text(yaml.safe_dump_all(cluster_objects()))
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all(workload()))
    rc = main(["simulate", "--config", config, "--cluster", str(tmp_path / "cluster"), "--pods",
               str(tmp_path / "pods.yaml"), "-o", "json"])
    assert rc == 0
    check_placed(json.loads(capsys.readouterr().out))


@pytest.fixture
def km(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    seed(kmock, (PODGROUPS, RESV))
    del kmock.objects["v1/pods", "default", "old"]  # gpu_cluster's running pod: not needed here

    def status(request: kmock.Request) -> Any:  # strategic merge of conditions is not emulated: accept and echo
        return kmock.objects["v1/pods", request.namespace, str(request.name)].raw

    kmock["patch", kmock.resource("v1/pods"), kmock.subresource("status")] << status
    for obj in workload():
        obj = copy.deepcopy(obj)
        kind = obj.pop("kind")
        meta = obj["metadata"]
        if kind == "Reservation":
            kmock.objects[RESV, None, meta["name"]] = obj
        elif kind == "PodGroup":
            kmock.objects[PODGROUPS, meta["namespace"], meta["name"]] = obj
        else:
            kmock.objects["v1/pods", meta["namespace"], meta["name"]] = obj
    return kmock


@pytest.mark.parametrize("version", VERSIONS)
async def test_run_with_the_chart_configmap_and_command_line(version: str, km: kmock.KubernetesEmulator,
                                                            tmp_path: Path) -> None:
    config = chart(version)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "k",
        "clusters": [{"name": "k", "cluster": {"server": str(km.url).rstrip("/")}}],
        "contexts": [{"name": "k", "context": {"cluster": "k", "user": "u"}}], "users": [{"name": "u", "user": {}}]}))
    args = ["--port=0", "--authentication-skip-lookup=true", "--v=4", "--feature-gates=", f"--config={config}"]
    if version == "1.7.0":
        args.append("--enable-network-topology-manager=true")
    rc = await asyncio.to_thread(main, ["run", *args, "--leader-elect=false", "--kubeconfig", str(kubeconfig),
                                        "--once"])
    assert rc == 0
    bound = {r.url.path.split("/")[-2]: json.loads(r.body)["target"]["name"] for r in km
             if r.method.value == "POST" and r.url.path.endswith("/binding")}
    assert sorted(bound) == sorted(WORKLOAD)
    patches = {r.url.path.split("/")[-1]: json.loads(r.body) for r in km
               if r.method.value == "PATCH" and "/pods/" in r.url.path and not r.url.path.endswith("/status")}
    assert DEVICE_ALLOCATED in patches["shared"]["metadata"]["annotations"]
    assert not any(GANG_ID in (patches[n]["metadata"].get("annotations") or {}) for n in GANG)
    assert json.loads(patches["owner"]["metadata"]["annotations"][RESV_ALLOCATED])["name"] == "r1"
    statuses = [json.loads(r.body)["status"] for r in km
                if r.method.value == "PATCH" and r.url.path.endswith("/reservations/r1/status")]
    assert statuses and statuses[-1]["nodeName"] == bound["owner"]
    assert statuses[-1]["phase"] in ("Available", "Succeeded")
