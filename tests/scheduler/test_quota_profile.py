"""ElasticQuotaProfile → its tree's root quota as koord-manager writes it (upstream profile_controller_test.go
CreateQuota cases, restated), and a profile's tree through `simulate`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from apis.scheduling.quota import PROFILE_API_VERSION, PROFILE_KIND
from scheduler.cli import main
from scheduler.cluster import build_cluster
from scheduler.elasticquota.model import Resources, parse_resources
from scheduler.elasticquota.profile import UNBOUNDED_MAX, apply_profiles, root_quota, with_tree_affinity

ZONE = "topology.kubernetes.io/zone"
P = "quota.scheduling.koordinator.sh/"


def node(name: str, zone: str, ready: bool = True, cpu: int = 10) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {ZONE: zone}},
            "status": {"allocatable": {"cpu": str(cpu), "memory": "1000", "ephemeral-storage": "1000", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def profile(name: str, zone: str, quota: str, ratio: str | None = None, quota_labels: dict[str, str] | None = None,
            labels: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"quotaName": quota, "nodeSelector": {"matchLabels": {ZONE: zone}}}
    if ratio is not None:
        spec["resourceRatio"] = ratio
    if quota_labels:
        spec["quotaLabels"] = quota_labels
    return {"apiVersion": PROFILE_API_VERSION, "kind": PROFILE_KIND,
            "metadata": {"name": name, "labels": labels or {}}, "spec": spec}


NODES = [node("node1", "cn-hangzhou-a"), node("node2", "cn-hangzhou-a", ready=False), node("node3", "cn-hangzhou-b")]


def annotation(quota: dict[str, Any], name: str) -> Resources:
    return parse_resources(json.loads(quota["metadata"]["annotations"][P + name]), name)


def res(cpu: int, n: int, pods: int | None = None) -> Resources:
    out = {"cpu": cpu * 1000, "memory": n, "ephemeral-storage": n}
    return {**out, "pods": pods} if pods is not None else out


def quota_min(quota: dict[str, Any]) -> Resources:
    return parse_resources(quota["spec"]["min"], "min")


def test_profile_makes_the_root_quota_of_its_tree(validate_crd: Any) -> None:
    cluster = build_cluster(NODES)
    quota = root_quota(profile("profile1", "cn-hangzhou-a", "profile1-root"), cluster)
    validate_crd("scheduling.sigs.k8s.io_elasticquotas.yaml", quota)
    assert quota["metadata"]["name"] == "profile1-root"
    assert quota_min(quota) == {"cpu": 20_000, "memory": 2000}
    assert quota["spec"]["max"] == {"cpu": UNBOUNDED_MAX, "memory": UNBOUNDED_MAX}
    assert annotation(quota, "total-resource") == res(20, 2000, 220)
    assert annotation(quota, "unschedulable-resource") == res(10, 1000, 110)  # node2 is not Ready
    # the controller's hash of "/profile1" (hash/fnv New64a, decimal; value from Go)
    assert quota["metadata"]["labels"] == {P + "profile": "profile1", P + "tree-id": "2862972692226656278",
                                           P + "is-root": "true"}
    other = root_quota(profile("profile2", "cn-hangzhou-b", "profile2-root"), cluster)
    assert quota_min(other) == {"cpu": 10_000, "memory": 1000}
    assert annotation(other, "unschedulable-resource") == {}
    assert other["metadata"]["labels"][P + "tree-id"] not in ("", "2862972692226656278")


def test_quota_labels_an_existing_quota_and_the_ratio() -> None:
    cluster = build_cluster(NODES)
    existing = {"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "ElasticQuota",
                "metadata": {"name": "profile1-root", "namespace": "default", "labels": {"a": "a"}},
                "spec": {"min": {"cpu": "5", "memory": "50"}}}
    quota = root_quota(profile("profile1", "cn-hangzhou-a", "profile1-root", quota_labels={ZONE: "cn-hangzhou-a"}),
                       cluster, existing)
    assert quota["metadata"]["labels"]["a"] == "a" and quota["metadata"]["labels"][ZONE] == "cn-hangzhou-a"
    assert quota_min(quota) == {"cpu": 20_000, "memory": 2000}
    assert existing["spec"]["min"] == {"cpu": "5", "memory": "50"}  # the given object is not changed
    scaled = root_quota(profile("profile1", "cn-hangzhou-a", "profile1-root", ratio="0.9"), cluster)
    assert quota_min(scaled) == {"cpu": 18_000, "memory": 1800}
    assert annotation(scaled, "unschedulable-resource") == res(9, 900, 99)
    for bad in ("1.5", "0", "x"):  # outside (0, 1]: no scaling
        assert quota_min(root_quota(profile("p", "cn-hangzhou-a", "q", ratio=bad), cluster))["cpu"] == 20_000
    keys = profile("p", "cn-hangzhou-a", "q")
    keys["metadata"]["annotations"] = {P + "resource-keys": '["cpu"]'}
    assert root_quota(keys, cluster)["spec"] == {"min": {"cpu": "20"}, "max": {"cpu": UNBOUNDED_MAX}}


def test_a_profile_without_its_required_fields_is_skipped() -> None:
    cluster = build_cluster(NODES)
    no_selector = profile("p", "x", "q")
    del no_selector["spec"]["nodeSelector"]
    refused = apply_profiles(cluster, [no_selector, profile("r", "x", "")])
    assert refused == [("default/p", "spec.nodeSelector: required (a label selector)"),
                       ("default/r", "spec.quotaName: required")]
    assert cluster.elastic_quotas == []


def test_simulate_schedules_within_the_profile_tree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The profile's nodes (zone a: 20 cpu) are its tree's total, taken from the default tree; a team quota in
    the tree borrows up to the tree's total and no further, on the profile's nodes."""
    tree = {P + "tree-id": "zone-a"}
    team = {"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "ElasticQuota",
            "metadata": {"name": "team", "namespace": "default",
                         "labels": {**tree, P + "parent": "zone-a-root"}},
            "spec": {"min": {"cpu": "4", "memory": "0"}, "max": {"cpu": "100", "memory": "1M"}}}
    cdir = tmp_path / "cluster"
    cdir.mkdir()
    (cdir / "objs.yaml").write_text(yaml.safe_dump_all([
        *(node(f"a{i}", "cn-hangzhou-a") for i in range(2)), node("b0", "cn-hangzhou-b"),
        profile("zone-a", "cn-hangzhou-a", "zone-a-root", labels=tree, quota_labels={P + "is-parent": "true"}),
        team]))

    def pod(name: str, cpu: int, quota: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default",
                                                                "labels": {P + "name": quota}},
                "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": str(cpu)}}}]}}

    pods = [pod("t1", 8, "team"), pod("t2", 8, "team"), pod("t3", 8, "team"),
            pod("d1", 8, "koordinator-default-quota"), pod("d2", 8, "koordinator-default-quota")]
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all(pods))
    assert main(["simulate", "--cluster", str(cdir), "--pods", str(tmp_path / "pods.yaml"), "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    by = {p["pod"]: p for p in out["placements"]}
    # the manager's pod webhook keeps the tree's pods on the profile's nodes
    assert {by["default/t1"]["node"], by["default/t2"]["node"]} == {"a0", "a1"}
    assert "quotaName: team" in by["default/t3"]["reason"]  # 24 > the tree's 20
    # the default quota is held to its max, so only the nodes limit the default tree's pods
    assert by["default/d1"]["node"] == "b0" and "Insufficient cpu" in by["default/d2"]["reason"]
    rows = {r["name"]: r for r in out["quotas"]}
    assert rows["zone-a-root"]["tree"] == "zone-a" and rows["zone-a-root"]["min"]["cpu"] == "20"
    assert out["rejectedQuotas"] == []


def test_tree_affinity_is_added_to_every_term_and_the_pod_given_is_kept() -> None:
    cluster = build_cluster(NODES)
    eqp = profile("zone-a", "cn-hangzhou-a", "zone-a-root", labels={P + "tree-id": "zone-a"})
    apply_profiles(cluster, [eqp])
    cluster.elastic_quotas.append({"metadata": {"name": "team", "labels": {P + "tree-id": "zone-a"}}})
    term = {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}
    given = {"kind": "Pod", "metadata": {"name": "x", "labels": {P + "name": "team"}},
             "spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                 "nodeSelectorTerms": [term]}}}}}
    plain = {"kind": "Pod", "metadata": {"name": "y", "namespace": "other"}, "spec": {}}
    [got, kept] = with_tree_affinity([given, plain], cluster, [eqp])
    terms = got["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "gpu", "operator": "Exists"},
                                           {"key": ZONE, "operator": "In", "values": ["cn-hangzhou-a"]}]}]
    assert term == {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]} and kept is plain
