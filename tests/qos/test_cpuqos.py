"""CPU QoS planner: the bvt rule tables, the cpuQOS annotation, where values go, cpu.idle without group identity."""

from __future__ import annotations

import errno
import logging
import os
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from apis.core.errors import HostReadError, InvalidInput
from apis.extension.pod import PodView
from apis.slo.decode import decode_nodeslo, nodeslo_config
from apis.slo.types import NodeSLOSpec
from koordlet.collectors.hostapps import host_apps
from koordlet.health import Health
from koordlet.host.driver import CgroupDriver, K8sQoS, pod_dir, qos_dir
from koordlet.host.paths import HostPaths
from koordlet.host.resources import resource_path
from koordlet.nri.hooks.model import PodInfo
from koordlet.qos import cpuqos
from koordlet.qos.cpuqos import (
    AnnotationError,
    bvt_rule,
    capabilities,
    kubelet_pod_cpu_shares,
    parse_cpuqos_annotation,
    plan,
    pod_value,
    read_facts,
)
from koordlet.qos.executor import Executor
from koordlet.qos.feature import record
from koordlet.qos.model import Plan
from koordlet.qos.state import QoSState
from koordlet.states.model import PodMeta
from koordlet.states.pods import pod_meta

from conftest import real_v1_root, require
from simhost import SimHost, make_pod

G, B, BE = K8sQoS.GUARANTEED, K8sQoS.BURSTABLE, K8sQoS.BESTEFFORT
ANN = "koordinator.sh/cpuQOS"


# ---- builders -----------------------------------------------------------------------------------------------------


def slo(*, lsr: bool = True, ls: bool = True, be: bool = True, policy: str | None = None,
        host_applications: list[dict[str, Any]] | None = None, **cpu_qos: dict[str, Any]) -> NodeSLOSpec:
    """A merged NodeSLO spec with CPU QoS enabled per class; `cpu_qos` overrides a class's cpuQOS fields."""
    strategy: dict[str, Any] = {}
    for key, on in (("lsrClass", lsr), ("lsClass", ls), ("beClass", be)):
        strategy[key] = {"cpuQOS": {"enable": on, **cpu_qos.get(key, {})}}
    if policy is not None:
        strategy["policies"] = {"cpuPolicy": policy}
    return nodeslo_config({"resourceQOSStrategy": strategy, "hostApplications": host_applications})


def pod(name: str, k8s_qos: str = "Burstable", label: str | None = None, annotation: str | None = None,
        driver: CgroupDriver = CgroupDriver.CGROUPFS, n_containers: int = 1, uid: str | None = None,
        **spec: Any) -> PodMeta:
    """A pod as the agent sees it; `spec` replaces fields of the pod spec (containers with resources, ...)."""
    raw: dict[str, Any] = make_pod(name, uid or str(uuid.uuid4()), k8s_qos, containers=n_containers,
                                   labels={"koordinator.sh/qosClass": label} if label else None)
    if annotation is not None:
        raw["metadata"]["annotations"] = {ANN: annotation}
    raw["spec"].update(spec)
    return pod_meta(raw, driver, Health())


def state(host: SimHost | None, pods: list[PodMeta], spec: NodeSLOSpec, *, present: bool = True,
          paths: HostPaths | None = None, version: int = 1,
          driver: CgroupDriver = CgroupDriver.CGROUPFS) -> QoSState:
    if host is not None:
        paths, version, driver = host.paths, host.version, host.driver
    assert paths is not None
    return QoSState(paths, version, driver, pods, spec, host_apps(spec.host_applications, driver), present)


def cg_file(host: SimHost, resource: str, rel: str) -> Path:
    return Path(resource_path(host.version, host.paths, resource, rel))


def put(host: SimHost, rel: str, **files: str) -> None:
    """Create a cgroup dir on the simulated host with the given resource files (names with _ for .)."""
    host._mkdir(rel)
    for name, value in files.items():
        path = cg_file(host, name.replace("__", "."), rel)
        path.write_text(value + "\n")


def read(host: SimHost, resource: str, rel: str) -> str:
    return cg_file(host, resource, rel).read_text().strip()


def values_by_path(p: Plan) -> dict[str, str]:
    return {w.path: w.value for w in p.writes}


def value_of(rule: cpuqos.Rule, p: PodMeta) -> int:
    """The reconciler's bvt of a pod of the pod list (its own kube QoS)."""
    return pod_value(rule, p, K8sQoS(p.k8s_qos))


def apply(st: QoSState, ex: Executor, **kw: Any) -> list[str]:
    """One pass: facts, plan, apply; the results that changed a file."""
    results = ex.apply(plan(st, read_facts(st), **kw))
    bad = [r for r in results if r.result in ("invalid", "error")]
    assert not bad, bad
    return [r.write.path for r in results if r.result == "written"]


