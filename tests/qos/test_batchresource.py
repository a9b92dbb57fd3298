"""BatchResource: BE pods' cgroup limits from batch resources (upstream cases), v1/v2, cpu.idle, real cgroups."""

from __future__ import annotations

import errno
import json
import math
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from apis.extension.node import ANNOTATION_CPU_NORMALIZATION_RATIO, cpu_normalization_ratio
from apis.extension.resources import ANNOTATION_EXTENDED_RESOURCE_SPEC, BATCH_CPU, BATCH_MEMORY
from apis.slo.decode import nodeslo_config
from apis.slo.types import NodeSLOSpec
from koordlet import cli
from koordlet.config import Config
from koordlet.events import EventRecorder
from koordlet.health import Health
from koordlet.host.driver import CgroupDriver, K8sQoS, qos_dir
from koordlet.host.paths import HostPaths
from koordlet.host.resources import resource_path, shares_to_weight, v1_memory_unlimited
from koordlet.qos import batchresource, cpuqos
from koordlet.qos.batchspec import milli_cpu_to_quota, milli_cpu_to_shares, pod_batch
from koordlet.qos.executor import Executor
from koordlet.qos.features import BatchResource
from koordlet.qos.manager import QoSManager, enabled_features
from koordlet.qos.model import Plan
from koordlet.qos.state import QoSState
from koordlet.states.model import PodMeta
from koordlet.states.pods import pod_meta

from conftest import real_v1_root, require
from simhost import SimHost, cpu_qos_node, make_pod

GI = 1 << 30
BE_DIR = qos_dir(CgroupDriver.CGROUPFS, K8sQoS.BESTEFFORT)
UNLIMITED_V1_MEMORY = "9223372036854771712"


# ---- builders -----------------------------------------------------------------------------------------------------


def be_pod(*, spec: dict[str, dict[str, Any]] | None = None, annotation: object = None, label: str | None = "BE",
           containers: int = 2, driver: CgroupDriver = CgroupDriver.CGROUPFS, phase: str = "Running") -> PodMeta:
    """A BestEffort pod with containers container-0.. (as upstream's tests name them); `spec` gives a container's
    resources by name, `annotation` the extended-resource-spec (a dict is JSON-encoded)."""
    uid = str(uuid.uuid4())
    raw: dict[str, Any] = make_pod("batch", uid, "BestEffort", containers=containers, phase=phase,
                                   labels={"koordinator.sh/qosClass": label} if label else None)
    for i, c in enumerate(raw["spec"]["containers"]):
        c["name"] = raw["status"]["containerStatuses"][i]["name"] = f"container-{i}"
        if spec and c["name"] in spec:
            c["resources"] = spec[c["name"]]
    if annotation is not None:
        text = annotation if isinstance(annotation, str) else json.dumps(annotation)
        raw["metadata"]["annotations"] = {ANNOTATION_EXTENDED_RESOURCE_SPEC: text}
    return pod_meta(raw, driver, Health())


def res(cpu: str | None = None, memory: str | None = None) -> dict[str, str]:
    out = {}
    if cpu is not None:
        out[BATCH_CPU] = cpu
    if memory is not None:
        out[BATCH_MEMORY] = memory
    return out


# upstream batch_resource_test.go's extended-resource specs
SPEC = {"containers": {"container-0": {"requests": res("500", "2Gi"), "limits": res("500", "2Gi")}}}
SPEC1 = {"containers": {"container-0": {"requests": res("500", "2Gi"), "limits": res("500", "2Gi")},
                        "container-1": {"limits": res("1000", "2Gi")}}}
SPEC2 = {"containers": {"container-0": {"requests": res("500", "2Gi")}}}
SPEC3 = {"containers": {"container-0": {"requests": res("500", "2Gi"), "limits": res("500", "2Gi")},
                        "container-1": {"requests": res("500", "2Gi")}}}


