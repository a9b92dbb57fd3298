"""kube-scheduler's node plugins koord-sched runs in every profile: NodeUnschedulable, TaintToleration, NodeAffinity
and NodePorts, restating kube's own unit cases (taint_toleration_test.go, node_affinity_test.go, node_ports_test.go,
node_unschedulable_test.go) through a whole scheduling cycle."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from apis.core.nodeaffinity import AffinityError, Requirement
from apis.core.taints import tolerates
from scheduler.cli import profile
from scheduler.cluster import build_cluster
from scheduler.config import parse_config
from scheduler.config.fields import ConfigError
from scheduler.framework import Scheduler
from scheduler.plugins.nodeports import conflicts, host_ports
from scheduler.plugins.normalize import default_normalize


def node(name: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"kind": "Node", "metadata": {"name": name, "labels": labels or {}}, "spec": spec,
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}}


def pod(name: str, **spec: Any) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}], **spec}}


def place(objects: list[dict[str, Any]], p: dict[str, Any], config: dict[str, Any] | None = None) -> Any:
    sched = Scheduler(build_cluster(copy.deepcopy(objects)), profile(parse_config(config) if config else None))
    return sched.schedule(copy.deepcopy(p))


@pytest.mark.parametrize(("toleration", "taint", "expected"), [
    ({"key": "foo", "operator": "Equal", "value": "bar", "effect": "NoSchedule"},
     {"key": "foo", "value": "bar", "effect": "NoSchedule"}, True),
    ({"key": "foo", "operator": "Equal", "value": "bar"}, {"key": "foo", "value": "bar", "effect": "NoExecute"},
     True),  # an empty effect tolerates every effect
    ({"key": "foo", "value": "bar"}, {"key": "foo", "value": "bar", "effect": "NoSchedule"}, True),  # Equal default
    ({"key": "foo", "operator": "Equal", "value": "baz"}, {"key": "foo", "value": "bar", "effect": "NoSchedule"},
     False),
    ({"key": "foo", "operator": "Exists", "effect": "NoSchedule"}, {"key": "foo", "value": "x", "effect": "NoSchedule"},
     True),
    ({"operator": "Exists"}, {"key": "any", "value": "x", "effect": "NoExecute"}, True),  # empty key with Exists
    ({"key": "foo", "operator": "Exists", "effect": "PreferNoSchedule"},
     {"key": "foo", "effect": "NoSchedule"}, False),
    ({"key": "other", "operator": "Exists"}, {"key": "foo", "effect": "NoSchedule"}, False),
])
def test_toleration_matches_taint_as_kube(toleration: dict[str, Any], taint: dict[str, Any], expected: bool) -> None:
    assert tolerates(toleration, taint) is expected


def test_a_cordoned_node_takes_only_pods_tolerating_its_taint() -> None:
    objects = [node("cordoned", unschedulable=True)]
    got = place(objects, pod("p"))
    assert got.node is None and "1 node(s) were unschedulable" in got.reason
    tolerant = pod("t", tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists",
                                      "effect": "NoSchedule"}])
    assert place(objects, tolerant).node == "cordoned"


def test_hard_taints_filter_and_name_the_taint() -> None:
    objects = [node("master", taints=[{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]),
               node("evicting", taints=[{"key": "dedicated", "value": "db", "effect": "NoExecute"}])]
    got = place(objects, pod("p"))
    assert got.node is None
    assert "node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }" in got.reason
    assert "node(s) had untolerated taint {dedicated: db}" in got.reason
    ok = pod("q", tolerations=[{"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoExecute"}])
    assert place(objects, ok).node == "evicting"
    objects.append(node("plain"))
    assert place(objects, pod("r")).node == "plain"


def test_prefer_no_schedule_taints_score_in_reverse() -> None:
    # kube's TestTaintTolerationScore: 0, 1 and 2 intolerable PreferNoSchedule taints score 100, 50 and 0
    soft = [{"key": "k1", "value": "v1", "effect": "PreferNoSchedule"},
            {"key": "k2", "value": "v2", "effect": "PreferNoSchedule"}]
    objects = [node("a-two", taints=soft), node("b-one", taints=soft[:1]), node("c-none")]
    sched = Scheduler(build_cluster(copy.deepcopy(objects)), profile(None))
    plugin = sched.profile.by_name["TaintToleration"]
    cluster = sched.cluster
    raw = np.array([plugin.score(pod("p"), cluster.nodes[n], cluster) for n in ("a-two", "b-one", "c-none")])  # type: ignore[attr-defined]
    assert raw.tolist() == [2, 1, 0]
    assert default_normalize(raw, 2, reverse=True).tolist() == [0, 50, 100]
    got = sched.schedule(pod("p"))
    assert got.node == "c-none"
    # a PreferNoSchedule toleration (or one with no effect) takes the taint off the count
    tolerant = pod("t", tolerations=[{"key": "k1", "operator": "Exists"}, {"key": "k2", "operator": "Exists",
                                                                          "effect": "PreferNoSchedule"}])
    assert plugin.score(tolerant, cluster.nodes["a-two"], cluster) == 0  # type: ignore[attr-defined]


def test_node_selector_and_required_affinity() -> None:
    objects = [node("a", {"zone": "a", "gpus": "4"}), node("b", {"zone": "b", "gpus": "8"}), node("c", {"zone": "c"})]
    assert place(objects, pod("p", nodeSelector={"zone": "b"})).node == "b"
    got = place(objects, pod("p", nodeSelector={"zone": "x"}))
    assert got.node is None and "3 node(s) didn't match Pod's node affinity/selector" in got.reason
    # terms are ORed, requirements within a term ANDed; Gt compares integers; matchFields on the name
    terms = [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]},
                                   {"key": "gpus", "operator": "Gt", "values": ["4"]}]},
             {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["c"]}]}]
    required = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
    assert place(objects, pod("p", affinity=required)).node == "c"
    terms[0]["matchExpressions"][1] = {"key": "gpus", "operator": "Lt", "values": ["8"]}
    fits = Scheduler(build_cluster(copy.deepcopy(objects)), profile(None))
    assert {n for n in "abc" if fits.filter(pod("p", affinity=required), fits.cluster.nodes[n]) is None} == {"a", "c"}
    # an empty term matches nothing; a non-integer label never satisfies Gt
    empty = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{}]}}}
    assert place(objects, pod("p", affinity=empty)).node is None
    assert not Requirement.of({"key": "zone", "operator": "Gt", "values": ["1"]}).matches({"zone": "a"})


def test_invalid_affinity_is_one_line_and_no_placement() -> None:
    bad = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "Like", "values": ["a"]}]}]}}}
    got = place([node("a", {"zone": "a"})], pod("p", affinity=bad))
    assert got.node is None and got.reason == "0/1 nodes are available: invalid node affinity: zone: 'Like' is not " \
        "a valid operator."
    with pytest.raises(AffinityError):
        Requirement.of({"key": "n", "operator": "Gt", "values": ["1_0"]})  # Go's ParseInt refuses what int() takes


def test_preferred_affinity_scores_normalized_by_the_best_node() -> None:
    # kube's TestNodeAffinityPriority shape: weights 2 and 5 matched on different nodes → 40 and 100
    objects = [node("a", {"disk": "ssd"}), node("b", {"gpu": "yes"}), node("c")]
    preferred = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 2, "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}},
        {"weight": 5, "preference": {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}}]}}
    sched = Scheduler(build_cluster(copy.deepcopy(objects)), profile(None))
    got = sched.schedule(pod("p", affinity=preferred))
    assert got.node == "b"
    scores = dict(got.scores)
    assert scores["b"] - scores["a"] == 2 * (100 - 40) and scores["a"] - scores["c"] == 2 * 40


def test_preferred_normalization_uses_the_best_node_filter_passes() -> None:
    # the node with the heaviest preference is tainted: the scale comes from the nodes that pass Filter
    objects = [node("tainted", {"tier": "gold"}, taints=[{"key": "x", "effect": "NoSchedule"}]),
               node("silver", {"tier": "silver"}), node("plain")]
    preferred = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 10, "preference": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}]}},
        {"weight": 1, "preference": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["silver"]}]}}]}}
    fast = Scheduler(build_cluster(copy.deepcopy(objects)), profile(None))
    slow = Scheduler(build_cluster(copy.deepcopy(objects)), profile(None))
    a = fast.schedule(pod("p", affinity=preferred))
    with slow.cycle(pod("p", affinity=preferred)) as cycle:
        b = cycle.run_each()
    assert a.node == b.node == "silver"
    assert dict(a.scores)["silver"] - dict(a.scores)["plain"] == 2 * 100  # silver is the best that fits: 100
    assert dict(a.scores)["silver"] == dict(b.scores)["silver"]


def test_added_affinity_from_the_profile() -> None:
    config = {"profiles": [{"pluginConfig": [{"name": "NodeAffinity", "args": {"addedAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["batch"]}]}]}}}}]}]}
    objects = [node("a", {"pool": "online"}), node("b", {"pool": "batch"})]
    assert place(objects, pod("p"), config).node == "b"
    got = place(objects[:1], pod("p"), config)
    assert "1 node(s) didn't match scheduler-enforced node affinity" in got.reason
    bad = copy.deepcopy(config)
    bad["profiles"][0]["pluginConfig"][0]["args"]["addedAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] \
        = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In"}]}]}
    with pytest.raises(ConfigError, match=r"addedAffinity: pool: In needs values"):
        parse_config(bad)


def test_host_ports_conflict_as_kube() -> None:
    wanted = host_ports(pod("p", containers=[{"name": "c", "ports": [{"containerPort": 80, "hostPort": 8080}]}]))
    assert wanted == {("0.0.0.0", "TCP", 8080)}
    assert conflicts(wanted, frozenset({("10.0.0.1", "TCP", 8080)}))  # the wildcard meets every IP
    assert not conflicts(wanted, frozenset({("0.0.0.0", "UDP", 8080)}))  # another protocol
    specific = frozenset({("10.0.0.1", "TCP", 8080)})
    assert not conflicts(specific, frozenset({("10.0.0.2", "TCP", 8080)}))
    assert conflicts(specific, frozenset({("0.0.0.0", "TCP", 8080)}))
    sidecar = pod("s", initContainers=[{"name": "i", "restartPolicy": "Always",
                                        "ports": [{"containerPort": 9, "hostPort": 9000, "protocol": "UDP"}]}])
    assert host_ports(sidecar) == {("0.0.0.0", "UDP", 9000)}


def test_a_second_pod_on_the_same_host_port_goes_elsewhere() -> None:
    with_port = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}},
                                 "ports": [{"containerPort": 80, "hostPort": 8080}]}]}
    sched = Scheduler(build_cluster([node("a"), node("b")]), profile(None))
    first = sched.schedule(pod("one", **with_port))
    second = sched.schedule(pod("two", **with_port))
    assert {first.node, second.node} == {"a", "b"}
    third = sched.schedule(pod("three", **with_port))
    assert third.node is None and "2 node(s) didn't have free ports for the requested pod ports" in third.reason


def test_node_changes_reach_the_kept_facts() -> None:
    """Labels, taints and cordons are kept per node between cycles: a node updated in place or replaced is seen."""
    sched = Scheduler(build_cluster([node("a", {"zone": "a"}), node("b", {"zone": "a"})]), profile(None))
    wants_b = pod("p", nodeSelector={"zone": "b"})
    assert sched.schedule(copy.deepcopy(wants_b)).node is None
    a = sched.cluster.nodes["a"]
    a.obj["metadata"]["labels"]["zone"] = "b"  # edited in place, then reported (as the informer's update does)
    a.changed()
    assert sched.schedule(copy.deepcopy(wants_b)).node == "a"
    a.obj = {**a.obj, "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}
    got = sched.schedule(copy.deepcopy(wants_b))
    assert got.node is None and "node(s) had untolerated taint {k: }" in got.reason
    sched.cluster.nodes["b"].obj = {**sched.cluster.nodes["b"].obj, "spec": {"unschedulable": True}}
    assert "node(s) were unschedulable" in sched.schedule(pod("q")).reason
