"""Bad input at volume: 10 000 generated pods, annotations, labels, NodeSLO specs and host writes, property-checked.

Issue #8: whatever the pods and the NodeSLO say, no exception escapes a QoS planner (resctrl, CPU QoS, blkio) or
the executor, no write lands outside the cgroup of the pod it is for (or a QoS dir, resctrl group, sysctl or cgroup
root file the feature owns), and every value is one the executor's validator (koordlet.host.resources) accepts and
the kernel would take. Counts: 3 500 examples of 1-3 generated pods + 2 500 NodeSLO specs (with 1-2 pods) + 1 500
random-JSON pods and specs through the planners, 2 500 sets of 1-4 invalid writes straight into the executor
= 10 000 examples (~60 s on 2 cores).

The examples are derandomized (a fixed sequence, stable in CI); KOORDLET_FUZZ_RANDOM=1 draws fresh ones and
KOORDLET_FUZZ_SCALE scales the counts.
"""

from __future__ import annotations

import functools
import json
import os
import random
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apis.extension.blkio_qos import ANNOTATION_POD_BLKIO_QOS
from apis.extension.cpu_qos import ANNOTATION_POD_CPU_QOS
from apis.extension.resctrl import ANNOTATION_RESCTRL
from apis.slo.decode import decode_nodeslo, nodeslo_config
from apis.slo.types import NodeSLOSpec
from koordlet.collectors.hostapps import host_apps
from koordlet.events import EventRecorder
from koordlet.health import Health
from koordlet.host.driver import CgroupDriver, K8sQoS, container_dir, pod_dir, qos_dir
from koordlet.host.paths import HostPaths
from koordlet.host.resources import RESOURCES
from koordlet.qos import blkio, blkio_facts, cpuqos, resctrl, resctrl_facts
from koordlet.qos.blkio_facts import (
    V1_BFQ_WEIGHT,
    V1_COST_MODEL,
    V1_COST_QOS,
    V1_COST_WEIGHT,
    V1_THROTTLE,
    V2_BFQ_WEIGHT,
    V2_COST_MODEL,
    V2_COST_QOS,
    V2_MAX,
    V2_WEIGHT,
)
from koordlet.qos.executor import Executor
from koordlet.qos.features import Blkio, CPUQoS, Resctrl
from koordlet.qos.manager import QoSManager
from koordlet.qos.model import Plan, Write
from koordlet.qos.state import QoSState
from koordlet.states.model import PodMeta
from koordlet.states.pods import PodState

from simhost import make_pod

FUZZ = settings(deadline=None, database=None, derandomize=os.environ.get("KOORDLET_FUZZ_RANDOM") != "1",
                suppress_health_check=list(HealthCheck), print_blob=True)


def scaled(n: int) -> int:
    """The example count; KOORDLET_FUZZ_SCALE=0.1 runs a tenth of them while developing."""
    return max(1, int(n * float(os.environ.get("KOORDLET_FUZZ_SCALE", "1"))))

QOS_LABEL = "koordinator.sh/qosClass"
PRIORITY_LABEL = "koordinator.sh/priority-class"
ANNOTATIONS = (ANNOTATION_RESCTRL, ANNOTATION_POD_CPU_QOS, ANNOTATION_POD_BLKIO_QOS)
POOL = tuple(f"0000000{i}-aaaa-bbbb-cccc-00000000000{i}" for i in range(5))  # pod uids with cgroups on the hosts
KUBE_QOS = (K8sQoS.GUARANTEED, K8sQoS.BURSTABLE, K8sQoS.BESTEFFORT)
CPU_FILES = ("cpu.bvt_warp_ns", "cpu.idle", "cpu.shares", "cpu.weight")
BLKIO_FILES = (*V1_THROTTLE, V1_COST_WEIGHT, V1_BFQ_WEIGHT, V2_MAX, V2_WEIGHT,
               V2_BFQ_WEIGHT)
ROOT_BLKIO_FILES = (V1_COST_QOS, V1_COST_MODEL, V2_COST_QOS, V2_COST_MODEL)
SYSCTLS = (cpuqos.SYSCTL_GROUP_IDENTITY, cpuqos.SYSCTL_CORE_SCHED)
CLASS_GROUP = {"LSE": "LSR", "LSR": "LSR", "LS": "LS", "BE": "BE"}  # resctrl class group of a koordinator QoS
VDA, VDA1, VDB, DM0 = "253:0", "253:1", "253:16", "252:0"


# ---- simulated hosts --------------------------------------------------------------------------------------------


