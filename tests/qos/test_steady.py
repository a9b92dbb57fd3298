"""Steady-state QoS passes: facts kept between passes, re-read on a pod change, a NodeSLO change or the window."""

from __future__ import annotations

import copy
import dataclasses
import uuid
from pathlib import Path

import pytest

from apis.slo.decode import nodeslo_config
from apis.slo.types import NodeSLOSpec
from koordlet.collectors.hostapps import host_apps
from koordlet.events import EventRecorder
from koordlet.health import Health
from koordlet.host.driver import CgroupDriver, K8sQoS, pod_dir, qos_dir
from koordlet.host.resources import resource_path
from koordlet.qos.executor import Executor
from koordlet.qos.features import CPUQoS
from koordlet.qos.manager import QoSManager
from koordlet.qos.state import QoSState
from koordlet.qos.steady import SteadyFacts, same_pods
from koordlet.states.model import PodMeta
from koordlet.states.pods import pod_meta

from simhost import SimHost, make_pod

WINDOW = 60.0
DRIVER = CgroupDriver.CGROUPFS


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _slo(be: bool = True, lsr: bool = True) -> NodeSLOSpec:
    return nodeslo_config({"resourceQOSStrategy": {
        "lsrClass": {"cpuQOS": {"enable": lsr}}, "lsClass": {"cpuQOS": {"enable": True}},
        "beClass": {"cpuQOS": {"enable": be}}}})


def _pod(name: str, qos: str, label: str) -> PodMeta:
    return pod_meta(make_pod(name, str(uuid.uuid4()), qos, labels={"koordinator.sh/qosClass": label}), DRIVER,
                    Health())


class Node:
    """A simulated cgroup v1 node without group identity (cpu.idle), a CPU QoS manager on a fake clock."""

    def __init__(self, tmp_path: Path) -> None:
        self.host = SimHost(tmp_path / "h", 1, DRIVER).setup()
        self.clock = Clock()
        self.health = Health()
        executor = Executor(self.host.paths, 1, self.health, force_seconds=WINDOW, clock=self.clock)
        self.manager = QoSManager([CPUQoS(node_name="n")], executor,
                                  EventRecorder(self.health, "n"), self.health)
        for qos, shares in ((K8sQoS.GUARANTEED, "2048"), (K8sQoS.BURSTABLE, "1024"), (K8sQoS.BESTEFFORT, "2")):
            self.put(qos_dir(DRIVER, qos), idle="0", shares=shares)
        self.pods = [_pod("be", "BestEffort", "BE"), _pod("ls", "Burstable", "LS")]
        for p in self.pods:
            self.put(p.cgroup_dir, idle="0", shares="1024")

    def file(self, rel: str, resource: str) -> Path:
        return Path(resource_path(1, self.host.paths, resource, rel))

    def put(self, rel: str, *, idle: str, shares: str) -> None:
        self.host._mkdir(rel)
        self.file(rel, "cpu.idle").write_text(idle + "\n")
        self.file(rel, "cpu.shares").write_text(shares + "\n")

    def idle(self, rel: str) -> str:
        return self.file(rel, "cpu.idle").read_text().strip()

    def state(self, spec: NodeSLOSpec | None = None, pods: list[PodMeta] | None = None) -> QoSState:
        spec = _slo() if spec is None else spec
        return QoSState(self.host.paths, 1, DRIVER, self.pods if pods is None else pods, spec,
                        host_apps(spec.host_applications, DRIVER), True)

    def reconcile(self, state: QoSState) -> list[str]:
        return [r.write.path for r in self.manager.reconcile(state) if r.result == "written"]


def test_same_pods_sees_any_change_of_the_raw_pod() -> None:
    a = [_pod("x", "Burstable", "LS"), _pod("y", "BestEffort", "BE")]
    relisted = [dataclasses.replace(p, raw=copy.deepcopy(p.raw)) for p in a]
    assert same_pods(a, a) and same_pods(a, relisted)
    annotated = copy.deepcopy(a[0].raw)
    annotated["metadata"]["annotations"] = {"koordinator.sh/cpuQOS": '{"enable":true,"groupIdentity":-1}'}
    # the annotation is not a PodMeta field: only the raw pod shows it
    assert not same_pods(a, [pod_meta(annotated, DRIVER, Health()), a[1]])
    assert not same_pods(a, a[:1]) and not same_pods(a, a[::-1])


def test_steady_facts_kept_until_inputs_change_or_the_window_elapses(tmp_path: Path) -> None:
    node = Node(tmp_path)
    clock = Clock()
    steady = SteadyFacts(WINDOW, clock)
    reads: list[int] = []

    def read() -> int:
        reads.append(1)
        return len(reads)

    def value(st: QoSState) -> int:
        steady.begin(st)
        return steady.get("k", read)

    st = node.state()
    assert value(st) == 1
    assert value(node.state(pods=[dataclasses.replace(p, raw=copy.deepcopy(p.raw)) for p in node.pods])) == 1
    clock.now += WINDOW - 1
    assert value(st) == 1  # nothing changed, window not elapsed: no read
    clock.now += 1
    assert value(st) == 2  # the window elapsed
    assert value(node.state(_slo(lsr=False))) == 3  # NodeSLO changed
    assert value(node.state(_slo(lsr=False), pods=node.pods[:1])) == 4  # a pod left
    assert value(node.state(_slo(lsr=False), pods=node.pods[:1])) == 4