def slo(*, suppress: str | None = None, be_cpu_qos: bool = False) -> NodeSLOSpec:
    spec: dict[str, Any] = {}
    if suppress is not None:
        spec["resourceUsedThresholdWithBE"] = {"enable": True, "cpuSuppressPolicy": suppress}
    if be_cpu_qos:
        spec["resourceQOSStrategy"] = {"beClass": {"cpuQOS": {"enable": True}}}
    return nodeslo_config(spec)


def node(ratio: str) -> dict[str, Any]:
    return {"metadata": {"name": "n1", "annotations": {ANNOTATION_CPU_NORMALIZATION_RATIO: ratio}}}


def state(pods: list[PodMeta], spec: dict[str, Any] | None = None, *, host: SimHost | None = None,
          node_obj: dict[str, Any] | None = None) -> QoSState:
    paths = host.paths if host is not None else HostPaths.under("/nonexistent")
    version = host.version if host is not None else 1
    driver = host.driver if host is not None else CgroupDriver.CGROUPFS
    return QoSState(paths, version, driver, pods, spec if spec is not None else slo(), node=node_obj)


def values(st: QoSState, p: Plan, rel: str) -> dict[str, str]:
    """resource -> value planned for one cgroup dir (the last write wins)."""
    out = {}
    for res_name in ("cpu.shares", "cpu.cfs_quota_us", "memory.limit_in_bytes"):
        path = resource_path(st.cgroup_version, st.paths, res_name, rel)
        for w in p.writes:
            if w.path == path:
                out[res_name] = w.value
    return out


def plan_of(st: QoSState, *, cpu_idle: bool = False, group_identity: bool = True) -> Plan:
    facts = batchresource.BatchFacts(cpu_idle, *cpu_normalization_ratio(st.node))
    return batchresource.plan(st, facts, group_identity=group_identity)


def pod_values(p: PodMeta, **kw: Any) -> dict[str, str]:
    st = state([p], kw.pop("spec", None), node_obj=kw.pop("node_obj", None))
    return values(st, plan_of(st, **kw), p.cgroup_dir)


def container_values(p: PodMeta, name: str, **kw: Any) -> dict[str, str]:
    st = state([p], kw.pop("spec", None), node_obj=kw.pop("node_obj", None))
    rel = next(c.cgroup_dir for c in p.containers if c.name == name)
    assert rel is not None
    return values(st, plan_of(st, **kw), rel)


def v(shares: int, quota: int, memory: int) -> dict[str, str]:
    return {"cpu.shares": str(shares), "cpu.cfs_quota_us": str(quota), "memory.limit_in_bytes": str(memory)}


# ---- the values (util/system cgroup.go) -------------------------------------------------------------------------


def test_conversions() -> None:
    assert [milli_cpu_to_shares(m) for m in (-1, 0, 1, 500, 1000, 300_000)] == [2, 2, 2, 512, 1024, 262144]
    assert [milli_cpu_to_quota(m) for m in (-1, 0, 1, 9, 500, 1000)] == [-1, -1, 1000, 1000, 50000, 100000]


# ---- pod level: upstream Test_plugin_SetPodResources -------------------------------------------------------------


def test_pod_not_batch_or_without_batch_resources() -> None:
    assert pod_values(be_pod(label=None, annotation=SPEC)) == {}  # "not a Batch pod" (no qosClass label)
    assert pod_values(be_pod(label="LS", annotation=SPEC)) == {}
    assert pod_values(be_pod(annotation={})) == {}  # "a Batch pod without requests"
    assert pod_values(be_pod()) == {}  # no annotation, no batch resources in the spec


