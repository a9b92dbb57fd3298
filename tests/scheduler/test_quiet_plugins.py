"""Plugins quiet about a pod (scheduler.quiet) are left out of the vector cycle: each plugin's `quiet` answer holds on
every node (its Filter passes, its Score is the answer), and leaving them out changes no placement, annotation,
reason, score or metric count."""

from __future__ import annotations

import copy
import random
from typing import Any

import numpy as np
import pytest

from apis.scheduling.gang import ANNOTATION_NETWORK_TOPOLOGY_SELECTOR
from scheduler.cli import profile, simulate
from scheduler.cluster import build_cluster
from scheduler.framework import Scheduler
from scheduler.interfaces import (
    FilterPlugin,
    PreFilterPlugin,
    QuietPlugin,
    ScorePlugin,
    VectorFilterPlugin,
)
from scheduler.metrics import SchedulerMetrics
from scheduler.nodeindex import node_index
from scheduler.plugins.nodeunschedulable import NodeUnschedulable
from scheduler.quiet import Plans
from scheduler.reservation.plugin import NAME as RESERVATION_PLUGIN
from scheduler.reservation.plugin import ReservationPlugin

IMAGE = "registry.local/big:1"


def _cluster(rng: random.Random, loud: set[str]) -> list[dict[str, Any]]:
    """Nodes and running pods; `loud` names the cluster-wide facts present: taints, cordon, images, affinity
    (running pods stating pod affinity), reservation."""
    out: list[dict[str, Any]] = []
    for i in range(12):
        name = f"n{i:02d}"
        spec: dict[str, Any] = {}
        if "taints" in loud and rng.random() < 0.3:
            spec["taints"] = [{"key": "k", "value": rng.choice(["", "x"]),
                               "effect": rng.choice(["NoSchedule", "PreferNoSchedule", "NoExecute"])}]
        if "cordon" in loud and rng.random() < 0.2:
            spec["unschedulable"] = True
        status: dict[str, Any] = {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}
        if "images" in loud and rng.random() < 0.5:
            status["images"] = [{"names": [IMAGE], "sizeBytes": 900 << 20}]
        out.append({"kind": "Node", "metadata": {"name": name, "labels": {"zone": "abc"[i % 3],
                                                                         "kubernetes.io/hostname": name}},
                    "spec": spec, "status": status})
        for j in range(rng.randint(0, 2)):
            running = _pod(rng, f"run-{name}-{j}", plain=True)
            running["spec"]["nodeName"] = name
            if "affinity" in loud and rng.random() < 0.3:
                running["spec"]["affinity"] = {"podAntiAffinity": {
                    rng.choice(["requiredDuringSchedulingIgnoredDuringExecution",
                                "preferredDuringSchedulingIgnoredDuringExecution"]): []}}
                term = {"labelSelector": {"matchLabels": {"app": "a"}}, "topologyKey": "zone"}
                section = running["spec"]["affinity"]["podAntiAffinity"]
                for k in section:
                    section[k] = [term] if k.startswith("required") else [{"weight": 10, "podAffinityTerm": term}]
            out.append(running)
    if "reservation" in loud:
        out.append({"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
                    "metadata": {"name": "r1", "uid": "uid-r1"},
                    "spec": {"template": {"spec": {"containers": [
                        {"name": "c", "resources": {"requests": {"cpu": "2"}}}]}},
                             "owners": [{"labelSelector": {"matchLabels": {"app": "a"}}}]}})
    return out


def _pod(rng: random.Random, name: str, plain: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": rng.choice([IMAGE, "small:1"]),
                                            "resources": {"requests": {"cpu": rng.choice(["1", "3"])}}}]}
    labels = {"app": rng.choice(["a", "b"])}
    annotations: dict[str, str] = {}
    if not plain and rng.random() < 0.5:  # something one of the quiet plugins looks at
        what = rng.choice(["selector", "preferred", "podaffinity", "spread", "ports", "tolerations", "topology",
                           "reservation-affinity"])
        if what == "selector":
            spec["nodeSelector"] = {"zone": rng.choice("ab")}
        elif what == "preferred":
            spec["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 5, "preference": {"matchExpressions": [
                    {"key": "zone", "operator": "In", "values": ["c"]}]}}]}}
        elif what == "podaffinity":
            spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "a"}}, "topologyKey": "kubernetes.io/hostname"}]}}
        elif what == "spread":
            spec["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable":
                                                  rng.choice(["DoNotSchedule", "ScheduleAnyway"]),
                                                  "labelSelector": {"matchLabels": {"app": labels["app"]}}}]
        elif what == "ports":
            spec["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
        elif what == "tolerations":
            spec["tolerations"] = [{"operator": "Exists"}]
        elif what == "topology":
            annotations[ANNOTATION_NETWORK_TOPOLOGY_SELECTOR] = "rack"
        else:
            annotations["scheduling.koordinator.sh/reservation-affinity"] = '{"name": "r1"}'
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "labels": labels,
                                                            "annotations": annotations}, "spec": spec}


