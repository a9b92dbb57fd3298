"""Containers read every 10 s, pods every tick; CPU burst's containers every tick (docs/decisions.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from koordlet.agent import Agent
from koordlet.collectors.cgroups import CONTAINER_INTERVAL_SECONDS
from koordlet.config import Config
from koordlet.host.driver import CgroupDriver, K8sQoS
from koordlet.metriccache import MetricCache

from simhost import SimCgroup, SimHost, make_pod

SEC = 1_000_000_000
T0 = 1_800_000_000.0
UIDS = [f"aaaaaaaa-0000-4000-8000-{i:012d}" for i in range(4)]


def _node(tmp_path: Path, pods: list[dict[str, Any]], **kw: Any) -> tuple[SimHost, Agent, dict[str, str]]:
    host = SimHost(tmp_path / "h", 1, CgroupDriver.CGROUPFS).setup()
    pods_dir = tmp_path / "pods"
    pods_dir.mkdir()
    dirs: dict[str, str] = {}  # pod uid / container id → cgroup dir
    for pod in pods:
        uid = pod["metadata"]["uid"]
        dirs[uid] = host.pod_dir(K8sQoS.BURSTABLE, uid)
        for cs in pod["status"]["containerStatuses"]:
            dirs[cs["containerID"]] = host.container_dir(dirs[uid], cs["containerID"])
        (pods_dir / f"{pod['metadata']['name']}.yaml").write_text(yaml.safe_dump(pod))
    agent = Agent(Config(node_name="n1", paths=host.paths, pods_dir=str(pods_dir), state_dir=str(tmp_path / "s"),
                         **kw))
    assert agent.sync_pods()
    return host, agent, dirs


def _tick(host: SimHost, agent: Agent, dirs: dict[str, str], tick: int) -> None:
    """Every cgroup burns 0.5 core and holds (tick + 1) MiB."""
    for rel in dirs.values():
        host.write_cgroup(rel, SimCgroup(cpu_ns=tick * SEC // 2, anon=(tick + 1) << 20, nr_periods=10 * tick,
                                         nr_throttled=tick))
    agent.collect(now=T0 + tick, mono_ns=tick * SEC)


def _samples(agent: Agent, kind: str, **labels: str) -> list[float]:
    ts, _ = agent.cache.window(MetricCache.key(kind, **labels), 0, 2**62)
    return list(ts)


def test_containers_are_read_every_ten_ticks_and_keep_their_figures_in_between(tmp_path: Path) -> None:
    pods = [make_pod(f"p{i}", uid, containers=5) for i, uid in enumerate(UIDS)]
    host, agent, dirs = _node(tmp_path, pods)
    stride = agent.advisor.cgroups.container_stride
    assert stride == round(CONTAINER_INTERVAL_SECONDS) == 10  # collect-res-used-interval 1 s
    containers = [cs["containerID"] for p in pods for cs in p["status"]["containerStatuses"]]
    reads: list[int] = []
    for tick in range(1, 3 * stride + 1):
        before = agent.health.cgroup_reads
        _tick(host, agent, dirs, tick)
        reads.append(agent.health.cgroup_reads - before)
    # each tick: the 4 pods, and 20 containers spread over the 10 ticks (2 a tick), not 24 cgroups
    assert reads == [len(UIDS) + len(containers) // stride] * (3 * stride)
    for uid in UIDS:  # a pod: a sample each tick
        assert len(_samples(agent, "pod_memory_usage", pod_uid=uid)) == 3 * stride
    for cid in containers:  # a container: a sample each time it is read, none carried into the cache
        assert len(_samples(agent, "container_memory_usage", container_id=cid)) == 3
        assert len(_samples(agent, "container_cpu_usage", container_id=cid)) == 2  # a rate from the second read
    usage = agent.advisor.latest.usage
    # the exporter's view: every container has figures at every tick once read; the rate spans its 10 s
    assert all(usage[("container", cid)].cpu_cores == pytest.approx(0.5) for cid in containers)
    assert all(usage[("container", cid)].throttled_ratio == pytest.approx(0.1) for cid in containers)
    last_mib = {usage[("container", cid)].memory >> 20 for cid in containers}
    assert last_mib == set(range(3 * stride - stride + 2, 3 * stride + 2))  # read at one of the last 10 ticks
    assert all(usage[("pod", uid)].memory >> 20 == 3 * stride + 1 for uid in UIDS)  # pods: this tick's


def test_a_container_that_goes_away_loses_its_figures_when_next_due(tmp_path: Path) -> None:
    pods = [make_pod("p0", UIDS[0], containers=1)]
    host, agent, dirs = _node(tmp_path, pods)
    cid = pods[0]["status"]["containerStatuses"][0]["containerID"]
    for tick in range(1, 11):
        _tick(host, agent, dirs, tick)
    assert ("container", cid) in agent.advisor.latest.usage
    host.remove_cgroup(dirs.pop(cid))
    for tick in range(11, 21):
        _tick(host, agent, dirs, tick)
    assert ("container", cid) not in agent.advisor.latest.usage
    assert ("pod", UIDS[0]) in agent.advisor.latest.usage


def test_cpu_burst_containers_are_read_every_tick(tmp_path: Path) -> None:
    limited = make_pod("burst", UIDS[0], containers=2)
    for c in limited["spec"]["containers"]:
        c["resources"] = {"limits": {"cpu": "1"}, "requests": {"cpu": "1"}}
    other = make_pod("plain", UIDS[1], containers=2)
    host, agent, dirs = _node(tmp_path, [limited, other])
    agent.set_nodeslo({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "metadata": {"name": "n1"},
                       "spec": {"cpuBurstStrategy": {"policy": "cfsQuotaBurstOnly"}}})
    for tick in range(1, 11):
        _tick(host, agent, dirs, tick)
    for cs in limited["status"]["containerStatuses"]:  # the cfs-quota burst reads their throttling each pass
        assert len(_samples(agent, "container_memory_usage", container_id=cs["containerID"])) == 10
        assert len(_samples(agent, "container_cpu_throttled", container_id=cs["containerID"])) == 9
    for cs in other["status"]["containerStatuses"]:  # a pod without CPU limits: no burst, every 10 s
        assert len(_samples(agent, "container_memory_usage", container_id=cs["containerID"])) == 1


@pytest.mark.parametrize(("interval", "stride"), [(1.0, 10), (0.5, 20), (2.0, 5), (30.0, 1), (1e-9, 60)])
def test_the_stride_follows_the_collection_interval(tmp_path: Path, interval: float, stride: int) -> None:
    """Containers every 10 s whatever the tick; a tick longer than that reads them every tick; a tiny one is capped
    (the read plan holds a row list per tick of the stride)."""
    _, agent, _ = _node(tmp_path, [], collect_res_used_interval=interval)
    assert agent.advisor.cgroups.container_stride == stride


def test_a_container_id_listed_twice_is_read_and_kept_without_error(tmp_path: Path) -> None:
    """Two pods whose status names the same container (a malformed or racing pod list): a row per listing, the
    mapping answers with the last, and re-planning after a pod change keeps every row's figures."""
    first, second = make_pod("p0", UIDS[0], containers=1), make_pod("p1", UIDS[1], containers=1)
    second["status"]["containerStatuses"] = first["status"]["containerStatuses"]
    host, agent, dirs = _node(tmp_path, [first, second])
    cid = first["status"]["containerStatuses"][0]["containerID"]
    for tick in range(1, 12):
        _tick(host, agent, dirs, tick)
    assert agent.advisor.latest.usage[("container", cid)].memory >> 20 >= 2
    (Path(agent.config.pods_dir) / "p1.yaml").unlink()  # a pod change: a new plan from the old figures
    assert agent.sync_pods()
    _tick(host, agent, dirs, 12)
    assert ("container", cid) in agent.advisor.latest.usage
