"""The release texts' pod, Device, PodGroup and ClusterNetworkTopology snippets (copies in tests/scheduler/seeds,
verbatim where they are well-formed YAML) with the outcome the text describes. The KubeSchedulerConfiguration
snippets are in test_sched_config.py; vendor devices (Ascend, Cambricon, HAMi) in the device tests."""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.cli import main, profile, simulate
from scheduler.cluster import build_cluster
from scheduler.config import load_config
from scheduler.config.profile import parse_config
from scheduler.config.repair import load_text
from scheduler.framework import Scheduler
from scheduler.gang.topology import build_tree

from chartconfig import chart_config, in_chart

SEEDS = Path(__file__).parent / "seeds"
ALLOCATED = "scheduling.koordinator.sh/device-allocated"
GANG_ID = "internal.scheduling.koordinator.sh/bind-gang-group-id"
# Coscheduling at preBind (as v1.8's chart and shipped config enable it; v1.7's do not): the bind-gang annotations
# name each placed member's GangGroup
PREBIND = chart_config(enable={"preBind": ["Coscheduling"]})
SPINE, BLOCK = "network.topology.nvidia.com/spine", "network.topology.nvidia.com/block"


def docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((SEEDS / name).read_text()) if d]


def node(name: str, cpu: int = 8, labels: dict[str, str] | None = None, extra: dict[str, str] | None = None
         ) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}},
            "status": {"allocatable": {"cpu": str(cpu), "memory": "32Gi", "pods": "110", **(extra or {})}}}


def pod(name: str, cpu: str, *, group: str | None = None, node_name: str | None = None,
        priority_class: str | None = None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default", "labels": {}}
    if group:
        meta["labels"]["pod-group.scheduling.sigs.k8s.io"] = group
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi",
                                                                                    **(extra or {})}}}]}
    if node_name:
        spec["nodeName"] = node_name
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
            "status": {"phase": "Running" if node_name else "Pending"}}


def test_v17_node_labels_and_cluster_network_topology(validate_crd: Callable[[str, dict[str, Any]], None]) -> None:
    node0, cnt = docs("v17-topology.yaml")
    validate_crd("scheduling.koordinator.sh_clusternetworktopologies.yaml", cnt)
    cluster = build_cluster([node0, cnt])
    tree = build_tree(cnt, {n: i.labels for n, i in cluster.nodes.items()})
    assert tree.layers == ["SpineLayer", "BlockLayer", "NodeTopologyLayer"]
    assert [repr(d) for d in tree.leaves["node-0"].chain[:-1]] == ["NodeTopologyLayer/node-0", "BlockLayer/b1",
                                                                   "SpineLayer/s1"]


def test_v17_podgroup_topology_spec_gathers_in_one_block(caplog: pytest.LogCaptureFixture,
                                                         validate_crd: Callable[[str, dict[str, Any]], None]) -> None:
    """`{"topologyLayers": ["BlockLayer"], "topologyPolicy": "BestEffort"}` is not upstream's format: logged, read as
    PreferGather on every layer — the 8 members still land in one block, as the notes say."""
    (pg,) = docs("v17-podgroup-topology.yaml")
    validate_crd("scheduling.sigs.k8s.io_podgroups.yaml", pg)
    _, cnt = docs("v17-topology.yaml")
    nodes = [node(f"n{i:02d}", labels={SPINE: "s1", BLOCK: "b-small" if i < 6 else "b-big"}) for i in range(6 + 8)]
    cluster = build_cluster([cnt, pg, *nodes])
    members = [pod(f"w{i}", "8", group="training-job") for i in range(8)]
    with caplog.at_level(logging.WARNING):
        result = simulate(cluster, members)
    assert {p["node"] for p in result["placements"]} == {f"n{i:02d}" for i in range(6, 14)}
    assert any("topologyLayers, topologyPolicy not upstream fields" in r.getMessage() for r in caplog.records)


def test_v17_job_level_preemption(validate_crd: Callable[[str, dict[str, Any]], None]) -> None:
    """The high-priority gang (minMember 2: hp-worker-1 as written and a second worker like it) preempts the
    low-priority pods on several nodes so that all members fit, and nominates its members."""
    high, low, pg, worker = docs("v17-job-preemption.yaml")
    validate_crd("scheduling.sigs.k8s.io_podgroups.yaml", pg)
    second = copy.deepcopy(worker)
    second["metadata"]["name"] = "hp-worker-2"
    victims = [pod(f"low-{i}", "2", node_name=f"node-{i}", priority_class="low-priority") for i in range(2)]
    cluster = build_cluster([high, low, pg, node("node-0", 4), node("node-1", 4), *victims])
    result = simulate(cluster, [worker, second])
    assert len(result["preemptions"]) == 1
    entry = result["preemptions"][0]
    assert sorted(entry["victims"]) == ["default/low-0", "default/low-1"]
    assert sorted(entry["nominatedNodes"].values()) == ["node-0", "node-1"]


