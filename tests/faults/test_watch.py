"""Watch loops under API faults (kmock answering every watch with 500, closing every watch at once, failing every
list): the agent's and the extender's watchers back off as client-go's reflector, so their request rate stays
under the ceiling its backoff implies, and a watch delivers again promptly once the API server recovers.

Rates are taken on a SkipClock (benchmarks/skipclock.py): each watcher's backoff waits cost no real time, so a
watcher lives 5 minutes of its own timeline in about a second, and its requests are divided by that timeline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kmock
import pytest

from apis.client.backoff import REFLECTOR, BackoffPolicy
from apis.client.kubeapi import KubeClient, KubeConfig
from benchmarks.skipclock import SkipClock
from koordlet.agent import Agent
from koordlet.cluster import NODE_PATH, NODEMETRIC_PATH, NODESLO_PATH, ClusterLink
from koordlet.config import Config
from koordlet.host.driver import CgroupDriver
from scheduler.cli import profile
from scheduler.cluster import Cluster
from scheduler.extender import SOURCES, ClusterSource, Extender
from scheduler.framework import Scheduler

from kubedouble import NM, driver_client, status_failure
from simhost import SimHost

NODE = "node-1"
NODESLO = "slo.koordinator.sh/v1alpha1/nodeslos"
DEVICES = "scheduling.koordinator.sh/v1alpha1/devices"
NRT = "topology.node.k8s.io/v1alpha1/noderesourcetopologies"
RESERVATIONS = "scheduling.koordinator.sh/v1alpha1/reservations"
QUOTAS = "scheduling.sigs.k8s.io/v1alpha1/elasticquotas"
AGENT_PATHS = (NODE_PATH, NODESLO_PATH, NODEMETRIC_PATH)
EXTENDER_PATHS = tuple(source.path for source in SOURCES)
HORIZON = 300.0  # seconds of each watcher's own timeline
REAL_LIMIT = 12.0  # seconds of real time to let the watchers reach it (old loops never do: they sleep for real)


@pytest.fixture
def km(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    for res in ("v1/nodes", "v1/pods", DEVICES, NM, NODESLO, NRT, RESERVATIONS, QUOTAS):
        kmock.resources[res] = {}
    kmock.objects["v1/nodes", None, NODE] = {"apiVersion": "v1", "kind": "Node",
                                             "metadata": {"name": NODE, "resourceVersion": "5"}, "status": {}}
    kmock.objects[NODESLO, None, NODE] = _nodeslo("nginx")
    kmock.objects[NM, None, NODE] = {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
                                     "metadata": {"name": NODE, "resourceVersion": "1"}, "spec": {}}
    return kmock


def _nodeslo(app: str) -> dict[str, Any]:
    return {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO",
            "metadata": {"name": NODE, "resourceVersion": "1"},
            "spec": {"hostApplications": [{"name": app, "qos": "LS", "priority": "koord-prod"}]}}


def _client(km: kmock.KubernetesEmulator, user_agent: str = "koordlet") -> KubeClient:
    # No client-side rate limit: the loops' own pacing is what is measured (main's ran at the limiter's 20 qps).
    return KubeClient(KubeConfig(server=str(km.url), token="sa-token", qps=0, user_agent=user_agent))


def _link(km: kmock.KubernetesEmulator, tmp_path: Path) -> tuple[Agent, ClusterLink]:
    host = SimHost(tmp_path / "host", 1, CgroupDriver.SYSTEMD).setup()
    cfg = Config(node_name=NODE, paths=host.paths, state_dir=str(tmp_path / "st"))
    agent = Agent(cfg)
    client = _client(km)
    return agent, ClusterLink(cfg, client.config, client, agent)


def _extender(km: kmock.KubernetesEmulator) -> Extender:
    def make(cluster: Cluster) -> Scheduler:
        return Scheduler(cluster, profile(None))

    # koord-sched's calls stay out of the agent's least-privilege proof (tests/test_rbac.py counts User-Agent
    # koordlet); tests/scheduler proves koord-sched's role with the same list and watch calls.
    return Extender(ClusterSource(_client(km, "koord-sched")), make)


def _fault(decide: Callable[[kmock.Request], kmock.Response | None]) -> Callable[[kmock.Request], Any]:
    """A kmock reaction injecting `decide`'s answer, or passing the request on to the emulator when None."""

    def react(request: kmock.Request) -> Any:
        answer = decide(request)
        if answer is None:
            raise NotImplementedError  # kmock: matched, nothing to answer, try the next reaction
        return answer

    return react