# ---- the rule (spec §2.2) -----------------------------------------------------------------------------------------


def test_rule_all_enabled_defaults() -> None:
    rule = bvt_rule(slo())
    assert rule.enable
    assert dict(rule.kube_dir) == {G: 0, B: 2, BE: -1}
    cases = [("LSR", "Guaranteed", 2), ("LSE", "Guaranteed", 2), ("LS", "Burstable", 2), ("BE", "BestEffort", -1),
             (None, "Guaranteed", 2), (None, "Burstable", 2), (None, "BestEffort", -1),
             ("SYSTEM", "Guaranteed", 2), ("SYSTEM", "BestEffort", -1)]
    for label, k8s, want in cases:
        assert value_of(rule, pod("p", k8s, label)) == want, (label, k8s)


def test_rule_defaults_disabled_is_all_zero() -> None:
    rule = bvt_rule(nodeslo_config(None))
    assert not rule.enable
    assert set(rule.kube_dir.values()) == set(rule.kube_pod.values()) == set(rule.pod_qos.values()) == {0}


@pytest.mark.parametrize(("lsr", "ls", "be", "pods"), [
    # LSR off, LS on: unlabelled Guaranteed pods take LS's value, LSR-labelled pods 0
    (False, True, True, {("LSR", "Guaranteed"): 0, (None, "Guaranteed"): 2, ("LS", "Burstable"): 2}),
    # only BE on: the burstable dir and LS pods 0, BE -1
    (False, False, True, {(None, "Guaranteed"): 0, ("LS", "Burstable"): 0, ("BE", "BestEffort"): -1}),
    # only LSR on
    (True, False, False, {(None, "Guaranteed"): 2, (None, "Burstable"): 0, ("BE", "BestEffort"): 0}),
])
def test_rule_per_class_enable(lsr: bool, ls: bool, be: bool, pods: dict[tuple[str | None, str], int]) -> None:
    rule = bvt_rule(slo(lsr=lsr, ls=ls, be=be))
    assert rule.enable
    assert dict(rule.kube_dir) == {G: 0, B: 2 if ls else 0, BE: -1 if be else 0}
    for (label, k8s), want in pods.items():
        assert value_of(rule, pod("p", k8s, label)) == want, (label, k8s)


def test_rule_custom_values_and_core_sched_policy() -> None:
    rule = bvt_rule(slo(lsClass={"groupIdentity": 1}, beClass={"groupIdentity": 0}))
    assert dict(rule.kube_dir) == {G: 0, B: 1, BE: 0}
    cs = bvt_rule(slo(policy="coreSched", beClass={"schedIdle": 1}))
    assert not cs.enable and cs.core_sched_enable
    assert set(cs.kube_dir.values()) == set(cs.pod_qos.values()) == {0}
    assert dict(cs.dir_idle) == {G: 0, B: 0, BE: 1}
    # schedIdle counts only under the coreSched policy, and a disabled class has the None values (schedIdle 0)
    assert set(bvt_rule(slo(beClass={"schedIdle": 1})).dir_idle.values()) == {0}
    assert set(bvt_rule(slo(policy="coreSched", be=False, beClass={"schedIdle": 1})).dir_idle.values()) == {0}
    # Guaranteed dir: LSR's params if LSR is enabled, else LS's
    lsr_idle = bvt_rule(slo(policy="coreSched", lsrClass={"schedIdle": 1}))
    assert lsr_idle.dir_idle[G] == 1
    assert bvt_rule(slo(policy="coreSched", lsr=False, lsClass={"schedIdle": 1})).dir_idle[G] == 1


def test_malformed_class_is_refused_before_any_rule() -> None:
    """A class the rule could not use refuses the whole NodeSLO when it is received, naming the fields: no planner
    (nor the runtime hook) ever builds a rule from it."""
    obj = {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "metadata": {"name": "node-1"},
           "spec": {"resourceQOSStrategy": {"beClass": {"cpuQOS": {"enable": True, "groupIdentity": 7}},
                                            "lsrClass": {"cpuQOS": {"enable": "yes"}},
                                            "policies": {"cpuPolicy": "magic"}}}}
    decoded = decode_nodeslo(obj)
    assert decoded.spec is None
    assert [p.split(":")[0] for p in decoded.problems] == [
        "spec.resourceQOSStrategy.policies.cpuPolicy", "spec.resourceQOSStrategy.lsrClass.cpuQOS.enable",
        "spec.resourceQOSStrategy.beClass.cpuQOS.groupIdentity"]


