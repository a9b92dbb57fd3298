"""The agent's node state: what each source's write tells the subscribers, and what the getters then answer."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from apis.slo.decode import decode_nodeslo
from apis.slo.types import NodeSLOSpec
from koordlet.agent import Agent
from koordlet.config import Config
from koordlet.host.driver import CgroupDriver
from koordlet.nodestate import Change, NodeState
from koordlet.qos.cpuset import CPUSetRule
from koordlet.states.model import JSON

from simhost import SimHost, make_pod

NODE = "node-1"
UID_A = "aaaaaaaa-0000-4000-8000-000000000001"
UID_B = "bbbbbbbb-0000-4000-8000-000000000002"


class ListSource:
    """A pod source answering whatever list it holds (the very same object until replaced)."""

    name = "test"

    def __init__(self, pods: list[JSON]) -> None:
        self.pods = pods

    def list_pods(self) -> list[JSON]:
        return self.pods


class Heard:
    """A subscriber recording each change and the thread it was told on."""

    def __init__(self) -> None:
        self.changes: list[tuple[Change, str]] = []

    def __call__(self, change: Change) -> None:
        self.changes.append((change, threading.current_thread().name))

    def kinds(self) -> list[Change]:
        return [c for c, _ in self.changes]


@pytest.fixture
def agent(tmp_path: Path) -> Agent:
    host = SimHost(tmp_path / "host", 1, CgroupDriver.CGROUPFS).setup()
    return Agent(Config(node_name=NODE, paths=host.paths, state_dir=str(tmp_path / "st")))


def _nodeslo(**spec: Any) -> JSON:
    return {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "metadata": {"name": NODE},
            "spec": spec}


def test_a_pod_change_is_told_on_the_syncing_thread_and_an_unchanged_list_is_not(agent: Agent) -> None:
    heard = Heard()
    agent.state.subscribe((Change.PODS, Change.NODESLO), heard)
    source = ListSource([make_pod("a", UID_A)])
    syncer = threading.Thread(target=agent.sync_pods, args=(source,), name="pod-sync")
    syncer.start()
    syncer.join()
    assert heard.changes == [(Change.PODS, "pod-sync")]
    first = agent.state.pods()
    assert [p.name for p in first] == ["a"] and agent.state.pods_synced()

    assert agent.sync_pods(source)  # the same list object: nothing to rebuild
    source.pods = [make_pod("a", UID_A)]  # an equal list: the old records (and the caches keyed on them) stay
    assert agent.sync_pods(source)
    assert heard.kinds() == [Change.PODS] and agent.state.pods() is first

    source.pods = [make_pod("a", UID_A), make_pod("b", UID_B)]
    assert agent.sync_pods(source)
    assert heard.kinds() == [Change.PODS, Change.PODS]
    assert [p.name for p in agent.state.pods()] == ["a", "b"]


def test_a_refused_nodeslo_keeps_the_one_in_force_and_tells_no_one(agent: Agent) -> None:
    heard = Heard()
    agent.state.subscribe(Change.NODESLO, heard)
    apps = [{"name": "nginx", "qos": "LS", "priority": "koord-prod"}]
    received = _nodeslo(hostApplications=apps, resourceUsedThresholdWithBE={"enable": True})
    assert agent.set_nodeslo(received)
    adopted = agent.state.nodeslo()
    assert adopted.present and not adopted.refused
    # decoded once, on receipt: the QoS snapshot hands the planners that same typed spec
    assert adopted.spec == decode_nodeslo(received).spec and adopted.spec.resource_used_threshold_with_be.enable
    assert agent.qos_state().nodeslo is adopted.spec
    assert [a.name for a in adopted.host_apps] == ["nginx"]
    assert agent.state.nodeslo_spec_in_force() is adopted.spec

    assert not agent.set_nodeslo(_nodeslo(resourceUsedThresholdWithBE={"cpuSuppressThresholdPercent": "lots"}))
    refused = agent.state.nodeslo()
    assert refused.spec is adopted.spec and refused.host_apps == adopted.host_apps and refused.present
    assert refused.refused and all(e.kind == "NodeSLO" and e.name == NODE for e in refused.refused)
    assert heard.kinds() == [Change.NODESLO]  # the adoption only
    assert agent.qos_state().input_errors == refused.refused  # every QoS pass says why

    assert agent.set_nodeslo(None)  # deleted: the defaults, and the refusal is forgotten
    gone = agent.state.nodeslo()
    assert not gone.present and not gone.refused and not gone.host_apps and gone.spec == NodeSLOSpec()
    assert agent.state.nodeslo_spec_in_force() is None
    assert heard.kinds() == [Change.NODESLO, Change.NODESLO]


def test_the_node_is_decoded_once_per_change(agent: Agent) -> None:
    state = agent.state
    assert state.node() is None and state.cpu_normalization_ratio() is None
    heard = Heard()
    state.subscribe(Change.NODE, heard)
    node = {"metadata": {"name": NODE, "annotations": {"node.koordinator.sh/cpu-normalization-ratio": "1.5"}}}
    state.set_node(node)
    assert state.node() is node and state.cpu_normalization_ratio() == 1.5
    state.set_node({"metadata": {"name": NODE, "annotations": {"node.koordinator.sh/cpu-normalization-ratio": "x"}}})
    assert state.cpu_normalization_ratio() is None  # malformed: the QoS reconciler reports it
    assert heard.kinds() == [Change.NODE, Change.NODE]
    assert agent.qos_state().node is state.node()


def test_an_equal_cpuset_rule_is_no_change(agent: Agent) -> None:
    heard = Heard()
    agent.state.subscribe(Change.CPUSET_RULE, heard)
    rule = CPUSetRule(kubelet_static=True)
    agent.state.set_cpuset_rule(rule)
    agent.state.set_cpuset_rule(CPUSetRule(kubelet_static=True))
    assert agent.state.cpuset_rule() is rule and heard.kinds() == [Change.CPUSET_RULE]
    agent.state.set_cpuset_rule(CPUSetRule())
    assert heard.kinds() == [Change.CPUSET_RULE, Change.CPUSET_RULE]


def test_the_nodemetric_spec_gives_the_collect_policy(agent: Agent) -> None:
    default = agent.state.nodemetric().policy.report_period
    agent.set_nodemetric_spec({"metricCollectPolicy": {"reportIntervalSeconds": default + 15}})
    assert agent.state.nodemetric().policy.report_period == default + 15
    assert agent.state.nodemetric().spec["metricCollectPolicy"]["reportIntervalSeconds"] == default + 15
    agent.set_nodemetric_spec(None)
    assert agent.state.nodemetric().policy.report_period == default


def test_a_failing_subscriber_stops_neither_the_source_nor_the_others(agent: Agent,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    def broken(change: Change) -> None:
        raise RuntimeError("event loop is closed")

    heard = Heard()
    state: NodeState = agent.state
    state.subscribe(Change.NODE, broken)
    state.subscribe(Change.NODE, heard)
    node = {"metadata": {"name": NODE}}
    state.set_node(node)
    assert state.node() is node and heard.kinds() == [Change.NODE]
    assert "node state subscriber" in caplog.text

    state.unsubscribe(broken)
    state.unsubscribe(heard)
    state.set_node({"metadata": {"name": NODE}})
    assert heard.kinds() == [Change.NODE]
