"""CPU burst: config merge, static burst, cfs-quota scaling steps, token bucket, share-pool state (upstream cases),
the manager's memory, cgroup v2, real cgroups."""

from __future__ import annotations

import errno
import json
import random
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from apis.extension.cpu_burst import ANNOTATION_POD_CPU_BURST
from apis.slo.decode import nodeslo_config
from apis.slo.types import CPUBurstConfig, NodeSLOSpec
from koordlet.config import Config
from koordlet.events import EventRecorder
from koordlet.health import Health
from koordlet.host.driver import CgroupDriver, K8sQoS, qos_dir
from koordlet.host.paths import HostPaths
from koordlet.host.resources import resource_path
from koordlet.metriccache import MetricCache
from koordlet.qos import cpuburst
from koordlet.qos.cpuburst import by_node, operation, target_quota
from koordlet.qos.cpuburst_config import (
    pod_config,
    static_burst_us,
)
from koordlet.qos.cpuburst_facts import (
    BurstFacts,
    BurstMemory,
    ContainerFacts,
    Limiter,
    node_state,
    read_facts,
    share_pool_state,
)
from koordlet.qos.executor import Executor
from koordlet.qos.feature import record
from koordlet.qos.features import CPUBurst
from koordlet.qos.manager import QoSManager, enabled_features
from koordlet.qos.metrics import SCALED_LABELS, QoSMetrics
from koordlet.qos.model import Plan
from koordlet.qos.state import QoSState
from koordlet.qos.steady import SteadyFacts
from koordlet.states.model import PodMeta
from koordlet.states.pods import pod_meta

from conftest import real_v1_root, require
from simhost import SimHost

B = 100_000  # system.CFSBasePeriodValue
AUTO = CPUBurstConfig("auto", 1000, 300, -1)  # upstream's defaultAutoBurstCfg
DRIVER = CgroupDriver.CGROUPFS


# ---- builders -----------------------------------------------------------------------------------------------------


def pod(name: str, limits: dict[str, str | None], *, label: str | None = None, requests: dict[str, str] | None = None,
        annotation: object = None, phase: str = "Running", qos: str = "Burstable",
        driver: CgroupDriver = DRIVER) -> PodMeta:
    """A pod whose containers (by name) have these CPU limits (None: no limit), running, with ids."""
    uid = str(uuid.uuid4())
    containers, statuses = [], []
    for i, (cname, limit) in enumerate(limits.items()):
        resources: dict[str, Any] = {}
        if limit is not None:
            resources["limits"] = {"cpu": limit}
        if requests and cname in requests:
            resources["requests"] = {"cpu": requests[cname]}
        containers.append({"name": cname, "image": "busybox", "resources": resources})
        statuses.append({"name": cname, "containerID": f"containerd://{uid.replace('-', '')}{i:02d}",
                         "state": {"running": {}}})
    raw: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "default", "uid": uid,
                     "labels": {"koordinator.sh/qosClass": label} if label else {}},
        "spec": {"containers": containers},
        "status": {"phase": phase, "qosClass": qos, "containerStatuses": statuses},
    }
    if annotation is not None:
        raw["metadata"]["annotations"] = {ANNOTATION_POD_CPU_BURST: annotation if isinstance(annotation, str)
                                          else json.dumps(annotation)}
    return pod_meta(raw, driver, Health())


def slo(**strategy: Any) -> NodeSLOSpec:
    return nodeslo_config({"cpuBurstStrategy": strategy} if strategy else {})


def cfg_slo(cfg: CPUBurstConfig, share_pool: int = 50) -> NodeSLOSpec:
    return slo(policy=cfg.policy, cpuBurstPercent=cfg.cpu_burst_percent,
               cfsQuotaBurstPercent=cfg.cfs_quota_burst_percent,
               cfsQuotaBurstPeriodSeconds=cfg.cfs_quota_burst_period_seconds, sharePoolThresholdPercent=share_pool)


def cache() -> MetricCache:
    return MetricCache(lambda kind: 3600.0)


def apply_to(values: dict[str, int], p: Plan, st: QoSState) -> dict[str, int]:
    """The quota files after a plan: path -> value, v1."""
    out = dict(values)
    for w in p.writes:
        if w.resource == "cpu.cfs_quota_us":
            out[w.path] = int(w.value)
    return out


# ---- config: upstream Test_genPodBurstConfig ---------------------------------------------------------------------


def test_node_strategy_defaults_are_upstreams() -> None:
    s = nodeslo_config(None).cpu_burst_strategy
    assert s.config == CPUBurstConfig("none", 1000, 300, -1) and s.share_pool_threshold_percent == 50


