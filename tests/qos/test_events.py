"""Events for skipped bad input: posted over HTTP to kmock, deduplicated; standalone they are log + metric."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import kmock

from apis.client.kubeapi import KubeClient, KubeConfig
from apis.core.errors import PlanError
from koordlet.agent import Agent
from koordlet.config import Config
from koordlet.events import EventRecorder
from koordlet.health import Health
from koordlet.host.driver import CgroupDriver

from simhost import SimHost

ERR = PlanError("Pod", "team-a/web-0", "annotations[node.koordinator.sh/resctrl].llc.schemata.range",
                "range [80, 20] is empty", "InvalidResctrlAnnotation", uid="u-1")


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_events_posted_once_per_window(kmock: kmock.KubernetesEmulator) -> None:
    kmock.resources["v1/events"] = {}
    clock = Clock()
    rec = EventRecorder(Health(), "node-1", KubeClient(KubeConfig(server=str(kmock.url))).post, clock=clock)
    for _ in range(3):
        await asyncio.to_thread(rec.report, ERR)
    clock.now += 601
    await asyncio.to_thread(rec.report, ERR)
    posts = kmock["post"]
    assert len(posts) == 2 and rec.posted == 2
    ev = posts[0].data
    assert posts[0].url.path == "/api/v1/namespaces/team-a/events"
    assert ev["involvedObject"] == {"kind": "Pod", "name": "web-0", "uid": "u-1", "namespace": "team-a",
                                    "apiVersion": "v1"}
    assert ev["reason"] == "InvalidResctrlAnnotation" and ev["type"] == "Warning"
    assert ev["message"].startswith("annotations[node.koordinator.sh/resctrl]")
    assert rec.health.skipped[("pod", "InvalidResctrlAnnotation")] == 4


def test_standalone_is_a_log_line_and_a_metric(caplog: object) -> None:
    rec = EventRecorder(Health(), "n")
    rec.report(ERR)
    rec.report(ERR)
    assert rec.posted == 0 and rec.health.skipped[("pod", "InvalidResctrlAnnotation")] == 2


def test_node_scoped_errors_are_named_after_the_node() -> None:
    posted: list[tuple[str, dict[str, object]]] = []
    rec = EventRecorder(Health(), "node-7", lambda path, obj: posted.append((path, obj)))
    rec.report(PlanError("NodeSLO", "", "spec.resourceQOSStrategy.beClass.blkioQOS", "bad", "InvalidBlkioQOS"))
    [(path, ev)] = posted
    assert path == "/api/v1/namespaces/default/events"
    assert ev["involvedObject"]["name"] == "node-7"  # type: ignore[index]
    assert str(ev["metadata"]["name"]).startswith("node-7.")  # type: ignore[index]


def test_a_refused_nodeslo_is_an_event_on_the_node_named_nodeslo_and_a_metric(tmp_path: Path) -> None:
    host = SimHost(tmp_path / "h", 1, CgroupDriver.CGROUPFS).setup()
    agent = Agent(Config(node_name="node-3", paths=host.paths, state_dir=str(tmp_path / "s")))
    posted: list[dict[str, Any]] = []
    manager = agent.qos_manager(post_event=lambda path, obj: posted.append(obj))
    bad = {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "metadata": {"name": "node-3"},
           "spec": {"resourceQOSStrategy": {"beClass": {"cpuQOS": {"enable": True, "groupIdentity": 9}}}}}
    assert not agent.set_nodeslo(bad)
    manager.reconcile(agent.qos_state())
    [event] = posted
    assert event["involvedObject"]["kind"] == "NodeSLO" and event["involvedObject"]["name"] == "node-3"
    assert event["reason"] == "InvalidNodeSLO"
    assert event["message"].startswith("spec.resourceQOSStrategy.beClass.cpuQOS.groupIdentity: ")
    assert agent.health.skipped[("nodeslo", "InvalidNodeSLO")] == 1
    # a good NodeSLO replaces it: the error is gone from the next pass
    bad["spec"]["resourceQOSStrategy"]["beClass"]["cpuQOS"]["groupIdentity"] = -1  # type: ignore[index]
    assert agent.set_nodeslo(bad)
    manager.reconcile(agent.qos_state())
    assert len(posted) == 1 and agent.health.skipped[("nodeslo", "InvalidNodeSLO")] == 1
