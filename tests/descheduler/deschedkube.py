"""The API double (kmock) seeded for `koord-descheduler run`: the collections it lists and watches, the Eviction
API with PodDisruptionBudgets (kubedouble.emulate_eviction), Leases, and a small hot cluster: n1 at 80% cpu by its
NodeMetric (8 ReplicaSet pods of 400m), n2 and n3 at 10%; LowNodeLoad low 30% / high 50% cpu."""

from __future__ import annotations

from typing import Any

import kmock

from apis.client.kubeapi import KubeClient, KubeConfig
from apis.core.metatime import parse_time
from scheduler.descheduler.config.decode import parse_config
from scheduler.descheduler.server import InCluster

from deschedbuild import NOW, config, node, node_metrics, pod
from kubedouble import PDBS, emulate_eviction, emulate_put

NM = "slo.koordinator.sh/v1alpha1/nodemetrics"
LEASES = "coordination.k8s.io/v1/leases"
EVENTS = "v1/events"
RESOURCES = ("v1/nodes", "v1/pods", NM, PDBS, "scheduling.k8s.io/v1/priorityclasses", "v1/persistentvolumeclaims",
             "apps/v1/replicasets", "apps/v1/deployments", "apps/v1/statefulsets", "v1/replicationcontrollers",
             EVENTS, LEASES)
CLOCK = (parse_time(NOW) or 0.0) + 30  # the rounds' clock: the NodeMetrics are 30 s old
HOT = [f"web-{i}" for i in range(8)]


def seed(km: kmock.KubernetesEmulator, *, taint_targets: bool = False, update_time: str = NOW) -> None:
    for res in RESOURCES:
        km.resources[res] = {}
    emulate_eviction(km)
    emulate_put(km, LEASES)
    nodes = [node(n, 4000, 16 << 30, 110) for n in ("n1", "n2", "n3")]
    if taint_targets:  # nothing tolerates it: no pod of n1 fits elsewhere
        for n in nodes[1:]:
            n["spec"]["taints"] = [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]
    pods = [pod(name, 400, 1 << 30, "n1", labels={"app": "web"}) for name in HOT]
    pods += [pod("other-2", 400, 1 << 30, "n2"), pod("other-3", 400, 1 << 30, "n3")]
    for i, p in enumerate(pods):
        p["metadata"]["creationTimestamp"] = f"2024-04-30T00:00:{i:02d}Z"
    for obj in nodes:
        km.objects["v1/nodes", None, obj["metadata"]["name"]] = obj
    for obj in pods:
        km.objects["v1/pods", "default", obj["metadata"]["name"]] = obj
    for obj in node_metrics(nodes, pods, update_time=update_time):
        km.objects[NM, None, obj["metadata"]["name"]] = obj


def pdb(km: kmock.KubernetesEmulator, allowed: int) -> None:
    km.objects[PDBS, "default", "web"] = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                                          "metadata": {"name": "web", "namespace": "default"},
                                          "spec": {"selector": {"matchLabels": {"app": "web"}}},
                                          "status": {"disruptionsAllowed": allowed}}


def descheduler_config(**top: Any) -> dict[str, Any]:
    return config({"cpu": 30}, {"cpu": 50}, top=top)


def client(km: kmock.KubernetesEmulator) -> KubeClient:
    return KubeClient(KubeConfig(server=str(km.url)))


def rounds(km: kmock.KubernetesEmulator, cfg: dict[str, Any] | None = None) -> InCluster:
    """Rounds that re-list the double first (the test changes it between rounds), at CLOCK."""
    return InCluster(client(km), parse_config(cfg or descheduler_config()), watch=False, clock=lambda: CLOCK)


def writes(km: kmock.KubernetesEmulator, suffix: str = "") -> list[Any]:
    """The requests that changed something (anything but GET), whose path ends with `suffix`."""
    return [r for r in km if r.method.value != "GET" and r.url.path.endswith(suffix)]


def evicted(km: kmock.KubernetesEmulator) -> list[str]:
    """The pods the double holds as terminating (an eviction it let through)."""
    return sorted(name for (res, _, name), obj in list(km.objects.items())
                  if res == "v1/pods" and obj.raw["metadata"].get("deletionTimestamp"))