def test_pod_config_cases() -> None:
    node = CPUBurstConfig("auto", 1000, 300, 600)
    assert pod_config(pod("p", {"c": "1"}), node) == (node, None)  # "use-node-config"
    full = {"policy": "auto", "cpuBurstPercent": 1000, "cfsQuotaBurstPercent": 300, "cfsQuotaBurstPeriodSeconds": 600}
    assert pod_config(pod("p", {"c": "1"}, annotation=full), CPUBurstConfig())[0] == node  # "use-pod-config"
    merged, err = pod_config(pod("p", {"c": "1"}, annotation={"policy": "cpuBurstOnly", "cpuBurstPercent": 500}),
                             node)  # "merge-pod-config"
    assert err is None and merged == CPUBurstConfig("cpuBurstOnly", 500, 300, 600)
    # Go's decoding: keys match fields case-insensitively, null and "" unset, unknown keys are ignored
    merged, _ = pod_config(pod("p", {"c": "1"}, annotation='{"CPUBURSTPERCENT": 200, "policy": "", "x": 1}'), node)
    assert merged == CPUBurstConfig("auto", 200, 300, 600)
    assert pod_config(pod("p", {"c": "1"}, annotation="null"), node)[0] == node


@pytest.mark.parametrize("text", ['{"cpuBurstPercent": "500"}', '{"cpuBurstPercent": 1.5}', "[1]", "{bad",
                                  '{"policy": 3}', '{"cfsQuotaBurstPercent": 1e3}', '{"cpuBurstPercent": -5}',
                                  '{"cpuBurstPercent": 10001}', '{"cfsQuotaBurstPeriodSeconds": -2}'])
def test_bad_annotation_uses_the_node_config_and_is_an_event(text: str) -> None:
    node = CPUBurstConfig("auto", 1000, 300, 600)
    got, err = pod_config(pod("p", {"c": "1"}, annotation=text), node)
    assert got == node and err is not None and err.field == f"annotations[{ANNOTATION_POD_CPU_BURST}]"


# ---- static burst: upstream TestCPUBurst_applyCPUBurst -----------------------------------------------------------


def burst_plan(p: PodMeta, cfg: CPUBurstConfig, *, burst_file: bool = True) -> dict[str, str]:
    st = QoSState(HostPaths.under("/x"), 1, DRIVER, [p], cfg_slo(cfg))
    out = cpuburst.plan(st, BurstFacts(burst_file))
    return {w.path: w.value for w in out.writes if w.resource == "cpu.cfs_burst_us"}


def burst_of(p: PodMeta, got: dict[str, str]) -> tuple[list[int], int]:
    st_paths = HostPaths.under("/x")
    ctrs = [int(got[resource_path(1, st_paths, "cpu.cfs_burst_us", str(c.cgroup_dir))]) for c in p.containers]
    return ctrs, int(got[resource_path(1, st_paths, "cpu.cfs_burst_us", p.cgroup_dir)])


def test_static_burst_upstream_values() -> None:
    five, three = {"resources": {"limits": {"cpu": "5"}}}, {"resources": {"limits": {"cpu": "3"}}}
    # "apply-by-default-burst-config": 5 × 10 × B and 3 × 10 × B (pod: the sum)
    assert (static_burst_us(five, AUTO), static_burst_us(three, AUTO)) == (5 * 10 * B, 3 * 10 * B)
    # "apply-by-specified-burst-config": 500 %
    half = CPUBurstConfig("auto", 500)
    assert (static_burst_us(five, half), static_burst_us(three, half)) == (5 * 5 * B, 3 * 5 * B)
    # "apply-by-disabled-burst-config" (cfsQuotaBurstOnly) and "apply-by-unlimited-container"
    assert static_burst_us(five, CPUBurstConfig("cfsQuotaBurstOnly", 500)) == 0
    assert static_burst_us({"resources": {}}, AUTO) == 0
    assert static_burst_us({"resources": {"limits": {"cpu": "1500m"}}}, CPUBurstConfig("cpuBurstOnly", 50)) == 75000


def test_static_burst_is_capped_at_the_quota_the_kernel_allows() -> None:
    p = pod("p", {"test-container-1": "5", "test-container-2": "3"})
    assert burst_of(p, burst_plan(p, AUTO)) == ([5 * B, 3 * B], 8 * B)  # upstream: 50 and 30 × B, EINVAL
    assert burst_of(p, burst_plan(p, CPUBurstConfig("auto", 50))) == ([250000, 150000], 400000)  # below the cap
    assert burst_of(p, burst_plan(p, CPUBurstConfig("cfsQuotaBurstOnly", 500))) == ([0, 0], 0)
    unlimited = pod("p", {"test-container-1": None, "test-container-2": None})
    assert burst_of(unlimited, burst_plan(unlimited, AUTO)) == ([0, 0], 0)
    assert burst_plan(p, AUTO, burst_file=False) == {}  # a kernel without cfs_burst_us


def test_eligibility() -> None:
    for label in ("LSR", "LSE", "BE"):
        assert burst_plan(pod("p", {"c": "1"}, label=label), AUTO) == {}
    for label in ("LS", None, "SYSTEM"):
        assert burst_plan(pod("p", {"c": "1"}, label=label), AUTO) != {}
    for phase in ("Succeeded", "Failed", ""):  # IsPodInactive
        assert burst_plan(pod("p", {"c": "1"}, phase=phase), AUTO) == {}
    assert burst_plan(pod("p", {"c": "1"}, phase="Pending"), AUTO) != {}
    st = QoSState(HostPaths.under("/x"), 1, DRIVER, [pod("p", {"c": "1"})], cfg_slo(AUTO), nodeslo_present=False)
    assert cpuburst.plan(st, BurstFacts(True)).writes == []


