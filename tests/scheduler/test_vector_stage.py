"""The vector stage of Scheduler.schedule places every pod exactly where the per-node cycle would, with the same
annotations, scores and reasons."""

from __future__ import annotations

import copy
import json
import random
import time
from typing import Any

from scheduler.cli import profile
from scheduler.cluster import build_cluster
from scheduler.framework import Scheduler
from scheduler.interfaces import Placement


def _now() -> str:
    """Now as a NodeMetric stamp, taken at use: one taken at import expires within a long run of the suite."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


OLD = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 3600))


def _each(sched: Scheduler, pod: dict[str, Any]) -> Placement:
    with sched.cycle(pod) as cycle:
        return cycle.run_each()

# ImageLocality: images some nodes hold (a separate generator, so the other draws stay as they were)
_IMAGES = [(["registry.local/a:1"], 500), (["registry.local/b:latest", "registry.local/b@sha256:1"], 1500),
           (["registry.local/c:2"], 100)]


def _images(rng: random.Random) -> list[dict[str, Any]]:
    return [{"names": names, "sizeBytes": mb << 20} for names, mb in _IMAGES if rng.random() < 0.4]


def _objects(rng: random.Random, nodes: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(nodes):
        name = f"n{i:02d}"
        gpus = rng.choice([0, 2, 4, 8])
        labels = {"node.koordinator.sh/gpu-model": "H100"} if rng.random() < 0.2 else {}
        annotations = {}
        if rng.random() < 0.15:
            annotations["scheduling.koordinator.sh/usage-thresholds"] = json.dumps({"usageThresholds": {"cpu": 30}})
        labels["zone"] = rng.choice(["a", "b", "c"])
        spec: dict[str, Any] = {}
        if rng.random() < 0.25:  # kube's node plugins: taints of every effect, a cordon now and then
            spec["taints"] = [{"key": rng.choice(["gpu", "spot", "dedicated"]), "value": rng.choice(["", "x", "y"]),
                               "effect": rng.choice(["NoSchedule", "PreferNoSchedule", "NoExecute",
                                                     "PreferNoSchedule"])} for _ in range(rng.randint(1, 2))]
        if rng.random() < 0.05:
            spec["unschedulable"] = True
        out.append({"kind": "Node", "metadata": {"name": name, "labels": labels, "annotations": annotations},
                    "spec": spec, "status": {"allocatable": {"cpu": str(rng.choice([8, 16, 32])), "memory": "64Gi",
                                               "pods": str(rng.choice([3, 10, 110])),
                                               "koordinator.sh/gpu": str(100 * gpus)},
                                             "images": _images(random.Random(f"{name}{nodes}"))}})
        if gpus:
            dev_labels = {"node.koordinator.sh/secondary-device-well-planned": "true"} if rng.random() < 0.2 else {}
            out.append({"kind": "Device", "metadata": {"name": name, "labels": dev_labels}, "spec": {"devices": [
                {"type": "gpu", "id": f"{name}-{m}", "minor": m, "health": rng.random() > 0.1,
                 "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "80Gi",
                               "koordinator.sh/gpu-memory-ratio": "100"},
                 "topology": {"socketID": -1, "nodeID": m // 4, "pcieID": f"p{m // 2}", "busID": f"b{m}"}}
                for m in range(gpus)] + ([{"type": "rdma", "minor": 0, "health": True,
                                           "resources": {"koordinator.sh/rdma": "100"}}]
                                         if rng.random() < 0.3 else [])}})
        if rng.random() < 0.5:  # NUMA facts: 2 NUMA nodes of 4 cores × 2 threads; sometimes a node policy
            out.append(_nrt(name))
            if rng.random() < 0.3:
                labels["node.koordinator.sh/numa-topology-policy"] = rng.choice(["SingleNUMANode", "BestEffort"])
        if rng.random() < 0.9:
            out.append({"kind": "NodeMetric", "metadata": {"name": name}, "status": {
                "updateTime": _now() if rng.random() < 0.9 else OLD,
                "nodeMetric": {"nodeUsage": {"resources": {"cpu": f"{rng.randint(0, 12)}",
                                                           "memory": f"{rng.randint(1, 60)}Gi"}}}}})
    return out


def _nrt(name: str) -> dict[str, Any]:
    detail = [{"id": c, "core": c % 8, "socket": (c % 8) // 4, "node": (c % 8) // 4} for c in range(16)]
    zones = [{"name": f"node-{z}", "type": "Node", "resources": [
        {"name": "cpu", "capacity": "8", "allocatable": "8", "available": "8"},
        {"name": "memory", "capacity": "32Gi", "allocatable": "32Gi", "available": "32Gi"}]} for z in (0, 1)]
    return {"kind": "NodeResourceTopology", "metadata": {"name": name, "annotations": {
        "node.koordinator.sh/cpu-topology": json.dumps({"detail": detail})}}, "topologyPolicies": ["None"],
        "zones": zones}


def _pod(rng: random.Random, i: int) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": rng.choice(["500m", "2", "6"]), "memory": rng.choice(["1Gi", "16Gi"])}
    kind = rng.choice(["cpu", "gpu", "gpu2", "shared", "rdma"])
    if kind == "gpu":
        requests["koordinator.sh/gpu"] = "100"
    elif kind == "gpu2":
        requests["koordinator.sh/gpu"] = "200"
    elif kind == "shared":
        requests.update({"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"})
    elif kind == "rdma":
        requests.update({"koordinator.sh/gpu": "100", "koordinator.sh/rdma": "1"})
    labels = {"koordinator.sh/priority-class": "koord-prod"} if rng.random() < 0.2 else {}
    annotations: dict[str, str] = {}
    numa = rng.random()
    if numa < 0.15:
        annotations["scheduling.koordinator.sh/numa-topology-spec"] = json.dumps(
            {"numaTopologyPolicy": rng.choice(["SingleNUMANode", "Restricted", "BestEffort"])})
    elif numa < 0.25 and "." not in requests["cpu"] and "m" not in requests["cpu"]:
        labels["koordinator.sh/qosClass"] = "LSR"  # a cpuset is chosen (prod priority: the default class)
    image = random.Random(f"pod{i}").choice(["registry.local/a:1", "registry.local/b", "registry.local/c:2", "x"])
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": image, "resources": {"requests": requests}}]}
    if rng.random() < 0.3:
        spec["tolerations"] = [rng.choice([{"key": "spot", "operator": "Exists"}, {"operator": "Exists"},
                                           {"key": "gpu", "value": "x", "effect": "PreferNoSchedule"},
                                           {"key": "dedicated", "operator": "Equal", "value": "y"}])]
    affinity = rng.random()
    if affinity < 0.1:
        spec["nodeSelector"] = {"zone": rng.choice(["a", "b"])}
    elif affinity < 0.25:
        spec["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": rng.randint(1, 100), "preference": {"matchExpressions": [
                {"key": "zone", "operator": rng.choice(["In", "NotIn"]), "values": [rng.choice(["a", "c"])]}]}}]}}
    elif affinity < 0.3:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["c"]}]}]}}}
    if rng.random() < 0.1:
        spec["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": rng.choice([8080, 8081])}]
    return {"kind": "Pod", "metadata": {"name": f"p{i}", "namespace": "t", "labels": labels,
                                        "annotations": annotations}, "spec": spec}


def _as_tuple(p: Placement) -> tuple[Any, ...]:
    return p.pod, p.node, p.annotations, p.reason


def test_vector_stage_matches_the_per_node_cycle() -> None:
    for seed in range(4):
        rng = random.Random(seed)
        objects = _objects(rng, 40)
        pods = [_pod(rng, i) for i in range(120)]
        fast = Scheduler(build_cluster(copy.deepcopy(objects)), profile(None))
        slow = Scheduler(build_cluster(copy.deepcopy(objects)), profile(None))
        placed = unschedulable = 0
        for pod in pods:
            a, b = fast.schedule(copy.deepcopy(pod)), _each(slow, copy.deepcopy(pod))
            assert _as_tuple(a) == _as_tuple(b), (seed, pod["metadata"]["name"])
            assert a.scores == b.scores, (seed, pod["metadata"]["name"])
            placed += a.node is not None
            unschedulable += a.node is None
        assert placed and unschedulable  # both paths exercised


def test_vector_stage_follows_node_changes() -> None:
    rng = random.Random(7)
    objects = _objects(rng, 12)
    fast = Scheduler(build_cluster(copy.deepcopy(objects)), profile(None))
    slow = Scheduler(build_cluster(copy.deepcopy(objects)), profile(None))
    for i in range(40):
        pod = _pod(rng, i)
        a, b = fast.schedule(copy.deepcopy(pod)), _each(slow, copy.deepcopy(pod))
        assert _as_tuple(a) == _as_tuple(b)
        if i % 10 == 9:  # a node leaves, a pod is deleted, a NodeMetric is replaced
            for s in (fast, slow):
                name = sorted(s.cluster.nodes)[i // 10]
                s.cluster.nodes.pop(name)
                node = s.cluster.nodes[sorted(s.cluster.nodes)[0]]
                if node.pods:
                    node.remove_pod(next(iter(node.pods)))
                hot = sorted(s.cluster.nodes)[-1]
                s.cluster.nodes[hot].nodemetric = {"status": {"updateTime": _now(), "nodeMetric": {
                    "nodeUsage": {"resources": {"cpu": "100", "memory": "1Gi"}}}}}


def test_vector_stage_matches_with_the_full_example_config() -> None:
    """Every score plugin koord-sched ships (examples/scheduler/koord-sched-config.yaml) in both paths."""
    from pathlib import Path

    from scheduler.config import load_config

    cfg = load_config(str(Path(__file__).resolve().parents[2] / "examples" / "scheduler" / "koord-sched-config.yaml"))
    for seed in range(3):
        rng = random.Random(100 + seed)
        objects = _objects(rng, 40)
        pods = [_pod(rng, i) for i in range(100)]
        fast = Scheduler(build_cluster(copy.deepcopy(objects)), profile(cfg))
        slow = Scheduler(build_cluster(copy.deepcopy(objects)), profile(cfg))
        # Reservation (default, weight 5000), NodeNUMAResource, TaintToleration, NodeAffinity, PodTopologySpread,
        # InterPodAffinity and ImageLocality included
        assert len(fast.profile.scorers) == 14
        for pod in pods:
            a, b = fast.schedule(copy.deepcopy(pod)), _each(slow, copy.deepcopy(pod))
            assert _as_tuple(a) == _as_tuple(b), (seed, pod["metadata"]["name"])
            assert a.scores == b.scores, (seed, pod["metadata"]["name"])