@pytest.mark.parametrize("trigger", ["nothing", "pod", "nodeslo", "window"])
def test_a_pass_rereads_kept_facts_on_each_trigger(tmp_path: Path, trigger: str) -> None:
    """The kept fact here is the list of pod dirs on disk: a dangling, idle pod dir appears between passes. It is
    taken out of idle once the facts are re-read, which only a pod change, a NodeSLO change or the window does."""
    node = Node(tmp_path)
    assert node.reconcile(node.state()) == [str(node.file(node.pods[0].cgroup_dir, "cpu.idle"))]  # BE idled
    assert node.reconcile(node.state()) == []
    dangling = pod_dir(DRIVER, K8sQoS.BURSTABLE, "dead-0001")
    node.put(dangling, idle="1", shares="3")
    assert node.reconcile(node.state()) == []  # kept: not seen yet
    st = node.state()
    if trigger == "pod":
        node.pods.append(_pod("new", "Burstable", "LS"))
        node.put(node.pods[-1].cgroup_dir, idle="0", shares="1024")
        st = node.state()
    elif trigger == "nodeslo":
        st = node.state(_slo(lsr=False))
    elif trigger == "window":
        node.clock.now += WINDOW
    written = node.reconcile(st)
    if trigger == "nothing":
        assert written == [] and node.idle(dangling) == "1"
    else:
        assert str(node.file(dangling, "cpu.idle")) in written and node.idle(dangling) == "0"
    assert node.idle(node.pods[0].cgroup_dir) == "1"  # the BE pod stays idle throughout


def test_leaving_idle_restores_kubelet_shares_without_any_idle_fact(tmp_path: Path) -> None:
    """cpu.shares is restored exactly when the cpu.idle write changed the file, whatever the kept facts say."""
    node = Node(tmp_path)
    be, ls = node.pods
    node.reconcile(node.state())
    assert node.idle(be.cgroup_dir) == "1"
    node.file(be.cgroup_dir, "cpu.shares").write_text("1024\n")  # what the kernel does on leaving idle, simulated
    node.reconcile(node.state(_slo(be=False)))
    assert node.idle(be.cgroup_dir) == "0" and node.file(be.cgroup_dir, "cpu.shares").read_text() == "2"
    # someone idles the LS pod behind the agent's back: within the window the executor trusts its last write ...
    node.file(ls.cgroup_dir, "cpu.idle").write_text("1\n")
    node.file(ls.cgroup_dir, "cpu.shares").write_text("1024\n")
    assert node.reconcile(node.state(_slo(be=False))) == []
    # ... after it, cpu.idle is fixed and kubelet's shares for the pod (no requests: 2) come with it
    node.clock.now += WINDOW
    assert node.reconcile(node.state(_slo(be=False))) == [str(node.file(ls.cgroup_dir, "cpu.idle")),
                                                          str(node.file(ls.cgroup_dir, "cpu.shares"))]
    assert node.file(ls.cgroup_dir, "cpu.shares").read_text() == "2"


def test_a_kept_plan_is_the_plan_a_fresh_manager_makes(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.reconcile(node.state())
    kept = node.manager.plan(node.state())
    assert node.manager.plan(node.state()) is not kept  # a new Plan each pass, same content
    fresh = QoSManager(node.manager.features, node.manager.executor, node.manager.events, node.health)
    assert fresh.plan(node.state()) == kept == node.manager.plan(node.state())


def test_the_window_rereads_facts_but_plans_again_only_when_they_changed(tmp_path: Path) -> None:
    """Once a window the kept facts are read again and every file is read back (drift repaired), yet equal facts
    of the same pods and NodeSLO give the last plan without planning; a pod change plans afresh."""
    node = Node(tmp_path)
    feature = node.manager.features[0]
    planned: list[int] = []
    plan = feature.plan  # type: ignore[attr-defined]

    def counting(state: QoSState, facts: object) -> object:
        planned.append(1)
        return plan(state, facts)

    feature.plan = counting  # type: ignore[attr-defined]
    node.reconcile(node.state())
    assert len(planned) == 1
    be = node.pods[0]
    node.file(be.cgroup_dir, "cpu.idle").write_text("0\n")  # drift behind the agent's back
    assert node.reconcile(node.state()) == []  # within the window: trusted
    node.clock.now += WINDOW
    generation = node.manager.steady.generation
    assert node.reconcile(node.state()) == [str(node.file(be.cgroup_dir, "cpu.idle"))]  # repaired
    assert node.manager.steady.generation == generation + 1  # the facts were read again ...
    assert len(planned) == 1  # ... and, equal, planned nothing
    node.pods.append(_pod("new", "Burstable", "LS"))
    node.put(node.pods[-1].cgroup_dir, idle="0", shares="1024")
    node.reconcile(node.state())
    assert len(planned) == 2