# ---- cfs quota burst: upstream TestCPUBurst_applyCFSQuotaBurst ----------------------------------------------------

QUOTA_CASES = [
    # name, cfg, node state, {container: (limit, current, throttled)}, pod current, want pod, want containers
    ("scale-reset-for-burst-config-disabled-on-idle-state", CPUBurstConfig("cpuBurstOnly", 1000, 300, -1), "idle",
     {"c1": ("2", 4 * B, 0.5)}, 4 * B, 2 * B, {"c1": 2 * B}),
    ("scale-remain-for-throttled-pod-on-cooling-state", AUTO, "cooling",
     {"c1": ("2", 4 * B, 0.5)}, 4 * B, 4 * B, {"c1": 4 * B}),
    ("scale-down-to-base-for-throttled-pod-on-overload-state", AUTO, "overload",
     {"c1": ("2", 202000, 0.5)}, 202000, 2 * B, {"c1": 2 * B}),
    ("scale-down-for-throttled-pod-on-overload-state", AUTO, "overload",
     {"c1": ("2", 4 * B, 0.5)}, 4 * B, 320000, {"c1": 320000}),
    ("scale-down-because-burst-period-config-zero-on-idle-state", CPUBurstConfig("auto", 1000, 300, 0), "idle",
     {"c1": ("2", 4 * B, 0.5)}, 4 * B, 320000, {"c1": 320000}),
    ("scale-reset-because-burst-percent-config-illegal-on-idle-state", CPUBurstConfig("auto", 1000, 90, -1), "idle",
     {"c1": ("2", 4 * B, 0.5)}, 4 * B, 2 * B, {"c1": 2 * B}),
    ("scale-remain-because-not-throttled-on-idle-state", AUTO, "idle",
     {"c1": ("2", 580000, 0)}, 580000, 580000, {"c1": 580000}),
    ("scale-up-limit-by-ceil-on-idle-state", AUTO, "idle",
     {"c1": ("2", 580000, 0.5)}, 580000, 6 * B, {"c1": 6 * B}),
    ("scale-up-from-base-on-idle-state", AUTO, "idle",
     {"c1": ("2", 2 * B, 0.5)}, 2 * B, 240000, {"c1": 240000}),
    ("scale-up-two-container-from-base-on-idle-state", AUTO, "idle",
     {"c1": ("2", 2 * B, 0.5), "c2": ("3", 3 * B, 0.5)}, 5 * B, 6 * B, {"c1": 240000, "c2": 360000}),
    ("scale-up-one-container-in-unlimited-pod-from-base-on-idle-state", AUTO, "idle",
     {"c1": ("2", 2 * B, 0.5), "c2": (None, -1, 0.5)}, -1, -1, {"c1": 240000, "c2": -1}),
]


@pytest.mark.parametrize(("name", "cfg", "state_", "containers", "pod_now", "want_pod", "want"), QUOTA_CASES,
                         ids=[c[0] for c in QUOTA_CASES])
def test_cfs_quota_burst_upstream_cases(name: str, cfg: CPUBurstConfig, state_: Any,
                                        containers: dict[str, tuple[str | None, int, float]], pod_now: int,
                                        want_pod: int, want: dict[str, int]) -> None:
    p = pod("test-pod-1", {n: c[0] for n, c in containers.items()})
    memory = BurstMemory(rng=random.Random(1))
    facts: dict[str, ContainerFacts] = {}
    for c in p.containers:
        limit, now, throttled = containers[c.name]
        if limit is None:
            continue  # no limit, no base quota: read_facts leaves it out
        allowed = memory.allowed(c.container_id, cfg, int(float(limit) * 1000), 1.5)  # usage 1.5 cores, as upstream
        facts[str(c.cgroup_dir)] = ContainerFacts(now, None, throttled, allowed)
    st = QoSState(HostPaths.under("/x"), 1, DRIVER, [p], cfg_slo(cfg))
    out = cpuburst.plan(st, BurstFacts(False, state_, facts, {p.cgroup_dir: (pod_now, None)}))
    files = {resource_path(1, st.paths, "cpu.cfs_quota_us", str(c.cgroup_dir)): containers[c.name][1]
             for c in p.containers}
    pod_path = resource_path(1, st.paths, "cpu.cfs_quota_us", p.cgroup_dir)
    files[pod_path] = pod_now
    after = apply_to(files, out, st)
    assert after[pod_path] == want_pod
    for c in p.containers:
        assert after[resource_path(1, st.paths, "cpu.cfs_quota_us", str(c.cgroup_dir))] == want[c.name]