def test_v17_device_h20(validate_crd: Callable[[str, dict[str, Any]], None]) -> None:
    """The notes' Device lacks topology.socketID, which the CRD requires (an API server refuses it as written);
    koord-sched reads it as it is (the agent always reports socketID)."""
    import jsonschema

    (device,) = docs("v17-device-h20.yaml")
    with pytest.raises(jsonschema.ValidationError, match="'socketID' is a required property"):
        validate_crd("scheduling.koordinator.sh_devices.yaml", device)
    fixed = copy.deepcopy(device)
    fixed["spec"]["devices"][0]["topology"]["socketID"] = 0
    validate_crd("scheduling.koordinator.sh_devices.yaml", fixed)
    gpu = {"nvidia.com/gpu": "1", "koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory-ratio": "100",
           "koordinator.sh/gpu-memory": "97871Mi"}
    cluster = build_cluster([node("worker01", 32, extra=gpu), device])
    placed = Scheduler(cluster, profile(None)).schedule(pod("infer", "1", extra={"nvidia.com/gpu": "1"}))
    assert placed.node == "worker01"
    alloc = json.loads(placed.annotations[ALLOCATED])
    assert alloc["gpu"][0]["minor"] == 0
    assert alloc["gpu"][0]["resources"]["koordinator.sh/gpu-memory"] in ("97871Mi", str(97871 * 2**20))


def test_v17_ganggroup_of_two_podgroups(validate_crd: Callable[[str, dict[str, Any]], None]) -> None:
    """gang-example1 (minMember 1) and gang-example2 (minMember 2) form one GangGroup: all or nothing across both."""
    pgs = docs("v17-ganggroup.yaml")
    for pg in pgs:
        validate_crd("scheduling.sigs.k8s.io_podgroups.yaml", pg)
    cluster = build_cluster([*pgs, node("n1", 8), node("n2", 8)])
    short = simulate(cluster, [pod("a1", "1", group="gang-example1"), pod("b1", "1", group="gang-example2")])
    assert all(p["node"] is None for p in short["placements"])
    assert "gang-example2" in short["placements"][0]["reason"]
    cluster = build_cluster([*pgs, node("n1", 8), node("n2", 8)])
    whole = simulate(cluster, [pod("a1", "1", group="gang-example1"), pod("b1", "1", group="gang-example2"),
                               pod("b2", "1", group="gang-example2")], parse_config(PREBIND))
    assert all(p["node"] for p in whole["placements"])
    assert {p["annotations"][GANG_ID] for p in whole["placements"]} == {
        "default/gang-example1,default/gang-example2"}
    # upstream's PreBind writes the deprecated pair beside the internal one, with the same values
    for p in whole["placements"]:
        assert p["annotations"]["scheduling.koordinator.sh/bind-gang-group-id"] == p["annotations"][GANG_ID]
        assert p["annotations"]["scheduling.koordinator.sh/bind-gang-member-count"] == p["annotations"][
            "internal.scheduling.koordinator.sh/bind-gang-member-count"] == "3"


