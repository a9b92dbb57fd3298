"""The agent's API writes under faults (kmock answering 5xx, 429 with Retry-After, resetting the connection, 409
from a concurrent writer): a failed NodeMetric report is tried again within its period, one attempt after the
other, after a growing wait; conflicts on the NodeMetric and NodeResourceTopology writes end in a re-read and a
write that lands, never in a lost report or a crash.

Waits run on a SkipClock (benchmarks/skipclock.py): they cost no real time and are recorded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kmock
import pytest

from apis.client.kubeapi import KubeClient, KubeConfig
from benchmarks.skipclock import SkipClock
from koordlet.agent import Agent
from koordlet.cluster import REPORT_RETRY, ClusterLink
from koordlet.config import Config
from koordlet.host.driver import CgroupDriver
from koordlet.reporters import nrt
from koordlet.reporters.nodemetric_api import STATUS_UPDATE_QPS
from koordlet.reporters.nrt import PLURAL
from koordlet.states.nodecpu import node_cpu_facts

from kubedouble import NM, emulate_put, emulate_status_subresource, status_failure
from simhost import SimHost

NODE = "node-1"
NRT = f"topology.node.k8s.io/v1alpha1/{PLURAL}"


@pytest.fixture
def km(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    kmock.resources[NM] = {}
    kmock.resources[NRT] = {}
    kmock.objects[NM, None, NODE] = {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
                                     "metadata": {"name": NODE, "resourceVersion": "1"}, "spec": {}}
    return kmock


def _link(km: kmock.KubernetesEmulator, tmp_path: Path) -> tuple[Agent, ClusterLink, SkipClock]:
    host = SimHost(tmp_path / "host", 1, CgroupDriver.SYSTEMD).setup()
    cfg = Config(node_name=NODE, paths=host.paths, state_dir=str(tmp_path / "st"))
    agent = Agent(cfg)
    agent.collect()
    kube = KubeConfig(server=str(km.url), token="sa-token")
    link = ClusterLink(cfg, kube, KubeClient(kube), agent)
    link.clock = clock = SkipClock()
    link.node = {"metadata": {"name": NODE, "uid": "node-uid"}}
    return agent, link, clock


def _put_status(km: kmock.KubernetesEmulator) -> Any:
    return km["put", kmock.resource(NM), kmock.subresource("status")]


def _nodemetric_calls(km: kmock.KubernetesEmulator) -> list[str]:
    """The NodeMetric requests in order, as GET/PUT (the spec read and each attempt's re-read are GETs)."""
    return [str(r.method.value) for r in km if r.resource == kmock.resource(NM)]


def _waits(clock: SkipClock) -> list[float]:
    return [w for ws in clock.waits.values() for w in ws]


async def test_server_errors_are_retried_within_the_period(km: kmock.KubernetesEmulator, tmp_path: Path) -> None:
    """Fault: the first two status writes answered 503. Invariant: the same report round tries again after a
    growing wait (the second one also waits for the writer's 0.1/s update budget, as upstream's statusUpdater)
    and lands; attempts go one after the other, each re-reading the object; the round ends well inside its
    period. (Main gave up until the next period: 60 s of a stale NodeMetric per failure.)"""
    _put_status(km)[:2] << kmock.Response(status=503, payload=status_failure(503, "etcd leader changed"))
    emulate_status_subresource(km)
    agent, link, clock = _link(km, tmp_path)

    await asyncio.to_thread(link.report, agent)

    assert "status" in km.objects[NM, None, NODE].raw
    assert agent.health.report_last_success > 0 and agent.health.report_failures == {"write": 2}
    assert _nodemetric_calls(km) == ["GET", "GET", "PUT", "GET", "PUT", "GET", "PUT"]
    first, second = _waits(clock)
    assert REPORT_RETRY.initial <= first < 2 * REPORT_RETRY.initial
    assert first + second >= 1 / STATUS_UPDATE_QPS - 0.1  # the third write needed a token back (burst 2)
    assert first + second < agent.policy.report_period


async def test_too_many_requests_waits_its_retry_after(km: kmock.KubernetesEmulator, tmp_path: Path) -> None:
    """Fault: the first status write answered 429 with Retry-After: 7. Invariant: the retry waits at least the
    7 s the server asked for, then lands in the same round."""
    _put_status(km)[:1] << kmock.Response(status=429, headers={"Retry-After": "7"},
                                          payload=status_failure(429, "too many requests"))
    emulate_status_subresource(km)
    agent, link, clock = _link(km, tmp_path)

    await asyncio.to_thread(link.report, agent)

    assert "status" in km.objects[NM, None, NODE].raw
    assert [w >= 7.0 for w in _waits(clock)] == [True]
    assert link.writer.stats.failures == {"too_many_requests": 1}


async def test_connection_reset_is_retried(km: kmock.KubernetesEmulator, tmp_path: Path) -> None:
    """Fault: the connection of the first status write is reset without an answer. Invariant: counted as
    unreachable, retried after a wait, landed in the same round."""
    resets = _reset_first(1)
    _put_status(km) << resets
    emulate_status_subresource(km)
    agent, link, clock = _link(km, tmp_path)

    await asyncio.to_thread(link.report, agent)

    assert "status" in km.objects[NM, None, NODE].raw
    assert link.writer.stats.failures == {"unreachable": 1}
    assert len(_waits(clock)) == 1


async def test_a_failing_api_server_gets_a_bounded_round(km: kmock.KubernetesEmulator, tmp_path: Path) -> None:
    """Fault: every status write answered 500. Invariant: the round gives up before its period is over, with at
    most the writes the update budget allows in a period (burst 2 + 0.1/s), one at a time; the agent goes on."""
    _put_status(km) << kmock.Response(status=500, payload=status_failure(500, "etcd is sad"))
    agent, link, clock = _link(km, tmp_path)

    await asyncio.to_thread(link.report, agent)

    period = agent.policy.report_period
    puts = _nodemetric_calls(km).count("PUT")
    assert 2 <= puts <= 2 + period * STATUS_UPDATE_QPS
    assert sum(_waits(clock)) < period
    assert agent.health.report_failures["write"] == puts and agent.health.report_last_success == 0
    assert all(a != b for a, b in zip(_nodemetric_calls(km)[1:], _nodemetric_calls(km)[2:], strict=False))


async def test_forbidden_is_not_retried(km: kmock.KubernetesEmulator, tmp_path: Path) -> None:
    """Fault: the status write answered 403. Invariant: a failure no retry can fix is not retried this period
    (one write, no wait)."""
    _put_status(km) << kmock.Response(status=403, payload=status_failure(403, "forbidden"))
    agent, link, clock = _link(km, tmp_path)

    await asyncio.to_thread(link.report, agent)

    assert _nodemetric_calls(km).count("PUT") == 1 and _waits(clock) == []


async def test_nodemetric_conflict_rereads_and_writes(km: kmock.KubernetesEmulator, tmp_path: Path) -> None:
    """Fault: another writer updates the NodeMetric between our read and our write, so the write gets 409.
    Invariant: the object is read again and the status written on its new resourceVersion, in the same attempt
    (client-go RetryOnConflict); the other writer's change is kept."""
    _put_status(km) << _concurrent_writer(km, NM, 1)
    emulate_status_subresource(km)
    agent, link, clock = _link(km, tmp_path)

    await asyncio.to_thread(link.report, agent)

    stored = km.objects[NM, None, NODE].raw
    assert "status" in stored and stored["spec"] == {"by": "someone else"}
    assert _nodemetric_calls(km) == ["GET", "GET", "PUT", "GET", "PUT"]
    assert agent.health.report_failures == {} and _waits(clock) == []


async def test_nodemetric_conflict_storm_still_lands_in_the_period(km: kmock.KubernetesEmulator,
                                                                   tmp_path: Path) -> None:
    """Fault: three status writes in a row answered 409 (more than the update budget's burst lets one attempt
    retry). Invariant: the report is not lost: a later attempt in the same period re-reads and lands."""
    _put_status(km)[:3] << kmock.Response(status=409, payload=status_failure(409, "the object has been modified"))
    emulate_status_subresource(km)
    agent, link, _ = _link(km, tmp_path)

    await asyncio.to_thread(link.report, agent)

    assert "status" in km.objects[NM, None, NODE].raw
    assert agent.health.report_last_success > 0


async def test_nrt_create_conflict_becomes_an_update(km: kmock.KubernetesEmulator, tmp_path: Path) -> None:
    """Fault: the NodeResourceTopology is absent when read, then created by someone else before our create, which
    gets 409 AlreadyExists. Invariant: re-read, and our topology written over theirs as an update (their labels
    kept), reported as held."""
    emulate_put(km, NRT)
    theirs = {"apiVersion": "topology.node.k8s.io/v1alpha1", "kind": "NodeResourceTopology",
              "metadata": {"name": NODE, "resourceVersion": "4", "labels": {"by": "someone-else"}}, "zones": []}

    def absent_then_created(request: kmock.Request) -> Any:
        km.objects[NRT, None, NODE] = theirs  # created by someone else right after our read
        return kmock.Response(status=404, payload=status_failure(404, "not found"))

    km["get", kmock.resource(NRT)][:1] << absent_then_created
    _, link, _ = _link(km, tmp_path)

    assert await asyncio.to_thread(link.report_nrt, _topology()) is True

    stored = km.objects[NRT, None, NODE].raw
    assert stored["zones"] and stored["metadata"]["labels"] == {"by": "someone-else"}
    assert [str(r.method.value) for r in km if r.resource == kmock.resource(NRT)] == ["GET", "POST", "GET", "PUT"]


async def test_nrt_update_conflict_rereads_and_writes(km: kmock.KubernetesEmulator, tmp_path: Path) -> None:
    """Fault: another writer updates the NodeResourceTopology between our read and our update (409). Invariant:
    re-read, then written on the new resourceVersion with the other writer's annotation kept."""
    km.objects[NRT, None, NODE] = {"apiVersion": "topology.node.k8s.io/v1alpha1", "kind": "NodeResourceTopology",
                                   "metadata": {"name": NODE, "resourceVersion": "1"}, "zones": []}
    km["put", kmock.resource(NRT)] << _concurrent_writer(km, NRT, 1)
    emulate_put(km, NRT)
    _, link, _ = _link(km, tmp_path)

    assert await asyncio.to_thread(link.report_nrt, _topology()) is True

    stored = km.objects[NRT, None, NODE].raw
    assert stored["zones"] and stored["metadata"]["annotations"]["by"] == "someone-else"
    assert [str(r.method.value) for r in km if r.resource == kmock.resource(NRT)] == ["GET", "PUT", "GET", "PUT"]


def _topology() -> nrt.TopologyStatus:
    from koordlet.states.cpuinfo import CPUBasicInfo, NumaMemory
    from koordlet.states.cpupools import CPUTopology

    cpus = CPUTopology.from_raw([(c, c // 2, c % 2, c // 2) for c in range(4)])
    facts = node_cpu_facts(cpus, [], {}, None)
    memory = {0: NumaMemory(8 << 30, 0), 1: NumaMemory(8 << 30)}
    return nrt.topology_status(facts, CPUBasicInfo("cpu", True, False, "f", "GenuineIntel"), memory, None)


def _reset_first(n: int) -> Callable[[kmock.Request], Any]:
    """A kmock reaction that drops the connection of the first `n` requests without an answer."""
    seen = [0]

    def react(request: kmock.Request) -> Any:
        seen[0] += 1
        if seen[0] > n:
            raise NotImplementedError  # kmock: nothing to answer here, try the next reaction
        transport = request._raw_request.transport if request._raw_request is not None else None
        if transport is not None:
            transport.abort()
        return kmock.Response(status=500, payload={})

    return react


def _concurrent_writer(km: kmock.KubernetesEmulator, resource: str, n: int) -> Callable[[kmock.Request], Any]:
    """A kmock reaction for the first `n` writes: someone else changes the object first (a new resourceVersion),
    so the write is refused with 409 as the API server would."""
    seen = [0]

    def react(request: kmock.Request) -> Any:
        seen[0] += 1
        if seen[0] > n:
            raise NotImplementedError
        obj = km.objects[resource, None, NODE]
        rv = str(int(obj.raw["metadata"]["resourceVersion"]) + 1)
        change = ({"spec": {"by": "someone else"}} if resource == NM
                  else {"metadata": {"annotations": {"by": "someone-else"}}})
        obj.patch({**change, "metadata": {**change.get("metadata", {}), "resourceVersion": rv}})
        return kmock.Response(status=409, payload=status_failure(409, "the object has been modified"))

    return react
