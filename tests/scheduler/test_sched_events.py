"""`koord-sched run` records Events on pods as kube-scheduler does (events.k8s.io/v1): `Scheduled` when bound,
`FailedScheduling` with the reason when not, once per reason rather than once per cycle."""

from __future__ import annotations

import asyncio
from typing import Any

import kmock
import kubernetes_validate
import pytest

from apis.client.kubeapi import KubeClient, KubeConfig
from scheduler.cli import profile
from scheduler.events import FAILED_SCHEDULING, SCHEDULED
from scheduler.framework import Scheduler
from scheduler.runner import SecondaryScheduler

from gpu_cluster import pod, seed

NAME = "koord-py"
EVENTS = "events.k8s.io/v1/events"


@pytest.fixture
def km(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    seed(kmock)
    kmock.resources[EVENTS] = {}

    def status(request: kmock.Request) -> Any:  # strategic merge of conditions is not emulated: accept and echo
        return kmock.objects["v1/pods", request.namespace, str(request.name)].raw

    kmock["patch", kmock.resource("v1/pods"), kmock.subresource("status")] << status
    return kmock


def pending(name: str, gpus: int) -> dict[str, Any]:
    p = pod(name, {"nvidia.com/gpu": gpus})
    p["spec"]["schedulerName"] = NAME
    return p


def events(km: kmock.KubernetesEmulator) -> list[dict[str, Any]]:
    return [r.data for r in km if r.method.value == "POST" and r.url.path.endswith("/events")]


async def test_scheduled_and_failed_scheduling_events(km: kmock.KubernetesEmulator) -> None:
    for p in (pending("fits", 1), pending("huge", 64)):
        km.objects["v1/pods", "default", p["metadata"]["name"]] = p
    runner = SecondaryScheduler(KubeClient(KubeConfig(server=str(km.url))), NAME,
                                lambda c: Scheduler(c, profile(None)), record_events=True)
    placements = {p.pod: p for p in await asyncio.to_thread(runner.run_once)}
    bound = placements["default/fits"].node
    assert bound is not None and placements["default/huge"].node is None
    got = {e["reason"]: e for e in events(km)}
    assert set(got) == {SCHEDULED, FAILED_SCHEDULING}
    for e in got.values():
        kubernetes_validate.validate(e, "1.30.0", strict=True)
        assert e["reportingController"] == NAME and e["metadata"]["namespace"] == "default"
    ok, failed = got[SCHEDULED], got[FAILED_SCHEDULING]
    assert (ok["type"], ok["action"], ok["regarding"]["name"]) == ("Normal", "Binding", "fits")
    assert ok["note"] == f"Successfully assigned default/fits to {bound}"
    assert (failed["type"], failed["action"], failed["regarding"]["name"]) == ("Warning", "Scheduling", "huge")
    assert failed["note"] == placements["default/huge"].reason and "nvidia.com/gpu" in failed["note"]
    # the next cycles fail the same way: no new Event; kube-scheduler's broadcaster would fold them into a series
    await asyncio.to_thread(runner.run_once)
    await asyncio.to_thread(runner.run_once)
    assert len(events(km)) == 2


async def test_no_events_unless_asked(km: kmock.KubernetesEmulator) -> None:
    km.objects["v1/pods", "default", "huge"] = pending("huge", 64)
    runner = SecondaryScheduler(KubeClient(KubeConfig(server=str(km.url))), NAME,
                                lambda c: Scheduler(c, profile(None)))
    await asyncio.to_thread(runner.run_once)
    assert events(km) == []
