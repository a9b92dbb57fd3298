"""The BE resource collector: besteffort CPU usage rate, BE pods' batch-cpu requests and the BE real limit."""

from __future__ import annotations

from pathlib import Path

import pytest

from koordlet.collectors.beresource import BEResourceCollector
from koordlet.health import Health
from koordlet.host.cgroup import detect_backend
from koordlet.host.driver import CgroupDriver, K8sQoS, qos_dir
from koordlet.metriccache import MetricCache
from koordlet.states.model import PodMeta
from koordlet.states.pods import pod_meta

from simhost import SimCgroup, SimHost, make_pod

T0 = 1_700_000_000_000


def pod(name: str, qos: str, batch: str | None) -> PodMeta:
    raw = make_pod(name, f"uid-{name}", "BestEffort", labels={"koordinator.sh/qosClass": qos})
    if batch is not None:
        raw["spec"]["containers"][0]["resources"] = {"requests": {"kubernetes.io/batch-cpu": batch}}  # type: ignore[index]
    return pod_meta(raw, CgroupDriver.CGROUPFS, Health())


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize(("quota", "limit"), [(-1, 4000), (150_000, 1500), (800_000, 4000)])
def test_usage_request_and_real_limit(tmp_path: Path, version: int, quota: int, limit: int) -> None:
    host = SimHost(tmp_path, version, CgroupDriver.CGROUPFS).setup()
    rel = qos_dir(CgroupDriver.CGROUPFS, K8sQoS.BESTEFFORT)
    cg = host.cgroup_root()
    if version == 1:
        (cg / "cpuset" / rel / "cpuset.cpus").write_text("0-3\n")
        (cg / "cpu" / rel / "cpu.cfs_quota_us").write_text(f"{quota}\n")
        (cg / "cpu" / rel / "cpu.cfs_period_us").write_text("100000\n")
    else:
        (cg / rel / "cpuset.cpus.effective").write_text("0-3\n")
        (cg / rel / "cpu.max").write_text(f"{'max' if quota == -1 else quota} 100000\n")
    pods = [pod("be-a", "BE", "1500"), pod("be-b", "BE", "2k"), pod("be-none", "BE", None), pod("ls", "LS", "9000")]
    cache = MetricCache(lambda kind: 3600)
    collector = BEResourceCollector(detect_backend(host.paths), CgroupDriver.CGROUPFS, Health())
    host.write_cgroup(rel, SimCgroup(cpu_ns=10 * 10**9))
    collector.collect(pods, cache, T0, 5 * 10**9)
    assert cache.last(cache.key("be_cpu_usage")) is None  # no rate on the first tick
    host.write_cgroup(rel, SimCgroup(cpu_ns=12_500_000_000))
    collector.collect(pods, cache, T0 + 1000, 6 * 10**9)
    assert cache.last(cache.key("be_cpu_usage")) == (T0 + 1000, 2500.0)
    assert cache.last(cache.key("be_cpu_request")) == (T0 + 1000, 3500.0)  # BE-labelled pods only
    assert cache.last(cache.key("be_cpu_real_limit")) == (T0 + 1000, float(limit))


def test_unreadable_besteffort_dir_stores_nothing(tmp_path: Path) -> None:
    host = SimHost(tmp_path, 1, CgroupDriver.CGROUPFS).setup()  # no cpuset.cpus under besteffort
    cache = MetricCache(lambda kind: 3600)
    health = Health()
    BEResourceCollector(detect_backend(host.paths), CgroupDriver.CGROUPFS, health).collect([], cache, T0, 1)
    assert cache.keys("be_cpu_real_limit") == [] and health.skipped[("be-resource", "unreadable")] == 1
