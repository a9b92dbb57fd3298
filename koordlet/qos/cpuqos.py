"""CPU QoS: group identity (`cpu.bvt_warp_ns`) from NodeSLO and the pod annotation, `cpu.idle` where bvt is missing."""

# Upstream: pkg/koordlet/runtimehooks/hooks/groupidentity/{rule.go,bvt.go,interceptor.go} (the bvt rule, where it
# is written, the sysctl guard), hooks/coresched/{rule.go,core_sched.go} (cpu.idle at the kube-QoS dirs),
# apis/slo/v1alpha1/pod.go (the `koordinator.sh/cpuQOS` annotation). Spec: qos-and-runtime-hooks.md §2.1-2.5, §7.
#
# Mechanism. With group identity (an Anolis kernel: `cpu.bvt_warp_ns` at the kubepods root or the
# `kernel.sched_group_identity_enabled` sysctl) we follow upstream exactly. Without it (mainline, the common case)
# upstream does nothing, so BE work competes with LS pods by weight alone. There, a pod whose bvt would be -1 gets
# `cpu.idle=1` on its *pod* cgroup, and every other pod `cpu.idle=0`:
# - `cpu.idle` (mainline >= 5.15) only changes preemption between sibling scheduling entities, and the pod cgroup is
#   the entity that competes with the LS pods of the same kube-QoS dir. Measured on this 2-CPU VM (issue numbers):
#   an LS pod's 1.3 ms bursts next to 4 busy threads of a sibling pod (cpu.shares 2048) had a p99 of 2.8-6.2 ms
#   without QoS, 1.36-1.39 ms with cpu.idle=1 on the BE pod, 1.5-2.9 ms with the BE threads SCHED_IDLE (a group
#   whose tasks are all SCHED_IDLE is not an idle entity, so it still competes by weight one level up), 1.5 ms
#   unloaded. benchmarks/qos_effect.py repeats the comparison, 5 interleaved repetitions a mode (medians over three
#   runs: p99 2.2-2.7x unloaded without, 0.86-1.27x with; figures and spread in docs/decisions.md).
# - Never on the kube-QoS dirs: on an idle cgroup the kernel rejects every cpu.shares / cpu.weight write (EINVAL),
#   and kubelet writes the QoS dirs' shares at start-up and every minute, so kubelet would fail to start
#   (koordinator-sh/koordinator#2732). Across burstable/besteffort the besteffort dir's cpu.shares=2 already keeps
#   BE work off LS pods (benchmarks/qos_effect.py: p99 within noise of unloaded), so little is lost there.
# - Trade-off on the pod cgroup (verified on kernel 6.18, cgroup v1): while cpu.idle=1, cpu.shares reads 3 and
#   every write to the pod's cpu.shares fails with EINVAL; container cgroups below stay writable. kubelet writes a
#   pod's cpu.shares when it creates the pod cgroup (we idle a pod only once a container runs, so after that) and on
#   an in-place resize (a resize of an idled pod fails until it leaves idle); other agents writing pod-level shares
#   (Koordinator's BatchResource hook) must skip idled pods (ours does: koordlet/qos/batchresource.py asks
#   `idled_pods`). All idle pods of a dir share CPU equally (weight 3 each). Writing cpu.idle=0 resets cpu.shares
#   to 1024, so we then write back the value kubelet sets (ResourceConfigForPod; with gate BatchResource, a BE
#   pod's batch shares, so the two features agree in the same pass) — a write the executor makes only when the
#   cpu.idle write before it changed the file, so the plan needs no fact about which cgroups are idle now and a
#   steady pass reads no cpu.idle file.

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Literal, NoReturn

from apis.core.errors import HostReadError, InvalidInput, KoordletError, PlanError
from apis.core.objects import JSON
from apis.core.resources import CPU, pod_requests
from apis.extension.cpu_qos import ANNOTATION_POD_CPU_QOS
from apis.extension.pod import PodView
from apis.extension.qos import QOS_BE, QOS_LS, QOS_LSE, QOS_LSR, koord_qos_class_of_labels
from apis.slo.types import CPU_POLICY_CORE_SCHED, CPU_POLICY_GROUP_IDENTITY, NodeSLOSpec
from koordlet.collectors.hostapps import HostApp
from koordlet.host.driver import CgroupDriver, K8sQoS
from koordlet.host.resources import CPU_SHARES_MAX, CPU_SHARES_MIN, shares_to_weight
from koordlet.qos.batchspec import batch_pod_shares
from koordlet.qos.model import Capability, Notice, Plan, Report, Write
from koordlet.qos.state import QoSState
from koordlet.qos.steady import SteadyFacts
from koordlet.states.model import PodMeta

log = logging.getLogger(__name__)

SYSCTL_GROUP_IDENTITY = "sched_group_identity_enabled"
SYSCTL_CORE_SCHED = "sched_core"
BVT_MIN, BVT_MAX = -1, 2
BVT_NONE = 0  # NoneCPUQOS().GroupIdentity
CAP_GROUP_IDENTITY = "cpu-qos-group-identity"
CAP_CPU_IDLE = "cpu-qos-cpu-idle"

Mechanism = Literal["group-identity", "cpu-idle", "none"]
_KUBE_QOS = (K8sQoS.GUARANTEED, K8sQoS.BURSTABLE, K8sQoS.BESTEFFORT)
_POD_DIR = {
    CgroupDriver.CGROUPFS: dict.fromkeys(_KUBE_QOS, re.compile(r"pod[A-Za-z0-9][A-Za-z0-9_.-]*")),
    CgroupDriver.SYSTEMD: {
        K8sQoS.GUARANTEED: re.compile(r"kubepods-pod[A-Za-z0-9_]+\.slice"),
        K8sQoS.BURSTABLE: re.compile(r"kubepods-burstable-pod[A-Za-z0-9_]+\.slice"),
        K8sQoS.BESTEFFORT: re.compile(r"kubepods-besteffort-pod[A-Za-z0-9_]+\.slice"),
    },
}


# ---- facts ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CPUQoSFacts:
    """What the kernel offers and what is on disk now; current bvt values are left to the executor's compare."""

    bvt_file: bool  # cpu.bvt_warp_ns at the kubepods root
    group_identity_sysctl: int | None  # kernel.sched_group_identity_enabled; None: absent
    core_sched_sysctl: int | None  # kernel.sched_core (Anolis); None: absent
    cpu_idle: bool  # cpu.idle at the kubepods root (mainline >= 5.15, or v2)
    dangling: Mapping[K8sQoS, tuple[str, ...]] = field(default_factory=dict)  # pod dirs on disk, not in the list
    children: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # pod dir -> its subdirs (bvt only)

    @property
    def group_identity(self) -> bool:
        """bvt.go SystemSupported: the cgroup file at the kubepods root or the sysctl exists."""
        return self.bvt_file or self.group_identity_sysctl is not None

    @property
    def mechanism(self) -> Mechanism:
        if self.group_identity:
            return "group-identity"
        return "cpu-idle" if self.cpu_idle else "none"


