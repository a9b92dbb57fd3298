"""BatchResource at NRI: a BE pod's shares, CFS quota and memory limit at RunPodSandbox (host writes at the pod dir)
and in the CreateContainer / UpdateContainer adjustment, equal to what the QoS reconciler writes; nothing for
other pods; bad input fails open."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from apis.extension.node import ANNOTATION_CPU_NORMALIZATION_RATIO
from apis.extension.resources import ANNOTATION_EXTENDED_RESOURCE_SPEC, BATCH_CPU, BATCH_MEMORY
from apis.slo.decode import nodeslo_config
from apis.slo.types import NodeSLOSpec
from koordlet.health import Health
from koordlet.host.driver import CgroupDriver, K8sQoS, pod_dir
from koordlet.host.paths import HostPaths
from koordlet.host.resources import shares_to_weight
from koordlet.nri import convert
from koordlet.nri.hooks import stages
from koordlet.nri.hooks.facts import NodeFacts
from koordlet.nri.hooks.model import ContainerInfo, PodInfo
from koordlet.nri.hooks.options import HookOptions
from koordlet.qos import batchresource
from koordlet.qos.state import QoSState
from koordlet.states.pods import pod_meta

from simhost import make_pod

UID = "5a1e2b3c-4d5e-4f60-8a7b-9c0d1e2f3a4b"
GI = 1 << 30
FIELD = f"annotations[{ANNOTATION_EXTENDED_RESOURCE_SPEC}]"
OPTIONS = HookOptions(gates={"BatchResource": True, "CPUSetAllocator": True, "GroupIdentity": False})
SPEC = {"containers": {
    "main": {"requests": {BATCH_CPU: "500", BATCH_MEMORY: "2Gi"}, "limits": {BATCH_CPU: "1500", BATCH_MEMORY: "4Gi"}},
    "sidecar": {"requests": {BATCH_CPU: "250"}, "limits": {BATCH_CPU: "500", BATCH_MEMORY: "1Gi"}}}}
SUPPRESS_CFS = nodeslo_config({"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressPolicy": "cfsQuota"}})


def pod(spec: object = SPEC, *, label: str | None = "BE", annotations: dict[str, str] | None = None,
        driver: CgroupDriver = CgroupDriver.CGROUPFS) -> PodInfo:
    notes = dict(annotations or {})
    if spec is not None:
        notes[ANNOTATION_EXTENDED_RESOURCE_SPEC] = spec if isinstance(spec, str) else json.dumps(spec)
    rel = pod_dir(driver, K8sQoS.BESTEFFORT, UID)
    parent = "/" + rel if driver is CgroupDriver.CGROUPFS else rel.rsplit("/", 1)[1]
    return PodInfo("sb-1", UID, "batch", "trainer", labels={"koordinator.sh/qosClass": label} if label else {},
                   annotations=notes, cgroup_parent=parent)


def facts(tmp_path: Path, *, version: int = 1, nodeslo: NodeSLOSpec | None = None, ratio: float | None = None,
          driver: CgroupDriver = CgroupDriver.CGROUPFS) -> NodeFacts:
    return NodeFacts(HostPaths.under(str(tmp_path)), version, driver, nodeslo=nodeslo, cpu_normalization_ratio=ratio)


def container(name: str = "main") -> ContainerInfo:
    return ContainerInfo(f"c-{name}", "sb-1", name)


def limits(p: PodInfo, f: NodeFacts, name: str = "main", *, update: bool = False,
           options: HookOptions = OPTIONS) -> tuple[int | None, int | None, int | None]:
    run = stages.update_container if update else stages.create_container
    r = run(p, container(name), f, options)
    assert r.failures == [] and r.plan.writes == []
    return r.adjustment.cpu_shares, r.adjustment.cpu_quota, r.adjustment.memory_limit


def sandbox_writes(p: PodInfo, f: NodeFacts, options: HookOptions = OPTIONS) -> dict[str, str]:
    r = stages.run_pod_sandbox(p, f, options)
    assert r.failures == [] and not r.adjustment
    return {os.path.relpath(w.path, f.paths.cgroup_root): w.value for w in r.plan.writes}


# ---- the values ---------------------------------------------------------------------------------------------------


def test_create_container_carries_the_containers_batch_limits(tmp_path: Path) -> None:
    f = facts(tmp_path)
    # 500 milli → 512 shares; a 1500 milli limit → 150 000 µs per 100 ms; 4Gi
    assert limits(pod(), f, "main") == (512, 150_000, 4 * GI)
    assert limits(pod(), f, "sidecar") == (256, 50_000, GI)
    # UpdateContainer re-asserts them (kubelet's update would reset shares to 2 and the quota to unlimited)
    assert limits(pod(), f, "main", update=True) == (512, 150_000, 4 * GI)


def test_a_container_without_limits_is_unlimited(tmp_path: Path) -> None:
    spec = {"containers": {"main": {"requests": {BATCH_CPU: "1", BATCH_MEMORY: "1Gi"}}}}
    # 1 milli → shares floor 2; no limits → quota and memory unlimited (-1), as upstream
    assert limits(pod(spec), facts(tmp_path), "main") == (2, -1, -1)


def test_pod_level_writes_at_run_pod_sandbox_v1_and_v2(tmp_path: Path) -> None:
    rel = pod_dir(CgroupDriver.CGROUPFS, K8sQoS.BESTEFFORT, UID)
    assert sandbox_writes(pod(), facts(tmp_path)) == {
        f"cpu/{rel}/cpu.shares": "768",  # 500 + 250 milli
        f"cpu/{rel}/cpu.cfs_quota_us": "200000",  # 1500 + 500 milli
        f"memory/{rel}/memory.limit_in_bytes": str(5 * GI)}
    assert sandbox_writes(pod(), facts(tmp_path, version=2)) == {
        f"{rel}/cpu.weight": str(shares_to_weight(768)), f"{rel}/cpu.max": "200000 100000",
        f"{rel}/memory.max": str(5 * GI)}
    one_unlimited = {"containers": {**SPEC["containers"], "late": {"requests": {BATCH_CPU: "100"}}}}
    assert sandbox_writes(pod(one_unlimited), facts(tmp_path, version=2))[f"{rel}/memory.max"] == "max"


def test_systemd_slice_parent(tmp_path: Path) -> None:
    rel = pod_dir(CgroupDriver.SYSTEMD, K8sQoS.BESTEFFORT, UID)
    writes = sandbox_writes(pod(driver=CgroupDriver.SYSTEMD), facts(tmp_path, driver=CgroupDriver.SYSTEMD))
    assert writes[f"cpu/{rel}/cpu.shares"] == "768"


@pytest.mark.parametrize("version", [1, 2])
def test_the_hook_and_the_reconciler_agree(tmp_path: Path, version: int) -> None:
    """One rule: the pod-level writes the hook makes are the reconciler's pod-level writes for the same pod, under
    a NodeSLO with the cfsQuota policy and without, with a CPU normalization ratio."""
    raw = make_pod("trainer", UID, "BestEffort", labels={"koordinator.sh/qosClass": "BE"})
    raw["metadata"]["namespace"] = "batch"
    raw["metadata"]["annotations"] = {ANNOTATION_EXTENDED_RESOURCE_SPEC: json.dumps(SPEC)}
    meta = pod_meta(raw, CgroupDriver.CGROUPFS, Health())
    paths = HostPaths.under(str(tmp_path))
    node = {"metadata": {"name": "n", "annotations": {ANNOTATION_CPU_NORMALIZATION_RATIO: "1.5"}}}
    for slo in (nodeslo_config(None), SUPPRESS_CFS):
        state = QoSState(paths, version, CgroupDriver.CGROUPFS, [meta], slo, node=node)
        planned = batchresource.plan(state, batchresource.BatchFacts(False, 1.5))
        reconciler = {w.path: w.value for w in planned.writes if os.path.dirname(w.path).endswith(meta.cgroup_dir)}
        hook = stages.run_pod_sandbox(pod(), facts(tmp_path, version=version, nodeslo=slo, ratio=1.5), OPTIONS)
        assert {w.path: w.value for w in hook.plan.writes} == reconciler
        assert len(reconciler) == 3


def test_cfs_quota_suppress_policy_and_the_normalization_ratio(tmp_path: Path) -> None:
    assert limits(pod(), facts(tmp_path, nodeslo=SUPPRESS_CFS))[1] == -1
    rel = pod_dir(CgroupDriver.CGROUPFS, K8sQoS.BESTEFFORT, UID)
    assert sandbox_writes(pod(), facts(tmp_path, nodeslo=SUPPRESS_CFS))[f"cpu/{rel}/cpu.cfs_quota_us"] == "-1"
    # a ratio of 2: the quota halves (rounded up), shares and memory do not change
    assert limits(pod(), facts(tmp_path, ratio=2.0)) == (512, 75_000, 4 * GI)
    assert limits(pod(), facts(tmp_path, ratio=0.5))[1] == 150_000  # <= 1: no scaling


def test_the_nri_messages_carry_the_values(tmp_path: Path) -> None:
    r = stages.create_container(pod(), container(), facts(tmp_path), OPTIONS)
    adj = convert.container_adjustment(r.adjustment)
    cpu, memory = adj.linux.resources.cpu, adj.linux.resources.memory
    assert (cpu.shares.value, cpu.quota.value, memory.limit.value) == (512, 150_000, 4 * GI)
    assert not cpu.HasField("period") and cpu.cpus == ""
    r = stages.update_container(pod(), container(), facts(tmp_path), OPTIONS)
    (update,) = convert.container_updates("c-main", r.adjustment)
    assert update.container_id == "c-main"
    assert update.linux.resources.cpu.shares.value == 512
    assert update.linux.resources.memory.limit.value == 4 * GI


def test_a_cpuset_pod_keeps_cpusetallocators_unlimited_quota(tmp_path: Path) -> None:
    p = pod(annotations={"scheduling.koordinator.sh/resource-status": '{"cpuset":"2-3"}'})
    r = stages.create_container(p, container(), facts(tmp_path), OPTIONS)
    assert (r.adjustment.cpu_shares, r.adjustment.cpu_quota, r.adjustment.cpuset_cpus) == (512, -1, "2-3")


# ---- not for other pods -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("label", ["LS", "LSR", "SYSTEM", None, "be"])
def test_not_for_pods_that_are_not_be(tmp_path: Path, label: str | None) -> None:
    assert limits(pod(label=label), facts(tmp_path)) == (None, None, None)
    assert sandbox_writes(pod(label=label), facts(tmp_path)) == {}


@pytest.mark.parametrize("spec", [None, "null", {}, {"containers": {}}, {"containers": {"other": {}}}])
def test_nothing_without_batch_resources_for_the_container(tmp_path: Path, spec: object) -> None:
    assert limits(pod(spec), facts(tmp_path)) == (None, None, None)


def test_the_gate(tmp_path: Path) -> None:
    off = HookOptions(gates={"BatchResource": False})
    assert limits(pod(), facts(tmp_path), options=off) == (None, None, None)
    assert sandbox_writes(pod(), facts(tmp_path), off) == {}
    assert HookOptions().gate("BatchResource")  # on by default, as upstream


# ---- bad input fails open -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("spec", "field", "message"), [
    ("{not json", FIELD, "invalid JSON"),
    ({"containers": []}, f"{FIELD}.containers", "expected a JSON object"),
    ({"containers": {"main": {"limits": {BATCH_MEMORY: "lots"}}}},
     f"{FIELD}.containers[main].limits[{BATCH_MEMORY}]", ""),
    ({"containers": {"main": {"limits": {BATCH_MEMORY: "100E"}}}}, FIELD, "memory.limit_in_bytes"),
])
def test_bad_input_adds_nothing_and_is_one_failure(tmp_path: Path, spec: object, field: str, message: str) -> None:
    p = pod(spec)
    for r in (stages.create_container(p, container(), facts(tmp_path), OPTIONS),
              stages.update_container(p, container(), facts(tmp_path), OPTIONS),
              stages.run_pod_sandbox(p, facts(tmp_path), OPTIONS)):
        assert not r.adjustment and r.plan.writes == []
        (f,) = r.failures
        assert (f.kind, f.name, f.uid, f.field, f.reason) == ("Pod", "batch/trainer", UID, field, "RuntimeHookFailed")
        assert f.message.startswith("BatchResource: ") and message in f.message
        assert ("BatchResource", False) in [(name, ok) for name, ok, _ in r.timings]


def test_a_bad_cgroup_parent_fails_open(tmp_path: Path) -> None:
    p = PodInfo("sb-1", UID, "batch", "trainer", labels={"koordinator.sh/qosClass": "BE"},
                annotations={ANNOTATION_EXTENDED_RESOURCE_SPEC: json.dumps(SPEC)}, cgroup_parent="../../etc")
    r = stages.run_pod_sandbox(p, facts(tmp_path), OPTIONS)
    assert r.plan.writes == [] and [f.field for f in r.failures] == ["linux.cgroup_parent"]
    # the container's adjustment does not need the parent
    assert limits(p, facts(tmp_path)) == (512, 150_000, 4 * GI)
