"""`koord-descheduler run` driving the MigrationController against the API double (kmock): a round's evictions
become PodMigrationJobs created in the cluster (within maxMigratingPerNode), and the plugin's controller, run beside
the rounds, carries them out through the Eviction API (EvictDirectly)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import kmock
import pytest
from test_migration_kube import emulate_status

from apis.core.metatime import rfc3339
from scheduler.descheduler.config.decode import parse_config
from scheduler.descheduler.migration import controller
from scheduler.descheduler.migration.plugin import MigrationController
from scheduler.descheduler.server import InCluster

from deschedbuild import config
from deschedkube import client, evicted, seed, writes
from kubedouble import emulate_discovery, emulate_put, emulate_scale
from migbuild import owned

JOBS = "scheduling.koordinator.sh/v1alpha1/podmigrationjobs"


def _in_cluster(kmock: kmock.KubernetesEmulator, monkeypatch: pytest.MonkeyPatch,
                args: dict[str, Any]) -> InCluster:
    """A hot n1 and rounds whose evictions are MigrationController jobs with these args (the controller's resync
    shortened)."""
    seed(kmock, update_time=rfc3339(time.time()))  # the jobs' ttl runs on the wall clock: so does this round
    kmock.resources[JOBS] = {}
    kmock.resources["events.k8s.io/v1/events"] = {}
    emulate_status(kmock, JOBS)
    emulate_put(kmock, JOBS, status_subresource=True)
    monkeypatch.setattr(controller, "RESYNC", 0.05)
    cfg = config({"cpu": 30}, {"cpu": 50}, top={"deschedulingInterval": "1h"})
    prof = cfg["profiles"][0]
    prof["plugins"]["evict"]["enabled"] = prof["plugins"]["filter"]["enabled"] = [{"name": "MigrationController"}]
    prof["pluginConfig"].append({"name": "MigrationController", "args": args})
    return InCluster(client(kmock), parse_config(cfg), watch=False)


async def test_jobs_created_by_a_round_are_carried_out_by_the_controller(kmock: kmock.KubernetesEmulator,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    r = _in_cluster(kmock, monkeypatch, {"defaultJobMode": "EvictDirectly"})
    stop = threading.Event()
    running = asyncio.create_task(asyncio.to_thread(r.run, stop))
    try:
        deadline = asyncio.get_running_loop().time() + 5
        while len(evicted(kmock)) < 2:
            assert asyncio.get_running_loop().time() < deadline, "the jobs were not carried out"
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await running
    created = [w.data for w in writes(kmock, "/podmigrationjobs")]
    assert len(created) == 2  # maxMigratingPerNode: 2
    assert sorted(j["spec"]["podRef"]["name"] for j in created) == evicted(kmock)
    assert all(j["spec"]["mode"] == "EvictDirectly" for j in created)
    assert len(writes(kmock, "/eviction")) == 2
    # upstream's evictor interpreter counts each eviction the controller made, the job's trigger as the strategy
    assert r.metrics.count("success", "LowNodeLoad") == 2 and r.metrics.count("error") == 0
    assert b'descheduler_pods_evicted{namespace="default",node="n1",result="success",strategy="LowNodeLoad"} 2' \
        in r.metrics.exposition()



@pytest.mark.parametrize("policy", ["Delete", "SoftEviction"])
async def test_the_eviction_policy_decides_how_the_controller_evicts(kmock: kmock.KubernetesEmulator,
                                                                     monkeypatch: pytest.MonkeyPatch,
                                                                     policy: str) -> None:
    """MigrationControllerArgs.evictionPolicy (spec §8.5): Delete sends the pod's DELETE, SoftEviction only annotates
    the pod (`scheduling.koordinator.sh/soft-eviction`, another component deletes it); neither uses the Eviction API."""
    r = _in_cluster(kmock, monkeypatch, {"defaultJobMode": "EvictDirectly", "evictionPolicy": policy})
    stop = threading.Event()
    running = asyncio.create_task(asyncio.to_thread(r.run, stop))
    pods_written: list[Any] = []
    method = "DELETE" if policy == "Delete" else "PATCH"
    try:
        deadline = asyncio.get_running_loop().time() + 5
        while True:
            pods_written = [w for w in kmock if w.method.value == method and "/pods/" in w.url.path]
            if len(pods_written) >= 2:
                break
            assert asyncio.get_running_loop().time() < deadline, "the jobs' pods were not evicted"
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await running
    created = sorted(j.data["spec"]["podRef"]["name"] for j in writes(kmock, "/podmigrationjobs"))
    assert sorted(w.url.path.rsplit("/", 1)[1] for w in pods_written) == created
    assert not writes(kmock, "/eviction")
    if policy == "SoftEviction":
        for w in pods_written:
            value = json.loads(w.data["metadata"]["annotations"]["scheduling.koordinator.sh/soft-eviction"])
            assert {"timestamp", "initiator", "reason"} <= set(value)


async def test_workloads_are_found_in_the_listed_view_without_type_meta(kmock: kmock.KubernetesEmulator,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The API server's list items carry no apiVersion or kind: `run` fills them in from the collection, so the
    MigrationController finds a pod's ReplicaSet, ReplicationController and Kruise Advanced StatefulSet (told
    apart from an apps/v1 StatefulSet of the same name by its group); an owner of another kind is not in the view
    and, its group not served here (discovery 404), refuses the pod, as a missing owner does."""
    r = _in_cluster(kmock, monkeypatch, {"dryRun": True})
    kmock.resources["apps.kruise.io/v1beta1/statefulsets"] = {}
    owners = {"ReplicaSet": ("apps/v1", "apps/v1/replicasets"),
              "ReplicationController": ("v1", "v1/replicationcontrollers"),
              "StatefulSet": ("apps.kruise.io/v1beta1", "apps.kruise.io/v1beta1/statefulsets"),
              "Rollout": ("argoproj.io/v1alpha1", "")}
    pods = {}
    for kind, (api_version, resource) in owners.items():
        uid = f"{kind.lower()}-1"
        if resource:  # as listed: metadata and spec only
            kmock.objects[resource, "default", uid] = {"metadata": {"name": uid, "namespace": "default", "uid": uid},
                                                       "spec": {"replicas": 10}}
        pods[kind] = owned(f"pod-of-{kind.lower()}", "n1", uid, kind=kind, api_version=api_version)
    kmock.objects["apps/v1/statefulsets", "default", "statefulset-1"] = {  # apps/v1, same name, another uid
        "metadata": {"name": "statefulset-1", "namespace": "default", "uid": "other"}, "spec": {"replicas": 1}}
    assert (await asyncio.to_thread(r.round)).error is None
    (plugin,) = r.controllers()
    assert isinstance(plugin, MigrationController)
    assert {kind: await asyncio.to_thread(plugin.filter, p) for kind, p in pods.items()} == {
        "ReplicaSet": True, "ReplicationController": True, "StatefulSet": True, "Rollout": False}


