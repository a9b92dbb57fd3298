"""The scheduling cycle and the cluster model: fit, incremental node sums, reasons, the simulate command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.cluster import build_cluster, pod_requests
from scheduler.framework import LazyScores, Profile, Scheduler
from scheduler.plugins.fit import NodeResourcesFit


def node(name: str, cpu: str = "4", memory: str = "8Gi", pods: int = 110) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {}},
            "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": str(pods)}}}


def pod(name: str, cpu: str = "1", memory: str = "1Gi", node_name: str | None = None,
        init_cpu: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}
    if init_cpu:
        spec["initContainers"] = [{"name": "i", "resources": {"requests": {"cpu": init_cpu}}}]
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec,
            "status": {"phase": "Running" if node_name else "Pending"}}


def test_pod_requests_follow_kube_rules() -> None:
    assert pod_requests(pod("a", "500m", "1Gi")) == {"cpu": 500, "memory": 1 << 30}
    assert pod_requests(pod("b", "500m", "1Gi", init_cpu="2")) == {"cpu": 2000, "memory": 1 << 30}


def test_fit_spreads_nothing_but_fills_and_explains() -> None:
    cluster = build_cluster([node("n1", cpu="2"), node("n2", cpu="1"), pod("running", cpu="1", node_name="n1")])
    assert cluster.nodes["n1"].requested == {"cpu": 1000, "memory": 1 << 30, "pods": 1}
    sched = Scheduler(cluster, Profile([NodeResourcesFit()], [], []))
    first = sched.schedule(pod("p1"))
    assert first.node == "n1"  # equal scores: name order
    second = sched.schedule(pod("p2"))
    assert second.node == "n2"
    third = sched.schedule(pod("p3"))
    assert third.node is None and third.reason == "0/2 nodes are available: 2 Insufficient cpu."
    assert cluster.nodes["n1"].free("cpu") == 0 and cluster.nodes["n2"].free("cpu") == 0


def test_a_placement_builds_its_scores_only_when_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Placement.scores comes from the cycle's arrays on first read (building it was a third of a cycle)."""
    built: list[int] = []
    make = LazyScores._get
    monkeypatch.setattr(LazyScores, "_get", lambda self: built.append(1) or make(self))
    sched = Scheduler(build_cluster([node("n1"), node("n2")]), Profile([NodeResourcesFit()], [], []))
    placed = sched.schedule(pod("p1"))
    assert placed.node == "n1" and built == []
    assert dict(placed.scores) == {"n1": 0, "n2": 0} and built


def test_simulate_command(tmp_path: Path) -> None:
    (tmp_path / "cluster").mkdir()
    (tmp_path / "cluster/nodes.yaml").write_text(yaml.safe_dump_all([node("a", cpu="1"), node("b", cpu="8")]))
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all([pod("big", cpu="4"), pod("huge", cpu="64")]))
    out = subprocess.run([sys.executable, "-m", "scheduler.cli", "simulate", "--cluster", str(tmp_path / "cluster"),
                          "--pods", str(tmp_path / "pods.yaml"), "-o", "json"], capture_output=True, text=True,
                         timeout=60, check=True)
    result = json.loads(out.stdout)
    assert result["preemptions"] == []
    placed = {p["pod"]: p for p in result["placements"]}
    assert placed["default/big"]["node"] == "b"
    assert placed["default/huge"]["node"] is None and "Insufficient cpu" in placed["default/huge"]["reason"]
    text = subprocess.run([sys.executable, "-m", "scheduler.cli", "simulate", "--cluster", str(tmp_path / "cluster"),
                           "--pods", str(tmp_path / "pods.yaml")], capture_output=True, text=True, timeout=60,
                          check=True).stdout
    assert text.splitlines()[0].split() == ["default/big", "->", "b"]


def test_malformed_inputs_get_a_reason_and_leave_the_cluster_alone() -> None:
    bad_node = node("bad", cpu="8")
    bad_node["status"]["allocatable"]["example.com/foo"] = "lots"
    running_bad = pod("legacy", cpu="1", node_name="n1")
    running_bad["spec"]["containers"][0]["resources"]["requests"]["memory"] = "one gig"
    cluster = build_cluster([node("n1", cpu="2"), bad_node, running_bad])
    assert cluster.nodes["bad"].allocatable["cpu"] == 8000 and "example.com/foo" not in cluster.nodes["bad"].allocatable
    # the unparsable running pod is not fatal, and never under-counted: its unreadable memory holds all of n1's
    n1 = cluster.nodes["n1"]
    assert list(n1.pods) == ["default/legacy"] and n1.requested["cpu"] == 1000
    assert n1.requested["memory"] == n1.allocatable["memory"] > 0
    sched = Scheduler(cluster, Profile([NodeResourcesFit()], [], []))
    weird = pod("weird", cpu="abc")
    assert sched.schedule(weird).reason == ("invalid pod: spec.containers['c'].resources.requests.cpu: 'abc' is not a "
                                            "Kubernetes quantity")
    assert sched.schedule(pod("fine", cpu="4")).node == "bad"
