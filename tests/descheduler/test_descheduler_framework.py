"""The profile runner (upstream framework/runtime/framework_test.go, profile/profile_test.go, descheduler.go): the
evict-plugin count, one instance per plugin across points, deschedule points before balance points over every
profile, profile and top-level node selectors, ready nodes, the limiter reset each round, the evictor proxy."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from apis.core.labelselector import parse_label_selector
from scheduler.cluster import NodeInfo
from scheduler.descheduler.config.types import DeschedulerConfig, Profile
from scheduler.descheduler.framework import Descheduler, FrameworkError, ready_nodes
from scheduler.descheduler.interfaces import (
    BALANCE,
    DESCHEDULE,
    EVICT,
    FILTER,
    EvictOptions,
    Handle,
    PluginSpec,
    snapshot,
)

from deschedbuild import node, pod

CALLS: list[str] = []


class Recorder:
    """A deschedule + balance plugin that evicts every pod of the nodes it is given."""

    def __init__(self, name: str, handle: Handle) -> None:
        self.name = name
        self.handle = handle

    def deschedule(self, nodes: Sequence[NodeInfo]) -> None:
        CALLS.append(f"{self.name}.deschedule:{','.join(n.name for n in nodes)}")
        self._evict(nodes)

    def balance(self, nodes: Sequence[NodeInfo]) -> None:
        CALLS.append(f"{self.name}.balance:{','.join(n.name for n in nodes)}")

    def _evict(self, nodes: Sequence[NodeInfo]) -> None:
        for n in nodes:
            for p in self.handle.snapshot.pods_on(n.name):
                if self.handle.evictor().filter(p):
                    self.handle.evictor().evict(p, EvictOptions(self.name, "test"))


class Gate:
    """An evict + filter plugin: refuses pods labelled keep=true, evicts the rest (returns False for 'stuck')."""

    def __init__(self, handle: Handle) -> None:
        self.name = "Gate"

    def filter(self, p: dict[str, Any]) -> bool:
        return (p["metadata"].get("labels") or {}).get("keep") != "true"

    def pre_eviction_filter(self, p: dict[str, Any]) -> bool:
        return True

    def evict(self, p: dict[str, Any], options: EvictOptions) -> bool:
        return p["metadata"]["name"] != "stuck"


REGISTRY = {
    "A": PluginSpec("A", lambda args, h: Recorder("A", h), frozenset({DESCHEDULE, BALANCE})),
    "B": PluginSpec("B", lambda args, h: Recorder("B", h), frozenset({DESCHEDULE, BALANCE})),
    "Gate": PluginSpec("Gate", lambda args, h: Gate(h), frozenset({EVICT, FILTER})),
    "Gate2": PluginSpec("Gate2", lambda args, h: Gate(h), frozenset({EVICT, FILTER})),
    "Hollow": PluginSpec("Hollow", lambda args, h: Hollow(), frozenset({BALANCE})),
}


class Hollow:
    """Registered for balance, without a balance method."""

    name = "Hollow"


def profile(name: str, **points: list[str]) -> Profile:
    return Profile(name=name, plugins={"evict": ["Gate"], "filter": ["Gate"], **points})


def cluster(*extra: dict[str, Any]) -> list[dict[str, Any]]:
    return [node("n1", 1000, 1000, 10, labels={"zone": "a"}), node("n2", 1000, 1000, 10, labels={"zone": "b"}),
            pod("x", 100, 0, "n1"), pod("keep", 100, 0, "n1", labels={"keep": "true"}), pod("stuck", 100, 0, "n2"),
            pod("y", 100, 0, "n2", namespace="other"), *extra]


def test_deschedule_points_then_balance_points_over_every_profile() -> None:
    CALLS.clear()
    cfg = DeschedulerConfig(profiles=[profile("p1", deschedule=["A"], balance=["A"]),
                                      profile("p2", deschedule=["B"], balance=["B"])])
    d = Descheduler(cfg, REGISTRY)
    assert d.run_round(snapshot(cluster(), 0.0)) is None
    assert CALLS == ["A.deschedule:n1,n2", "B.deschedule:n1,n2", "A.balance:n1,n2", "B.balance:n1,n2"]
    # x evicted by A; keep filtered; stuck refused by the evict plugin (not recorded); y evicted by A; B finds x
    # and y again in the same snapshot and evicts them again (the framework does not deduplicate within a round)
    assert [(e.name, e.plugin) for e in d.evictions] == [("x", "A"), ("y", "A"), ("x", "B"), ("y", "B")]
    assert d.frameworks[0].plugins["A"] is not None and len(d.frameworks[0].plugins) == 2  # A once, Gate once


def test_limits_are_shared_across_profiles_and_reset_each_round() -> None:
    cfg = DeschedulerConfig(profiles=[profile("p1", deschedule=["A"]), profile("p2", deschedule=["B"])],
                            max_pods_total=3)
    d = Descheduler(cfg, REGISTRY)
    d.run_round(snapshot(cluster(), 0.0))
    assert len(d.evictions) == 3
    d.run_round(snapshot(cluster(), 10.0))
    assert len(d.evictions) == 6


def test_profile_and_top_level_node_selectors() -> None:
    CALLS.clear()
    cfg = DeschedulerConfig(profiles=[Profile(name="p", plugins={"evict": ["Gate"], "deschedule": ["A"]},
                                              node_selector=parse_label_selector({"matchLabels": {"zone": "a"}}))])
    Descheduler(cfg, REGISTRY).run_round(snapshot(cluster(node("n3", 1000, 1000, 10, labels={"zone": "a"})), 0.0))
    assert CALLS == ["A.deschedule:n1,n3"]
    CALLS.clear()
    top = DeschedulerConfig(profiles=[profile("p", deschedule=["A"])],
                            node_selector=parse_label_selector({"matchLabels": {"zone": "b"}}))
    failure = Descheduler(top, REGISTRY).run_round(snapshot(cluster(), 0.0))
    assert failure is not None and "cluster size is 0 or 1" in failure and CALLS == []


def test_ready_nodes() -> None:
    not_ready = node("n2", 1000, 1000, 10)
    not_ready["status"]["conditions"] = [{"type": "Ready", "status": "Unknown"}]
    cordoned = node("n3", 1000, 1000, 10, unschedulable=True)
    bare = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n4"}, "status": {}}
    snap = snapshot([node("n1", 1000, 1000, 10), not_ready, cordoned, bare], 0.0)
    assert [n.name for n in ready_nodes(snap.nodes(), None)] == ["n1", "n3", "n4"]


@pytest.mark.parametrize(("plugins", "message"), [
    ({"evict": []}, "no evict plugin is enabled"),
    ({"evict": ["Gate", "Gate2"]}, "only one evict plugin can be enabled"),
    ({"evict": ["Gate"], "balance": ["Gate"]}, 'plugin "Gate" does not extend balance plugin'),
    ({"evict": ["Gate"], "deschedule": ["Nope"]}, 'Deschedule "Nope" does not exist'),
    ({"evict": ["Gate"], "deschedule": ["A", "A"]}, 'plugin "A" already registered as "Deschedule"'),
    ({"evict": ["Gate"], "balance": ["Hollow"]}, 'plugin "Hollow" does not extend balance plugin'),
])
def test_profile_errors(plugins: dict[str, list[str]], message: str) -> None:
    with pytest.raises(FrameworkError, match=message):
        Descheduler(DeschedulerConfig(profiles=[Profile(name="p", plugins=plugins)]), REGISTRY)


def test_simulation_records_without_an_evict_plugin() -> None:
    cfg = DeschedulerConfig(profiles=[Profile(name="p", plugins={"deschedule": ["A"]})])
    d = Descheduler(cfg, REGISTRY, simulate=True)
    d.run_round(snapshot(cluster(), 0.0))
    assert sorted(e.name for e in d.evictions) == ["keep", "stuck", "x", "y"]  # no filter plugin either


def test_framework_dry_run_skips_the_evict_plugin_but_counts() -> None:
    cfg = DeschedulerConfig(profiles=[profile("p", deschedule=["A"])], dry_run=True, max_pods_per_node=1)
    d = Descheduler(cfg, REGISTRY)
    d.run_round(snapshot(cluster(), 0.0))
    assert [e.name for e in d.evictions] == ["x", "stuck"]  # 'stuck' is not refused: the plugin is not called
    assert d.limiter.total() == 2
