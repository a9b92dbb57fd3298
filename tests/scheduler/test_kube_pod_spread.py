"""kube-scheduler's PodTopologySpread, restating its unit cases (podtopologyspread filtering_test.go
TestSingleConstraint / TestMultipleConstraints, scoring_test.go TestPodTopologySpreadScore) on the plugin, then
through whole cycles."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubepodfixtures import HOST, filter_all, node, pod, scores

from scheduler.cli import profile
from scheduler.cluster import build_cluster
from scheduler.config import parse_config
from scheduler.config.fields import ConfigError
from scheduler.framework import Scheduler
from scheduler.plugins.podtopologyspread import REASON, REASON_LABEL, PodTopologySpread

U, UU = REASON, REASON_LABEL
FOO = {"matchExpressions": [{"key": "foo", "operator": "Exists"}]}


def spread(max_skew: int, key: str, hard: bool = True, selector: Any = FOO, **extra: Any) -> dict[str, Any]:
    return {"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule" if hard else "ScheduleAnyway",
            **({"labelSelector": selector} if selector is not None else {}), **extra}


def incoming(*constraints: dict[str, Any], labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return pod("p", labels={"foo": ""} if labels is None else labels,
               topologySpreadConstraints=list(constraints), **spec)


def foo(name: str, on: str, **kw: Any) -> dict[str, Any]:
    return pod(name, on, {"foo": ""}, **kw)


ZONES = [node("node-a", zone="zone1", node="node-a"), node("node-b", zone="zone1", node="node-b"),
         node("node-x", zone="zone2", node="node-x"), node("node-y", zone="zone2", node="node-y")]
# matching pods spread as 2/1/0/3 over node-a, node-b, node-x, node-y (zones 3/3)
SPREAD_2103 = [foo("p-a1", "node-a"), foo("p-a2", "node-a"), foo("p-b1", "node-b"), foo("p-y1", "node-y"),
               foo("p-y2", "node-y"), foo("p-y3", "node-y")]
OK = None


@pytest.mark.parametrize(("name", "p", "nodes", "existing", "want"), [
    ("no existing pods", incoming(spread(1, "zone")), ZONES, [], [OK, OK, OK, OK]),
    ("no existing pods, incoming pod doesn't match itself",
     incoming(spread(1, "zone", selector={"matchExpressions": [{"key": "bar", "operator": "Exists"}]})), ZONES, [],
     [OK, OK, OK, OK]),
    ("existing pods in a different namespace do not count", incoming(spread(1, "zone")), ZONES,
     [foo("p-a1", "node-a", ns="ns1"), foo("p-b1", "node-a", ns="ns2"), foo("p-x1", "node-x"),
      foo("p-y1", "node-y")], [OK, OK, U, U]),
    ("pods spread across zones as 3/3, all nodes fit", incoming(spread(1, "zone")), ZONES, SPREAD_2103,
     [OK, OK, OK, OK]),
    ("pods spread across zones as 1/2 due to absence of label 'zone' on node-b", incoming(spread(1, "zone")),
     [ZONES[0], node("node-b", zon="zone1", node="node-b"), *ZONES[2:]],
     [foo("p-a1", "node-a"), foo("p-b1", "node-b"), foo("p-x1", "node-x"), foo("p-y1", "node-y")], [OK, UU, U, U]),
    ("pod cannot be scheduled as all nodes don't have label 'rack'", incoming(spread(1, "rack")),
     [ZONES[0], ZONES[2]], [], [UU, UU]),
    ("pods spread across nodes as 2/1/0/3, only node-x fits", incoming(spread(1, "node")), ZONES, SPREAD_2103,
     [U, U, OK, U]),
    ("pods spread across nodes as 2/1/0/3, maxSkew is 2, node-b and node-x fit", incoming(spread(2, "node")), ZONES,
     SPREAD_2103, [U, OK, OK, U]),
    ("pods spread across nodes as 2/1/0/3, but pod doesn't match itself",
     incoming(spread(1, "node"), labels={"bar": ""}), ZONES, SPREAD_2103, [U, OK, OK, U]),
    ("incoming pod has nodeAffinity, pods spread as 2/~1~/~0~/3, hence node-a fits",
     incoming(spread(1, "node"), affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
         "nodeSelectorTerms": [{"matchExpressions": [{"key": "node", "operator": "In",
                                                      "values": ["node-a", "node-y"]}]}]}}}),
     ZONES, SPREAD_2103, [OK, OK, OK, U]),
    ("nodeAffinityPolicy Ignore: every node counts, node-a no longer fits",
     incoming(spread(1, "node", nodeAffinityPolicy="Ignore"), affinity={"nodeAffinity": {
         "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
             {"key": "node", "operator": "In", "values": ["node-a", "node-y"]}]}]}}}),
     ZONES, SPREAD_2103, [U, U, OK, U]),
    ("terminating Pods should be excluded", incoming(spread(1, "node")),
     [node("node-a", node="node-a"), node("node-b", node="node-b")],
     [foo("p-a", "node-a", terminating=True), foo("p-b", "node-b")], [OK, U]),
    ("two Constraints on zone and node, spreads = [3/3, 2/1/0/3]", incoming(spread(1, "zone"), spread(1, "node")),
     ZONES, SPREAD_2103, [U, U, OK, U]),
    ("two Constraints on zone and node, spreads = [3/4, 2/1/0/4]", incoming(spread(1, "zone"), spread(1, "node")),
     ZONES, [*SPREAD_2103, foo("p-y4", "node-y")], [U, U, U, U]),
    ("minDomains 3 over 2 zones: the global minimum is 0", incoming(spread(2, "zone", minDomains=3)), ZONES,
     [foo("p-a1", "node-a"), foo("p-b1", "node-b"), foo("p-x1", "node-x")], [U, U, OK, OK]),
    ("minDomains 2 over 2 zones: the global minimum is the smaller zone's", incoming(spread(2, "zone", minDomains=2)),
     ZONES, [foo("p-a1", "node-a"), foo("p-b1", "node-b"), foo("p-x1", "node-x")], [OK, OK, OK, OK]),
    ("nodeTaintsPolicy Honor: a tainted node's zone is no domain",
     incoming(spread(1, "zone", nodeTaintsPolicy="Honor")),
     [ZONES[0], {**node("node-x", zone="zone2", node="node-x"), "spec": {"taints": [
         {"key": "k", "value": "v", "effect": "NoSchedule"}]}}], [foo("p-a1", "node-a")], [OK, OK]),
    ("nodeTaintsPolicy Ignore (the default): the empty tainted zone is the minimum", incoming(spread(1, "zone")),
     [ZONES[0], {**node("node-x", zone="zone2", node="node-x"), "spec": {"taints": [
         {"key": "k", "value": "v", "effect": "NoSchedule"}]}}], [foo("p-a1", "node-a")], [U, OK]),
    ("matchLabelKeys: only pods with the incoming pod's value of the key count",
     incoming(spread(1, "node", matchLabelKeys=["app"]), labels={"foo": "", "app": "x"}), ZONES,
     [pod("p-a1", "node-a", {"foo": "", "app": "y"}), pod("p-b1", "node-b", {"foo": "", "app": "x"})],
     [OK, U, OK, OK]),
])
def test_filter_as_kube(name: str, p: dict[str, Any], nodes: list[dict[str, Any]], existing: list[dict[str, Any]],
                        want: list[str | None]) -> None:
    got = filter_all(PodTopologySpread(), p, nodes, existing)
    assert list(got.values()) == want, name


HOSTS = [node(f"node-{c}", **{HOST: f"node-{c}"}) for c in "abcd"]
# matching pods spread as 4/3/2/1
SPREAD_4321 = [foo(f"p-{c}{i}", f"node-{c}") for c, n in zip("abcd", (4, 3, 2, 1), strict=True)
               for i in range(1, n + 1)]
# matching pods spread as 4/2/1/3 over node-a, node-b, node-x, node-y
SPREAD_4213 = [foo(f"p-{c}{i}", f"node-{c}") for c, n in zip("abxy", (4, 2, 1, 3), strict=True)
               for i in range(1, n + 1)]


def host(name: str, **labels: str) -> dict[str, Any]:
    return node(name, **{HOST: name}, **labels)


@pytest.mark.parametrize(("name", "p", "nodes", "failed", "existing", "want"), [
    ("one constraint on node, no existing pods", incoming(spread(1, HOST, False)), HOSTS[:2], [], [], [100, 100]),
    ("one constraint on node, only one node is candidate", incoming(spread(1, HOST, False)), HOSTS[:1], HOSTS[1:2],
     [foo("p-a1", "node-a"), foo("p-a2", "node-a"), foo("p-b1", "node-b")], [100]),
    ("one constraint on node, all nodes have the same number of matching pods", incoming(spread(1, HOST, False)),
     HOSTS[:2], [], [foo("p-a1", "node-a"), foo("p-b1", "node-b")], [100, 100]),
    ("one constraint on node, all 4 nodes are candidates", incoming(spread(1, HOST, False)), HOSTS, [],
     [foo("p-a1", "node-a"), foo("p-a2", "node-a"), foo("p-b1", "node-b"), foo("p-d1", "node-d"),
      foo("p-d2", "node-d"), foo("p-d3", "node-d")], [20, 60, 100, 0]),
    ("one constraint on node, null selector", incoming(spread(1, HOST, False, selector=None)), HOSTS, [],
     [foo("p-a1", "node-a"), foo("p-b1", "node-b"), foo("p-d1", "node-d")], [100, 100, 100, 100]),
    ("one constraint on node, all 4 nodes are candidates, maxSkew=2", incoming(spread(2, HOST, False)), HOSTS, [],
     [foo("p-a1", "node-a"), foo("p-a2", "node-a"), foo("p-b1", "node-b"), foo("p-d1", "node-d"),
      foo("p-d2", "node-d"), foo("p-d3", "node-d")], [33, 66, 100, 16]),
    ("one constraint on node, all 4 nodes are candidates, maxSkew=3", incoming(spread(3, HOST, False)), HOSTS, [],
     SPREAD_4321, [44, 66, 77, 100]),
    ("one constraint on node, 3 out of 4 nodes are candidates", incoming(spread(1, HOST, False)),
     [host("node-a"), host("node-b"), host("node-x")], [host("node-y")], SPREAD_4213, [33, 83, 100]),
    ("one constraint on node, 3 out of 4 nodes are candidates, one node doesn't match topology key",
     incoming(spread(1, HOST, False)), [host("node-a"), node("node-b", n="node-b"), host("node-x")],
     [host("node-y")], SPREAD_4213, [16, 0, 100]),
    ("one constraint on zone, 3 out of 4 nodes are candidates", incoming(spread(1, "zone", False)),
     [host("node-a", zone="zone1"), host("node-b", zone="zone1"), host("node-x", zone="zone2")],
     [host("node-y", zone="zone2")], SPREAD_4213, [75, 75, 100]),
    ("two Constraints on zone and node, 2 out of 4 nodes are candidates",
     incoming(spread(1, "zone", False), spread(1, HOST, False)),
     [host("node-a", zone="zone1"), host("node-x", zone="zone2")],
     [host("node-b", zone="zone1"), host("node-y", zone="zone2")],
     [foo("p-a1", "node-a"), foo("p-a2", "node-a"), foo("p-b1", "node-b"), foo("p-x1", "node-x"),
      foo("p-x2", "node-x"), *(foo(f"p-y{i}", "node-y") for i in range(1, 5))], [100, 63]),
    ("DoNotSchedule constraints do not score", incoming(spread(1, HOST)), HOSTS, [], SPREAD_4321, [0, 0, 0, 0]),
    ("no constraints: kube's system defaults are not applied (docs/decisions.md)", incoming(), HOSTS, [],
     SPREAD_4321, [0, 0, 0, 0]),
])
def test_score_as_kube(name: str, p: dict[str, Any], nodes: list[dict[str, Any]], failed: list[dict[str, Any]],
                       existing: list[dict[str, Any]], want: list[int]) -> None:
    got = scores(PodTopologySpread(), p, nodes, existing, failed)
    assert list(got.values()) == want, name


def test_replicas_spread_evenly_over_zones_through_whole_cycles() -> None:
    """A Deployment's replicas with a hard zone constraint place 2/2/2 over three zones, the 7th anywhere; with
    maxSkew 1 and a zone full, no node takes the 8th's zone twice in a row."""
    nodes = [host(f"n{z}{i}", zone=f"z{z}") for z in range(3) for i in range(2)]
    sched = Scheduler(build_cluster(copy.deepcopy(nodes)), profile(None))
    zones: list[str] = []
    for i in range(6):
        got = sched.schedule(pod(f"r{i}", labels={"app": "web"}, topologySpreadConstraints=[
            spread(1, "zone", selector={"matchLabels": {"app": "web"}})]))
        assert got.node is not None
        zones.append(got.node[1])
    assert sorted(zones) == ["0", "0", "1", "1", "2", "2"]


