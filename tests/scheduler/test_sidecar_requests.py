"""A pod with a native sidecar (an init container with restartPolicy Always) is counted as Kubernetes counts it
(resource.PodRequests: the sidecar runs beside the regular containers) by fit, LoadAware and ElasticQuota."""

from __future__ import annotations

from typing import Any

from scheduler.cli import simulate
from scheduler.cluster import build_cluster
from scheduler.framework import Profile, Scheduler
from scheduler.plugins.fit import NodeResourcesFit
from scheduler.plugins.fitplus import nonzero_requests
from scheduler.plugins.loadaware import LoadAware, LoadAwareArgs

QUOTA_LABEL = "quota.scheduling.koordinator.sh/name"


def node(name: str, cpu: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {}},
            "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}}}


def sidecar_pod(name: str, node_name: str = "", labels: dict[str, str] | None = None) -> dict[str, Any]:
    """1 CPU in the app container and 1 CPU in a native sidecar: Kubernetes counts 2 CPUs."""
    spec: dict[str, Any] = {
        "initContainers": [{"name": "proxy", "restartPolicy": "Always",
                            "resources": {"requests": {"cpu": "1", "memory": "128Mi"}}}],
        "containers": [{"name": "app", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": labels or {}, "annotations": {}},
            "spec": spec, "status": {"phase": "Running" if node_name else "Pending"}}


def test_fit_counts_the_sidecar_beside_the_app() -> None:
    cluster = build_cluster([node("small", "1500m"), node("exact", "2")])
    placed = Scheduler(cluster, Profile([NodeResourcesFit()], [], [])).schedule(sidecar_pod("p"))
    assert placed.node == "exact"  # 2 CPUs do not fit in 1.5 (1 CPU would have, and "small" sorts first)
    cluster = build_cluster([node("small", "1500m")])
    refused = Scheduler(cluster, Profile([NodeResourcesFit()], [], [])).schedule(sidecar_pod("p"))
    assert refused.node is None and refused.reason == "0/1 nodes are available: 1 Insufficient cpu."


def test_a_bound_sidecar_pod_holds_both_containers_cpu() -> None:
    cluster = build_cluster([node("n", "4"), sidecar_pod("running", node_name="n")])
    assert cluster.nodes["n"].requested["cpu"] == 2000
    assert cluster.nodes["n"].requested["memory"] == (1 << 30) + (128 << 20)


def test_loadaware_estimates_from_the_sidecar_pods_whole_request() -> None:
    estimate = LoadAware(LoadAwareArgs(), now=lambda: 0.0).estimate(sidecar_pod("p"))
    assert estimate["cpu"] == 1700  # 85% of 2 CPUs (of 1 CPU: 850)


def test_quota_used_counts_the_sidecar() -> None:
    quota = {"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "ElasticQuota",
             "metadata": {"name": "team", "namespace": "default", "labels": {}, "annotations": {}},
             "spec": {"max": {"cpu": 3, "memory": "8Gi"}, "min": {"cpu": 3, "memory": "8Gi"}}}
    cluster = build_cluster([node("n", "8"), quota])
    result = simulate(cluster, [sidecar_pod("a", labels={QUOTA_LABEL: "team"}),
                                sidecar_pod("b", labels={QUOTA_LABEL: "team"})])
    by = {p["pod"]: p for p in result["placements"]}
    assert by["default/a"]["node"] == "n"
    assert by["default/b"]["node"] is None and "Insufficient quotas" in by["default/b"]["reason"]
    used = {q["name"]: q for q in result["quotas"]}["team"]["used"]
    assert used["cpu"] == "2"


def test_scoring_defaults_each_container_missing_a_request_sidecars_included() -> None:
    """NodeResourcesFit/FitPlus scoring: 100m / 200Mi for each container without a request, the sidecar too."""
    p = sidecar_pod("p")
    for c in (*p["spec"]["containers"], *p["spec"]["initContainers"]):
        c["resources"] = {}
    assert nonzero_requests(p) == {"cpu": 200, "memory": 400 << 20}
