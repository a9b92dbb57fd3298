"""CPUSetAllocator: upstream's rule order (hooks/cpuset/rule_test.go cases), the planner on simulated nodes, and a
planned cpuset landing in a real cgroup v1 cpuset hierarchy with a second pass writing nothing."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from apis.extension.resource_status import (
    ANNOTATION_RESOURCE_STATUS,
    ResourceStatus,
    format_cpuset,
    parse_cpuset,
    resource_status,
)
from apis.slo.decode import nodeslo_config
from koordlet.health import Health
from koordlet.host.driver import CgroupDriver, K8sQoS
from koordlet.host.paths import HostPaths
from koordlet.host.resources import resource_path
from koordlet.qos.cpuset import CPUSetFacts, CPUSetRule, canonical, container_cpuset, plan, read_facts
from koordlet.qos.executor import Executor
from koordlet.qos.state import QoSState
from koordlet.qos.steady import SteadyFacts
from koordlet.states.cpupools import SharePool
from koordlet.states.model import PodMeta
from koordlet.states.pods import pod_meta

from conftest import real_v1_root, require
from simhost import SimHost, make_pod

POOLS = (SharePool(0, 0, "1-7"), SharePool(1, 1, "9-15"))
BE_POOLS = (SharePool(0, 0, "0-7"), SharePool(1, 1, "8-15"))
BURSTABLE = "kubepods/burstable/test-pod/test-container"
BESTEFFORT = "kubepods/besteffort/test-pod/test-container"


def status(text: str | None = None, **doc: Any) -> ResourceStatus:
    value = text if text is not None else json.dumps(doc)
    return resource_status({ANNOTATION_RESOURCE_STATUS: value})


def numa(node: int, **resources: str) -> dict[str, Any]:
    return {"node": node, "resources": resources}


RULE = CPUSetRule(POOLS, BE_POOLS)


@pytest.mark.parametrize(("name", "rule", "st", "qos", "parent", "be_mgr", "want"), [
    ("annotation cpuset first", RULE, status(cpuset="2-3"), "LSR", BURSTABLE, False, "2-3"),
    ("annotation cpuset without a rule", None, status(cpuset="2-3"), "", BURSTABLE, False, "2-3"),
    ("be share pool of the allocated node (BECPUManager)", RULE,
     status(numaNodeResources=[numa(0, **{"kubernetes.io/batch-cpu": "1000"})]), "BE", BURSTABLE, True, "0-7"),
    ("be pod without BECPUManager falls through to besteffort", RULE,
     status(numaNodeResources=[numa(0, **{"kubernetes.io/batch-cpu": "1000"})]), "BE", BESTEFFORT, False, ""),
    ("ls share pool of the allocated node", RULE, status(numaNodeResources=[numa(1, cpu="1")]), "LS", BURSTABLE,
     False, "9-15"),
    ("no-label pod with a numa allocation uses its node's pool", RULE,
     status(numaNodeResources=[numa(0, cpu="1")]), "", BURSTABLE, False, "1-7"),
    ("ls pod, numa allocation without cpu: all pools", RULE, status(numaNodeResources=[numa(0, memory="1Gi")]),
     "LS", BURSTABLE, False, "1-7,9-15"),
    ("ls pod: all pools", RULE, status(), "LS", BURSTABLE, False, "1-7,9-15"),
    ("system pod with a system-qos cpuset", CPUSetRule(POOLS, BE_POOLS, False, "0"), status(), "SYSTEM", BURSTABLE,
     False, "0"),
    ("system pod without one: all pools", RULE, status(), "SYSTEM", BURSTABLE, False, "1-7,9-15"),
    ("burstable pod under the none policy: all pools", RULE, status(), "", BURSTABLE, False, "1-7,9-15"),
    ("burstable pod under the static policy: untouched", CPUSetRule(POOLS, BE_POOLS, True), status(), "", BURSTABLE,
     False, None),
    ("besteffort pod: empty", RULE, status(), "", BESTEFFORT, False, ""),
    ("besteffort before static", CPUSetRule(POOLS, BE_POOLS, True), status(), "BE", BESTEFFORT, False, ""),
    ("ls before static", CPUSetRule(POOLS, BE_POOLS, True), status(), "LS", BURSTABLE, False, "1-7,9-15"),
    ("no rule yet", None, status(), "LS", BURSTABLE, False, None),
])
def test_rule_order(name: str, rule: CPUSetRule | None, st: ResourceStatus, qos: str, parent: str, be_mgr: bool,
                    want: str | None) -> None:
    assert container_cpuset(rule, st, qos, parent, be_cpu_manager=be_mgr) == want


def test_canonical_drops_empty_pools() -> None:
    assert canonical("1-7,9-15") == "1-7,9-15"
    assert canonical("8,0-3,,4") == "0-4,8"
    assert canonical("") == ""


# ---- the planner --------------------------------------------------------------------------------------------------


def pod(name: str, k8s_qos: str = "Burstable", label: str | None = None, res_status: Any = None,
        driver: CgroupDriver = CgroupDriver.CGROUPFS, uid: str | None = None) -> PodMeta:
    raw: dict[str, Any] = make_pod(name, uid or str(uuid.uuid4()), k8s_qos,
                                   labels={"koordinator.sh/qosClass": label} if label else None)
    if res_status is not None:
        text = res_status if isinstance(res_status, str) else json.dumps(res_status)
        raw["metadata"]["annotations"] = {ANNOTATION_RESOURCE_STATUS: text}
    return pod_meta(raw, driver, Health())


def qstate(host: SimHost, pods: list[PodMeta], node: dict[str, Any] | None = None,
           kubelet_config: dict[str, Any] | None = None) -> QoSState:
    return QoSState(host.paths, host.version, host.driver, pods, nodeslo_config(None), node=node,
                    kubelet_config=kubelet_config)


def make_dirs(host: SimHost, pods: list[PodMeta], sandbox: bool = True) -> None:
    for p in pods:
        host._mkdir(p.cgroup_dir)
        for c in p.containers:
            assert c.cgroup_dir
            host._mkdir(c.cgroup_dir)
        if sandbox:
            host._mkdir(f"{p.cgroup_dir}/{'f' * 64}" if host.driver is CgroupDriver.CGROUPFS
                        else f"{p.cgroup_dir}/cri-containerd-{'f' * 64}.scope")


def by_path(host: SimHost, p: Any) -> dict[str, str]:
    return {host.paths.host_relative(w.path): w.value for w in p.writes}


def test_plan_on_a_two_numa_node(simhost: SimHost) -> None:
    d = simhost.driver
    lsr = pod("lsr", "Guaranteed", "LSR", {"cpuset": "0-1"}, d)
    ls = pod("ls", "Burstable", "LS", None, d)
    be = pod("be", "BestEffort", "BE", None, d)
    pods = [lsr, ls, be]
    make_dirs(simhost, pods)
    st = qstate(simhost, pods)
    facts = read_facts(st, steady=SteadyFacts(60, lambda: 0.0))
    assert facts.rule.share_pools == (SharePool(1, 1, "2-3"),)  # numa_cpus {0: [0, 1], 1: [2, 3]}
    assert facts.sandboxes[lsr.uid].endswith("f" * 64 if d is CgroupDriver.CGROUPFS else ".scope")
    got = by_path(simhost, plan(st, facts))
    cpus = {k: v for k, v in got.items() if k.endswith("cpuset.cpus")}
    lsr_dirs = [c.cgroup_dir for c in lsr.containers] + [facts.sandboxes[lsr.uid]]
    for rel in lsr_dirs:
        assert any(k.endswith(f"{rel}/cpuset.cpus") and v == "0-1" for k, v in cpus.items()), (rel, cpus)
    ls_dir = ls.containers[0].cgroup_dir
    assert any(k.endswith(f"{ls_dir}/cpuset.cpus") and v == "2-3" for k, v in cpus.items())
    assert not any(be.cgroup_dir in k for k in got)  # the besteffort "" is never written
    quota = {k: v for k, v in got.items() if "cpu.cfs_quota_us" in k or k.endswith("cpu.max")}
    want = "-1" if simhost.version == 1 else "max 100000"
    assert len(quota) == 1 + len(lsr_dirs) and set(quota.values()) == {want}
    assert all(lsr.cgroup_dir in k for k in quota)
    # --disable-unset-cpu-quota keeps the quota
    assert not any("cfs_quota" in k or k.endswith("cpu.max")
                   for k in by_path(simhost, plan(st, facts, disable_unset_cpu_quota=True)))


def test_static_policy_and_kubelet_pods(tmp_path: Path) -> None:
    host = SimHost(tmp_path / "host", 1, CgroupDriver.CGROUPFS, numa_cpus={0: [0, 1, 2, 3]}).setup()
    g = pod("guaranteed", "Guaranteed", None, None, uid="11111111-1111-1111-1111-111111111111")
    b = pod("burstable", "Burstable")
    make_dirs(host, [g, b])
    kubelet_dir = tmp_path / "host/var/lib/kubelet"
    kubelet_dir.mkdir(parents=True)
    (kubelet_dir / "cpu_manager_state").write_text(json.dumps(
        {"policyName": "static", "defaultCpuSet": "0,3", "entries": {g.uid: {"c0": "1-2"}}}))
    st = qstate(host, [g, b], kubelet_config={"cpuManagerPolicy": "static", "kubeReserved": {"cpu": "1"}})
    facts = read_facts(st)
    assert facts.rule.kubelet_static
    assert facts.rule.share_pools == (SharePool(0, 0, "0,3"),)  # kubelet's CPUs left the pool
    assert plan(st, facts).writes == []  # static policy: kubelet's pods and others are left alone


def test_malformed_annotation_is_an_error_for_that_pod_only(tmp_path: Path) -> None:
    host = SimHost(tmp_path / "host", 1, CgroupDriver.CGROUPFS).setup()
    bad = pod("bad", "Guaranteed", "LSR", "{not json")
    worse = pod("worse", "Guaranteed", "LSR", {"cpuset": "1-x"})
    ok = pod("ok", "Guaranteed", "LSR", {"cpuset": "1"})
    make_dirs(host, [bad, worse, ok], sandbox=False)
    st = qstate(host, [bad, worse, ok])
    p = plan(st, read_facts(st))
    assert sorted(e.name for e in p.errors if e.kind == "Pod") == ["default/bad", "default/worse"]  # once each
    assert all(ok.cgroup_dir in w.path for w in p.writes) and p.writes


def test_node_annotations_reserve_and_system_qos(tmp_path: Path) -> None:
    host = SimHost(tmp_path / "host", 1, CgroupDriver.CGROUPFS, numa_cpus={0: [0, 1, 2, 3]}).setup()
    sys_pod = pod("sys", "Burstable", "SYSTEM")
    ls = pod("ls", "Burstable", "LS")
    make_dirs(host, [sys_pod, ls], sandbox=False)
    node = {"metadata": {"name": "n", "annotations": {
        "node.koordinator.sh/reservation": '{"reservedCPUs": "3"}',
        "node.koordinator.sh/system-qos-resource": '{"cpuset": "0"}'}}}
    st = qstate(host, [sys_pod, ls], node=node)
    got = by_path(host, plan(st, read_facts(st)))
    assert got[f"sys/fs/cgroup/cpuset/{sys_pod.containers[0].cgroup_dir}/cpuset.cpus"] == "0"
    assert got[f"sys/fs/cgroup/cpuset/{ls.containers[0].cgroup_dir}/cpuset.cpus"] == "1-2"


def test_registered_under_its_gate() -> None:
    from koordlet.config import Config
    from koordlet.qos.manager import enabled_features

    cfg = Config("n", HostPaths.under("/"))
    assert any(f.name == "cpuset" for f in enabled_features(cfg))
    off = Config("n", HostPaths.under("/"), feature_gates={**cfg.feature_gates, "CPUSetAllocator": False})
    assert not any(f.name == "cpuset" for f in enabled_features(off))


# ---- real cgroups -------------------------------------------------------------------------------------------------


@pytest.mark.realhost
def test_planned_cpuset_lands_and_second_pass_writes_nothing(tmp_path: Path) -> None:
    require(os.path.exists("/sys/fs/cgroup/cpuset/cpuset.cpus"), "no cgroup v1 cpuset hierarchy")
    with real_v1_root(tmp_path, ("cpuset", "cpu")) as (root, _):
        paths = HostPaths.under(str(tmp_path / "host")).with_overrides(cgroup_root=str(root) + "/",
                                                                        sys_root="/sys/")
        online = Path("/sys/devices/system/cpu/online").read_text().strip()
        lsr = pod("lsr", "Guaranteed", "LSR", {"cpuset": "0"})
        ls = pod("ls", "Burstable", "LS")
        made = []
        for f in ("cpuset.cpus", "cpuset.mems"):  # the test's parent starts empty too
            (root / "cpuset" / f).write_text(Path("/sys/fs/cgroup/cpuset", f).read_text())
        for p in (lsr, ls):
            for rel in [p.cgroup_dir] + [c.cgroup_dir for c in p.containers if c.cgroup_dir]:
                parts = rel.split("/")
                for i in range(1, len(parts) + 1):
                    for sub in ("cpuset", "cpu"):
                        d = root / sub / "/".join(parts[:i])
                        if not d.exists():
                            d.mkdir()
                            made.append(d)
                        if sub == "cpuset":  # a new v1 cpuset starts empty: give it the parent's, as kubelet does
                            for f in ("cpuset.cpus", "cpuset.mems"):
                                (d / f).write_text((d.parent / f).read_text())
        st = QoSState(paths, 1, CgroupDriver.CGROUPFS, [lsr, ls], nodeslo_config(None))
        ex = Executor(paths, 1, Health())
        results = ex.apply(plan(st, read_facts(st)))
        assert not [r for r in results if r.result in ("invalid", "error")], results
        lsr_c = root / "cpuset" / str(lsr.containers[0].cgroup_dir)
        ls_c = root / "cpuset" / str(ls.containers[0].cgroup_dir)
        assert (lsr_c / "cpuset.cpus").read_text().strip() == "0"
        rest = format_cpuset(set(parse_cpuset(online)) - {0})  # the LSR pod's CPU left the LS pool
        require(rest != "", "one CPU only: the LS pool is empty")
        assert (ls_c / "cpuset.cpus").read_text().strip() == rest
        assert (root / "cpu" / lsr.cgroup_dir / "cpu.cfs_quota_us").read_text().strip() == "-1"
        again = Executor(paths, 1, Health()).apply(plan(st, read_facts(st)))  # fresh executor: files are read
        assert [r.write.path for r in again if r.result == "written"] == []
        for d in reversed(made):
            d.rmdir()


def test_qos_kube_dir_is_not_touched(tmp_path: Path) -> None:
    host = SimHost(tmp_path / "host", 1, CgroupDriver.SYSTEMD).setup()
    p = pod("ls", "Burstable", "LS", driver=CgroupDriver.SYSTEMD)
    make_dirs(host, [p])
    st = qstate(host, [p])
    for w in plan(st, read_facts(st)).writes:
        assert p.cgroup_dir in w.path
        assert w.path != resource_path(1, host.paths, "cpuset.cpus", host.pod_dir(K8sQoS.BURSTABLE, p.uid))
    assert isinstance(read_facts(st), CPUSetFacts)
