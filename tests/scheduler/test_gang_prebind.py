"""Coscheduling's PreBind: the bind-gang annotation pairs only where the profile enables Coscheduling at preBind,
on the binding members only, and stale pairs taken off a pod it gives no binding info (upstream
coscheduling_test.go TestPreBind and core_test.go TestGetGangBindingInfo, restated)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import kmock
import pytest
import yaml

from apis.client.kubeapi import KubeClient, KubeConfig
from scheduler.cli import profile
from scheduler.cluster import Cluster, build_cluster
from scheduler.config import SchedulerConfig, load_config
from scheduler.config.plugins import PRE_BIND
from scheduler.config.profile import parse_config
from scheduler.framework import Scheduler
from scheduler.gang.planner import plan_jobs
from scheduler.interfaces import Placement
from scheduler.runner import SecondaryScheduler

from gpu_cluster import seed

CHART_V17 = Path(__file__).parent / "seeds" / "chart" / "koord-scheduler-config-v1.7.0.yaml"
GROUP_ID = "internal.scheduling.koordinator.sh/bind-gang-group-id"
MEMBERS = "internal.scheduling.koordinator.sh/bind-gang-member-count"
OLD_GROUP_ID = "scheduling.koordinator.sh/bind-gang-group-id"
OLD_MEMBERS = "scheduling.koordinator.sh/bind-gang-member-count"
PAIRS = (GROUP_ID, MEMBERS, OLD_GROUP_ID, OLD_MEMBERS)
STALE = {GROUP_ID: "default/old", MEMBERS: "4", OLD_GROUP_ID: "default/old", OLD_MEMBERS: "4"}
PODGROUPS = "scheduling.sigs.k8s.io/v1alpha1/podgroups"
NAME = "koord-scheduler"


def chart_v17(prebind: bool) -> SchedulerConfig:
    """The v1.7 chart's profile as written, or with Coscheduling also at preBind (what the v1.8 chart adds)."""
    configmap = yaml.safe_load(CHART_V17.read_text())
    doc = yaml.safe_load(configmap["data"]["koord-scheduler-config"])
    if prebind:
        doc["profiles"][0]["plugins"][PRE_BIND]["enabled"].append({"name": "Coscheduling"})
    return parse_config(doc)


V18 = chart_v17(prebind=True)


def node(name: str, cpu: int = 8) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {}},
            "status": {"allocatable": {"cpu": str(cpu), "memory": "32Gi", "pods": "110"}}}


def podgroup(name: str, min_member: int, groups: list[str] | None = None) -> dict[str, Any]:
    annotations = {"gang.scheduling.koordinator.sh/groups": json.dumps(groups)} if groups else {}
    return {"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default", "annotations": annotations},
            "spec": {"minMember": min_member}}


def pod(name: str, gang: str | None = None, annotations: dict[str, str] | None = None, cpu: int = 1,
        node_name: str | None = None) -> dict[str, Any]:
    labels = {"pod-group.scheduling.sigs.k8s.io": gang} if gang else {}
    spec: dict[str, Any] = {"schedulerName": NAME,
                            "containers": [{"name": "c", "resources": {"requests": {"cpu": str(cpu)}}}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "labels": labels,
                         "annotations": dict(annotations or {}), "creationTimestamp": "2024-01-01T00:00:00Z"},
            "spec": spec, "status": {"phase": "Running" if node_name else "Pending"}}


def plan(config: SchedulerConfig | None, objs: list[dict[str, Any]], pods: list[dict[str, Any]]
         ) -> dict[str, Placement]:
    cluster = build_cluster([node("n1"), node("n2"), *objs])
    placements, _ = plan_jobs(Scheduler(cluster, profile(config)), pods, enable_preemption=False)
    return {p.pod.split("/")[1]: p for p in placements}


def test_satisfied_gang_gets_both_pairs() -> None:
    """TestPreBind "gang satisfied": minMember 2, both members waiting: group id and member count 2, twice."""
    got = plan(V18, [podgroup("gangA", 2)], [pod("pod-1", "gangA"), pod("pod-2", "gangA")])
    for p in got.values():
        assert p.node is not None
        assert p.annotations[GROUP_ID] == p.annotations[OLD_GROUP_ID] == "default/gangA"
        assert p.annotations[MEMBERS] == p.annotations[OLD_MEMBERS] == "2"


@pytest.mark.parametrize("config", [chart_v17(prebind=False), None], ids=["v1.7-chart", "default-profile"])
def test_chart_v17_writes_no_pair(config: SchedulerConfig | None) -> None:
    """The v1.7 chart (and shipped config, our default profile) does not enable Coscheduling at preBind: members
    are placed together, nothing is written, and a stale pair stays as it is."""
    got = plan(config, [podgroup("gangA", 2)],
               [pod("pod-1", "gangA", STALE), pod("pod-2", "gangA"), pod("lone", annotations=STALE)])
    assert all(p.node is not None for p in got.values())
    assert not any(k in p.annotations for p in got.values() for k in PAIRS)
    assert got["pod-1"].annotations == {} and got["lone"].removed == ()
    assert (config or load_config(None)).enabled_at("Coscheduling", PRE_BIND) is False


