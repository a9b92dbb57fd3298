"""`koord-descheduler run`'s rounds against the Kubernetes API double (kmock): a hot node drained below its high
threshold through the Eviction API with Events and metrics, PodDisruptionBudgets respected (a 429 is a refused
eviction, counted, never retried in the round), nothing evicted when no other node fits, dryRun writing nothing, an
API server that does not answer costing the round and nothing else."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading

import kmock
import kubernetes_validate
import pytest

from apis.client.kubeapi import KubeClient, KubeConfig
from scheduler.descheduler.config.decode import parse_config
from scheduler.descheduler.kube import DESCHEDULED
from scheduler.descheduler.server import InCluster

from deschedbuild import config
from deschedkube import CLOCK, HOT, NM, descheduler_config, evicted, pdb, rounds, seed, writes

REASON = "node is overutilized, node cpu usage({:.2f}%)>threshold(50.00%)"


async def test_a_hot_node_is_drained_below_its_high_threshold(kmock: kmock.KubernetesEmulator) -> None:
    seed(kmock)
    r = rounds(kmock)
    first = await asyncio.to_thread(r.round)
    # n2 and n3 have 1600m of room each below 50%; n1 needs 1200m off to reach 2000m (50%): three pods
    assert first.error is None and len(first.decided) == 3 and first.tally.evicted == 3
    assert evicted(kmock) == sorted(p.split("/")[1] for p in first.decided)
    posts = writes(kmock, "/eviction")
    assert len(posts) == 3 and all(p.data["apiVersion"] == "policy/v1" and p.data["kind"] == "Eviction"
                                   for p in posts)
    events = [r.data for r in writes(kmock, "/events")]
    assert sorted(e["involvedObject"]["name"] for e in events) == evicted(kmock)
    for e in events:
        kubernetes_validate.validate(e, "1.30.0", strict=True)
        assert (e["reason"], e["type"], e["source"]["component"]) == (DESCHEDULED, "Normal", "koord-descheduler")
    # the reason is the node's usage as each eviction found it: 80%, then 70%, then 60%
    assert sorted(e["message"] for e in events) == sorted(f"pod evicted by {REASON.format(u)}" for u in (80, 70, 60))
    assert r.metrics.count("success", "LowNodeLoad") == 3
    assert 'descheduler_pods_evicted{namespace="default",node="n1",result="success",strategy="LowNodeLoad"} 3' in \
        r.metrics.exposition().decode()

    # the kubelet ends the evicted pods; koordlet's next NodeMetric of n1 no longer counts them
    gone = set(evicted(kmock))
    for name in gone:
        kmock.objects["v1/pods", "default", name].delete()
    nm = kmock.objects[NM, None, "n1"].raw
    usage = [p for p in nm["status"]["podsMetric"] if p["name"] not in gone]
    kmock.objects[NM, None, "n1"].patch({"status": {"podsMetric": usage}})
    second = await asyncio.to_thread(r.round)
    assert second.error is None and second.decided == [] and len(writes(kmock, "/eviction")) == 3
    assert sum(int(p["podUsage"]["resources"]["cpu"][:-1]) for p in usage) == 2000  # 50%: not above high


async def test_a_pod_disruption_budget_refuses_and_is_not_retried_in_the_round(
        kmock: kmock.KubernetesEmulator, caplog: pytest.LogCaptureFixture) -> None:
    seed(kmock)
    pdb(kmock, allowed=1)
    r = rounds(kmock)
    with caplog.at_level(logging.INFO, "koord-descheduler"):
        done = await asyncio.to_thread(r.round)
    assert done.tally.evicted == 1 and len(evicted(kmock)) == 1
    # every other candidate was tried once, refused by the budget, and the round moved on
    posted = [p.url.path.split("/")[-2] for p in writes(kmock, "/eviction")]
    assert sorted(posted) == sorted(set(posted)) and set(posted) <= set(HOT) and len(posted) == 8
    assert sorted(done.tally.refused) == sorted(f"default/{n}" for n in posted if n not in evicted(kmock))
    assert len(done.tally.refused) == 7 and not done.tally.failed
    assert r.metrics.count("error", "LowNodeLoad") == 7 and r.metrics.count("success") == 1
    assert "1 evicted, 7 refused by a PodDisruptionBudget" in caplog.text
    assert kmock.objects["policy/v1/poddisruptionbudgets", "default", "web"].raw["status"]["disruptionsAllowed"] == 0
    assert len(writes(kmock, "/events")) == 1  # an Event only for the pod evicted


async def test_nothing_is_evicted_when_no_other_node_fits(kmock: kmock.KubernetesEmulator) -> None:
    seed(kmock, taint_targets=True)
    done = await asyncio.to_thread(rounds(kmock).round)
    assert done.error is None and done.decided == [] and writes(kmock) == []


@pytest.mark.parametrize("where", ["top", "LowNodeLoad"])
async def test_dry_run_writes_nothing(kmock: kmock.KubernetesEmulator, where: str) -> None:
    seed(kmock)
    cfg = descheduler_config(dryRun=True) if where == "top" else config({"cpu": 30}, {"cpu": 50}, dryRun=True)
    r = rounds(kmock, cfg)
    done = await asyncio.to_thread(r.round)
    assert writes(kmock) == [] and evicted(kmock) == [] and done.tally.evicted == 0
    # the framework's dry run still decides and reports (upstream: the limiter counts); LowNodeLoad's does not
    assert len(done.decided) == (3 if where == "top" else 0)
    assert r.metrics.count("success") == 0


async def test_an_api_server_that_does_not_answer_costs_the_round_only(
        caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cli = KubeClient(KubeConfig(server=f"http://127.0.0.1:{port}", timeout=1))
    r = InCluster(cli, parse_config(descheduler_config()), watch=False, clock=lambda: CLOCK)
    with caplog.at_level(logging.WARNING, "koord-descheduler"):
        done = await asyncio.to_thread(r.round)
    assert done.error is not None and "listing the cluster" in done.error and r.rounds == 0
    [line] = [rec.getMessage() for rec in caplog.records if rec.name == "koord-descheduler"]
    assert line.startswith("round skipped: listing the cluster:") and "Traceback" not in caplog.text


async def test_watching_a_silent_api_server_gives_up_on_stop() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cli = KubeClient(KubeConfig(server=f"http://127.0.0.1:{port}", timeout=1))
    r = InCluster(cli, parse_config(descheduler_config(deschedulingInterval="1h")), clock=lambda: CLOCK)
    stop = threading.Event()
    running = asyncio.create_task(asyncio.to_thread(r.run, stop))
    await asyncio.sleep(0.3)
    stop.set()  # SIGTERM while the first lists are still failing: out within a second, not the sync timeout
    await asyncio.wait_for(running, 3)
    r.close()
    assert r.rounds == 0


async def test_a_per_node_cap_refuses_and_is_counted(kmock: kmock.KubernetesEmulator) -> None:
    seed(kmock)
    r = rounds(kmock, descheduler_config(maxNoOfPodsToEvictPerNode=1))
    done = await asyncio.to_thread(r.round)
    assert done.tally.evicted == 1 and len(writes(kmock, "/eviction")) == 1
    assert r.metrics.count("maximum number of pods per node reached", "LowNodeLoad") >= 1