def _server_error(_: kmock.Request) -> kmock.Response:
    return kmock.Response(status=500, payload=status_failure(500, "etcd is sad"))


def _closed_at_once(_: kmock.Request) -> kmock.Response:
    return kmock.Response(status=200, payload=b"")


def _requests(km: kmock.KubernetesEmulator, paths: tuple[str, ...]) -> list[kmock.Request]:
    return [r for r in km if r.method == kmock.method.GET and r.url.path in paths]


async def _run_watchers(km: kmock.KubernetesEmulator, tmp_path: Path, clock: SkipClock, *, agent: bool = True,
                        extender: bool = True) -> int:
    """Start the agent's and/or the extender's watchers on `clock`; stop them once all parked at the horizon (or
    REAL_LIMIT passed); the number of watchers."""
    watchers = 0
    link = ext = None
    if agent:
        a, link = _link(km, tmp_path)
        link.clock = clock
        link.start_watches(a)
        watchers += len(AGENT_PATHS)
    if extender:
        ext = _extender(km)
        ext.clock = clock
        ext.start_watches(timeout_seconds=5)
        watchers += len(EXTENDER_PATHS)
    deadline = time.monotonic() + REAL_LIMIT
    try:
        while clock.parked() < watchers and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
    finally:
        if link is not None:
            link.close()
        if ext is not None:
            ext.stop_watches()
    return watchers


def _ceiling(policy: BackoffPolicy, timelines: list[float], per_attempt: int) -> float:
    """The most requests client-go's backoff allows these watchers: `per_attempt` requests per attempt, attempts
    at most one more than the waits that fit in each timeline."""
    return sum(per_attempt * (policy.min_waits_within(t) + 1) for t in timelines)


async def test_every_watch_failing_ten_watchers_stay_under_client_gos_ceiling(km: kmock.KubernetesEmulator,
                                                                               tmp_path: Path) -> None:
    """Fault: every watch request answered 500 (lists succeed), for the agent's 3 and the extender's 7 watchers.
    Invariant: each failure waits a growing, jittered backoff that a successful list does not reset, so the ten
    make at most client-go's ceiling of requests (a list and a watch per attempt): ~0.1 request/s each over 5
    minutes, where main's loops re-listed and re-watched every second (~2/s each, ~20/s for ten)."""
    km[kmock.action.WATCH] << _fault(_server_error)
    clock = SkipClock(HORIZON)
    watchers = await _run_watchers(km, tmp_path, clock)
    assert watchers == 10
    made = len(_requests(km, AGENT_PATHS + EXTENDER_PATHS))
    timelines = clock.timelines(watchers)
    rate = made / sum(timelines) * watchers
    assert made <= _ceiling(REFLECTOR, timelines, per_attempt=2), f"{made} requests, {rate:.2f}/s"
    assert rate < 1.5, f"{rate:.2f} requests/s for 10 watchers"  # main: ~20/s
    assert min(timelines) > HORIZON - 61  # each watcher reached its horizon: the rate covers the capped waits


