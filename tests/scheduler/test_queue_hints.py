"""`run`'s scheduling queue (scheduler.queue): a pod that failed is retried on the cluster events its rejecting
plugins registered upstream (EventsToRegister), on its own update, on its gang's activation and on the periodic
flush (podMaxInUnschedulablePodsDuration), not every cycle; a failed unit gets a new queue timestamp (fair
queuing). The table follows the profile: v1.5/v1.6's Coscheduling (queueSort) registers events v1.7's does not."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

import kmock
import pytest

from apis.client.kubeapi import KubeClient, KubeConfig
from scheduler import kubeflags
from scheduler.cli import profile
from scheduler.cluster import build_cluster
from scheduler.config import load_config
from scheduler.framework import Scheduler
from scheduler.gang.plugin import Coscheduling
from scheduler.gang.queuesort import priority_order
from scheduler.interfaces import Placement
from scheduler.queue.hints import ClusterEvent, table
from scheduler.queue.pending import SchedulingQueue
from scheduler.runner import SecondaryScheduler

from gpu_cluster import node, seed
from gpu_cluster import pod as gpu_pod
from kubedouble import driver_client

NAME = "koord-py"
CHART = Path(__file__).parent / "seeds" / "chart"
KINDS = {"Node": "Node", "Pod": "Pod", "PendingPod": "Pod", "Reservation": "Reservation", "Device": "Device",
         "ElasticQuota": "ElasticQuota", "ConfigMap": "ConfigMap", "PodGroup": "PodGroup"}


def obj(name: str, rv: str = "1", ns: str | None = "default", **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "resourceVersion": rv, **({"namespace": ns} if ns else {})}
    return {"metadata": meta, **extra}


def pending(name: str, rv: str = "1", gang: str = "", **spec: Any) -> dict[str, Any]:
    p = obj(name, rv, spec={"schedulerName": NAME, **spec})
    if gang:
        p["metadata"]["annotations"] = {"gang.scheduling.koordinator.sh/name": gang}
    return p


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def stores(**objects: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    return {store: list(objects.get(store, [])) for store in KINDS}


def queue(clock: Clock, coscheduling_sorts: bool = False) -> SchedulingQueue:
    return SchedulingQueue(table(coscheduling_sorts), KINDS, "PendingPod", "Pod", clock=clock, wall=lambda: 0.0)


def failed(q: SchedulingQueue, pods: list[dict[str, Any]], plugins: dict[str, frozenset[str]]) -> None:
    """One cycle: every pod tried and not placed, put down to the given plugins."""
    due = q.due(pods, by_name)
    q.record([Placement(f"default/{by_name(p)}", None, reason="no", plugins=plugins[by_name(p)]) for p in due],
             set(), by_name, {})


def by_name(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["name"])


def names(pods: list[dict[str, Any]]) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


def test_each_plugin_is_retried_on_its_own_events_only() -> None:
    clock = Clock()
    q = queue(clock)
    pods = [pending("fit"), pending("resv"), pending("quota"), pending("dev"), pending("any")]
    q.observe(stores(PendingPod=pods, Node=[obj("n1", ns=None)]))
    failed(q, pods, {"fit": frozenset({"NodeResourcesFit"}), "resv": frozenset({"Reservation"}),
                     "quota": frozenset({"ElasticQuota"}), "dev": frozenset({"DeviceShare"}), "any": frozenset()})
    q.observe(stores(PendingPod=pods, Node=[obj("n1", ns=None)]))
    assert q.due(pods, by_name) == []  # nothing happened: nobody is retried
    # a ConfigMap changes: none of these plugins registered it, but a pod no plugin is blamed for goes
    q.observe(stores(PendingPod=pods, Node=[obj("n1", ns=None)], ConfigMap=[obj("cm")]))
    assert names(q.due(pods, by_name)) == ["any"]
    failed(q, [pods[4]], {"any": frozenset()})
    q.observe(stores(PendingPod=pods, Node=[obj("n1", ns=None)], ConfigMap=[obj("cm")],
                     Reservation=[obj("r", ns=None)]))
    assert names(q.due(pods, by_name)) == ["resv", "any"]
    failed(q, [pods[1], pods[4]], {"resv": frozenset({"Reservation"}), "any": frozenset()})
    q.observe(stores(PendingPod=pods, Node=[obj("n1", "2", ns=None)], ConfigMap=[obj("cm")],
                     Reservation=[obj("r", ns=None)], ElasticQuota=[obj("q", "7")]))
    assert names(q.due(pods, by_name)) == ["fit", "quota", "any"]  # a Node update; an ElasticQuota added


def test_an_assigned_pod_going_frees_room_for_every_plugin_that_registered_it() -> None:
    clock = Clock()
    q = queue(clock)
    pods = [pending("fit"), pending("dev"), pending("numa")]
    running = obj("running", spec={"nodeName": "n1"})
    q.observe(stores(PendingPod=pods, Pod=[running]))
    failed(q, pods, {"fit": frozenset({"NodeResourcesFit"}), "dev": frozenset({"DeviceShare"}),
                     "numa": frozenset({"Coscheduling"})})
    # an assigned pod added (AssignedPodAdd) requeues only pods with pod affinity terms: none here
    q.observe(stores(PendingPod=pods, Pod=[running, obj("other", spec={"nodeName": "n1"})]))
    assert q.due(pods, by_name) == []
    q.observe(stores(PendingPod=pods, Pod=[obj("other", spec={"nodeName": "n1"})]))  # "running" deleted
    assert names(q.due(pods, by_name)) == ["fit", "dev"]  # v1.7 Coscheduling: none


def test_update_gang_activation_and_the_periodic_flush() -> None:
    clock = Clock()
    q = queue(clock)
    solo, g0, g1 = pending("solo"), pending("g0", gang="train"), pending("g1", gang="train")
    pods = [solo, g0, g1]
    q.observe(stores(PendingPod=pods))
    failed(q, pods, {"solo": frozenset({"NodeResourcesFit"}), "g0": frozenset({"Coscheduling"}),
                     "g1": frozenset({"Coscheduling"})})
    # our own PodScheduled condition (a new resourceVersion, a status) is no update of the pod
    written = {**solo, "metadata": {**solo["metadata"], "resourceVersion": "9"}, "status": {"conditions": [{}]}}
    q.observe(stores(PendingPod=[written, g0, g1]))
    assert q.due(pods, by_name) == []
    changed = pending("solo", "10", nodeSelector={"zone": "a"})  # the user changes the pod: retried
    q.observe(stores(PendingPod=[changed, g0, g1]))
    assert names(q.due([changed, g0, g1], by_name)) == ["solo"]
    failed(q, [changed], {"solo": frozenset({"NodeResourcesFit"})})
    g2 = pending("g2", gang="train")  # a member created: the gang cache activates the gang (v1.7 onPodAdd)
    q.observe(stores(PendingPod=[changed, g0, g1, g2]))
    assert names(q.due([changed, g0, g1, g2], by_name)) == ["g0", "g1", "g2"]
    failed(q, [g0, g1, g2], dict.fromkeys(("g0", "g1", "g2"), frozenset({"Coscheduling"})))
    clock.now += 299
    q.observe(stores(PendingPod=[changed, g0, g1, g2]))
    assert q.due([changed, g0, g1, g2], by_name) == []
    clock.now += 1  # podMaxInUnschedulablePodsDuration (5 min) since they failed
    assert names(q.due([changed, g0, g1, g2], by_name)) == ["solo", "g0", "g1", "g2"]


def test_a_unit_is_tried_whole_and_a_failure_stamps_its_queue_time() -> None:
    clock = Clock()
    q = SchedulingQueue(table(True), KINDS, "PendingPod", "Pod", clock=clock, wall=lambda: 86400.0)
    g0, g1, solo = pending("g0", gang="train"), pending("g1", gang="train"), pending("solo")
    q.observe(stores(PendingPod=[g0, g1, solo]))

    def unit(p: dict[str, Any]) -> str:
        return "default/train" if p["metadata"].get("annotations") else by_name(p)

    q.record([Placement("default/g0", None, plugins=frozenset({"DeviceShare"})),
              Placement("default/g1", None), Placement("default/solo", "n1")], set(), unit,
             {"default/g0": g0, "default/g1": g1})
    assert q.state.timestamps == {"default/g0": "1970-01-02T00:00:00Z", "default/g1": "1970-01-02T00:00:00Z"}
    assert q.state.group_times == {"default/train": "1970-01-02T00:00:00Z"}
    q.observe(stores(PendingPod=[g0, g1], Device=[obj("n1", ns=None)]))
    assert names(q.due([g0, g1], unit)) == ["g0", "g1"]  # g0's event brings g1 along
    # v1.5/v1.6's Coscheduling registered PodGroup events
    assert ClusterEvent("PodGroup", "Update") in q.hints["Coscheduling"]


@pytest.mark.parametrize(("version", "sorts"), [("1.5.0", True), ("1.6.0", True), ("1.7.0", False)])
def test_the_charts_pick_their_coscheduling_row(version: str, sorts: bool) -> None:
    cfg = load_config(str(CHART / f"koord-scheduler-config-v{version}.yaml"))
    from_profile = isinstance(Scheduler(build_cluster([]),
                                        profile(cfg)).profile.queue_sort, Coscheduling)
    assert from_profile == sorts
    assert bool(table(from_profile)["Coscheduling"]) == sorts


@pytest.fixture
def km(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    seed(kmock, ())

    def status(request: kmock.Request) -> Any:
        return kmock.objects["v1/pods", request.namespace, str(request.name)].raw

    kmock["patch", kmock.resource("v1/pods"), kmock.subresource("status")] << status
    return kmock


async def test_run_retries_an_unschedulable_pod_when_a_node_arrives(km: kmock.KubernetesEmulator) -> None:
    runner = SecondaryScheduler(KubeClient(KubeConfig(server=str(km.url))), NAME,
                                lambda c: Scheduler(c, profile(None)), write_topology_status=False)
    huge = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "huge", "namespace": "default", "uid": "uid-huge",
                         "creationTimestamp": "2024-01-01T00:00:00Z"},
            "spec": {"schedulerName": NAME, "containers": [{"name": "c", "resources": {"requests": {"cpu": "400"}}}]},
            "status": {"phase": "Pending"}}
    km.objects["v1/pods", "default", "huge"] = huge
    first = await asyncio.to_thread(runner.run_once)
    assert [(p.pod, p.node) for p in first] == [("default/huge", None)] and "NodeResourcesFit" in first[0].plugins
    assert await asyncio.to_thread(runner.run_once) == []  # nothing changed: not retried
    big = node("big", 0) | {"kind": "Node"}
    big["status"]["allocatable"]["cpu"] = "500"
    await asyncio.to_thread(driver_client(km).post, "/api/v1/nodes", big)
    again = await asyncio.to_thread(runner.run_once)
    assert [(p.pod, p.node) for p in again] == [("default/huge", "big")]


def test_the_flush_period_flag_as_kube_scheduler_spells_it(capsys: pytest.CaptureFixture[str]) -> None:
    p = argparse.ArgumentParser()
    kubeflags.add_flags(p)
    assert p.parse_args(["--pod-max-in-unschedulable-pods-duration=90s"]).pod_max_in_unschedulable == 90.0
    assert p.parse_args([]).pod_max_in_unschedulable is None  # run then waits kube-scheduler's 5 minutes
    with pytest.raises(SystemExit) as exited:
        p.parse_args(["--pod-max-in-unschedulable-pods-duration=soon"])
    assert exited.value.code == 2
    assert "invalid duration 'soon'" in capsys.readouterr().err


def test_a_placed_reservation_deleted_counts_as_an_assigned_pod_deleted() -> None:
    """koord-scheduler's reservation handler removes the reserve pod from its cache and moves the queue as for an
    assigned pod deleted: a pod NodeResourcesFit rejected is retried; a Reservation that never had a node is not
    a pod leaving."""
    clock = Clock()
    q = queue(clock)
    fit = pending("fit")
    placed = obj("r-placed", ns=None, status={"nodeName": "n1"})
    waiting = obj("r-waiting", ns=None, status={})
    q.observe(stores(PendingPod=[fit], Reservation=[placed, waiting]))
    failed(q, [fit], {"fit": frozenset({"NodeResourcesFit"})})
    assert q.observe(stores(PendingPod=[fit], Reservation=[placed])) == [ClusterEvent("Reservation", "Delete")]
    assert q.due([fit], by_name) == []
    assert ClusterEvent("Pod", "Delete") in q.observe(stores(PendingPod=[fit]))
    assert names(q.due([fit], by_name)) == ["fit"]


async def test_run_retries_a_pod_over_its_quota_when_the_quota_changes(kmock: kmock.KubernetesEmulator) -> None:
    """ElasticQuota's row: a node added does not help a pod its quota refused; the quota raised does."""
    quotas = "scheduling.sigs.k8s.io/v1alpha1/elasticquotas"
    seed(kmock, (quotas,))
    kmock["patch", kmock.resource("v1/pods"), kmock.subresource("status")] << (
        lambda r: kmock.objects["v1/pods", r.namespace, str(r.name)].raw)
    kmock.objects[quotas, "default", "team"] = {
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "ElasticQuota",
        "metadata": {"name": "team", "namespace": "default"},
        "spec": {"max": {"cpu": 2, "memory": "8Gi"}, "min": {"cpu": 2, "memory": "8Gi"}}}
    kmock.objects["v1/pods", "default", "job"] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "job", "namespace": "default", "uid": "uid-job",
                     "labels": {"quota.scheduling.koordinator.sh/name": "team"},
                     "creationTimestamp": "2024-01-01T00:00:00Z"},
        "spec": {"schedulerName": NAME, "containers": [{"name": "c", "resources": {"requests": {"cpu": "4"}}}]},
        "status": {"phase": "Pending"}}
    runner = SecondaryScheduler(KubeClient(KubeConfig(server=str(kmock.url))), NAME,
                                lambda c: Scheduler(c, profile(None)), write_topology_status=False,
                                write_quota_status=False)  # our own status write is an ElasticQuota update too
    first = await asyncio.to_thread(runner.run_once)
    assert first[0].node is None and first[0].plugins == frozenset({"ElasticQuota"})
    assert await asyncio.to_thread(runner.run_once) == []
    api = driver_client(kmock)
    await asyncio.to_thread(api.post, "/api/v1/nodes", node("extra", 0) | {"kind": "Node"})
    assert await asyncio.to_thread(runner.run_once) == []  # NodeResourcesFit's event, not ElasticQuota's
    kmock.objects[quotas, "default", "team"].patch({"spec": {"max": {"cpu": 8, "memory": "8Gi"}}})
    again = await asyncio.to_thread(runner.run_once)
    assert [p.pod for p in again] == ["default/job"] and again[0].node is not None


