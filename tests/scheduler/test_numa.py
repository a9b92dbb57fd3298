"""NodeNUMAResource and the topology manager: hint merge, policies and refusals, cpusets, GPU+CPU+memory on one
NUMA node, the v1.6 release text's example, and the resource-status the agent reads (upstream-derived cases)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from apis.extension.resource_status import resource_status
from scheduler.cli import simulate
from scheduler.cluster import build_cluster
from scheduler.numa.hints import BEST_EFFORT, RESTRICTED, SINGLE_NUMA_NODE, Hint, mask_string, merge
from scheduler.numa.plugin import NodeNUMAResource
from scheduler.numa.topology import parse_topology

STATUS = "scheduling.koordinator.sh/resource-status"
SPEC = "scheduling.koordinator.sh/numa-topology-spec"
NRT_CRD = "topology.node.k8s.io_noderesourcetopologies.yaml"


def h(*nodes: int, preferred: bool = True) -> Hint:
    return Hint(frozenset(nodes), preferred)


def nrt(name: str, cores_per_numa: int = 4, mem: str = "64Gi") -> dict[str, Any]:
    """2 NUMA nodes, one socket each, `cores_per_numa` cores of 2 hyper-threads; CPU i and i+N are siblings."""
    n = 2 * cores_per_numa
    detail = [{"id": i, "core": i % n, "socket": (i % n) // cores_per_numa, "node": (i % n) // cores_per_numa}
              for i in range(2 * n)]
    zones = [{"name": f"node-{z}", "type": "Node", "resources": [
        {"name": "cpu", "capacity": str(n), "allocatable": str(n), "available": str(n)},
        {"name": "memory", "capacity": mem, "allocatable": mem, "available": mem}]} for z in (0, 1)]
    return {"apiVersion": "topology.node.k8s.io/v1alpha1", "kind": "NodeResourceTopology",
            "metadata": {"name": name, "annotations": {
                "node.koordinator.sh/cpu-topology": json.dumps({"detail": detail}),
                "kubelet.koordinator.sh/cpu-manager-policy": "{}"}},
            "topologyPolicies": ["None"], "zones": zones}


def node(name: str, cpu: int, mem: str, gpus: int = 0, labels: dict[str, str] | None = None) -> dict[str, Any]:
    alloc = {"cpu": str(cpu), "memory": mem, "pods": "110"}
    if gpus:
        alloc |= {"koordinator.sh/gpu": str(100 * gpus), "koordinator.sh/gpu-core": str(100 * gpus),
                  "koordinator.sh/gpu-memory-ratio": str(100 * gpus),
                  "koordinator.sh/gpu-memory": f"{48 * gpus}Gi"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}},
            "status": {"allocatable": alloc}}


def device(name: str, gpus: int = 8) -> dict[str, Any]:
    devs = [{"type": "gpu", "minor": m, "id": f"GPU-{m}", "health": True,
             "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory-ratio": "100",
                           "koordinator.sh/gpu-memory": "48Gi"},
             "topology": {"socketID": m * 2 // gpus, "nodeID": m * 2 // gpus, "pcieID": f"pci{m // 2}",
                          "busID": f"0000:{m:02x}:00.0"}} for m in range(gpus)]
    return {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Device", "metadata": {"name": name},
            "spec": {"devices": devs}}


def pod(name: str, requests: dict[str, Any], annotations: dict[str, str] | None = None,
        labels: dict[str, str] | None = None, node_name: str = "") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "annotations": dict(annotations or {}),
                         "labels": dict(labels or {})},
            "spec": {"nodeName": node_name, "containers": [
                {"name": "c", "resources": {"requests": requests, "limits": requests}}]},
            "status": {"phase": "Running" if node_name else "Pending"}}


LSR = {"koordinator.sh/qosClass": "LSR"}


def run(objs: list[dict[str, Any]], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return list(simulate(build_cluster(objs), pods)["placements"])


# ---- the topology manager's merge (topologymanager/policy_*_test.go shapes) ------------------------------------

def test_bitmask_strings_as_kubelet_prints_them() -> None:
    assert [mask_string(frozenset(m)) for m in ({0}, {1}, {0, 1}, {2})] == ["01", "10", "11", "0100"]


def test_merge_picks_the_narrowest_preferred_common_hint() -> None:
    providers = {"cpu": [h(0), h(1), h(0, 1, preferred=False)], "gpu": [h(1), h(0, 1, preferred=False)]}
    for policy in (BEST_EFFORT, RESTRICTED, SINGLE_NUMA_NODE):
        best, admit, reasons = merge(policy, [0, 1], providers)
        assert (best.mask, best.preferred, admit, reasons) == (frozenset({1}), True, True, [])


def test_restricted_rejects_an_unpreferred_merge_naming_the_resources() -> None:
    providers = {"cpu": [h(0), h(0, 1, preferred=False)], "gpu": [h(1), h(0, 1, preferred=False)]}
    best, admit, reasons = merge(RESTRICTED, [0, 1], providers)
    assert not admit and not best.preferred and best.unsatisfied  # {0} ∩ {0,1} is narrower than one of them
    assert reasons == ["Unaligned NUMA Hint cause cpu prefer [01] among [01 11] & gpu prefer [10] among [10 11]"]
    best, admit, _ = merge(BEST_EFFORT, [0, 1], providers)
    assert admit and best.mask == frozenset({0, 1})


def test_a_resource_without_any_hint_is_unsatisfied_by_name() -> None:
    _, admit, reasons = merge(SINGLE_NUMA_NODE, [0, 1], {"cpu": [h(0)], "memory": []})
    assert not admit and reasons == ["Unsatisfied NUMA memory"]
    _, admit, _ = merge(BEST_EFFORT, [0, 1], {"cpu": [h(0)], "memory": []})
    assert admit


def test_single_numa_node_ignores_multi_numa_hints() -> None:
    _, admit, reasons = merge(SINGLE_NUMA_NODE, [0, 1], {"cpu": [h(0, 1)]})
    assert not admit and reasons[0].startswith("Unaligned NUMA Hint cause cpu prefer [11]")


def test_required_exclusive_keeps_off_numa_nodes_shared_with_multi_numa_pods() -> None:
    best, admit, _ = merge(SINGLE_NUMA_NODE, [0, 1], {"cpu": [h(0), h(1)]}, "Required", {0: "shared"})
    assert admit and best.mask == frozenset({1})
    _, admit, _ = merge(SINGLE_NUMA_NODE, [0, 1], {"cpu": [h(0)]}, "Required", {0: "shared"})
    assert not admit


# ---- the plugin through simulate -------------------------------------------------------------------------------

def test_nrt_objects_are_valid(validate_crd: Any) -> None:
    validate_crd(NRT_CRD, nrt("n1"))


@pytest.mark.parametrize(("policy", "cpuset"), [("FullPCPUs", "0-1,8-9"), ("SpreadByPCPUs", "0-3")])
def test_cpusets_on_a_hyperthreaded_node(policy: str, cpuset: str) -> None:
    p = pod("p", {"cpu": "4", "memory": "4Gi"}, {"scheduling.koordinator.sh/resource-spec":
                                                 json.dumps({"preferredCPUBindPolicy": policy})}, LSR)
    [placed] = run([node("n1", 16, "128Gi"), nrt("n1")], [p])
    assert placed["node"] == "n1"
    status = resource_status(placed["annotations"])  # exactly as the agent's CPUSetAllocator reads it
    assert status.cpuset == cpuset


def test_full_pcpus_needs_whole_cores() -> None:
    p = pod("p", {"cpu": "3"}, {"scheduling.koordinator.sh/resource-spec": '{"preferredCPUBindPolicy":"FullPCPUs"}'},
            LSR)
    [placed] = run([node("n1", 16, "128Gi"), nrt("n1")], [p])
    assert placed["node"] is None and "node(s) requested cpus not multiple cpus per core" in placed["reason"]


def test_bound_cpus_are_not_given_twice() -> None:
    spec = {"scheduling.koordinator.sh/resource-spec": '{"preferredCPUBindPolicy":"FullPCPUs"}'}
    pods = [pod(f"p{i}", {"cpu": "4"}, spec, LSR) for i in range(5)]
    placed = run([node("n1", 16, "128Gi"), nrt("n1")], pods)
    sets = [resource_status(p["annotations"]).cpus() for p in placed[:4]]
    assert sorted(c for s in sets for c in s) == list(range(16))
    assert placed[4]["node"] is None


def test_gpu_cpu_and_memory_on_one_numa_node() -> None:
    """NUMA 0 has its CPUs taken by a bound pod: a SingleNUMANode pod asking GPUs, CPUs and memory gets all three
    on NUMA 1 (GPU minors 4-7, CPUs 4-7/12-15)."""
    busy = pod("busy", {"cpu": "8"}, {STATUS: '{"cpuset":"0-3,8-11","numaNodeResources":[{"node":0,"resources":'
                                      '{"cpu":"8"}}]}'}, LSR, node_name="n1")
    p = pod("p", {"cpu": "4", "memory": "16Gi", "koordinator.sh/gpu": "200"},
            {SPEC: '{"numaTopologyPolicy":"SingleNUMANode"}'}, LSR)
    [placed] = run([node("n1", 16, "128Gi", gpus=8), nrt("n1"), device("n1"), busy], [p])
    assert placed["node"] == "n1", placed
    status = resource_status(placed["annotations"])
    assert set(status.cpus()) <= {4, 5, 6, 7, 12, 13, 14, 15} and len(status.cpus()) == 4
    assert [n.node for n in status.numa_node_resources] == [1]
    gpus = json.loads(placed["annotations"]["scheduling.koordinator.sh/device-allocated"])["gpu"]
    assert {g["minor"] for g in gpus} <= {4, 5, 6, 7} and len(gpus) == 2


def test_restricted_refuses_when_gpus_and_cpus_sit_on_different_numa_nodes() -> None:
    busy_cpu = pod("busy", {"cpu": "8"}, {STATUS: '{"cpuset":"0-3,8-11"}'}, LSR, node_name="n1")
    gpu_used = json.dumps({"gpu": [{"minor": m, "resources": {"koordinator.sh/gpu-core": "100",
                                                             "koordinator.sh/gpu-memory-ratio": "100",
                                                             "koordinator.sh/gpu-memory": "48Gi"}}
                                   for m in (4, 5, 6, 7)]})
    busy_gpu = pod("gpus", {"koordinator.sh/gpu": "400"}, {"scheduling.koordinator.sh/device-allocated": gpu_used},
                   node_name="n1")
    p = pod("p", {"cpu": "4", "koordinator.sh/gpu": "100"}, {SPEC: '{"numaTopologyPolicy":"Restricted"}'}, LSR)
    [placed] = run([node("n1", 16, "128Gi", gpus=8), nrt("n1"), device("n1"), busy_cpu, busy_gpu], [p])
    assert placed["node"] is None
    assert "Unaligned NUMA Hint cause" in placed["reason"] and "cpu prefer [10]" in placed["reason"]
    assert "gpu prefer [01]" in placed["reason"]


def test_without_nrt_a_numa_policy_is_refused() -> None:
    p = pod("p", {"cpu": "4"}, {SPEC: '{"numaTopologyPolicy":"SingleNUMANode"}'})
    [placed] = run([node("n1", 16, "128Gi")], [p])
    assert placed["node"] is None and "node(s) missing NUMA resources" in placed["reason"]
    [placed] = run([node("n1", 16, "128Gi")], [pod("q", {"cpu": "4"}, {SPEC: '{"numaTopologyPolicy":"BestEffort"}'})])
    assert placed["node"] == "n1"


def test_node_and_pod_policies_must_agree() -> None:
    p = pod("p", {"cpu": "4"}, {SPEC: '{"numaTopologyPolicy":"Restricted"}'})
    n = node("n1", 16, "128Gi", labels={"node.koordinator.sh/numa-topology-policy": "SingleNUMANode"})
    [placed] = run([n, nrt("n1")], [p])
    assert placed["node"] is None and "node(s) NUMA Topology policy not match" in placed["reason"]


def test_node_label_policy_applies_to_plain_pods() -> None:
    n = node("n1", 16, "128Gi", labels={"node.koordinator.sh/numa-topology-policy": "SingleNUMANode"})
    [fits, too_big] = run([n, nrt("n1")], [pod("a", {"cpu": "6", "memory": "8Gi"}), pod("b", {"cpu": "10"})])
    assert fits["node"] == "n1"
    assert [r.node for r in resource_status(fits["annotations"]).numa_node_resources] == [0]
    assert too_big["node"] is None and "Unaligned NUMA Hint cause cpu" in too_big["reason"]


def test_malformed_spec_is_a_reason_not_a_traceback() -> None:
    [placed] = run([node("n1", 16, "128Gi"), nrt("n1")], [pod("p", {"cpu": "1"}, {SPEC: "{nope"})])
    assert placed["node"] is None and "invalid pod annotation" in placed["reason"]


def test_release_text_v16_gpu_cpu_memory_within_one_numa_node() -> None:
    """v1.6: 'Allocating GPUs, CPUs, and memory within the same NUMA Node' (the pod as printed, named)."""
    p = pod("numa", {"koordinator.sh/gpu": 200, "cpu": 64, "memory": "500Gi"},
            {SPEC: '{"numaTopologyPolicy":"Restricted", "singleNUMANodeExclusive":"Preferred"}'})
    objs = [node("big", 256, "1200Gi", gpus=8), nrt("big", cores_per_numa=64, mem="600Gi"), device("big")]
    [placed] = run(objs, [p])
    assert placed["node"] == "big", placed
    status = resource_status(placed["annotations"])
    [numa] = status.numa_node_resources
    gpus = json.loads(placed["annotations"]["scheduling.koordinator.sh/device-allocated"])["gpu"]
    assert {g["minor"] // 4 for g in gpus} == {numa.node}
    assert str(numa.resources["memory"]) == str(500 * 1024**3) and numa.resources["cpu"] == 64


def gpu_rdma_device(name: str) -> dict[str, Any]:
    """Upstream's fakeH800 shape: GPU i and RDMA NIC i+1 share PCIe i; 0-3 on NUMA 0, 4-7 on NUMA 1; every NIC
    has VFs labelled `fakeG`."""
    dev = device(name)
    for i, g in enumerate(dev["spec"]["devices"]):
        g["topology"]["pcieID"] = str(i)
    for i in range(8):
        bus = f"0000:{0x10 + i:02x}:00."
        dev["spec"]["devices"].append({
            "type": "rdma", "id": f"{bus}0", "minor": i + 1, "health": True,
            "resources": {"koordinator.sh/rdma": "100"},
            "topology": {"socketID": i // 4, "nodeID": i // 4, "pcieID": str(i)},
            "vfGroups": [{"labels": {"type": "fakeG"}, "vfs": [{"minor": k, "busID": f"{bus}{k + 2}"}
                                                                for k in range(2)]}]})
    return dev


GPU_RDMA = {SPEC: '{"numaTopologyPolicy":"SingleNUMANode"}',
            "scheduling.koordinator.sh/device-allocate-hint":
                '{"rdma":{"vfSelector":{"matchLabels":{"type":"fakeG"}}}}',
            "scheduling.koordinator.sh/device-joint-allocate": '{"deviceTypes":["gpu","rdma"]}'}


def gpu_rdma_node(name: str) -> dict[str, Any]:
    n = node(name, 16, "128Gi", gpus=8)
    n["status"]["allocatable"]["koordinator.sh/rdma"] = "800"
    return n


def numa_of_devices(placed: dict[str, Any]) -> dict[str, set[int]]:
    doc = json.loads(placed["annotations"]["scheduling.koordinator.sh/device-allocated"])
    return {t: {(a["minor"] if t == "gpu" else a["minor"] - 1) // 4 for a in doc[t]} for t in ("gpu", "rdma")}


def test_gpus_and_rdma_vfs_on_the_pods_numa_node(validate_crd: Any) -> None:
    """NUMA 0's CPUs are taken: a SingleNUMANode GPU+RDMA joint pod gets its CPUs, GPUs and VFs all on NUMA 1
    (an unconfined allocation would start at GPU 0 / NIC 1 on NUMA 0)."""
    validate_crd("scheduling.koordinator.sh_devices.yaml", gpu_rdma_device("n1"))
    busy = pod("busy", {"cpu": "8"}, {STATUS: '{"cpuset":"0-3,8-11","numaNodeResources":[{"node":0,"resources":'
                                      '{"cpu":"8"}}]}'}, LSR, node_name="n1")
    p = pod("p", {"cpu": "4", "memory": "8Gi", "koordinator.sh/gpu": "200", "koordinator.sh/rdma": "1"}, GPU_RDMA,
            LSR)
    [placed] = run([gpu_rdma_node("n1"), nrt("n1"), gpu_rdma_device("n1"), busy], [p])
    assert placed["node"] == "n1", placed
    assert numa_of_devices(placed) == {"gpu": {1}, "rdma": {1}}
    assert [n.node for n in resource_status(placed["annotations"]).numa_node_resources] == [1]
    vfs = [vf for a in json.loads(placed["annotations"]["scheduling.koordinator.sh/device-allocated"])["rdma"]
           for vf in a["extension"]["vfs"]]
    assert len(vfs) == 2  # one VF per GPU's PCIe (joint allocation)


def test_rdma_taken_on_one_numa_node_moves_the_gpus_to_the_other() -> None:
    """Every NIC of NUMA 0 is held by another pod: the GPUs follow the free NICs to NUMA 1 (unaligned, the GPU
    walk alone would pick GPUs 0-1 on NUMA 0); with NUMA 1's NICs taken as well the pod is refused by name."""
    held = json.dumps({"rdma": [{"minor": m, "resources": {"koordinator.sh/rdma": "100"}} for m in (1, 2, 3, 4)]})
    hog = pod("hog", {"koordinator.sh/rdma": "400"}, {"scheduling.koordinator.sh/device-allocated": held},
              node_name="n1")
    p = pod("p", {"koordinator.sh/gpu": "200", "koordinator.sh/rdma": "1"}, GPU_RDMA)
    [placed] = run([gpu_rdma_node("n1"), nrt("n1"), gpu_rdma_device("n1"), hog], [p])
    assert placed["node"] == "n1", placed
    assert numa_of_devices(placed) == {"gpu": {1}, "rdma": {1}}
    assert placed["annotations"][STATUS] == "{}"  # aligned, no cpu/memory asked: upstream's empty ResourceStatus
    held_all = json.dumps({"rdma": [{"minor": m, "resources": {"koordinator.sh/rdma": "100"}} for m in range(1, 9)]})
    hog_all = pod("hog", {}, {"scheduling.koordinator.sh/device-allocated": held_all}, node_name="n1")
    [refused] = run([gpu_rdma_node("n1"), nrt("n1"), gpu_rdma_device("n1"), hog_all], [p])
    assert refused["node"] is None and "Unsatisfied NUMA gpu+rdma" in refused["reason"], refused