def test_operations_and_node_state_table() -> None:
    """changeOperationByNode and the step bounds."""
    assert [by_node("overload", op) for op in ("up", "remain", "down", "reset")] == ["down", "down", "down", "reset"]
    assert [by_node(s, "up") for s in ("cooling", "unknown", "idle")] == ["remain", "remain", "up"]
    assert target_quota(2 * B, 2 * B, 6 * B, "up") == 240000 and target_quota(2 * B, 2 * B, 6 * B, "down") == 2 * B
    assert operation(AUTO, ContainerFacts(2 * B, None, None, True)) == "remain"  # no throttling sample
    assert operation(AUTO, ContainerFacts(2 * B, None, 0.1, False)) == "down"  # the bucket is empty


def test_pod_quota_is_raised_before_growing_and_lowered_after_shrinking() -> None:
    p = pod("p", {"c1": "2", "c2": "2"})
    c1, c2 = (str(c.cgroup_dir) for c in p.containers)
    st = QoSState(HostPaths.under("/x"), 1, DRIVER, [p], cfg_slo(AUTO))
    facts = {c1: ContainerFacts(2 * B, None, 0.5, True), c2: ContainerFacts(5 * B, None, 0.5, False)}
    out = cpuburst.plan(st, BurstFacts(False, "idle", facts, {p.cgroup_dir: (7 * B, None)}))
    seq = [(w.path.split("/")[-2][:6], int(w.value)) for w in out.writes]
    pod_name = p.cgroup_dir.split("/")[-1][:6]
    # c1 grows 200000 -> 240000, c2 shrinks 500000 -> 400000: pod +40000 first, then -100000 after both
    assert seq == [(pod_name, 740000), (c1.split("/")[-1][:6], 240000), (c2.split("/")[-1][:6], 400000),
                   (pod_name, 640000)]


# ---- the token bucket: upstream Test_burstLimiter_Allow / UpdateIfChanged / Recycle ------------------------------


@pytest.mark.parametrize(("period", "percent", "fill", "elapsed", "usage", "allowed", "tokens"), [
    (100, 150, 1, 10, 150, True, 4500),  # consume-enough-token-with-full-init
    (100, 150, 0.01, 10, 200, False, -950),  # consume-not-enough-token-with-part-init
    (10, 150, 0.01, 10, 200, False, -500),  # consume-not-enough-token-to-bottom-with-part-init
    (100, 150, 0.1, 10, 40, True, 1100),  # accumulate-token-with-part-init
    (100, 150, 0.9, 10, 40, True, 5000),  # accumulate-token-to-ceil-with-part-init
])
def test_limiter_allow(period: int, percent: int, fill: float, elapsed: int, usage: int, allowed: bool,
                       tokens: int) -> None:
    limiter = Limiter.new(period, percent, 0.0, random.Random(0))
    limiter.tokens = float(int(limiter.capacity * fill))
    assert limiter.allow(float(elapsed), usage) is allowed
    assert limiter.tokens == tokens


def test_limiter_starts_below_half_full_and_resets_when_the_config_changes() -> None:
    clock = [0.0]
    memory = BurstMemory(clock=lambda: clock[0], rng=random.Random(7))
    cfg = CPUBurstConfig("auto", 1000, 300, 600)
    memory.allowed("c", cfg, 1000, 1.0)
    first = memory.limiters["c"]
    assert first.capacity == 600 * 200 and 0 <= first.tokens < first.capacity / 2
    memory.allowed("c", CPUBurstConfig("auto", 1000, 200, 300), 1000, 1.0)  # "update-limiter"
    assert memory.limiters["c"].capacity == 300 * 100
    # Recycle ("delete-expire-limiter"): a bucket unused for 2 × its period goes
    memory.allowed("d", cfg, 1000, 1.0)
    clock[0] = 2 * 300 + 10
    memory.allowed("d", cfg, 1000, 1.0)
    memory.recycle()
    assert set(memory.limiters) == {"d"}


def test_limiter_counts_fractions_of_seconds() -> None:
    limiter = Limiter(1000, 500.0, 0.0, 100.0)
    for i in range(1, 11):
        limiter.allow(i * 0.5, 150)  # 0.5 s per pass: upstream's int64(0.5) = 0 never spends
    assert limiter.tokens == 500 - 50 * 5


def test_no_period_or_illegal_percent() -> None:
    memory = BurstMemory()
    assert memory.allowed("c", CPUBurstConfig("auto", 1000, 300, -1), 1000, 5.0)
    assert not memory.allowed("c", CPUBurstConfig("auto", 1000, 90, 600), 1000, 0.1)
    assert memory.limiters == {}


# ---- share-pool state: upstream TestCPUBurst_getNodeStateForBurst ------------------------------------------------