def test_network_topology_manual_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The manual's 12 nodes, its config (indentation lost, as printed; its pluginConfig in the chart's
    configuration, which enables Coscheduling) and Example 1: the 4-pod PreferGather job lands on spine-1
    (node-5 … node-8)."""
    from test_topology import cnt, nodes, podgroup, whole_node_pod

    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump_all([cnt(), *nodes()]))
    pg = podgroup("topology-demo-job", 4, [{"layer": "BlockLayer", "strategy": "PreferGather"},
                                           {"layer": "SpineLayer", "strategy": "PreferGather"}])
    members = [whole_node_pod(f"training-pod-{i}", group="topology-demo-job", index=i) for i in range(4)]
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all([pg, *members]))
    manual = load_text((SEEDS / "nt-manual-config.yaml").read_text(), "nt-manual-config.yaml")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(in_chart(manual)))
    assert main(["simulate", "--cluster", str(tmp_path / "cluster.yaml"), "--pods", str(tmp_path / "pods.yaml"),
                 "--config", str(tmp_path / "config.yaml"), "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [p["node"] for p in out["placements"]] == ["node-5", "node-6", "node-7", "node-8"]
    # the same with awareNetworkTopology: false: no FindOneNode plan (coscheduling.go FindOneNodePlugin), so upstream's
    # second member finds no planned node and the job is refused (network_topology_workflow.go PreFilter)
    off = tmp_path / "off.yaml"
    off.write_text(yaml.safe_dump(chart_config(plugin_config=[{"name": "Coscheduling", "args": {
        "awareNetworkTopology": False}}])))
    cluster = build_cluster([cnt(), *nodes()])
    cluster.podgroups["default/topology-demo-job"] = pg
    result = simulate(cluster, copy.deepcopy(members), load_config(str(off)))
    assert [(p["node"], p["reason"]) for p in result["placements"]] == [(None, "no planned pods")] * 4


def gpu_topology_device(name: str) -> dict[str, Any]:
    """8 GPUs: NUMA 0 holds 0-3, NUMA 1 holds 4-7; each PCIe switch two GPUs."""
    return {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Device", "metadata": {"name": name},
            "spec": {"devices": [{"type": "gpu", "id": f"GPU-{m}", "minor": m, "health": True,
                                  "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "48Gi",
                                                "koordinator.sh/gpu-memory-ratio": "100"},
                                  "topology": {"socketID": 0, "nodeID": m // 4, "pcieID": f"pci{m // 2}",
                                               "busID": f"0000:{m:02x}:00.0"}} for m in range(8)]}}


@pytest.mark.parametrize(("scope", "count", "same"), [("PCIe", 2, lambda m: m // 2), ("NUMANode", 4, lambda m: m // 4)])
def test_v16_gpu_topology_scopes(scope: str, count: int, same: Callable[[int], int]) -> None:
    """v1.6 "Allocating GPUs within the same PCIe / NUMA Node" (`device-allocate-hint` requiredTopologyScope), the
    snippets' pods re-indented; one GPU of each PCIe / NUMA pair is taken so the scope has to be chosen."""
    gpu = {"koordinator.sh/gpu": "800", "koordinator.sh/gpu-core": "800", "koordinator.sh/gpu-memory-ratio": "800"}
    busy = pod("busy", "1", node_name="n1", extra={"koordinator.sh/gpu": "100"})
    busy["metadata"]["annotations"] = {ALLOCATED: json.dumps({"gpu": [{"minor": 0, "resources": {
        "koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory-ratio": "100",
        "koordinator.sh/gpu-memory": "48Gi"}}]})}
    cluster = build_cluster([node("n1", 64, extra=gpu), gpu_topology_device("n1"), busy])
    p = pod("topo", "1", extra={"koordinator.sh/gpu": str(100 * count)})
    p["metadata"]["annotations"] = {"scheduling.koordinator.sh/device-allocate-hint": json.dumps(
        {"gpu": {"requiredTopologyScope": scope}})}
    placed = Scheduler(cluster, profile(None)).schedule(p)
    assert placed.node == "n1", placed.reason
    minors = [a["minor"] for a in json.loads(placed.annotations[ALLOCATED])["gpu"]]
    assert len(minors) == count and len({same(m) for m in minors}) == 1 and 0 not in minors


GPU8 = {"koordinator.sh/gpu": "800", "koordinator.sh/gpu-core": "800", "koordinator.sh/gpu-memory-ratio": "800"}


def test_v16_limits_only_gpu_pods_get_their_gpus() -> None:
    """v1.6's PCIe and NUMANode pods write limits only: requests default from them as the API server does, so
    the GPUs are allocated within the scope; the gpu-partition-spec pod's annotation, as printed (a comment and a
    trailing comma), is not JSON: refused naming the annotation, as upstream's unmarshal fails."""
    pcie, numa, partition = docs("v16-gpu-limits-only.yaml")
    for p, count, same in ((pcie, 2, 2), (numa, 4, 4)):
        cluster = build_cluster([node("n1", 64, extra=GPU8), gpu_topology_device("n1")])
        (placed,) = simulate(cluster, [p])["placements"]
        assert placed["node"] == "n1", placed
        minors = [a["minor"] for a in json.loads(placed["annotations"][ALLOCATED])["gpu"]]
        assert len(minors) == count and len({m // same for m in minors}) == 1
    cluster = build_cluster([node("n1", 64, extra=GPU8), gpu_topology_device("n1")])
    (refused,) = simulate(cluster, [partition])["placements"]
    assert refused["node"] is None and "scheduling.koordinator.sh/gpu-partition-spec" in refused["reason"]


def test_limits_only_pod_too_big_for_the_node_is_refused() -> None:
    big = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "big", "namespace": "default"},
           "spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": 8, "memory": "32Gi"}}}]}}
    (placed,) = simulate(build_cluster([node("small", 2)]), [big])["placements"]
    assert placed["node"] is None and "Insufficient cpu" in placed["reason"]


def run_simulate(tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
                 cluster: list[dict[str, Any]], pods: Path) -> tuple[int, dict[str, Any] | None, list[str]]:
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump_all(cluster))
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(PREBIND))
    with caplog.at_level(logging.WARNING):
        rc = main(["simulate", "--config", str(tmp_path / "config.yaml"), "--cluster", str(tmp_path / "cluster.yaml"),
                   "--pods", str(pods), "-o", "json"])
    out = capsys.readouterr().out
    return rc, (json.loads(out) if rc == 0 else None), [r.getMessage() for r in caplog.records]


