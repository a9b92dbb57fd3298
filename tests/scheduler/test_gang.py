"""Gangs: PodGroup and annotation forms, GangGroups, Strict/NonStrict, all-or-nothing and job-level preemption."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.cli import main
from scheduler.cluster import build_cluster
from scheduler.framework import Profile, Scheduler
from scheduler.gang.model import collect_gangs, gang_from_pod, gang_groups, parse_go_duration
from scheduler.gang.planner import plan_jobs
from scheduler.interfaces import Placement, ReservePlugin, Unschedulable
from scheduler.plugins.fit import NodeResourcesFit

PG_CRD = "scheduling.sigs.k8s.io_podgroups.yaml"
G = "gang.scheduling.koordinator.sh"


def node(name: str, cpu: str = "4") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {}},
            "status": {"allocatable": {"cpu": cpu, "memory": "16Gi", "pods": "110"}}}


def pod(name: str, cpu: str = "1", *, label_group: str | None = None, ann: dict[str, str] | None = None,
        node_name: str | None = None, priority: int | None = None, labels: dict[str, str] | None = None
        ) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default", "labels": dict(labels or {}),
                            "annotations": dict(ann or {})}
    if label_group:
        meta["labels"]["pod-group.scheduling.sigs.k8s.io"] = label_group
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
    if node_name:
        spec["nodeName"] = node_name
    if priority is not None:
        spec["priority"] = priority
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
            "status": {"phase": "Running" if node_name else "Pending"}}


def podgroup(name: str, min_member: int, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default", "annotations": dict(annotations or {})},
            "spec": {"minMember": min_member, "scheduleTimeoutSeconds": 30}}


def ann_gang(name: str, min_available: int, **extra: str) -> dict[str, str]:
    return {f"{G}/name": name, f"{G}/min-available": str(min_available), **{f"{G}/{k}": v for k, v in extra.items()}}


def run(objs: list[dict[str, Any]], pods: list[dict[str, Any]], **kw: Any
        ) -> tuple[dict[str, Placement], list[dict[str, Any]], Any]:
    cluster = build_cluster(objs)
    placements, preemptions = plan_jobs(Scheduler(cluster, Profile([NodeResourcesFit()], [], [])), pods, **kw)
    return {p.pod: p for p in placements}, preemptions, cluster


def test_go_durations() -> None:
    assert parse_go_duration("1h30m") == 5400 and parse_go_duration("1.5s") == 1.5
    assert parse_go_duration("300ms") == 0.3 and parse_go_duration("10") is None and parse_go_duration("x") is None


def test_annotation_gang_settings_and_defaults() -> None:
    g = gang_from_pod(pod("a", ann=ann_gang("g", 3, **{"total-number": "2", "mode": "Bogus",
                                                      "waiting-time": "2m", "match-policy": "only-waiting"})))
    assert g is not None and g.id == "default/g" and g.min_member == 3 and g.total_number == 3
    assert g.mode == "Strict" and g.wait_seconds == 120 and g.match_policy == "only-waiting"
    assert gang_from_pod(pod("b", ann={f"{G}/name": "g"})) is None  # min-available required
    legacy = gang_from_pod(pod("c", labels={"pod-group.scheduling.sigs.k8s.io/name": "old",
                                            "pod-group.scheduling.sigs.k8s.io/min-available": "2"}))
    assert legacy is not None and legacy.id == "default/old" and legacy.min_member == 2


def test_podgroup_gang_all_or_nothing(validate_crd: Callable[[str, dict[str, Any]], None]) -> None:
    pg = podgroup("job", 3)
    validate_crd(PG_CRD, pg)
    pods = [pod(f"w{i}", cpu="2", label_group="job") for i in range(3)]
    got, _, cluster = run([node("n1"), node("n2"), pg], pods)
    assert [got[f"default/w{i}"].node for i in range(3)] == ["n1", "n1", "n2"]
    # 3 × 3 CPU on 2 × 4 CPU does not fit: the two assumed members are rolled back
    pods = [pod(f"w{i}", cpu="3", label_group="job") for i in range(3)]
    got, pre, cluster = run([node("n1"), node("n2"), pg], pods)
    assert all(p.node is None for p in got.values()) and pre == []
    assert 'GangGroup "default/job" gets rejected due to member Pod "default/w2"' in got["default/w2"].reason
    assert all(not n.pods and n.requested.get("cpu", 0) == 0 for n in cluster.nodes.values())
    assert "nodeName" not in pods[0]["spec"]


def test_child_pods_not_collected_enough() -> None:
    got, _, _ = run([node("n1"), podgroup("job", 3)], [pod("w0", label_group="job"),
                                                             pod("w1", label_group="job")])
    assert all(p.node is None and "child pod not collect enough" in p.reason for p in got.values())
    got, _, _ = run([node("n1")], [pod("x", label_group="missing")])
    assert got["default/x"].node is None and "not found" in got["default/x"].reason


def test_strict_vs_nonstrict() -> None:
    # total 3, min 2; the middle pod can never fit
    def pods(mode: str) -> list[dict[str, Any]]:
        extra = {"mode": mode, "total-number": "3"}
        return [pod("a", ann=ann_gang("g", 2, **extra)), pod("huge", cpu="64", ann=ann_gang("g", 2, **extra)),
                pod("b", ann=ann_gang("g", 2, **extra))]
    got, _, _ = run([node("n1")], pods("Strict"))
    assert all(p.node is None for p in got.values())
    assert 'member Pod "default/huge"' in got["default/b"].reason
    got, _, _ = run([node("n1")], pods("NonStrict"))
    assert got["default/a"].node == "n1" and got["default/b"].node == "n1" and got["default/huge"].node is None
    assert got["default/a"].annotations["internal.scheduling.koordinator.sh/bind-gang-member-count"] == "2"
    # NonStrict but below min after all tries: timed out, everything released
    extra = {"mode": "NonStrict", "waiting-time": "45s"}
    got, _, cluster = run([node("n1")], [pod("a", ann=ann_gang("h", 2, **extra)),
                                         pod("z", cpu="64", ann=ann_gang("h", 2, **extra))])
    assert got["default/a"].node is None and "timed out after 45s" in got["default/a"].reason
    assert not cluster.nodes["n1"].pods


def test_gang_group_is_all_or_nothing_across_gangs(validate_crd: Callable[[str, dict[str, Any]], None]) -> None:
    groups = json.dumps(["default/ga", "default/gb"])
    pga, pgb = podgroup("ga", 1, {f"{G}/groups": groups}), podgroup("gb", 2, {f"{G}/groups": groups})
    validate_crd(PG_CRD, pga)
    cluster = build_cluster([node("n1"), pga, pgb])
    gangs = collect_gangs([pod("a0", label_group="ga")], cluster)
    assert gang_groups(gangs)["default/ga"].id == "default/ga,default/gb"
    ok = [pod("a0", label_group="ga"), pod("b0", label_group="gb"), pod("b1", label_group="gb")]
    got, _, _ = run([node("n1"), pga, pgb], ok)
    assert all(p.node == "n1" for p in got.values())
    assert got["default/b1"].annotations["internal.scheduling.koordinator.sh/bind-gang-group-id"] == \
        "default/ga,default/gb"
    bad = [pod("a0", label_group="ga"), pod("b0", label_group="gb"), pod("b1", cpu="8", label_group="gb")]
    got, _, cluster = run([node("n1"), pga, pgb], bad)
    assert all(p.node is None for p in got.values()) and not cluster.nodes["n1"].pods


def test_plain_pods_and_gangs_keep_input_order() -> None:
    got, _, _ = run([node("n1", cpu="2")], [pod("solo"), pod("g0", ann=ann_gang("g", 2)),
                                            pod("g1", ann=ann_gang("g", 2))])
    assert got["default/solo"].node == "n1"
    assert got["default/g0"].node is None  # only 1 CPU left for a gang of 2


class Refuser:
    """A reserve plugin refusing a given pod, recording unreserve calls."""

    name = "Refuser"

    def __init__(self, refuse: str) -> None:
        self.refuse = refuse
        self.unreserved: list[str] = []

    def reserve(self, pod: dict[str, Any], node: Any, cluster: Any) -> dict[str, str]:
        if pod["metadata"]["name"] == self.refuse:
            raise Unschedulable("refused")
        return {"example/reserved": node.name}

    def unreserve(self, pod: dict[str, Any], node: Any, cluster: Any) -> None:
        self.unreserved.append(pod["metadata"]["name"])


def test_rollback_calls_unreserve_and_drops_annotations() -> None:
    refuser = Refuser("w1")
    assert isinstance(refuser, ReservePlugin)
    cluster = build_cluster([node("n1"), podgroup("job", 2)])
    pods = [pod("w0", label_group="job"), pod("w1", label_group="job")]
    placements, _ = plan_jobs(Scheduler(cluster, Profile([NodeResourcesFit()], [], [refuser])), pods)
    assert [p.node for p in placements] == [None, None]
    assert refuser.unreserved == ["w0"]
    assert "example/reserved" not in pods[0]["metadata"]["annotations"]


def test_job_level_preemption_minimal_cost() -> None:
    objs = [node("n1", cpu="2"), node("n2", cpu="2"), node("n3", cpu="2"), podgroup("job", 2),
            pod("low-a", cpu="2", node_name="n1", priority=10),
            pod("mid-b", cpu="2", node_name="n2", priority=50),
            pod("low-c1", cpu="1", node_name="n3", priority=10, labels={
                "scheduling.koordinator.sh/questioned-object-key": "job-c"}),
            pod("low-c2", cpu="1", node_name="n3", priority=10, labels={
                "scheduling.koordinator.sh/questioned-object-key": "job-c"})]
    pods = [pod(f"hp{i}", cpu="2", label_group="job", priority=100) for i in range(2)]
    got, pre, cluster = run(objs, pods)
    assert all(p.node is None for p in got.values())
    # cost: n1 = rank(10) = 0, n3 = one job at rank 0 = 0, n2 = rank(50) = 1 → n1 and n3 win over the mid pod
    assert pre == [{"pods": ["default/hp0", "default/hp1"], "victims": ["default/low-a", "default/low-c1",
                                                                         "default/low-c2"],
                    "nominatedNodes": {"default/hp0": "n1", "default/hp1": "n3"}}]
    assert "default/mid-b" in cluster.nodes["n2"].pods
    assert "preemption: preempting 3 pod(s)" in got["default/hp0"].reason


def test_preemption_reprieves_unneeded_victims_and_respects_never() -> None:
    objs = [node("n1", cpu="4"), podgroup("job", 1), pod("low-a", cpu="1", node_name="n1", priority=1),
            pod("low-b", cpu="2", node_name="n1", priority=2)]
    got, pre, _ = run(objs, [pod("hp", cpu="3", label_group="job", priority=9)])
    assert pre[0]["victims"] == ["default/low-b"]  # low-b re-added first does not fit; low-a is reprieved
    never = pod("hp", cpu="3", label_group="job", priority=9)
    never["spec"]["preemptionPolicy"] = "Never"
    got, pre, _ = run(objs, [never])
    assert pre == [] and "preemptionPolicy=Never" in got["default/hp"].reason


def test_simulate_reads_priority_classes_given_with_the_pods(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A PriorityClass in --pods gives the job its priority: the lower-priority pod filling the node is preempted."""
    low = pod("low", cpu="4", node_name="n1")
    low["spec"]["priorityClassName"] = "batch"
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump_all([node("n1"), low]))
    job = [pod(f"hp{i}", cpu="2", label_group="job") for i in range(2)]
    for p in job:
        p["spec"]["priorityClassName"] = "urgent"
    classes = [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                "value": value} for name, value in (("urgent", 1000), ("batch", 10))]
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all([*classes, podgroup("job", 2), *job]))
    assert main(["simulate", "--cluster", str(tmp_path / "cluster.yaml"), "--pods", str(tmp_path / "pods.yaml"),
                 "-o", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert [p["victims"] for p in result["preemptions"]] == [["default/low"]]
