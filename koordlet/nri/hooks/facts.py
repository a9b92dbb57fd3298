"""The node facts the runtime hooks read, gathered from the host once and kept: an NRI call touches memory only.

Usage (the NRI plugin)::

    reader = NodeFactsReader(paths, cgroup_version, lambda: agent.driver,
                             lambda: agent.nodeslo_spec if agent.nodeslo_present else None)
    result = stages.create_container(pod, container, reader.facts(), options)
    if result.stale_facts:                 # e.g. a VF created after the facts were read
        reader.refresh(result.stale_facts)  # re-read only those kinds (at most once a second per kind)
        result = stages.create_container(pod, container, reader.facts(), options)
    results = executor.apply(result.plan)
    reader.observe(results)                # resctrl groups created/removed by the plan, without re-reading

What is read, and when:

- at construction and on `refresh`: device nodes under the dev root (`/dev/infiniband/*` and the Ascend/Cambricon
  nodes: their type, major/minor from st_rdev, mode and owner), the uverbs node of every PCI function
  (`<sys-root>/bus/pci/devices/<bdf>/infiniband_verbs/`, first entry in name order, as upstream's os.ReadDir),
  the resctrl mount and its control groups, and the group-identity interfaces (`cpu.bvt_warp_ns` at the kubepods
  root, the `kernel.sched_group_identity_enabled` sysctl);
- the CPU's resctrl flags and the mount's capabilities (cache ids, cbm, MBA): once per mount (a remount is read
  afresh on refresh);
- on every `facts()` call, from memory: the merged NodeSLO, the cgroup driver, the cpuset rule (the share pools
  the NodeResourceTopology loop last computed) and the Node's CPU normalization ratio, through the getters given.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

from apis.core.errors import KoordletError
from koordlet.health import Health
from koordlet.host.driver import CgroupDriver, K8sQoS, qos_dir
from koordlet.host.paths import HostPaths
from koordlet.host.resources import resource_path
from koordlet.nri.hooks.model import FACT_DEV, FACT_PCI, FACT_RESCTRL, DeviceNode
from koordlet.nri.hooks.xpu_nodes import DEV_NAME_PREFIXES, detect_vendor
from koordlet.qos import resctrl_facts
from koordlet.qos.cpuqos import SYSCTL_GROUP_IDENTITY, Rule, bvt_rule
from koordlet.qos.cpuset import CPUSetRule
from koordlet.qos.model import Write
from koordlet.qos.resctrl_facts import ResctrlFacts
from koordlet.qos.state import QoSState
from koordlet.qos.steady import SteadyFacts

log = logging.getLogger(__name__)

ALL_FACTS = frozenset({FACT_DEV, FACT_PCI, FACT_RESCTRL})
MIN_REFRESH_INTERVAL = 1.0  # seconds: a kind refreshed this recently is not read again
INFINIBAND = "infiniband"


@dataclass(frozen=True)
class GroupIdentityFacts:
    """bvt.go SystemSupported / isSysctlEnabled, as read when the facts were gathered."""

    bvt_file: bool = False  # cpu.bvt_warp_ns at the kubepods root
    sysctl: int | None = None  # kernel.sched_group_identity_enabled; None: absent

    @property
    def supported(self) -> bool:
        return self.bvt_file or self.sysctl is not None

    @property
    def sysctl_enabled(self) -> bool:
        """An absent sysctl (older Anolis kernels expose only the cgroup file) counts as enabled."""
        return self.sysctl is None or self.sysctl == 1


@dataclass(frozen=True)
class NodeFacts:
    """Plain data the hooks read; built by NodeFactsReader (tests build it by hand)."""

    paths: HostPaths
    cgroup_version: int = 1
    driver: CgroupDriver = CgroupDriver.SYSTEMD
    # container path ("/dev/infiniband/uverbs3", "/dev/davinci0") -> the host node: type, major/minor, mode, owner
    dev_nodes: Mapping[str, DeviceNode] = field(default_factory=dict)
    uverbs: Mapping[str, str] = field(default_factory=dict)  # PCI address -> its first uverbs node name
    resctrl: ResctrlFacts = field(default_factory=ResctrlFacts)
    resctrl_groups: frozenset[str] = frozenset()  # every control group under the mount, koordlet's or not
    group_identity: GroupIdentityFacts = field(default_factory=GroupIdentityFacts)
    nodeslo: Mapping[str, Any] | None = None  # merged NodeSLO spec; None until one was received
    gpu_vendor: str = ""  # node.koordinator.sh/gpu-vendor of this node's GPUs: nvidia, huawei, cambricon or ""
    cpuset_rule: CPUSetRule | None = None  # share pools etc. from the node's CPU facts; None until computed
    # the Node's node.koordinator.sh/cpu-normalization-ratio (BatchResource divides quotas by it when > 1); None:
    # no Node, no annotation, or a malformed one (the QoS reconciler reports that)
    cpu_normalization_ratio: float | None = None

    @cached_property
    def bvt_rule(self) -> Rule | None:
        """The group-identity rule of the NodeSLO (parsed once per facts object); None without a NodeSLO."""
        return None if self.nodeslo is None else bvt_rule(self.nodeslo)

    @property
    def resctrl_usable(self) -> bool:
        return self.resctrl.supported and self.resctrl.mounted


class _ExecResult(Protocol):
    """What Executor.apply returns per write (koordlet.qos.executor.Result)."""

    @property
    def write(self) -> Write: ...

    @property
    def result(self) -> str: ...


class NodeFactsReader:
    """Reads the facts once and keeps them; `facts()` is memory-only, `refresh()` reads again (see module doc)."""

    def __init__(self, paths: HostPaths, cgroup_version: int,
                 driver: CgroupDriver | Callable[[], CgroupDriver] = CgroupDriver.SYSTEMD,
                 nodeslo: Callable[[], Mapping[str, Any] | None] | None = None, health: Health | None = None, *,
                 gpu_vendor: Callable[[], str] | None = None,
                 cpuset_rule: Callable[[], CPUSetRule | None] | None = None,
                 cpu_normalization_ratio: Callable[[], float | None] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 min_refresh_interval: float = MIN_REFRESH_INTERVAL) -> None:
        self.paths = paths
        self.cgroup_version = cgroup_version
        self._driver = driver if callable(driver) else (lambda: driver)
        self._nodeslo = nodeslo or (lambda: None)
        self._gpu_vendor = gpu_vendor or (lambda: "")
        self._cpuset_rule = cpuset_rule or (lambda: None)
        self._ratio = cpu_normalization_ratio or (lambda: None)
        self.health = health
        self.clock = clock
        self.min_refresh_interval = min_refresh_interval
        self._steady = SteadyFacts(float("inf"), clock)  # the CPU's resctrl flags and each mount's capabilities
        self._refreshed: dict[str, float] = {}
        self._dev_nodes: Mapping[str, DeviceNode] = {}
        self._uverbs: Mapping[str, str] = {}
        self._resctrl = ResctrlFacts()
        self._groups: frozenset[str] = frozenset()
        self._gi = GroupIdentityFacts()
        self._gi_driver: CgroupDriver | None = None
        self._cached: NodeFacts | None = None
        self.refresh(force=True)

    # -- the hot path ------------------------------------------------------------------------------------------
    def facts(self) -> NodeFacts:
        """The current facts (memory only; the same object while nothing changed)."""
        driver, nodeslo, vendor, rule = self._driver(), self._nodeslo(), self._gpu_vendor(), self._cpuset_rule()
        ratio = self._ratio()
        cached = self._cached
        if (cached is not None and cached.driver == driver and cached.nodeslo is nodeslo
                and (not vendor or cached.gpu_vendor == vendor) and cached.cpuset_rule == rule
                and cached.cpu_normalization_ratio == ratio):
            return cached
        if self._gi_driver != driver:  # the kubepods root moves with the driver (detected once, at start-up)
            self._gi, self._gi_driver = self._read_group_identity(driver), driver
        self._cached = NodeFacts(
            paths=self.paths, cgroup_version=self.cgroup_version, driver=driver, dev_nodes=self._dev_nodes,
            uverbs=self._uverbs, resctrl=self._resctrl, resctrl_groups=self._groups, group_identity=self._gi,
            nodeslo=nodeslo, gpu_vendor=vendor or detect_vendor(self._dev_nodes), cpuset_rule=rule,
            cpu_normalization_ratio=ratio)
        return self._cached

    # -- reading -----------------------------------------------------------------------------------------------
    def refresh(self, kinds: Collection[str] | None = None, *, force: bool = False) -> None:
        """Read the given kinds of facts again (all when None); a kind read less than `min_refresh_interval` ago is
        kept unless `force`. A full refresh also re-reads the group-identity interfaces."""
        now = self.clock()
        wanted = ALL_FACTS if kinds is None else ALL_FACTS & set(kinds)
        for kind in sorted(wanted):
            last = self._refreshed.get(kind)
            if not force and last is not None and now - last < self.min_refresh_interval:
                continue
            self._refreshed[kind] = now
            if kind == FACT_DEV:
                self._dev_nodes = read_dev_nodes(self.paths)
            elif kind == FACT_PCI:
                self._uverbs = read_uverbs(self.paths)
            else:
                self._resctrl, self._groups = self._read_resctrl()
        if kinds is None:
            driver = self._driver()
            self._gi, self._gi_driver = self._read_group_identity(driver), driver
        self._cached = None

    def observe(self, results: Iterable[_ExecResult]) -> None:
        """Learn from an applied plan which resctrl groups now exist (mkdir) or are gone (rmdir), without a read."""
        groups = set(self._groups)
        root = os.path.normpath(self.paths.resctrl())
        for r in results:
            w = r.write
            if w.op not in ("mkdir", "rmdir") or os.path.dirname(os.path.normpath(w.path)) != root:
                continue
            if r.result in ("written", "unchanged"):
                (groups.add if w.op == "mkdir" else groups.discard)(os.path.basename(os.path.normpath(w.path)))
        if groups != self._groups:
            self._groups = frozenset(groups)
            self._cached = None

    def _read_resctrl(self) -> tuple[ResctrlFacts, frozenset[str]]:
        state = QoSState(self.paths, self.cgroup_version, self._driver(), [], {}, nodeslo_present=False)
        facts = resctrl_facts.read_facts(state, steady=self._steady)
        return facts, frozenset(facts.ctrl_groups)

    def _read_group_identity(self, driver: CgroupDriver) -> GroupIdentityFacts:
        try:
            bvt = os.path.exists(resource_path(self.cgroup_version, self.paths, "cpu.bvt_warp_ns",
                                               qos_dir(driver, K8sQoS.GUARANTEED)))
        except KoordletError:
            bvt = False
        path = self.paths.proc("sys", "kernel", SYSCTL_GROUP_IDENTITY)
        try:
            with open(path, encoding="ascii", errors="replace") as f:
                text = f.read().strip()
        except FileNotFoundError:
            return GroupIdentityFacts(bvt, None)
        except OSError as e:
            self._skip("unreadable", path, e.strerror or str(e))
            return GroupIdentityFacts(bvt, 0)  # upstream's isSysctlEnabled error: nothing is written
        try:
            return GroupIdentityFacts(bvt, int(text))
        except ValueError:
            self._skip("malformed", path, f"{text!r} is not an integer")
            return GroupIdentityFacts(bvt, 0)

    def _skip(self, reason: str, path: str, detail: str) -> None:
        if self.health is not None:
            self.health.skip("runtime-hook-facts", reason, path, detail)
        else:
            log.warning("runtime hook facts: %s: %s", path, detail)


def read_dev_nodes(paths: HostPaths) -> dict[str, DeviceNode]:
    """The device nodes the hooks may inject, keyed by their path in a container (`/dev/...`)."""
    out: dict[str, DeviceNode] = {}
    for name in _listdir(paths.dev()):
        if name.startswith(DEV_NAME_PREFIXES):
            _add_node(out, paths.dev(name), f"/dev/{name}")
    for name in _listdir(paths.dev(INFINIBAND)):
        _add_node(out, paths.dev(INFINIBAND, name), f"/dev/{INFINIBAND}/{name}")
    return out


def _add_node(out: dict[str, DeviceNode], host_path: str, path: str) -> None:
    try:
        st = os.stat(host_path)  # follows a symlink, as Go's os.Stat
    except OSError:
        return
    if stat.S_ISCHR(st.st_mode):
        kind = "c"
    elif stat.S_ISBLK(st.st_mode):
        kind = "b"
    else:
        return  # not a device node (a directory, or a plain file in a simulated tree)
    out[path] = DeviceNode(path, kind, os.major(st.st_rdev), os.minor(st.st_rdev), stat.S_IMODE(st.st_mode),
                           st.st_uid, st.st_gid)


def read_uverbs(paths: HostPaths) -> dict[str, str]:
    """PCI address -> the first entry of its `infiniband_verbs/` directory (name order), for every PCI function that
    has one (rdma.go getUVerbsViaPciAdd, read ahead for all functions)."""
    base = paths.sys("bus", "pci", "devices")
    out: dict[str, str] = {}
    for bdf in _listdir(base):
        names = _listdir(os.path.join(base, bdf, "infiniband_verbs"))
        if names:
            out[bdf] = names[0]
    return out


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []
