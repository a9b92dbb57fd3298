"""Pod-level hooks: GroupIdentity's bvt at RunPodSandbox against the NodeSLO, and the Resctrl group's life cycle
(RunPodSandbox plan, CreateContainer RDT class, RemovePodSandbox), with the spec's §1.9 worked example."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from apis.slo.decode import nodeslo_config
from apis.slo.types import NodeSLOSpec
from koordlet.health import Health
from koordlet.host.driver import CgroupDriver, K8sQoS, pod_dir, qos_dir
from koordlet.host.paths import HostPaths
from koordlet.nri.hooks import stages
from koordlet.nri.hooks.facts import GroupIdentityFacts, NodeFacts, NodeFactsReader
from koordlet.nri.hooks.groupidentity import pod_cgroup_dir
from koordlet.nri.hooks.model import FACT_RESCTRL, Adjustment, ContainerInfo, PodInfo
from koordlet.nri.hooks.options import HookOptions
from koordlet.qos.executor import Executor
from koordlet.qos.model import Write
from koordlet.qos.resctrl_facts import ResctrlFacts

UID = "7712555c-ce62-454a-9e18-9ff0217b8941"
GATES = {"GroupIdentity": True, "Resctrl": True}
OPTIONS = HookOptions(gates=GATES)
CONTAINER = ContainerInfo("abc123", "sandbox-1", "main")


def pod(*, qos: K8sQoS = K8sQoS.BURSTABLE, driver: CgroupDriver = CgroupDriver.CGROUPFS, label: str | None = None,
        annotations: dict[str, str] | None = None, parent: str | None = None) -> PodInfo:
    if parent is None:
        rel = pod_dir(driver, qos, UID)
        # what kubelet sends as linux.cgroup_parent: a path for cgroupfs, the slice name for systemd
        parent = "/" + rel if driver is CgroupDriver.CGROUPFS else rel.rsplit("/", 1)[1]
    return PodInfo("sandbox-1", UID, "default", "web", labels={"koordinator.sh/qosClass": label} if label else {},
                   annotations=annotations or {}, cgroup_parent=parent)


def nodeslo(policy: str | None = None, **classes: bool) -> NodeSLOSpec:
    strategy: dict[str, Any] = {f"{c}Class": {"cpuQOS": {"enable": on}} for c, on in classes.items()}
    if policy is not None:
        strategy["policies"] = {"cpuPolicy": policy}
    return nodeslo_config({"resourceQOSStrategy": strategy})


def gi_facts(tmp_path: Path, slo: NodeSLOSpec | None, *, version: int = 1,
             driver: CgroupDriver = CgroupDriver.CGROUPFS, gi: GroupIdentityFacts | None = None) -> NodeFacts:
    return NodeFacts(HostPaths.under(str(tmp_path)), version, driver, nodeslo=slo,
                     group_identity=gi or GroupIdentityFacts(bvt_file=True, sysctl=1))


def bvt_writes(p: PodInfo, facts: NodeFacts) -> list[tuple[str, str]]:
    r = stages.run_pod_sandbox(p, facts, OPTIONS)
    assert not r.adjustment and r.failures == []
    return [(w.path, w.value) for w in r.plan.writes]


def bvt_of(p: PodInfo, facts: NodeFacts) -> str | None:
    writes = bvt_writes(p, facts)
    assert len(writes) <= 1
    return writes[0][1] if writes else None


# ---- GroupIdentity ------------------------------------------------------------------------------------------------

ALL_ON = nodeslo(lsr=True, ls=True, be=True)


@pytest.mark.parametrize(("label", "qos", "value"), [
    ("LSE", K8sQoS.GUARANTEED, "2"), ("LSR", K8sQoS.GUARANTEED, "2"), ("LS", K8sQoS.BURSTABLE, "2"),
    ("BE", K8sQoS.BESTEFFORT, "-1"), (None, K8sQoS.GUARANTEED, "2"), (None, K8sQoS.BURSTABLE, "2"),
    (None, K8sQoS.BESTEFFORT, "-1"), ("SYSTEM", K8sQoS.BURSTABLE, "2"), ("bogus", K8sQoS.BESTEFFORT, "-1"),
    # the koordinator label wins over the cgroup parent's kube QoS
    ("BE", K8sQoS.BURSTABLE, "-1"), ("LS", K8sQoS.BESTEFFORT, "2"),
])
def test_bvt_per_qos_class_with_every_class_enabled(tmp_path: Path, label: str | None, qos: K8sQoS,
                                                    value: str) -> None:
    assert bvt_of(pod(label=label, qos=qos), gi_facts(tmp_path, ALL_ON)) == value


@pytest.mark.parametrize(("slo", "expected"), [
    # only BE enabled: the others are 0, unlabelled Guaranteed falls back to LS's (disabled) value
    (nodeslo(be=True), {("LSR", K8sQoS.GUARANTEED): "0", ("LS", K8sQoS.BURSTABLE): "0",
                        ("BE", K8sQoS.BESTEFFORT): "-1", (None, K8sQoS.GUARANTEED): "0"}),
    # only LS enabled: unlabelled Guaranteed takes LS's value
    (nodeslo(ls=True), {("LSR", K8sQoS.GUARANTEED): "0", (None, K8sQoS.GUARANTEED): "2",
                        ("BE", K8sQoS.BESTEFFORT): "0"}),
    # the coreSched policy turns every class off (the sysctl is on, so 0s are written)
    (nodeslo("coreSched", lsr=True, ls=True, be=True), {("LS", K8sQoS.BURSTABLE): "0",
                                                        ("BE", K8sQoS.BESTEFFORT): "0"}),
])
def test_bvt_follows_the_nodeslo(tmp_path: Path, slo: dict[str, Any],
                                 expected: dict[tuple[str | None, K8sQoS], str]) -> None:
    facts = gi_facts(tmp_path, slo)
    assert {k: bvt_of(pod(label=k[0], qos=k[1]), facts) for k in expected} == expected


@pytest.mark.parametrize(("annotation", "label", "value"), [
    ('{"enable":true,"groupIdentity":-1}', "LS", "-1"),
    ('{"enable":false}', "LS", "0"),
    ('{"groupIdentity":-1}', "LS", "0"),
    ('{"enable":true}', "LS", "2"),
    ('{"enable":true,"groupIdentity":-1}', "LSR", "2"),  # only LS pods may change their class's value
    ('{"enable":true,"groupIdentity":2}', "BE", "-1"),
])
def test_cpuqos_annotation(tmp_path: Path, annotation: str, label: str, value: str) -> None:
    p = pod(label=label, qos=K8sQoS.BURSTABLE, annotations={"koordinator.sh/cpuQOS": annotation})
    assert bvt_of(p, gi_facts(tmp_path, ALL_ON)) == value


def test_a_malformed_cpuqos_annotation_is_reported_and_writes_nothing(tmp_path: Path) -> None:
    p = pod(label="LS", annotations={"koordinator.sh/cpuQOS": '{"enable":true,"groupIdentity":5}'})
    r = stages.run_pod_sandbox(p, gi_facts(tmp_path, ALL_ON), OPTIONS)
    assert r.plan.writes == []
    (f,) = r.failures
    assert (f.field, f.name, f.uid, f.reason) == ("annotations[koordinator.sh/cpuQOS].groupIdentity", "default/web",
                                                  UID, "RuntimeHookFailed")
    assert f.message.startswith("GroupIdentity: bad group identity value: 5")


def test_where_bvt_is_written(tmp_path: Path) -> None:
    cg = tmp_path / "sys/fs/cgroup"
    for driver in CgroupDriver:
        for qos in K8sQoS:
            rel = pod_dir(driver, qos, UID)
            assert bvt_writes(pod(qos=qos, driver=driver), gi_facts(tmp_path, ALL_ON, driver=driver)) == [
                (f"{cg}/cpu/{rel}/cpu.bvt_warp_ns", "-1" if qos is K8sQoS.BESTEFFORT else "2")]
    rel = pod_dir(CgroupDriver.SYSTEMD, K8sQoS.BURSTABLE, UID)
    facts = gi_facts(tmp_path, ALL_ON, version=2, driver=CgroupDriver.SYSTEMD)
    assert bvt_writes(pod(driver=CgroupDriver.SYSTEMD), facts) == [(f"{cg}/{rel}/cpu.bvt_warp_ns", "2")]


def test_systemd_slice_names_expand_to_the_pod_dir() -> None:
    """The §6.1 quirk decided: a bare slice name is the pod's dir once systemd's nesting is spelled out."""
    for qos in K8sQoS:
        rel = pod_dir(CgroupDriver.SYSTEMD, qos, UID)
        assert pod_cgroup_dir(rel.rsplit("/", 1)[1]) == rel
        assert pod_cgroup_dir("/" + rel + "/") == rel  # a full path is taken as it is
    assert pod_cgroup_dir("/kubepods/besteffort/pod" + UID) == "kubepods/besteffort/pod" + UID


@pytest.mark.parametrize("parent", ["", "  ", "/", "-.slice", "kubepods--pod1.slice", "/kubepods/../etc",
                                    "kubepods/./x", "kubepods//x", "kube pods/x"])
def test_a_cgroup_parent_that_names_no_pod_dir(tmp_path: Path, parent: str) -> None:
    r = stages.run_pod_sandbox(pod(parent=parent), gi_facts(tmp_path, ALL_ON), OPTIONS)
    assert r.plan.writes == []
    assert [f.field for f in r.failures] == ["linux.cgroup_parent"]


def test_nothing_without_group_identity_a_nodeslo_or_any_switch(tmp_path: Path) -> None:
    p = pod(label="BE", qos=K8sQoS.BESTEFFORT)
    assert bvt_writes(p, gi_facts(tmp_path, ALL_ON, gi=GroupIdentityFacts(False, None))) == []
    assert bvt_writes(p, gi_facts(tmp_path, None)) == []  # no NodeSLO received yet: no rule
    off = nodeslo()
    assert bvt_writes(p, gi_facts(tmp_path, off, gi=GroupIdentityFacts(True, 0))) == []
    # a disabled rule with the sysctl on (or absent) resets to 0
    assert bvt_of(p, gi_facts(tmp_path, off, gi=GroupIdentityFacts(True, 1))) == "0"
    assert bvt_of(p, gi_facts(tmp_path, off, gi=GroupIdentityFacts(True, None))) == "0"
    # the sysctl alone (no cgroup file at the root) is support enough
    assert bvt_of(p, gi_facts(tmp_path, ALL_ON, gi=GroupIdentityFacts(False, 1))) == "-1"
    # the gate
    r = stages.run_pod_sandbox(p, gi_facts(tmp_path, ALL_ON),
                               HookOptions(gates={"GroupIdentity": False, "CPUSetAllocator": False,
                                                     "BatchResource": False}))
    assert r.plan.writes == [] and r.timings == []


def test_reader_and_executor_on_a_simulated_anolis_node(tmp_path: Path) -> None:
    """The facts come from the files, the write goes through the one executor."""
    paths = HostPaths.under(str(tmp_path))
    cpu = tmp_path / "sys/fs/cgroup/cpu"
    root = cpu / qos_dir(CgroupDriver.CGROUPFS, K8sQoS.GUARANTEED)
    pod_cg = cpu / pod_dir(CgroupDriver.CGROUPFS, K8sQoS.BESTEFFORT, UID)
    pod_cg.mkdir(parents=True)
    (root / "cpu.bvt_warp_ns").write_text("0\n")
    (pod_cg / "cpu.bvt_warp_ns").write_text("0\n")
    sysctl = tmp_path / "proc/sys/kernel/sched_group_identity_enabled"
    sysctl.parent.mkdir(parents=True)
    sysctl.write_text("1\n")
    slo = ALL_ON
    reader = NodeFactsReader(paths, 1, CgroupDriver.CGROUPFS, lambda: slo)
    facts = reader.facts()
    assert facts.group_identity == GroupIdentityFacts(True, 1)
    assert reader.facts() is facts  # memory only while nothing changed
    r = stages.run_pod_sandbox(pod(label="BE", qos=K8sQoS.BESTEFFORT), facts, OPTIONS)
    results = Executor(paths, 1, Health()).apply(r.plan)
    assert [x.result for x in results] == ["written"]
    assert (pod_cg / "cpu.bvt_warp_ns").read_text() == "-1"


# ---- Resctrl -----------------------------------------------------------------------------------------------------

SPEC_EXAMPLE = ('{"llc":{"schemata":{"range":[20,80]},"schemataPerCache":[{"cacheID":0,"range":[20,30]}]},'
                '"mb":{"schemata":{"percent":35},"schemataPerCache":[{"cacheID":0,"percent":80}]}}')
GROUP = f"koordlet-{UID}"


def rc_facts(tmp_path: Path, *, groups: tuple[str, ...] = (), vendor: str = "GenuineIntel", **kw: Any) -> NodeFacts:
    rf = ResctrlFacts(**{"supported": True, "vendor": vendor, "mounted": True, "cbm_mask": 0x7ff, "cache_ids": (0, 1),
                         "has_mb": True, "num_closids": 16, **kw})
    return NodeFacts(HostPaths.under(str(tmp_path)), resctrl=rf, resctrl_groups=frozenset(groups))


def rc_pod(annotation: str | None) -> PodInfo:
    return pod(annotations={} if annotation is None else {"node.koordinator.sh/resctrl": annotation})


def test_the_worked_example_plans_the_group_then_its_schemata(tmp_path: Path) -> None:
    r = stages.run_pod_sandbox(rc_pod(SPEC_EXAMPLE), rc_facts(tmp_path), OPTIONS)
    base = f"{tmp_path}/sys/fs/resctrl/{GROUP}"
    assert r.failures == [] and not r.adjustment
    assert [(w.path, w.op, w.value) for w in r.plan.writes] == [
        (base, "mkdir", ""),
        (f"{base}/schemata", "write", "L3:0=8;1=1f8;\n"),
        (f"{base}/schemata", "write", "MB:0=80;1=40;\n"),
    ]
    # an existing group gets the schemata only
    r = stages.run_pod_sandbox(rc_pod(SPEC_EXAMPLE), rc_facts(tmp_path, groups=(GROUP,)), OPTIONS)
    assert [w.op for w in r.plan.writes] == ["write", "write"]


def test_amd_mb_only(tmp_path: Path) -> None:
    r = stages.run_pod_sandbox(rc_pod('{"mb":{"schemata":{"percent":100}}}'),
                               rc_facts(tmp_path, vendor="AuthenticAMD"), OPTIONS)
    assert [w.value for w in r.plan.writes] == ["", "MB:0=2048;1=2048;\n"]


def test_rdt_class_only_for_an_annotated_pod_whose_group_exists(tmp_path: Path) -> None:
    with_group = rc_facts(tmp_path, groups=("LS", GROUP))
    r = stages.create_container(rc_pod(SPEC_EXAMPLE), CONTAINER, with_group, OPTIONS)
    assert r.adjustment == Adjustment(rdt_class=GROUP) and r.failures == []
    assert not stages.create_container(rc_pod(None), CONTAINER, with_group, OPTIONS).adjustment
    # not (yet) known: one refresh, then no class (the runtime refuses a container whose class does not exist)
    r = stages.create_container(rc_pod(SPEC_EXAMPLE), CONTAINER, rc_facts(tmp_path), OPTIONS)
    assert r.adjustment.rdt_class is None and r.stale_facts == {FACT_RESCTRL}
    assert [f.field for f in r.failures] == ["annotations[node.koordinator.sh/resctrl]"]
    # a node without resctrl: nothing, and no Event per container (RunPodSandbox reported it)
    r = stages.create_container(rc_pod(SPEC_EXAMPLE), CONTAINER, rc_facts(tmp_path, supported=False), OPTIONS)
    assert not r.adjustment and r.failures == [] and r.stale_facts == frozenset()


def test_remove_pod_sandbox_removes_the_group(tmp_path: Path) -> None:
    r = stages.remove_pod_sandbox(rc_pod(SPEC_EXAMPLE), rc_facts(tmp_path), OPTIONS)
    assert [(w.op, w.path) for w in r.plan.writes] == [("rmdir", f"{tmp_path}/sys/fs/resctrl/{GROUP}")]
    assert stages.remove_pod_sandbox(rc_pod(None), rc_facts(tmp_path), OPTIONS).plan.writes == []
    assert len(stages.remove_pod_sandbox(rc_pod(None), rc_facts(tmp_path, groups=(GROUP,)), OPTIONS).plan.writes) == 1
    assert stages.remove_pod_sandbox(rc_pod(SPEC_EXAMPLE), rc_facts(tmp_path, mounted=False), OPTIONS).plan.writes == []


@pytest.mark.parametrize(("annotation", "facts_kw", "fld", "needle"), [
    ('{"llc":{"schemata":{"range":[80,20]}}}', {}, "llc.schemata.range", "is not 0 <= start < end <= 100"),
    ('{"mb":{"schemataPerCache":[{"cacheID":3,"percent":50}]}}', {}, "mb.schemataPerCache[0].cacheID",
     "not one of this node's"),
    ("{", {}, "", "invalid JSON"),
    ("{}", {"supported": False}, "", "no resctrl"),
    ("{}", {"cbm_mask": 0}, "", "unusable"),
    ("{}", {"num_closids": 3}, "", "all are in use"),
])
def test_resctrl_failures_plan_nothing(tmp_path: Path, annotation: str, facts_kw: dict[str, Any], fld: str,
                                       needle: str) -> None:
    facts = rc_facts(tmp_path, groups=("LS", "BE"), **facts_kw)
    r = stages.run_pod_sandbox(rc_pod(annotation), facts, OPTIONS)
    assert r.plan.writes == []
    (f,) = r.failures
    assert f.field == "annotations[node.koordinator.sh/resctrl]" + (f".{fld}" if fld else "")
    assert needle in f.message and f.message.startswith("Resctrl: ")


def test_not_mounted_asks_for_a_refresh(tmp_path: Path) -> None:
    r = stages.run_pod_sandbox(rc_pod("{}"), rc_facts(tmp_path, mounted=False), OPTIONS)
    assert r.plan.writes == [] and r.stale_facts == {FACT_RESCTRL}


def build_resctrl(root: Path, groups: tuple[str, ...] = ()) -> HostPaths:
    proc = root / "proc"
    proc.mkdir(parents=True)
    (proc / "cpuinfo").write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu cat_l3 mba\n\n")
    rc = root / "sys/fs/resctrl"
    (rc / "info/L3").mkdir(parents=True)
    (rc / "info/L3/cbm_mask").write_text("7ff\n")
    (rc / "info/L3/num_closids").write_text("16\n")
    (rc / "schemata").write_text("    L3:0=7ff;1=7ff\n    MB:0=100;1=100\n")
    for g in groups:
        (rc / g).mkdir()
        (rc / g / "schemata").write_text("    L3:0=7ff;1=7ff\n")
    return HostPaths.under(str(root))


def test_resctrl_facts_are_read_once_and_follow_the_plan(tmp_path: Path) -> None:
    paths = build_resctrl(tmp_path, ("LS",))
    reader = NodeFactsReader(paths, 1, CgroupDriver.CGROUPFS)
    facts = reader.facts()
    assert (facts.resctrl.supported, facts.resctrl.mounted, facts.resctrl.cache_ids, facts.resctrl_groups) == (
        True, True, (0, 1), frozenset({"LS"}))
    r = stages.run_pod_sandbox(rc_pod(SPEC_EXAMPLE), facts, OPTIONS)
    results = Executor(paths, 1, Health()).apply(r.plan)
    assert results[0].result == "written"  # the group (a plain dir here: no kernel makes its files)
    reader.observe(results)
    facts = reader.facts()
    assert GROUP in facts.resctrl_groups
    assert stages.create_container(rc_pod(SPEC_EXAMPLE), CONTAINER, facts, OPTIONS).adjustment.rdt_class == GROUP
    r = stages.remove_pod_sandbox(rc_pod(SPEC_EXAMPLE), facts, OPTIONS)
    reader.observe(Executor(paths, 1, Health()).apply(r.plan))
    assert GROUP not in reader.facts().resctrl_groups
    # a group made by someone else shows up on refresh
    (tmp_path / "sys/fs/resctrl" / GROUP).mkdir()
    (tmp_path / "sys/fs/resctrl" / GROUP / "schemata").write_text("")
    reader.refresh({FACT_RESCTRL}, force=True)
    assert GROUP in reader.facts().resctrl_groups


def test_observe_ignores_other_writes(tmp_path: Path) -> None:
    reader = NodeFactsReader(build_resctrl(tmp_path), 1)
    before = reader.facts()

    class R:
        def __init__(self, w: Write, result: str) -> None:
            self.write, self.result = w, result

    reader.observe([R(Write(f"{tmp_path}/sys/fs/resctrl/x/schemata", "", "", op="write"), "written"),
                    R(Write(f"{tmp_path}/sys/fs/cgroup/cpu/x", "", "", op="mkdir"), "written"),
                    R(Write(f"{tmp_path}/sys/fs/resctrl/koordlet-y", "", "", op="mkdir"), "error")])
    assert reader.facts() is before


def test_stage_json_of_a_failure(tmp_path: Path) -> None:
    r = stages.run_pod_sandbox(rc_pod("[]"), rc_facts(tmp_path), OPTIONS)
    assert json.loads(json.dumps(r.failures[0].as_json()))["object"] == "Pod/default/web"