# ---- Score (nodenumaresource/scoring.go; scoringStrategy over the NUMA nodes the pod gets) ---------------------

def numa_status(*per: tuple[int, str, str], cpuset: str = "") -> dict[str, str]:
    doc: dict[str, Any] = {"cpuset": cpuset} if cpuset else {}
    doc["numaNodeResources"] = [{"node": n, "resources": {"cpu": c, "memory": m}} for n, c, m in per]
    return {STATUS: json.dumps(doc)}


def numa_scores(objs: list[dict[str, Any]], p: dict[str, Any], plugin: Any = None) -> dict[str, int]:
    from scheduler.cli import profile
    from scheduler.framework import Scheduler

    sched = Scheduler(build_cluster(objs), profile(None))
    numa = plugin or sched.plugin("NodeNUMAResource", NodeNUMAResource)
    return {n: numa.score(p, node, sched.cluster) for n, node in sorted(sched.cluster.nodes.items())}


SINGLE = {SPEC: '{"numaTopologyPolicy":"SingleNUMANode"}'}


def test_score_least_allocated_over_the_chosen_numa_node() -> None:
    """n1's NUMA 0 holds 4 cpu / 16Gi of a bound pod: the pod gets NUMA 0 there (the first that fits) and scores
    (cpu (8-8)/8 → 0, memory (64-24)/64 → 62) / 2 = 31; the empty n2 scores (50 + 87) / 2 = 68. Over the whole
    node n1 would score 65 — NUMA scoring is what tells them apart."""
    busy = pod("busy", {"cpu": "4", "memory": "16Gi"}, numa_status((0, "4", "16Gi")), node_name="n1")
    objs = [node("n1", 16, "128Gi"), nrt("n1"), node("n2", 16, "128Gi"), nrt("n2"), busy]
    p = pod("p", {"cpu": "4", "memory": "8Gi"}, SINGLE)
    assert numa_scores(objs, p) == {"n1": 31, "n2": 68}
    plain = pod("q", {"cpu": "4", "memory": "8Gi"})  # no policy: the node's requested over its allocatable
    assert numa_scores(objs, plain) == {"n1": (50 + 81) // 2, "n2": (75 + 93) // 2}
    assert numa_scores(objs, pod("z", {})) == {"n1": 0, "n2": 0}  # asks nothing: skipped


def test_score_most_allocated_and_weights() -> None:
    from scheduler.numa.plugin import NodeNUMAResource

    busy = pod("busy", {"cpu": "4", "memory": "16Gi"}, numa_status((0, "4", "16Gi")), node_name="n1")
    objs = [node("n1", 16, "128Gi"), nrt("n1"), node("n2", 16, "128Gi"), nrt("n2"), busy]
    p = pod("p", {"cpu": "4", "memory": "8Gi"}, SINGLE)
    most = NodeNUMAResource(scoring_type="MostAllocated")
    assert numa_scores(objs, p, most) == {"n1": (100 + 37) // 2, "n2": (50 + 12) // 2}
    cpu_only = NodeNUMAResource(scoring_type="MostAllocated", resources=(("cpu", 3), ("memory", 1)))
    assert numa_scores(objs, p, cpu_only) == {"n1": (300 + 37) // 4, "n2": (150 + 12) // 4}


def test_score_of_a_cpuset_pod_counts_every_bound_cpu_of_the_node() -> None:
    """**[quirk]** upstream calculateAllocatableAndRequested: with a cpuset, requested cpu is every CPU bound on the
    node, though allocatable is the chosen NUMA node's: 8 CPUs bound on NUMA 1, the pod gets NUMA 0, cpu scores
    (8-(8+4)) < 0 → 0."""
    busy = pod("busy", {"cpu": "8"}, numa_status((1, "8", "0"), cpuset="4-7,12-15"), LSR, node_name="n1")
    p = pod("p", {"cpu": "4", "memory": "8Gi"}, SINGLE, LSR)
    assert numa_scores([node("n1", 16, "128Gi"), nrt("n1"), busy], p) == {"n1": (0 + 87) // 2}


def test_numa_score_places_on_the_freer_numa_node() -> None:
    """n1 is emptier as a whole (4 of 16 cpus) but its NUMA 0, where the pod would go, is half full; n2's NUMA 0
    has 3 taken (and NUMA 1 another 3, by single-NUMA pods). LeastAllocated over the NUMA node chosen sends the
    pod to n2 (the whole-node view says n1)."""
    b1 = pod("b1", {"cpu": "4"}, numa_status((0, "4", "0")), node_name="n1")
    b2 = [pod(f"b2{i}", {"cpu": "3"}, numa_status((i, "3", "0")), node_name="n2") for i in (0, 1)]
    objs = [node("n1", 16, "128Gi"), nrt("n1"), node("n2", 16, "128Gi"), nrt("n2"), b1, *b2]
    [placed] = run(objs, [pod("p", {"cpu": "4", "memory": "8Gi"}, SINGLE)])
    assert placed["node"] == "n2", placed
    [plain] = run(objs, [pod("q", {"cpu": "4", "memory": "8Gi"})])
    assert plain["node"] == "n1", plain


def test_benchmark_objects_are_valid(validate_crd: Any) -> None:
    """benchmarks/numa.py's NodeResourceTopology and Reservation objects, as the CRDs define them."""
    from benchmarks.numa import nrt as bench_nrt
    from benchmarks.numa import reservation

    validate_crd(NRT_CRD, bench_nrt("node-0000"))
    validate_crd("scheduling.koordinator.sh_reservations.yaml", reservation(0, "node-0000"))


@pytest.mark.parametrize(("annotation", "policy", "reserved", "problems"), [
    ('{"policy":"static","options":{"full-pcpus-only":"true"},"reservedCPUs":"0-1"}', "static", {0, 1}, 0),
    ('{"Policy":"static","ReservedCPUs":"0"}', "static", {0}, 0),  # json.Unmarshal folds field names
    ('{"policy":"static","options":{"full-pcpus-only":1}}', "", set(), 1),  # Unmarshal fails: no policy at all
    ('{"policy":"static","reservedCPUs":"x"}', "static", set(), 1),  # cpuset.Parse fails: no reserved CPUs
])
def test_kubelet_cpu_manager_policy_is_read_as_go_unmarshals_it(annotation: str, policy: str, reserved: set[int],
                                                                problems: int) -> None:
    obj = nrt("n1")
    obj["metadata"]["annotations"]["kubelet.koordinator.sh/cpu-manager-policy"] = annotation
    topo = parse_topology(obj)
    assert (topo.kubelet_policy, set(topo.reserved_cpus), len(topo.problems)) == (policy, reserved, problems)


@pytest.mark.parametrize(("reported", "policy"), [
    ("SingleNUMANodeContainerLevel", SINGLE_NUMA_NODE), ("SingleNUMANodePodLevel", SINGLE_NUMA_NODE),
    ("RestrictedContainerLevel", RESTRICTED), ("BestEffortPodLevel", BEST_EFFORT), ("None", ""), ("Other", ""),
])
def test_the_kubelet_topology_policy_koordlet_reports_is_the_nodes_numa_policy(reported: str, policy: str) -> None:
    obj = nrt("n1")
    obj["topologyPolicies"] = [reported]
    assert parse_topology(obj).topology_policy == policy


@pytest.mark.parametrize(("busy", "label", "numa"), [
    ("0,8", "", 0), ("0,8", "MostAllocated", 0), ("0,8", "LeastAllocated", 1),
    ("4,12", "", 0), ("4,12", "MostAllocated", 1), ("4,12", "LeastAllocated", 0)])
def test_node_numa_allocate_strategy_label_picks_the_numa_node_of_the_cpuset(busy: str, label: str,
                                                                             numa: int) -> None:
    """`node.koordinator.sh/numa-allocate-strategy`: MostAllocated takes the CPUs from the NUMA node with the
    fewest free CPUs, LeastAllocated from the one with the most; without the label, NUMA node 0 first as before.
    NUMA 0 holds CPUs 0-3 and 8-11, NUMA 1 4-7 and 12-15; a bound pod holds one core of `busy`'s NUMA node."""
    spec = {"scheduling.koordinator.sh/resource-spec": '{"preferredCPUBindPolicy":"FullPCPUs"}'}
    held = pod("held", {"cpu": "2"}, {**spec, STATUS: json.dumps({"cpuset": busy})}, LSR, node_name="n1")
    labels = {"node.koordinator.sh/numa-allocate-strategy": label} if label else {}
    [placed] = run([node("n1", 16, "128Gi", labels=labels), nrt("n1"), held], [pod("p", {"cpu": "2"}, spec, LSR)])
    cpus = resource_status(placed["annotations"]).cpus()
    assert len(cpus) == 2 and {c % 8 // 4 for c in cpus} == {numa}, cpus


def limits_only(p: dict[str, Any]) -> dict[str, Any]:
    """The pod with its requests dropped: only limits, as the release texts write them."""
    for c in p["spec"]["containers"]:
        c["resources"].pop("requests")
    return p


def test_limits_only_pods_get_their_cpuset_and_numa_node() -> None:
    """Requests default from limits (the API server's rule): a limits-only LSR pod gets its 4 CPUs bound, and
    v1.6's GPU+CPU+memory pod written with limits only lands on one NUMA node with its GPUs."""
    p = limits_only(pod("p", {"cpu": "4", "memory": "4Gi"}, {"scheduling.koordinator.sh/resource-spec":
                                                             '{"preferredCPUBindPolicy":"FullPCPUs"}'}, LSR))
    [placed] = run([node("n1", 16, "128Gi"), nrt("n1")], [p])
    assert resource_status(placed["annotations"]).cpuset == "0-1,8-9"
    numa_pod = limits_only(pod("numa", {"koordinator.sh/gpu": 200, "cpu": 64, "memory": "500Gi"},
                               {SPEC: '{"numaTopologyPolicy":"Restricted", "singleNUMANodeExclusive":"Preferred"}'}))
    objs = [node("big", 256, "1200Gi", gpus=8), nrt("big", cores_per_numa=64, mem="600Gi"), device("big")]
    [placed] = run(objs, [numa_pod])
    [numa] = resource_status(placed["annotations"]).numa_node_resources
    gpus = json.loads(placed["annotations"]["scheduling.koordinator.sh/device-allocated"])["gpu"]
    assert len(gpus) == 2 and {g["minor"] // 4 for g in gpus} == {numa.node} and numa.resources["cpu"] == 64
    too_big = limits_only(pod("big", {"cpu": "8", "memory": "32Gi"}))
    [refused] = run([node("small", 2, "8Gi")], [too_big])
    assert refused["node"] is None and "Insufficient cpu" in refused["reason"]