def read_facts(state: QoSState, *, steady: SteadyFacts | None = None) -> CPUQoSFacts:
    """Probe the kernel (a few stats and two sysctl reads) and list the pod dirs on disk.

    Everything here changes only with the kernel's set-up or the pods, so with `steady` it is read once per pod or
    NodeSLO change or force-update window (koordlet.qos.steady). Raises HostReadError when a sysctl exists but
    cannot be read: upstream then does nothing (isSysctlEnabled)."""
    if steady is not None:
        return steady.get("cpuqos", lambda: read_facts(state))
    root = state.qos_dir(K8sQoS.GUARANTEED)
    bvt_file = os.path.exists(state.cgroup_file("cpu.bvt_warp_ns", root))
    cpu_idle = os.path.exists(state.cgroup_file("cpu.idle", root))
    gi = _read_sysctl(state.proc("sys", "kernel", SYSCTL_GROUP_IDENTITY))
    cs = _read_sysctl(state.proc("sys", "kernel", SYSCTL_CORE_SCHED))
    known = {p.cgroup_dir for p in state.pods}
    dangling = {qos: tuple(d for d in _pod_dirs_on_disk(state, qos) if d not in known) for qos in _KUBE_QOS}
    facts = CPUQoSFacts(bvt_file, gi, cs, cpu_idle, dangling)
    if facts.mechanism != "group-identity":
        return facts
    pod_dirs = [*known, *(d for dirs in dangling.values() for d in dirs)]
    return CPUQoSFacts(bvt_file, gi, cs, cpu_idle, dangling, {d: _subdirs(state, d) for d in pod_dirs})


def capabilities(facts: CPUQoSFacts) -> tuple[Report, ...]:
    """The mechanism as `koordlet_agent_kernel_capability{capability=cpu-qos-*}` (a missing one logs once) and a
    line naming it."""
    detail = {
        "group-identity": "group identity (cpu.bvt_warp_ns), as upstream",
        "cpu-idle": "no group identity: a class at groupIdentity -1 gets cpu.idle=1 on its pod cgroups",
        "none": "neither group identity nor cpu.idle: CPU QoS writes nothing",
    }[facts.mechanism]
    return (Capability(CAP_GROUP_IDENTITY, facts.group_identity,
                       "no cpu.bvt_warp_ns at the kubepods root and no kernel.sched_group_identity_enabled",
                       fallback=facts.cpu_idle),
            Capability(CAP_CPU_IDLE, facts.cpu_idle, "no cpu.idle at the kubepods root"),
            Notice(f"cpuqos-mechanism/{facts.mechanism}", f"CPU QoS mechanism: {detail}"))


def _read_sysctl(path: str) -> int | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            text = f.read().strip()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise HostReadError(f"{path}: {e.strerror}") from e
    if not re.fullmatch(r"-?[0-9]+", text):
        raise HostReadError(f"{path}: {text!r} is not an integer")
    return int(text)


def _cgroup_dir(state: QoSState, rel: str) -> str:
    return os.path.dirname(state.cgroup_file("cpu.shares", rel))


def _subdirs(state: QoSState, rel: str) -> tuple[str, ...]:
    try:
        with os.scandir(_cgroup_dir(state, rel)) as it:
            names = sorted(e.name for e in it if e.is_dir(follow_symlinks=False))
    except OSError:
        return ()
    return tuple(f"{rel}/{n}" for n in names)


def _pod_dirs_on_disk(state: QoSState, qos: K8sQoS) -> list[str]:
    # [quirk] upstream treats every dir one level below a kube-QoS dir as a pod dir (bvt.go ruleUpdateCb, minus the
    # QoS dirs themselves); we take only names kubelet gives pod cgroups, so nothing else in kubepods is touched.
    pattern = _POD_DIR[state.driver][qos]
    return [d for d in _subdirs(state, state.qos_dir(qos)) if pattern.fullmatch(os.path.basename(d))]


# ---- the rule ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """The parsed NodeSLO part (rule.go parseRule, coresched/rule.go)."""

    policy: str
    enable: bool  # any of LSR/LS/BE enabled under the groupIdentity policy
    pod_qos: Mapping[str, int]  # bvt by koordinator QoS label (LSE, LSR, LS, BE)
    kube_pod: Mapping[K8sQoS, int]  # bvt fallback for pods by kube QoS
    kube_dir: Mapping[K8sQoS, int]  # bvt of the kube-QoS dirs
    dir_idle: Mapping[K8sQoS, int]  # coreSched cpu.idle of the kube-QoS dirs (0 under other policies)
    core_sched_enable: bool  # any class enabled under the coreSched policy

    def host_app_value(self, qos: str) -> int:
        """rule.go getHostQOSBvtValue: the pod value of the app's class, else none (0)."""
        return self.pod_qos.get(qos, BVT_NONE)


