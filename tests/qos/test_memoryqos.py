"""CgroupReconcile (memory QoS): values per level, the annotation, what is written where (stock and Anolis, v1 and
v2), the write order, and the chart's NodeSLO writing nothing over kubelet's values."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from apis.slo.decode import nodeslo_config
from koordlet.config import Config
from koordlet.events import EventRecorder
from koordlet.health import Health
from koordlet.host.driver import CgroupDriver, K8sQoS, qos_dir
from koordlet.host.paths import HostPaths
from koordlet.qos import memoryqos
from koordlet.qos.executor import Executor
from koordlet.qos.feature import record
from koordlet.qos.manager import QoSManager, enabled_features
from koordlet.qos.state import QoSState
from koordlet.states.model import PodMeta
from koordlet.states.pods import pod_meta

from conftest import real_v1_root
from simhost import SimHost, make_pod

GI = 1 << 30
MI = 1 << 20
PAGE = os.sysconf("SC_PAGE_SIZE")
STOCK_V2 = ("memory.min", "memory.low", "memory.high", "memory.oom.group")
ANOLIS = (*STOCK_V2, "memory.wmark_ratio", "memory.wmark_scale_factor", "memory.wmark_min_adj", "memory.priority",
          "memory.use_priority_oom")
KUBELET = {"memory.min": "0", "memory.low": "0", "memory.high": "max", "memory.oom.group": "1",
           "memory.wmark_ratio": "0", "memory.wmark_scale_factor": "50", "memory.wmark_min_adj": "0",
           "memory.priority": "0", "memory.use_priority_oom": "0"}
CHART = nodeslo_config({"resourceQOSStrategy": {}})  # koordinator's chart: every class's memoryQOS off
NODE = {"metadata": {"name": "n"}, "status": {"allocatable": {"memory": "16Gi"}}}


def slo(**classes: dict[str, Any]) -> dict[str, Any]:
    return nodeslo_config({"resourceQOSStrategy": {f"{c}Class": {"memoryQOS": {"enable": True, **cfg}}
                                                       for c, cfg in classes.items()}})


def pod(k8s_qos: str = "Burstable", *, label: str | None = "LS", requests: str | None = "1Gi",
        limits: str | None = "2Gi", annotation: object = None, phase: str = "Running", containers: int = 1,
        batch: dict[str, str] | None = None) -> PodMeta:
    raw: dict[str, Any] = make_pod(f"p-{uuid.uuid4().hex[:6]}", str(uuid.uuid4()), k8s_qos, containers=containers,
                                   phase=phase, labels={"koordinator.sh/qosClass": label} if label else None)
    for c in raw["spec"]["containers"]:
        res: dict[str, Any] = {}
        if requests:
            res["requests"] = {"memory": requests}
        if limits:
            res["limits"] = {"memory": limits}
        if batch:
            res = {"requests": {"kubernetes.io/batch-memory": batch["request"]},
                   **({"limits": {"kubernetes.io/batch-memory": batch["limit"]}} if "limit" in batch else {})}
        c["resources"] = res
    if annotation is not None:
        raw["metadata"]["annotations"] = {"koordinator.sh/memoryQOS": annotation if isinstance(annotation, str)
                                          else json.dumps(annotation)}
    return pod_meta(raw, CgroupDriver.CGROUPFS, Health())


def node(tmp_path: Path, version: int, pods: list[PodMeta], files: tuple[str, ...] = STOCK_V2) -> SimHost:
    """A node whose kube-QoS, pod and container dirs hold `files` with kubelet's values (v1: under memory/)."""
    host = SimHost(tmp_path / "host", version, CgroupDriver.CGROUPFS).setup()
    dirs = [qos_dir(CgroupDriver.CGROUPFS, q) for q in K8sQoS]
    for p in pods:
        dirs += [p.cgroup_dir] + [c.cgroup_dir for c in p.containers if c.cgroup_dir]
    for rel in dirs:
        d = host.cgroup_root() / ("memory" if version == 1 else "") / rel
        d.mkdir(parents=True, exist_ok=True)
        for f in files:
            (d / f).write_text(KUBELET[f] + "\n")
    return host


def state(host: SimHost, pods: list[PodMeta], spec: dict[str, Any], *, node_obj: Any = NODE,
          present: bool = True) -> QoSState:
    return QoSState(host.paths, host.version, CgroupDriver.CGROUPFS, pods, spec, nodeslo_present=present,
                    node=node_obj)


def planned(st: QoSState) -> dict[str, str]:
    """rel path under the cgroup root -> value."""
    p = memoryqos.plan(st, memoryqos.read_facts(st))
    return {os.path.relpath(w.path, st.paths.cgroup_root): w.value for w in p.writes}


