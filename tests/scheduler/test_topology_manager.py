"""`--enable-network-topology-manager` as upstream's koord-scheduler reads it: off by default in `run`; off, or on
without ClusterNetworkTopology `default`, a gang carrying a network-topology-spec is refused with "no cluster network
topology" (coscheduling/core/core.go BeforePreFilter); on with the object, it is planned within its layer. A gang
without a spec is unaffected either way. `simulate` keeps the manager on unless told otherwise."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import kmock
import pytest
import yaml
from test_topology import BLOCK, cnt, nodes, podgroup, whole_node_pod

from scheduler.cli import main, simulate
from scheduler.cluster import build_cluster
from scheduler.config import load_config

from chartconfig import chart_config
from kubedouble import emulate_binding

CHART_V17 = str(Path(__file__).parent / "seeds" / "chart" / "koord-scheduler-config-v1.7.0.yaml")
NAME = "koord-scheduler"  # the chart profile's schedulerName
PODGROUPS = "scheduling.sigs.k8s.io/v1alpha1/podgroups"
CNTS = "scheduling.koordinator.sh/v1alpha1/clusternetworktopologies"
REFUSED = "no cluster network topology"
TOPO = ("topo-0", "topo-1")  # gang "topo": MustGather at BlockLayer
PLAIN = ("plain-0", "plain-1")  # gang "plain": no network-topology-spec


def workload() -> list[dict[str, Any]]:
    topo = podgroup("topo", 2, [{"layer": "BlockLayer", "strategy": "MustGather"}])
    plain = podgroup("plain", 2, [])
    del plain["metadata"]["annotations"]
    pods = [whole_node_pod(n, group="topo", index=i) for i, n in enumerate(TOPO)]
    pods += [whole_node_pod(n, group="plain") for n in PLAIN]
    for p in pods:
        p["spec"]["schedulerName"] = NAME
    return [topo, plain, *pods]


def block_of(node: str) -> str:
    return next(n["metadata"]["labels"][BLOCK] for n in nodes() if n["metadata"]["name"] == node)


@pytest.fixture
def km(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    for res in ("v1/nodes", "v1/pods", PODGROUPS, CNTS):
        kmock.resources[res] = {}
    for n in nodes():
        n = copy.deepcopy(n)
        n.pop("kind")
        kmock.objects["v1/nodes", None, n["metadata"]["name"]] = n
    for obj in workload():
        obj = copy.deepcopy(obj)
        kind = obj.pop("kind")
        meta = obj["metadata"]
        meta["uid"] = f"uid-{meta['name']}"
        kmock.objects[PODGROUPS if kind == "PodGroup" else "v1/pods", meta["namespace"], meta["name"]] = obj
    emulate_binding(kmock)

    def status(request: kmock.Request) -> Any:  # strategic merge of conditions is not emulated: accept and echo
        return kmock.objects["v1/pods", request.namespace, str(request.name)].raw

    kmock["patch", kmock.resource("v1/pods"), kmock.subresource("status")] << status
    return kmock


async def run_once(km: kmock.KubernetesEmulator, tmp_path: Path, flag: list[str],
                   capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, str], dict[str, str]]:
    """`koord-sched run --once` with the v1.7 chart's ConfigMap: (rc, pod → bound node, pod → printed refusal)."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "k",
        "clusters": [{"name": "k", "cluster": {"server": str(km.url).rstrip("/")}}],
        "contexts": [{"name": "k", "context": {"cluster": "k", "user": "u"}}], "users": [{"name": "u", "user": {}}]}))
    rc = await asyncio.to_thread(main, ["run", "--port=0", f"--config={CHART_V17}", *flag, "--leader-elect=false",
                                        "--kubeconfig", str(kubeconfig), "--once"])
    bound = {r.url.path.split("/")[-2]: json.loads(r.body)["target"]["name"] for r in km
             if r.method.value == "POST" and r.url.path.endswith("/binding")}
    refused = {}
    for line in capsys.readouterr().out.splitlines():
        pod, _, rest = line.partition(" -> (unschedulable) ")
        if rest:
            refused[pod.strip().split("/")[-1]] = rest
    return rc, bound, refused