def usage_state(pods: list[PodMeta], node_used: float | None, pod_used: dict[str, float], cpus: int | None = 16,
                threshold: int = 50) -> str:
    mc = cache()
    now = 1_000_000
    if node_used is not None:
        mc.append(mc.key("node_cpu_usage"), now - 1000, node_used)
    for p in pods:
        if p.name in pod_used:
            mc.append(mc.key("pod_cpu_usage", pod_uid=p.uid), now - 1000, pod_used[p.name])
    st = QoSState(HostPaths.under("/x"), 1, DRIVER, pods, slo(), cache=mc)
    return share_pool_state(st, threshold, now, 5.0, cpus)


@pytest.mark.parametrize(("node_used", "lsr_used", "ls_used", "cpus", "want"), [
    (None, 0, 0, 16, "unknown"),  # get-unknown-status-because-of-nil-node-metric
    (6, 0, 0, None, "unknown"),  # get-unknown-status-because-of-lack-node-info
    (10, 7, 0.2, 16, "idle"),  # share pool 16-8 = 8, usage 10-7 = 3: 3/8 < 0.45
    (10, 5, 3, 16, "overload"),  # 5/8 >= 0.5
    (10, 6.25, 1, 16, "cooling"),  # 3.75/8 in [0.45, 0.5)
])
def test_share_pool_state(node_used: float | None, lsr_used: float, ls_used: float, cpus: int | None,
                          want: str) -> None:
    lsr = pod("lsr-pod-1", {"c": "8"}, label="LSR", requests={"c": "8"}, qos="Guaranteed")
    ls = pod("ls-pod-2", {"c": "1"}, label="LS", requests={"c": "1"})
    assert usage_state([lsr, ls], node_used, {"lsr-pod-1": lsr_used, "ls-pod-2": ls_used}, cpus) == want


def test_share_pool_pods_kept_with_the_steady_facts_follow_the_pods() -> None:
    """The LSE/LSR requests and the usage series the share pool leaves out are kept with the steady facts: an LSR
    pod that joins shrinks the pool in the very next pass, and new usage samples are read every pass."""
    lsr = pod("lsr-pod-1", {"c": "8"}, label="LSR", requests={"c": "8"}, qos="Guaranteed")
    ls = pod("ls-pod-2", {"c": "1"}, label="LS", requests={"c": "1"})
    mc = cache()
    now = 1_000_000
    mc.append(mc.key("node_cpu_usage"), now - 1000, 10)
    mc.append(mc.key("pod_cpu_usage", pod_uid=lsr.uid), now - 1000, 7)
    steady = SteadyFacts(60.0, lambda: 0.0)

    def state(pods: list[PodMeta]) -> str:
        st = QoSState(HostPaths.under("/x"), 1, DRIVER, pods, slo(), cache=mc)
        steady.begin(st)
        return share_pool_state(st, 50, now, 5.0, 16, steady)

    assert state([ls]) == "overload"  # 10 of 16
    assert state([lsr, ls]) == "idle"  # 3 of 8
    mc.append(mc.key("pod_cpu_usage", pod_uid=lsr.uid), now - 500, 3)  # window mean 5: 5 of 8
    assert state([lsr, ls]) == "overload"


def test_share_pool_counts_be_usage_out_and_old_samples_do_not_count() -> None:
    be = pod("be", {"c": None}, label="BE", qos="BestEffort")
    assert usage_state([be], 10, {"be": 9}, cpus=4) == "idle"  # (10-9)/4 < 0.45
    assert node_state(0.45, 50) == "cooling" and node_state(0.449, 50) == "idle" and node_state(1.0, 50) == "overload"


# ---- read_facts and the manager on a simulated node -----------------------------------------------------------------


class Node:
    """A cgroup v1 node with cfs_burst_us, pods' quota files written as kubelet would, a metric cache."""

    def __init__(self, tmp_path: Path, pods: list[PodMeta], version: int = 1) -> None:
        self.host = SimHost(tmp_path / "h", version, DRIVER).setup()
        self.version = version
        self.cache = cache()
        self.now = 2_000_000.0
        cpu = self.host.root / "sys/devices/system/cpu"
        cpu.mkdir(parents=True, exist_ok=True)
        (cpu / "online").write_text("0-15\n")
        self.put(qos_dir(DRIVER, K8sQoS.GUARANTEED), burst="0")
        self.pods = pods

    def file(self, resource: str, rel: str) -> Path:
        return Path(resource_path(self.version, self.host.paths, resource, rel))

    def put(self, rel: str, *, quota: int | None = None, burst: str = "0") -> None:
        self.host._mkdir(rel)
        if quota is not None:
            text = str(quota) if self.version == 1 else f"{'max' if quota == -1 else quota} 100000"
            self.file("cpu.cfs_quota_us", rel).write_text(text + "\n")
        self.file("cpu.cfs_burst_us", rel).write_text(burst + "\n")

    def sample(self, kind: str, value: float, **labels: str) -> None:
        self.cache.append(self.cache.key(kind, **labels), int(self.now * 1000) - 500, value)

    def state(self, spec: dict[str, Any]) -> QoSState:
        return QoSState(self.host.paths, self.version, DRIVER, self.pods, spec, cache=self.cache)

    def memory(self) -> BurstMemory:
        return BurstMemory(clock=lambda: self.now, wall=lambda: self.now, rng=random.Random(3))