@pytest.mark.parametrize(("annotation", "suppress", "ratio", "want"), [
    (SPEC, "cfsQuota", None, v(512, -1, 2 * GI)),  # "a Batch pod with cfs quota unset"
    (SPEC, None, None, v(512, 50000, 2 * GI)),  # "a Batch pod with cpu memory requests"
    (SPEC1, None, None, v(512, 150000, 4 * GI)),  # "... requests 1": container-1 has limits only
    (SPEC2, None, None, v(512, -1, -1)),  # "a Batch pod with no limit"
    (SPEC3, None, None, v(1024, -1, -1)),  # "a Batch pod with partial limited"
    (SPEC, None, "1.2", v(512, math.ceil(50000 / 1.2), 2 * GI)),  # "a Batch pod scaled with ratio": 41667
    (SPEC, "cpuset", None, v(512, 50000, 2 * GI)),  # the cpuset suppress policy leaves the quota alone
    (SPEC, None, "0.8", v(512, 50000, 2 * GI)),  # "no support ratio in (0, 1) yet"
], ids=["cfs-unset", "requests", "requests-1", "no-limit", "partial-limited", "ratio", "cpuset-policy", "ratio<1"])
def test_pod_upstream_cases(annotation: dict[str, Any], suppress: str | None, ratio: str | None,
                            want: dict[str, str]) -> None:
    p = be_pod(annotation=annotation)
    assert pod_values(p, spec=slo(suppress=suppress), node_obj=node(ratio) if ratio else None) == want


# ---- container level: upstream Test_plugin_SetContainerResources -------------------------------------------------


def test_container_upstream_cases() -> None:
    p = be_pod(annotation=SPEC1)
    assert container_values(p, "container-0") == v(512, 50000, 2 * GI)  # "a Batch container with requests"
    assert container_values(p, "container-1") == v(2, 100000, 2 * GI)  # "... requests 1": limits only
    assert container_values(p, "container-0", spec=slo(suppress="cfsQuota")) == v(512, -1, 2 * GI)
    assert container_values(p, "container-0", node_obj=node("1.2")) == v(512, 41667, 2 * GI)
    # "a Batch container with requests not matched": the annotation names only container-0
    assert container_values(be_pod(annotation=SPEC), "container-1") == {}
    assert container_values(be_pod(annotation=SPEC2), "container-0") == v(512, -1, -1)


def test_limit_above_request_v07() -> None:
    """v0.7: a batch limit above the request: shares follow the request, the quota and memory the limit."""
    p = be_pod(spec={"container-0": {"requests": res("1000", "1Gi"), "limits": res("4000", "8Gi")}}, containers=1)
    assert pod_values(p) == v(1024, 400000, 8 * GI)
    assert container_values(p, "container-0") == v(1024, 400000, 8 * GI)


def test_quick_start_pod() -> None:
    """The Batch Colocation Quick Start's BE pod (batch-cpu "1k" = 1000 milli-cores, batch-memory "1Gi")."""
    p = be_pod(spec={"container-0": {"requests": res("1k", "1Gi"), "limits": res("1k", "1Gi")}}, containers=1)
    assert pod_values(p) == v(1024, 100000, GI)


def test_spec_first_then_annotation_per_container() -> None:
    """FromReconciler: the pod level takes the spec's containers when any declares batch resources; a container
    takes its own spec, else the annotation's entry."""
    p = be_pod(spec={"container-0": {"requests": res("2000", "1Gi"), "limits": res("2000", "1Gi")}},
               annotation=SPEC1)
    assert pod_values(p) == v(2048, 200000, GI)  # container-0 of the spec only
    assert container_values(p, "container-0") == v(2048, 200000, GI)
    assert container_values(p, "container-1") == v(2, 100000, 2 * GI)  # from the annotation
    # quantities round up (Quantity.Value()); numbers are quantities too in the annotation
    q = be_pod(annotation={"containers": {"container-0": {"requests": {BATCH_CPU: 0.5}, "limits": {BATCH_CPU: 1}}}})
    assert pod_values(q)["cpu.shares"] == str(milli_cpu_to_shares(1))


