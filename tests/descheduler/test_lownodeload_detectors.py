"""LowNodeLoad's per-node anomaly detectors across rounds whose cluster changes (upstream low_node_load_test.go
Test_filterRealAbnormalNodes "mix abnormal nodes and normal nodes" restated through the plugin the rounds run, and
resetNodesAsNormal on a node not yet confirmed): with consecutiveAbnormalities 2 a node is confirmed on its third
consecutive hot round, each node counted on its own; a node not yet confirmed keeps its count through a low round
(upstream's Reset of a detector still OK changes nothing); after the round that acts on a confirmed node, its
detector is reset (counted afresh) only if the evictions brought it below its high thresholds before the next
candidate, else it stays in Anomaly and the next hot round acts again (low_node_load.go continueEvictionCond and
tryMarkNodesAsNormal)."""

from __future__ import annotations

from typing import Any

from apis.core.metatime import parse_time
from scheduler.descheduler.config.decode import parse_config
from scheduler.descheduler.framework import Descheduler
from scheduler.descheduler.interfaces import Reporter, snapshot
from scheduler.descheduler.registry import registry
from scheduler.descheduler.runner import prepared

from deschedbuild import NOW, config, node, node_metrics, pod

JSON = dict[str, Any]
POOL = "__default_node_pool__"
START = parse_time(NOW) or 0.0
PODS = {"full": 10, "hot": 8, "normal": 4, "low": 1}  # × 400m of 4000m: 100%, 80%, 40%, 10% (low 30%, high 50%)


def cluster(**states: str) -> list[JSON]:
    """n1..n4, each `hot`, `normal` or `low` (default low); every pod's usage is its request."""
    nodes = [node(n, 4000, 16 << 30, 110) for n in ("n1", "n2", "n3", "n4")]
    pods = [pod(f"{n}-{i}", 400, 1 << 20, n) for n in ("n1", "n2", "n3", "n4")
            for i in range(PODS[states.get(n, "low")])]
    return [*nodes, *pods, *node_metrics(nodes, pods)]


class Rounds:
    """One Descheduler (its detectors kept) over a changing cluster, a round every 10 s."""

    def __init__(self) -> None:
        cfg = config({"cpu": 30}, {"cpu": 50}, anomalyCondition={"consecutiveAbnormalities": 2,
                                                                 "consecutiveNormalities": 1})
        self.desched = Descheduler(prepared(parse_config(cfg)), registry(), simulate=True)
        self.n = 0

    def round(self, **states: str) -> set[str]:
        """The nodes evicted from in this round."""
        seen = len(self.desched.evictions)
        assert self.desched.run_round(snapshot(cluster(**states), START + 10 * self.n)) is None
        self.n += 1
        return {e.node for e in self.desched.evictions[seen:]}

    def row(self, name: str) -> JSON:
        (fw,) = self.desched.frameworks
        plugin = fw.plugins["LowNodeLoad"]
        assert isinstance(plugin, Reporter)
        return dict(plugin.report()[POOL][name])


def test_each_node_is_counted_on_its_own() -> None:
    r = Rounds()
    assert r.round(n2="hot") == set() and r.round(n2="hot") == set()  # n2 counted twice, not yet confirmed
    assert r.row("n2")["abnormalities"] == 2
    assert r.round(n1="hot", n2="hot") == {"n2"}  # n2's third hot round; n1's first
    assert r.row("n1")["abnormalities"] == 1 and r.row("n1")["anomaly"] is False


def test_a_count_not_yet_confirmed_survives_a_low_round() -> None:
    """[quirk] Resetting a detector that is still OK changes nothing (upstream's setState returns when the state is
    unchanged, so its counters are not cleared): two hot rounds, one low round, and the next hot round confirms."""
    r = Rounds()
    for _ in range(2):
        assert r.round(n1="hot", n2="hot") == set()
    assert r.round(n1="low", n2="hot") == {"n2"}  # the round acts and resets n1, which is OK: counts kept
    assert r.row("n1")["abnormalities"] == 2
    assert r.round(n1="hot", n2="normal") == {"n1"}


def test_a_node_brought_below_high_is_counted_afresh() -> None:
    """The evictions take n1 from 80% to 50% with candidates left: the eviction loop resets its detector before
    the next candidate, so the node reads OK with no count right after (`abnormal`: the round acted on it), and a
    node still hot in the next rounds (its pods not yet gone) waits three hot rounds again."""
    r = Rounds()
    assert r.round(n1="hot") == set() and r.round(n1="hot") == set()
    assert r.round(n1="hot") == {"n1"}
    assert {k: r.row("n1")[k] for k in ("abnormal", "anomaly", "abnormalities")} == {
        "abnormal": True, "anomaly": False, "abnormalities": 0}
    assert r.round(n1="hot") == set() and r.row("n1")["abnormalities"] == 1
    assert r.round(n1="hot") == set() and r.round(n1="hot") == {"n1"}


def test_a_node_left_over_high_stays_in_anomaly() -> None:
    """n1 at 100%, one low target with room for four 400m pods: after evicting them n1 is still above 50% when the
    candidates run out, so no reset; the normal mark after the round (1, not above consecutiveNormalities 1)
    leaves it in Anomaly, and the next hot round acts at once. [quirk] Only its timeout ends that Anomaly: the normal
    marks (after a round that acts) never run consecutively, since the round's abnormal mark clears them first."""
    r = Rounds()
    cluster_states = {"n1": "full", "n2": "normal", "n3": "normal", "n4": "low"}
    assert r.round(**cluster_states) == set() and r.round(**cluster_states) == set()
    assert r.round(**cluster_states) == {"n1"}
    assert (r.row("n1")["abnormal"], r.row("n1")["anomaly"]) == (True, True)
    assert r.round(**cluster_states) == {"n1"}
    calm = {"n1": "normal", "n2": "normal", "n3": "normal", "n4": "low"}
    assert r.round(**calm) == set()
    assert (r.row("n1")["abnormal"], r.row("n1")["anomaly"]) == (False, True)  # not a source: not marked at all
    for _ in range(4):  # rounds at 50..80 s: confirmed at 20 s, the Anomaly lasts the timeout (60 s)
        r.round(**calm)
    assert r.row("n1")["anomaly"] is True
    r.round(**calm)
    assert r.row("n1")["anomaly"] is False