def written(results: list[Any]) -> list[tuple[str, str]]:
    bad = [r for r in results if r.result in ("invalid", "error", "unsupported")]
    assert not bad, bad
    return [(r.write.path, r.write.value) for r in results if r.result == "written"]


def test_start_scale_up_for_normal_pod(tmp_path: Path) -> None:
    """Upstream TestCPUBurst_start "scale-up-for-normal-pod": an LSR pod (8 cores) and an LS pod (1 core, quota
    at 2 cores, throttled) on 16 CPUs, node usage 10 of which the LSR pod 7: share pool idle, the LS pod scales up
    and gets its static burst; the LSR pod is not touched."""
    lsr = pod("lsr-pod-1", {"lsr-pod-1-test-container": "8"}, label="LSR", requests={"lsr-pod-1-test-container": "8"},
              qos="Guaranteed")
    ls = pod("ls-pod-2", {"ls-pod-2-test-container": "1"}, label="LS", requests={"ls-pod-2-test-container": "1"})
    node = Node(tmp_path, [lsr, ls])
    for p, quota in ((lsr, -1), (ls, 2 * B)):
        node.put(p.cgroup_dir, quota=quota)
        node.put(str(p.containers[0].cgroup_dir), quota=quota)
    node.sample("node_cpu_usage", 10)
    node.sample("pod_cpu_usage", 7, pod_uid=lsr.uid)
    node.sample("pod_cpu_usage", 0.2, pod_uid=ls.uid)
    node.sample("container_cpu_throttled", 0, container_id=lsr.containers[0].container_id)
    node.sample("container_cpu_throttled", 0.5, container_id=ls.containers[0].container_id)
    st = node.state(cfg_slo(AUTO))
    memory = node.memory()
    facts = read_facts(st, memory=memory)
    assert facts.node_state == "idle" and facts.burst_file
    ex = Executor(node.host.paths, 1, Health())
    written(ex.apply(cpuburst.plan(st, facts)))
    ls_ctr = str(ls.containers[0].cgroup_dir)
    assert node.file("cpu.cfs_quota_us", ls_ctr).read_text().strip() == "240000"
    assert node.file("cpu.cfs_quota_us", ls.cgroup_dir).read_text().strip() == "240000"
    assert node.file("cpu.cfs_burst_us", ls_ctr).read_text().strip() == str(B)  # upstream 10 × B; capped
    assert node.file("cpu.cfs_burst_us", ls.cgroup_dir).read_text().strip() == str(B)
    assert node.file("cpu.cfs_quota_us", lsr.cgroup_dir).read_text().strip() == "-1"
    assert node.file("cpu.cfs_burst_us", str(lsr.containers[0].cgroup_dir)).read_text().strip() == "0"

    # next pass, no longer throttled: remain, and nothing is written
    node.now += 1
    node.sample("container_cpu_throttled", 0, container_id=ls.containers[0].container_id)
    assert written(ex.apply(cpuburst.plan(st, read_facts(st, memory=memory)))) == []
    # a stale throttling sample (older than 2 × the collect interval) is no sample: remain
    node.now += 10
    assert read_facts(st, memory=memory).containers[ls_ctr].throttled is None


def test_kept_facts_do_not_hide_a_token_bucket_or_a_policy_change(tmp_path: Path) -> None:
    """With the steady facts, policy none and no bucket limiting bursting: the facts are kept whole. A pod whose
    config limits bursting over time (cfsQuotaBurstPeriodSeconds ≥ 0) still gets its bucket advanced with each pass's
    usage, and turning the cfs-quota burst on reads the quotas afresh (one changed on disk meanwhile shows)."""
    ls = pod("ls", {"c": "1"}, label="LS", requests={"c": "1"})
    node = Node(tmp_path, [ls])
    ctr = str(ls.containers[0].cgroup_dir)
    node.put(ls.cgroup_dir, quota=B)
    node.put(ctr, quota=B)
    steady = SteadyFacts(60.0, lambda: node.now)
    memory = node.memory()

    def facts(spec: dict[str, Any]) -> Any:
        st = node.state(spec)
        steady.begin(st)
        return read_facts(st, steady=steady, memory=memory)

    none = slo(policy="none")
    first = facts(none)
    node.file("cpu.cfs_quota_us", ctr).write_text("50000\n")
    node.now += 1
    assert facts(none) is first  # nothing in it can change within the window
    limited = slo(policy="none", cfsQuotaBurstPercent=300, cfsQuotaBurstPeriodSeconds=2)
    verdicts = []
    for _ in range(8):  # three times its limit: the bucket (at most 400) drains at 200 a second
        node.now += 1
        node.sample("container_cpu_usage", 3.0, container_id=ls.containers[0].container_id)
        verdicts.append(facts(limited).containers[ctr].allowed)
    assert verdicts[-1] is False and verdicts[0] is True
    node.now += 1
    assert facts(slo(policy="cfsQuotaBurstOnly")).containers[ctr].quota == 50000


