"""CgroupReconcile (memory QoS): memory.min/low/high, wmark, priority and oom.group of kube-QoS, pod and container
cgroups from NodeSLO `resourceQOSStrategy.<class>.memoryQOS` and the pod annotation `koordinator.sh/memoryQOS`."""

# Upstream: pkg/koordlet/qosmanager/plugins/cgreconcile/cgroup_reconcile.go (spec dropin.md §d.4,
# qos-and-runtime-hooks.md §4), resourceexecutor LeveledUpdateBatch (the write order). Config: memoryqos_config.py.
#
# - Pods in Pending or Running only. Pod: memory.min = request × minLimitPercent / 100, memory.low likewise (raised
#   to min when lower and > 0), the static files (wmark_ratio, wmark_scale_factor, wmark_min_adj, priority,
#   use_priority_oom, oom.group). Container: the same from its own request, plus memory.high: "max" for
#   throttlingPercent 0, else ⌊(request + (limit or node allocatable − request) × throttlingPercent / 100) / page⌋ ×
#   page, raised to min when lower. No Node allocatable (standalone mode) and no limit: no memory.high.
# - Kube-QoS dirs: min and low summed over their pods, the kubepods root (the Guaranteed dir) over all pods; plus
#   priority, use_priority_oom and oom.group of the class the kube QoS maps to (Guaranteed → lsrClass, Burstable →
#   lsClass, BestEffort → beClass).
# - Only what is asked for is written (memoryqos_config.py [quirk]): a sum only where the dir's class is enabled or a
#   pod below asks for that field; a pod's or container's files only for the fields its config asks for.
# - Files are written only where they exist: v1 has only the Anolis files, looked for once at the kubepods root (on
#   stock v1 nothing is written); v2 per dir (min/low/high/oom.group everywhere, the rest on Anolis only).
# - Order (LeveledUpdateBatch): top-down (kube-QoS root, Burstable, BestEffort, pods, containers) every write except
#   a memory.min/low/high decrease, then the decreases bottom-up, so a parent's protection is never below the sum a
#   child is raised to in between. The current values deciding "decrease" are read with the steady facts (they are
#   re-read whenever the pods or the NodeSLO change, i.e. whenever a target can change).

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from apis.core.errors import InvalidInput, PlanError
from koordlet.health import Health
from koordlet.host.driver import K8sQoS
from koordlet.host.resources import resource_supported
from koordlet.qos.memoryqos_config import (
    ContainerMemory,
    MemoryConfig,
    container_memory,
    kube_qos_config,
    node_allocatable_memory,
    pod_config,
    pod_request,
    spec_container,
)
from koordlet.qos.model import Plan, Write
from koordlet.qos.state import QoSState
from koordlet.qos.steady import SteadyFacts

# cgroup resource -> memoryQOS field, in upstream's makeCgroupResources order
RESOURCES: dict[str, str] = {
    "memory.min": "minLimitPercent", "memory.low": "lowLimitPercent", "memory.high": "throttlingPercent",
    "memory.wmark_ratio": "wmarkRatio", "memory.wmark_scale_factor": "wmarkScalePermill",
    "memory.wmark_min_adj": "wmarkMinAdj", "memory.priority": "priority",
    "memory.use_priority_oom": "priorityEnable", "memory.oom.group": "oomKillGroup",
}
MERGEABLE = frozenset({"memory.min", "memory.low", "memory.high"})
_STATIC = ("memory.wmark_ratio", "memory.wmark_scale_factor", "memory.wmark_min_adj", "memory.priority",
           "memory.use_priority_oom", "memory.oom.group")
_QOS_STATIC = ("memory.priority", "memory.use_priority_oom", "memory.oom.group")
_ACTIVE = ("Pending", "Running")
_QOS_ORDER = (K8sQoS.GUARANTEED, K8sQoS.BURSTABLE, K8sQoS.BESTEFFORT)  # the Guaranteed dir is the kubepods root
MAX = "max"


@dataclass(frozen=True)
class Target:
    """One cgroup dir and the values planned for it (resource -> value), with what the reason names."""

    rel: str
    values: Mapping[str, str]
    who: str