# ---- the annotation (spec §2.4) -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("label", "annotation", "want"), [
    ("LS", '{"enable":true,"groupIdentity":-1}', -1),
    ("LS", '{"enable":false}', 0),
    ("LS", '{"groupIdentity":-1}', 0),  # no enable
    ("LS", '{"enable":true}', 2),
    ("LS", '{"enable":true,"groupIdentity":1}', 1),
    ("LS", "null", 0),  # Go: null decodes to an empty config, so enable is absent
    ("LS", '{"Enable":true,"GROUPIDENTITY":-1}', -1),  # Go matches keys case-insensitively
    ("LS", '{"enable":true,"groupIdentity":-1,"groupIdentity":null}', 2),  # the last one wins; null = absent
    ("LS", '{"enable":true,"groupIdentity":-1,"unknown":[1]}', -1),
    # the annotation is ignored for every class but LS, malformed or not
    ("LSR", '{"enable":true,"groupIdentity":-1}', 2),
    ("BE", '{"enable":true,"groupIdentity":2}', -1),
    (None, '{"enable":true,"groupIdentity":-1}', 2),
    ("BE", "{not json", -1),
])
def test_annotation(label: str | None, annotation: str, want: int) -> None:
    rule = bvt_rule(slo())
    assert value_of(rule, pod("p", "BestEffort" if label == "BE" else "Burstable", label, annotation)) == want


def test_annotation_lets_ls_pods_yield_even_when_ls_is_disabled() -> None:
    rule = bvt_rule(slo(lsr=False, ls=False, be=False))
    assert value_of(rule, pod("p", "Burstable", "LS", '{"enable":true,"groupIdentity":-1}')) == -1


@pytest.mark.parametrize(("annotation", "field"), [
    ("{", ""), ("[]", ""), ('"x"', ""), ("", ""),
    ('{"groupIdentity":3}', ".groupIdentity"), ('{"groupIdentity":-2}', ".groupIdentity"),
    ('{"groupIdentity":1.0}', ".groupIdentity"), ('{"groupIdentity":"1"}', ".groupIdentity"),
    ('{"groupIdentity":true}', ".groupIdentity"), ('{"groupIdentity":NaN}', ""),
    ('{"enable":"yes"}', ".enable"), ('{"enable":1}', ".enable"), ('{"schedIdle":{}}', ".schedIdle"),
])
def test_malformed_annotation(annotation: str, field: str) -> None:
    p = pod("web", "Burstable", "LS", annotation)
    with pytest.raises(AnnotationError) as e:
        value_of(bvt_rule(slo()), p)
    assert e.value.error.field == f"annotations[{ANN}]{field}"
    assert e.value.error.kind == "Pod" and e.value.error.name == "default/web" and e.value.error.uid == p.uid


@pytest.mark.parametrize(("label", "annotation"), [
    ("LS", '{"enable":true,"groupIdentity":-1}'), ("LS", '{"enable":false}'), ("LS", None), ("BE", None),
    (None, '{"enable":true,"groupIdentity":-1}'), ("LSR", "{not json"), ("LS", '{"groupIdentity":3}'),
])
def test_a_runtime_hook_request_and_the_pod_list_get_the_same_value(label: str | None,
                                                                    annotation: str | None) -> None:
    """pod_value reads a PodView: the pod list's PodMeta and an NRI request's PodInfo, with the same labels and
    annotations, get the same value or the same error."""
    meta = pod("web", "Burstable", label, annotation)
    info = PodInfo(sandbox_id="s", uid=meta.uid, namespace=meta.namespace, name=meta.name,
                   labels={"koordinator.sh/qosClass": label} if label else {},
                   annotations={ANN: annotation} if annotation is not None else {})
    rule = bvt_rule(slo())

    def outcome(p: PodView) -> int | str:
        try:
            return pod_value(rule, p, K8sQoS.BURSTABLE)
        except AnnotationError as e:
            return f"{e.error.name} {e.error.field} {e.error.uid}"

    assert outcome(meta) == outcome(info)


def test_parse_annotation_fields() -> None:
    cfg = parse_cpuqos_annotation('{"enable":true,"groupIdentity":2,"schedIdle":1,"coreExpeller":false}')
    assert (cfg.enable, cfg.group_identity, cfg.sched_idle, cfg.core_expeller) == (True, 2, 1, False)


# ---- where bvt goes (spec §2.3), on simulated hosts -----------------------------------------------------------


def _bvt_host(host: SimHost, pods: list[PodMeta], initial: str = "0") -> None:
    for qos in (G, B, BE):
        put(host, qos_dir(host.driver, qos), cpu__bvt_warp_ns=initial, cpu__idle="0")
    for p in pods:
        put(host, p.cgroup_dir, cpu__bvt_warp_ns=initial)
        for c in p.containers:
            assert c.cgroup_dir is not None
            put(host, c.cgroup_dir, cpu__bvt_warp_ns=initial)


