"""QoS metrics fed by the executor: upstream's `koordlet_resource_update_duration_milliseconds` and
`koordlet_runtime_hook_reconciler_invoked_duration_milliseconds` (names, label order, buckets, which updates count),
and the runtime-hook reconciler levels the planners give their writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from apis.extension.resource_status import ANNOTATION_RESOURCE_STATUS
from apis.slo.decode import nodeslo_config
from koordlet.health import Health
from koordlet.host.driver import CgroupDriver
from koordlet.host.paths import HostPaths
from koordlet.qos import batchresource, cpuqos, cpuset
from koordlet.qos.executor import Executor
from koordlet.qos.metrics import QoSMetrics
from koordlet.qos.model import Plan, Write
from koordlet.qos.state import QoSState
from koordlet.states.pods import pod_meta

from simhost import SimHost, make_pod

UPDATE = "koordlet_resource_update_duration_milliseconds"
RECONCILER = "koordlet_runtime_hook_reconciler_invoked_duration_milliseconds"
# prometheus.ExponentialBuckets(0.01, 4, 8)
BOUNDS = ["0.01", "0.04", "0.16", "0.64", "2.56", "10.24", "40.96", "163.84", "+Inf"]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def counts(reg: CollectorRegistry, name: str) -> dict[frozenset[tuple[str, str]], float]:
    """The `_count` samples of a histogram family by their labels (the label order is checked on the text)."""
    fams = {f.name: f for f in text_string_to_metric_families(generate_latest(reg).decode())}
    fam = fams[name]
    assert fam.type == "histogram"
    return {frozenset(s.labels.items()): s.value for s in fam.samples if s.name == f"{name}_count"}


def k(**labels: str) -> frozenset[tuple[str, str]]:
    return frozenset(labels.items())


def buckets(reg: CollectorRegistry, name: str) -> list[str]:
    fam = next(f for f in text_string_to_metric_families(generate_latest(reg).decode()) if f.name == name)
    first = next(s for s in fam.samples if s.name.endswith("_bucket"))
    key = {k: v for k, v in first.labels.items() if k != "le"}
    return [s.labels["le"] for s in fam.samples
            if s.name.endswith("_bucket") and {k: v for k, v in s.labels.items() if k != "le"} == key]


def test_updates_are_timed_by_updater_type_and_outcome(tmp_path: Path) -> None:
    paths = HostPaths.under(str(tmp_path))
    pod = tmp_path / "sys/fs/cgroup/cpu/kubepods/podA"
    pod.mkdir(parents=True)
    (pod / "cpu.shares").write_text("1024\n")
    group = tmp_path / "sys/fs/resctrl/LS"
    group.mkdir(parents=True)
    (group / "schemata").write_text("L3:0=fff\n")
    (group / "tasks").write_text("")
    reg = CollectorRegistry(auto_describe=False)
    metrics = QoSMetrics("n1", reg)
    clock = Clock()
    ex = Executor(paths, 1, Health(), clock=clock, observer=metrics)
    shares = Write(str(pod / "cpu.shares"), "2048", "t", resource="cpu.shares")
    results = ex.apply(Plan([
        shares,
        Write(str(pod / "cpu.cfs_quota_us"), "not a number", "t", resource="cpu.cfs_quota_us"),  # invalid
        Write(str(tmp_path / "sys/fs/cgroup/cpu/kubepods/gone/cpu.shares"), "2", "t", resource="cpu.shares"),
        Write(str(pod / "cpu.bvt_warp_ns"), "1", "t", resource="cpu.bvt_warp_ns"),  # unsupported: no file
        Write(str(group / "schemata"), "L3:0=ff", "t", compare="always"),
        Write(str(group.parent / "BE"), "", "t", op="mkdir"),
        Write(str(group / "tasks"), "1", "t", op="tids"),
        Write(str(group.parent / "koordlet-gone"), "", "t", op="rmdir"),
    ]))
    assert [r.result for r in results] == ["written", "invalid", "vanished", "unsupported", "written", "written",
                                           "written", "unchanged"]
    want = {k(type="cgroup", status="success"): 1.0, k(type="cgroup", status="failed"): 1.0,
            k(type="resctrl-schema", status="success"): 1.0,
            k(type="default", status="success"): 2.0}
    assert counts(reg, UPDATE) == want  # upstream ignores unsupported and vanished; rmdir is no update there
    assert buckets(reg, UPDATE) == BOUNDS
    assert counts(reg, RECONCILER) == {}  # none of these writes is a runtime-hook reconciler's

    # a cached write is no update (upstream's cache skips it): the steady state adds nothing
    assert [r.result for r in ex.apply(Plan([shares]))] == ["cached"]
    assert counts(reg, UPDATE) == want
    clock.now += 61  # past the force window the file is read again: an update that changed nothing
    assert [r.result for r in ex.apply(Plan([shares]))] == ["unchanged"]
    assert counts(reg, UPDATE)[k(type="cgroup", status="success")] == 2.0
    # a dry run observes nothing
    Executor(paths, 1, Health(), dry_run=True, observer=metrics).apply(Plan([Write(str(pod / "cpu.shares"), "4096",
                                                                                   "t", resource="cpu.shares")]))
    assert counts(reg, UPDATE)[k(type="cgroup", status="success")] == 2.0


def test_reconciler_invocations_by_level_resource_and_status(tmp_path: Path) -> None:
    paths = HostPaths.under(str(tmp_path))
    pod = tmp_path / "sys/fs/cgroup/cpu/kubepods/podA"
    pod.mkdir(parents=True)
    for f, v in (("cpu.shares", "1024"), ("cpu.cfs_quota_us", "-1")):
        (pod / f).write_text(v + "\n")
    reg = CollectorRegistry(auto_describe=False)
    metrics = QoSMetrics("n1", reg)
    # upstream's label order (the exposition sorts label names; the README's reference lists this order)
    assert metrics.reconciler_ms._labelnames == ("node", "level", "resource_type", "status")
    assert metrics.update_ms._labelnames == ("type", "status")
    ex = Executor(paths, 1, Health(), observer=metrics)
    ex.apply(Plan([Write(str(pod / "cpu.shares"), "512", "t", resource="cpu.shares", level="pod"),
                   Write(str(pod / "cpu.cfs_quota_us"), "-5", "t", resource="cpu.cfs_quota_us", level="pod"),
                   Write(str(pod / "gone/cpu.shares"), "2", "t", resource="cpu.shares", level="container")]))
    assert counts(reg, RECONCILER) == {
        k(node="n1", level="pod", resource_type="cpu.shares", status="succeeded"): 1.0,
        k(node="n1", level="pod", resource_type="cpu.cfs_quota_us", status="failed"): 1.0,
        # a vanished container: upstream's reconcile function ran fine, the executor ignored the missing dir
        k(node="n1", level="container", resource_type="cpu.shares", status="succeeded"): 1.0}
    assert buckets(reg, RECONCILER) == BOUNDS
    text = generate_latest(reg).decode()
    assert f'# TYPE {RECONCILER} histogram' in text
    assert f'{UPDATE}_count{{status="success",type="cgroup"}} 1.0' in text  # the vanished write is none


def _sim_pod(host: SimHost, name: str, k8s_qos: str, koord_qos: str, annotations: dict[str, str] | None = None,
             spec: dict[str, Any] | None = None) -> Any:
    uid = f"{len(name):08d}-0000-4000-8000-{abs(hash(name)) % 10**12:012d}"
    raw: dict[str, Any] = make_pod(name, uid, k8s_qos, labels={"koordinator.sh/qosClass": koord_qos})
    if annotations:
        raw["metadata"]["annotations"] = annotations
    if spec:
        raw["spec"]["containers"][0]["resources"] = spec
    return pod_meta(raw, host.driver, Health())


def test_planners_tag_the_writes_upstream_makes_with_reconcilers(tmp_path: Path) -> None:
    """cpuset.go: container/sandbox cpuset, pod/container/sandbox quota; batch_resource.go: pod and container
    shares, quota, memory limit; bvt.go: kube-QoS and pod bvt (container and host-application dirs are ours)."""
    host = SimHost(tmp_path / "h", 1, CgroupDriver.CGROUPFS).setup()
    lsr = _sim_pod(host, "lsr", "Guaranteed", "LSR", {ANNOTATION_RESOURCE_STATUS: json.dumps({"cpuset": "0-1"})})
    be = _sim_pod(host, "be", "BestEffort", "BE", spec={
        "requests": {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "1Gi"},
        "limits": {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "1Gi"}})
    for p in (lsr, be):
        host._mkdir(p.cgroup_dir)
        for c in p.containers:
            host._mkdir(str(c.cgroup_dir))
    sandbox = f"{lsr.cgroup_dir}/{'f' * 64}"
    host._mkdir(sandbox)
    (host.cgroup_root() / "cpu/kubepods/cpu.bvt_warp_ns").write_text("0\n")  # group identity (Anolis)
    slo = nodeslo_config({"resourceQOSStrategy": {"lsrClass": {"cpuQOS": {"enable": True}},
                                                      "beClass": {"cpuQOS": {"enable": True}}}})
    st = QoSState(host.paths, 1, host.driver, [lsr, be], slo, nodeslo_present=True)

    def levels(p: Plan) -> set[tuple[str, str | None, str | None]]:
        def where(w: Write) -> str:
            rel = host.paths.host_relative(w.path)
            if rel.endswith(f"{lsr.containers[0].cgroup_dir}/{w.resource}") or rel.endswith(
                    f"{be.containers[0].cgroup_dir}/{w.resource}"):
                return "container-dir"
            if sandbox in rel:
                return "sandbox-dir"
            if rel.endswith((f"{lsr.cgroup_dir}/{w.resource}", f"{be.cgroup_dir}/{w.resource}")):
                return "pod-dir"
            return "kubeqos-dir" if rel.count("/") <= 6 else "other"
        return {(where(w), w.resource, w.level) for w in p.writes}

    got = levels(cpuset.plan(st, cpuset.read_facts(st)))
    assert got == {("container-dir", "cpuset.cpus", "container"), ("sandbox-dir", "cpuset.cpus", "sandbox"),
                   ("pod-dir", "cpu.cfs_quota_us", "pod"), ("container-dir", "cpu.cfs_quota_us", "container"),
                   ("sandbox-dir", "cpu.cfs_quota_us", "sandbox")}
    got = levels(batchresource.plan(st, batchresource.read_facts(st)))
    assert got == {(d, r, lvl) for d, lvl in (("pod-dir", "pod"), ("container-dir", "container"))
                   for r in ("cpu.shares", "cpu.cfs_quota_us", "memory.limit_in_bytes")}
    bvt = {(d, lvl) for d, r, lvl in levels(cpuqos.plan(st, cpuqos.read_facts(st))) if r == "cpu.bvt_warp_ns"}
    assert {("kubeqos-dir", "kubeqos"), ("pod-dir", "pod"), ("container-dir", None)} <= bvt