def test_bad_input_is_an_event_and_skips_only_that_pod() -> None:
    good = be_pod(annotation=SPEC)
    bad_json = be_pod(annotation="{not json")
    bad_quantity = be_pod(spec={"container-0": {"limits": {BATCH_CPU: "lots"}}})
    empty = be_pod(annotation={"containers": {}})  # upstream would write a pod memory limit of 0
    st = state([good, bad_json, bad_quantity, empty])
    p = plan_of(st)
    assert values(st, p, good.cgroup_dir) == v(512, 50000, 2 * GI)
    for skipped in (bad_json, bad_quantity, empty):
        assert values(st, p, skipped.cgroup_dir) == {}
    assert [(e.kind, e.field) for e in p.errors] == [
        ("Pod", f"annotations[{ANNOTATION_EXTENDED_RESOURCE_SPEC}]"),
        ("Pod", f"spec.containers[0].resources.limits[{BATCH_CPU}]"),
    ]
    # a bad annotation next to a spec that declares batch resources: reported, the spec applies
    both = be_pod(spec={"container-0": {"limits": res("500", "1Gi")}}, annotation="[]")
    st = state([both])
    p = plan_of(st)
    assert values(st, p, both.cgroup_dir)["cpu.cfs_quota_us"] == "50000" and len(p.errors) == 1


def test_bad_ratio_is_an_event_and_no_scaling() -> None:
    p = be_pod(annotation=SPEC)
    for ratio in ("abc", "-1", "0", "inf", "1_2"):
        st = state([p], node_obj=node(ratio))
        out = plan_of(st)
        assert values(st, out, p.cgroup_dir)["cpu.cfs_quota_us"] == "50000", ratio
        assert [(e.kind, e.name) for e in out.errors] == [("Node", "n1")], ratio
    assert cpu_normalization_ratio(node("1.5")) == (1.5, None)
    assert cpu_normalization_ratio(None) == (None, None)


def test_small_quota_keeps_the_kernel_floor_after_scaling() -> None:
    p = be_pod(annotation={"containers": {"container-0": {"limits": res("10", "1Gi")}}})
    assert pod_values(p, node_obj=node("2"))["cpu.cfs_quota_us"] == "1000"  # upstream: ceil(1000 / 2) = 500


def test_terminated_pods_are_left_alone() -> None:
    assert pod_values(be_pod(annotation=SPEC, phase="Succeeded")) == {}


def test_v1_quota_order_pod_containers_pod() -> None:
    p = be_pod(annotation=SPEC1)
    st = state([p])
    quota_paths = [w.path for w in plan_of(st).writes if w.resource == "cpu.cfs_quota_us"]
    pod_path = resource_path(1, st.paths, "cpu.cfs_quota_us", p.cgroup_dir)
    assert quota_paths[0] == quota_paths[-1] == pod_path and len(quota_paths) == 4


# ---- cgroup v2 ---------------------------------------------------------------------------------------------------


def test_v2_weight_cpu_max_memory_max(tmp_path: Path) -> None:
    host = SimHost(tmp_path / "h", 2, CgroupDriver.SYSTEMD).setup()
    p = be_pod(annotation=SPEC1, driver=CgroupDriver.SYSTEMD)
    st = state([p], host=host)
    got = {w.path: w.value for w in plan_of(st).writes}
    pod_dir = host.cgroup_root() / p.cgroup_dir
    assert got[str(pod_dir / "cpu.weight")] == str(shares_to_weight(512))
    assert got[str(pod_dir / "cpu.max")] == "150000 100000"
    assert got[str(pod_dir / "memory.max")] == str(4 * GI)
    ctr = host.cgroup_root() / str(p.containers[1].cgroup_dir)
    assert got[str(ctr / "cpu.weight")] == "1"  # shares 2
    unlimited = be_pod(annotation=SPEC2, driver=CgroupDriver.SYSTEMD)
    st = state([unlimited], host=host)
    got = {w.path: w.value for w in plan_of(st).writes}
    assert got[str(host.cgroup_root() / unlimited.cgroup_dir / "cpu.max")] == "max 100000"
    assert got[str(host.cgroup_root() / unlimited.cgroup_dir / "memory.max")] == "max"
    for w in plan_of(st).writes:  # every value passes the v2 validators
        assert Executor(host.paths, 2, Health())._validate(w) is None, w


