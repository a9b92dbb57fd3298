"""kube-scheduler's InterPodAffinity, restating its unit cases (interpodaffinity filtering_test.go
TestRequiredAffinitySingleNode / TestRequiredAffinityMultipleNodes, scoring_test.go TestPreferredAffinity /
TestPreferredAffinityWithHardPodAffinitySymmetricWeight) on the plugin, then through whole cycles."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from kubepodfixtures import HOST, filter_all, node, pod, scores

from scheduler.cli import main, profile
from scheduler.cluster import build_cluster
from scheduler.config import parse_config
from scheduler.config.fields import ConfigError
from scheduler.framework import Scheduler
from scheduler.plugins.interpodaffinity import (
    REASON_AFFINITY,
    REASON_ANTI,
    REASON_EXISTING_ANTI,
    InterPodAffinity,
)

OK = None
SEC_S1 = {"security": "S1"}
SEC_S2 = {"security": "S2"}
M1 = node("machine1", region="r1", zone="z11", **{HOST: "machine1"})


def term(key: str, op: str = "In", values: tuple[str, ...] = ("S1",), topology: str = "region",
         **extra: Any) -> dict[str, Any]:
    expr: dict[str, Any] = {"key": key, "operator": op}
    if values:
        expr["values"] = list(values)
    return {"labelSelector": {"matchExpressions": [expr]}, "topologyKey": topology, **extra}


def affinity(required: list[dict[str, Any]] | None = None, anti: list[dict[str, Any]] | None = None,
             preferred: list[tuple[int, dict[str, Any]]] | None = None,
             preferred_anti: list[tuple[int, dict[str, Any]]] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if required or preferred:
        out["podAffinity"] = {k: v for k, v in (
            ("requiredDuringSchedulingIgnoredDuringExecution", required),
            ("preferredDuringSchedulingIgnoredDuringExecution",
             [{"weight": w, "podAffinityTerm": t} for w, t in preferred or []])) if v}
    if anti or preferred_anti:
        out["podAntiAffinity"] = {k: v for k, v in (
            ("requiredDuringSchedulingIgnoredDuringExecution", anti),
            ("preferredDuringSchedulingIgnoredDuringExecution",
             [{"weight": w, "podAffinityTerm": t} for w, t in preferred_anti or []])) if v}
    return out


def incoming(labels: dict[str, str] | None = None, ns: str = "default", **aff: Any) -> dict[str, Any]:
    return pod("p", labels=labels, ns=ns, **({"affinity": affinity(**aff)} if aff else {}))


def existing(name: str, on: str, labels: dict[str, str], ns: str = "default", **aff: Any) -> dict[str, Any]:
    return pod(name, on, labels, ns=ns, **({"affinity": affinity(**aff)} if aff else {}))


@pytest.mark.parametrize(("name", "p", "pods", "want"), [
    ("A pod that has no required pod affinity scheduling rules can schedule onto a node with no existing pods",
     incoming(), [], OK),
    ("satisfies with requiredDuringSchedulingIgnoredDuringExecution in PodAffinity using In operator that matches "
     "the existing pod", incoming(SEC_S2, required=[term("security")]), [existing("e", "machine1", SEC_S1)], OK),
    ("satisfies the pod with requiredDuringSchedulingIgnoredDuringExecution in PodAffinity using not in operator "
     "in labelSelector that matches the existing pod",
     incoming(required=[term("security", "NotIn", ("securityscan3", "value3"))]),
     [existing("e", "machine1", SEC_S1)], OK),
    ("Does not satisfy the PodAffinity with labelSelector because of diff Namespace",
     incoming(required=[term("security", namespaces=["DiffNameSpace"])]),
     [existing("e", "machine1", SEC_S1, ns="ns")], REASON_AFFINITY),
    ("Doesn't satisfy the PodAffinity because of unmatching labelSelector with the existing pod",
     incoming(required=[term("security", values=("antivirusscan", "value2"))]),
     [existing("e", "machine1", SEC_S1)], REASON_AFFINITY),
    ("satisfies the PodAffinity with different label Operators in multiple RequiredDuringScheduling terms",
     incoming(required=[term("security", "Exists", ()), term("wrongkey", "DoesNotExist", ()),
                        term("security", "In", ("S1", "value2"))]),
     [existing("e", "machine1", SEC_S1)], OK),
    ("The labelSelector requirements(items of matchExpressions) are ANDed, the pod cannot schedule onto the node "
     "because one of the matchExpression item don't match",
     incoming(required=[{"labelSelector": {"matchExpressions": [
         {"key": "security", "operator": "Exists"}, {"key": "wrongkey", "operator": "In", "values": ["x"]}]},
         "topologyKey": "region"}]), [existing("e", "machine1", SEC_S1)], REASON_AFFINITY),
    ("satisfies the PodAffinity and PodAntiAffinity with the existing pod",
     incoming(required=[term("security")], anti=[term("security", values=("antivirusscan",), topology="node")]),
     [existing("e", "machine1", SEC_S1)], OK),
    ("satisfies the PodAffinity and PodAntiAffinity and PodAntiAffinity symmetry with the existing pod",
     incoming(required=[term("security")], anti=[term("security", values=("antivirusscan",), topology="node")]),
     [existing("e", "machine1", SEC_S1, anti=[term("security", values=("antivirusscan",), topology="node")])], OK),
    ("satisfies the PodAffinity but doesn't satisfy the PodAntiAffinity with the existing pod",
     incoming(required=[term("security")], anti=[term("security", topology="zone")]),
     [existing("e", "machine1", SEC_S1)], REASON_ANTI),
    ("satisfies the PodAffinity and PodAntiAffinity but doesn't satisfy PodAntiAffinity symmetry with the "
     "existing pod", incoming(SEC_S1, required=[term("security")],
                              anti=[term("security", values=("antivirusscan",), topology="node")]),
     [existing("e", "machine1", SEC_S1, anti=[term("security", topology="zone")])], REASON_EXISTING_ANTI),
    ("pod matches its own Label in PodAffinity and that matches the existing pod Labels",
     incoming(SEC_S1, required=[term("security", "NotIn", ("S1",))]), [existing("e", "machine1", SEC_S1)],
     REASON_AFFINITY),
    ("verify that PodAntiAffinity from existing pod is respected when pod has no AntiAffinity constraints. "
     "doesn't satisfy PodAntiAffinity symmetry with the existing pod",
     incoming(SEC_S1), [existing("e", "machine1", SEC_S1, anti=[term("security", topology="zone")])],
     REASON_EXISTING_ANTI),
    ("verify that PodAntiAffinity from existing pod is respected when pod has no AntiAffinity constraints. "
     "satisfy PodAntiAffinity symmetry with the existing pod",
     incoming(SEC_S1), [existing("e", "machine1", SEC_S1, anti=[term("security", "NotIn", ("S1",),
                                                                      topology="zone")])], OK),
    ("satisfies the PodAntiAffinity with existing pod but doesn't satisfy PodAntiAffinity symmetry with incoming "
     "pod", incoming(SEC_S1, anti=[term("security", values=("S2",), topology="zone")]),
     [existing("e", "machine1", SEC_S1, anti=[term("security", topology="zone")])], REASON_EXISTING_ANTI),
    ("PodAntiAffinity symmetry check b1: incoming pod and existing pod match each other's terms",
     incoming({"abc": "", "xyz": ""}, anti=[term("abc", "Exists", (), topology="zone")]),
     [existing("e", "machine1", {"abc": "", "xyz": ""}, anti=[term("xyz", "Exists", (), topology="zone")])],
     REASON_ANTI),
    ("the first pod of a group with affinity to itself is not blocked",
     incoming(SEC_S1, required=[term("security")]), [], OK),
    ("affinity to pods in namespaces a namespaceSelector matches",
     incoming(required=[term("security", namespaceSelector={"matchLabels": {"team": "t1"}})]),
     [existing("e", "machine1", SEC_S1, ns="team1-ns")], OK),
    ("an empty namespaceSelector matches every namespace",
     incoming(required=[term("security", namespaceSelector={})]), [existing("e", "machine1", SEC_S1, ns="x")], OK),
    ("a namespaceSelector on the automatic name label of a namespace koord-sched has not read",
     incoming(required=[term("security", namespaceSelector={"matchLabels": {"kubernetes.io/metadata.name": "y"}})]),
     [existing("e", "machine1", SEC_S1, ns="y")], OK),
    ("an existing pod's anti-affinity namespaceSelector is read against the incoming pod's namespace labels",
     incoming(SEC_S1, ns="team1-ns"),
     [existing("e", "machine1", SEC_S2, ns="other",
               anti=[term("security", topology="zone", namespaceSelector={"matchLabels": {"team": "t1"}})])],
     REASON_EXISTING_ANTI),
])
def test_filter_single_node_as_kube(name: str, p: dict[str, Any], pods: list[dict[str, Any]],
                                    want: str | None) -> None:
    namespace = {"kind": "Namespace", "metadata": {"name": "team1-ns", "labels": {"team": "t1"}}}
    got = filter_all(InterPodAffinity(), p, [M1, namespace], pods)
    assert got == {"machine1": want}, name


def test_filter_multiple_nodes_as_kube() -> None:
    nodes = [node("machine1", region="r1", zone="z1", **{HOST: "machine1"}),
             node("machine2", region="r1", zone="z2", **{HOST: "machine2"}),
             node("machine3", region="r2", zone="z3", **{HOST: "machine3"}),
             node("machine4", zone="z4", **{HOST: "machine4"})]
    foo = [existing("e", "machine1", {"foo": "bar"})]
    by_region = incoming(required=[term("foo", values=("bar",))])
    # nodes sharing the topology value of a node holding a matching pod fit; a node without the key never does
    assert list(filter_all(InterPodAffinity(), by_region, nodes, foo).values()) == [
        OK, OK, REASON_AFFINITY, REASON_AFFINITY]
    # the first pod of a collection with affinity to itself: every node with the key
    first = incoming({"foo": "bar"}, required=[term("foo", values=("bar",))])
    assert list(filter_all(InterPodAffinity(), first, nodes, []).values()) == [OK, OK, OK, REASON_AFFINITY]
    # anti-affinity by region: both machines of r1 refused
    anti = incoming(anti=[term("foo", values=("bar",))])
    assert list(filter_all(InterPodAffinity(), anti, nodes, foo).values()) == [
        REASON_ANTI, REASON_ANTI, OK, OK]
    # an existing pod's anti-affinity by zone against the incoming pod: only its own zone
    guarded = [existing("e", "machine1", {}, anti=[term("foo", values=("bar",), topology="zone")])]
    assert list(filter_all(InterPodAffinity(), incoming({"foo": "bar"}), nodes, guarded).values()) == [
        REASON_EXISTING_ANTI, OK, OK, OK]
    # both terms of the incoming pod must hold on a node (the pod matching each term may differ)
    both = incoming(required=[term("foo", values=("bar",)), term("app", values=("db",), topology="zone")])
    two = [existing("e", "machine1", {"foo": "bar"}), existing("f", "machine2", {"app": "db"})]
    assert list(filter_all(InterPodAffinity(), both, nodes, two).values()) == [
        REASON_AFFINITY, REASON_AFFINITY, REASON_AFFINITY, REASON_AFFINITY]


CHINA = node("machine1", region="China", **{HOST: "machine1"})
INDIA = node("machine2", region="India", **{HOST: "machine2"})
AZ1 = node("machine3", az="az1", **{HOST: "machine3"})
CHINA2 = node("machine3", region="China", **{HOST: "machine3"})


@pytest.mark.parametrize(("name", "p", "pods", "nodes", "want"), [
    ("all machines are same priority as Affinity is nil", incoming(SEC_S1),
     [existing("a", "machine1", SEC_S1), existing("b", "machine2", SEC_S2)], [CHINA, INDIA, AZ1], [0, 0, 0]),
    ("Affinity: pod that matches topology key & pods in nodes will get high score comparing to others which "
     "doesn't match either pods in nodes or in topology key", incoming(SEC_S1, preferred=[(5, term("security"))]),
     [existing("a", "machine1", SEC_S1), existing("b", "machine2", SEC_S2), existing("c", "machine3", SEC_S1)],
     [CHINA, INDIA, AZ1], [100, 0, 0]),
    ("All the nodes that have the same topology key & label value with one of them has an existing pod that match "
     "the affinity rules, have the same score", incoming(SEC_S1, preferred=[(5, term("security"))]),
     [existing("a", "machine1", SEC_S1)], [CHINA, INDIA, CHINA2], [100, 0, 100]),
    ("Affinity: nodes in one region with more matching pods score higher",
     incoming(SEC_S1, preferred=[(8, term("security")), (2, term("security", values=("S2",)))]),
     [existing("a", "machine1", SEC_S1), existing("b", "machine2", SEC_S2), existing("c", "machine3", SEC_S1)],
     [CHINA, INDIA, CHINA2], [100, 0, 100]),
    ("Anti Affinity: pod that does not match existing pods in node will get high score",
     incoming(SEC_S1, preferred_anti=[(5, term("security"))]),
     [existing("a", "machine1", SEC_S1), existing("b", "machine2", SEC_S2)], [CHINA, INDIA, AZ1], [0, 100, 100]),
    ("Anti Affinity: pod that does not match topology key & matches the pods in nodes will get higher score",
     incoming(SEC_S1, preferred_anti=[(5, term("security"))]), [existing("a", "machine1", SEC_S1)],
     [CHINA, INDIA, AZ1], [0, 100, 100]),
    ("Anti Affinity: one node has more matching pods comparing to other node, so the node which has more unmatches "
     "will get high score", incoming(SEC_S1, preferred_anti=[(5, term("security"))]),
     [existing("a", "machine1", SEC_S1), existing("b", "machine1", SEC_S1), existing("c", "machine2", SEC_S2)],
     [CHINA, INDIA], [0, 100]),
    ("Affinity and Anti Affinity: considered only preferredDuringSchedulingIgnoredDuringExecution in both pod "
     "affinity & anti affinity", incoming(SEC_S1, preferred=[(5, term("security"))],
                                          preferred_anti=[(5, term("security", values=("S2",)))]),
     [existing("a", "machine1", SEC_S1), existing("b", "machine2", SEC_S2)], [CHINA, INDIA, AZ1], [100, 0, 50]),
    ("Affinity symmetry: considered only the preferredDuringSchedulingIgnoredDuringExecution in pod affinity "
     "symmetry", incoming({"security": "S2"}),
     [existing("a", "machine1", SEC_S1, preferred=[(5, term("security", values=("S2",)))]),
      existing("b", "machine2", SEC_S2)], [CHINA, INDIA, AZ1], [100, 0, 0]),
    ("Affinity symmetry: considered RequiredDuringSchedulingIgnoredDuringExecution in pod affinity symmetry",
     incoming({"security": "S2"}),
     [existing("a", "machine1", SEC_S1, required=[term("security", values=("S2",))]),
      existing("b", "machine2", SEC_S2)], [CHINA, INDIA, AZ1], [100, 0, 0]),
    ("Anti Affinity symmetry: the existing pods in node which has anti affinity match will get high score",
     incoming({"security": "S2"}),
     [existing("a", "machine1", SEC_S1, preferred_anti=[(5, term("security", values=("S2",)))]),
      existing("b", "machine2", SEC_S2)], [CHINA, INDIA, AZ1], [0, 100, 100]),
    ("Avoid panic when partial nodes in a topology don't have pods with affinity",
     incoming(SEC_S1, preferred=[(5, term("security", topology="zone"))]),
     [existing("a", "machine1", SEC_S1)], [node("machine1", zone="z1"), node("machine2", zone="z2")], [100, 0]),
    ("preferred terms select pods by namespaces",
     incoming(SEC_S1, preferred=[(5, term("security", namespaces=["other"]))]),
     [existing("a", "machine1", SEC_S1), existing("b", "machine2", SEC_S1, ns="other")], [CHINA, INDIA], [0, 100]),
])
def test_score_as_kube(name: str, p: dict[str, Any], pods: list[dict[str, Any]], nodes: list[dict[str, Any]],
                       want: list[int]) -> None:
    assert list(scores(InterPodAffinity(), p, nodes, pods).values()) == want, name


def test_hard_pod_affinity_symmetric_weight_as_kube() -> None:
    pods = [existing("a", "machine1", {}, required=[term("security", values=("S1",))]),
            existing("b", "machine2", {}, required=[term("security", values=("S2",))])]
    nodes = [CHINA, INDIA, AZ1]
    assert list(scores(InterPodAffinity(hard_pod_affinity_weight=1), incoming(SEC_S1), nodes, pods).values()) == [
        100, 0, 0]
    assert list(scores(InterPodAffinity(hard_pod_affinity_weight=0), incoming(SEC_S1), nodes, pods).values()) == [
        0, 0, 0]
    # ignorePreferredTermsOfExistingPods: a pod without preferences skips scoring altogether
    assert list(scores(InterPodAffinity(ignore_preferred_terms_of_existing_pods=True), incoming(SEC_S1), nodes,
                       pods).values()) == [0, 0, 0]


def test_normalize_truncates_as_kube_floats() -> None:
    plugin = InterPodAffinity()
    got = plugin.normalize(np.array([29, 0, 100], dtype=np.int64), 100)
    assert got.tolist() == [28, 0, 100]  # float64(100) * (29 / 100) = 28.999999999999996


def test_anti_affinity_replicas_take_one_node_each_then_stop() -> None:
    nodes = [node(f"n{i}", **{HOST: f"n{i}"}) for i in range(3)]
    sched = Scheduler(build_cluster(copy.deepcopy(nodes)), profile(None))
    anti = affinity(anti=[term("app", values=("web",), topology=HOST)])
    placed = [sched.schedule(pod(f"w{i}", labels={"app": "web"}, affinity=copy.deepcopy(anti))) for i in range(4)]
    assert sorted(p.node for p in placed[:3] if p.node) == ["n0", "n1", "n2"]
    assert placed[3].node is None
    assert placed[3].reason == f"0/3 nodes are available: 3 {REASON_ANTI}."
    # the pods are gone from one node: the next replica goes there
    sched.cluster.nodes["n1"].remove_pod("default/w" + str([p.node for p in placed].index("n1")))
    assert sched.schedule(pod("w9", labels={"app": "web"}, affinity=copy.deepcopy(anti))).node == "n1"


def test_preferred_affinity_draws_a_pod_next_to_its_peer_through_the_profile() -> None:
    nodes = [node(f"n{i}", zone=f"z{i}") for i in range(3)]
    objs = [*nodes, pod("db", "n2", {"app": "db"})]
    sched = Scheduler(build_cluster(copy.deepcopy(objs)), profile(None))
    got = sched.schedule(pod("web", labels={"app": "web"},
                             affinity=affinity(preferred=[(50, term("app", values=("db",), topology="zone"))])))
    assert got.node == "n2"
    assert sched.cycle(pod("x")).run_each().node is not None


def test_a_term_the_api_server_refuses_fails_the_pod_in_one_line() -> None:
    sched = Scheduler(build_cluster([M1]), profile(None))
    got = sched.schedule(pod("p", affinity=affinity(required=[{"labelSelector": {}}])))
    assert got.node is None and got.reason == (
        "0/1 nodes are available: invalid pod affinity: spec.affinity.podAffinity."
        "requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey: can not be empty.")


def test_inter_pod_affinity_args_are_validated_as_kube() -> None:
    def cfg(args: dict[str, Any]) -> Any:
        return parse_config({"profiles": [{"pluginConfig": [{"name": "InterPodAffinity", "args": args}]}]})
    assert cfg({"hardPodAffinityWeight": 0}).plugin_args("InterPodAffinity").hard_pod_affinity_weight == 0
    assert cfg({}).plugin_args("InterPodAffinity").hard_pod_affinity_weight == 1
    with pytest.raises(ConfigError, match="hardPodAffinityWeight"):
        cfg({"hardPodAffinityWeight": 101})


def test_vector_and_per_node_cycles_agree_pod_after_pod() -> None:
    """The vector stage (kept counts, masks) and the per-node path (Filter and Score node by node over the feasible
    nodes) choose the same node with the same totals, as pods with spread and (anti-)affinity pile up."""
    nodes = [node(f"n{i}", zone=f"z{i % 3}", **{HOST: f"n{i}"}) for i in range(7)]
    seeded = [pod("db0", "n1", {"app": "db"}), pod("db1", "n4", {"app": "db"})]
    fast = Scheduler(build_cluster(copy.deepcopy([*nodes, *seeded])), profile(None))
    each = Scheduler(build_cluster(copy.deepcopy([*nodes, *seeded])), profile(None))
    near_db = affinity(preferred=[(40, term("app", values=("db",), topology="zone"))],
                       preferred_anti=[(10, term("app", values=("web",), topology=HOST))])
    spread_web = [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway",
                   "labelSelector": {"matchLabels": {"app": "web"}}},
                  {"maxSkew": 2, "topologyKey": HOST, "whenUnsatisfiable": "DoNotSchedule",
                   "labelSelector": {"matchLabels": {"app": "web"}}}]
    for i in range(12):
        kind = i % 3
        spec: dict[str, Any] = ({"affinity": near_db} if kind == 0 else {"topologySpreadConstraints": spread_web}
                                if kind == 1 else {"affinity": affinity(anti=[term("app", values=("cache",),
                                                                                    topology="zone")])})
        labels = {"app": ("web", "web", "cache")[kind]}
        a = fast.schedule(pod(f"p{i}", labels=labels, **copy.deepcopy(spec)))
        with each.cycle(pod(f"p{i}", labels=labels, **copy.deepcopy(spec))) as cycle:
            b = cycle.run_each()
        assert (a.node, a.reason) == (b.node, b.reason), i
        assert dict(a.scores) == dict(b.scores), i


def test_simulate_reads_namespaces_for_namespace_selectors(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                           ) -> None:
    """`koord-sched simulate` as a user runs it: a Namespace in --cluster gives the labels a namespaceSelector
    reads; a constraint the API server refuses is one line naming the field."""
    objs = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team1", "labels": {"team": "t1"}}},
            node("n1", zone="a"), node("n2", zone="b"), existing("db", "n2", {"app": "db"}, ns="team1"),
            existing("db-elsewhere", "n1", {"app": "db"}, ns="other")]
    web = incoming(required=[term("app", values=("db",), topology="zone",
                                  namespaceSelector={"matchLabels": {"team": "t1"}})])
    bad = pod("bad", topologySpreadConstraints=[{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "Never"}])
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump_all(objs))
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all([web, bad]))
    rc = main(["simulate", "--cluster", str(tmp_path / "cluster.yaml"), "--pods", str(tmp_path / "pods.yaml"),
               "-o", "json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert [p["node"] for p in out["placements"]] == ["n2", None]
    assert out["placements"][1]["reason"] == (
        "0/2 nodes are available: invalid topology spread constraints: spec.topologySpreadConstraints[0]."
        "whenUnsatisfiable: 'Never' is not one of DoNotSchedule, ScheduleAnyway.")
