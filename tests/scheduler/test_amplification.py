"""Node resource amplification: the ratio annotation, allocatable as koord-manager's node webhook amplifies it, and
NodeNUMAResource counting cpuset-bound CPUs amplified (restating upstream's node_resource_amplification_test.go,
resource_amplification_test.go of the node webhook and nodenumaresource's TestFilterWithAmplifiedCPUs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from apis.extension.errors import AnnotationError
from apis.extension.node import decode_amplification_ratios, decode_node_raw_allocatable
from scheduler.amplification import (
    ERR_INSUFFICIENT_AMPLIFIED_CPU,
    ERR_INVALID_CPU_AMPLIFICATION_RATIO,
    amplify,
    amplify_resources,
    cpu_ratio,
    node_ratios,
)
from scheduler.cli import main, profile, simulate
from scheduler.cluster import build_cluster, node_allocatable
from scheduler.framework import Scheduler
from scheduler.nodeindex import node_index
from scheduler.numa.plugin import NodeNUMAResource

RATIO = "node.koordinator.sh/resource-amplification-ratio"
RAW = "node.koordinator.sh/raw-allocatable"
STATUS = "scheduling.koordinator.sh/resource-status"
LSR = {"koordinator.sh/qosClass": "LSR"}


def node(name: str, allocatable: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": dict(annotations or {})},
            "status": {"allocatable": {"pods": "110", **allocatable}}}


def pod(name: str, cpu: str, *, labels: dict[str, str] | None = None, node_name: str = "",
        annotations: dict[str, str] | None = None) -> dict[str, Any]:
    requests = {"cpu": cpu, "memory": "1Gi"}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": dict(labels or {}),
                         "annotations": dict(annotations or {})},
            "spec": {"nodeName": node_name, "containers": [
                {"name": "c", "resources": {"requests": requests, "limits": requests}}]},
            "status": {"phase": "Running" if node_name else "Pending"}}


def nrt(name: str, cpus: int) -> dict[str, Any]:
    """buildCPUTopologyForTest(2, 1, cpus/4, 2): 2 sockets = 2 NUMA nodes, 2 hyper-threads a core."""
    per_numa = cpus // 2
    detail = [{"id": i, "core": i // 2, "socket": i // per_numa, "node": i // per_numa} for i in range(cpus)]
    zones = [{"name": f"node-{z}", "type": "Node", "resources": [
        {"name": "cpu", "capacity": str(per_numa), "allocatable": str(per_numa), "available": str(per_numa)},
        {"name": "memory", "capacity": "20Gi", "allocatable": "20Gi", "available": "20Gi"}]} for z in (0, 1)]
    return {"apiVersion": "topology.node.k8s.io/v1alpha1", "kind": "NodeResourceTopology",
            "metadata": {"name": name, "annotations": {
                "node.koordinator.sh/cpu-topology": json.dumps({"detail": detail}),
                "kubelet.koordinator.sh/cpu-manager-policy": "{}"}},
            "topologyPolicies": ["None"], "zones": zones}


# ---- the annotations (apis/extension/node_resource_amplification_test.go) -------------------------------------

def test_ratios_as_get_node_resource_amplification_ratios_reads_them() -> None:
    assert node_ratios(node("n", {})) == {}  # no annotation
    assert node_ratios(node("n", {}, {"xxx": "yyy"})) == {}
    assert node_ratios(node("n", {}, {"xxx": "yyy", RATIO: '{"cpu":1.22}'})) == {"cpu": 1.22}
    with pytest.raises(AnnotationError, match=RATIO):
        node_ratios(node("n", {}, {RATIO: "invalid"}))
    # GetNodeResourceAmplificationRatio: unset for cpu (upstream -1) amplifies nothing; invalid is told apart
    assert cpu_ratio(node("n", {}, {RATIO: '{"memory":1.22}'})) == 1.0
    assert cpu_ratio(node("n", {}, {RATIO: '{"cpu":1.22}'})) == 1.22
    assert cpu_ratio(node("n", {}, {RATIO: "invalid"})) is None
    # json.Unmarshal into map[ResourceName]Ratio: null is no map, a null ratio 0, a string is refused by name
    assert decode_amplification_ratios("null") == {}
    assert decode_amplification_ratios('{"cpu": null, "memory": 2}') == {"cpu": 0.0, "memory": 2.0}
    with pytest.raises(AnnotationError, match="cpu: must be a number"):
        decode_amplification_ratios('{"cpu": "2"}')
    with pytest.raises(AnnotationError, match="JSON object"):
        decode_amplification_ratios("[2]")


def test_raw_allocatable_as_get_node_raw_allocatable_reads_it() -> None:
    assert decode_node_raw_allocatable('{"cpu":"1"}') == {"cpu": "1"}
    with pytest.raises(AnnotationError):
        decode_node_raw_allocatable("invalid")


def test_amplify_rounds_up_and_ignores_ratios_up_to_one() -> None:
    assert amplify(1000, 1.5) == 1500
    assert amplify(3, 1.5) == 5  # ceil(4.5)
    assert amplify(1000, 1.0) == amplify(1000, 0.5) == 1000
    # AmplifyResourceList: each listed resource by its own ratio; zero stays zero
    assert amplify_resources({"cpu": 4000, "memory": 1 << 30, "pods": 0}, {"cpu": 2, "memory": 1.5, "pods": 3}) == \
        {"cpu": 8000, "memory": 3 << 29, "pods": 0}


# ---- allocatable (pkg/webhook/node/plugins/resourceamplification handleUpdate) ----------------------------------

@pytest.mark.parametrize(("annotations", "resource", "want"), [
    ({RATIO: '{"cpu": 1.5}'}, "cpu", 1500),  # normal
    ({RATIO: '{"cpu": 0.5}'}, "cpu", 1000),  # disable1: ratio < 1
    ({RATIO: '{"cpu": 1}'}, "cpu", 1000),  # disable2: ratio 1
    ({RAW: "{}"}, "cpu", 1000),  # no ratio: raw allocatable is not applied
    ({RATIO: '{"eni": 2}'}, "eni", 1000),  # only cpu and memory are amplified
])
def test_allocatable_as_the_node_webhook_leaves_it(annotations: dict[str, str], resource: str, want: int) -> None:
    quantity = "1" if resource == "cpu" else "1000"
    assert node_allocatable(node("n", {resource: quantity}, annotations))[resource] == want


def test_the_raw_allocatable_annotation_is_what_gets_amplified() -> None:
    """The webhook multiplies the saved raw allocatable, so reading a node it already amplified gives the same
    numbers; memory goes through the milli value as MultiplyMilliQuant does."""
    done = node("n", {"cpu": "64", "memory": "96Gi"},
                {RATIO: '{"cpu": 2, "memory": 1.5}', RAW: '{"cpu":"32","memory":"64Gi"}'})
    fresh = node("n", {"cpu": "32", "memory": "64Gi"}, {RATIO: '{"cpu": 2, "memory": 1.5}'})
    assert node_allocatable(done) == node_allocatable(fresh) == {"cpu": 64000, "memory": 96 << 30, "pods": 110}
    bad = node("n", {"cpu": "32"}, {RATIO: '{"cpu": "2"}'})
    assert node_allocatable(bad)["cpu"] == 32000  # reported, left unamplified


# ---- NodeNUMAResource (nodenumaresource TestFilterWithAmplifiedCPUs) ---------------------------------------------

def cpuset_pod(name: str, cpus: int, node_name: str) -> dict[str, Any]:
    status = {"cpuset": f"0-{cpus - 1}"}
    return pod(name, str(cpus), labels=LSR, node_name=node_name, annotations={STATUS: json.dumps(status)})


@pytest.mark.parametrize(("case", "incoming", "existing", "ratio", "with_nrt", "want"), [
    ("no resources requested always fits", "0", [pod("e", "4", node_name="node-1")], 2.0, False, None),
    ("no filtering without node cpu amplification", "32", [pod("e", "32", node_name="node-1")], 1.0, False, None),
    ("cpu fits on no NRT node", "32", [pod("e", "32", node_name="node-1")], 2.0, False, None),
    ("insufficient cpu", "32", [pod("e", "64", node_name="node-1")], 2.0, False, ERR_INSUFFICIENT_AMPLIFIED_CPU),
    ("insufficient cpu with cpuset pod on node", "32", [cpuset_pod("e", 32, "node-1")], 2.0, True,
     ERR_INSUFFICIENT_AMPLIFIED_CPU),
    ("insufficient cpu when scheduling cpuset pod", "32lsr", [pod("e", "32", node_name="node-1")], 2.0, True,
     ERR_INSUFFICIENT_AMPLIFIED_CPU),
    ("insufficient cpu when scheduling cpuset pod with cpuset pod on node", "32lsr", [cpuset_pod("e", 32, "node-1")],
     2.0, True, ERR_INSUFFICIENT_AMPLIFIED_CPU),
])
def test_filter_with_amplified_cpus(case: str, incoming: str, existing: list[dict[str, Any]], ratio: float,
                                    with_nrt: bool, want: str | None) -> None:
    """A 32-CPU node whose allocatable the webhook amplified by `ratio`; cpuset-bound CPUs count amplified."""
    objs = [node("node-1", {"cpu": "32", "memory": "40Gi"}, {RATIO: json.dumps({"cpu": ratio})}), *existing]
    if with_nrt:
        objs.append(nrt("node-1", 32))
    cpu = incoming.removesuffix("lsr")
    p = pod("p", cpu, labels=LSR if incoming.endswith("lsr") else None)
    if cpu == "0":
        p["spec"]["containers"][0]["resources"] = {}
    cluster = build_cluster(objs)
    sched = Scheduler(cluster, profile(None))
    numa = sched.plugin("NodeNUMAResource", NodeNUMAResource)
    assert numa is not None
    assert numa.filter(p, cluster.nodes["node-1"], cluster) == want, case
    vector = numa.prefilter_vector(p, node_index(cluster))  # the vector path agrees with Filter
    assert (True if vector is None else bool(vector[0])) == (want is None), case


def test_an_invalid_ratio_refuses_pods_asking_cpu() -> None:
    cluster = build_cluster([node("n", {"cpu": "8", "memory": "8Gi"}, {RATIO: "invalid"})])
    sched = Scheduler(cluster, profile(None))
    numa = sched.plugin("NodeNUMAResource", NodeNUMAResource)
    assert numa is not None
    assert numa.filter(pod("p", "1"), cluster.nodes["n"], cluster) == ERR_INVALID_CPU_AMPLIFICATION_RATIO


def test_score_counts_cpuset_cpus_amplified() -> None:
    """scoreWithAmplifiedCPUs: n1 (8 raw CPUs × 2) holds a 4-CPU cpuset pod, n2 a plain 4-CPU pod. Over the node's
    requested/allocatable n1 counts 8 CPUs used of 16 where n2 counts 4: least-allocated prefers n2."""
    ann = {RATIO: '{"cpu": 2}'}
    objs = [node("n1", {"cpu": "8", "memory": "64Gi"}, ann), nrt("n1", 8), cpuset_pod("c", 4, "n1"),
            node("n2", {"cpu": "8", "memory": "64Gi"}, ann), nrt("n2", 8), pod("b", "4", node_name="n2")]
    cluster = build_cluster(objs)
    sched = Scheduler(cluster, profile(None))
    numa = sched.plugin("NodeNUMAResource", NodeNUMAResource)
    assert numa is not None
    p = pod("p", "2")
    scores = {n: numa.score(p, info, cluster) for n, info in cluster.nodes.items()}
    # cpu: (16 - 8 - 2) / 16 → 37, (16 - 4 - 2) / 16 → 62; memory (64 - 1 - 1) / 64 → 96 on both
    assert scores == {"n1": (37 + 96) // 2, "n2": (62 + 96) // 2}
    vector = numa.score_vector(p, node_index(cluster))
    assert dict(zip(node_index(cluster).names, vector.tolist(), strict=True)) == scores


# ---- the v1.6 text: amplification schedules more Prod pods than the node's raw allocatable ------------------------

def test_simulate_places_prod_pods_beyond_the_raw_allocatable(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                              ) -> None:
    """v1.6: "users leverage Koordinator's node resource amplification capabilities to schedule more Prod pods,
    causing ProdAllocated > NodeAllocatable". A 4-CPU node amplified ×2 takes eight 1-CPU pods, not nine; through
    `koord-sched simulate` as a user runs it."""
    cluster = [node("n1", {"cpu": "4", "memory": "64Gi"}, {RATIO: '{"cpu": 2}'})]
    pods = [pod(f"p{i}", "1") for i in range(9)]
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump_all(cluster))
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all(pods))
    rc = main(["simulate", "--cluster", str(tmp_path / "cluster.yaml"), "--pods", str(tmp_path / "pods.yaml"),
               "-o", "json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    placed = [p["node"] for p in out["placements"]]
    assert placed == ["n1"] * 8 + [None]
    assert "Insufficient cpu" in out["placements"][8]["reason"]


def test_a_cpuset_pod_counts_amplified_against_plain_ones() -> None:
    """On the same node an LSR pod binding 2 CPUs takes 4 of the 8 amplified CPUs: four 1-CPU pods still fit, a
    fifth does not (NodeResourcesFit alone would let it, counting the cpuset pod at 2)."""
    objs = [node("n1", {"cpu": "4", "memory": "64Gi"}, {RATIO: '{"cpu": 2}'}), nrt("n1", 4)]
    pods = [pod("lsr", "2", labels=LSR)] + [pod(f"p{i}", "1") for i in range(5)]
    placements = simulate(build_cluster(objs), pods)["placements"]
    assert [p["node"] for p in placements] == ["n1"] * 5 + [None]
    assert ERR_INSUFFICIENT_AMPLIFIED_CPU in placements[5]["reason"]
    assert json.loads(placements[0]["annotations"][STATUS])["cpuset"]


def test_numa_nodes_are_amplified_by_the_node_ratios() -> None:
    """amplifyNUMANodeResources: each NUMA node of a ×2 node offers twice its NRT cpu, so a SingleNUMANode pod
    asking 20 of a 16-CPU NUMA node fits there (and not on the same node unamplified). A 4-CPU cpuset pod bound on
    NUMA 0 counts 8 of NUMA 0's 32 (getAvailableNUMANodeResources), leaving 24, while a plain pod holds 6 of NUMA
    1's: a 26-CPU pod fits NUMA 1 only (counted unamplified, NUMA 0 would have the more room, 28)."""
    single = {"scheduling.koordinator.sh/numa-topology-spec": '{"numaTopologyPolicy":"SingleNUMANode"}'}
    big = pod("p", "20", annotations=single)
    plain = [node("n1", {"cpu": "32", "memory": "64Gi"}), nrt("n1", 32)]
    [refused] = simulate(build_cluster(plain), [big])["placements"]
    assert refused["node"] is None
    amplified = [node("n1", {"cpu": "32", "memory": "64Gi"}, {RATIO: '{"cpu": 2}'}), nrt("n1", 32)]
    [placed] = simulate(build_cluster(amplified), [big])["placements"]
    assert placed["node"] == "n1"
    [share] = json.loads(placed["annotations"][STATUS])["numaNodeResources"]
    assert share["resources"]["cpu"] == "20"
    bound = {"cpuset": "0-3", "numaNodeResources": [{"node": 0, "resources": {"cpu": "4"}}]}
    held = pod("c", "4", labels=LSR, node_name="n1", annotations={STATUS: json.dumps(bound)})
    other = {"numaNodeResources": [{"node": 1, "resources": {"cpu": "6"}}]}
    held_plain = pod("d", "6", node_name="n1", annotations={STATUS: json.dumps(other)})
    [second] = simulate(build_cluster([*amplified, held, held_plain]),
                        [pod("q", "26", annotations=single)])["placements"]
    assert second["node"] == "n1"
    assert [r["node"] for r in json.loads(second["annotations"][STATUS])["numaNodeResources"]] == [1]