def test_bvt_everywhere_then_idempotent(simhost: SimHost) -> None:
    d = simhost.driver
    pods = [pod("lsr", "Guaranteed", "LSR", driver=d), pod("ls", "Burstable", "LS", driver=d),
            pod("be", "BestEffort", "BE", driver=d, n_containers=2), pod("plain", "BestEffort", driver=d),
            pod("ls-yield", "Burstable", "LS", '{"enable":true,"groupIdentity":-1}', driver=d)]
    _bvt_host(simhost, pods)
    sandbox = f"{pods[2].cgroup_dir}/{'sandbox' if d is CgroupDriver.CGROUPFS else 'cri-containerd-sandbox.scope'}"
    put(simhost, sandbox, cpu__bvt_warp_ns="0")  # a dir on disk that is not in containerStatuses (the pause one)
    kernel = simhost.root / "proc/sys/kernel"
    kernel.mkdir(parents=True)
    (kernel / "sched_group_identity_enabled").write_text("0\n")
    (kernel / "sched_core").write_text("1\n")
    st = state(simhost, pods, slo())
    ex = Executor(simhost.paths, simhost.version, Health())
    f = read_facts(st)
    assert f.mechanism == "group-identity" and f.group_identity_sysctl == 0 and f.core_sched_sysctl == 1
    written = apply(st, ex)
    assert written and (kernel / "sched_group_identity_enabled").read_text() == "1"
    assert (kernel / "sched_core").read_text() == "0"
    want = {qos_dir(d, G): "0", qos_dir(d, B): "2", qos_dir(d, BE): "-1",
            pods[0].cgroup_dir: "2", pods[1].cgroup_dir: "2", pods[2].cgroup_dir: "-1", pods[3].cgroup_dir: "-1",
            pods[4].cgroup_dir: "-1", sandbox: "-1"}
    for p in pods:
        for c in p.containers:
            assert c.cgroup_dir is not None
            want[c.cgroup_dir] = want[p.cgroup_dir]
    assert {rel: read(simhost, "cpu.bvt_warp_ns", rel) for rel in want} == want
    # a second pass over the unchanged node writes nothing, with or without the executor's cache
    assert apply(st, ex) == []
    assert apply(st, Executor(simhost.paths, simhost.version, Health())) == []

    # disabled: the sysctl is still 1, so every value is actively reset to 0 (spec §2.2 guard), except where the
    # LS pod's own annotation asks for -1
    off = state(simhost, pods, slo(lsr=False, ls=False, be=False))
    apply(off, ex)
    yielding = {pods[4].cgroup_dir, *(str(c.cgroup_dir) for c in pods[4].containers)}
    assert {rel: read(simhost, "cpu.bvt_warp_ns", rel) for rel in want} == {
        rel: "-1" if rel in yielding else "0" for rel in want}
    assert (kernel / "sched_group_identity_enabled").read_text() == "1"  # upstream never turns it off
    # with the sysctl off as well, nothing is written at all
    (kernel / "sched_group_identity_enabled").write_text("0\n")
    assert plan(off, read_facts(off)).writes == []


def test_bvt_without_sysctl_resets_when_disabled(tmp_path: Path) -> None:
    host = SimHost(tmp_path / "h", 1, CgroupDriver.CGROUPFS).setup()
    p = pod("be", "BestEffort", "BE")
    _bvt_host(host, [p], initial="-1")
    st = state(host, [p], slo(be=False))
    f = read_facts(st)
    assert f.mechanism == "group-identity" and f.group_identity_sysctl is None  # older Anolis: counts as on
    apply(st, Executor(host.paths, 1, Health()))
    assert read(host, "cpu.bvt_warp_ns", p.cgroup_dir) == "0" and read(host, "cpu.bvt_warp_ns", qos_dir(host.driver,
                                                                                                        BE)) == "0"


def test_dangling_pod_dirs_and_host_apps(tmp_path: Path) -> None:
    host = SimHost(tmp_path / "h", 1, CgroupDriver.SYSTEMD).setup()
    known = pod("ls", "Burstable", "LS", driver=host.driver)
    _bvt_host(host, [known])
    gone_be = pod_dir(host.driver, BE, "0000-dead")
    gone_bu = pod_dir(host.driver, B, "0000-beef")
    gone_g = pod_dir(host.driver, G, "0000-cafe")
    for rel in (gone_be, gone_bu, gone_g, f"{gone_be}/cri-containerd-abc.scope", "kubepods.slice/other.slice"):
        put(host, rel, cpu__bvt_warp_ns="0")
    spec = slo(host_applications=[{"name": "nginx", "qos": "LS"}, {"name": "batch", "qos": "BE"},
                                  {"name": "sys", "qos": "SYSTEM", "cgroupPath": {"base": "CgroupRoot",
                                                                                 "parentDir": "host-system"}}])
    for rel in ("host-latency-sensitive/nginx", "host-best-effort/batch", "host-system"):
        put(host, rel, cpu__bvt_warp_ns="0")
    st = state(host, [known], spec)
    f = read_facts(st)
    assert dict(f.dangling) == {G: (gone_g,), B: (gone_bu,), BE: (gone_be,)}  # QoS dirs and other.slice excluded
    apply(st, Executor(host.paths, 1, Health()))
    got = {rel: read(host, "cpu.bvt_warp_ns", rel) for rel in
           (gone_be, f"{gone_be}/cri-containerd-abc.scope", gone_bu, gone_g, "kubepods.slice/other.slice",
            "host-latency-sensitive/nginx", "host-best-effort/batch", "host-system")}
    assert got == {gone_be: "-1", f"{gone_be}/cri-containerd-abc.scope": "-1", gone_bu: "2", gone_g: "0",
                   "kubepods.slice/other.slice": "0", "host-latency-sensitive/nginx": "2",
                   "host-best-effort/batch": "-1", "host-system": "0"}


