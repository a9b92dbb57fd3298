"""BE CPU suppress: as LS usage rises, shrink what BE pods may use (besteffort cpuset or quota) to the budget left."""

# Upstream: pkg/koordlet/qosmanager/plugins/cpusuppress/cpu_suppress.go (budget, both policies, recovery),
# qosmanager/helpers/calculator.go (CalculateFilterPodsUsed, NonBEPodFilter, NonBEHostAppFilter,
# GetNodeResourceReserved), pkg/util/node.go (kubelet and annotation reservations), apis/extension/
# node_reservation.go, pkg/koordlet/metrics/cpu_suppress.go (koordlet_be_suppress_*). Spec §2.7.
#
# Budget (calculateBESuppressCPU), in milli-CPUs:
#   capacity × cpuSuppressThresholdPercent / 100 − non-BE pod usage − non-BE host-app usage
#   − max(node usage − all pod usage − all host-app usage (≥ 0), reserved)
# raised to capacity × cpuSuppressMinPercent / 100 when that is set. Usage is the metric cache's newest collection
# tick (upstream: the "last" aggregate over two collect intervals; a sample older than that is not counted).
#
# Capacity and reserved. With a Node object (cluster mode) as upstream: capacity = status.capacity.cpu; reserved =
# max(capacity − allocatable (kubelet's system/kube reserved), the `node.koordinator.sh/reservation` annotation's
# resources.cpu or its reservedCPUs count). Standalone there is no Node: capacity = the host's online CPUs, reserved
# = 0 (the system usage measured still comes off the budget). Upstream does nothing without a Node.
#
# cpuset policy. Candidates are the BE share pools as the NodeResourceTopology reports them (koordlet.states.nodecpu
# via the CPUSetAllocator's facts: all CPUs but LSE pods', the reserved, the exclusive SYSTEM QoS ones and those
# kubelet's static policy handed out; upstream does not take out the last), split into LSR pods' CPUs and the rest.
# Under kubelet's static policy only the container dirs get the suppressed set, as upstream.
#
# [quirk] recovery. Upstream writes the besteffort quota -1 once per process and policy switch (a status map), and
# rewrites the BE cpusets every pass. A planner has no such memory: we plan the recovery values every pass while
# they apply and let the executor skip the write when the file holds them (no read while its cache is fresh), so a
# steady pass writes nothing. The difference: a quota someone else sets on the besteffort dir while suppress is off
# (or under the cpuset policy) is put back to -1 by us, where upstream would leave it after its first pass.

from __future__ import annotations

import functools
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from apis.core.errors import HostReadError, InvalidInput, PlanError, QuantityError
from apis.core.objects import as_object
from apis.core.qos import K8S_BEST_EFFORT
from apis.core.quantity import milli_value
from apis.core.resources import CPU
from apis.extension.node import ANNOTATION_NODE_RESERVATION, decode_node_reservation
from apis.extension.numa_aware import CPUInfo
from apis.extension.pod import pod_resource_status
from apis.extension.qos import QOS_BE, QOS_LSR, koord_qos_class
from apis.extension.resource_status import format_cpuset, parse_cpuset
from apis.slo.types import CPU_SUPPRESS_CFS_QUOTA, CPU_SUPPRESS_CPUSET, HostApplication, NodeSLOSpec
from koordlet.host.driver import K8sQoS
from koordlet.host.paths import HostPaths
from koordlet.host.resources import cpu_max, parse_cpu_max, resource_path
from koordlet.metriccache import MetricCache, SeriesKey
from koordlet.qos import cpuset as cpuset_feature
from koordlet.qos.cpuset import CPUSetRule
from koordlet.qos.model import Plan, Write
from koordlet.qos.state import QoSState
from koordlet.qos.steady import SteadyFacts
from koordlet.states.cpupools import CPUTopology
from koordlet.states.model import PodMeta