# ---- with CPU QoS's cpu.idle ------------------------------------------------------------------------------------


def put_kubelet_files(host: SimHost, pods: list[PodMeta]) -> None:
    """What kubelet and the runtime leave in a BE pod's and its containers' cgroups (v1), plus cpu.idle."""
    for rel in [qos_dir(host.driver, q) for q in K8sQoS]:
        (host.cgroup_root() / "cpu" / rel / "cpu.idle").write_text("0\n")
    for p in pods:
        for rel in [p.cgroup_dir, *(c.cgroup_dir for c in p.containers if c.cgroup_dir)]:
            host._mkdir(rel)
            cpu, mem = host.cgroup_root() / "cpu" / rel, host.cgroup_root() / "memory" / rel
            (cpu / "cpu.shares").write_text("2\n")
            (cpu / "cpu.cfs_quota_us").write_text("-1\n")
            (cpu / "cpu.idle").write_text("0\n")
            (mem / "memory.limit_in_bytes").write_text(UNLIMITED_V1_MEMORY + "\n")


def manager(host: SimHost, config_gates: dict[str, bool] | None = None) -> tuple[QoSManager, Health]:
    health = Health()
    cfg = Config("n1", host.paths, feature_gates={"GroupIdentity": True, "BatchResource": True, "CPUBurst": False,
                                                  "RdtResctrl": False, **(config_gates or {})})
    ex = Executor(host.paths, host.version, health, force_seconds=3600)
    return QoSManager(enabled_features(cfg), ex, EventRecorder(health, "n1"), health), health


def written(results: list[Any]) -> list[tuple[str, str]]:
    bad = [r for r in results if r.result in ("invalid", "error", "unsupported")]
    assert not bad, bad
    return [(r.write.path, r.write.value) for r in results if r.result == "written"]


def test_features_registered_under_their_gates() -> None:
    names = [f.name for f in enabled_features(Config("n", HostPaths.under("/")))]
    assert names.index("cpuqos") < names.index("batchresource") and "cpuburst" in names
    off = Config("n", HostPaths.under("/"), feature_gates={"BatchResource": False, "CPUBurst": False})
    assert {"batchresource", "cpuburst"}.isdisjoint(f.name for f in enabled_features(off))


def test_idled_pod_keeps_its_shares_and_two_passes_settle(tmp_path: Path) -> None:
    """CPU QoS idles the BE pod (cpu.idle, no group identity): BatchResource plans no pod-level shares for it, the
    rest lands, and a second pass of both features writes nothing."""
    host = SimHost(tmp_path / "h", 1, CgroupDriver.CGROUPFS).setup()
    p = be_pod(annotation=SPEC1)
    put_kubelet_files(host, [p])
    st = state([p], slo(be_cpu_qos=True), host=host)
    assert cpuqos.idled_pods(st, "cpu-idle") == {p.cgroup_dir}
    qos, _ = manager(host)
    first = dict(written(qos.reconcile(st)))
    cpu = host.cgroup_root() / "cpu" / p.cgroup_dir
    assert first[str(cpu / "cpu.idle")] == "1"
    assert str(cpu / "cpu.shares") not in first  # an idle cgroup refuses shares writes
    assert first[str(cpu / "cpu.cfs_quota_us")] == "150000"
    assert first[str(host.cgroup_root() / "memory" / p.cgroup_dir / "memory.limit_in_bytes")] == str(4 * GI)
    ctr0 = host.cgroup_root() / "cpu" / str(p.containers[0].cgroup_dir)
    assert first[str(ctr0 / "cpu.shares")] == "512"  # container cgroups stay writable
    assert written(qos.reconcile(st)) == []

    # BE CPU QoS off: cpu.idle back to 0; the shares cpuqos restores are the batch value, the very one BatchResource
    # plans, so the file is written once and not flipped between 2 (kubelet's) and 512
    (cpu / "cpu.shares").write_text("1024\n")  # the kernel's reset when leaving idle (a simulated host has none)
    off = state([p], slo(be_cpu_qos=False), host=host)
    results = qos.reconcile(off)
    shares = [r for r in results if r.write.path == str(cpu / "cpu.shares")]
    assert [(r.write.value, r.result) for r in shares] == [("512", "written"), ("512", "cached")]
    assert written(qos.reconcile(off)) == []