def test_malformed_annotation_skips_only_that_pod(tmp_path: Path) -> None:
    host = SimHost(tmp_path / "h", 1, CgroupDriver.CGROUPFS).setup()
    bad = pod("bad", "Burstable", "LS", '{"enable":true,"groupIdentity":9}')
    good = [pod("ok", "Burstable", "LS"), pod("be", "BestEffort", "BE")]
    _bvt_host(host, [bad, *good])
    st = state(host, [bad, *good], slo())
    p = plan(st, read_facts(st))
    assert [(e.kind, e.name, e.field) for e in p.errors] == [
        ("Pod", "default/bad", f"annotations[{ANN}].groupIdentity")]
    paths = values_by_path(p)
    assert cg_file(host, "cpu.bvt_warp_ns", bad.cgroup_dir).as_posix() not in paths
    assert all(c.cgroup_dir is None or cg_file(host, "cpu.bvt_warp_ns", c.cgroup_dir).as_posix() not in paths
               for c in bad.containers)
    assert paths[cg_file(host, "cpu.bvt_warp_ns", good[0].cgroup_dir).as_posix()] == "2"
    assert paths[cg_file(host, "cpu.bvt_warp_ns", good[1].cgroup_dir).as_posix()] == "-1"


def test_an_out_of_range_class_value_never_reaches_a_file(tmp_path: Path) -> None:
    """The decoder refuses a groupIdentity outside [-1, 2]; a spec built past it still has its write refused by the
    executor's validation of cpu.bvt_warp_ns, and the other values are written."""
    host = SimHost(tmp_path / "h", 1, CgroupDriver.CGROUPFS).setup()
    pods = [pod("ls", "Burstable", "LS"), pod("be", "BestEffort", "BE")]
    _bvt_host(host, pods)
    spec = slo()
    strategy = spec.resource_qos_strategy
    bad = replace(spec, resource_qos_strategy=replace(strategy, be_class=replace(
        strategy.be_class, cpu_qos=replace(strategy.be_class.cpu_qos, group_identity=-5))))
    st = state(host, pods, bad)
    results = Executor(host.paths, 1, Health()).apply(plan(st, read_facts(st), node_name="node-1"))
    refused = {r.write.path for r in results if r.result == "invalid"}
    assert refused == {cg_file(host, "cpu.bvt_warp_ns", rel).as_posix() for rel in (
        pods[1].cgroup_dir, qos_dir(host.driver, BE), *(c.cgroup_dir for c in pods[1].containers if c.cgroup_dir))}
    assert read(host, "cpu.bvt_warp_ns", pods[1].cgroup_dir) == "0"
    assert read(host, "cpu.bvt_warp_ns", pods[0].cgroup_dir) == "2"


def test_nothing_before_a_nodeslo_or_without_a_mechanism(tmp_path: Path) -> None:
    host = SimHost(tmp_path / "h", 1, CgroupDriver.CGROUPFS).setup()
    pods = [pod("be", "BestEffort", "BE")]
    _bvt_host(host, pods)
    assert plan(state(host, pods, slo(), present=False), read_facts(state(host, pods, slo()))) == Plan()
    bare = SimHost(tmp_path / "bare", 1, CgroupDriver.CGROUPFS).setup()
    st = state(bare, pods, slo())
    f = read_facts(st)
    assert f.mechanism == "none"
    assert plan(st, f).writes == []
    assert plan(st, f, group_identity=False, core_sched=True).writes == []


# ---- no group identity: cpu.idle on pod cgroups --------------------------------------------------------------------