CFS_PERIOD_US = 100_000  # system.DefaultCPUCFSPeriod
BYPASS_DELTA_RATIO = 0.01  # suppressBypassQuotaDeltaRatio: a smaller quota change (of capacity) is skipped
BE_MIN_CPUSET_CPUS = 2  # beMinCPUSetCores
BE_MIN_QUOTA_US = 2000  # beMinQuota
BE_MAX_INCREASE_RATIO = 0.1  # beMaxIncreaseCPUPercent: growth per pass, of capacity (quota) or of CPUs (cpuset)
UNSET_QUOTA = -1


# ---- what the exporter shows ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SuppressStatus:
    """The numbers behind `koordlet_be_suppress_*`: what one pass decided, or (QoSManager.suppress) every pass's
    last value, as upstream's gauges keep theirs."""

    cores: Mapping[str, float] = field(default_factory=dict)  # policy -> BE CPU allowed, cores (type label)
    ls_used: float | None = None  # non-BE pods' usage the budget subtracted, cores
    be_used: float | None = None  # besteffort pods' and BE host apps' usage, cores

    def then(self, later: SuppressStatus) -> SuppressStatus:
        """The gauges after a later pass: what it set replaces the value before, the rest keeps its last value (a
        GaugeVec child, once set, stays)."""
        return SuppressStatus({**self.cores, **later.cores},
                              self.ls_used if later.ls_used is None else later.ls_used,
                              self.be_used if later.be_used is None else later.be_used)


@dataclass
class SuppressPlan(Plan):
    """A pass's writes and errors, and the numbers it decided (for the exporter, by way of the QoS manager)."""

    status: SuppressStatus = SuppressStatus()


# ---- facts ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Usage:
    """The newest collection tick: node cores at `ts_ms`, and (ts_ms, cores) of each pod and host app with a value."""

    ts_ms: int
    node: float
    pods: Mapping[str, tuple[int, float]]  # pod uid ->
    apps: Mapping[str, tuple[int, float]]  # host application name ->


_NO_CPUS = CPUTopology(())
_NO_RULE = CPUSetRule()
_OTHER, _NON_BE, _KUBE_BE = 0, 1, 2  # what the budget counts a pod's usage as


@dataclass(frozen=True)
class PodClasses:
    """What suppress reads of each pod's labels and annotations: a function of the pods alone, so kept with the
    steady facts (the budget and the cpuset policy would otherwise parse them every pass)."""

    kinds: tuple[tuple[str, int], ...]  # (uid, _NON_BE | _KUBE_BE | _OTHER) per pod, in order
    lsr_cpus: frozenset[int]  # CPUs the scheduler bound LSR pods to


def pod_classes(pods: Sequence[PodMeta]) -> PodClasses:
    kinds = tuple((p.uid, _NON_BE if non_be_pod(p) else _KUBE_BE if p.k8s_qos == K8S_BEST_EFFORT else _OTHER)
                  for p in pods)
    return PodClasses(kinds, frozenset(_lsr_cpus(pods)))


@dataclass(frozen=True)
class SuppressFacts:
    topology: CPUTopology = _NO_CPUS  # online CPUs (capacity without a Node object; the cpuset policy)
    quota_file: bool = True  # the besteffort dir has a cfs quota file (no kubepods tree: nothing to recover)
    be_dirs: tuple[str, ...] = ()  # besteffort dir, its pod dirs and their container dirs on disk, parents first
    usage: Usage | None = None  # None: suppress is off, or nothing collected yet
    quota: int | None = None  # besteffort cfs quota now (us, -1 unlimited); None: not read or unreadable
    period: int | None = None  # besteffort cfs period now (us)
    be_cpuset: tuple[int, ...] | None = None  # besteffort cpuset now; None: unreadable
    # what the NodeResourceTopology reports (BE share pools, kubelet's CPU manager policy), shared with CPUSetAllocator
    rule: CPUSetRule = _NO_RULE
    rule_errors: tuple[PlanError, ...] = ()
    pods: PodClasses | None = None  # None: planned from the state's pods

    @property
    def host_cpus(self) -> int | None:
        return len(self.topology.cpus) or None