def rel(host: SimHost, d: str, f: str) -> str:
    return os.path.join("memory", d, f) if host.version == 1 else os.path.join(d, f)


# ---- the chart's NodeSLO: nothing over kubelet's values -----------------------------------------------------------


@pytest.mark.parametrize("version", [1, 2])
def test_the_charts_nodeslo_writes_nothing(tmp_path: Path, version: int) -> None:
    """Upstream writes memory.min/low 0, memory.high max and memory.oom.group 0 (over kubelet's 1) on stock v2 here;
    we leave a class whose memoryQOS is off alone (docs/decisions.md)."""
    pods = [pod(), pod("Guaranteed", label=None, limits="1Gi"), pod("BestEffort", label="BE", requests=None,
                                                                   limits=None, batch={"request": "1Gi"})]
    host = node(tmp_path, version, pods, ANOLIS)
    st = state(host, pods, CHART)
    assert planned(st) == {}
    results = Executor(host.paths, version, Health()).apply(memoryqos.plan(st, memoryqos.read_facts(st)))
    assert results == []
    container = pods[0].containers[0].cgroup_dir
    assert container is not None
    assert (host.cgroup_root() / rel(host, container, "memory.oom.group")).read_text() == "1\n"


def test_koordlet_plan_shows_nothing_for_the_chart_on_v2(tmp_path: Path) -> None:
    p = pod()
    host = node(tmp_path, 2, [p])
    pods_dir = tmp_path / "pods"
    pods_dir.mkdir()
    (pods_dir / "p.yaml").write_text(yaml.safe_dump(p.raw))

    def memory_writes(strategy: dict[str, Any]) -> list[str]:
        nodeslo = {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "metadata": {"name": "sim"},
                   "spec": {"resourceQOSStrategy": strategy}}
        (tmp_path / "nodeslo.yaml").write_text(yaml.safe_dump(nodeslo))
        args = ["--host-root", str(host.root), "--pods-dir", str(pods_dir), "--nodeslo",
                str(tmp_path / "nodeslo.yaml"), "--node-name", "sim", "--state-dir", str(tmp_path / "state"),
                "--feature-gates=CgroupReconcile=true"]
        out = subprocess.run([sys.executable, "-m", "koordlet", "plan", *args, "-o", "json"], capture_output=True,
                             text=True, timeout=60, check=True)
        return [w["path"] for w in json.loads(out.stdout)["writes"] if os.path.basename(w["path"]) in KUBELET]

    assert memory_writes({}) == []
    enabled = memory_writes({"lsClass": {"memoryQOS": {"enable": True, "minLimitPercent": 100}}})  # the control
    assert f"sys/fs/cgroup/{p.cgroup_dir}/memory.min" in enabled


# ---- values ---------------------------------------------------------------------------------------------------