def test_reset_under_policy_none_then_steady_passes_write_nothing(tmp_path: Path) -> None:
    """The default policy (none) resets a scaled quota to the base, the pod's by the same delta; later passes read
    those quotas from the steady facts and write nothing."""
    ls = pod("ls", {"c0": "2"})
    node = Node(tmp_path, [ls])
    node.put(ls.cgroup_dir, quota=5 * B)
    node.put(str(ls.containers[0].cgroup_dir), quota=4 * B)
    health = Health()
    clock = [0.0]
    ex = Executor(node.host.paths, 1, health, force_seconds=60, clock=lambda: clock[0])
    qos = QoSManager([CPUBurst(node_name="n")], ex,
                     EventRecorder(health, "n"), health)
    st = node.state(slo())
    assert sorted(v for _, v in written(qos.reconcile(st))) == ["200000", "300000"]  # the burst files hold 0
    assert node.file("cpu.cfs_quota_us", ls.cgroup_dir).read_text().strip() == "300000"
    for _ in range(3):
        clock[0] += 1
        assert written(qos.reconcile(st)) == []
    clock[0] += 61  # the window: facts re-read, the files hold the values
    assert written(qos.reconcile(st)) == []


def test_scaled_values_are_exported_once_written_and_leave_with_the_pod(tmp_path: Path) -> None:
    """Upstream cpu_burst.go: a container's scaled quota is recorded when a change was written, its burst whenever
    the update held (so the files' own 0 counts); pod-level values are not. Series of a departed pod go."""
    ls = pod("ls", {"c0": "2", "c1": "1"}, label="LS")
    node = Node(tmp_path, [ls])
    node.put(ls.cgroup_dir, quota=7 * B)
    c0, c1 = ls.containers
    node.put(str(c0.cgroup_dir), quota=4 * B)  # scaled up earlier: the default policy (none) resets it to 2 cores
    node.put(str(c1.cgroup_dir), quota=1 * B)  # already at its base: nothing to write
    health = Health()
    reg = CollectorRegistry(auto_describe=False)
    metrics = QoSMetrics("n1", reg, cpu_burst=True)
    ex = Executor(node.host.paths, 1, health, observer=metrics)
    qos = QoSManager([CPUBurst(node_name="n1")], ex,
                     EventRecorder(health, "n1"), health, metrics)
    qos.reconcile(node.state(slo()))

    def scraped() -> dict[str, dict[tuple[str, ...], float]]:
        fams = {f.name: f for f in text_string_to_metric_families(generate_latest(reg).decode())}
        out = {}
        for name in ("koordlet_container_scaled_cfs_burst_us", "koordlet_container_scaled_cfs_quota_us"):
            assert fams[name].type == "gauge"
            out[name] = {tuple(s.labels[k] for k in SCALED_LABELS): s.value for s in fams[name].samples}
        return out

    def labels(c: Any) -> tuple[str, ...]:
        return "n1", "default", "ls", c.container_id, c.name

    assert scraped() == {"koordlet_container_scaled_cfs_burst_us": {labels(c0): 0.0, labels(c1): 0.0},
                         "koordlet_container_scaled_cfs_quota_us": {labels(c0): 2.0 * B}}
    assert node.file("cpu.cfs_quota_us", str(c0.cgroup_dir)).read_text().strip() == str(2 * B)
    qos.reconcile(node.state(slo()))  # steady: cached writes, the values stay
    assert scraped()["koordlet_container_scaled_cfs_quota_us"] == {labels(c0): 2.0 * B}
    node.pods = []
    qos.reconcile(node.state(slo()))
    assert scraped() == {"koordlet_container_scaled_cfs_burst_us": {}, "koordlet_container_scaled_cfs_quota_us": {}}


def test_the_feature_keeps_one_memory_with_the_configured_windows(tmp_path: Path) -> None:
    cfg = Config("n", HostPaths.under(str(tmp_path)), collect_res_used_interval=2.0, reconcile_interval_seconds=3.0)
    [feature] = [f for f in enabled_features(cfg) if isinstance(f, CPUBurst)]
    memory = feature.memory
    assert memory.last_window == 4.0 and memory.avg_window == 10.0
    health = Health()
    QoSManager([feature], Executor(cfg.paths, 1, health), EventRecorder(health, "n"), health).plan(
        QoSState(cfg.paths, 1, DRIVER, [], slo(), nodeslo_present=True))
    assert feature.memory is memory  # kept between passes