UD = "apps.kruise.io/v1alpha1/uniteddeployments"


async def test_an_owner_of_another_kind_is_read_through_its_scale_subresource(
        kmock: kmock.KubernetesEmulator, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Upstream getScaleController: the owner's kind mapped to its resource by discovery, then its Scale read:
    spec.replicas decides (10 replicas may migrate, 1 may not: expectedReplicas), status.selector finds the
    ReplicaSets it controls whose pods count as its own (maxUnavailablePerWorkload). A kind without a scale
    subresource (Kruise's Advanced DaemonSet) or of a group discovery does not know refuses the pod with one log
    line per kind, never an error; discovery is kept per group/version, and each owner is read once per view."""
    emulate_scale(kmock, UD, "UnitedDeployment")
    kmock.resources["apps.kruise.io/v1alpha1/daemonsets"] = {"kind": "DaemonSet", "namespaced": True,
                                                             "subresources": {"status"}}
    emulate_discovery(kmock, "argoproj.io/v1alpha1")  # not served: 404
    r = _in_cluster(kmock, monkeypatch, {"dryRun": True, "maxUnavailablePerWorkload": 1})
    for name, replicas in (("ud-10", 10), ("ud-1", 1), ("ud-busy", 10)):
        kmock.objects[UD, "default", name] = {"metadata": {"name": name, "namespace": "default", "uid": name},
                                              "spec": {"replicas": replicas},
                                              "status": {"replicas": replicas, "selector": f"ud={name}"}}
    # ud-busy's ReplicaSet, matching its selector: one of its pods is not Ready, so no other may migrate
    kmock.objects["apps/v1/replicasets", "default", "rs-busy"] = {
        "metadata": {"name": "rs-busy", "namespace": "default", "uid": "rs-busy", "labels": {"ud": "ud-busy"},
                     "ownerReferences": [{"apiVersion": UD.rsplit("/", 1)[0], "kind": "UnitedDeployment",
                                          "name": "ud-busy", "uid": "ud-busy", "controller": True}]},
        "spec": {"replicas": 10}}
    unready = owned("busy-unready", "n2", "rs-busy", ready=False)
    kmock.objects["v1/pods", "default", "busy-unready"] = unready
    assert (await asyncio.to_thread(r.round)).error is None
    (plugin,) = r.controllers()
    assert isinstance(plugin, MigrationController)
    pods = {name: owned(f"pod-of-{name}", "n1", name, kind=kind, api_version=api_version)
            for name, kind, api_version in (("ud-10", "UnitedDeployment", "apps.kruise.io/v1alpha1"),
                                            ("ud-1", "UnitedDeployment", "apps.kruise.io/v1alpha1"),
                                            ("ud-gone", "UnitedDeployment", "apps.kruise.io/v1alpha1"),
                                            ("ud-busy", "UnitedDeployment", "apps.kruise.io/v1alpha1"),
                                            ("ro-1", "Rollout", "argoproj.io/v1alpha1"))}
    caplog.clear()
    for _ in range(2):
        assert {name: await asyncio.to_thread(plugin.filter, p) for name, p in pods.items()} == {
            "ud-10": True, "ud-1": False, "ud-gone": False, "ud-busy": False, "ro-1": False}
    workload = await asyncio.to_thread(plugin.checks.workload_of, pods["ud-busy"])
    assert workload is not None and (workload.replicas, workload.owner_uids) == (10, frozenset({"rs-busy"}))
    # a DaemonSet's pod never reaches the lookup (the pod constraints refuse it first); the lookup alone:
    ads = owned("pod-of-ads", "n1", "ads-1", kind="DaemonSet", api_version="apps.kruise.io/v1alpha1")
    assert await asyncio.to_thread(plugin.checks.workload_of, ads) is None
    said = [m for m in caplog.messages if "scale subresource" in m]
    assert len(said) == 2 and any("daemonsets has no scale subresource" in m for m in said) \
        and any("discovery of argoproj.io/v1alpha1" in m for m in said)
    asked = [q.url.path for q in kmock if q.method.value == "GET"]
    assert asked.count("/apis/apps.kruise.io/v1alpha1") == 1 and asked.count("/apis/argoproj.io/v1alpha1") == 1
    assert asked.count("/apis/apps.kruise.io/v1alpha1/namespaces/default/uniteddeployments/ud-10/scale") == 1