@dataclass(frozen=True)
class _Class:
    enabled: bool
    bvt: int
    sched_idle: int


def bvt_rule(nodeslo: NodeSLOSpec) -> Rule:
    """The rule from the merged NodeSLO spec (its values were validated when it was received)."""
    strategy = nodeslo.resource_qos_strategy
    policy = strategy.policies.cpu_policy
    gi, cs = policy == CPU_POLICY_GROUP_IDENTITY, policy == CPU_POLICY_CORE_SCHED
    classes: dict[str, _Class] = {}
    for qos, block in ((QOS_LSR, strategy.lsr_class), (QOS_LS, strategy.ls_class), (QOS_BE, strategy.be_class)):
        cfg = block.cpu_qos
        # Disabled classes carry the None values (states_nodeslo.go mergeNoneCPUQOSIfDisabled); policy gates all.
        classes[qos] = _Class(
            enabled=gi and cfg.enable,
            bvt=cfg.group_identity if gi and cfg.enable else BVT_NONE,
            sched_idle=1 if cs and cfg.sched_idle == 1 else 0,
        )
    lsr, ls, be = classes[QOS_LSR], classes[QOS_LS], classes[QOS_BE]
    guaranteed_pod = lsr.bvt if lsr.enabled else ls.bvt if ls.enabled else BVT_NONE
    # coresched/rule.go: Guaranteed takes LSR's params when LSR is enabled under coreSched, else LS's.
    cs_enabled = {QOS_LSR: cs and strategy.lsr_class.cpu_qos.enable, QOS_LS: cs and strategy.ls_class.cpu_qos.enable,
                  QOS_BE: cs and strategy.be_class.cpu_qos.enable}
    return Rule(
        policy=policy,
        enable=lsr.enabled or ls.enabled or be.enabled,
        pod_qos={QOS_LSE: lsr.bvt, QOS_LSR: lsr.bvt, QOS_LS: ls.bvt, QOS_BE: be.bvt},
        kube_pod={K8sQoS.GUARANTEED: guaranteed_pod, K8sQoS.BURSTABLE: ls.bvt, K8sQoS.BESTEFFORT: be.bvt},
        # the Guaranteed dir (the kubepods root) stays 0 "until kernel supported" (rule.go)
        kube_dir={K8sQoS.GUARANTEED: BVT_NONE, K8sQoS.BURSTABLE: ls.bvt, K8sQoS.BESTEFFORT: be.bvt},
        dir_idle={K8sQoS.GUARANTEED: lsr.sched_idle if cs_enabled[QOS_LSR] else ls.sched_idle,
                  K8sQoS.BURSTABLE: ls.sched_idle, K8sQoS.BESTEFFORT: be.sched_idle},
        core_sched_enable=any(cs_enabled.values()),
    )


# ---- the pod value and its annotation -------------------------------------------------------------------------


@dataclass(frozen=True)
class CPUQoSAnnotation:
    """apis/slo/v1alpha1 CPUQOSCfg as decoded from the pod annotation; None: the key was absent or null."""

    enable: bool | None = None
    group_identity: int | None = None
    sched_idle: int | None = None
    core_expeller: bool | None = None


class AnnotationError(InvalidInput):
    """The pod's `koordinator.sh/cpuQOS` annotation is malformed; `error` is the Event to report."""

    def __init__(self, error: PlanError) -> None:
        super().__init__(f"{error.field}: {error.message}")
        self.error = error


_ANNOTATION_FIELDS: dict[str, tuple[str, type]] = {
    # Go's encoding/json matches object keys to struct fields case-insensitively.
    "enable": ("enable", bool), "groupidentity": ("groupIdentity", int),
    "schedidle": ("schedIdle", int), "coreexpeller": ("coreExpeller", bool),
}