async def test_run_puts_a_pod_that_failed_behind_one_that_has_waited_since(km: kmock.KubernetesEmulator) -> None:
    """Fair queuing in `run`: X (the older pod) failed and came back with a new queue timestamp; when room for one
    pod opens, Y — created before X came back — goes first, where creation order alone would have put X."""
    for name in ("gpu-a", "gpu-b", "cpu-only"):
        km.objects["v1/nodes", None, name].patch({"status": {"allocatable": {"cpu": "4" if name == "gpu-a" else "1"}}})

    def cpu_pod(name: str, created: str, node_name: str = "") -> dict[str, Any]:
        p = gpu_pod(name, {"cpu": "4"}, node_name)
        p["metadata"]["creationTimestamp"] = created
        p["spec"]["schedulerName"] = NAME
        return p

    km.objects["v1/pods", "default", "r"] = cpu_pod("r", "2022-01-01T00:00:00Z", "gpu-a")
    km.objects["v1/pods", "default", "x"] = cpu_pod("x", "2023-01-01T00:00:00Z")
    runner = SecondaryScheduler(KubeClient(KubeConfig(server=str(km.url))), NAME,
                                lambda c: Scheduler(c, profile(None)), write_topology_status=False)
    assert [(p.pod, p.node) for p in await asyncio.to_thread(runner.run_once)] == [("default/x", None)]
    y = cpu_pod("y", "2024-01-01T00:00:00Z")
    km.objects["v1/pods", "default", "y"] = y
    km.objects["v1/pods", "default", "r"].delete()  # room for one: x is moved (Pod Delete), y is new
    placed = {p.pod: p.node for p in await asyncio.to_thread(runner.run_once)}
    assert placed == {"default/y": "gpu-a", "default/x": None}
    x = km.objects["v1/pods", "default", "x"].raw
    assert [p["metadata"]["name"] for p in priority_order([x, y])] == ["x", "y"]  # creation order alone