def test_v2_cpu_max_keeps_its_period_and_burst_goes_to_cpu_max_burst(tmp_path: Path) -> None:
    ls = pod("ls", {"c0": "2"})
    node = Node(tmp_path, [ls], version=2)
    node.put(ls.cgroup_dir, quota=2 * B)
    node.put(str(ls.containers[0].cgroup_dir), quota=2 * B)
    node.file("cpu.cfs_quota_us", str(ls.containers[0].cgroup_dir)).write_text("200000 100000\n")
    node.sample("container_cpu_throttled", 0.3, container_id=ls.containers[0].container_id)
    node.sample("node_cpu_usage", 1)
    st = node.state(cfg_slo(AUTO))
    out = cpuburst.plan(st, read_facts(st, memory=node.memory()))
    got = {w.path: w.value for w in out.writes}
    ctr = node.host.cgroup_root() / str(ls.containers[0].cgroup_dir)
    assert got[str(ctr / "cpu.max")] == "240000 100000"
    assert got[str(ctr / "cpu.max.burst")] == str(2 * B)
    assert got[str(node.host.cgroup_root() / ls.cgroup_dir / "cpu.max")] == "240000 100000"
    ex = Executor(node.host.paths, 2, Health())
    written(ex.apply(out))


def test_capabilities_log_a_missing_burst_file_once(caplog: pytest.LogCaptureFixture) -> None:
    health = Health()
    for _ in range(3):
        record(health, cpuburst.capabilities(BurstFacts(False)))
    assert health.capabilities["cpu-burst"] is False
    assert sum("cpu-burst" in r.getMessage() for r in caplog.records) == 1


def test_annotation_error_is_reported_and_the_node_config_applies() -> None:
    p = pod("p", {"c": "1"}, annotation="{bad")
    st = QoSState(HostPaths.under("/x"), 1, DRIVER, [p], cfg_slo(AUTO))
    out = cpuburst.plan(st, BurstFacts(True))
    assert [e.field for e in out.errors] == [f"annotations[{ANNOTATION_POD_CPU_BURST}]"]
    assert {w.value for w in out.writes} == {str(B)}


# ---- real cgroup v1 on this machine -------------------------------------------------------------------------------

V1_CPU = Path("/sys/fs/cgroup/cpu")


@pytest.fixture
def real_cpu(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    require((V1_CPU / "cpu.cfs_burst_us").exists(), "the kernel has no cgroup v1 cpu.cfs_burst_us (>= 5.14)")
    with real_v1_root(tmp_path, ("cpu",)) as (root, name):
        yield root, name


@pytest.mark.realhost
def test_real_cgroup_v1_burst_and_quota_scaling(real_cpu: tuple[Path, str]) -> None:
    root, name = real_cpu
    ls = pod("ls", {"c0": "2"}, label="LS")
    pod_dir, ctr_dir = V1_CPU / name / ls.cgroup_dir, V1_CPU / name / str(ls.containers[0].cgroup_dir)
    ctr_dir.mkdir(parents=True)
    for d in (pod_dir, ctr_dir):  # kubelet's quota for a 2-core limit
        (d / "cpu.cfs_quota_us").write_text("200000")
    # upstream's static value (2 cores × 1000 %) is more than the quota: the kernel refuses it
    with pytest.raises(OSError) as e:
        (ctr_dir / "cpu.cfs_burst_us").write_text(str(20 * B))
    assert e.value.errno == errno.EINVAL

    mc = cache()
    now = time.time()
    mc.append(mc.key("node_cpu_usage"), int(now * 1000) - 200, 0.1)
    mc.append(mc.key("container_cpu_throttled", container_id=ls.containers[0].container_id), int(now * 1000) - 200,
              0.4)
    paths = HostPaths.under("/").with_overrides(cgroup_root=str(root))
    st = QoSState(paths, 1, DRIVER, [ls], cfg_slo(AUTO), cache=mc)
    memory = BurstMemory(wall=lambda: now)
    ex = Executor(paths, 1, Health(), force_seconds=0)
    facts = read_facts(st, memory=memory)
    assert facts.burst_file and facts.node_state == "idle"
    written(ex.apply(cpuburst.plan(st, facts)))
    assert (ctr_dir / "cpu.cfs_burst_us").read_text().strip() == str(2 * B)
    assert (pod_dir / "cpu.cfs_burst_us").read_text().strip() == str(2 * B)
    assert (pod_dir / "cpu.cfs_quota_us").read_text().strip() == "240000"
    assert (ctr_dir / "cpu.cfs_quota_us").read_text().strip() == "240000"
    # a later pass without throttling writes nothing; NodeSLO back to policy none resets the quotas to the base and
    # the burst to 0, container first then pod (the kernel refuses a pod quota below a child's)
    mc.append(mc.key("container_cpu_throttled", container_id=ls.containers[0].container_id), int(now * 1000), 0)
    assert written(ex.apply(cpuburst.plan(st, read_facts(st, memory=memory)))) == []
    none = QoSState(paths, 1, DRIVER, [ls], slo(), cache=mc)
    written(ex.apply(cpuburst.plan(none, read_facts(none, memory=memory))))
    assert [(d / f).read_text().strip() for d in (pod_dir, ctr_dir) for f in ("cpu.cfs_quota_us", "cpu.cfs_burst_us")] \
        == ["200000", "0", "200000", "0"]
    assert written(ex.apply(cpuburst.plan(none, read_facts(none, memory=memory)))) == []
