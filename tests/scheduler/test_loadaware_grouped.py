"""LoadAwareScheduling's node load counted afresh with each distinct estimate added once, times its pods
(NodeLoads.group_estimates), equals the load counted pod by pod: pods of a few shapes, prod and batch, reserve pods,
pods with their own scaling factors, NodeMetrics reporting none, some or prod pods, and the assumed times given."""

from __future__ import annotations

import random
from typing import Any

import pytest
from test_loadaware import NOW, node, nodemetric, pod, pod_metric

from scheduler.cluster import build_cluster
from scheduler.plugins.loadaware import LoadAware, LoadAwareArgs
from scheduler.plugins.loadaware_facts import NodeLoads

FIELDS = ("has_metric", "capacity", "update_time", "node_usage", "node_delta", "node_estimated", "prod_usage",
          "prod_delta", "thresholds")
SHAPES = [("1", "2Gi"), ("2", "8Gi"), ("500m", "1Gi")]


def _pod(rng: random.Random, name: str, node_name: str) -> dict[str, Any]:
    cpu, memory = rng.choice(SHAPES)
    labels = {"koordinator.sh/priority-class": "koord-prod"} if rng.random() < 0.4 else {}
    annotations = {"scheduling.koordinator.sh/load-estimated-scaling-factors": '{"cpu": 50}'} \
        if rng.random() < 0.15 else None
    p = pod(name, cpu, memory, node_name=node_name, labels=labels, annotations=annotations,
            scheduled_at=NOW - rng.choice([5, 3600]) if rng.random() < 0.5 else None)
    if rng.random() < 0.08:
        p["metadata"]["annotations"]["scheduling.koordinator.sh/reserve-pod"] = "true"
    return p


def _metric(rng: random.Random, name: str, pods: list[str]) -> dict[str, Any]:
    reported = rng.choice([[], rng.sample(pods, min(2, len(pods)))])
    priority = rng.choice(["koord-batch", "koord-prod"])
    return nodemetric(name, age=rng.choice([10, 90]), system={"cpu": "500m", "memory": "1Gi"},
                      pods=[pod_metric(p, "300m", "2Gi", priority) for p in reported])


def _loads(objects: list[dict[str, Any]], grouped: bool, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    c = build_cluster(objects)
    ticks = iter(range(10**6))
    plugin = LoadAware(LoadAwareArgs(prod_usage_include_sys=True, allow_customize_estimation=True),
                       now=lambda: NOW - 30 + next(ticks) * 0.001)  # each pod assumed at its own time
    with monkeypatch.context() as m:
        m.setattr(NodeLoads, "group_estimates", grouped)
        loads = [plugin.loads.get(n) for n in c.nodes.values()]
        assumed = dict(vars(plugin.pods)["_assumed"])
    return [[None if st is None else {f: getattr(st, f) for f in FIELDS} for st in loads], assumed]


@pytest.mark.parametrize("seed", range(6))
def test_grouped_estimates_count_as_pod_by_pod(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    objects: list[dict[str, Any]] = []
    for i in range(12):
        name = f"n{i}"
        names = [f"p{i}-{k}" for k in range(rng.randint(0, 9))]
        objects.append(node(name, cpu="64", memory="256Gi"))
        if rng.random() < 0.9:
            objects.append(_metric(rng, name, names))
        objects += [_pod(rng, p, name) for p in names]
    grouped, plain = _loads(objects, True, monkeypatch), _loads(objects, False, monkeypatch)
    assert grouped == plain
    assert any(st is not None and st["prod_delta"]["cpu"] > 0 for st in plain[0])  # prod pods counted in full