@dataclass(frozen=True)
class MemoryQoSFacts:
    present: frozenset[str]  # target file paths that exist (v1: the resource exists at the kubepods root)
    current: Mapping[str, str]  # content of the memory.min/low/high targets, for the write order
    page_size: int
    planned: frozenset[str] = frozenset()  # resources some target asks for
    absent: frozenset[str] = frozenset()  # of those, the ones no target dir has (a stock kernel)


def report_capabilities(health: Health, facts: MemoryQoSFacts) -> None:
    """A memory-QoS file the config asks for but the kernel lacks (v1 without Anolis, the Anolis-only files on
    v2): `koordlet_agent_kernel_capability{capability="memory-qos/<file>"}` 0 and one log line, not one per pass."""
    for resource in sorted(facts.planned):
        health.capability(f"memory-qos/{resource}", resource not in facts.absent,
                          "not on this kernel (Anolis memcg files): not written", fallback=True)


def read_facts(state: QoSState, *, steady: SteadyFacts | None = None) -> MemoryQoSFacts:
    """Which target files exist and the current min/low/high there; kept with the steady facts."""
    if steady is None:
        return _read(state)
    return steady.get("memoryqos", lambda: _read(state))


def _read(state: QoSState) -> MemoryQoSFacts:
    targets, _ = targets_of(state, node_allocatable_memory(state.node), os.sysconf("SC_PAGE_SIZE"))
    present: set[str] = set()
    current: dict[str, str] = {}
    planned: set[str] = set()
    found: set[str] = set()
    if targets:
        root = state.qos_dir(K8sQoS.GUARANTEED)
        v1_supported = ({r for r in RESOURCES if resource_supported(1, state.paths, r, root)}
                        if state.cgroup_version == 1 else set())
        for t in targets:
            planned.update(t.values)
            # every file of the dir, not only those planned now: memory.high may be planned once a Node arrives,
            # which does not renew the steady facts
            for resource in RESOURCES:
                path = state.cgroup_file(resource, t.rel)
                if state.cgroup_version == 1 and resource not in v1_supported:
                    continue
                if state.cgroup_version == 2 and not os.path.exists(path):
                    continue
                present.add(path)
                if resource in t.values:
                    found.add(resource)
                if resource in MERGEABLE:
                    try:
                        with open(path, encoding="ascii", errors="replace") as f:
                            current[path] = f.read().strip()
                    except OSError:
                        pass  # vanished or unreadable: written as an increase, the executor says why
    return MemoryQoSFacts(frozenset(present), current, os.sysconf("SC_PAGE_SIZE"), frozenset(planned),
                          frozenset(planned - found))


def plan(state: QoSState, facts: MemoryQoSFacts) -> Plan:
    out = Plan()
    targets, out.errors = targets_of(state, node_allocatable_memory(state.node), facts.page_size)
    deferred: list[Write] = []
    for t in targets:
        for resource, value in t.values.items():
            path = state.cgroup_file(resource, t.rel)
            if path not in facts.present:
                continue
            w = Write(path, value, f"memoryqos: {t.who} {resource}={value}", resource=resource)
            if resource in MERGEABLE and _below(value, facts.current.get(path)):
                deferred.append(w)
            else:
                out.writes.append(w)
    out.writes += reversed(deferred)
    return out


def _below(value: str, current: str | None) -> bool:
    """Whether `value` decreases the file's `current` content (unknown content: no)."""
    if current is None:
        return False
    try:
        new = float("inf") if value == MAX else int(value)
        old = float("inf") if current == MAX else int(current)
    except ValueError:
        return False
    return new < old


# ---- what each dir gets ---------------------------------------------------------------------------------------


def targets_of(state: QoSState, allocatable: int | None, page_size: int) -> tuple[list[Target], list[PlanError]]:
    """Every dir's planned values, top-down (kube-QoS root, Burstable, BestEffort, pods, containers); errors are
    reported and their pod skipped (a malformed annotation only loses the annotation)."""
    errors: list[PlanError] = []
    if not state.nodeslo_present:
        return [], errors  # upstream: nothing before a NodeSLO arrived
    pods: list[Target] = []
    containers: list[Target] = []
    sums: dict[str, dict[str, int]] = {q.value: {} for q in _QOS_ORDER}
    for pod in state.pods:
        if pod.phase not in _ACTIVE:
            continue
        cfg, error = pod_config(state, pod)
        if error is not None:
            errors.append(error)
        if not cfg.asked:
            continue
        key = f"{pod.namespace}/{pod.name}"
        try:
            request = pod_request(pod)
            mins = _protection(request, cfg)
            kids = []
            for c in pod.containers:
                spec = spec_container(pod, c.name)
                if spec is None or c.cgroup_dir is None:
                    continue
                values = _container_values(container_memory(pod, spec), cfg, allocatable, page_size)
                kids.append(Target(c.cgroup_dir, values, f"pod {key} container {c.name}"))
        except InvalidInput as e:
            errors.append(PlanError("Pod", key, "spec", f"memory QoS: {e}", uid=pod.uid))
            continue
        values = {r: str(v) for r, v in mins.items()}
        values |= _static(cfg)
        pods.append(Target(pod.cgroup_dir, _in_order(values), f"pod {key}"))
        containers += kids
        summed = sums.get(pod.k8s_qos)
        if summed is not None:
            for r, v in mins.items():
                summed[r] = summed.get(r, 0) + v
    return _qos_targets(state, sums) + pods + containers, errors


def _qos_targets(state: QoSState, sums: dict[str, dict[str, int]]) -> list[Target]:
    """completeCgroupSummaryForQoS: each kube-QoS dir its own pods' sums, the kubepods root every pod's."""
    root: dict[str, int] = {}
    for summed in sums.values():
        for r, v in summed.items():
            root[r] = root.get(r, 0) + v
    out = []
    for qos in _QOS_ORDER:
        cfg = kube_qos_config(state, qos.value)
        summed = dict(root if qos is K8sQoS.GUARANTEED else sums[qos.value])
        for r in ("memory.min", "memory.low"):
            if RESOURCES[r] in cfg.asked:
                summed.setdefault(r, 0)
        values = {r: str(v) for r, v in summed.items()}
        values |= {r: str(cfg.values[RESOURCES[r]]) for r in _QOS_STATIC
                   if RESOURCES[r] in cfg.asked and RESOURCES[r] in cfg.values}
        if values:
            out.append(Target(state.qos_dir(qos), _in_order(values), f"kube-QoS {qos.value}"))
    return out


def _protection(request: int, cfg: MemoryConfig) -> dict[str, int]:
    """memory.min and memory.low for a request (low raised to min when lower and > 0), the asked ones."""
    out: dict[str, int] = {}
    for r in ("memory.min", "memory.low"):
        percent = cfg.values.get(RESOURCES[r])
        if percent is not None:
            out[r] = request * percent // 100
    if "memory.min" in out and out.get("memory.low", 0) > 0 and out["memory.low"] < out["memory.min"]:
        out["memory.low"] = out["memory.min"]
    return {r: v for r, v in out.items() if RESOURCES[r] in cfg.asked}


def _container_values(memory: ContainerMemory, cfg: MemoryConfig, allocatable: int | None,
                      page_size: int) -> dict[str, str]:
    request = max(memory.request, 0)
    mins = _protection(request, cfg)
    values = {r: str(v) for r, v in mins.items()}
    tp = cfg.values.get("throttlingPercent")
    if tp is not None and "throttlingPercent" in cfg.asked:
        ceiling = memory.limit if memory.limit > 0 else allocatable
        if tp == 0:
            values["memory.high"] = MAX
        elif ceiling is not None:
            high = _div(request + _div((ceiling - request) * tp, 100), page_size) * page_size
            floor = request * cfg.values.get("minLimitPercent", 0) // 100
            if 0 < high < floor:
                high = floor
            values["memory.high"] = str(max(high, 0))
    values |= _static(cfg)
    return _in_order(values)


def _static(cfg: MemoryConfig) -> dict[str, str]:
    return {r: str(cfg.values[RESOURCES[r]]) for r in _STATIC
            if RESOURCES[r] in cfg.asked and RESOURCES[r] in cfg.values}


def _in_order(values: Mapping[str, str]) -> dict[str, str]:
    return {r: values[r] for r in RESOURCES if r in values}


def _div(a: int, b: int) -> int:
    """Go's integer division (truncates toward zero)."""
    return -(-a // b) if a < 0 else a // b