@dataclass(frozen=True)
class _Host:
    topology: CPUTopology
    quota_file: bool
    be_dirs: tuple[str, ...]


def read_facts(state: QoSState, *, steady: SteadyFacts | None = None) -> SuppressFacts:
    """The CPU topology and the besteffort subtree on disk (kept with the steady facts: they change with the pods or
    the kernel) and, every pass, the besteffort cpuset and, while suppress acts, the newest usage and the besteffort
    quota, which change without the pods or the NodeSLO changing."""
    if not state.nodeslo_present:
        return SuppressFacts()
    host = steady.get("cpusuppress", lambda: _host(state, steady)) if steady else _host(state, None)
    be_cpuset = _read_cpuset(state) if host.be_dirs else None
    # the CPUSetAllocator's node facts (kept under its steady keys: one read for both features)
    cpu = cpuset_feature.read_facts(state, steady=steady)
    pods = steady.get("cpusuppress/pods", lambda: pod_classes(state.pods)) if steady else pod_classes(state.pods)
    common = SuppressFacts(host.topology, host.quota_file, host.be_dirs, be_cpuset=be_cpuset, rule=cpu.rule,
                           rule_errors=cpu.errors, pods=pods)
    cfg = state.nodeslo.resource_used_threshold_with_be
    if not cfg.enable:
        return common
    usage = _usage(state, steady) if state.cache is not None else None
    quota = period = None
    if cfg.cpu_suppress_policy == CPU_SUPPRESS_CFS_QUOTA:
        quota, period = _read_quota(state)
    return replace(common, usage=usage, quota=quota, period=period)


def _host(state: QoSState, steady: SteadyFacts | None) -> _Host:
    root = state.qos_dir(K8sQoS.BESTEFFORT)
    quota_file = os.path.exists(state.cgroup_file("cpu.cfs_quota_us", root))
    topology = steady.get("cpuset/topology", lambda: CPUTopology.read(state.paths)) if steady else \
        CPUTopology.read(state.paths)
    return _Host(topology, quota_file, _be_dirs(state, root))


def _be_dirs(state: QoSState, root: str) -> tuple[str, ...]:
    """util.GetBECPUSetPathsByMaxDepth(container depth): filepath.Walk order (each dir before its children, names
    sorted) down to the container dirs (sandboxes included), in the cpuset hierarchy."""
    base = os.path.dirname(state.cgroup_file("cpuset.cpus", root))
    if not os.path.isdir(base):
        return ()
    out = [root]
    for pod in _subdirs(base):
        out.append(f"{root}/{pod}")
        out.extend(f"{root}/{pod}/{c}" for c in _subdirs(os.path.join(base, pod)))
    return tuple(out)


def _subdirs(path: str) -> list[str]:
    try:
        with os.scandir(path) as it:
            return sorted(e.name for e in it if e.is_dir(follow_symlinks=False))
    except OSError:
        return []


def _read_cpuset(state: QoSState) -> tuple[int, ...] | None:
    """The besteffort dir's CPUs (cgroupReader.ReadCPUSet: cpuset.cpus on v1, cpuset.cpus.effective on v2)."""
    resource = "cpuset.cpus" if state.cgroup_version == 1 else "cpuset.cpus.effective"
    try:
        with open(state.cgroup_file(resource, state.qos_dir(K8sQoS.BESTEFFORT)), encoding="ascii") as f:
            return tuple(parse_cpuset(f.read()))
    except (OSError, ValueError, InvalidInput):
        return None


def _usage(state: QoSState, steady: SteadyFacts | None = None) -> Usage | None:
    cache = state.cache
    assert cache is not None
    node = cache.last(MetricCache.key("node_cpu_usage"))
    if node is None:
        return None
    uids, keys = steady.get("cpusuppress/usage-keys", lambda: _pod_keys(state)) if steady else _pod_keys(state)
    pods = {uid: sample for uid, sample in zip(uids, cache.last_many(keys), strict=True) if sample is not None}
    apps = {}
    for app in state.host_apps:
        sample = cache.last(MetricCache.key("host_application_cpu_usage", host_app_name=app.name))
        if sample is not None:
            apps[app.name] = sample
    return Usage(node[0], node[1], pods, apps)