@dataclass
class Host:
    """A node directory with pod cgroups for POOL in every kube-QoS dir, resctrl, block devices and sysctls."""

    root: Path
    version: int
    driver: CgroupDriver
    cpu: str  # "bvt": group identity; "idle": mainline cpu.idle
    vendor: str = resctrl.INTEL
    mbps: bool = False
    resctrl_mounted: bool = True
    cache_ids: tuple[int, ...] = (0, 1)
    cbm: int = 0x7FF
    min_cbm_bits: int = 2
    iocost: bool = True  # blkio.cost.* (Anolis) on v1; without it, per-device bfq weights
    tid_owner: dict[int, str] = field(default_factory=dict, repr=False)  # thread id -> the pod cgroup dir it lives in

    @functools.cached_property
    def pool_dirs(self) -> frozenset[str]:
        return frozenset(pod_dir(self.driver, q, u) for q in KUBE_QOS for u in POOL)

    @functools.cached_property
    def paths(self) -> HostPaths:
        return HostPaths.under(str(self.root))

    @functools.cached_property
    def cgroup_root(self) -> str:
        return os.path.normpath(self.paths.cgroup_root)

    def subsystems(self) -> tuple[str, ...]:
        return ("cpu", "cpuacct", "memory", "cpuset", "blkio") if self.version == 1 else ("",)

    def dirs(self, rel: str) -> list[str]:
        """The absolute dirs of a cgroup in every hierarchy (v1: one per subsystem)."""
        return [os.path.normpath(os.path.join(self.cgroup_root, sub, rel)) for sub in self.subsystems()]

    def files(self, rel: str, **content: str) -> None:
        for d in self.dirs(rel):
            os.makedirs(d, exist_ok=True)
            for name, text in content.items():
                Path(d, name.replace("__", ".")).write_text(text)

    def build(self) -> Host:
        v2 = self.version == 2
        if v2:
            os.makedirs(self.cgroup_root, exist_ok=True)
            Path(self.cgroup_root, "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
            Path(self.cgroup_root, "io.cost.qos").write_text(f"{VDB} enable=0 ctrl=auto rpct=0.00 rlat=250000 "
                                                              "wpct=0.00 wlat=250000 min=1.00 max=10000.00\n")
            Path(self.cgroup_root, "io.cost.model").write_text(f"{VDB} ctrl=auto model=linear rbps=1 rseqiops=1 "
                                                                "rrandiops=1 wbps=1 wseqiops=1 wrandiops=1\n")
        elif self.iocost:
            self.files("")
            Path(self.cgroup_root, "blkio", "blkio.cost.qos").write_text(f"{VDB} enable=1 ctrl=user rpct=95.00 "
                                                                          "rlat=3000 wpct=95.00 wlat=3000\n")
            Path(self.cgroup_root, "blkio", "blkio.cost.model").write_text(f"{VDB} ctrl=auto\n")
        cpu = {"cpu__bvt_warp_ns": "0\n"} if self.cpu == "bvt" else {"cpu__idle": "0\n"}
        shares = {"cpu__weight": "39\n"} if v2 else {"cpu__shares": "1024\n"}
        io = ({"io__max": f"{VDA} rbps=1000 wbps=max riops=max wiops=max\n", "io__weight": "default 100\n",
               "io__bfq__weight": "default 100\n"} if v2 else
              {**{f.replace(".", "__"): "" for f in V1_THROTTLE},
               **({"blkio__cost__weight": f"{VDA} 50\n"} if self.iocost else {"blkio__bfq__weight_device": ""})})
        tasks = "cgroup__threads" if v2 else "tasks"
        for q, qos in enumerate(KUBE_QOS):
            self.files(qos_dir(self.driver, qos), **cpu, **shares, **io)
            for i, uid in enumerate(POOL):
                rel = pod_dir(self.driver, qos, uid)
                tid = 10_000 + i * 100 + q * 10
                idle = {"cpu__idle": "1\n" if i == 1 else "0\n"} if self.cpu == "idle" else {}
                self.files(rel, **{**cpu, **idle, **shares, **io, tasks: f"{tid}\n"})
                self.tid_owner[tid] = rel
                crel = container_dir(self.driver, rel, f"containerd://{uid.replace('-', '')}00")
                self.files(crel, **cpu, **shares, **{tasks: f"{tid + 1}\n{tid + 2}\n"})
                self.tid_owner[tid + 1] = self.tid_owner[tid + 2] = rel
        # a dir in kubepods that is no pod's: nothing may ever be written there
        self.files(qos_dir(self.driver, K8sQoS.BESTEFFORT) + "/not-a-pod", **cpu, **shares, **io)
        proc = self.root / "proc"
        (proc / "sys/kernel").mkdir(parents=True, exist_ok=True)
        if self.cpu == "bvt":
            (proc / "sys/kernel" / cpuqos.SYSCTL_GROUP_IDENTITY).write_text("0\n")
            (proc / "sys/kernel" / cpuqos.SYSCTL_CORE_SCHED).write_text("1\n")
        self._resctrl()
        self._block()
        return self

    def _resctrl(self) -> None:
        proc = self.root / "proc"
        (proc / "self").mkdir(parents=True, exist_ok=True)
        (proc / "cpuinfo").write_text(f"processor\t: 0\nvendor_id\t: {self.vendor}\nflags\t\t: fpu cat_l3 mba\n\n")
        opts = "rw" + (",mba_MBps" if self.mbps else "")
        (proc / "mounts").write_text(f"resctrl /sys/fs/resctrl resctrl {opts} 0 0\n" if self.resctrl_mounted else "")
        if not self.resctrl_mounted:
            return
        r = Path(self.paths.resctrl())
        (r / "info/L3").mkdir(parents=True)
        (r / "info/MB").mkdir(parents=True)
        (r / "info/L3/cbm_mask").write_text(f"{self.cbm:x}\n")
        (r / "info/L3/min_cbm_bits").write_text(f"{self.min_cbm_bits}\n")
        (r / "info/L3/num_closids").write_text("6\n")  # root + 2 groups present: exhaustion is reachable
        (r / "info/MB/num_closids").write_text("8\n")
        (r / "info/MB/bandwidth_gran").write_text("10\n")
        (r / "info/MB/min_bandwidth").write_text("10\n")
        full = self.schemata()
        (r / "schemata").write_text(full)
        for name in ("LS", "other", f"{resctrl_facts.POD_GROUP_PREFIX}{POOL[2]}"):
            (r / name).mkdir()
            (r / name / "schemata").write_text(full)
            (r / name / "tasks").write_text("")
            os.utime(r / name, (1, 1))  # old: a stale pod group may be removed

    def schemata(self) -> str:
        mb = resctrl.MBA_MAX_MBPS if self.mbps else resctrl.AMD_UNLIMITED_MB if self.vendor == resctrl.AMD else 100
        return ("    L3:" + ";".join(f"{i}={self.cbm:x}" for i in self.cache_ids) + "\n"
                "    MB:" + ";".join(f"{i}={mb}" for i in self.cache_ids) + "\n")

    def _block(self) -> None:
        sys_block = Path(self.paths.sys("block"))
        for name, number, sched in (("vda", VDA, "bfq"), ("vdb", VDB, "mq-deadline")):
            (sys_block / name / "queue").mkdir(parents=True)
            (sys_block / name / "dev").write_text(number + "\n")
            schedulers = " ".join(f"[{s}]" if s == sched else s for s in ("mq-deadline", "bfq", "none"))
            (sys_block / name / "queue/scheduler").write_text(schedulers + "\n")
        (sys_block / "vda/vda1").mkdir()
        (sys_block / "vda/vda1/dev").write_text(VDA1 + "\n")
        (sys_block / "vda/vda1/partition").write_text("1\n")
        dm = sys_block / "dm-0"
        (dm / "dm").mkdir(parents=True)
        (dm / "slaves/vdb").mkdir(parents=True)
        (dm / "dev").write_text(DM0 + "\n")
        (dm / "dm/name").write_text("yoda--pool0-lv\n")
        (dm / "dm/uuid").write_text("LVM-0123456789\n")
        vol = self.paths.kubelet("pods", POOL[0], "volumes", "kubernetes.io~csi", "vol1", "mount")
        Path(self.paths.proc("self", "mountinfo")).write_text(
            f"30 1 {VDA1} / {vol} rw - ext4 /dev/vda1 rw\n31 1 {DM0} / /data rw - xfs /dev/mapper/yoda--pool0-lv rw\n")


class Hosts(list[Host]):
    def __repr__(self) -> str:  # hypothesis prints the fixture with a failing example: keep it short
        return f"<{len(self)} simulated hosts>"


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Hosts:
    """v1 cgroupfs with group identity, Intel RDT and iocost; v2 systemd with cpu.idle and AMD mba_MBps; v1 systemd
    with cpu.idle, resctrl supported but not mounted, and bfq."""
    base = tmp_path_factory.mktemp("bad-input")
    return Hosts([
        Host(base / "a", 1, CgroupDriver.CGROUPFS, "bvt").build(),
        Host(base / "b", 2, CgroupDriver.SYSTEMD, "idle", vendor=resctrl.AMD, mbps=True, cache_ids=(0, 1, 2, 3),
             cbm=0xFFFF, min_cbm_bits=1).build(),
        Host(base / "c", 1, CgroupDriver.SYSTEMD, "idle", resctrl_mounted=False, iocost=False).build(),
    ])


# ---- strategies: values that are structured but wrong, and random JSON ---------------------------------------

NASTY = ["", " ", "..", "../..", "/", "/etc/passwd", "a/../../b", "x\ny", "1\n2", "\x00", "1\x00", "0\n", "-1",
         "max", "NaN", "Infinity", "1e999", "0x10", "１", "ǅ", "ſchemata", "LLC", "MB", "null", "[]", "{}", "\u2028",
         "  7 ", "a" * 300]
HUGE = [0, 1, -1, 2, -2, 3, 99, 100, 101, 1000, 2**31 - 1, 2**31, 2**32 - 2, 2**32 - 1, 2**32, 2**63 - 1, 2**63,
        -(2**63), -(2**63) - 1, 2**64, 10**30, -(10**30)]


def _junk(rng: random.Random, depth: int = 0) -> Any:
    """One random JSON-ish value: scalars of every type (NaN, huge ints, nasty strings), lists, objects."""
    kind = rng.randrange(9 if depth < 3 else 6)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.choice(HUGE)
    if kind == 2:
        return rng.randint(-200, 200)
    if kind == 3:
        return rng.choice([0.5, -0.0, 1e300, float("nan"), float("inf"), -float("inf"), 100.0, 2.5e-7])
    if kind in (4, 5):
        return rng.choice(NASTY) if kind == 4 else "".join(rng.choice("aZ0-_.:/\n\x00é{}[]\"") for _ in
                                                         range(rng.randrange(8)))
    if kind in (6, 7):
        return [_junk(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice([*NASTY[:8], "range", "percent", "blocks", "enable", "k"]): _junk(rng, depth + 1)
            for _ in range(rng.randrange(4))}


# A fixed pool of junk picked with one draw each: hypothesis spends its draws on structure, not on junk.
_RNG = random.Random(8)
JUNK = st.sampled_from(NASTY + HUGE + [_junk(_RNG) for _ in range(600)])
NASTY_TEXT = st.sampled_from(NASTY)
HUGE_INTS = st.sampled_from(HUGE)
SCALARS = st.one_of(JUNK, st.integers(-200, 200), st.text(max_size=12))
RANDOM_JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) |
                           st.dictionaries(st.one_of(NASTY_TEXT, st.text(max_size=8)), inner, max_size=4),
                           max_leaves=10)