class _Pairs(list[tuple[str, object]]):
    """A JSON object as its (key, value) pairs in document order."""


def parse_cpuqos_annotation(text: str) -> CPUQoSAnnotation:
    """Decode the annotation as Go's json.Unmarshal into CPUQOSCfg does, then check groupIdentity (pod.go).

    Raises ValueError(field, message) for invalid JSON, a wrong type or a groupIdentity outside [-1, 2]."""
    try:
        doc = json.loads(text, object_pairs_hook=_Pairs, parse_float=Decimal,
                         parse_constant=_reject_constant)
    except (ValueError, RecursionError) as e:  # RecursionError: nested deeper than the interpreter's stack
        raise ValueError("", f"invalid JSON: {e}") from None
    if doc is None:
        return CPUQoSAnnotation()  # Go: unmarshalling null into a struct is a no-op
    if not isinstance(doc, _Pairs):
        raise ValueError("", f"expected a JSON object, got {_json_type(doc)}")
    values: JSON = {}
    for key, value in doc:  # in document order: a repeated key (in any case) overwrites, as in Go
        known = _ANNOTATION_FIELDS.get(key.lower())
        if known is None:
            continue  # unknown fields are ignored
        fld, kind = known
        if value is not None and not (isinstance(value, bool) if kind is bool else _is_int(value)):
            raise ValueError(fld, f"expected {'boolean' if kind is bool else 'integer'}, got {_json_type(value)}")
        values[fld] = value
    cfg = CPUQoSAnnotation(values.get("enable"), values.get("groupIdentity"), values.get("schedIdle"),
                           values.get("coreExpeller"))
    if cfg.group_identity is not None and not BVT_MIN <= cfg.group_identity <= BVT_MAX:
        raise ValueError("groupIdentity", f"bad group identity value: {cfg.group_identity} (allowed [-1, 2])")
    return cfg


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def pod_value(rule: Rule, pod: PodView, kube_qos: K8sQoS) -> int:
    """The pod's bvt (interceptor.go SetPodBvtValue).

    By the raw `koordinator.sh/qosClass` label, else by kube QoS. For LS pods only, the annotation's groupIdentity
    overrides, and an absent or false `enable` makes it 0. Raises AnnotationError for an LS pod whose annotation is
    malformed. `kube_qos`: the pod's (the reconciler's pod list) or the one its cgroup parent names (a runtime hook)."""
    qos = koord_qos_class_of_labels(pod.labels)
    value = rule.pod_qos[qos] if qos in rule.pod_qos else rule.kube_pod.get(kube_qos, BVT_NONE)
    if qos != QOS_LS:
        # [quirk] upstream's hook parses the annotation for every pod and fails on a malformed one even where it
        # ignores the result (LSR/LSE/BE/unlabelled); we read it only where it counts.
        return value
    text = pod.annotations.get(ANNOTATION_POD_CPU_QOS)
    if text is None:
        return value
    try:
        if not isinstance(text, str):
            raise ValueError("", f"expected a string, got {_json_type(text)}")
        cfg = parse_cpuqos_annotation(text)
    except ValueError as e:
        fld, message = e.args if len(e.args) == 2 else ("", str(e))
        path = f"annotations[{ANNOTATION_POD_CPU_QOS}]" + (f".{fld}" if fld else "")
        raise AnnotationError(PlanError("Pod", f"{pod.namespace}/{pod.name}", path, message, uid=pod.uid)) from None
    if cfg.group_identity is not None:
        value = cfg.group_identity
    if not cfg.enable:
        value = BVT_NONE
    return value