def _pod_keys(state: QoSState) -> tuple[list[str], list[SeriesKey]]:
    """The pods' uids and their CPU usage series keys, in the same order (the pods' part of the kept facts)."""
    return [pod.uid for pod in state.pods], [MetricCache.key("pod_cpu_usage", pod_uid=pod.uid) for pod in state.pods]


def _read_quota(state: QoSState) -> tuple[int | None, int | None]:
    rel = state.qos_dir(K8sQoS.BESTEFFORT)
    try:
        if state.cgroup_version == 2:
            with open(state.cgroup_file("cpu.cfs_quota_us", rel), encoding="ascii") as f:
                return parse_cpu_max(f.read())
        with open(state.cgroup_file("cpu.cfs_quota_us", rel), encoding="ascii") as f:
            quota = int(f.read().strip())
        with open(state.cgroup_file("cpu.cfs_period_us", rel), encoding="ascii") as f:
            return quota, int(f.read().strip())
    except (OSError, ValueError, HostReadError):
        return None, None  # no besteffort dir (no kubelet yet): nothing to suppress


# ---- the budget -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Budget:
    milli: int  # what BE may use, after the min percent
    capacity_milli: int
    ls_pods: float  # cores of non-BE pods
    ls_apps: float  # cores of non-BE host applications
    system: float  # max(node - pods - apps, reserved), cores
    be_used: float  # cores of the besteffort pods and BE host apps under besteffort

    @property
    def capacity_cores(self) -> int:
        """Capacity.Cpu().Value(): whole cores, rounded up (the quota step limits use it)."""
        return -(-self.capacity_milli // 1000)


def non_be_pod(pod: PodMeta) -> bool:
    """helpers.NonBEPodFilter: neither labelled BE nor in the kube BestEffort class."""
    return koord_qos_class(pod.raw) != QOS_BE and pod.k8s_qos != K8S_BEST_EFFORT


def non_be_app(app: HostApplication) -> bool:
    """helpers.NonBEHostAppFilter: a host app counts as BE only with qos BE *and* a cgroup under kube besteffort."""
    return app.qos != QOS_BE or app.cgroup_path is None or app.cgroup_path.base != "KubepodsBesteffort"


def capacity_and_reserved(state: QoSState, facts: SuppressFacts, node_name: str,
                          errors: list[PlanError]) -> tuple[int, int] | None:
    """(capacity, reserved) milli-CPUs; None when neither a Node nor the host tells the capacity."""
    node = state.node
    if node is None:
        return (facts.host_cpus * 1000, 0) if facts.host_cpus else None
    status = as_object(node.get("status"))
    try:
        capacity = milli_value(as_object(status.get("capacity")).get("cpu"))
    except QuantityError:
        errors.append(PlanError("Node", node_name, "status.capacity.cpu", "missing or not a quantity"))
        return None
    # util.GetNodeReservationFromKubelet: capacity - allocatable for what both have, floored at 0
    try:
        kubelet = max(capacity - milli_value(as_object(status.get("allocatable")).get("cpu")), 0)
    except QuantityError:
        kubelet = 0
    return capacity, max(kubelet, _annotation_reserved(node, node_name, errors))


def _annotation_reserved(node: Mapping[str, object], node_name: str, errors: list[PlanError]) -> int:
    """util.GetNodeReservationFromAnnotation: reservedCPUs (as a whole-CPU count) wins over resources.cpu."""
    text = as_object(as_object(node.get("metadata")).get("annotations")).get(ANNOTATION_NODE_RESERVATION)
    if not text:
        return 0
    where = f"annotations[{ANNOTATION_NODE_RESERVATION}]"
    try:
        if not isinstance(text, str):
            raise InvalidInput("not a string")
        reservation = decode_node_reservation(text)
        if reservation.reserved_cpus:
            return len(parse_cpuset(reservation.reserved_cpus)) * 1000
        cpu = reservation.resources.get(CPU)
        return 0 if cpu is None else milli_value(cpu)
    except InvalidInput as e:  # upstream logs and ignores the annotation
        errors.append(PlanError("Node", node_name, where, f"{e}; ignored by BE CPU suppress"))
        return 0


def budget(state: QoSState, facts: SuppressFacts, threshold: int, min_percent: int | None, max_age_ms: int,
           node_name: str, errors: list[PlanError]) -> Budget | None:
    """The BE budget from the newest usage; None without usage or capacity (nothing is changed then)."""
    usage = facts.usage
    if usage is None:
        return None
    bounds = capacity_and_reserved(state, facts, node_name, errors)
    if bounds is None:
        return None
    capacity, reserved = bounds
    oldest = usage.ts_ms - max_age_ms
    pods_all = pods_ls = be_used = 0.0
    for uid, kind in (facts.pods or pod_classes(state.pods)).kinds:
        sample = usage.pods.get(uid)
        if sample is None or sample[0] < oldest:
            continue
        pods_all += sample[1]
        if kind == _NON_BE:
            pods_ls += sample[1]
        elif kind == _KUBE_BE:
            be_used += sample[1]
    apps_all = apps_ls = 0.0
    for app in state.nodeslo.host_applications:
        sample = usage.apps.get(app.name)
        if sample is None or sample[0] < oldest:
            continue
        apps_all += sample[1]
        if non_be_app(app):
            apps_ls += sample[1]
        else:
            be_used += sample[1]
    system = max(max(usage.node - pods_all - apps_all, 0.0), reserved / 1000)
    # Go: each part truncated to milli-CPUs, then Quantity arithmetic
    milli = capacity * threshold // 100 - int(pods_ls * 1000) - int(apps_ls * 1000) - int(system * 1000)
    if min_percent is not None:
        milli = max(milli, capacity * min_percent // 100)
    return Budget(milli, capacity, pods_ls, apps_ls, system, be_used)


# ---- the cfsQuota policy ----------------------------------------------------------------------------------------


def target_quota(b: Budget, current: int) -> int | None:
    """adjustByCfsQuota: the besteffort quota for this pass, or None to leave it (the change is under 1 % of
    capacity, unless it is the 2000 us floor); growth is capped at 10 % of capacity per pass once a quota is set."""
    quota = max(b.milli * CFS_PERIOD_US // 1000, BE_MIN_QUOTA_US)
    min_delta = b.capacity_cores * CFS_PERIOD_US * BYPASS_DELTA_RATIO
    if abs(quota - current) < min_delta and quota != BE_MIN_QUOTA_US:
        return None
    max_increase = b.capacity_cores * CFS_PERIOD_US * BE_MAX_INCREASE_RATIO
    if quota - current > max_increase and current != UNSET_QUOTA:
        quota = current + int(max_increase)
    return quota


def _recover_quota(state: QoSState, facts: SuppressFacts, out: Plan, why: str) -> None:
    if facts.quota_file:
        out.writes.append(_quota_write(state, UNSET_QUOTA, facts.period, f"recover besteffort cfs quota ({why})"))


def _quota_write(state: QoSState, quota: int, period: int | None, reason: str) -> Write:
    rel = state.qos_dir(K8sQoS.BESTEFFORT)
    value = cpu_max(quota, period or CFS_PERIOD_US) if state.cgroup_version == 2 else str(quota)
    return Write(state.cgroup_file("cpu.cfs_quota_us", rel), value, f"cpusuppress: {reason}",
                 resource="cpu.cfs_quota_us")


# ---- the cpuset policy ------------------------------------------------------------------------------------------


def select_cpus(n: int, cpus: Sequence[CPUInfo]) -> list[int]:
    """calculateBESuppressCPUSetPolicy: `n` of `cpus`, spread over the (NUMA node, socket) buckets round-robin,
    whole hyper-thread pairs first, then single CPUs; [] when fewer than `n` are offered.

    Buckets are visited largest first (ties: lowest first CPU id), each bucket's CPUs in (core, id) order; a pass
    over all buckets that takes nothing ends a phase."""
    if len(cpus) < n or not cpus:
        return []
    # [quirk] upstream keys buckets by (node + #cpus) * (socket + 1), which can merge distinct pairs; we use the pair
    buckets: dict[tuple[int, int], list[CPUInfo]] = {}
    for c in cpus:
        buckets.setdefault((c.node, c.socket), []).append(c)
    order = [sorted(b, key=lambda c: (c.core, c.id)) for b in buckets.values()]
    order.sort(key=lambda b: (-len(b), b[0].id))
    need, used, out = n, set[int](), list[int]()
    i, before = 0, -1
    while need > 1:  # pairs
        if i == 0:
            if before == need:
                break
            before = need
        bucket = order[i]
        for j in range(len(bucket) - 1):
            if bucket[j].id not in used and bucket[j].core == bucket[j + 1].core:
                out += [bucket[j].id, bucket[j + 1].id]
                used.update(out[-2:])
                need -= 2
                break
        i = (i + 1) % len(order)
    start, before = i, -1
    while need > 0:  # singles, from where the pairs stopped
        if i == start:
            if before == need:
                break
            before = need
        free = next((c.id for c in order[i] if c.id not in used), None)
        if free is not None:
            out.append(free)
            used.add(free)
            need -= 1
        i = (i + 1) % len(order)
    return out


def be_cpus(facts: SuppressFacts) -> list[int]:
    """calcBECPUSet: the BE share pools (every CPU but LSE pods', the Node's reserved and exclusive SYSTEM QoS CPUs,
    and those kubelet's static policy handed out), as the NodeResourceTopology reports them; what a BE cgroup gets
    back on recovery."""
    return sorted({c for p in facts.rule.be_share_pools for c in parse_cpuset(p.cpuset)})


def _lsr_cpus(pods: Sequence[PodMeta]) -> set[int]:
    """CPUs the scheduler bound LSR pods to (cpuIdToPool == LSR); malformed annotations are skipped as upstream."""
    out: set[int] = set()
    for pod in pods:
        if koord_qos_class(pod.raw) != QOS_LSR:
            continue
        try:
            out.update(pod_resource_status(pod).cpus())
        except InvalidInput:
            continue
    return out


def target_cpuset(b: Budget, facts: SuppressFacts, allowed: Sequence[int], lsr_cpus: set[int]) -> list[int]:
    """adjustByCPUSet: ceil(budget) CPUs, at least 2, growing by at most 10 % of the CPUs per pass, taken from the
    LSR pods' CPUs and the rest in proportion to their sizes."""
    old = facts.be_cpuset or ()
    ok = set(allowed)
    lsr = [c for c in facts.topology.cpus if c.id in ok and c.id in lsr_cpus]
    ls = [c for c in facts.topology.cpus if c.id in ok and c.id not in lsr_cpus]
    if not lsr and not ls:
        return []
    cpus = max(-(-b.milli // 1000), BE_MIN_CPUSET_CPUS)
    max_increase = math.ceil(len(facts.topology.cpus) * BE_MAX_INCREASE_RATIO)
    if cpus - len(old) > max_increase:
        cpus = len(old) + max_increase
    # [quirk] upstream asks for more CPUs than the pools hold once the budget exceeds them, gets none and writes
    # nothing, so a BE cpuset one step short of the pools never grows back; we take at most what they hold.
    cpus = min(cpus, len(lsr) + len(ls))
    from_lsr = cpus * len(lsr) // (len(lsr) + len(ls))
    out = select_cpus(from_lsr, lsr) if from_lsr > 0 else []
    return out + (select_cpus(cpus - from_lsr, ls) if cpus - from_lsr > 0 else [])


def _cpuset_writes(state: QoSState, dirs: Sequence[str], old: Sequence[int] | None, target: Sequence[int],
                   reason: str, out: Plan) -> None:
    """applyCPUSetWithNonePolicy: old ∪ target on every dir top-down (a v1 child's CPUs must stay within its
    parent's), then target bottom-up; the second sweep is left out when the first already wrote target."""
    out.writes.extend(_cpuset_write_list(state.cgroup_version, state.paths, tuple(dirs), tuple(old or ()),
                                         tuple(target), reason))


@functools.lru_cache(maxsize=8)
def _cpuset_write_list(version: int, paths: HostPaths, dirs: tuple[str, ...], old: tuple[int, ...],
                       target: tuple[int, ...], reason: str) -> tuple[Write, ...]:
    """_cpuset_writes' writes, a pure function of its arguments: a pass that keeps the BE cpuset gets the very
    objects of the pass before, which the executor takes as its held head of cache hits at once."""
    merged = sorted(set(old) | set(target))
    text = format_cpuset(merged)
    out = [Write(resource_path(version, paths, "cpuset.cpus", d), text, f"cpusuppress: {reason} (widen to {text})",
                 resource="cpuset.cpus") for d in dirs]
    if merged != sorted(target):
        text = format_cpuset(target)
        out.extend(Write(resource_path(version, paths, "cpuset.cpus", d), text, f"cpusuppress: {reason}",
                         resource="cpuset.cpus") for d in reversed(dirs))
    return tuple(out)


def _static_policy_writes(state: QoSState, facts: SuppressFacts, allowed: Sequence[int], cpus: Sequence[int],
                          reason: str, out: Plan) -> None:
    """applyBESuppressCPUSet under kubelet's static policy: the BE pools on the besteffort and pod dirs
    (recoverCPUSetIfNeed to pod depth), then the suppressed set on the container dirs only (kubelet leaves the
    upper levels to the agent and manages the shared pool through the containers)."""
    depth = facts.be_dirs[0].count("/")
    upper = [d for d in facts.be_dirs if d.count("/") - depth < 2]
    _cpuset_writes(state, upper, facts.be_cpuset, allowed, "recover BE cpuset to pod level (kubelet static policy)",
                   out)
    text = format_cpuset(cpus)
    out.writes.extend(Write(state.cgroup_file("cpuset.cpus", d), text, f"cpusuppress: {reason} (container)",
                            resource="cpuset.cpus") for d in facts.be_dirs if d.count("/") - depth == 2)


def _recover_cpuset(state: QoSState, facts: SuppressFacts, node_name: str, out: Plan, why: str,
                    dirs: Sequence[str] | None = None) -> None:
    """recoverCPUSetIfNeed: the BE share pools on every BE cgroup. [quirk] upstream writes them top-down only, which
    the kernel refuses where they are narrower than a child's CPUs; we widen and narrow as the suppress path does."""
    if facts.be_cpuset is None or not facts.topology.cpus:
        return  # no cpuset controller on the besteffort dir (or no kubepods tree): nothing to recover
    cpus = be_cpus(facts)
    if cpus:
        _cpuset_writes(state, facts.be_dirs if dirs is None else dirs, facts.be_cpuset, cpus,
                       f"recover BE cpuset ({why})", out)


def _be_cpu_manager_dirs(state: QoSState, facts: SuppressFacts) -> list[str]:
    """recoverCPUSetForBECPUManager: the besteffort and pod dirs, and the container dirs of pods the scheduler gave
    no cpuset or NUMA resources (the BE cpuset hook owns the others)."""
    owned = set()
    for pod in state.pods:
        try:
            status = pod_resource_status(pod)
        except InvalidInput:
            continue
        if status.cpuset or status.numa_node_resources:
            owned.add(pod.cgroup_dir)
    return [d for d in facts.be_dirs if d.count("/") - facts.be_dirs[0].count("/") < 2
            or d.rsplit("/", 1)[0] not in owned]


# ---- the plan ---------------------------------------------------------------------------------------------------


def plan(state: QoSState, facts: SuppressFacts, *, be_cpu_manager: bool = False, node_name: str = "",
         collect_interval: float = 1.0) -> SuppressPlan:
    out = _plan(state, facts, be_cpu_manager, node_name, collect_interval)
    if not state.nodeslo_present:
        return out
    # the budget and the node's CPU facts both read the reservation annotation: one error for it
    seen = {(e.kind, e.field) for e in facts.rule_errors}
    out.errors = [*facts.rule_errors, *dict.fromkeys(e for e in out.errors if (e.kind, e.field) not in seen)]
    return out


def _plan(state: QoSState, facts: SuppressFacts, be_cpu_manager: bool, node_name: str,
          collect_interval: float) -> SuppressPlan:
    """One pass (suppressBECPU). Nothing before a NodeSLO was received; with gate BECPUManager on or
    `resourceUsedThresholdWithBE.enable` false the recovery values; else the budget applied by the configured policy
    and the other policy's recovery."""
    out = SuppressPlan()
    if not state.nodeslo_present:
        return out
    cfg = state.nodeslo.resource_used_threshold_with_be
    if be_cpu_manager:
        # suppress cannot work with BECPUManager: undo the quota, give BE cgroups the BE pools but for the containers
        # whose cpuset the BE cpuset hook sets (cpu_suppress.go suppressBECPU step 0)
        _recover_quota(state, facts, out, "BECPUManager")
        _recover_cpuset(state, facts, node_name, out, "BECPUManager", _be_cpu_manager_dirs(state, facts))
        return out
    if not cfg.enable:
        _recover_quota(state, facts, out, "suppress disabled")
        _recover_cpuset(state, facts, node_name, out, "suppress disabled")
        return out
    b = budget(state, facts, cfg.cpu_suppress_threshold_percent, cfg.cpu_suppress_min_percent,
               int(2000 * collect_interval), node_name, out.errors)
    if b is None:
        return out
    cores: dict[str, float] = {}
    if cfg.cpu_suppress_policy == CPU_SUPPRESS_CFS_QUOTA:
        if facts.quota is not None:
            quota = target_quota(b, facts.quota)
            if quota is not None:
                out.writes.append(_quota_write(state, quota, facts.period,
                                               f"BE budget {b.milli}m -> besteffort cfs quota {quota}"))
            cores[CPU_SUPPRESS_CFS_QUOTA] = (facts.quota if quota is None else quota) / CFS_PERIOD_US
        _recover_cpuset(state, facts, node_name, out, "cfsQuota policy")
        out.status = SuppressStatus(cores, b.ls_pods, b.be_used)
        return out
    if facts.be_cpuset is not None and facts.topology.cpus:
        allowed = be_cpus(facts)
        lsr = facts.pods.lsr_cpus if facts.pods is not None else _lsr_cpus(state.pods)
        cpus = target_cpuset(b, facts, allowed, set(lsr))
        if cpus:  # applyCPUSetWith*Policy skip an empty set
            # not the budget's millicores, which change with every usage sample: the same writes while the cpuset
            # holds (the budget is koordlet_be_suppress_cpu_cores' and the LS/BE used series' to show)
            reason = f"BE budget -> BE cpuset {format_cpuset(cpus)} ({len(cpus)} CPUs)"
            if facts.rule.kubelet_static:
                _static_policy_writes(state, facts, allowed, cpus, reason, out)
            else:
                _cpuset_writes(state, facts.be_dirs, facts.be_cpuset, cpus, reason, out)
            cores[CPU_SUPPRESS_CPUSET] = float(len(cpus))
    _recover_quota(state, facts, out, "cpuset policy")
    out.status = SuppressStatus(cores, b.ls_pods, b.be_used)
    return out


def suppress_acts(nodeslo: NodeSLOSpec) -> bool:
    """Whether the merged NodeSLO turns suppress on (then a pass needs collected usage)."""
    return nodeslo.resource_used_threshold_with_be.enable