def test_snippets_whose_indentation_was_lost_end_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            caplog: pytest.LogCaptureFixture) -> None:
    """v1.6's PCIe pod as printed (one-space indentation) is not YAML: exit 2 with one line; a document that reads
    as a plain string or a flat map is refused naming the document or the field, never a traceback."""
    rc, _, lines = run_simulate(tmp_path, capsys, caplog, [node("n1")], SEEDS / "v16-pcie-as-printed.yaml")
    assert rc == 2 and len(lines) == 1 and "v16-pcie-as-printed.yaml" in lines[0]
    caplog.clear()
    (tmp_path / "str.yaml").write_text("apiVersion v1 kind Pod\n")
    rc, _, lines = run_simulate(tmp_path, capsys, caplog, [node("n1")], tmp_path / "str.yaml")
    assert rc == 2 and lines == [f"simulate: reading the objects: {tmp_path / 'str.yaml'}: document 1 is not an "
                                 "object (it reads as a str)"]
    (tmp_path / "flat.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata:\nname: x\nlabels:\n  a: b\n")
    rc, out, _ = run_simulate(tmp_path, capsys, caplog, [node("n1")], tmp_path / "flat.yaml")
    assert rc == 0 and out is not None
    assert [(p["node"], p["reason"]) for p in out["placements"]] == [(None, "invalid Pod: metadata is not an object")]


def test_v07_gang_groups_as_a_yaml_list_is_refused_naming_the_field(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    """v0.7 writes `gang.scheduling.koordinator.sh/groups: [...]`, a YAML list, where an annotation is a string (an
    API server refuses it): the PodGroup is left out with one line naming it and the field. Written as upstream's
    parser reads it (a JSON array in a string), the two PodGroups are one GangGroup."""
    (written,) = docs("v07-gang-groups.yaml")
    assert isinstance(written["metadata"]["annotations"]["gang.scheduling.koordinator.sh/groups"], list)
    pg = copy.deepcopy(written)
    pg["apiVersion"], pg["spec"] = "scheduling.sigs.k8s.io/v1alpha1", {"minMember": 1}
    members = [pod("a1", "1", group="podGroupA")]
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all(members))
    rc, out, lines = run_simulate(tmp_path, capsys, caplog, [node("n1"), pg], tmp_path / "pods.yaml")
    assert rc == 0 and out is not None
    assert any("PodGroup default/podGroupA" in line and
               "metadata.annotations['gang.scheduling.koordinator.sh/groups'] is a list, not a string" in line
               for line in lines), lines
    assert out["placements"][0]["node"] is None  # its PodGroup was refused: no gang to join
    # the same list as a JSON string, naming this PodGroup and a second one (same namespace, to be placeable)
    pg["metadata"]["annotations"]["gang.scheduling.koordinator.sh/groups"] = json.dumps(
        ["default/podGroupA", "default/podGroupB"])
    pg_b = copy.deepcopy(pg)
    pg_b["metadata"]["name"] = "podGroupB"
    members.append(pod("b1", "1", group="podGroupB"))
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all(members))
    caplog.clear()
    rc, out, lines = run_simulate(tmp_path, capsys, caplog, [node("n1"), pg, pg_b], tmp_path / "pods.yaml")
    assert rc == 0 and out is not None and all(p["node"] == "n1" for p in out["placements"])
    assert {p["annotations"][GANG_ID] for p in out["placements"]} == {"default/podGroupA,default/podGroupB"}


@pytest.mark.parametrize(("where", "value", "kind"), [
    ("annotations", {"scheduling.koordinator.sh/device-allocate-hint": {"gpu": {}}}, "map"),
    ("annotations", {"gang.scheduling.koordinator.sh/min-available": 5}, "number"),
    ("labels", {"pod-group.scheduling.sigs.k8s.io": ["g"]}, "list")])
def test_a_pod_whose_annotation_or_label_is_not_a_string_is_refused(where: str, value: dict[str, Any],
                                                                     kind: str) -> None:
    p = pod("p", "1")
    p["metadata"][where] = value
    (placed,) = simulate(build_cluster([node("n1")]), [p])["placements"]
    (name,) = value
    assert placed["node"] is None
    assert placed["reason"] == f"invalid Pod: metadata.{where}[{name!r}] is a {kind}, not a string"


def test_null_annotations_are_an_empty_map() -> None:
    p = pod("p", "1")
    p["metadata"]["annotations"] = None
    (placed,) = simulate(build_cluster([node("n1")]), [p])["placements"]
    assert placed["node"] == "n1"