def _kube_qos(pod: PodMeta) -> K8sQoS:
    # [quirk] upstream reads pod.status.qosClass and gets 0 when it is empty; PodMeta.k8s_qos falls back to the
    # class kubelet computes from the spec, which is also the dir the pod's cgroup is in.
    try:
        return K8sQoS(pod.k8s_qos)
    except ValueError:
        return K8sQoS.BESTEFFORT


# ---- the plan ---------------------------------------------------------------------------------------------------


def plan(state: QoSState, facts: CPUQoSFacts, *, group_identity: bool = True, core_sched: bool = False,
         node_name: str = "", batch_resource: bool = False) -> Plan:
    """The writes for one pass. `group_identity` / `core_sched` are upstream's feature gates GroupIdentity (on by
    default) and CoreSched (alpha, off); nothing is written before a NodeSLO was received (the rule is nil).
    `batch_resource` is gate BatchResource: a BE pod leaving idle gets its batch cpu.shares back."""
    out = Plan()
    if not state.nodeslo_present:
        return out
    rule = bvt_rule(state.nodeslo)
    if group_identity and facts.mechanism != "none":
        values = _pod_values(rule, state.pods, out)
        if facts.mechanism == "group-identity":
            _plan_bvt(state, facts, rule, values, node_name, out)
        else:
            _plan_pod_idle(state, facts, rule, values, out, batch_resource)
    if core_sched and facts.cpu_idle:
        _plan_core_sched(state, facts, rule, out)
    return out


def _pod_values(rule: Rule, pods: Iterable[PodMeta], out: Plan) -> dict[str, tuple[PodMeta, int]]:
    """cgroup dir -> (pod, bvt) for every pod that has a value; annotation errors become PlanErrors."""
    values: dict[str, tuple[PodMeta, int]] = {}
    for pod in pods:
        try:
            values[pod.cgroup_dir] = (pod, pod_value(rule, pod, _kube_qos(pod)))
        except AnnotationError as e:
            out.errors.append(e.error)
    return values


def _bvt(state: QoSState, rel: str, value: int, reason: str, level: str | None = None) -> Write:
    """`level`: upstream's reconciler level where it has one (bvt.go registers kube-QoS and pod dirs only)."""
    return Write(state.cgroup_file("cpu.bvt_warp_ns", rel), str(value), f"cpuqos: {reason} bvt={value}",
                 resource="cpu.bvt_warp_ns", level=level)


def _sysctl(state: QoSState, name: str, value: int, reason: str) -> Write:
    if value not in (0, 1):  # our own check: sysctl writes carry no cgroup resource for the executor to validate
        raise InvalidInput(f"kernel.{name} must be 0 or 1, not {value}")
    return Write(state.proc("sys", "kernel", name), str(value), f"cpuqos: {reason}")


def _plan_bvt(state: QoSState, facts: CPUQoSFacts, rule: Rule, values: Mapping[str, tuple[PodMeta, int]],
              node_name: str, out: Plan) -> None:
    """bvt.go ruleUpdateCb order: sysctls, kube-QoS dirs, pods with their container dirs, dangling pod dirs with
    theirs, host applications."""
    if rule.enable:
        # bvt.go initSysctl: core scheduling and bvt=-1 exclude each other, so sched_core goes off first.
        if facts.core_sched_sysctl is not None:
            out.writes.append(_sysctl(state, SYSCTL_CORE_SCHED, 0, "core sched off for group identity"))
        if facts.group_identity_sysctl is not None:
            out.writes.append(_sysctl(state, SYSCTL_GROUP_IDENTITY, 1, "group identity on"))
    elif facts.group_identity_sysctl == 0:
        return  # interceptor.go prepare: rule and sysctl both off, nothing to reset (an absent sysctl counts as on)
    for qos in _KUBE_QOS:
        value = rule.kube_dir[qos]
        out.writes.append(_bvt(state, state.qos_dir(qos), value, f"kube-QoS {qos.value}", "kubeqos"))
    for rel, (pod, value) in values.items():
        # Containers inherit the pod's bvt; they are written too so that disabling resets the whole subtree.
        # [quirk] upstream's rule callback ignores the annotation here (only its hook and pod reconciler apply it,
        # so the two alternate); we write the annotated value at both levels.
        who = f"pod {pod.namespace}/{pod.name}"
        out.writes.append(_bvt(state, rel, value, who, "pod"))
        out.writes.extend(_bvt(state, c, value, f"{who} container") for c in facts.children.get(rel, ()))
    for qos in _KUBE_QOS:
        dir_value = rule.kube_dir[qos]
        for rel in facts.dangling.get(qos, ()):
            out.writes.append(_bvt(state, rel, dir_value, f"dangling pod dir ({qos.value})"))
            out.writes.extend(_bvt(state, c, dir_value, "dangling pod container") for c in facts.children.get(rel, ()))
    for app in state.host_apps:
        app_value = rule.host_app_value(app.qos)
        rel_dir = _host_app_dir(app, node_name, out)
        if rel_dir is not None:
            out.writes.append(_bvt(state, rel_dir, app_value, f"host application {app.name}"))


def _host_app_dir(app: HostApp, node_name: str, out: Plan) -> str | None:
    rel = app.rel_dir.strip("/")
    if not rel or ".." in rel.split("/"):
        out.errors.append(PlanError("NodeSLO", node_name or "nodeslo", f"hostApplications[{app.name}].cgroupPath",
                                    f"cgroup dir {app.rel_dir!r} is the root or leaves the hierarchy"))
        return None
    return rel


def _plan_pod_idle(state: QoSState, facts: CPUQoSFacts, rule: Rule, values: Mapping[str, tuple[PodMeta, int]],
                   out: Plan, batch_resource: bool = False) -> None:
    """No group identity: cpu.idle=1 on the pod cgroups whose bvt is -1, 0 on the others (see the module notes).

    Only pod cgroups: a kube-QoS dir would break kubelet's cpu.shares writes, a container cgroup only competes with
    its own siblings, and host applications sit outside kubepods, so an idle flag there never meets an LS pod.
    A pod is idled only once one of its containers runs: kubelet creates the pod cgroup and then writes its
    cpu.shares, and an idle flag in between would fail that write. For the same reason a dangling pod dir (not in
    the pod list, so maybe being created) is never idled, only taken out of idle when its QoS dir's value is not -1.
    With `batch_resource` (gate BatchResource), a BE pod leaving idle gets back its batch cpu.shares, not kubelet's,
    so both features agree on the value in the very pass (koordlet/qos/batchresource.py).
    """
    for rel, (pod, value) in values.items():
        idle = 1 if value == -1 else 0
        if idle and not _idles(pod, value):
            continue
        restore = batch_pod_shares(pod) if batch_resource else None
        _idle(state, rel, idle, f"pod {pod.namespace}/{pod.name} bvt={value}",
              restore if restore is not None else _kubelet_shares(pod), out)
    for qos in _KUBE_QOS:
        dir_value = rule.kube_dir[qos]
        if dir_value == -1:
            continue
        shares = CPU_SHARES_MIN if qos is K8sQoS.BESTEFFORT else None  # kubelet's value is known for BestEffort only
        for rel in facts.dangling.get(qos, ()):
            _idle(state, rel, 0, f"dangling pod dir ({qos.value}) bvt={dir_value}", shares, out)


def _idles(pod: PodMeta, value: int) -> bool:
    """Whether the cpu-idle mechanism sets cpu.idle=1 on this pod (its bvt is -1 and a container runs)."""
    return value == -1 and any(c.running for c in pod.containers)


