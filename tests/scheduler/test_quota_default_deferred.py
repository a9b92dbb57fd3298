"""ElasticQuota's default quota accounted lazily (GroupQuotaManager.defer_add / defer_reserve, propagated when the
tree is next read) answers exactly as accounting each pod at once: the same PreFilter verdicts and refusals, the same
placements, and the same quota summaries (runtimeVersion included), usage and status write-back, while labelled and
unlabelled, non-preemptible and zero-request pods come and go, nodes leave and the summaries are read now and then."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest
from test_elasticquota import eq, node, pod

from scheduler.cli import profile
from scheduler.cluster import build_cluster
from scheduler.elasticquota.manager import GroupQuotaManager
from scheduler.elasticquota.plugin import ElasticQuota
from scheduler.elasticquota.status import status_patch
from scheduler.framework import Scheduler

ALLOW_LENT = "quota.scheduling.koordinator.sh/allow-lent-resource"
PARENT = "quota.scheduling.koordinator.sh/parent"
IS_PARENT = "quota.scheduling.koordinator.sh/is-parent"
PREEMPTIBLE = "quota.scheduling.koordinator.sh/preemptible"


def _objects(default_max: bool) -> list[dict[str, Any]]:
    out = [node(f"n{i}", 16) for i in range(4)]
    out += [eq("team-a", {"cpu": 8, "memory": "32Gi"}, {"cpu": 4, "memory": "8Gi"}),
            eq("team-b", {"cpu": 16, "memory": "64Gi"}, {"cpu": 6, "memory": "8Gi"}, {ALLOW_LENT: "false"}),
            eq("org", {"cpu": 32, "memory": "128Gi"}, {"cpu": 8, "memory": "16Gi"}, {IS_PARENT: "true"}),
            eq("team-c", {"cpu": 16, "memory": "64Gi"}, {"cpu": 4, "memory": "8Gi"}, {PARENT: "org"}),
            eq("ns1", {"cpu": 6, "memory": "16Gi"}, {"cpu": 2, "memory": "4Gi"}, ns="ns1")]
    if default_max:  # a small default quota: its pods get refused once it is full
        # (and one naming a resource no node has: a pod asking 0 of it brings a new name into the used)
        out.append(eq("koordinator-default-quota", {"cpu": 14, "memory": "40Gi", "example.com/widget": 10}, {},
                      ns="koordinator-system"))
    return out


def _incoming(rng: random.Random, i: int) -> dict[str, Any]:
    kind = rng.random()
    if kind < 0.7:
        p = pod(f"d{i}", rng.choice([0.5, 1, 2]), ns=rng.choice(["default", "other"]))  # the default quota
        if rng.random() < 0.2:
            p["metadata"]["labels"][PREEMPTIBLE] = "false"
        if rng.random() < 0.15:  # a request of zero, or of nothing the quota's max names
            p["spec"]["containers"][0]["resources"]["requests"] = rng.choice(
                [{"cpu": "0", "memory": "0"}, {"example.com/widget": "1"}, {"example.com/widget": "0"}])
        return p
    if kind < 0.78:
        return pod(f"n{i}", 1, ns="ns1")
    p = pod(f"q{i}", rng.choice([1, 2]), rng.choice(["team-a", "team-b", "team-c", "missing"]))
    if rng.random() < 0.2:
        p["metadata"]["labels"][PREEMPTIBLE] = "false"
    return p


def _run(seed: int) -> list[Any]:
    """Everything the plugin answers and shows along one seeded run."""
    rng = random.Random(seed)
    objects = _objects(default_max=seed % 2 == 0)
    sched = Scheduler(build_cluster(copy.deepcopy(objects)), profile(None))
    quota = sched.plugin("ElasticQuota", ElasticQuota)
    assert quota is not None
    seen: list[Any] = []
    placed: list[dict[str, Any]] = []
    for i in range(70):
        p = _incoming(rng, i)
        seen.append(quota.prefilter(copy.deepcopy(p), sched.cluster))  # a pending pod's look, not placed
        a = sched.schedule(p)
        seen.append((a.node, a.reason))
        if a.node is not None:
            placed.append(p)
        step = rng.random()
        if step < 0.1 and placed:  # a pod deleted
            gone = placed.pop(rng.randrange(len(placed)))
            quota.forget(gone)
            where = sched.cluster.nodes.get(gone["spec"]["nodeName"])
            if where is not None:
                where.remove_pod(f"{gone['metadata']['namespace']}/{gone['metadata']['name']}")
        elif step < 0.13 and len(sched.cluster.nodes) > 2:  # a node leaves: the cluster total moves
            del sched.cluster.nodes[sorted(sched.cluster.nodes)[-1]]
        elif step < 0.19 and placed:  # Reserve again for a pod placed already: nothing more is used
            again = placed[rng.randrange(len(placed))]
            where = sched.cluster.nodes.get(again["spec"]["nodeName"])
            if where is not None:
                quota.reserve(again, where, sched.cluster)
        elif step < 0.28:  # the summaries read between placements (what the status writer and services read)
            seen.append(quota.summaries(include_pods=True))
    seen.append(quota.summaries(include_pods=True))
    seen.append(quota.usage())
    seen.append([status_patch(o, quota.summary(o["metadata"]["name"]) or {})
                 for o in objects if o["kind"] == "ElasticQuota"])
    return seen


@pytest.mark.parametrize("seed", range(4))
def test_deferred_default_quota_answers_as_each_pod_at_once(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    deferred: list[int] = []
    defer_reserve = GroupQuotaManager.defer_reserve

    def counting(self: GroupQuotaManager, quota: str, pod_key: str) -> None:
        deferred.append(1)
        defer_reserve(self, quota, pod_key)

    with monkeypatch.context() as m:
        m.setattr(GroupQuotaManager, "defer_reserve", counting)
        fast = _run(seed)
    with monkeypatch.context() as m:
        m.setattr(GroupQuotaManager, "defers", lambda self, quota: False)
        plain = _run(seed)
    assert len(deferred) >= 15
    assert len(fast) == len(plain)
    for k, (a, b) in enumerate(zip(fast, plain, strict=True)):
        assert a == b, (seed, k)