def test_a_zone_missing_from_every_node_is_said_by_name() -> None:
    sched = Scheduler(build_cluster([host("a")]), profile(None))
    got = sched.schedule(pod("p", labels={"foo": ""}, topologySpreadConstraints=[spread(1, "zone")]))
    assert got.node is None and got.reason == f"0/1 nodes are available: 1 {REASON_LABEL}."
    assert got.plugins == {"PodTopologySpread"}


@pytest.mark.parametrize(("constraint", "field"), [
    ({"maxSkew": 0, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}, ".maxSkew"),
    ({"maxSkew": 1, "topologyKey": "", "whenUnsatisfiable": "DoNotSchedule"}, ".topologyKey"),
    ({"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "Maybe"}, ".whenUnsatisfiable"),
    ({"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway", "minDomains": 2}, ".minDomains"),
    ({"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
      "labelSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}, ".labelSelector.matchExpressions[0]"),
])
def test_a_constraint_the_api_server_refuses_fails_the_pod_in_one_line(constraint: dict[str, Any], field: str) -> None:
    sched = Scheduler(build_cluster([host("a", zone="z")]), profile(None))
    got = sched.schedule(pod("p", topologySpreadConstraints=[constraint]))
    assert got.node is None and "invalid topology spread constraints: spec.topologySpreadConstraints[0]" + field \
        in got.reason and "\n" not in got.reason


def test_pod_topology_spread_args_are_validated_as_kube() -> None:
    def cfg(args: dict[str, Any]) -> Any:
        return parse_config({"profiles": [{"pluginConfig": [{"name": "PodTopologySpread", "args": args}]}]})
    cfg({"defaultingType": "List", "defaultConstraints": [
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}]})
    with pytest.raises(ConfigError, match=r"defaultingType.*when \.defaultConstraints are not empty"):
        cfg({"defaultingType": "System", "defaultConstraints": [
            {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}]})
    with pytest.raises(ConfigError, match=r"defaultConstraints\[0\].labelSelector"):
        cfg({"defaultConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway",
                                     "labelSelector": {}}]})
    with pytest.raises(ConfigError, match="defaultingType"):
        cfg({"defaultingType": "Sometimes"})
