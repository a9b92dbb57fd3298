"""Leader election with a Lease (the chart's leaderElection: koordinator-system/koord-scheduler) against kmock:
one holder at a time, a takeover only once the holder stopped renewing, a 409 loses, a release hands over."""

from __future__ import annotations

import asyncio
import copy
import threading
from typing import Any

import kmock
import pytest

from apis.client.kubeapi import KubeClient, KubeConfig, Unreachable
from apis.core.metatime import parse_time
from scheduler.config import ConfigError, parse_config
from scheduler.leaderelection import LeaderElector, LeaseConfig

from kubedouble import emulate_put

LEASES = "coordination.k8s.io/v1/leases"
NS, NAME = "koordinator-system", "koord-scheduler"


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def km(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    kmock.resources[LEASES] = {}
    emulate_put(kmock, LEASES)
    return kmock


def elector(km: kmock.KubernetesEmulator, ident: str, clock: Clock) -> LeaderElector:
    return LeaderElector(KubeClient(KubeConfig(server=str(km.url))), LeaseConfig(NS, NAME), ident, clock)


def lease(km: kmock.KubernetesEmulator) -> dict[str, Any]:
    raw: dict[str, Any] = km.objects[LEASES, NS, NAME].raw
    return raw


async def test_one_holder_and_a_takeover_only_after_the_lease_expires(km: kmock.KubernetesEmulator) -> None:
    clock = Clock()
    a, b = elector(km, "a", clock), elector(km, "b", clock)
    assert await asyncio.to_thread(a.try_acquire_or_renew) and a.leading
    spec = lease(km)["spec"]
    assert (spec["holderIdentity"], spec["leaseDurationSeconds"], spec["leaseTransitions"]) == ("a", 15, 0)
    clock.now += 10  # a is fresh: b stands by; a renews
    assert not await asyncio.to_thread(b.try_acquire_or_renew) and not b.leading
    assert await asyncio.to_thread(a.try_acquire_or_renew)
    assert parse_time(lease(km)["spec"]["renewTime"]) == pytest.approx(clock.now)
    clock.now += 14  # 14 s since a's renewal: still a's
    assert not await asyncio.to_thread(b.try_acquire_or_renew)
    clock.now += 2  # a stopped renewing 16 s ago: b takes over, one transition
    assert await asyncio.to_thread(b.try_acquire_or_renew)
    spec = lease(km)["spec"]
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("b", 1)
    assert not await asyncio.to_thread(a.try_acquire_or_renew) and not a.leading


async def test_a_stale_update_loses_and_a_release_hands_over(km: kmock.KubernetesEmulator) -> None:
    clock = Clock()
    a, b = elector(km, "a", clock), elector(km, "b", clock)
    assert await asyncio.to_thread(a.try_acquire_or_renew)
    stale = copy.deepcopy(lease(km))
    stale["metadata"]["resourceVersion"] = "1"  # as the API server creates it (kmock leaves it out)
    clock.now += 20
    assert await asyncio.to_thread(b.try_acquire_or_renew)  # b's write bumps the resourceVersion
    a.client.get = lambda *_a, **_k: stale  # type: ignore[method-assign]  # a read before b's write
    assert not await asyncio.to_thread(a.try_acquire_or_renew)  # 409: not the leader
    assert lease(km)["spec"]["holderIdentity"] == "b"
    await asyncio.to_thread(b.release)
    assert not lease(km)["spec"]["holderIdentity"] and not b.leading
    c = elector(km, "c", clock)
    assert await asyncio.to_thread(c.try_acquire_or_renew)  # no waiting out the duration after a release


def test_the_configs_leader_election() -> None:
    cfg = parse_config({"leaderElection": {"leaderElect": True, "resourceLock": "leases", "resourceName": NAME,
                                           "resourceNamespace": NS, "leaseDuration": "30s"},
                        "profiles": [{"schedulerName": NAME}]})
    assert (cfg.leader_elect, cfg.lease_namespace, cfg.lease_name, cfg.lease_timing) == (True, NS, NAME,
                                                                                         (30.0, 10.0, 2.0))
    assert parse_config({"profiles": [{"schedulerName": "x"}]}).leader_elect  # kube-scheduler's default
    with pytest.raises(ConfigError, match="resourceLock: 'endpoints' is not supported"):
        parse_config({"leaderElection": {"resourceLock": "endpoints"}})
    with pytest.raises(ConfigError, match="leaseDuration must be greater than renewDeadline"):
        parse_config({"leaderElection": {"leaseDuration": "5s"}})


def test_a_leader_that_cannot_renew_within_the_deadline_stops_leading() -> None:
    clock = Clock()

    class Down:
        def get(self, *_: Any, **__: Any) -> Any:
            clock.now += 4  # each failed try costs time
            raise Unreachable("connection refused")

    e = LeaderElector(Down(), LeaseConfig(NS, NAME, 15.0, 10.0, 0.001), "a", clock)  # type: ignore[arg-type]
    e.leading, e.renewed_at = True, clock.now  # as after a successful acquire
    lost: list[float] = []
    e.renew_until_lost(threading.Event(), lambda: lost.append(clock.now))
    # tries at +4 and +8 are within the 10 s deadline; the one at +12 is not
    assert lost == [clock.now] and clock.now - 1_700_000_000.0 == 12 and not e.leading