@pytest.mark.parametrize(("flag", "with_cnt"), [([], True), (["--enable-network-topology-manager=false"], True),
                                                (["--enable-network-topology-manager=true"], False)])
async def test_run_refuses_a_topology_gang_without_the_manager_or_the_object(
        flag: list[str], with_cnt: bool, km: kmock.KubernetesEmulator, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    if with_cnt:
        km.objects[CNTS, None, "default"] = {k: v for k, v in cnt().items() if k != "kind"}
    rc, bound, refused = await run_once(km, tmp_path, flag, capsys)
    assert rc == 0  # an unschedulable pod is no failure of `--once` (bind failures are)
    assert sorted(bound) == sorted(PLAIN)  # the gang without a spec is placed either way
    assert {p: refused.get(p) for p in TOPO} == dict.fromkeys(TOPO, REFUSED)
    # without the manager nothing writes the ClusterNetworkTopology's status
    assert not any(r.method.value in ("PUT", "PATCH") and "clusternetworktopologies" in r.url.path for r in km)


async def test_run_with_the_manager_and_the_object_places_the_gang_within_its_block(
        km: kmock.KubernetesEmulator, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    km.objects[CNTS, None, "default"] = {k: v for k, v in cnt().items() if k != "kind"}
    # node-0..2 (block-0) are taken but one: MustGather BlockLayer needs a block with two free nodes
    for i, holder in enumerate(("busy-0", "busy-1")):
        km.objects["v1/pods", "default", holder] = {**whole_node_pod(holder, node=f"node-{i}"),
                                                     "metadata": {"name": holder, "namespace": "default",
                                                                  "uid": f"uid-{holder}"}}
    rc, bound, refused = await run_once(km, tmp_path, ["--enable-network-topology-manager=true"], capsys)
    assert rc == 0 and not refused
    assert sorted(bound) == sorted([*TOPO, *PLAIN])
    assert block_of(bound["topo-0"]) == block_of(bound["topo-1"])
    assert bound["topo-0"] != bound["topo-1"] and "node-2" not in (bound["topo-0"], bound["topo-1"])


@pytest.mark.parametrize(("flag", "placed"), [([], True), (["--enable-network-topology-manager=false"], False)])
def test_simulate_keeps_the_manager_on_unless_told(flag: list[str], placed: bool, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump_all([cnt(), *nodes()]))
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all(workload()))
    assert main(["simulate", "--cluster", str(tmp_path / "cluster.yaml"), "--pods", str(tmp_path / "pods.yaml"),
                 "--config", CHART_V17, *flag, "-o", "json"]) == 0
    out = {p["pod"].split("/")[-1]: p for p in json.loads(capsys.readouterr().out)["placements"]}
    assert all(out[p]["node"] for p in PLAIN)
    if placed:
        assert block_of(out["topo-0"]["node"]) == block_of(out["topo-1"]["node"])
    else:
        assert [(out[p]["node"], out[p]["reason"]) for p in TOPO] == [(None, REFUSED)] * 2


def test_without_aware_network_topology_only_a_lone_pending_member_goes_on(tmp_path: Path) -> None:
    """Upstream offers FindOneNode only with awareNetworkTopology: without it the second member finds no plan."""
    config = tmp_path / "config.yaml"
    off = {"name": "Coscheduling", "args": {"awareNetworkTopology": False}}
    config.write_text(yaml.safe_dump(chart_config(pluginConfig=[off])))
    gather = [{"layer": "BlockLayer", "strategy": "MustGather"}]
    pods = [whole_node_pod("solo-0", group="solo"), *(whole_node_pod(n, group="topo") for n in TOPO)]
    cluster = build_cluster([cnt(), *nodes(), podgroup("solo", 1, gather), podgroup("topo", 2, gather)])
    out = {p["pod"].split("/")[-1]: p for p in simulate(cluster, pods, load_config(str(config)))["placements"]}
    assert out["solo-0"]["node"] is not None
    assert [(out[p]["node"], out[p]["reason"]) for p in TOPO] == [(None, "no planned pods")] * 2
