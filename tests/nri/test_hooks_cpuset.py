"""Runtime hook CPUSetAllocator: the container's cpuset and quota in the NRI adjustment/update, the pod's quota at
RunPodSandbox, failing open on a malformed annotation."""

from __future__ import annotations

import json
from pathlib import Path

from apis.extension.resource_status import ANNOTATION_RESOURCE_STATUS
from koordlet.host.paths import HostPaths
from koordlet.nri import convert
from koordlet.nri.hooks import stages
from koordlet.nri.hooks.facts import NodeFacts
from koordlet.nri.hooks.model import ContainerInfo, PodInfo
from koordlet.nri.hooks.options import HookOptions
from koordlet.qos.cpuset import CPUSetRule
from koordlet.states.cpupools import SharePool

UID = "0b7f2e4c-1d3a-4e5b-8c6d-7e8f9a0b1c2d"
CONTAINER = ContainerInfo("c1", "sb", "main")
RULE = CPUSetRule((SharePool(0, 0, "2-3"), SharePool(1, 1, "6-7")), (SharePool(0, 0, "0-3"),))
OPTIONS = HookOptions(gates={"CPUSetAllocator": True})
BURSTABLE = f"kubepods-burstable-pod{UID.replace('-', '_')}.slice"
BESTEFFORT = f"kubepods-besteffort-pod{UID.replace('-', '_')}.slice"
GUARANTEED = f"/kubepods/pod{UID}"


def pod(label: str | None = None, status: object = None, parent: str = BURSTABLE) -> PodInfo:
    annotations = {} if status is None else {
        ANNOTATION_RESOURCE_STATUS: status if isinstance(status, str) else json.dumps(status)}
    return PodInfo("sb", UID, "ns", "p", labels={"koordinator.sh/qosClass": label} if label else {},
                   annotations=annotations, cgroup_parent=parent)


def facts(tmp_path: Path, rule: CPUSetRule | None = RULE, version: int = 1) -> NodeFacts:
    return NodeFacts(HostPaths.under(str(tmp_path)), version, cpuset_rule=rule)


def test_lsr_pod_gets_its_cpuset_and_no_quota(tmp_path: Path) -> None:
    r = stages.create_container(pod("LSR", {"cpuset": "4,5"}, GUARANTEED), CONTAINER, facts(tmp_path), OPTIONS)
    assert r.failures == []
    assert (r.adjustment.cpuset_cpus, r.adjustment.cpu_quota) == ("4-5", -1)
    adj = convert.container_adjustment(r.adjustment)
    assert adj.linux.resources.cpu.cpus == "4-5" and adj.linux.resources.cpu.quota.value == -1
    # the annotation alone is enough, before the node's pools are known
    r = stages.create_container(pod("LSR", {"cpuset": "4"}, GUARANTEED), CONTAINER, facts(tmp_path, None), OPTIONS)
    assert r.adjustment.cpuset_cpus == "4"
    off = HookOptions(gates={"CPUSetAllocator": True}, disable_unset_cpu_quota=True)
    r = stages.create_container(pod("LSR", {"cpuset": "4"}, GUARANTEED), CONTAINER, facts(tmp_path), off)
    assert r.adjustment.cpu_quota is None


def test_ls_and_none_pods_get_the_pools(tmp_path: Path) -> None:
    r = stages.create_container(pod("LS"), CONTAINER, facts(tmp_path), OPTIONS)
    assert (r.adjustment.cpuset_cpus, r.adjustment.cpu_quota) == ("2-3,6-7", None)
    r = stages.create_container(pod(None, {"numaNodeResources": [{"node": 1, "resources": {"cpu": "1"}}]}),
                                CONTAINER, facts(tmp_path), OPTIONS)
    assert r.adjustment.cpuset_cpus == "6-7"


def test_besteffort_static_and_no_rule_send_nothing(tmp_path: Path) -> None:
    for p, f in ((pod("BE", parent=BESTEFFORT), facts(tmp_path)),
                 (pod(None), facts(tmp_path, CPUSetRule(RULE.share_pools, RULE.be_share_pools, True))),
                 (pod("LS"), facts(tmp_path, None))):
        r = stages.create_container(p, CONTAINER, f, OPTIONS)
        assert not r.adjustment and r.failures == []
        assert convert.container_adjustment(r.adjustment).linux.resources.cpu.cpus == ""


def test_malformed_annotation_fails_open(tmp_path: Path) -> None:
    r = stages.create_container(pod("LSR", "{oops"), CONTAINER, facts(tmp_path), OPTIONS)
    assert not r.adjustment
    (f,) = r.failures
    assert f.field == f"annotations[{ANNOTATION_RESOURCE_STATUS}]" and f.message.startswith("CPUSetAllocator: ")
    r = stages.create_container(pod("LSR", {"cpuset": "0-z"}), CONTAINER, facts(tmp_path), OPTIONS)
    assert not r.adjustment and len(r.failures) == 1


def test_update_container_carries_cpuset_and_quota(tmp_path: Path) -> None:
    r = stages.update_container(pod("LSR", {"cpuset": "1"}, GUARANTEED), CONTAINER, facts(tmp_path), OPTIONS)
    [update] = convert.container_updates("c1", r.adjustment)
    assert update.linux.resources.cpu.cpus == "1" and update.linux.resources.cpu.quota.value == -1
    assert not update.linux.resources.HasField("rdt_class")
    r = stages.update_container(pod("BE", parent=BESTEFFORT), CONTAINER, facts(tmp_path), OPTIONS)
    assert convert.container_updates("c1", r.adjustment) == []


def test_run_pod_sandbox_unsets_the_pod_quota(tmp_path: Path) -> None:
    r = stages.run_pod_sandbox(pod("LSR", {"cpuset": "1"}, GUARANTEED), facts(tmp_path),
                               HookOptions(gates={"CPUSetAllocator": True, "GroupIdentity": False}))
    assert [(Path(w.path).relative_to(tmp_path).as_posix(), w.value) for w in r.plan.writes] == [
        (f"sys/fs/cgroup/cpu/kubepods/pod{UID}/cpu.cfs_quota_us", "-1")]
    r = stages.run_pod_sandbox(pod("LSR", {"cpuset": "1"}, GUARANTEED), facts(tmp_path, version=2),
                               HookOptions(gates={"CPUSetAllocator": True, "GroupIdentity": False}))
    assert [w.value for w in r.plan.writes] == ["max 100000"]
    r = stages.run_pod_sandbox(pod("LS"), facts(tmp_path),
                               HookOptions(gates={"CPUSetAllocator": True, "GroupIdentity": False}))
    assert r.plan.writes == []
