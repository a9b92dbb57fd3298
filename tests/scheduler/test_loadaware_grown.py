"""LoadAwareScheduling's node load after a placement: the load before plus the one pod added equals the load counted
afresh from every pod, through placements, removals, a pod replaced under its key, several changes between two
looks, reported and prod pods, a reservation and a new NodeMetric."""

from __future__ import annotations

import random
from typing import Any

import pytest
from test_loadaware import NOW, node, nodemetric, pod, pod_metric

from scheduler.cluster import NodeInfo, build_cluster, is_reserve_pod
from scheduler.plugins.loadaware import LoadAware, LoadAwareArgs
from scheduler.plugins.loadaware_facts import NodeLoads

PROD = {"koordinator.sh/priority-class": "koord-prod"}
FIELDS = ("has_metric", "capacity", "update_time", "node_usage", "node_delta", "node_estimated", "prod_usage",
          "prod_delta", "thresholds")


def _metric(reported: list[str], age: float) -> dict[str, Any]:
    return nodemetric("n1", cpu="3", memory="30Gi", age=age, system={"cpu": "500m", "memory": "1Gi"},
                      pods=[pod_metric(name, "300m", "2Gi", "koord-prod" if k % 2 else "koord-batch")
                            for k, name in enumerate(reported)])


def _pod(rng: random.Random, name: str) -> dict[str, Any]:
    labels = PROD if rng.random() < 0.5 else {}
    scheduled = NOW - rng.choice([5, 50, 3600]) if rng.random() < 0.6 else None
    p = pod(name, f"{rng.randint(1, 4)}", f"{rng.randint(1, 8)}Gi", node_name="n1", labels=labels,
            scheduled_at=scheduled)
    if rng.random() < 0.1:  # a reservation's reserve pod: not a pod that runs
        p["metadata"]["annotations"]["scheduling.koordinator.sh/reserve-pod"] = "true"
    return p


def _same(loads: NodeLoads, plugin: LoadAware, n: NodeInfo, monkeypatch: pytest.MonkeyPatch) -> int:
    """The node's load equals one counted afresh; how many of its pods the load looked at (PodEstimates.entry)."""
    looked: list[str] = []
    entry = plugin.pods.entry

    def counting(pod: dict[str, Any], pod_key: str | None = None) -> Any:
        looked.append(pod_key or "")
        return entry(pod, pod_key)

    with monkeypatch.context() as m:
        m.setattr(plugin.pods, "entry", counting)
        got = loads.get(n)
    fresh = NodeLoads(plugin.resources, plugin.pods, plugin.args.prod_usage_include_sys).get(n)
    assert got is not None and fresh is not None
    assert {f: getattr(got, f) for f in FIELDS} == {f: getattr(fresh, f) for f in FIELDS}
    return len(looked)


@pytest.mark.parametrize("seed", range(4))
def test_a_grown_load_equals_one_counted_afresh(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    names = [f"p{k}" for k in range(12)]
    c = build_cluster([node("n1", cpu="64", memory="256Gi"), _metric(names[:4], age=20)])
    n = c.nodes["n1"]
    plugin = LoadAware(LoadAwareArgs(prod_usage_include_sys=True), now=lambda: NOW)
    loads = plugin.loads
    _same(loads, plugin, n, monkeypatch)
    grown = 0
    for step in range(40):
        action = rng.random()
        present = list(n.pods)
        placement = action < 0.6 or not present
        if placement:
            n.add_pod(_pod(rng, f"{rng.choice(names)}-{step}"))
        elif action < 0.75:  # a pod deleted
            n.remove_pod(rng.choice(present))
        elif action < 0.85:  # a pod replaced under its key (same count)
            k = rng.choice(present)
            n.remove_pod(k)
            n.add_pod(_pod(rng, k.split("/", 1)[1]))
        elif action < 0.9:  # two placements before the next look
            n.add_pod(_pod(rng, f"a{step}"))
            n.add_pod(_pod(rng, f"b{step}"))
        elif action < 0.95:  # a pod deleted and two placed before the next look: one pod more, not one added
            n.remove_pod(rng.choice(present))
            n.add_pod(_pod(rng, f"a{step}"))
            n.add_pod(_pod(rng, f"b{step}"))
        else:  # a new NodeMetric, reporting other pods
            reported = rng.sample([k.split("/", 1)[1] for k in n.pods] or names, min(2, len(n.pods) or 2))
            n.nodemetric = _metric(reported, age=rng.choice([5, 90]))
        looked = _same(loads, plugin, n, monkeypatch)
        running = [k for k, p in n.pods.items() if not is_reserve_pod(p)]  # a reserve pod is not looked at
        if placement:  # the load before plus the pod placed: that pod looked at alone
            assert looked == (1 if running and running[-1] == next(reversed(n.pods)) else 0)
            grown += 1
        elif len(running) > 1:
            assert looked == len(running)  # anything else: every pod counted afresh
    assert grown >= 15