def _idle_host(host: SimHost, pods: list[PodMeta]) -> None:
    shares = "cpu.shares"
    for qos, value in ((G, "2048"), (B, "1024"), (BE, "2")):
        put(host, qos_dir(host.driver, qos), cpu__idle="0")
        cg_file(host, shares, qos_dir(host.driver, qos)).write_text(value + "\n")
    for p in pods:
        put(host, p.cgroup_dir, cpu__idle="0")
        cg_file(host, shares, p.cgroup_dir).write_text("1024\n")


def test_cpu_idle_without_group_identity(simhost: SimHost) -> None:
    d = simhost.driver
    be = pod("be", "BestEffort", "BE", driver=d)
    be_burstable = pod("be-b", "Burstable", "BE", driver=d)
    ls = pod("ls", "Burstable", "LS", driver=d)
    ls_yield = pod("ls-y", "Burstable", "LS", '{"enable":true,"groupIdentity":-1}', driver=d,
                   containers=[{"name": "c0", "resources": {"requests": {"cpu": "1500m"}}}])
    pods = [be, be_burstable, ls, ls_yield]
    _idle_host(simhost, pods)
    st = state(simhost, pods, slo())
    f = read_facts(st)
    assert f.mechanism == "cpu-idle"
    ex = Executor(simhost.paths, simhost.version, Health())
    written = apply(st, ex)
    assert {read(simhost, "cpu.idle", p.cgroup_dir) for p in (be, be_burstable, ls_yield)} == {"1"}
    assert read(simhost, "cpu.idle", ls.cgroup_dir) == "0"
    # never on a kube-QoS dir, never on a container
    idled = (be, be_burstable, ls_yield)
    assert {os.path.dirname(w) for w in written} == {cg_file(simhost, "cpu.idle", p.cgroup_dir).parent.as_posix()
                                                     for p in idled}
    assert apply(st, ex) == []
    # the simulated kernel does not reset the weight; pretend it did, as the real one does (1024 on leaving idle)
    for p in pods:
        cg_file(simhost, "cpu.shares", p.cgroup_dir).write_text("1024\n")
    off = state(simhost, pods, slo(be=False))
    # the dry run shows the cpu.shares repair exactly where cpu.idle changes (no fact about idle cgroups needed)
    dry = Executor(simhost.paths, simhost.version, Health(), dry_run=True).apply(plan(off, read_facts(off)))
    assert [r.write.path for r in dry if r.result == "planned"] == [
        str(cg_file(simhost, name, p.cgroup_dir)) for p in (be, be_burstable) for name in ("cpu.idle", "cpu.shares")]
    apply(off, ex)
    assert {p.name: read(simhost, "cpu.idle", p.cgroup_dir) for p in pods} == {"be": "0", "be-b": "0", "ls": "0",
                                                                               "ls-y": "1"}
    v2 = simhost.version == 2
    # kubelet's values are back: BestEffort 2 (weight 1), a Burstable pod without requests 2, ls untouched
    assert read(simhost, "cpu.shares", be.cgroup_dir) == ("1" if v2 else "2")
    assert read(simhost, "cpu.shares", be_burstable.cgroup_dir) == ("1" if v2 else "2")
    assert read(simhost, "cpu.shares", ls.cgroup_dir) == "1024"
    # the annotation alone (LS-enabled or not) still decides for ls-y; drop it and its shares come back too
    plain = pod("ls-y", "Burstable", "LS", driver=d, uid=ls_yield.uid,
                containers=[{"name": "c0", "resources": {"requests": {"cpu": "1500m"}}}])
    apply(state(simhost, [be, be_burstable, ls, plain], slo(be=False)), ex)
    assert read(simhost, "cpu.idle", plain.cgroup_dir) == "0"
    assert read(simhost, "cpu.shares", plain.cgroup_dir) == ("59" if v2 else "1536")
    assert apply(state(simhost, [be, be_burstable, ls, plain], slo(be=False)), ex) == []