def test_an_enabled_ls_class_on_stock_v2(tmp_path: Path) -> None:
    p = pod(requests="1Gi", limits="2Gi", containers=2)
    g = pod("Guaranteed", label=None, requests="512Mi", limits="512Mi")  # LSR by kube QoS: lsrClass is off
    host = node(tmp_path, 2, [p, g])
    st = state(host, [p, g], slo(ls={"minLimitPercent": 50, "lowLimitPercent": 25, "throttlingPercent": 80,
                                     "oomKillGroup": 1}))
    got = planned(st)
    c0, c1 = (c.cgroup_dir for c in p.containers)
    assert c0 is not None and c1 is not None
    high = (GI + (2 * GI - GI) * 80 // 100) // PAGE * PAGE
    assert got == {
        # the kubepods root sums every pod that asks (the Guaranteed pod's class is off, so it adds nothing)
        "kubepods/memory.min": str(GI), "kubepods/memory.low": str(GI),
        "kubepods/burstable/memory.min": str(GI), "kubepods/burstable/memory.low": str(GI),
        "kubepods/burstable/memory.oom.group": "1",
        # the pod: 2 × 1Gi requested; low (25 %) is raised to min (50 %)
        f"{p.cgroup_dir}/memory.min": str(GI), f"{p.cgroup_dir}/memory.low": str(GI),
        f"{p.cgroup_dir}/memory.oom.group": "1",
        **{f"{c}/{f}": v for c in (c0, c1) for f, v in (
            ("memory.min", str(GI // 2)), ("memory.low", str(GI // 2)), ("memory.high", str(high)),
            ("memory.oom.group", "1"))},
    }


def test_memory_high_without_a_limit_and_without_throttling(tmp_path: Path) -> None:
    p = pod(requests="1Gi", limits=None)
    host = node(tmp_path, 2, [p])
    c = p.containers[0].cgroup_dir
    assert c is not None
    st = state(host, [p], slo(ls={"throttlingPercent": 50}))
    assert planned(st)[f"{c}/memory.high"] == str((GI + (16 * GI - GI) // 2) // PAGE * PAGE)  # node allocatable
    no_node = state(host, [p], slo(ls={"throttlingPercent": 50}), node_obj=None)
    facts = memoryqos.read_facts(no_node)
    assert f"{c}/memory.high" not in planned(no_node)
    # the Node arrives later, with the facts read before it (kept while pods and NodeSLO stay): memory.high follows
    later = state(host, [p], slo(ls={"throttlingPercent": 50}))
    assert any(w.path.endswith(f"{c}/memory.high") for w in memoryqos.plan(later, facts).writes)
    assert planned(state(host, [p], slo(ls={}))).get(f"{c}/memory.high") == "max"  # throttlingPercent 0


def test_be_pods_count_batch_memory(tmp_path: Path) -> None:
    p = pod("BestEffort", label="BE", requests=None, limits=None, batch={"request": "2Gi", "limit": "4Gi"})
    host = node(tmp_path, 2, [p])
    c = p.containers[0].cgroup_dir
    got = planned(state(host, [p], slo(be={"minLimitPercent": 100, "throttlingPercent": 50})))
    assert got[f"{p.cgroup_dir}/memory.min"] == str(2 * GI)
    assert got["kubepods/besteffort/memory.min"] == got["kubepods/memory.min"] == str(2 * GI)
    assert got[f"{c}/memory.high"] == str(3 * GI)


def test_anolis_v1_and_stock_v1(tmp_path: Path) -> None:
    p = pod()
    host = node(tmp_path / "anolis", 1, [p], ANOLIS)
    got = planned(state(host, [p], slo(ls={"wmarkRatio": 90, "priority": 6, "priorityEnable": 1})))
    c = p.containers[0].cgroup_dir
    assert got[f"memory/{c}/memory.wmark_ratio"] == "90"
    assert got[f"memory/{c}/memory.wmark_min_adj"] == "-25"  # the LS default
    assert got["memory/kubepods/burstable/memory.priority"] == "6"
    assert "memory/kubepods/burstable/memory.wmark_ratio" not in got  # kube-QoS dirs get no wmark
    stock = node(tmp_path / "stock", 1, [p], ())
    st = state(stock, [p], slo(ls={"minLimitPercent": 100}))
    assert planned(st) == {}
    health = Health()
    record(health, memoryqos.capabilities(memoryqos.read_facts(st)))
    assert health.capabilities["memory-qos/memory.min"] is False


def test_v2_files_per_dir(tmp_path: Path) -> None:
    """Anolis-only files are written where the dir has them; the rest where it has them."""
    p = pod()
    host = node(tmp_path, 2, [p])
    c = p.containers[0].cgroup_dir
    assert c is not None
    (host.cgroup_root() / c / "memory.wmark_ratio").write_text("0\n")
    got = planned(state(host, [p], slo(ls={})))
    assert got[f"{c}/memory.wmark_ratio"] == "95"
    assert f"{p.cgroup_dir}/memory.wmark_ratio" not in got


# ---- the annotation -----------------------------------------------------------------------------------------------


def test_policy_none_auto_and_fields(tmp_path: Path) -> None:
    off = pod(annotation={"policy": "none"})
    auto = pod(annotation={"policy": "auto"})
    one = pod(annotation={"minLimitPercent": 100})
    host = node(tmp_path, 2, [off, auto, one])
    # the LS class enabled: policy none takes the pod out (and out of the sums)
    got = planned(state(host, [off], slo(ls={"minLimitPercent": 100})))
    assert not any(k.startswith(off.cgroup_dir) for k in got) and got["kubepods/burstable/memory.min"] == "0"
    # the class disabled (the chart): auto writes the default template, explicit fields only themselves
    got = planned(state(host, [auto, one], CHART))
    ac, oc = auto.containers[0].cgroup_dir, one.containers[0].cgroup_dir
    assert got[f"{ac}/memory.high"] == "max" and got[f"{ac}/memory.oom.group"] == "0"
    assert {k: v for k, v in got.items() if k.startswith(one.cgroup_dir)} == {
        f"{one.cgroup_dir}/memory.min": str(GI), f"{oc}/memory.min": str(GI)}
    assert got["kubepods/burstable/memory.min"] == str(GI)  # only the pod that asks for min counts
    assert "kubepods/burstable/memory.oom.group" not in got  # lsClass is off: its kube-QoS dir keeps kubelet's


@pytest.mark.parametrize("annotation", ["{bad", "[]", '{"priority": 13}', '{"policy": 1}', '{"wmarkRatio": "9"}'])
def test_a_malformed_annotation_is_reported_and_ignored(tmp_path: Path, annotation: str) -> None:
    p = pod(annotation=annotation)
    host = node(tmp_path, 2, [p])
    st = state(host, [p], slo(ls={"minLimitPercent": 100}))
    result = memoryqos.plan(st, memoryqos.read_facts(st))
    (err,) = result.errors
    assert (err.kind, err.name, err.field) == ("Pod", f"default/{p.name}", "annotations[koordinator.sh/memoryQOS]")
    assert planned(st)[f"{p.cgroup_dir}/memory.min"] == str(GI)  # the class config still applies


def test_inactive_pods_and_no_nodeslo(tmp_path: Path) -> None:
    done, pending = pod(phase="Succeeded"), pod(phase="Pending")
    host = node(tmp_path, 2, [done, pending])
    got = planned(state(host, [done, pending], slo(ls={"minLimitPercent": 100})))
    assert not any(k.startswith(done.cgroup_dir) for k in got)
    assert got[f"{pending.cgroup_dir}/memory.min"] == str(GI)
    assert planned(state(host, [pending], slo(ls={"minLimitPercent": 100}), present=False)) == {}


# ---- order and the executor ---------------------------------------------------------------------------------------


def test_increases_top_down_then_decreases_bottom_up(tmp_path: Path) -> None:
    p = pod(requests="1Gi")
    host = node(tmp_path, 2, [p])
    c = p.containers[0].cgroup_dir
    assert c is not None
    root = host.cgroup_root()
    (root / "kubepods/memory.min").write_text(f"{4 * GI}\n")  # higher than the sum: a decrease
    (root / p.cgroup_dir / "memory.min").write_text(f"{2 * GI}\n")  # a decrease too
    st = state(host, [p], slo(ls={"minLimitPercent": 100}))
    writes = memoryqos.plan(st, memoryqos.read_facts(st)).writes
    order = [os.path.relpath(w.path, host.paths.cgroup_root) for w in writes if w.path.endswith("memory.min")]
    assert order == ["kubepods/burstable/memory.min", f"{c}/memory.min",  # increases, top-down
                     f"{p.cgroup_dir}/memory.min", "kubepods/memory.min"]  # decreases, bottom-up


def test_through_the_manager_and_executor(tmp_path: Path) -> None:
    p = pod()
    host = node(tmp_path, 2, [p])
    cfg = Config(node_name="n", paths=host.paths, feature_gates={"CgroupReconcile": True, "GroupIdentity": False,
                                                                 "CPUSetAllocator": False, "BatchResource": False,
                                                                 "RdtResctrl": False, "CPUBurst": False,
                                                                 "BECPUSuppress": False})
    assert [f.name for f in enabled_features(cfg)] == ["memoryqos"]
    health = Health()
    manager = QoSManager(enabled_features(cfg), Executor(host.paths, 2, health), EventRecorder(health, "n"), health)
    st = state(host, [p], slo(ls={"minLimitPercent": 100, "throttlingPercent": 100}))
    results = manager.reconcile(st)
    assert {r.result for r in results} == {"written", "unchanged"}  # memory.low 0 is kubelet's already
    assert ("memory.oom.group", "written") in [(os.path.basename(r.write.path), r.result) for r in results]
    c = p.containers[0].cgroup_dir
    assert c is not None
    assert (host.cgroup_root() / c / "memory.high").read_text() == str(2 * GI // PAGE * PAGE)
    assert all(r.result in ("cached", "unchanged") for r in manager.reconcile(st))
    off = Config(node_name="n", paths=host.paths)
    assert "memoryqos" not in [f.name for f in enabled_features(off)]  # off by default, as upstream


@pytest.mark.realhost
def test_real_cgroup_v1_memory_hierarchy(tmp_path: Path) -> None:
    """On this kernel's own v1 memory hierarchy: a stock kernel has no memory.min (the Anolis memcg files), so an
    enabled class writes nothing and says so once; an Anolis kernel gets the values."""
    with real_v1_root(tmp_path, ("memory",)) as (root, _):
        p = pod()
        for rel_dir in ("kubepods", "kubepods/burstable", "kubepods/besteffort", p.cgroup_dir,
                        *(str(c.cgroup_dir) for c in p.containers)):
            (root / "memory" / rel_dir).mkdir(parents=True, exist_ok=True)
        paths = HostPaths.under("/").with_overrides(cgroup_root=str(root))
        st = QoSState(paths, 1, CgroupDriver.CGROUPFS, [p], slo(ls={"minLimitPercent": 100}), node=NODE)
        health = Health()
        facts = memoryqos.read_facts(st)
        record(health, memoryqos.capabilities(facts))
        results = Executor(paths, 1, health).apply(memoryqos.plan(st, facts))
        anolis = (root / "memory/kubepods/memory.min").exists()
        assert health.capabilities["memory-qos/memory.min"] is anolis
        if anolis:
            assert (root / "memory" / p.cgroup_dir / "memory.min").read_text().strip() == str(GI)
        else:
            assert results == []
