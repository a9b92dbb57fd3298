"""NodeResourceTopology: zones and annotations from a simulated node and this host, change detection, merging with
what others wrote, the standalone state dir/HTTP object and the cluster writer against kmock, all valid against the
upstream CRD."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import kmock
import pytest
import yaml

from apis.client.kubeapi import KubeClient, KubeConfig
from apis.extension.resource_status import ANNOTATION_RESOURCE_STATUS
from koordlet.agent import Agent, api_path
from koordlet.config import Config
from koordlet.host.driver import CgroupDriver
from koordlet.host.paths import HostPaths
from koordlet.reporters import nrt
from koordlet.reporters.nrt_api import NRTApiWriter
from koordlet.states.cpuinfo import CPUBasicInfo, NumaMemory
from koordlet.states.cpupools import CPUTopology
from koordlet.states.kubeletcpu import KubeletCPUManager, cpu_manager, parse_cpu_manager_state, take_by_topology
from koordlet.states.nodecpu import node_cpu_facts

from kubedouble import emulate_put
from simhost import SimHost

CRD = "topology.node.k8s.io_noderesourcetopologies.yaml"
NRT = "topology.node.k8s.io/v1alpha1/noderesourcetopologies"
EXAMPLE_PODS = Path(__file__).resolve().parents[1] / "examples" / "pods"
GiB = 1 << 30


def four_cpus() -> CPUTopology:
    """2 NUMA nodes = 2 sockets, 2 cores each, no HT: CPUs 0-1 on node 0, 2-3 on node 1."""
    return CPUTopology.from_raw([(c, c // 2, c % 2, c // 2) for c in range(4)])


MEMORY = {0: NumaMemory(8 * GiB, 2 * (2 << 20)), 1: NumaMemory(8 * GiB)}
BASIC = CPUBasicInfo("Intel(R) Xeon(R) <Gold> & co", True, False, "fff", "GenuineIntel")


def status(**kw: Any) -> nrt.TopologyStatus:
    facts = node_cpu_facts(four_cpus(), [], kw.pop("annotations", {}), kw.pop("kubelet", None))
    return nrt.topology_status(facts, BASIC, MEMORY, kw.pop("node", None), **kw)


def test_zones_and_annotations(validate_crd: Any) -> None:
    st = status()
    assert [z["name"] for z in st.zones] == ["node-0", "node-1"]
    res = {r["name"]: r for r in st.zones[0]["resources"]}
    assert list(res) == ["cpu", "hugepages-1Gi", "hugepages-2Mi", "memory"]  # sorted by name
    assert res["cpu"] == {"name": "cpu", "capacity": "2", "allocatable": "2", "available": "2"}
    assert res["memory"]["capacity"] == "8Gi"  # hugepages not subtracted without HugePageReport
    assert res["hugepages-2Mi"]["capacity"] == "0"
    with_pages = status(hugepage_report=True)
    res = {r["name"]: r for r in with_pages.zones[0]["resources"]}
    assert (res["hugepages-2Mi"]["capacity"], res["memory"]["capacity"]) == ("4Mi", "8188Mi")
    a = st.annotations
    assert json.loads(a["node.koordinator.sh/cpu-topology"])["detail"][3] == {"id": 3, "core": 3, "socket": 1,
                                                                             "node": 1}
    assert a["node.koordinator.sh/cpu-shared-pools"] == ('[{"socket":0,"node":0,"cpuset":"0-1"},'
                                                         '{"socket":1,"node":1,"cpuset":"2-3"}]')
    assert a["node.koordinator.sh/be-cpu-shared-pools"] == a["node.koordinator.sh/cpu-shared-pools"]
    assert a["node.koordinator.sh/cpu-basic-info"] == (
        '{"cpuModel":"Intel(R) Xeon(R) \\u003cGold\\u003e \\u0026 co","hyperThreadEnabled":true,'
        '"catL3CbmMask":"fff","vendorID":"GenuineIntel"}')  # Go's field order, omitempty, HTML escaping
    assert a["kubelet.koordinator.sh/cpu-manager-policy"] == "{}"
    assert a["node.koordinator.sh/pod-cpu-allocs"] == "null"
    assert a["node.koordinator.sh/reservation"] == "{}"
    assert a["node.koordinator.sh/system-qos-resource"] == "{}"
    assert st.policy == "None" and st.labels == {}
    validate_crd(CRD, nrt.updated(nrt.new_object("n", "uid-1"), st))


def test_kubelet_static_policy_reserved_and_allocs() -> None:
    topo = four_cpus()
    kubelet = cpu_manager({"cpuManagerPolicy": "static", "kubeReserved": {"cpu": "500m"},
                           "systemReserved": {"cpu": "1"}, "topologyManagerPolicy": "single-numa-node",
                           "topologyManagerScope": "pod", "cpuManagerPolicyOptions": {"full-pcpus-only": "true"}},
                          topo)
    assert kubelet.reserved_cpus == "0-1"  # ceil(1.5) = 2 CPUs, a whole NUMA node's worth packed from CPU 0
    entries = parse_cpu_manager_state(json.dumps({"policyName": "static", "defaultCpuSet": "0-1",
                                                  "entries": {"pod-b": {"c": "3"}, "pod-a": {"c": "2", "d": "x"}}}))
    assert entries == {"pod-a": [2], "pod-b": [3]}
    facts = node_cpu_facts(topo, [], {}, kubelet, entries)
    st = nrt.topology_status(facts, BASIC, MEMORY)
    assert st.policy == "SingleNUMANodePodLevel"
    assert json.loads(st.annotations["kubelet.koordinator.sh/cpu-manager-policy"]) == {
        "policy": "static", "options": {"full-pcpus-only": "true"}, "reservedCPUs": "0-1"}
    assert json.loads(st.annotations["node.koordinator.sh/pod-cpu-allocs"]) == [
        {"uid": "pod-a", "cpuset": "2", "managedByKubelet": True},
        {"uid": "pod-b", "cpuset": "3", "managedByKubelet": True}]
    # kubelet's CPUs left both pools; its reserved CPUs stay in them (upstream's note on burstable pods)
    assert json.loads(st.annotations["node.koordinator.sh/cpu-shared-pools"]) == [{"socket": 0, "node": 0,
                                                                                   "cpuset": "0-1"}]


def test_take_by_topology_packs_cores() -> None:
    ht = CPUTopology.from_raw([(c, 0, c % 4, 0) for c in range(8)])  # 4 cores × 2 threads: core k = {k, k+4}
    assert take_by_topology(ht, 2) == [0, 4]  # kubelet's own comment: 8 CPUs with HT, 2 reserved = {0,4}
    assert take_by_topology(ht, 3) == [0, 1, 4]
    assert take_by_topology(four_cpus(), 3) == [0, 1, 2]
    assert take_by_topology(four_cpus(), 0) == []


def test_node_annotations_and_numa_reservation(validate_crd: Any) -> None:
    node = {"metadata": {"name": "n", "uid": "u", "labels": {"node.koordinator.sh/enable-numa-reservation": "true"},
                         "annotations": {
                             "node.koordinator.sh/reservation": '{"resources": {"cpu": "1"}}',
                             "node.koordinator.sh/system-qos-resource": '{"cpuset": "3", "cpusetExclusive": true}'}},
            "status": {"capacity": {"cpu": "4", "memory": "16Gi"}, "allocatable": {"cpu": "3", "memory": "15Gi"}}}
    st = status(node=node, annotations=node["metadata"]["annotations"])
    a = st.annotations
    assert json.loads(a["node.koordinator.sh/reservation"]) == {"resources": {"cpu": "1"}, "reservedCPUs": "0"}
    assert json.loads(a["node.koordinator.sh/system-qos-resource"]) == {"cpuset": "3", "cpusetExclusive": True}
    assert json.loads(a["node.koordinator.sh/cpu-shared-pools"]) == [{"socket": 0, "node": 0, "cpuset": "1"},
                                                                     {"socket": 1, "node": 1, "cpuset": "2"}]
    assert st.labels == {"node.koordinator.sh/enable-numa-reservation": "true"}
    res = {r["name"]: r for r in st.zones[1]["resources"]}
    assert (res["cpu"]["capacity"], res["cpu"]["allocatable"], res["cpu"]["available"]) == ("2", "1500m", "1500m")
    assert (res["memory"]["capacity"], res["memory"]["allocatable"]) == ("8Gi", "7680Mi")
    validate_crd(CRD, nrt.updated(nrt.new_object("n", "u"), st))


@pytest.mark.parametrize(("annotation", "reported", "reserved", "errors"), [
    ('{"resources": {"memory": "1024Mi", "cpu": "1500m"}, "applyPolicy": "Default"}',
     {"resources": {"cpu": "1500m", "memory": "1Gi"}, "reservedCPUs": "0-1", "applyPolicy": "Default"}, [0, 1], 0),
    ('{"ReservedCPUs": "3,2", "resources": {"cpu": 4}}', {"resources": {"cpu": "4"}, "reservedCPUs": "2-3"}, [2, 3], 0),
    ('{"reservedCPUs": "0,,1", "resources": {"cpu": "2"}}', {"resources": {"cpu": "2"}}, [], 0),  # list ignored
    ('{"resources": {"cpu": "1C"}}', {}, [], 1), ('{"reservedCPUs": 3}', {}, [], 1), ("[]", {}, [], 1),
])
def test_node_reservation_is_reported_normalised_and_a_malformed_one_is_an_error(
        annotation: str, reported: dict[str, Any], reserved: list[int], errors: int) -> None:
    facts = node_cpu_facts(four_cpus(), [], {"node.koordinator.sh/reservation": annotation}, node_name="n")
    assert (dict(facts.reservation), list(facts.reserved_cpus), len(facts.errors)) == (reported, reserved, errors)


def test_change_detection_is_json_semantic_and_keeps_foreign_data() -> None:
    st = status()
    obj = nrt.updated(nrt.new_object("n", None), st)
    assert nrt.changed(None, st) == "metadata changed"
    assert nrt.changed(obj, st) == ""
    # someone else's annotation, label and zone resource; our annotation re-serialised with other key order
    other = copy.deepcopy(obj)
    meta = other["metadata"]
    meta["annotations"]["team.example.com/x"] = "1"
    meta["labels"]["team.example.com/y"] = "2"
    pools = json.loads(meta["annotations"]["node.koordinator.sh/cpu-shared-pools"])
    meta["annotations"]["node.koordinator.sh/cpu-shared-pools"] = json.dumps(
        [{"cpuset": p["cpuset"], "node": p["node"], "socket": p["socket"]} for p in pools], indent=1)
    other["zones"][0]["resources"].append({"name": "example.com/fpga", "capacity": "1", "allocatable": "1",
                                           "available": "1"})
    assert nrt.changed(other, st) == ""
    # a foreign zone is kept and no reason to write (unlike upstream's TrimDifferentZone); a zone of ours for a
    # NUMA node that is gone is dropped; foreign resources and metadata kept
    other["zones"].append({"name": "socket-0", "type": "Socket"})
    assert nrt.changed(other, st) == ""
    other["zones"].append({"name": "node-7", "type": "Node"})
    assert nrt.changed(other, st) == "Zones changed, item: zones number"
    merged = nrt.updated(other, st)
    assert [z["name"] for z in merged["zones"]] == ["node-0", "node-1", "socket-0"]
    assert "example.com/fpga" in [r["name"] for r in merged["zones"][0]["resources"]]
    assert merged["metadata"]["annotations"]["team.example.com/x"] == "1"
    assert merged["metadata"]["labels"]["team.example.com/y"] == "2"
    assert nrt.changed(merged, st) == ""
    # what does trigger a write
    cpu = copy.deepcopy(obj)
    cpu["zones"][1]["resources"][0]["allocatable"] = "1"
    assert nrt.changed(cpu, st) == "Zones changed, item: resources"
    pool = copy.deepcopy(obj)
    pool["metadata"]["annotations"]["node.koordinator.sh/be-cpu-shared-pools"] = "null"
    assert nrt.changed(pool, st) == "annotations changed, key node.koordinator.sh/be-cpu-shared-pools"
    pol = copy.deepcopy(obj)
    pol["topologyPolicies"] = ["BestEffortPodLevel"]
    assert nrt.changed(pol, st) == "TopologyPolicies changed"
    label = nrt.updated(obj, status(node={"metadata": {"labels": {
        "node.koordinator.sh/enable-numa-reservation": "false"}}}))
    assert nrt.changed(label, st) == "labels changed, key node.koordinator.sh/enable-numa-reservation"


def test_numa_count_mismatch_is_an_error() -> None:
    facts = node_cpu_facts(four_cpus(), [])
    with pytest.raises(Exception, match="NUMA node number not matched"):
        nrt.topology_status(facts, BASIC, {0: NumaMemory(GiB)})


# ---- the agent: simulated node with the example pods, and this host -------------------------------------------------


def _agent(paths: HostPaths, tmp_path: Path, host_root: str) -> Agent:
    cfg = Config("node-a", paths, host_root=host_root, pods_dir=str(EXAMPLE_PODS), state_dir=str(tmp_path / "st"))
    agent = Agent(cfg)
    assert agent.sync_pods()
    return agent


@pytest.mark.parametrize("version", [1, 2])
def test_simulated_node_with_example_pods(tmp_path: Path, version: int, validate_crd: Any) -> None:
    host = SimHost(tmp_path / "host", version, CgroupDriver.SYSTEMD, numa_cpus={0: [0, 1, 4, 5], 1: [2, 3, 6, 7]},
                   threads=2).setup()
    agent = _agent(host.paths, tmp_path, str(host.root))
    st = agent.nrt_status()
    assert agent.write_nrt(st)
    assert not agent.write_nrt(agent.nrt_status())  # nothing changed: not rewritten
    path = tmp_path / "st" / "topology.node.k8s.io" / "noderesourcetopologies" / "node-a.json"
    obj = json.loads(path.read_text())
    validate_crd(CRD, obj)
    assert agent.metrics.served[api_path(nrt.API_VERSION, nrt.PLURAL, "node-a")] == obj
    assert obj["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "Koordinator"}
    assert [z["name"] for z in obj["zones"]] == ["node-0", "node-1"]
    basic = json.loads(obj["metadata"]["annotations"]["node.koordinator.sh/cpu-basic-info"])
    assert basic == {"cpuModel": "unknown", "hyperThreadEnabled": True}
    rule = agent.state.cpuset_rule()
    assert rule is not None and [p.cpuset for p in rule.share_pools] == ["0-1,4-5", "2-3,6-7"]


def test_this_host(tmp_path: Path, validate_crd: Any) -> None:
    agent = _agent(HostPaths.under("/").with_overrides(var_lib_kubelet=str(tmp_path / "kubelet") + "/"), tmp_path,
                   "/")
    st = agent.nrt_status()
    obj = nrt.updated(nrt.new_object("node-a", None), st)
    validate_crd(CRD, obj)
    topo = json.loads(obj["metadata"]["annotations"]["node.koordinator.sh/cpu-topology"])["detail"]
    assert [c["id"] for c in topo] == agent.state.node_info().cpu_topology.ids() and topo
    assert sum(int(next(r for r in z["resources"] if r["name"] == "cpu")["capacity"]) for z in obj["zones"]) \
        == len(topo)


def test_pods_cpusets_leave_the_pools(tmp_path: Path) -> None:
    host = SimHost(tmp_path / "host", 1, CgroupDriver.CGROUPFS).setup()  # CPUs 0-1 node 0, 2-3 node 1
    pods_dir = tmp_path / "pods"
    pods_dir.mkdir()
    for f in EXAMPLE_PODS.iterdir():
        pod = yaml.safe_load(f.read_text())
        meta = pod["metadata"]
        if meta["name"] == "web-0":  # the LS pod, as if koord-scheduler had bound it to CPU 2 (an LSE pod)
            meta["labels"]["koordinator.sh/qosClass"] = "LSE"
            meta.setdefault("annotations", {})[ANNOTATION_RESOURCE_STATUS] = '{"cpuset": "2"}'
        (pods_dir / f.name).write_text(yaml.safe_dump(pod))
    cfg = Config("node-a", host.paths, host_root=str(host.root), pods_dir=str(pods_dir), state_dir=str(tmp_path))
    agent = Agent(cfg)
    assert agent.sync_pods()
    a = agent.nrt_status().annotations
    assert json.loads(a["node.koordinator.sh/cpu-shared-pools"])[1]["cpuset"] == "3"
    assert json.loads(a["node.koordinator.sh/be-cpu-shared-pools"])[1]["cpuset"] == "3"


# ---- cluster mode -------------------------------------------------------------------------------------------------


@pytest.fixture
def km(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    kmock.resources[NRT] = {}
    emulate_put(kmock, NRT)
    return kmock


def _writer(km: kmock.KubernetesEmulator) -> NRTApiWriter:
    return NRTApiWriter(KubeClient(KubeConfig(server=str(km.url))), "node-1", sleep=lambda s: None)


async def test_cluster_creates_then_stays_quiet_then_updates(km: kmock.KubernetesEmulator, validate_crd: Any) -> None:
    w = _writer(km)
    st = status()
    assert await asyncio.to_thread(w.report, st, "uid-1")
    [created] = km["post"]
    validate_crd(CRD, created.data)
    assert created.data["metadata"]["ownerReferences"][0] == {
        "apiVersion": "v1", "kind": "Node", "name": "node-1", "uid": "uid-1", "controller": True,
        "blockOwnerDeletion": True}
    assert await asyncio.to_thread(w.report, st, "uid-1")
    assert len(km["put"]) == 0 and w.writes == 1
    stored = km.objects[NRT, None, "node-1"]
    stored.patch({"metadata": {"annotations": {"team.example.com/x": "1"}, "resourceVersion": "3"}})
    assert await asyncio.to_thread(w.report, st, "uid-1")  # a foreign annotation is no reason to write
    assert len(km["put"]) == 0
    busier = status(kubelet=KubeletCPUManager("none", known=True))
    assert await asyncio.to_thread(w.report, busier, "uid-1")
    [put] = km["put"]
    validate_crd(CRD, put.data)
    assert put.data["metadata"]["annotations"]["team.example.com/x"] == "1"
    assert put.data["metadata"]["annotations"]["kubelet.koordinator.sh/cpu-manager-policy"] == '{"policy":"none"}'
    assert put.data["metadata"]["resourceVersion"] == "3"
    assert w.last_reason == "annotations changed, key kubelet.koordinator.sh/cpu-manager-policy"


async def test_cluster_server_errors_return_false(km: kmock.KubernetesEmulator) -> None:
    km["get", kmock.resource(NRT)] << 500 << {"kind": "Status", "code": 500, "message": "etcd down"}
    w = _writer(km)
    assert not await asyncio.to_thread(w.report, status(), None)
    assert "etcd down" in w.last_error