async def test_watches_closing_at_once_count_as_failures(km: kmock.KubernetesEmulator, tmp_path: Path) -> None:
    """Fault: every watch answered 200 with an empty body (closed at once, no event). Invariant: a watch that ends
    within a second having delivered nothing is a failure and backs off like one (client-go's "very short
    watch"): ten watchers stay under the ceiling, where main re-watched at once (~40 requests/s)."""
    km[kmock.action.WATCH] << _fault(_closed_at_once)
    clock = SkipClock(HORIZON)
    watchers = await _run_watchers(km, tmp_path, clock)
    made = len(_requests(km, AGENT_PATHS + EXTENDER_PATHS))
    timelines = clock.timelines(watchers)
    assert made <= _ceiling(REFLECTOR, timelines, per_attempt=2)
    assert made / sum(timelines) * watchers < 1.5


async def test_failing_lists_back_off(km: kmock.KubernetesEmulator, tmp_path: Path) -> None:
    """Fault: every list answered 500. Invariant: one request per attempt, attempts under the backoff's ceiling,
    no watch opened without a list. (Main backed off on a failed list too, doubling from 1 s without jitter.)"""
    km[kmock.action.LIST] << _fault(_server_error)
    clock = SkipClock(HORIZON)
    watchers = await _run_watchers(km, tmp_path, clock)
    made = _requests(km, AGENT_PATHS + EXTENDER_PATHS)
    assert made and all(r.action == kmock.action.LIST for r in made)
    assert len(made) <= _ceiling(REFLECTOR, clock.timelines(watchers), per_attempt=1)


async def test_backoff_spans_a_list_that_succeeds(km: kmock.KubernetesEmulator, tmp_path: Path) -> None:
    """Fault: every watch answered 500 (lists succeed). Invariant: the successful list between failures does not
    reset the backoff: one watcher's waits grow to the cap, each within [d, 2d) of client-go's doubling steps."""
    km[kmock.action.WATCH] << _fault(_server_error)
    clock = SkipClock(HORIZON)
    await _run_watchers(km, tmp_path, clock, extender=False)
    assert len(clock.waits) == len(AGENT_PATHS)
    for waits in clock.waits.values():
        steps = [min(REFLECTOR.initial * 2 ** i, REFLECTOR.cap) for i in range(len(waits))]
        assert all(d <= w < 2 * d for w, d in zip(waits, steps, strict=True)), waits
        assert steps[-1] == REFLECTOR.cap


async def test_watch_delivers_promptly_after_recovery(km: kmock.KubernetesEmulator, tmp_path: Path) -> None:
    """Fault: every watch answered 500 for a while, then the API server recovers. Invariant: the watcher (real
    clock, a short-capped policy) opens a healthy watch within one capped backoff and delivers a NodeSLO change
    at once; a healthy watch costs no further requests."""
    failing = True
    km[kmock.action.WATCH] << _fault(lambda r: _server_error(r) if failing else None)
    agent, link = _link(km, tmp_path)
    link.watch_backoff = BackoffPolicy(initial=0.05, cap=0.2, reset_after=1.0)
    link.start_watches(agent)
    try:
        await asyncio.sleep(1.0)
        assert len(km[kmock.action.WATCH]) >= 2 * 3  # every watcher failed more than once
        failing = False
        await asyncio.sleep(1.0)  # > twice the longest capped wait (0.4 s): the watches are open now
        api = driver_client(km)
        patch = {"spec": {"hostApplications": [{"name": "redis", "qos": "BE"}]}}
        changed = time.monotonic()
        await asyncio.to_thread(api.patch, f"/apis/{NODESLO}/{NODE}", patch)
        while [a.name for a in agent.state.nodeslo().host_apps] != ["redis"]:
            assert time.monotonic() - changed < 1.0, "the recovered watch did not deliver"
            await asyncio.sleep(0.01)
        settled = len(_requests(km, AGENT_PATHS))
        await asyncio.sleep(0.5)
        assert len(_requests(km, AGENT_PATHS)) == settled  # open watches, no re-list or re-watch
    finally:
        link.close()