def idled_pods(state: QoSState, mechanism: Mechanism, *, group_identity: bool = True) -> frozenset[str]:
    """The pod cgroup dirs `plan` sets cpu.idle=1 on in this pass, by the same rule (`mechanism` is
    CPUQoSFacts.mechanism). An idle cgroup refuses cpu.shares / cpu.weight writes, so features writing pod-level
    shares (BatchResource) skip these."""
    if not state.nodeslo_present or not group_identity or mechanism != "cpu-idle":
        return frozenset()
    values = _pod_values(bvt_rule(state.nodeslo), state.pods, Plan())
    return frozenset(rel for rel, (pod, value) in values.items() if _idles(pod, value))


def _idle(state: QoSState, rel: str, idle: int, reason: str, restore_shares: int | None, out: Plan,
          level: str | None = None) -> None:
    path = state.cgroup_file("cpu.idle", rel)
    out.writes.append(Write(path, str(idle), f"cpuqos: {reason} -> cpu.idle={idle}", resource="cpu.idle",
                            level=level))
    if idle == 0 and restore_shares is not None:
        # Leaving idle resets the group's weight to 1024 (kernel sched_group_set_idle); put back kubelet's value,
        # only when the cpu.idle write above changed the file (if_changed), i.e. the cgroup was idle.
        value = restore_shares if state.cgroup_version == 1 else shares_to_weight(restore_shares)
        out.writes.append(Write(state.cgroup_file("cpu.shares", rel), str(value),
                                f"cpuqos: {reason} -> restore kubelet cpu.shares={restore_shares}",
                                resource="cpu.shares", if_changed=path))


def _plan_core_sched(state: QoSState, facts: CPUQoSFacts, rule: Rule, out: Plan) -> None:
    """core_sched.go SetKubeQOSCPUIdle: cpu.idle of each kube-QoS dir from its class's schedIdle under the coreSched
    policy, 0 under any other policy.

    [quirk] kept as upstream because it must be configured explicitly (policy coreSched, schedIdle=1, gate
    CoreSched): an idle kube-QoS dir rejects kubelet's cpu.shares writes, so kubelet fails to restart
    (koordinator-sh/koordinator#2732). Leaving idle resets the dir's shares to 1024; we restore besteffort's 2 and
    kubelet restores the others within its one-minute QoS update."""
    for qos in _KUBE_QOS:
        _idle(state, state.qos_dir(qos), rule.dir_idle[qos], f"coreSched kube-QoS {qos.value}",
              CPU_SHARES_MIN if qos is K8sQoS.BESTEFFORT else None, out, "kubeqos")
    if rule.core_sched_enable and facts.group_identity_sysctl is not None:
        # coresched initSystem: group identity off before core scheduling is used (spec §2.5)
        out.writes.append(_sysctl(state, SYSCTL_GROUP_IDENTITY, 0, "group identity off for core scheduling"))


# ---- kubelet's pod cpu.shares (pkg/kubelet/cm/helpers_linux.go ResourceConfigForPod) ---------------------------


def kubelet_pod_cpu_shares(pod: PodMeta) -> int:
    """The cpu.shares kubelet gives a pod cgroup: 2 for BestEffort, else its CPU requests in shares (min 2)."""
    if pod.k8s_qos == K8sQoS.BESTEFFORT.value:
        return CPU_SHARES_MIN
    milli = pod_cpu_request_milli(pod)
    if milli == 0:
        return CPU_SHARES_MIN
    return max(CPU_SHARES_MIN, min(CPU_SHARES_MAX, milli * 1024 // 1000))


def pod_cpu_request_milli(pod: PodMeta) -> int:
    """The pod's CPU request in milli-cores by Kubernetes' rules (apis.core.resources.pod_requests: sidecars,
    init maxima, overhead, pod-level resources). Raises QuantityError (an InvalidInput) when it cannot be read."""
    return pod_requests(pod.raw).get(CPU, 0)


def _kubelet_shares(pod: PodMeta) -> int | None:
    try:
        return kubelet_pod_cpu_shares(pod)
    except KoordletError:
        return None


# ---- helpers ----------------------------------------------------------------------------------------------------


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float | Decimal):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) and not isinstance(value, _Pairs) else "object"