def test_unlimited_memory_reads_back_as_unlimited() -> None:
    assert v1_memory_unlimited(UNLIMITED_V1_MEMORY) and v1_memory_unlimited("-1")
    assert not v1_memory_unlimited(str(4 * GI)) and not v1_memory_unlimited("max")


# ---- real cgroup v1 on this machine -------------------------------------------------------------------------------

V1 = Path("/sys/fs/cgroup")


@pytest.fixture
def real_root(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    require((V1 / "memory" / "memory.limit_in_bytes").exists() and (V1 / "cpu" / "cpu.cfs_quota_us").exists(),
            "no cgroup v1 cpu and memory hierarchies")
    with real_v1_root(tmp_path, ("cpu", "memory")) as (root, name):
        yield root, name


@pytest.mark.realhost
def test_real_cgroup_v1_batch_limits_land_in_the_kernel(real_root: tuple[Path, str]) -> None:
    root, name = real_root
    driver = CgroupDriver.CGROUPFS
    p = be_pod(annotation=SPEC1)
    for sub in ("cpu", "memory"):  # kubelet's kubepods tree and the runtime's container cgroups, made by the kernel
        for rel in (p.cgroup_dir, *(str(c.cgroup_dir) for c in p.containers)):
            (root / sub / rel).mkdir(parents=True, exist_ok=True)
    paths = HostPaths.under("/").with_overrides(cgroup_root=str(root))
    st = QoSState(paths, 1, driver, [p], slo())
    health = Health()
    ex = Executor(paths, 1, health, force_seconds=0)  # no cache: a second pass compares with the kernel's files
    qos = QoSManager([BatchResource()], ex,
                     EventRecorder(health, "n1"), health)
    assert written(qos.reconcile(st))

    def kernel(sub: str, rel: str, file: str) -> str:
        return (V1 / sub / name / rel / file).read_text().strip()

    assert kernel("cpu", p.cgroup_dir, "cpu.shares") == "512"
    assert kernel("cpu", p.cgroup_dir, "cpu.cfs_quota_us") == "150000"
    assert kernel("memory", p.cgroup_dir, "memory.limit_in_bytes") == str(4 * GI)
    c0, c1 = (str(c.cgroup_dir) for c in p.containers)
    assert (kernel("cpu", c0, "cpu.shares"), kernel("cpu", c0, "cpu.cfs_quota_us")) == ("512", "50000")
    assert (kernel("cpu", c1, "cpu.shares"), kernel("cpu", c1, "cpu.cfs_quota_us")) == ("2", "100000")
    assert kernel("memory", c1, "memory.limit_in_bytes") == str(2 * GI)
    assert written(qos.reconcile(st)) == []  # a second plan writes nothing

    # cfsQuota suppress policy: quotas back to unlimited (pod first: v1 keeps a parent's quota >= each child's)
    off = QoSState(paths, 1, driver, [p], slo(suppress="cfsQuota"))
    assert written(qos.reconcile(off))
    assert kernel("cpu", p.cgroup_dir, "cpu.cfs_quota_us") == kernel("cpu", c0, "cpu.cfs_quota_us") == "-1"
    # ... and limited again; then a spec with no limits: memory unlimited (-1 reads back as the page maximum)
    assert written(qos.reconcile(st))
    assert kernel("cpu", p.cgroup_dir, "cpu.cfs_quota_us") == "150000"
    nolimit = QoSState(paths, 1, driver, [be_pod_like(p, SPEC2)], slo())
    assert written(qos.reconcile(nolimit))
    assert kernel("memory", p.cgroup_dir, "memory.limit_in_bytes") == UNLIMITED_V1_MEMORY
    assert written(qos.reconcile(nolimit)) == []


@pytest.mark.realhost
def test_real_cgroup_v1_shrinking_quota_settles_in_one_pass(real_root: tuple[Path, str]) -> None:
    """A larger CPU normalization ratio shrinks every quota: the pod's first write fails (a child is above it), the
    containers shrink, the pod's second write lands."""
    root, name = real_root
    p = be_pod(annotation=SPEC1)
    for rel in (p.cgroup_dir, *(str(c.cgroup_dir) for c in p.containers)):
        (root / "cpu" / rel).mkdir(parents=True, exist_ok=True)
        (root / "memory" / rel).mkdir(parents=True, exist_ok=True)
    paths = HostPaths.under("/").with_overrides(cgroup_root=str(root))
    health = Health()
    ex = Executor(paths, 1, health, force_seconds=0)
    qos = QoSManager([BatchResource()], ex, EventRecorder(health, "n"),
                     health)
    written(qos.reconcile(QoSState(paths, 1, CgroupDriver.CGROUPFS, [p], slo())))
    results = qos.reconcile(QoSState(paths, 1, CgroupDriver.CGROUPFS, [p], slo(), node=node("2")))
    pod_quota = str(V1 / "cpu" / name / p.cgroup_dir / "cpu.cfs_quota_us")
    assert [r.result for r in results if r.write.path.endswith(p.cgroup_dir + "/cpu.cfs_quota_us")] == \
        ["error", "written"]
    assert "EINVAL" in next(r.detail for r in results if r.result == "error")
    assert Path(pod_quota).read_text().strip() == "75000"
    assert (V1 / "cpu" / name / str(p.containers[1].cgroup_dir) / "cpu.cfs_quota_us").read_text().strip() == "50000"
    assert written(qos.reconcile(QoSState(paths, 1, CgroupDriver.CGROUPFS, [p], slo(), node=node("2")))) == []


@pytest.mark.realhost
def test_real_cgroup_v1_idle_pod_refuses_shares_so_none_is_planned(real_root: tuple[Path, str]) -> None:
    root, name = real_root
    require((V1 / "cpu" / "cpu.idle").exists(), "the kernel has no cgroup cpu.idle (mainline >= 5.15)")
    p = be_pod(annotation=SPEC1)
    for rel in [*(qos_dir(CgroupDriver.CGROUPFS, q) for q in K8sQoS), p.cgroup_dir,
                *(str(c.cgroup_dir) for c in p.containers)]:
        (root / "cpu" / rel).mkdir(parents=True, exist_ok=True)
        (root / "memory" / rel).mkdir(parents=True, exist_ok=True)
    paths = HostPaths.under("/").with_overrides(cgroup_root=str(root))
    st = QoSState(paths, 1, CgroupDriver.CGROUPFS, [p], slo(be_cpu_qos=True))
    require(cpuqos.read_facts(st).mechanism == "cpu-idle", "this kernel has group identity; cpu.idle is not used")
    health = Health()
    ex = Executor(paths, 1, health, force_seconds=0)
    cfg = Config("n1", paths, feature_gates={"GroupIdentity": True, "BatchResource": True, "CPUBurst": False,
                                              "RdtResctrl": False})
    qos = QoSManager(enabled_features(cfg), ex, EventRecorder(health, "n1"), health)
    written(qos.reconcile(st))  # no EINVAL: the idle pod's shares are not written
    pod = V1 / "cpu" / name / p.cgroup_dir
    assert (pod / "cpu.idle").read_text().strip() == "1" and (pod / "cpu.shares").read_text().strip() == "3"
    with pytest.raises(OSError) as e:
        (pod / "cpu.shares").write_text("512")
    assert e.value.errno == errno.EINVAL
    assert (pod / "cpu.cfs_quota_us").read_text().strip() == "150000"
    assert written(qos.reconcile(st)) == []
    # BE CPU QoS off: the pod leaves idle and gets its batch shares (not kubelet's 2, not the kernel's 1024)
    off = QoSState(paths, 1, CgroupDriver.CGROUPFS, [p], slo(be_cpu_qos=False))
    written(qos.reconcile(off))
    assert (pod / "cpu.idle").read_text().strip() == "0" and (pod / "cpu.shares").read_text().strip() == "512"
    assert written(qos.reconcile(off)) == []


def be_pod_like(p: PodMeta, annotation: dict[str, Any]) -> PodMeta:
    """The same pod (uid, containers) with another extended-resource spec."""
    raw = json.loads(json.dumps(p.raw))
    raw["metadata"]["annotations"] = {ANNOTATION_EXTENDED_RESOURCE_SPEC: json.dumps(annotation)}
    return pod_meta(raw, CgroupDriver.CGROUPFS, Health())


def test_pod_batch_reads_both_sources() -> None:
    p = be_pod(spec={"container-1": {"requests": res("300")}}, annotation=SPEC)
    batch = pod_batch(p)
    assert batch is not None and set(batch.spec) == {"container-1"} and set(batch.annotation) == {"container-0"}
    assert batch.pod_containers is batch.spec


# ---- the CLI on the example batch pod ---------------------------------------------------------------------------


def test_cli_plan_then_apply_the_example_batch_pod(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """examples/pods/batch.yaml (batch-cpu 2000, batch-memory 4Gi) on a simulated v1 node with BE CPU QoS on: the
    plan shows its limits (not the pod's shares: it is idled), `qos --once` applies them, the next plan is empty."""
    example = yaml.safe_load((Path(__file__).resolve().parents[2] / "examples/pods/batch.yaml").read_text())
    host, args = cpu_qos_node(tmp_path, [(example, K8sQoS.BESTEFFORT)])
    p = pod_meta(example, CgroupDriver.CGROUPFS, Health())
    for rel in (p.cgroup_dir, str(p.containers[0].cgroup_dir)):
        (host.cgroup_root() / "cpu" / rel / "cpu.cfs_quota_us").write_text("-1\n")
        (host.cgroup_root() / "cpu" / rel / "cpu.shares").write_text("2\n")
        (host.cgroup_root() / "memory" / rel / "memory.limit_in_bytes").write_text(UNLIMITED_V1_MEMORY + "\n")

    def run(*argv: str) -> dict[str, Any]:
        assert cli.main([*argv, *args]) == 0
        result: dict[str, Any] = json.loads(capsys.readouterr().out)
        return result

    plan = run("plan", "-o", "json")
    got = {w["path"]: w["value"] for w in plan["writes"]}
    pod_rel, ctr_rel = f"sys/fs/cgroup/cpu/{p.cgroup_dir}", f"sys/fs/cgroup/cpu/{p.containers[0].cgroup_dir}"
    assert got[f"{pod_rel}/cpu.cfs_quota_us"] == "200000" and got[f"{pod_rel}/cpu.idle"] == "1"
    assert f"{pod_rel}/cpu.shares" not in got
    assert got[f"{ctr_rel}/cpu.shares"] == "2048" and got[f"{ctr_rel}/cpu.cfs_quota_us"] == "200000"
    assert got[f"sys/fs/cgroup/memory/{p.cgroup_dir}/memory.limit_in_bytes"] == str(4 * GI)
    run("qos", "--once")
    assert (host.cgroup_root() / "memory" / p.cgroup_dir / "memory.limit_in_bytes").read_text() == str(4 * GI)
    assert run("plan", "-o", "json")["writes"] == []