def test_gang_group_id_and_count_across_gangs() -> None:
    """TestGetGangBindingInfo "gangB in gangGroup": the group's id joins its gangs; the count is every member."""
    groups = ["default/gangB", "default/gangC"]
    got = plan(V18, [podgroup("gangB", 3, groups), podgroup("gangC", 1, groups)],
               [pod("pod4", "gangB"), pod("pod4-1", "gangB"), pod("pod4-2", "gangB"), pod("c", "gangC")])
    assert {p.annotations[GROUP_ID] for p in got.values()} == {"default/gangB,default/gangC"}
    assert {p.annotations[MEMBERS] for p in got.values()} == {"4"}


def test_oversubscribed_gang_stamps_the_binding_members_only() -> None:
    """TestPreBind "gang oversub": minMember 2, three pending. The group passes Permit with the first two, whose
    count is 2; the third is placed with them but is no binding member: no pair, and a stale one is removed."""
    got = plan(V18, [podgroup("gangOversub", 2)],
               [pod("p1", "gangOversub"), pod("p2", "gangOversub"), pod("p3", "gangOversub", STALE)])
    assert all(p.node is not None for p in got.values())
    assert got["p1"].annotations[MEMBERS] == got["p2"].annotations[MEMBERS] == "2"
    assert not any(k in got["p3"].annotations for k in PAIRS)
    assert got["p3"].removed == PAIRS


def test_no_binding_info_removes_stale_pairs() -> None:
    """TestPreBind "pod not in gang" and GetGangBindingInfo's single-member rule: a pod outside any gang, the one
    member of a minMember-1 gang and a member placed alone once its group was satisfied get no pair; any pair
    they carry is deleted (v1.8 coscheduling.go PreBind)."""
    objs = [podgroup("solo", 1), podgroup("done", 2), pod("bound", "done", node_name="n1")]
    got = plan(V18, objs, [pod("lone", annotations={**STALE, "keep": "x"}), pod("only", "solo", STALE),
                            pod("retry", "done", STALE), pod("clean")])
    assert all(p.node is not None for p in got.values())
    for name in ("lone", "only", "retry"):
        assert got[name].removed == PAIRS and not any(k in got[name].annotations for k in PAIRS)
    assert got["clean"].removed == ()
    assert got["lone"].as_json()["removedAnnotations"] == list(PAIRS)
    assert "removedAnnotations" not in got["clean"].as_json()


@pytest.fixture
def km(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    seed(kmock, (PODGROUPS,))
    del kmock.objects["v1/pods", "default", "old"]

    def status(request: kmock.Request) -> Any:  # strategic merge of conditions is not emulated: accept and echo
        return kmock.objects["v1/pods", request.namespace, str(request.name)].raw

    kmock["patch", kmock.resource("v1/pods"), kmock.subresource("status")] << status
    return kmock


@pytest.mark.parametrize("prebind", [True, False], ids=["v1.7+preBind", "v1.7"])
async def test_run_patches_follow_the_profile(prebind: bool, km: kmock.KubernetesEmulator) -> None:
    """`run`: the members' patch carries the pairs, a lone pod's patch deletes its stale pair (null in the merge
    patch) and the API server drops it — only with Coscheduling at preBind; otherwise neither is sent."""
    km.objects[PODGROUPS, "default", "job"] = podgroup("job", 2)
    for p in (pod("g0", "job"), pod("g1", "job"), pod("lone", annotations={**STALE, "keep": "x"})):
        km.objects["v1/pods", "default", p["metadata"]["name"]] = p
    config = chart_v17(prebind)

    def make(cluster: Cluster) -> Scheduler:
        return Scheduler(cluster, profile(config))

    runner = SecondaryScheduler(KubeClient(KubeConfig(server=str(km.url))), NAME, make)
    placements = await asyncio.to_thread(runner.run_once)
    assert all(p.node for p in placements) and len(placements) == 3 and not runner.failures
    patches = {r.url.path.split("/")[-1]: json.loads(r.body) for r in km
               if r.method.value == "PATCH" and "/pods/" in r.url.path and not r.url.path.endswith("/status")}
    lone = km.objects["v1/pods", "default", "lone"].raw["metadata"]["annotations"]
    if prebind:
        for name in ("g0", "g1"):
            assert patches[name]["metadata"]["annotations"][OLD_MEMBERS] == "2"
        assert patches["lone"]["metadata"]["annotations"] == dict.fromkeys(PAIRS)
        assert lone == {"keep": "x"}
    else:
        assert not any(k in (patch["metadata"].get("annotations") or {}) for patch in patches.values()
                       for k in PAIRS)
        assert lone == {**STALE, "keep": "x"}