LOUD = [set(), {"taints"}, {"cordon"}, {"images"}, {"affinity"}, {"reservation"},
        {"taints", "cordon", "images", "affinity", "reservation"}]


def test_a_quiet_answer_holds_on_every_node() -> None:
    """Whenever a plugin says it is quiet about a pod, its PreFilter admits the pod, its Filter passes every node,
    its vector filter has no opinion and its raw Score is the answer on every node; every plugin is quiet about some
    pods and not about others."""
    said: dict[str, set[bool]] = {}
    for seed, loud in enumerate(LOUD):
        rng = random.Random(seed)
        objects = _cluster(rng, loud)
        sched = Scheduler(build_cluster(copy.deepcopy(objects)), profile(None))
        resv = sched.plugin(RESERVATION_PLUGIN, ReservationPlugin)
        assert resv is not None
        resv.bind(sched.cluster)  # the reservation is placed as simulate places it
        for r in sorted(resv.book.values(), key=lambda r: r.name):
            resv.schedule_reservation(sched, r)
        for i in range(30):
            pod = _pod(rng, f"p{i}")
            with sched.cycle(pod):
                index = node_index(sched.cluster)
                for p in sched.profile.plugins:
                    if not isinstance(p, QuietPlugin):
                        continue
                    answer = p.quiet(pod, index)
                    said.setdefault(p.name, set()).add(answer is not None)
                    if answer is None:
                        continue
                    where = (seed, i, p.name)
                    if isinstance(p, PreFilterPlugin):
                        assert p.prefilter(pod, sched.cluster) is None, where
                    if isinstance(p, VectorFilterPlugin):
                        m = p.prefilter_vector(pod, index)
                        assert m is None or bool(np.all(m)), where
                    if isinstance(p, FilterPlugin):
                        assert all(p.filter(pod, n, sched.cluster) is None for n in index.nodes), where
                    if isinstance(p, ScorePlugin):
                        scores = [p.score(pod, n, sched.cluster) for n in index.nodes]
                        assert scores == [answer] * len(scores), where
            placed = sched.schedule(pod)  # the cluster moves on (pods with affinity land too)
            assert placed.node is not None or placed.reason
    expected = {p.name for p in profile(None).plugins if isinstance(p, QuietPlugin)}
    assert set(said) == expected
    assert {name: said[name] for name in expected} == {name: {True, False} for name in expected}


def _counts(metrics: SchedulerMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every observation count and counter of the metrics (the durations themselves differ run to run)."""
    out = {}
    for family in metrics.registry.collect():
        for s in family.samples:
            if s.name.endswith(("_count", "_total")):
                out[s.name, tuple(sorted(s.labels.items()))] = s.value
    return out


def _everything(self: Plans, pod: Any, index: Any) -> Any:
    return self.everything


@pytest.mark.parametrize("seed", range(len(LOUD)))
def test_leaving_quiet_plugins_out_changes_nothing(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same pods through `simulate` and through `schedule` with metrics, once as shipped and once with every
    plugin asked (the plans disabled): the same placements, annotations, reasons, scores and metric counts."""
    rng = random.Random(100 + seed)
    objects = _cluster(rng, LOUD[seed])
    pods = [_pod(rng, f"p{i}") for i in range(40)]

    def both() -> tuple[Any, list[Any], dict[Any, float]]:
        result = simulate(build_cluster(copy.deepcopy(objects)), copy.deepcopy(pods))
        sched = Scheduler(build_cluster(copy.deepcopy(objects)), profile(None), metrics=SchedulerMetrics())
        placed = [sched.schedule(p) for p in copy.deepcopy(pods)]
        assert sched.metrics is not None
        return result, [(p.pod, p.node, p.annotations, p.reason, dict(p.scores)) for p in placed], \
            _counts(sched.metrics)

    quiet = both()
    with monkeypatch.context() as m:
        m.setattr(Plans, "plan", _everything)
        asked = both()
    assert quiet == asked


def test_a_wrong_quiet_answer_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The twin comparison above can fail: a NodeUnschedulable that claims quiet on a cluster with cordoned nodes
    places pods where the plain cycle does not."""
    rng = random.Random(2)
    objects = _cluster(rng, {"cordon"})
    assert any(o.get("spec", {}).get("unschedulable") for o in objects)
    pods = [_pod(rng, f"p{i}", plain=True) for i in range(40)]
    truth = simulate(build_cluster(copy.deepcopy(objects)), copy.deepcopy(pods))
    monkeypatch.setattr(NodeUnschedulable, "quiet", lambda self, pod, index: 0)
    wrong = simulate(build_cluster(copy.deepcopy(objects)), copy.deepcopy(pods))
    assert wrong != truth
