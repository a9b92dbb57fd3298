"""blkio QoS: sysfs device resolution, the spec §3.7 example, removal, v2, bfq, annotations, and a real v1 kernel."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from apis.extension.blkio_qos import ANNOTATION_POD_BLKIO_QOS
from apis.slo.decode import nodeslo_config
from koordlet.health import Health
from koordlet.host.driver import CgroupDriver, K8sQoS, pod_dir, qos_dir
from koordlet.host.paths import HostPaths
from koordlet.qos import blkio, blkio_facts
from koordlet.qos.executor import Executor, Result
from koordlet.qos.model import Plan
from koordlet.qos.state import QoSState
from koordlet.states.model import PodMeta
from koordlet.states.pods import pod_meta

from conftest import real_v1_root, require
from simhost import make_pod

THROTTLE = tuple(blkio_facts.V1_THROTTLE)
RIOPS, RBPS, WIOPS, WBPS = THROTTLE
VDB = "253:16"
VDA = "253:0"
EXAMPLE_BE = {"enable": True, "blocks": [{"name": "yoda-pool0", "type": "volumegroup", "ioCfg": {
    "ioWeightPercent": 40, "readIOPS": 1024, "writeIOPS": 1024, "readBPS": 1048576, "writeBPS": 1048576}}]}
EXAMPLE_ROOT = {"enable": True, "blocks": [{"name": "/dev/vdb", "type": "device", "ioCfg": {
    "readLatency": 1000, "writeLatency": 1000, "readLatencyPercent": 90, "writeLatencyPercent": 90,
    "enableUserModel": True, "modelReadBPS": 3324911720, "modelWriteBPS": 2765819289,
    "modelReadSeqIOPS": 168274, "modelWriteSeqIOPS": 367565, "modelReadRandIOPS": 352545,
    "modelWriteRandIOPS": 339390}}]}
EXAMPLE_QOS = f"{VDB} enable=1 ctrl=user rpct=90 rlat=1000 wpct=90 wlat=1000"
EXAMPLE_MODEL = (f"{VDB} ctrl=user rbps=3324911720 rseqiops=168274 rrandiops=352545 wbps=2765819289 "
                 "wseqiops=367565 wrandiops=339390")


# ---- a simulated node --------------------------------------------------------------------------------------------


class Node:
    """sysfs block devices, /proc/self/mountinfo and a blkio (v1) or unified (v2) cgroup tree under a temp dir."""

    def __init__(self, tmp: Path, version: int = 1, driver: CgroupDriver = CgroupDriver.CGROUPFS) -> None:
        self.root = tmp / "host"
        self.paths = HostPaths.under(str(self.root))
        self.version = version
        self.driver = driver
        self.mountinfo: list[str] = []
        self.pods: list[PodMeta] = []
        self.pv_names: dict[tuple[str, str], str] = {}
        self.cgroup("", {})
        self.be = qos_dir(driver, K8sQoS.BESTEFFORT)
        self.cgroup(self.be, {})

    def sys(self, *parts: str) -> Path:
        return Path(self.paths.sys(*parts))

    def disk(self, name: str, number: str, scheduler: str = "mq-deadline", parts: dict[str, str] | None = None) -> None:
        d = self.sys("block", name)
        (d / "queue").mkdir(parents=True)
        (d / "dev").write_text(number + "\n")
        scheds = " ".join(f"[{s}]" if s == scheduler else s for s in ("mq-deadline", "kyber", "bfq", "none"))
        (d / "queue" / "scheduler").write_text(scheds + "\n")
        for part, part_number in (parts or {}).items():
            (d / part).mkdir()
            (d / part / "dev").write_text(part_number + "\n")
            (d / part / "partition").write_text(part[-1] + "\n")

    def dm(self, name: str, number: str, dm_name: str, slaves: list[str], lvm: bool = True) -> None:
        d = self.sys("block", name)
        (d / "dm").mkdir(parents=True)
        (d / "slaves").mkdir()
        (d / "dev").write_text(number + "\n")
        (d / "dm" / "name").write_text(dm_name + "\n")
        (d / "dm" / "uuid").write_text(("LVM-" if lvm else "CRYPT-LUKS2-") + uuid.uuid4().hex + "\n")
        for s in slaves:
            (d / "slaves" / s).mkdir()  # real sysfs has symlinks; only the names matter

    def mount(self, point: str, number: str, source: str) -> None:
        self.mountinfo.append(f"{len(self.mountinfo) + 30} 1 {number} / {point} rw,relatime - ext4 {source} rw")
        proc = Path(self.paths.proc("self"))
        proc.mkdir(parents=True, exist_ok=True)
        (proc / "mountinfo").write_text("\n".join(self.mountinfo) + "\n")

    def dir(self, rel: str) -> Path:
        base = Path(self.paths.cgroup_root) / ("blkio" if self.version == 1 else "")
        return base / rel if rel else base

    def cgroup(self, rel: str, files: dict[str, str]) -> Path:
        d = self.dir(rel)
        d.mkdir(parents=True, exist_ok=True)
        for name, content in files.items():
            (d / name).write_text(content)
        return d

    def v1_class_files(self, rel: str, **extra: str) -> Path:
        return self.cgroup(rel, {**dict.fromkeys(THROTTLE, ""), **extra})

    def read(self, rel: str, name: str) -> str:
        return (self.dir(rel) / name).read_text()

    def add_pod(self, name: str, annotation: str | None = None, *, qos: str | None = "BE", phase: str = "Running",
                volumes: list[dict[str, Any]] | None = None) -> PodMeta:
        uid = str(uuid.uuid5(uuid.NAMESPACE_DNS, name))
        raw = make_pod(name, uid, "BestEffort", labels={"koordinator.sh/qosClass": qos} if qos else {}, phase=phase)
        if annotation is not None:
            raw["metadata"]["annotations"] = {ANNOTATION_POD_BLKIO_QOS: annotation}  # type: ignore[index]
        if volumes is not None:
            raw["spec"]["volumes"] = volumes  # type: ignore[index]
        meta = pod_meta(raw, self.driver, Health())
        self.pods.append(meta)
        return meta

    def state(self, be: dict[str, Any] | None = None, root: dict[str, Any] | None = None,
              **classes: dict[str, Any]) -> QoSState:
        strategy: dict[str, Any] = {k: {"blkioQOS": v} for k, v in classes.items()}
        if be is not None:
            strategy["beClass"] = {"blkioQOS": be}
        if root is not None:
            strategy["cgroupRoot"] = {"blkioQOS": root}
        spec = nodeslo_config({"resourceQOSStrategy": strategy})
        return QoSState(self.paths, self.version, self.driver, list(self.pods), spec)

    def plan(self, state: QoSState) -> Plan:
        return blkio.plan(state, blkio_facts.read_facts(state, self.pv_names))

    def rel(self, plan: Plan) -> list[tuple[str, str]]:
        base = str(self.dir(""))
        return [(os.path.relpath(w.path, base), w.value) for w in plan.writes]


def example_node(tmp: Path, version: int = 1, driver: CgroupDriver = CgroupDriver.CGROUPFS) -> Node:
    """Spec §3.7: vda=253:0 (with vda1), vdb=253:16 carrying the single-PV VG yoda-pool0."""
    node = Node(tmp, version, driver)
    node.disk("vda", VDA, parts={"vda1": "253:1"})
    node.disk("vdb", VDB, parts={"vdb1": "253:17"})
    node.dm("dm-0", "252:0", "yoda--pool0-yoda--test1", ["vdb"])
    node.dm("dm-1", "252:1", "yoda--pool0-yoda--87d8625a--dcc9", ["vdb"])
    return node


# ---- a kernel stand-in for the simulated files --------------------------------------------------------------


def _render_cost_qos(n: str, kv: dict[str, str]) -> str:
    """How the kernel prints an io.cost.qos / blkio.cost.qos line (percentages with two decimals, min/max)."""
    def pct(key: str, default: str) -> str:
        return f"{float(kv.get(key, default)):.2f}"
    return (f"{n} enable={kv.get('enable', '0')} ctrl={kv.get('ctrl', 'auto')} rpct={pct('rpct', '0')} "
            f"rlat={kv.get('rlat', '250000')} wpct={pct('wpct', '0')} wlat={kv.get('wlat', '250000')} "
            "min=1.00 max=10000.00")


def _render_cost_model(n: str, kv: dict[str, str]) -> str:
    auto = {"rbps": "174019176", "rseqiops": "41708", "rrandiops": "370", "wbps": "178075866",
            "wseqiops": "42705", "wrandiops": "378"}
    vals = {**auto, **{k: v for k, v in kv.items() if k in auto}} if kv.get("ctrl") == "user" else auto
    return f"{n} ctrl={kv.get('ctrl', 'auto')} model=linear " + " ".join(f"{k}={v}" for k, v in vals.items())


def settle(results: list[Result], before: dict[str, str]) -> None:
    """The executor truncates and writes one line; a kernel merges it into the per-device table. Rebuild each
    written file from its content before the pass plus the writes, rendered the way the kernel prints them."""
    by_path: dict[str, list[str]] = {}
    for r in results:
        if r.result == "written":
            by_path.setdefault(r.write.path, []).append(r.write.value)
    for path, values in by_path.items():
        name = os.path.basename(path)
        header = [line for line in before[path].splitlines() if line.startswith("default")]
        table: dict[str, dict[str, str] | str] = {}
        for line in before[path].splitlines():
            n, _, rest = line.partition(" ")
            if n != "default" and rest:
                table[n] = dict(p.split("=", 1) for p in rest.split()) if "=" in rest else rest
        for value in values:
            n, _, rest = value.partition(" ")
            if "=" in rest:
                old = table.get(n)
                merged = {**(old if isinstance(old, dict) else {}), **dict(p.split("=", 1) for p in rest.split())}
                if name == "io.max" and all(v == "max" for v in merged.values()):
                    table.pop(n, None)
                else:
                    table[n] = merged
            elif rest in ("0", "default") and name != blkio_facts.V1_COST_WEIGHT:
                table.pop(n, None)
            else:
                table[n] = rest
        lines = list(header)
        for n, v in table.items():
            if isinstance(v, str):
                lines.append(f"{n} {v}")
            elif name.endswith("cost.qos"):
                lines.append(_render_cost_qos(n, v))
            elif name.endswith("cost.model"):
                lines.append(_render_cost_model(n, v))
            else:
                lines.append(f"{n} " + " ".join(f"{k}={v.get(k, 'max')}" for k in blkio.V2_MAX_KEYS))
        Path(path).write_text("".join(line + "\n" for line in lines))


def apply(node: Node, state: QoSState, executor: Executor | None = None) -> list[Result]:
    """One pass: plan, apply through the executor, let the 'kernel' settle the files."""
    plan = node.plan(state)
    assert not plan.errors, plan.errors
    before = {w.path: Path(w.path).read_text() for w in plan.writes if os.path.exists(w.path)}
    results = (executor or Executor(node.paths, node.version, Health())).apply(plan)
    assert all(r.result in ("written", "unchanged") for r in results), [(r.result, r.detail) for r in results]
    settle(results, before)
    return results


def idle(node: Node, state: QoSState) -> None:
    """A second pass over the unchanged node plans nothing, and a fresh executor writes nothing."""
    plan = node.plan(state)
    assert plan.writes == [] and plan.errors == []
    assert Executor(node.paths, node.version, Health()).apply(plan) == []


# ---- the spec §3.7 worked example -------------------------------------------------------------------------


def _example_tree(node: Node, **weight: str) -> None:
    # upstream blkio_reconcile_test.go fixture: 253:16 already throttled, 253:0 left over in the bps files
    node.cgroup(node.be, {RIOPS: f"{VDB} 2048\n", WIOPS: f"{VDB} 2048\n", RBPS: f"{VDA} 2048\n",
                          WBPS: f"{VDA} 2048\n", blkio_facts.V1_COST_WEIGHT: weight.get("weight", f"{VDB} 100\n")})
    node.cgroup("", {blkio_facts.V1_COST_QOS: f"{VDB} enable=1 ctrl=user rlat=2000 wlat=2000\n",
                     blkio_facts.V1_COST_MODEL: ""})


@pytest.mark.parametrize("driver", [CgroupDriver.CGROUPFS, CgroupDriver.SYSTEMD])
def test_worked_example(tmp_path: Path, driver: CgroupDriver) -> None:
    node = example_node(tmp_path, 1, driver)
    _example_tree(node)
    state = node.state(be=EXAMPLE_BE, root=EXAMPLE_ROOT)
    plan = node.plan(state)
    be = qos_dir(driver, K8sQoS.BESTEFFORT)
    assert plan.errors == []
    assert node.rel(plan) == [
        (blkio_facts.V1_COST_QOS, EXAMPLE_QOS),
        (blkio_facts.V1_COST_MODEL, EXAMPLE_MODEL),
        (f"{be}/{RIOPS}", f"{VDB} 1024"),
        (f"{be}/{RBPS}", f"{VDB} 1048576"),
        (f"{be}/{RBPS}", f"{VDA} 0"),  # the stale 253:0 line is cleared...
        (f"{be}/{WIOPS}", f"{VDB} 1024"),
        (f"{be}/{WBPS}", f"{VDB} 1048576"),
        (f"{be}/{WBPS}", f"{VDA} 0"),  # ...only where it exists (no "253:0 0" to the iops files)
        (f"{be}/{blkio_facts.V1_COST_WEIGHT}", f"{VDB} 40"),
    ]
    assert all(w.compare == "line" for w in plan.writes)
    assert {w.resource for w in plan.writes} == {*THROTTLE, blkio_facts.V1_COST_WEIGHT, blkio_facts.V1_COST_QOS,
                                                  blkio_facts.V1_COST_MODEL}  # the executor validates every value
    apply(node, state)
    assert node.read(be, RIOPS) == f"{VDB} 1024\n"
    assert node.read(be, RBPS) == f"{VDB} 1048576\n"
    assert node.read(be, blkio_facts.V1_COST_WEIGHT) == f"{VDB} 40\n"
    assert node.read("", blkio_facts.V1_COST_QOS).startswith(f"{VDB} enable=1 ctrl=user rpct=90.00 rlat=1000 ")
    idle(node, state)


def test_stale_weight_is_reset_only_where_it_exists(tmp_path: Path) -> None:
    node = example_node(tmp_path)
    _example_tree(node, weight=f"{VDB} 100\n{VDA} 50\n")
    plan = node.plan(node.state(be=EXAMPLE_BE))
    weights = [v for p, v in node.rel(plan) if p.endswith(blkio_facts.V1_COST_WEIGHT)]
    assert weights == [f"{VDB} 40", f"{VDA} 100"]


def test_disable_resets_everything_and_then_stays_quiet(tmp_path: Path) -> None:
    node = example_node(tmp_path)
    _example_tree(node)
    apply(node, node.state(be=EXAMPLE_BE, root=EXAMPLE_ROOT))
    off = node.state()  # the default NodeSLO: blkioQOS disabled everywhere
    plan = node.plan(off)
    assert node.rel(plan) == [
        (blkio_facts.V1_COST_QOS, f"{VDB} enable=0"),  # cost.model is left alone
        *[(f"{node.be}/{f}", f"{VDB} 0") for f in THROTTLE],
        (f"{node.be}/{blkio_facts.V1_COST_WEIGHT}", f"{VDB} 100"),
    ]
    apply(node, off)
    assert all(node.read(node.be, f) == "" for f in THROTTLE)
    assert node.read(node.be, blkio_facts.V1_COST_WEIGHT) == f"{VDB} 100\n"  # kept, as upstream: 100 is the default
    assert " enable=0 " in node.read("", blkio_facts.V1_COST_QOS)
    idle(node, off)


def test_root_keeps_other_disks_disabled_and_defaults(tmp_path: Path) -> None:
    node = example_node(tmp_path)
    node.cgroup("", {blkio_facts.V1_COST_QOS: f"{VDA} enable=0 ctrl=auto\n{VDB} enable=1 ctrl=auto\n",
                     blkio_facts.V1_COST_MODEL: ""})
    root = {"enable": True, "blocks": [{"name": "/dev/vda1", "type": "device", "ioCfg": {}}]}
    plan = node.plan(node.state(root=root))
    assert node.rel(plan) == [
        (blkio_facts.V1_COST_QOS, f"{VDA} enable=1 ctrl=user rpct=95 rlat=3000 wpct=95 wlat=3000"),  # defaults
        (blkio_facts.V1_COST_MODEL, f"{VDA} ctrl=auto"),
        (blkio_facts.V1_COST_QOS, f"{VDB} enable=0"),
    ]


def test_no_iocost_and_no_cgroup_means_no_writes(tmp_path: Path) -> None:
    node = example_node(tmp_path)
    (node.dir(node.be)).rmdir()
    plan = node.plan(node.state(be=EXAMPLE_BE, root=EXAMPLE_ROOT))
    assert plan.writes == [] and plan.errors == []


# ---- cgroup v2 ---------------------------------------------------------------------------------------------


def _v2_node(tmp: Path) -> Node:
    node = example_node(tmp, 2, CgroupDriver.SYSTEMD)
    node.cgroup("", {blkio_facts.V2_COST_QOS: "", blkio_facts.V2_COST_MODEL: ""})
    node.cgroup(node.be, {blkio_facts.V2_MAX: "", blkio_facts.V2_WEIGHT: "default 100\n"})
    return node


def test_v2_io_max_weight_and_cost(tmp_path: Path) -> None:
    node = _v2_node(tmp_path)
    be = {"enable": True, "blocks": [{"name": "/dev/vdb", "type": "device",
                                      "ioCfg": {"readBPS": 1048576, "writeIOPS": 100, "ioWeightPercent": 40}}]}
    root = {"enable": True, "blocks": [{"name": "yoda-pool0", "type": "volumegroup", "ioCfg": {"readLatency": 500}}]}
    state = node.state(be=be, root=root)
    plan = node.plan(state)
    assert node.rel(plan) == [
        (blkio_facts.V2_COST_QOS, f"{VDB} enable=1 ctrl=user rpct=95 rlat=500 wpct=95 wlat=3000"),
        (blkio_facts.V2_COST_MODEL, f"{VDB} ctrl=auto"),
        (f"{node.be}/io.max", f"{VDB} rbps=1048576 wbps=max riops=max wiops=100"),
        (f"{node.be}/io.weight", f"{VDB} 40"),  # iocost is being enabled on vdb in the same pass
    ]
    assert all(w.resource is None for w in plan.writes)  # v2 files: values checked by the planner
    apply(node, state)
    assert node.read("", blkio_facts.V2_COST_QOS).startswith(f"{VDB} enable=1 ctrl=user rpct=95.00 rlat=500 ")
    assert node.read("", blkio_facts.V2_COST_MODEL).startswith(f"{VDB} ctrl=auto model=linear rbps=")
    idle(node, state)

    off = node.state()
    plan = node.plan(off)
    assert node.rel(plan) == [
        (blkio_facts.V2_COST_QOS, f"{VDB} enable=0"),
        (f"{node.be}/io.max", f"{VDB} rbps=max wbps=max riops=max wiops=max"),
        (f"{node.be}/io.weight", f"{VDB} default"),
    ]
    apply(node, off)
    assert node.read(node.be, "io.max") == "" and node.read(node.be, "io.weight") == "default 100\n"
    idle(node, off)


def test_v2_weight_needs_iocost_and_unlimited_needs_no_line(tmp_path: Path) -> None:
    node = _v2_node(tmp_path)
    be = {"enable": True, "blocks": [{"name": "/dev/vdb", "type": "device", "ioCfg": {"ioWeightPercent": 40}}]}
    plan = node.plan(node.state(be=be))
    assert plan.writes == []  # all limits "max" and no io.max line; io.weight would be refused without iocost


# ---- bfq -----------------------------------------------------------------------------------------------


def test_bfq_weight_where_there_is_no_iocost(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.disk("vda", VDA, scheduler="mq-deadline")
    node.disk("vdb", VDB, scheduler="bfq")
    node.v1_class_files(node.be, **{blkio_facts.V1_BFQ_WEIGHT: f"default 100\n{VDA} 300\n"})
    be = {"enable": True, "blocks": [
        {"name": "/dev/vdb", "type": "device", "ioCfg": {"ioWeightPercent": 40}},
        {"name": "/dev/vda", "type": "device", "ioCfg": {"ioWeightPercent": 10}},  # not bfq: no per-disk weight
    ]}
    state = node.state(be=be)
    plan = node.plan(state)
    assert node.rel(plan) == [(f"{node.be}/{blkio_facts.V1_BFQ_WEIGHT}", f"{VDB} 40"),
                              (f"{node.be}/{blkio_facts.V1_BFQ_WEIGHT}", f"{VDA} default")]
    apply(node, state)
    assert node.read(node.be, blkio_facts.V1_BFQ_WEIGHT) == f"default 100\n{VDB} 40\n"
    idle(node, state)


def test_v2_bfq_fallback(tmp_path: Path) -> None:
    node = Node(tmp_path, 2)
    node.disk("vdb", VDB, scheduler="bfq", parts={"vdb1": "253:17"})
    node.cgroup(node.be, {blkio_facts.V2_MAX: "", blkio_facts.V2_BFQ_WEIGHT: "default 100\n"})
    be = {"enable": True, "blocks": [{"name": "/dev/vdb1", "type": "device", "ioCfg": {"ioWeightPercent": 55}}]}
    assert node.rel(node.plan(node.state(be=be))) == [(f"{node.be}/io.bfq.weight", f"{VDB} 55")]


# ---- pods and their annotation ---------------------------------------------------------------------------


GOOD = json.dumps({"blocks": [{"name": "/dev/vdb", "type": "device", "iocfg": {"readIOPS": 1024, "writeIOPS": 512}}]})


def test_pod_annotations(tmp_path: Path) -> None:
    node = example_node(tmp_path)
    stale = {RIOPS: f"{VDB} 7\n"}
    pods = {
        "absent": node.add_pod("absent"),
        "empty": node.add_pod("empty", ""),
        "bad": node.add_pod("bad", "{not json"),
        "good": node.add_pod("good", GOOD),
        "noqos": node.add_pod("noqos", GOOD, qos=None),  # raw koordinator class None: ignored
        "pending": node.add_pod("pending", GOOD, phase="Pending"),
    }
    for p in pods.values():
        node.v1_class_files(p.cgroup_dir, **stale)
    plan = node.plan(node.state())
    [err] = plan.errors
    field = f"annotations[{ANNOTATION_POD_BLKIO_QOS}]"
    assert (err.kind, err.name, err.field, err.uid) == ("Pod", "default/bad", field,
                                                        pods["bad"].uid)
    assert err.message.startswith("invalid JSON")
    good, empty = pods["good"].cgroup_dir, pods["empty"].cgroup_dir
    assert node.rel(plan) == [
        (f"{empty}/{RIOPS}", f"{VDB} 0"),  # "" is an empty block list: reset what is there
        (f"{good}/{RIOPS}", f"{VDB} 1024"),
        (f"{good}/{WIOPS}", f"{VDB} 512"),
    ]


def test_pod_volumes_resolve_through_mounts(tmp_path: Path) -> None:
    node = example_node(tmp_path)
    annotation = json.dumps({"blocks": [{"name": "html", "type": "podvolume", "ioCfg": {"readBPS": 4096}}]})
    ephemeral = node.add_pod("eph", annotation, volumes=[{"name": "html", "csi": {"driver": "x"}}])
    pvc = node.add_pod("pvc", annotation, volumes=[{"name": "html", "persistentVolumeClaim": {"claimName": "c"}}])
    node.pv_names[("default", "c")] = "pv-1"
    csi = Path(node.paths.kubelet("pods"))
    node.mount(str(csi / ephemeral.uid / "volumes/kubernetes.io~csi/html/mount"), "252:0",
               "/dev/mapper/yoda--pool0-yoda--test1")  # an LV: its VG's single PV is vdb
    node.mount(str(csi / pvc.uid / "volumes/kubernetes.io~csi/pv-1/mount"), "253:17", "/dev/vdb1")
    for p in (ephemeral, pvc):
        node.v1_class_files(p.cgroup_dir)
    plan = node.plan(node.state())
    assert plan.errors == []
    assert node.rel(plan) == [(f"{ephemeral.cgroup_dir}/{RBPS}", f"{VDB} 4096"),
                              (f"{pvc.cgroup_dir}/{RBPS}", f"{VDB} 4096")]
    node.pv_names.clear()
    [err] = node.plan(node.state()).errors
    assert err.name == "default/pvc" and err.field.endswith("blocks[0].name") and "claim 'c'" in err.message


@pytest.mark.parametrize(("blocks", "field", "message"), [
    ([{"name": "/dev/vdb", "type": "disk"}], "blocks[0].type", "block type 'disk' is not supported"),
    ([{"name": "/dev/vdb"}], "blocks[0].type", "block type '' is not supported"),
    ([{"name": "/dev/sdz", "type": "device"}], "blocks[0].name", "is not a block device"),
    ([{"name": "nope", "type": "volumegroup"}], "blocks[0].name", "has no active logical volume"),
    ([{"name": "html", "type": "podvolume"}], "blocks[0].name", "pod has no volume 'html'"),
    ([{"name": "/dev/vdb", "type": "device", "ioCfg": {"readIOPS": -1}}], "blocks[0].ioCfg.readIOPS",
     "-1 is not in [0, 4294967294]"),
    ([{"name": "/dev/vdb", "type": "device", "ioCfg": {"writeIOPS": 2**32 - 1}}], "blocks[0].ioCfg.writeIOPS",
     "is not in"),
    ([{"name": "/dev/vdb", "type": "device", "ioCfg": {"writeBPS": 2**63}}], "blocks[0].ioCfg.writeBPS", "is not in"),
    ([{"name": "/dev/vdb", "type": "device", "ioCfg": {"ioWeightPercent": 0}}], "blocks[0].ioCfg.ioWeightPercent",
     "0 is not in [1, 100]"),
    ([{"name": "/dev/vdb", "type": "device", "ioCfg": {"IOWEIGHTPERCENT": 101}}],
     "blocks[0].ioCfg.ioWeightPercent", "101 is not in [1, 100]"),
    ([{"name": "/dev/vdb", "type": "device", "ioCfg": {"readBPS": "1Mi"}}], "blocks[0].ioCfg.readBPS",
     "is not an integer"),
    ([{"name": "/dev/vdb", "type": "device", "ioCfg": {"readBPS": 1.5}}], "blocks[0].ioCfg.readBPS",
     "is not an integer"),
    ([{"name": "/dev/vdb", "type": "device", "ioCfg": {"enableUserModel": "yes"}}],
     "blocks[0].ioCfg.enableUserModel", "is not a boolean"),
    ([{"name": "/dev/vda", "type": "device"}, {"name": "/dev/vdb", "type": "device", "ioCfg": []}],
     "blocks[1].ioCfg", "must be an object"),
    ([None], "blocks[0]", "must be an object"),
    ("x", "blocks", "must be a list"),
])
def test_bad_annotation_skips_only_that_pod(tmp_path: Path, blocks: Any, field: str, message: str) -> None:
    node = example_node(tmp_path)
    bad = node.add_pod("bad", json.dumps({"blocks": blocks}))
    good = node.add_pod("good", GOOD)
    for p in (bad, good):
        node.v1_class_files(p.cgroup_dir, **{RIOPS: f"{VDA} 5\n"})
    plan = node.plan(node.state())
    [err] = plan.errors
    assert err.field == f"annotations[{ANNOTATION_POD_BLKIO_QOS}].{field}" and err.reason == "InvalidBlkioQOSAnnotation"
    assert message in err.message
    assert all(w.path.startswith(str(node.dir(good.cgroup_dir))) for w in plan.writes)  # no reset on the bad pod
    assert (f"{good.cgroup_dir}/{RIOPS}", f"{VDB} 1024") in node.rel(plan)


def test_annotation_keys_are_case_insensitive_and_later_keys_win(tmp_path: Path) -> None:
    node = example_node(tmp_path)
    annotation = ('{"BLOCKS": [{"Name": "/dev/vdb", "TYPE": "device", "ioCfg": {"readIOPS": 1}, '
                  '"IOCFG": {"writeIOPS": 2, "readIOPS": null}, "unknown": 1}], "enable": false}')
    pod = node.add_pod("p", annotation)
    node.v1_class_files(pod.cgroup_dir)
    assert node.rel(node.plan(node.state())) == [(f"{pod.cgroup_dir}/{WIOPS}", f"{VDB} 2")]


def test_pod_idempotent_through_the_executor(tmp_path: Path) -> None:
    node = example_node(tmp_path)
    pod = node.add_pod("p", json.dumps({"blocks": [{"name": "/dev/vda", "type": "device", "ioCfg": {
        "readIOPS": 10, "writeBPS": 20, "ioWeightPercent": 30}}]}))
    node.v1_class_files(pod.cgroup_dir, **{blkio_facts.V1_COST_WEIGHT: "", RIOPS: f"{VDB} 99\n"})
    state = node.state()
    executor = Executor(node.paths, 1, Health())
    written = apply(node, state, executor)
    assert [r.write.value for r in written] == [f"{VDA} 10", f"{VDB} 0", f"{VDA} 20", f"{VDA} 30"]
    assert node.read(pod.cgroup_dir, RIOPS) == f"{VDA} 10\n"
    assert executor.apply(node.plan(state)) == []
    idle(node, state)


# ---- NodeSLO levels ----------------------------------------------------------------------------------------


def test_bad_be_block_skips_only_the_be_level(tmp_path: Path) -> None:
    node = example_node(tmp_path)
    _example_tree(node)
    pod = node.add_pod("good", GOOD)
    node.v1_class_files(pod.cgroup_dir)
    be = {"enable": True, "blocks": [{"name": "/dev/vdb", "type": "device"},
                                     {"name": "ghost-vg", "type": "volumegroup"}]}
    plan = node.plan(node.state(be=be, root=EXAMPLE_ROOT))
    [err] = plan.errors
    assert (err.kind, err.field, err.reason) == (
        "NodeSLO", "resourceQOSStrategy.beClass.blkioQOS.blocks[1].name", "InvalidBlkioQOS")
    paths = {p for p, _ in node.rel(plan)}
    assert not any(p.startswith(f"{node.be}/blkio") for p in paths)  # no partial update, no resets
    assert blkio_facts.V1_COST_QOS in paths and f"{pod.cgroup_dir}/{RIOPS}" in paths


def test_user_model_needs_every_model_field(tmp_path: Path) -> None:
    node = example_node(tmp_path)
    _example_tree(node)
    root = {"enable": True, "blocks": [{"name": "/dev/vdb", "type": "device",
                                        "ioCfg": {"enableUserModel": True, "modelReadBPS": 1}}]}
    plan = node.plan(node.state(root=root))
    [err] = plan.errors
    assert err.field == "resourceQOSStrategy.cgroupRoot.blkioQOS.blocks[0].ioCfg.modelReadSeqIOPS"
    assert not any("cost" in w.path for w in plan.writes)


def test_podvolume_is_refused_at_class_level_and_ls_classes_are_reported(tmp_path: Path) -> None:
    node = example_node(tmp_path)
    ls = {"enable": True, "blocks": [{"name": "/dev/vdb", "type": "device"}]}
    be = {"enable": True, "blocks": [{"name": "html", "type": "podvolume"}]}
    plan = node.plan(node.state(be=be, lsClass=ls))
    assert [(e.field, e.reason) for e in plan.errors] == [
        ("resourceQOSStrategy.lsClass.blkioQOS", "UnsupportedBlkioQOS"),
        ("resourceQOSStrategy.beClass.blkioQOS.blocks[0].type", "InvalidBlkioQOS")]


def test_no_nodeslo_no_reconcile(tmp_path: Path) -> None:
    node = example_node(tmp_path)
    _example_tree(node)
    pod = node.add_pod("good", GOOD)
    node.v1_class_files(pod.cgroup_dir)
    state = node.state()
    state = QoSState(state.paths, 1, state.driver, state.pods, {}, nodeslo_present=False)
    assert node.plan(state) == Plan()


# ---- device resolution -------------------------------------------------------------------------------------


def _number(node: Node, name: str, kind: str = "device") -> str:
    facts = blkio_facts.read_facts(node.state())
    block = blkio._Block(name, kind, {}, "blocks[0]")
    return blkio._Resolver(node.state(), facts).block(block, None)


def test_resolution(tmp_path: Path) -> None:
    node = example_node(tmp_path)
    node.disk("nvme0n1", "259:0", parts={"nvme0n1p1": "259:1"})  # nvme minors are not multiples of 16
    node.disk("sdc", "8:32", parts={"sdc1": "8:33", "sdc2": "8:34"})
    node.disk("sdd", "8:48")
    # thin pool inside VG "thin-vg" on sdc1: thin LV -> tpool -> tdata/tmeta -> sdc1
    node.dm("dm-10", "252:10", "thin--vg-pool_tdata", ["sdc1"])
    node.dm("dm-11", "252:11", "thin--vg-pool_tmeta", ["sdc1"])
    node.dm("dm-12", "252:12", "thin--vg-pool-tpool", ["dm-10", "dm-11"])
    node.dm("dm-13", "252:13", "thin--vg-data", ["dm-12"])
    # a VG on two PVs, and a LUKS device on nvme0n1p1 carrying a VG
    node.dm("dm-20", "252:20", "wide-lv", ["sdc2", "sdd"])
    node.dm("dm-30", "252:30", "luks-1234", ["nvme0n1p1"], lvm=False)
    node.dm("dm-31", "252:31", "secure-lv", ["dm-30"])
    assert _number(node, "/dev/vdb") == VDB
    assert _number(node, "/dev/vda1") == VDA
    assert _number(node, "/dev/nvme0n1p1") == "259:0"
    assert _number(node, "yoda-pool0", "volumegroup") == VDB
    assert _number(node, "thin-vg", "volumegroup") == "8:32"
    assert _number(node, "/dev/mapper/thin--vg-data") == "8:32"
    assert _number(node, "/dev/thin-vg/data") == "8:32"
    assert _number(node, "secure", "volumegroup") == "259:0"
    assert _number(node, "/dev/mapper/luks-1234") == "259:0"
    with pytest.raises(blkio._Bad, match="2 physical volumes"):
        _number(node, "wide", "volumegroup")
    with pytest.raises(blkio._Bad, match="not a block device"):
        _number(node, "vdb")  # upstream keys are /dev paths


def test_facts_from_sysfs_and_mountinfo(tmp_path: Path) -> None:
    node = example_node(tmp_path)
    node.mount("/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/with\\040space/mount", "253:17", "/dev/vdb1")
    facts = blkio_facts.read_facts(node.state())
    assert facts.devices["vdb1"] == blkio_facts.BlockDevice("vdb1", "253:17", "part", parent="vdb",
                                                            scheduler="mq-deadline")
    assert facts.devices["dm-0"].lvm and facts.devices["dm-0"].slaves == ("vdb",)
    assert facts.mounts["/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/with space/mount"] == ("253:17",
                                                                                                 "/dev/vdb1")
    assert str(node.dir(node.be)) in facts.dirs


# ---- the real kernel ---------------------------------------------------------------------------------------


BLKIO_V1 = Path("/sys/fs/cgroup/blkio")


def _root_disk() -> tuple[str, str]:
    """(kernel name, MAJ:MIN) of the whole disk holding / (read from sysfs, as the agent does)."""
    st = os.stat("/")
    dev = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}").resolve()
    require(dev.exists(), "/ is not on a block device")
    if (dev / "partition").exists():
        dev = dev.parent
    return dev.name, (Path("/sys/block") / dev.name / "dev").read_text().strip()


@pytest.fixture
def v1_blkio(tmp_path: Path) -> Iterator[Path]:
    """An agent cgroup root whose blkio/ is a symlink to a uniquely named parent in the real blkio hierarchy."""
    require((BLKIO_V1 / "blkio.throttle.read_iops_device").exists(), "no cgroup v1 blkio hierarchy with throttling")
    with real_v1_root(tmp_path, ("blkio",)) as (root, _):
        yield root


@pytest.mark.realhost
def test_real_cgroup_v1_throttles(v1_blkio: Path) -> None:
    disk, number = _root_disk()
    paths = HostPaths.under("/").with_overrides(cgroup_root=str(v1_blkio))
    uid = str(uuid.uuid4())
    be_rel = qos_dir(CgroupDriver.CGROUPFS, K8sQoS.BESTEFFORT)
    pod_rel = pod_dir(CgroupDriver.CGROUPFS, K8sQoS.BESTEFFORT, uid)
    (v1_blkio / "blkio" / pod_rel).mkdir(parents=True)
    raw = make_pod("real", uid, "BestEffort", labels={"koordinator.sh/qosClass": "BE"})
    raw["metadata"]["annotations"] = {ANNOTATION_POD_BLKIO_QOS: json.dumps(  # type: ignore[index]
        {"blocks": [{"name": f"/dev/{disk}", "type": "device", "ioCfg": {"readIOPS": 300, "writeBPS": 2097152}}]})}
    pod = pod_meta(raw, CgroupDriver.CGROUPFS, Health())
    be = {"enable": True, "blocks": [{"name": f"/dev/{disk}", "type": "device", "ioCfg": {
        "readIOPS": 1024, "writeIOPS": 512, "readBPS": 1048576, "writeBPS": 4194304, "ioWeightPercent": 40}}]}

    def state(be_cfg: dict[str, Any], annotation: str | None = None) -> QoSState:
        if annotation is not None:
            raw["metadata"]["annotations"] = {ANNOTATION_POD_BLKIO_QOS: annotation}  # type: ignore[index]
        spec = nodeslo_config({"resourceQOSStrategy": {"beClass": {"blkioQOS": be_cfg}}})
        return QoSState(paths, 1, CgroupDriver.CGROUPFS, [pod], spec)

    def kernel(rel: str, name: str) -> str:
        return (v1_blkio / "blkio" / rel / name).read_text()

    executor = Executor(paths, 1, Health())
    on = state(be)
    facts = blkio_facts.read_facts(on)
    assert facts.devices[disk].number == number
    plan = blkio.plan(on, facts)
    assert plan.errors == []
    results = executor.apply(plan)
    assert results and all(r.result == "written" for r in results), [(r.result, r.detail) for r in results]
    assert kernel(be_rel, RIOPS) == f"{number} 1024\n"
    assert kernel(be_rel, WIOPS) == f"{number} 512\n"
    assert kernel(be_rel, RBPS) == f"{number} 1048576\n"
    assert kernel(be_rel, WBPS) == f"{number} 4194304\n"
    assert kernel(pod_rel, RIOPS) == f"{number} 300\n"
    assert kernel(pod_rel, WBPS) == f"{number} 2097152\n"
    assert kernel(pod_rel, RBPS) == "" and kernel(pod_rel, WIOPS) == ""  # 0 = unlimited: never written
    if facts.devices[disk].scheduler == "bfq":
        assert f"{number} 40" in kernel(be_rel, blkio_facts.V1_BFQ_WEIGHT)

    # the unchanged node: nothing planned, and a fresh executor (no cache) writes nothing
    again = blkio.plan(on, blkio_facts.read_facts(on))
    assert again.writes == [] and again.errors == []

    off = state({"enable": False}, annotation="")
    results = Executor(paths, 1, Health()).apply(blkio.plan(off, blkio_facts.read_facts(off)))
    assert all(r.result == "written" for r in results), [(r.result, r.detail) for r in results]
    assert {r.write.value for r in results} == {f"{number} 0"}
    for rel in (be_rel, pod_rel):
        assert all(kernel(rel, f) == "" for f in THROTTLE)
    assert blkio.plan(off, blkio_facts.read_facts(off)).writes == []