EIGHTHS = st.integers(0, 7)


@st.composite
def _weighted(draw: st.DrawFn, good: st.SearchStrategy[Any], bad_in_8: int) -> Any:
    # st.one_of(good, good, JUNK) would not weigh: one_of drops repeated branches
    return draw(JUNK) if draw(EIGHTHS) >= 8 - bad_in_8 else draw(good)  # hypothesis favours 0: 0 means good


def maybe_bad(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A leaf: mostly plausible values, often wrong ones (bad input is planned around, good input still applied)."""
    return _weighted(good, 3)


def rarely_bad(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A level of structure: wrong only now and then, so that the leaves below it are reached."""
    return _weighted(good, 1)


def _spell(name: str, mode: int, exact: int) -> str:
    """A JSON key as Go would match it (exact, case-folded) or slightly wrong; modes below `exact` are exact."""
    return [name.lower(), name.upper(), name + "x", name.replace("s", "ſ")][mode % 4] if mode >= exact else name


def obj(*, solid: bool = False, **fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """An object with a random subset of its fields, keys sometimes spelt differently, sometimes a junk key.

    `solid`: a level of structure, where most fields are present and keys mostly exact."""
    names = list(fields)
    exact = 60 if solid else 12  # of 64 or 16 spellings: 4 are not exact
    subsets, spelling = st.integers(0, 2 ** len(names) - 1), st.integers(0, exact + 3)

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        missing, mode = draw(subsets), draw(spelling)  # hypothesis favours 0: all fields present
        if solid:
            missing &= draw(subsets) & draw(subsets)
        out = {_spell(n, mode, exact): draw(fields[n]) for i, n in enumerate(names) if not missing >> i & 1}
        if mode == exact + 2:
            out[draw(NASTY_TEXT)] = draw(JUNK)
        return out
    return build()


PERCENT = st.integers(-5, 105)
RANGE = maybe_bad(st.lists(PERCENT, max_size=3) | st.tuples(st.integers(0, 60), st.integers(40, 100)).map(list))
CACHE_ID = maybe_bad(st.integers(-1, 4))
RESCTRL_DOC = obj(
    solid=True,
    llc=rarely_bad(obj(solid=True, schemata=rarely_bad(obj(range=RANGE, percent=maybe_bad(PERCENT))),
                       schemataPerCache=rarely_bad(st.lists(maybe_bad(obj(cacheID=CACHE_ID, range=RANGE)),
                                                            max_size=3)))),
    mb=rarely_bad(obj(solid=True, schemata=rarely_bad(obj(percent=maybe_bad(PERCENT), range=RANGE)),
                      schemataPerCache=rarely_bad(st.lists(maybe_bad(obj(cacheID=CACHE_ID, percent=maybe_bad(PERCENT))),
                                                           max_size=3)))),
)
CPUQOS_DOC = obj(enable=maybe_bad(st.booleans()), groupIdentity=maybe_bad(st.integers(-3, 3)),
                 schedIdle=maybe_bad(st.integers(-1, 2)), coreExpeller=maybe_bad(st.booleans()))
# IOCfg fields and their ranges (apis/slo/v1alpha1 IOCfg; iops are u32 in the kernel)
IO_FIELDS = {"readIOPS": (0, blkio.IOPS_MAX), "writeIOPS": (0, blkio.IOPS_MAX), "readBPS": (0, 2**63 - 1),
             "writeBPS": (0, 2**63 - 1), "ioWeightPercent": (1, 100), "readLatency": (0, 2**63 - 1),
             "writeLatency": (0, 2**63 - 1), "readLatencyPercent": (0, 100), "writeLatencyPercent": (0, 100),
             **dict.fromkeys(("modelReadBPS", "modelWriteBPS", "modelReadSeqIOPS", "modelWriteSeqIOPS",
                              "modelReadRandIOPS", "modelWriteRandIOPS"), (1, 2**63 - 1))}


def _io_cfg(rng: random.Random) -> dict[str, Any]:
    """An ioCfg: a few fields, mostly valid (one bad field refuses the whole block list), sometimes at or past an
    edge or junk; sometimes a user cost model, usually complete."""
    cfg: dict[str, Any] = {}
    model = rng.random() < 0.2
    for k, (lo, hi) in IO_FIELDS.items():
        if rng.random() < (0.9 if model and k.startswith("model") else 0.25):
            roll = rng.random()
            cfg[k] = (rng.randint(lo, min(hi, 10**6)) if roll < 0.85 else rng.choice([lo, hi]) if roll < 0.9
                      else rng.choice([lo - 1, hi + 1]) if roll < 0.96 else _junk(rng))
    if model or rng.random() < 0.05:
        cfg["enableUserModel"] = model if rng.random() < 0.95 else _junk(rng)
    return cfg


# A pool picked with one draw: 16 fields drawn one by one made NodeSLO specs slow to generate.
IO_CFG = st.sampled_from([{}] + [_io_cfg(_RNG) for _ in range(400)])
BLOCK = obj(solid=True,
            name=rarely_bad(st.sampled_from(["/dev/vda", "/dev/vda1", "/dev/vdb", "/dev/dm-0", "yoda-pool0",
                                            "/dev/mapper/yoda--pool0-lv", "/dev/yoda-pool0/lv", "vol1", "nope",
                                            "/dev/../etc"])),
            type=rarely_bad(st.sampled_from(["device", "device", *blkio.BLOCK_TYPES, "Device", ""])),
            ioCfg=rarely_bad(IO_CFG))
BLOCKS = rarely_bad(st.lists(rarely_bad(BLOCK), min_size=1, max_size=2))
BLKIO_DOC = obj(solid=True, blocks=BLOCKS)


def deep(n: int, opener: str) -> str:
    return opener * n


def _annotation_text(doc: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """The annotation value: the structured doc as JSON, corrupted JSON, absurd nesting, random JSON, or no string."""
    as_json = doc.map(lambda d: json.dumps(d, allow_nan=True))

    @st.composite
    def corrupt(draw: st.DrawFn) -> str:
        text = draw(as_json)
        cut = draw(st.integers(0, len(text)))
        return text[:cut] + draw(st.sampled_from(["", "\x00", "\n", "}", "]]", ",", "..", "\ud800"])) + text[cut:]

    nesting = st.builds(deep, st.sampled_from([10, 900, 5_000, 100_000]),
                        st.sampled_from(["[", '{"llc":', '{"blocks":', '{"enable":[', "[{"]))
    return st.one_of(as_json, as_json, as_json, corrupt(), nesting, JUNK.map(json.dumps), JUNK)


ANNOTATION_TEXT = {name: _annotation_text(doc) for name, doc in zip(ANNOTATIONS, (RESCTRL_DOC, CPUQOS_DOC, BLKIO_DOC),
                                                                     strict=True)}
ABSENT = object()
COIN, CONTAINERS, SUBSET3, ONE_IN_FIVE = st.booleans(), st.integers(0, 2), st.integers(0, 7), st.integers(0, 4)
K8S_QOS = st.sampled_from(["Guaranteed", "Burstable", "BestEffort"])
PHASES = st.sampled_from(["Running", "Running", "Running", "Running", "Pending", "Succeeded", "Failed", "", "?"])
PRIORITY = maybe_bad(st.integers(0, 10_000))
CONTAINER_ID = st.one_of(st.just("containerd://../../x"), JUNK)
SUBTREES = st.lists(st.sampled_from(["metadata.labels", "metadata.annotations", "spec", "status",
                                     "status.containerStatuses", "spec.containers", "metadata"]), max_size=2)
POD_INDEXES = {n: st.lists(st.integers(0, len(POOL) - 1), min_size=n[0], max_size=n[1], unique=True)
               for n in ((1, 3), (1, 2))}
EXTRA_PODS = st.lists(st.dictionaries(st.sampled_from(["metadata", "spec", "status", "kind"]), RANDOM_JSON),
                      max_size=1)
LABEL_VALUES = st.one_of(st.sampled_from(["LSE", "LSR", "LS", "BE", "SYSTEM", ABSENT]),
                         st.sampled_from(["", "ls", "be", "BE ", "LS\n", "koord-prod", "koord-batch", "koord-free",
                                          "koord-mid", ABSENT]), JUNK)
CPU_QUANTITY = st.one_of(st.sampled_from(["100m", "1", "2.5", "0", "-1", "1e3", "999999999", "1Ki", "m", "", "0.0001",
                                          "9223372036854775807", "1e400"]), JUNK)
CPU_RESOURCES = obj(requests=obj(cpu=CPU_QUANTITY), limits=obj(cpu=CPU_QUANTITY))


@functools.cache
def raw_pod(index: int, garbage: bool) -> st.SearchStrategy[dict[str, Any]]:
    """One strategy per pod kind: hypothesis labels a strategy by its source, so building one per draw is slow."""
    return _raw_pod(index, garbage)


@st.composite
def _raw_pod(draw: st.DrawFn, index: int, garbage: bool) -> dict[str, Any]:
    """A Pod as kubelet or a pods dir could deliver it; with `garbage`, whole subtrees are random JSON. Pod `index`
    has uid POOL[index] (uids are unique on a node), or with `garbage` sometimes a junk uid."""
    uid: Any = POOL[index] if not garbage or draw(COIN) else draw(JUNK)
    k8s_qos = draw(K8S_QOS) if not garbage or draw(COIN) else draw(JUNK)
    pod: dict[str, Any] = make_pod(f"p{index}", str(uid) if uid is not None else "", str(k8s_qos),
                                   containers=draw(CONTAINERS), namespace="fuzz")
    pod["metadata"]["uid"] = uid
    pod["status"]["qosClass"] = k8s_qos
    pod["status"]["phase"] = draw(PHASES)
    labels = {k: v for k in (QOS_LABEL, PRIORITY_LABEL) if (v := draw(LABEL_VALUES)) is not ABSENT}
    annotations: dict[str, Any] = {}
    present = draw(SUBSET3)
    for i, name in enumerate(ANNOTATIONS):
        if present >> i & 1:
            annotations[name] = draw(ANNOTATION_TEXT[name])
    pod["metadata"]["labels"] = labels
    pod["metadata"]["annotations"] = annotations
    pod["spec"]["containers"][:0] = [{"name": "r", "resources": draw(CPU_RESOURCES)}]
    pod["spec"]["priority"] = draw(PRIORITY)
    if draw(COIN):
        pod["spec"]["volumes"] = [{"name": "vol1", "csi": {"driver": "x"}},
                                  {"name": "claim", "persistentVolumeClaim": {"claimName": draw(NASTY_TEXT)}}]
    for cs in pod["status"]["containerStatuses"]:
        if draw(ONE_IN_FIVE) == 0:
            cs["containerID"] = draw(CONTAINER_ID)
    if garbage:
        for path in draw(SUBTREES):
            parent, _, leaf = path.rpartition(".")
            target = pod[parent] if parent else pod
            if isinstance(target, dict):
                target[leaf] = draw(RANDOM_JSON)
    return pod


def class_block(enable: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return obj(
        solid=True,
        cpuQOS=rarely_bad(obj(solid=True, enable=enable, groupIdentity=maybe_bad(st.integers(-2, 3)),
                              schedIdle=maybe_bad(st.integers(-1, 2)), coreExpeller=maybe_bad(st.booleans()))),
        resctrlQOS=rarely_bad(obj(solid=True, enable=enable, catRangeStartPercent=maybe_bad(PERCENT),
                                  catRangeEndPercent=maybe_bad(PERCENT), mbaPercent=maybe_bad(PERCENT))),
        blkioQOS=rarely_bad(obj(solid=True, enable=enable, blocks=BLOCKS)),
    )


HOST_APP = obj(solid=True, name=maybe_bad(st.sampled_from(["nginx", "a/../../b", "..", "x\ny"])),
               qos=maybe_bad(st.sampled_from(["LS", "BE", "LSR"])), priority=maybe_bad(st.just("koord-prod")),
               cgroupPath=maybe_bad(obj(base=maybe_bad(st.sampled_from(["Kubepods", "KubepodsBesteffort", "Host"])),
                                        parentDir=maybe_bad(st.sampled_from(["host-latency-sensitive", "..", "/",
                                                                             "a\x00b"])),
                                        relativePath=maybe_bad(st.sampled_from(["nginx", "../..", "/etc", "x\ny"])))))
ENABLE = _weighted(st.sampled_from([True, True, True, False]), 1)
CLASS = rarely_bad(class_block(ENABLE))
NODESLO_SPEC = obj(
    solid=True,
    resourceQOSStrategy=rarely_bad(obj(
        solid=True,
        policies=maybe_bad(obj(cpuPolicy=maybe_bad(st.sampled_from(["groupIdentity", "coreSched", "", "none"])))),
        lsrClass=CLASS, lsClass=CLASS, beClass=CLASS, systemClass=CLASS,
        cgroupRoot=rarely_bad(obj(solid=True, blkioQOS=rarely_bad(obj(solid=True, enable=ENABLE, blocks=BLOCKS)))),
    )),
    hostApplications=maybe_bad(st.lists(rarely_bad(HOST_APP), max_size=2)),
)

# Everything on: what a node running all features looks like (the pods vary, this does not).
ALL_ON = {"resourceQOSStrategy": {
    **{c: {"cpuQOS": {"enable": True}, "resctrlQOS": {"enable": True}, "blkioQOS": {"enable": True, "blocks": []}}
       for c in ("lsrClass", "lsClass")},
    "beClass": {"cpuQOS": {"enable": True}, "resctrlQOS": {"enable": True},
                "blkioQOS": {"enable": True, "blocks": [{"name": "/dev/vdb", "type": "device",
                                                         "ioCfg": {"readIOPS": 100, "ioWeightPercent": 30}}]}},
    "cgroupRoot": {"blkioQOS": {"enable": True, "blocks": [{"name": "/dev/vdb", "type": "device", "ioCfg": {
        "enableUserModel": True, "readLatency": 2000, **dict.fromkeys(("modelReadBPS", "modelWriteBPS",
                                                                         "modelReadSeqIOPS", "modelWriteSeqIOPS",
                                                                         "modelReadRandIOPS", "modelWriteRandIOPS"),
                                                                        100)}}]}},
}}


ALL_ON_MERGED = nodeslo_config(ALL_ON)  # planners only read it


# ---- the pipeline and the invariants -------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    pod_level: bool = True
    core_sched: bool = False


OPTIONS = st.builds(Options, st.booleans(), st.booleans())


def pods_of(raw: list[Any], driver: CgroupDriver) -> list[PodMeta]:
    """As the agent takes pods in: bad ones are skipped by PodState (an exception here escapes the pod sync)."""
    state = PodState(driver, Health())
    state.update(raw)
    return state.pods


def qos_state(host: Host, pods: list[PodMeta], spec: NodeSLOSpec, present: bool = True) -> QoSState:
    apps = host_apps(spec.host_applications, host.driver) if present else []
    return QoSState(host.paths, host.version, host.driver, pods, spec, apps, present)


def plan_all(host: Host, state: QoSState, opts: Options) -> list[tuple[str, Plan]]:
    """Each feature's read_facts + plan, called directly so that any exception fails the test."""
    return [
        ("resctrl", resctrl.plan(state, resctrl_facts.read_facts(state), pod_level=opts.pod_level, node_name="n",
                                 max_mbps=10_000)),
        ("cpuqos", cpuqos.plan(state, cpuqos.read_facts(state), group_identity=True, core_sched=opts.core_sched,
                               node_name="n")),
        ("blkio", blkio.plan(state, blkio_facts.read_facts(state))),
    ]


_L3 = re.compile(r"L3:((?:[0-9]+=[0-9a-f]+;)+)\n")
_MB = re.compile(r"MB:((?:[0-9]+=[0-9]+;)+)\n")
_DEV_LINE = re.compile(r"([0-9]+:[0-9]+) (.*)")


def _under(path: str, parent: str) -> bool:
    return path.startswith(os.path.join(parent, ""))


def check_value(host: Host, w: Write) -> None:
    """The value is one the executor's validator takes and the kernel file's format and range allow."""
    name = os.path.basename(w.path)
    if w.resource is not None:
        res = RESOURCES[w.resource]
        assert res.file(host.version) == name, f"{w.resource} written to {name}"
        assert res.validate(w.value, host.version) is None, (w, res.validate(w.value, host.version))
        return
    if w.op == "mount":
        assert w.value == "resctrl"
    elif w.op in ("mkdir", "rmdir"):
        assert w.value == ""
    elif name == "tasks":
        assert w.op == "tids" and all(t.isdigit() and int(t) > 0 for t in w.value.split()), w
    elif name == "schemata":
        if m := _L3.fullmatch(w.value):
            for entry in m.group(1).rstrip(";").split(";"):
                cid, mask = entry.split("=")
                bits = int(mask, 16)
                low = bits >> ((bits & -bits).bit_length() - 1) if bits else 0
                assert int(cid) in host.cache_ids and bits and bits & ~host.cbm == 0, w
                assert (low + 1) & low == 0 and bin(bits).count("1") >= host.min_cbm_bits, f"mask not contiguous: {w}"
        elif m := _MB.fullmatch(w.value):
            top = resctrl.MBA_MAX_MBPS if host.mbps else resctrl.AMD_UNLIMITED_MB if host.vendor == resctrl.AMD \
                else 100
            for entry in m.group(1).rstrip(";").split(";"):
                cid, value = entry.split("=")
                assert int(cid) in host.cache_ids and 1 <= int(value) <= top, w
                if host.vendor == resctrl.INTEL and not host.mbps:
                    assert int(value) % 10 == 0 and int(value) >= 10, w
        else:
            raise AssertionError(f"schemata write {w.value!r} is neither one L3 nor one MB line")
    elif name in SYSCTLS:
        assert w.value in ("0", "1"), w
    elif name in (V2_COST_QOS, V2_COST_MODEL):
        assert RESOURCES[name.replace("io.", "blkio.")].validate(w.value, 1) is None, w
    else:
        m = _DEV_LINE.fullmatch(w.value)
        assert m is not None and m.group(1) in (VDA, VDA1, VDB), w
        if name == V2_MAX:
            kv = dict(p.split("=") for p in m.group(2).split())
            assert set(kv) == {"rbps", "wbps", "riops", "wiops"}, w
            for k, v in kv.items():
                top = blkio.IOPS_MAX if k.endswith("iops") else 2**63 - 1
                assert v == "max" or 1 <= int(v) <= top, w
        else:
            assert name in (V2_WEIGHT, V2_BFQ_WEIGHT, V1_BFQ_WEIGHT), w
            assert m.group(2) == "default" or 1 <= int(m.group(2)) <= 100, w


@dataclass(frozen=True)
class Places:
    """Where the writes of one plan may go, computed once per plan."""

    pods: dict[str, PodMeta]  # pod name -> pod (names are unique in the examples)
    pod_dirs: frozenset[str]  # cgroup dirs of the listed pods, and the pool's dirs on disk (dangling ones)
    qos_dirs: frozenset[str]
    groups: frozenset[str]  # resctrl groups the feature may touch
    apps: frozenset[str]  # host application dirs the NodeSLO names
    resctrl_root: str
    kernel: str

    @classmethod
    def of(cls, host: Host, state: QoSState) -> Places:
        prefix = resctrl_facts.POD_GROUP_PREFIX
        return cls({p.name: p for p in state.pods},
                   frozenset({p.cgroup_dir for p in state.pods} | host.pool_dirs),
                   frozenset(qos_dir(host.driver, q) for q in KUBE_QOS),
                   frozenset({*resctrl_facts.CLASS_GROUPS, prefix + POOL[2]} | {prefix + p.uid for p in state.pods}),
                   frozenset(a.rel_dir.strip("/") for a in state.host_apps),
                   os.path.normpath(host.paths.resctrl()), os.path.normpath(host.paths.proc("sys", "kernel")))


_POD_IN_REASON = re.compile(r"fuzz/(p[0-9]+)\b")


def check_place(host: Host, places: Places, w: Write, opts: Options) -> None:
    """The path is in the cgroup (or resctrl group) of the pod the write is for, or a node-level place the feature
    owns (kube-QoS dirs, class groups, the cgroup root's iocost files, the group-identity sysctls)."""
    path, name = w.path, os.path.basename(w.path)
    assert ".." not in path.split("/") and os.path.normpath(path) == path.rstrip("/"), w
    parent = os.path.dirname(path)
    m = _POD_IN_REASON.search(w.reason)
    pod = places.pods.get(m.group(1)) if m else None  # the pod the planner says the write is for
    root = places.resctrl_root
    if _under(path, root) or path == root:
        if w.op == "mount":
            assert path == root
            return
        group = os.path.relpath(path, root).split("/")[0]
        assert group in places.groups, w
        assert pod is None or group == resctrl_facts.POD_GROUP_PREFIX + pod.uid, f"not the group of {pod.name}: {w}"
        assert (w.op in ("mkdir", "rmdir") and path == os.path.join(root, group)) or \
            (name in ("schemata", "tasks") and parent == os.path.join(root, group)), w
        assert w.op != "rmdir" or group.startswith(resctrl_facts.POD_GROUP_PREFIX), w
        if name == "tasks":
            for tid in w.value.split():  # a thread goes into the group of the pod (or class) it belongs to
                mine = [p for p in places.pods.values() if p.cgroup_dir == host.tid_owner.get(int(tid))]
                if group.startswith(resctrl_facts.POD_GROUP_PREFIX):
                    assert any(resctrl_facts.POD_GROUP_PREFIX + p.uid == group for p in mine), f"{tid} not {group}'s"
                else:
                    assert any(CLASS_GROUP.get(p.koord_qos) == group for p in mine), f"tid {tid} not {group}'s"
        return
    if parent == places.kernel:
        assert name in SYSCTLS and host.cpu == "bvt", w
        return
    assert _under(path, host.cgroup_root), f"write outside every owned root: {w}"
    rel = os.path.relpath(parent, host.cgroup_root)
    if host.version == 1:
        sub, _, rel = rel.partition("/")
        assert (sub == "cpu" and name in CPU_FILES) or (sub == "blkio" and name in (*BLKIO_FILES, *ROOT_BLKIO_FILES)), w
    if rel in ("", "."):
        assert name in ROOT_BLKIO_FILES, w
        return
    if rel in places.qos_dirs:
        assert name in (*CPU_FILES, *BLKIO_FILES) and pod is None, w
        if name == "cpu.idle":
            assert opts.core_sched, f"cpu.idle on a kube-QoS dir without the CoreSched gate: {w}"
        return
    owner = next((d for d in places.pod_dirs if rel == d or _under(rel, d)), None)
    if owner is not None:
        assert name in (*CPU_FILES, *BLKIO_FILES), w
        assert pod is None or owner == pod.cgroup_dir, f"not the cgroup of {pod.name}: {w}"
        if name == "cpu.idle" and w.value == "1":
            assert rel == owner, f"cpu.idle=1 below a pod cgroup: {w}"
        return
    assert host.cpu == "bvt" and rel in places.apps and name == "cpu.bvt_warp_ns", f"write to no pod's dir: {w}"


SEEN: Counter[str] = Counter()  # what the properties exercised: file or op -> writes checked, "error:<kind>" -> errors


def check(host: Host, state: QoSState, plans: list[tuple[str, Plan]], opts: Options) -> int:
    """Every write is well placed and valid, the dry-run executor accepts every one of them; returns the count."""
    executor = Executor(host.paths, host.version, Health(), dry_run=True)
    places = Places.of(host, state)
    n = 0
    for _, p in plans:
        for w in p.writes:
            check_place(host, places, w, opts)
            check_value(host, w)
            SEEN[w.op if w.op != "write" else os.path.basename(w.path)] += 1
        SEEN.update(f"error:{e.kind}" for e in p.errors)
        bad = [r for r in executor.apply(p) if r.result in ("invalid", "error")]
        assert not bad, bad
        for e in p.errors:
            assert isinstance(e.message, str) and e.kind in ("Pod", "NodeSLO", "Node"), e
        n += len(p.writes)
    return n


# ---- the properties ---------------------------------------------------------------------------------------------


@settings(FUZZ, max_examples=scaled(3_500))
@given(data=st.data(), host_index=st.integers(0, 2), opts=OPTIONS)
def test_3500_generated_pods_through_all_planners(hosts: list[Host], data: st.DataObject, host_index: int,
                                                  opts: Options) -> None:
    """Pods with structured-but-wrong and corrupted annotations, labels, uids, QoS classes and container ids on a
    node with every feature on: planners never raise, writes stay in the pod's own cgroup, values are valid."""
    host = hosts[host_index]
    indexes = data.draw(POD_INDEXES[1, 3])
    raw = [data.draw(raw_pod(i, garbage=False), label=f"pod{i}") for i in indexes]
    pods = pods_of(raw, host.driver)
    state = qos_state(host, pods, ALL_ON_MERGED)
    check(host, state, plan_all(host, state, opts), opts)


@settings(FUZZ, max_examples=scaled(2_500))
@given(data=st.data(), host_index=st.integers(0, 2), opts=OPTIONS, spec=NODESLO_SPEC, present=st.booleans())
def test_2500_generated_nodeslo_specs_through_all_planners(hosts: list[Host], data: st.DataObject, host_index: int,
                                                           opts: Options, spec: dict[str, Any], present: bool) -> None:
    """NodeSLO specs with fields out of range, of the wrong type, or junk, as the agent takes them in: the decoder
    refuses what validation refuses (the defaults stay, as for a refused NodeSLO in the agent), and what it accepts
    goes through every planner to writes the executor and the kernel take."""
    host = hosts[host_index]
    decoded = decode_nodeslo({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "spec": spec})
    assert (decoded.spec is None) == bool(decoded.problems)
    indexes = data.draw(POD_INDEXES[1, 2])
    pods = pods_of([data.draw(raw_pod(i, garbage=False)) for i in indexes], host.driver)
    state = qos_state(host, pods, decoded.spec or nodeslo_config(None), present)
    plans = plan_all(host, state, opts)
    check(host, state, plans, opts)
    # the CPU QoS rule depends on no host fact: a spec the decoder let through is taken whole
    assert not [e for e in dict(plans)["cpuqos"].errors if e.kind == "NodeSLO"]
    SEEN["nodeslo:accepted" if decoded.spec is not None else "nodeslo:refused"] += 1


@settings(FUZZ, max_examples=scaled(1_500))
@given(data=st.data(), host_index=st.integers(0, 2), spec=st.one_of(NODESLO_SPEC, RANDOM_JSON))
def test_1500_random_json_pods_and_specs_through_the_manager(hosts: list[Host], data: st.DataObject, host_index: int,
                                                             spec: Any) -> None:
    """Whole subtrees of the pods and the NodeSLO replaced by random JSON, through QoSManager with a dry-run
    executor and the event recorder, as `koordlet plan` runs it (a NodeSLO the decoder refuses leaves the defaults):
    no feature fails, nothing invalid is applied."""
    host = hosts[host_index]
    indexes = data.draw(POD_INDEXES[1, 3])
    raw: list[Any] = [data.draw(raw_pod(i, garbage=True)) for i in indexes]
    raw += data.draw(EXTRA_PODS)
    pods = pods_of(raw, host.driver)
    decoded = decode_nodeslo({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "spec": spec})
    state = qos_state(host, pods, decoded.spec or nodeslo_config(None))
    health = Health()
    executor = Executor(host.paths, host.version, health, dry_run=True)
    features = [Resctrl(pod_level=True, node_name="n"), CPUQoS(group_identity=True, core_sched=True, node_name="n"),
                Blkio()]
    manager = QoSManager(features, executor, EventRecorder(health, "n"), health)
    plans: list[Plan] = []
    results = manager.reconcile(state, plans.append)
    assert not [k for k in health.skipped if k == ("qos", "feature-failed")], health.skipped
    assert not [r for r in results if r.result in ("invalid", "error")]
    check(host, state, [("all", plans[0])], Options(core_sched=True))


# ---- the executor refuses what it must never write ----------------------------------------------------------


@dataclass(frozen=True)
class BadWrite:
    write: Write
    target: str  # the file whose content must not change ("" when the path is not a real file)


def _resource_file(host: Host, resource: str) -> str:
    res = RESOURCES[resource]
    rel = pod_dir(host.driver, K8sQoS.BURSTABLE, POOL[0])
    name = res.file(host.version)
    assert name is not None
    sub = res.v1_subsystem if host.version == 1 else ""
    return os.path.join(host.cgroup_root, sub or "", rel, name)


WRITABLE = sorted(n for n, r in RESOURCES.items() if not r.readonly)


@st.composite
def bad_write(draw: st.DrawFn, host: Host) -> BadWrite:
    """A write the executor must refuse: a value out of the resource's range or not a value at all, a path outside
    the host roots or climbing with "..", a read-only or unknown resource, a multi-line value, a strange mount."""
    kind = draw(st.sampled_from(["value", "value", "value", "outside", "dotdot", "readonly", "unknown", "lines",
                                 "mount"]))
    resource = draw(st.sampled_from([r for r in WRITABLE if RESOURCES[r].file(host.version) is not None]))
    target = _resource_file(host, resource)
    if kind == "value":
        value = draw(st.one_of(NASTY_TEXT, st.integers().map(str), HUGE_INTS.map(str), st.text(max_size=10)))
        if RESOURCES[resource].validate(value, host.version) is None:
            value = "not a value\n"  # rarely the draw is valid for this file; this never is
        return BadWrite(Write(target, value, "fuzz", resource=resource), target)
    if kind == "outside":
        path = draw(st.sampled_from([str(host.root.parent / "etc" / "passwd"), "/etc/passwd", "relative/cpu.shares",
                                     str(host.root) + "-evil/sys/fs/cgroup/cpu/x", ""]))
        return BadWrite(Write(path, "1", "fuzz", op=draw(st.sampled_from(["write", "mkdir", "rmdir", "tids"]))), "")
    if kind == "dotdot":
        inside = os.path.dirname(target)
        path = draw(st.sampled_from([os.path.join(inside, "..", os.path.basename(target)),
                                     os.path.join(host.cgroup_root, "..", "..", "proc", "sys", "kernel", "x"),
                                     inside + "/../../../../../../../tmp/evil"]))
        return BadWrite(Write(path, "2", "fuzz", op=draw(st.sampled_from(["write", "mkdir", "rmdir"]))), "")
    if kind == "readonly":
        ro = draw(st.sampled_from(sorted(n for n, r in RESOURCES.items() if r.readonly and r.file(host.version))))
        return BadWrite(Write(target, "1", "fuzz", resource=ro), target)
    if kind == "unknown":
        return BadWrite(Write(target, "1", "fuzz", resource=draw(st.sampled_from(["cpu.Shares", "", "../cpu.shares",
                                                                                   "memory.kmem.limit"]))), target)
    if kind == "lines":
        lines = draw(st.sampled_from(["1\n2", "0\n0", "L3:0=1;\nMB:0=10;", "1\n\n2"]))
        return BadWrite(Write(target, lines, "fuzz"), target)
    fs = draw(st.sampled_from(["tmpfs", "proc", "cgroup", "", "resctrl\n", "resctrl,rw", "bind"]))
    return BadWrite(Write(os.path.join(host.cgroup_root, "cpu"), fs, "fuzz", op="mount"), "")


@settings(FUZZ, max_examples=scaled(2_500))
@given(data=st.data(), host_index=st.integers(0, 2), count=st.integers(1, 4))
def test_2500_invalid_writes_are_refused_and_nothing_is_written(hosts: list[Host], data: st.DataObject,
                                                                host_index: int, count: int) -> None:
    """A real (not dry-run) executor given only invalid writes: every one is refused as `invalid`, counted as a
    skipped item, and no file changes (checked on the target files; the whole tree is checked once below)."""
    host = hosts[host_index]
    bad = [data.draw(bad_write(host)) for _ in range(count)]
    before = {b.target: Path(b.target).read_text() if os.path.exists(b.target) else None for b in bad if b.target}
    health = Health()
    results = Executor(host.paths, host.version, health).apply(Plan([b.write for b in bad]))
    assert [r.result for r in results] == ["invalid"] * len(bad), [(r.write, r.result, r.detail) for r in results]
    assert health.cgroup_writes == 0 and health.skipped[("write", "invalid-value")] == len(bad)
    assert {t: Path(t).read_text() if os.path.exists(t) else None for t in before} == before


EXERCISED = ("cpu.bvt_warp_ns", "cpu.idle", "cpu.shares", "cpu.weight", "sched_core", "sched_group_identity_enabled",
             "schemata", "tids", "mkdir", "rmdir", "mount", "blkio.throttle.read_iops_device", "blkio.cost.weight",
             "blkio.cost.qos", "blkio.cost.model", "blkio.bfq.weight_device", "io.max", "io.weight", "io.cost.qos",
             "io.cost.model", "error:Pod", "error:NodeSLO", "nodeslo:accepted", "nodeslo:refused")


def test_fuzzed_runs_left_every_host_file_as_built(hosts: Hosts, tmp_path: Path) -> None:
    """Rebuilt from scratch, each host matches the one the properties ran on: no example wrote or created a file.
    And when the properties ran (the whole module), they reached every kind of write and error (not only errors)."""
    if SEEN and scaled(1000) == 1000:  # a scaled-down run may miss a rare kind
        assert not [k for k in EXERCISED if not SEEN[k]], sorted(SEEN.items())
    for host in hosts:
        fresh = Host(tmp_path / host.root.name, host.version, host.driver, host.cpu, host.vendor, host.mbps,
                     host.resctrl_mounted, host.cache_ids, host.cbm, host.min_cbm_bits, host.iocost).build()

        def tree(root: Path) -> Iterator[tuple[str, str]]:
            for p in sorted(root.rglob("*")):
                yield str(p.relative_to(root)), p.read_text().replace(str(root), "<root>") if p.is_file() else "<dir>"
        assert list(tree(host.root)) == list(tree(fresh.root))


# ---- regressions found by the properties --------------------------------------------------------------------


@pytest.mark.parametrize(("feature", "annotation", "good"), [
    ("resctrl", ANNOTATION_RESCTRL, '{"llc": {"schemata": {"range": [0, 50]}}}'),
    ("cpuqos", ANNOTATION_POD_CPU_QOS, '{"enable": true, "groupIdentity": 2}'),
    ("blkio", ANNOTATION_POD_BLKIO_QOS,
     '{"blocks": [{"name": "/dev/vdb", "type": "device", "ioCfg": {"readIOPS": 9}}]}'),
])
def test_deeply_nested_annotation_skips_only_its_pod(hosts: Hosts, feature: str, annotation: str, good: str) -> None:
    """JSON nested deeper than Python's recursion limit made json.loads raise RecursionError, which no planner
    caught: QoSManager then dropped the whole feature for every pod of the node. Now it is that pod's PlanError."""
    host = hosts[0]
    raw = []
    for i, text in enumerate((good, "[" * 100_000)):
        pod = make_pod(f"p{i}", POOL[i], "Burstable", containers=1, namespace="fuzz",
                       labels={QOS_LABEL: "LS" if feature == "cpuqos" else "BE"})
        pod["metadata"]["annotations"] = {annotation: text}  # type: ignore[index]
        raw.append(pod)
    pods = pods_of(raw, host.driver)
    state = qos_state(host, pods, nodeslo_config(ALL_ON))
    planned = dict(plan_all(host, state, Options()))[feature]
    bad_dir, good_dir = pods[1].cgroup_dir, pods[0].cgroup_dir
    assert [(e.kind, e.name) for e in planned.errors] == [("Pod", "fuzz/p1")]
    assert "JSON" in planned.errors[0].message
    group = resctrl_facts.POD_GROUP_PREFIX
    assert not [w for w in planned.writes if f"/{bad_dir}/" in w.path or f"{group}{POOL[1]}" in w.path]
    assert [w for w in planned.writes if f"/{good_dir}/" in w.path or f"{group}{POOL[0]}" in w.path]