def test_cpu_idle_never_idles_a_pod_kubelet_may_still_be_creating(tmp_path: Path) -> None:
    host = SimHost(tmp_path / "h", 1, CgroupDriver.CGROUPFS).setup()
    _idle_host(host, [])
    gone = pod_dir(host.driver, BE, "0000-dead")  # on disk, not in the pod list
    put(host, gone, cpu__idle="0", cpu__shares="2")
    put(host, f"{gone}/abc", cpu__idle="0")
    pending = pod("pending", "BestEffort", "BE")
    pending.raw["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "ContainerCreating"}}
    pending = pod_meta(pending.raw, host.driver, Health())
    put(host, pending.cgroup_dir, cpu__idle="0", cpu__shares="2")
    ex = Executor(host.paths, 1, Health())
    apply(state(host, [pending], slo()), ex)
    assert read(host, "cpu.idle", gone) == "0" and read(host, "cpu.idle", pending.cgroup_dir) == "0"
    # an idle dangling dir (idled while its pod was known) is left alone while BE wants -1 ...
    cg_file(host, "cpu.idle", gone).write_text("1\n")
    assert apply(state(host, [], slo()), ex) == []
    # ... and taken out of idle, with kubelet's BestEffort shares, once it does not
    cg_file(host, "cpu.shares", gone).write_text("1024\n")
    apply(state(host, [], slo(be=False)), ex)
    assert read(host, "cpu.idle", gone) == "0" and read(host, "cpu.shares", gone) == "2"
    assert read(host, "cpu.idle", f"{gone}/abc") == "0"


def test_core_sched_policy_writes_qos_dirs(tmp_path: Path) -> None:
    host = SimHost(tmp_path / "h", 1, CgroupDriver.CGROUPFS).setup()
    pods = [pod("be", "BestEffort", "BE"), pod("ls", "Burstable", "LS")]
    _idle_host(host, pods)
    kernel = host.root / "proc/sys/kernel"
    kernel.mkdir(parents=True)
    (kernel / "sched_group_identity_enabled").write_text("1\n")
    for p in pods:
        put(host, p.cgroup_dir, cpu__bvt_warp_ns="-1")
    spec = slo(policy="coreSched", beClass={"schedIdle": 1})
    st = state(host, pods, spec)
    f = read_facts(st)
    assert f.mechanism == "group-identity"
    # gate CoreSched off (upstream's default): no cpu.idle at all; the bvt reset still happens (sysctl on, rule off)
    gated = plan(st, f)
    assert not any(w.resource == "cpu.idle" for w in gated.writes)
    assert {w.value for w in gated.writes if w.resource == "cpu.bvt_warp_ns"} == {"0"}
    ex = Executor(host.paths, 1, Health())
    apply(st, ex, core_sched=True)
    assert {q: read(host, "cpu.idle", qos_dir(host.driver, q)) for q in (G, B, BE)} == {G: "0", B: "0", BE: "1"}
    assert {read(host, "cpu.idle", p.cgroup_dir) for p in pods} == {"0"}  # pod-level idle is never set here
    assert {read(host, "cpu.bvt_warp_ns", p.cgroup_dir) for p in pods} == {"0"}
    assert (kernel / "sched_group_identity_enabled").read_text() == "0"
    assert apply(st, ex, core_sched=True) == []
    # back to groupIdentity: the QoS dirs leave idle and besteffort gets kubelet's cpu.shares=2 back
    cg_file(host, "cpu.shares", qos_dir(host.driver, BE)).write_text("1024\n")
    apply(state(host, pods, slo()), ex, core_sched=True)
    assert read(host, "cpu.idle", qos_dir(host.driver, BE)) == "0"
    assert read(host, "cpu.shares", qos_dir(host.driver, BE)) == "2"


# ---- facts and capabilities ------------------------------------------------------------------------------------------


def test_read_facts_sysctl_errors_and_capabilities(tmp_path: Path) -> None:
    host = SimHost(tmp_path / "h", 1, CgroupDriver.CGROUPFS).setup()
    kernel = host.root / "proc/sys/kernel"
    kernel.mkdir(parents=True)
    (kernel / "sched_group_identity_enabled").write_text("garbage\n")
    st = state(host, [], slo())
    with pytest.raises(HostReadError):
        read_facts(st)
    (kernel / "sched_group_identity_enabled").write_text("1\n")
    f = read_facts(st)
    assert f.group_identity and not f.bvt_file and not f.cpu_idle
    health = Health()
    record(health, capabilities(f))
    assert health.capabilities == {cpuqos.CAP_GROUP_IDENTITY: True, cpuqos.CAP_CPU_IDLE: False}


@pytest.mark.parametrize(("cpu_idle", "level"), [(True, logging.INFO), (False, logging.WARNING)])
def test_missing_group_identity_is_a_warning_only_without_the_cpu_idle_fallback(
        cpu_idle: bool, level: int, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    facts = cpuqos.CPUQoSFacts(False, None, None, cpu_idle)
    record(Health(), capabilities(facts))
    [line] = [r for r in caplog.records if cpuqos.CAP_GROUP_IDENTITY in r.getMessage()]
    assert line.levelno == level


def test_sysctl_values_are_checked() -> None:
    st = state(None, [], slo(), paths=HostPaths.under("/nonexistent"))
    with pytest.raises(InvalidInput):
        cpuqos._sysctl(st, cpuqos.SYSCTL_GROUP_IDENTITY, 2, "x")


def test_kubelet_pod_cpu_shares() -> None:
    def shares(k8s: str = "Burstable", **spec: Any) -> int:
        return kubelet_pod_cpu_shares(pod("p", k8s, **spec))

    def ctr(cpu: str | None = None, limit: str | None = None, **kw: Any) -> dict[str, Any]:
        res: dict[str, Any] = {}
        if cpu:
            res["requests"] = {"cpu": cpu}
        if limit:
            res["limits"] = {"cpu": limit}
        return {"name": "c", "resources": res, **kw}

    assert shares("BestEffort") == 2
    assert shares(containers=[ctr()]) == 2
    assert shares(containers=[ctr("500m"), ctr("1")]) == 1536
    assert shares("Guaranteed", containers=[ctr(limit="2")]) == 2048  # the request defaults to the limit
    assert shares(containers=[ctr("1m")]) == 2
    assert shares(containers=[ctr("100")]) == 102400
    assert shares(containers=[ctr("300")]) == 262144
    # init containers: the larger of (regular + sidecars) and (an init container + sidecars before it)
    assert shares(containers=[ctr("100m")], initContainers=[ctr("2")]) == 2048
    assert shares(containers=[ctr("100m")], initContainers=[ctr("1", restartPolicy="Always"), ctr("500m")]) == 1536
    assert shares(containers=[ctr("100m")], overhead={"cpu": "250m"}) == 358
    assert shares(containers=[ctr("100m")], resources={"requests": {"cpu": "3"}}) == 3072  # pod-level resources


# ---- real cgroup v1 on this machine -------------------------------------------------------------------------------

V1_CPU = Path("/sys/fs/cgroup/cpu")


@pytest.fixture
def real_cpu_root(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(agent cgroup root whose cpu/ is a symlink, the real unique parent in the cpu hierarchy)."""
    require((V1_CPU / "cpu.idle").exists(), "the kernel has no cgroup cpu.idle (mainline >= 5.15)")
    with real_v1_root(tmp_path, ("cpu",)) as (root, name):
        yield root, V1_CPU / name


def test_real_cgroup_v1_cpu_idle(real_cpu_root: tuple[Path, Path]) -> None:
    root, real = real_cpu_root
    driver = CgroupDriver.CGROUPFS
    be = pod("be", "BestEffort", "BE")
    ls = pod("ls", "Burstable", "LS", containers=[{"name": "c0", "resources": {"requests": {"cpu": "500m"}}}])
    for qos, shares in ((G, 2048), (B, 1024), (BE, 2)):  # kubelet's QoS dirs
        (real / qos_dir(driver, qos)).mkdir(parents=True, exist_ok=True)
        (real / qos_dir(driver, qos) / "cpu.shares").write_text(str(shares))
    for p, shares in ((be, 2), (ls, 512)):  # kubelet's pod cgroups, and the runtime's container cgroups
        (real / p.cgroup_dir).mkdir()
        (real / p.cgroup_dir / "cpu.shares").write_text(str(shares))
        for c in p.containers:
            assert c.cgroup_dir is not None
            (real / c.cgroup_dir).mkdir()
    paths = HostPaths.under("/").with_overrides(cgroup_root=str(root))
    st = state(None, [be, ls], slo(lsr=False, ls=False, be=True), paths=paths)
    f = read_facts(st)
    require(f.mechanism == "cpu-idle", f"this kernel has group identity ({f}); the cpu.idle path is not used")
    ex = Executor(paths, 1, Health(), force_seconds=0)
    apply(st, ex)

    be_dir, be_ctr = real / be.cgroup_dir, real / str(be.containers[0].cgroup_dir)
    assert (be_dir / "cpu.idle").read_text().strip() == "1"  # read back from the kernel
    assert (real / ls.cgroup_dir / "cpu.idle").read_text().strip() == "0"
    for qos in (G, B, BE):
        assert (real / qos_dir(driver, qos) / "cpu.idle").read_text().strip() == "0"
    # As documented in koordlet/qos/cpuqos.py: the idle pod's cpu.shares reads 3 and rejects every write ...
    assert (be_dir / "cpu.shares").read_text().strip() == "3"
    for value in ("2", "1024"):
        with pytest.raises(OSError) as e:
            (be_dir / "cpu.shares").write_text(value)
        assert e.value.errno == errno.EINVAL
    # ... while kubelet's writes to the kube-QoS dirs and the runtime's to the container cgroup still work.
    (real / qos_dir(driver, BE) / "cpu.shares").write_text("2")
    (be_ctr / "cpu.shares").write_text("2")
    assert (be_ctr / "cpu.idle").read_text().strip() == "0"
    assert apply(st, ex) == []  # a second pass writes nothing

    # BE disabled: idle goes back to 0, which makes the kernel reset the weight to 1024; kubelet's 2 is restored
    off = state(None, [be, ls], slo(lsr=False, ls=False, be=False), paths=paths)
    apply(off, ex)
    assert (be_dir / "cpu.idle").read_text().strip() == "0"
    assert (be_dir / "cpu.shares").read_text().strip() == "2"
    (be_dir / "cpu.shares").write_text("2")  # writable again
    assert apply(off, ex) == []
