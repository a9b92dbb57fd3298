"""resctrl (Intel RDT / AMD PQoS): L3 CBM and MBA values, and the plan for the LSR/LS/BE and pod groups. The facts it
plans on (the pods' annotations decoded among them) are read by koordlet.qos.resctrl_facts; who gets a pod group when
CLOSIDs are scarce is koordlet.qos.resctrl_closids."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from apis.core.errors import InvalidInput, PlanError
from apis.extension.errors import AnnotationError
from apis.extension.resctrl import ANNOTATION_RESCTRL, ResctrlConfig
from apis.slo.types import CLASS_KEYS, ResctrlQOS
from koordlet.qos.model import Plan, Write
from koordlet.qos.resctrl_closids import Claim, granted, pod_group_slots
from koordlet.qos.resctrl_facts import (
    ACTIVE_PHASES,
    CBM_MAX_BITS,
    CLASS_GROUPS,
    POD_GROUP_PREFIX,
    GroupFacts,
    ResctrlFacts,
    Schemata,
    class_enabled,
    class_resctrl_qos,
    parse_schemata,
)
from koordlet.qos.state import QoSState
from koordlet.states.model import PodMeta

# Upstream sources: pkg/koordlet/util/system/resctrl.go (CalculateCatL3MaskValue),
# pkg/koordlet/qosmanager/plugins/resctrl/resctrl_reconcile.go (class groups, MBA, tasks),
# pkg/koordlet/util/resctrl/{resctrl.go,ctrl_mgr.go} and pkg/koordlet/runtimehooks/hooks/resctrl/* (pod groups),
# apis/extension/resctrl.go (the annotation).

INTEL = "GenuineIntel"
AMD = "AuthenticAMD"
HYGON = "HygonGenuine"
AMD_MAX_MB_GBPS = 160  # 25 GB/s × 8 × 0.8 (AMDCCDMaxMBGbps)
AMD_UNLIMITED_MB = 2048  # AMDCCDUnlimitedMB
MBA_MAX_MBPS = 2**32 - 1  # the kernel's MBA_MAX_MBPS: "unlimited" under the mba_MBps mount option
INTEL_MB_GRAN = 10  # what upstream assumes when info/MB/bandwidth_gran is not read
_TERMINATED_PHASES = ("Succeeded", "Failed")
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")

REASON_ANNOTATION = "InvalidResctrlAnnotation"
REASON_NODESLO = "InvalidResctrlQOS"
REASON_CLOSID = "ResctrlClosidExhausted"
REASON_UNAVAILABLE = "ResctrlUnavailable"


# ---- values -----------------------------------------------------------------------------------------------------


def l3_mask(cbm: int, start: int, end: int, min_bits: int = 1) -> int:
    """The ways [ceil(ways×start/100), ceil(ways×end/100)) of the root mask as a bit mask (CalculateCatL3MaskValue).

    **[quirk]** upstream returns 0 when both ends round to the same way (`7ff` with [50,52]) and never reads
    `info/L3/min_cbm_bits`; the kernel rejects both. We raise InvalidInput instead of widening the range: widening
    would silently give a class ways that the admin assigned elsewhere (BE [0,30] next to LS [30,100]), so the
    config is reported and nothing is written."""
    if cbm <= 0 or cbm >= 1 << CBM_MAX_BITS or (cbm + 1) & cbm:
        raise InvalidInput(f"cbm_mask {cbm:x} is not a contiguous block of low bits")
    if start < 0 or end > 100 or end <= start:
        raise InvalidInput(f"range [{start}, {end}] is not 0 <= start < end <= 100")
    ways = cbm.bit_length()
    # exact integer ceilings: equal to upstream's float64 math.Ceil for these magnitudes
    start_way, end_way = -(-ways * start // 100), -(-ways * end // 100)
    need = max(1, min_bits)
    if end_way - start_way < need:
        raise InvalidInput(f"range [{start}, {end}] of {ways} cache ways selects {end_way - start_way} ways "
                           f"(ways {start_way}..{end_way}); the CPU needs at least {need} (info/L3/min_cbm_bits)")
    return (1 << end_way) - (1 << start_way)


def mba_value(percent: int, vendor: str, mbps_mode: bool = False, *, gran: int | None = None,
              min_bandwidth: int | None = None, max_mbps: int | None = None) -> int:
    """The MB schemata value for a bandwidth percent (calculateMbaPercentForGroup, calculateMba).

    - Intel (and any vendor but AMD/Hygon, as upstream's class path): percent rounded up to the bandwidth
      granularity (10 unless info/MB/bandwidth_gran says otherwise), as the kernel itself would; below
      info/MB/min_bandwidth is an error (the kernel refuses it).
    - AMD (and Hygon, which the kernel drives the same way): 100 → 2048 (unlimited), else int(160×p/100).
    - mba_MBps mount: 100 → the kernel's unlimited (2^32-1); else `max_mbps`×p/100, which needs the node's
      bandwidth (`max_mbps`); upstream has no MBps mode.
    Out of [1, 100] is always an error (**[quirk]** upstream's pod path has no range check)."""
    if isinstance(percent, bool) or not isinstance(percent, int) or not 1 <= percent <= 100:
        raise InvalidInput(f"MB percent {percent} is not in [1, 100]")
    if mbps_mode:
        if percent == 100:
            return MBA_MAX_MBPS
        if not max_mbps or max_mbps <= 0:
            raise InvalidInput(f"resctrl is mounted with mba_MBps; MB {percent}% needs the node's memory "
                               "bandwidth in MBps, which is not configured")
        return max(1, max_mbps * percent // 100)
    if vendor in (AMD, HYGON):
        return AMD_UNLIMITED_MB if percent == 100 else AMD_MAX_MB_GBPS * percent // 100
    step = gran if gran and gran > 0 else INTEL_MB_GRAN
    value = -(-percent // step) * step
    if value > 100:  # only with a granularity that does not divide 100: stay within what the kernel accepts
        value = 100 // step * step
    if value < 1:
        raise InvalidInput(f"MB bandwidth_gran {step} leaves no valid value for {percent}%")
    if min_bandwidth is not None and value < min_bandwidth:
        raise InvalidInput(f"MB {percent}% is below the CPU's min_bandwidth {min_bandwidth}")
    return value


def _mb_default(facts: ResctrlFacts) -> int:
    return mba_value(100, facts.vendor, facts.mba_mbps, gran=facts.bandwidth_gran)


# ---- schemata ---------------------------------------------------------------------------------------------------


def l3_line(masks: Mapping[int, int]) -> str:
    """`L3:0=3f;1=3f;\\n`: ids ascending, lowercase hex; the trailing `;` is upstream's and the kernel ignores it."""
    return "L3:" + "".join(f"{i}={masks[i]:x};" for i in sorted(masks)) + "\n"


def mb_line(values: Mapping[int, int]) -> str:
    return "MB:" + "".join(f"{i}={values[i]};" for i in sorted(values)) + "\n"


def format_schemata(s: Schemata) -> str:
    """The L3 line (when any) followed by the MB line (when any), as a pod group receives them."""
    return (l3_line(s.l3) if s.l3 else "") + (mb_line(s.mb) if s.mb else "")


def pod_schemata(cfg: ResctrlConfig, facts: ResctrlFacts, *,
                 max_mbps: int | None = None) -> tuple[dict[int, int] | None, dict[int, int] | None]:
    """The (L3, MB) a pod's group should hold; None = the annotation does not set that resource.

    As RDTEngine.ParseSchemata: the global value goes to every cache id, then per-cache entries override it.
    Differences: a per-cache id the node does not have is an error (upstream drops the whole L3 line, or writes
    an MB line the kernel refuses); ids without any value get the unrestricted value (full mask, unlimited MB)
    instead of upstream's 0, which made the whole line invalid and silently unwritten. MB is left out when the
    root schemata has no MB line (MBA disabled)."""
    ids = facts.cache_ids
    l3: dict[int, int] | None = None
    if cfg.llc_range is not None or cfg.llc_per_cache:
        l3 = {}
        base = cfg.llc_range
        for i in ids:
            l3[i] = _mask_for(facts, base, "llc.schemata.range") if base else facts.cbm_mask
        for n, (cache_id, rng) in enumerate(cfg.llc_per_cache):
            if cache_id not in ids:
                raise AnnotationError(f"llc.schemataPerCache[{n}].cacheID",
                                      f"cache id {cache_id} is not one of this node's {list(ids)}")
            l3[cache_id] = _mask_for(facts, rng, f"llc.schemataPerCache[{n}].range")
    mb: dict[int, int] | None = None
    if facts.has_mb and (cfg.mb_percent is not None or cfg.mb_per_cache):
        mb = {}
        for i in ids:
            mb[i] = _mb_for(facts, cfg.mb_percent, "mb.schemata.percent", max_mbps) if cfg.mb_percent \
                else _mb_default(facts)
        for n, (cache_id, percent) in enumerate(cfg.mb_per_cache):
            if cache_id not in ids:
                raise AnnotationError(f"mb.schemataPerCache[{n}].cacheID",
                                      f"cache id {cache_id} is not one of this node's {list(ids)}")
            mb[cache_id] = _mb_for(facts, percent, f"mb.schemataPerCache[{n}].percent", max_mbps)
    return l3, mb


def _mask_for(facts: ResctrlFacts, rng: tuple[int, int], path: str) -> int:
    try:
        return l3_mask(facts.cbm_mask, rng[0], rng[1], facts.min_cbm_bits)
    except InvalidInput as e:
        raise AnnotationError(path, str(e)) from None


def _mb_for(facts: ResctrlFacts, percent: int, path: str, max_mbps: int | None) -> int:
    try:
        return mba_value(percent, facts.vendor, facts.mba_mbps, gran=facts.bandwidth_gran,
                         min_bandwidth=facts.min_bandwidth, max_mbps=max_mbps)
    except InvalidInput as e:
        raise AnnotationError(path, str(e)) from None


# ---- the plan ---------------------------------------------------------------------------------------------------


def _class_group(koord_qos: str) -> str | None:
    return {"LSE": "LSR", "LSR": "LSR", "LS": "LS", "BE": "BE"}.get(koord_qos)  # SYSTEM/None stay in the root


class _Closids:
    """Free CLOSIDs: num_closids minus the root group and every control group present, plus those this plan
    removes first."""

    def __init__(self, facts: ResctrlFacts) -> None:
        self.total = facts.num_closids
        self.free = None if facts.num_closids is None else facts.num_closids - 1 - len(facts.ctrl_groups)

    def take(self) -> bool:
        if self.free is None:
            return True
        if self.free <= 0:
            return False
        self.free -= 1
        return True

    def release(self) -> None:
        if self.free is not None:
            self.free += 1

    def message(self, group: str) -> str:
        return (f"cannot create resctrl group {group}: the CPU has {self.total} CLOSIDs and all are in use "
                "(the root group counts as one)")


def _differs(current: Mapping[int, int], desired: Mapping[int, int]) -> bool:
    return {i: current.get(i) for i in desired} != dict(desired)


def _schemata_writes(state: QoSState, group: GroupFacts | None, name: str, l3: Mapping[int, int] | None,
                     mb: Mapping[int, int] | None, reason: str, level: str | None = None) -> list[Write]:
    """One write per line (the kernel keeps the resources a write does not name, resctrl_updater.go), only for a
    line that differs from the group's current schemata; compare="always" because the executor cannot parse
    schemata (the kernel right-aligns names and drops the trailing `;`)."""
    current = parse_schemata(group.schemata) if group else None
    path = state.resctrl(name, "schemata")
    out = []
    if l3 and (current is None or _differs(current.l3, l3)):
        out.append(Write(path, l3_line(l3), f"{reason}/l3", op="write", compare="always", level=level))
    if mb and (current is None or _differs(current.mb, mb)):
        out.append(Write(path, mb_line(mb), f"{reason}/mb", op="write", compare="always", level=level))
    return out


def _tids_write(state: QoSState, name: str, tids: Iterable[int], reason: str, level: str | None = None) -> list[Write]:
    """resctrl_updater.go UpdateResctrlTasksFunc: ascending, one write() per id (the executor's `tids` op)."""
    ids = sorted(set(tids))
    if not ids:
        return []
    return [Write(state.resctrl(name, "tasks"), " ".join(map(str, ids)), f"{reason}/tasks", op="tids",
                  compare="always", level=level)]


def plan(state: QoSState, facts: ResctrlFacts, *, pod_level: bool, node_name: str = "",
         max_mbps: int | None = None) -> Plan:
    """Writes that bring the class groups (LSR, LS, BE) and, when `pod_level`, the `koordlet-<uid>` groups to the
    merged NodeSLO and the pods' annotations; PlanErrors for what cannot be applied, and for each pod refused a
    group of its own (REASON_CLOSID: the CPU's CLOSIDs went to pods of higher priority, koordlet.qos.resctrl_closids).

    Derived from `facts` only (groups, schemata and tasks on disk, the decoded annotations), so a restarted agent
    makes the same plan: no in-memory registry as upstream's RDTEngine. Order: pod groups that go are removed first
    (their CLOSIDs become free), then the class groups, then the pod groups. A second pass over an unchanged node
    writes nothing. `max_mbps` is the node's memory bandwidth, needed only under the mba_MBps mount option."""
    out = Plan()
    annotated = [p for p in state.pods if p.uid in facts.requests] if pod_level else []
    if facts.supported and not facts.mounted and (state.nodeslo_present or annotated):
        # upstream CheckAndTryEnableResctrlCat: mount resctrl when the CPU has it; groups follow next pass
        out.writes.append(Write(state.resctrl(), "resctrl", "resctrl/mount", op="mount"))
        return out
    if not (facts.supported and facts.mounted):
        for pod in annotated:
            if pod.phase not in _TERMINATED_PHASES:
                out.errors.append(_pod_error(pod, "", "this node has no usable resctrl (cat_l3 and mba CPU flags "
                                                 "and a resctrl mount are required)", REASON_UNAVAILABLE))
        return out
    problem = _root_problem(facts)
    if problem:
        out.errors.append(PlanError("Node", node_name, "resctrl", problem, REASON_UNAVAILABLE))
        return out
    closids = _Closids(facts)
    targets = _class_targets(state, facts, node_name, out) if state.nodeslo_present else {}
    pods = _pod_groups(state, facts, annotated, targets, max_mbps) if pod_level else _PodGroups()
    out.writes += pods.removals
    for _ in pods.removals:
        closids.release()
    if state.nodeslo_present:  # upstream skips the class reconcile without a NodeSLO
        out.extend(_class_plan(state, facts, node_name, closids, targets, pods.own))
    for pod in annotated:  # in the pods' order: each pod's error or its group's writes
        if pod.uid in pods.errors:
            out.errors.append(pods.errors[pod.uid])
        elif pod.uid in pods.granted:
            out.extend(_pod_plan(state, facts, pods.granted[pod.uid], closids))
    return out


def _root_problem(facts: ResctrlFacts) -> str | None:
    if facts.cbm_mask <= 0 or (facts.cbm_mask + 1) & facts.cbm_mask:
        return f"info/L3/cbm_mask {facts.cbm_mask:x} is missing or not a contiguous block of low bits"
    if not facts.cache_ids:
        return "the root schemata has no L3 line (is CDP enabled?)"
    return None


# ---- the class groups -------------------------------------------------------------------------------------------


def _class_targets(state: QoSState, facts: ResctrlFacts, node_name: str,
                   out: Plan) -> dict[str, tuple[dict[int, int] | None, dict[int, int] | None]]:
    """Each class's L3 and MB per cache id from the NodeSLO (None where it sets none); a class whose values cannot
    be applied is left out, with a PlanError naming the field in `out`."""
    targets = {}
    for cls in CLASS_GROUPS:
        base = f"resourceQOSStrategy.{CLASS_KEYS[cls]}.resctrlQOS"
        try:
            targets[cls] = _class_schemata(class_resctrl_qos(state, cls), facts, base)
        except AnnotationError as e:
            out.errors.append(PlanError("NodeSLO", node_name, e.path, e.message, REASON_NODESLO))
    return targets


def _class_plan(state: QoSState, facts: ResctrlFacts, node_name: str, closids: _Closids,
                targets: Mapping[str, tuple[dict[int, int] | None, dict[int, int] | None]],
                own: set[str]) -> Plan:
    """ResctrlReconcile: mkdir, the L3 line and the MB line per class, then the enabled classes' new task ids.

    A class whose NodeSLO values cannot be applied (not in `targets`) is skipped entirely: no group, schemata or
    tasks. The pods in `own` have a group of their own; every other pod of an enabled class goes to its class
    group, annotated or not (**[quirk]** upstream leaves every annotated pod out, so a pod refused a group, or with
    a malformed annotation, stayed in the root group: a BE pod escaped its class's limits by asking for more)."""
    out = Plan()
    usable: set[str] = set()
    for cls in CLASS_GROUPS:
        if cls not in targets:
            continue
        l3, mb = targets[cls]
        group = facts.groups.get(cls)
        if group is None:
            if not closids.take():
                out.errors.append(PlanError("Node", node_name, f"resctrl/{cls}", closids.message(cls),
                                            REASON_CLOSID))
                continue
            out.writes.append(Write(state.resctrl(cls), "", f"resctrl/class/{cls}/group", op="mkdir"))
        out.writes += _schemata_writes(state, group, cls, l3, mb, f"resctrl/class/{cls}")
        usable.add(cls)

    new: dict[str, set[int]] = {cls: set() for cls in CLASS_GROUPS}
    for pod in state.pods:
        target = _class_group(pod.koord_qos)
        if (target is None or target not in usable or pod.uid in own or pod.phase not in ACTIVE_PHASES
                or not class_enabled(state, pod.koord_qos)):
            continue
        group = facts.groups.get(target)
        new[target] |= facts.pod_tids.get(pod.uid, frozenset()) - (group.tasks if group else frozenset())
    for cls in CLASS_GROUPS:
        out.writes += _tids_write(state, cls, new[cls], f"resctrl/class/{cls}")
    return out


def _class_schemata(cfg: ResctrlQOS, facts: ResctrlFacts,
                    base: str) -> tuple[dict[int, int] | None, dict[int, int] | None]:
    """The class's L3 masks and MB values (mbaPercent not 0), per cache id.

    **[quirk]** upstream writes `L3:0=0;..` for a range that selects no way and silently skips an mbaPercent
    out of (0, 100]; both are reported here (0 stays "no MB write", as upstream)."""
    start, end, percent = cfg.cat_range_start_percent, cfg.cat_range_end_percent, cfg.mba_percent
    try:
        mask = l3_mask(facts.cbm_mask, start, end, facts.min_cbm_bits)
    except InvalidInput as e:
        raise AnnotationError(f"{base}.catRangeStartPercent", str(e)) from None
    l3 = {i: mask for i in facts.cache_ids}
    mb = None
    if facts.has_mb and percent != 0:
        try:
            value = mba_value(percent, facts.vendor, facts.mba_mbps, gran=facts.bandwidth_gran,
                              min_bandwidth=facts.min_bandwidth)
        except InvalidInput as e:
            raise AnnotationError(f"{base}.mbaPercent", str(e)) from None
        mb = {i: value for i in facts.cache_ids}
    return l3, mb


# ---- the pod groups ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Wanted:
    """A pod's group as its annotation wants it: L3 and MB per cache id, None where the annotation sets none."""

    claim: Claim
    l3: dict[int, int] | None
    mb: dict[int, int] | None


@dataclass
class _PodGroups:
    """Which pods have a group of their own after this pass, and what goes."""

    granted: dict[str, _Wanted] = field(default_factory=dict)  # uid → its group (kept or new)
    removals: list[Write] = field(default_factory=list)  # rmdir: gone, same as the class, or given up
    errors: dict[str, PlanError] = field(default_factory=dict)  # uid → its bad annotation or refusal
    own: set[str] = field(default_factory=set)  # uids whose threads stay out of the class groups


def _pod_groups(state: QoSState, facts: ResctrlFacts, annotated: list[PodMeta],
                targets: Mapping[str, tuple[dict[int, int] | None, dict[int, int] | None]],
                max_mbps: int | None) -> _PodGroups:
    """Decide the pod groups: which annotations ask for something of their own, who gets a CLOSID, what is removed.

    - A malformed annotation is that pod's PlanError; a group it already has is left as it is (never removed for
      that, its threads stay there).
    - An annotation that asks for exactly what the pod has without a group of its own (its class group's L3 and
      MB when the NodeSLO enables resctrl for its class, else the unrestricted root) gets no group: a CLOSID spent
      on it would change nothing.
    - The others claim a CLOSID, granted by priority (koordlet.qos.resctrl_closids); a claim refused is a PlanError
      (REASON_CLOSID), and a group taken from its pod for one of higher priority is removed.
    - A group whose pod is gone, terminated, no longer annotated or asks for nothing of its own is removed once it
      is GROUP_EXPIRATION_SECONDS old (**[quirk]** upstream keeps its engine's entry forever); the kernel moves its
      tasks to the root group, and the class reconcile moves them on to the class group."""
    out = _PodGroups()
    wanted: dict[str, _Wanted] = {}  # uid → what its group should hold
    same: dict[str, PodMeta] = {}  # group name → its pod, whose annotation asks for nothing of its own
    kept: set[str] = set()  # groups left as they are for pods that are not claims
    for pod in annotated:
        if pod.phase in _TERMINATED_PHASES:
            continue
        name = POD_GROUP_PREFIX + pod.uid
        try:
            l3, mb = _asked(facts, pod, max_mbps)
        except AnnotationError as e:
            out.errors[pod.uid] = _pod_error(pod, e.path, e.message, REASON_ANNOTATION)
            if name in facts.groups:
                kept.add(name)
                out.own.add(pod.uid)
            continue
        if _same_as_without(state, facts, pod, targets, l3, mb):
            same[name] = pod
            continue
        group = facts.groups.get(name)
        wanted[pod.uid] = _Wanted(Claim(pod, group is not None, group is not None and group.young), l3, mb)

    for name, group in sorted(facts.groups.items()):
        if not name.startswith(POD_GROUP_PREFIX) or name in kept or name[len(POD_GROUP_PREFIX):] in wanted:
            continue
        if group.young:
            kept.add(name)  # the runtime hook may be ahead of the pod list: removed once it is old enough
            continue
        owner = same.get(name)
        reason = f"resctrl/pod-gone/{name[len(POD_GROUP_PREFIX):]}" if owner is None else \
            f"resctrl/pod-same-as-without/{owner.namespace}/{owner.name}"
        out.removals.append(Write(state.resctrl(name), "", reason, op="rmdir"))

    slots = pod_group_slots(facts)
    winners = granted((w.claim for w in wanted.values()), None if slots is None else slots - len(kept))
    for uid, want in wanted.items():
        pod = want.claim.pod
        if uid in winners:
            out.granted[uid] = want
            out.own.add(uid)
            continue
        if want.claim.holds:
            out.removals.append(Write(state.resctrl(POD_GROUP_PREFIX + uid), "",
                                      f"resctrl/pod-refused/{pod.namespace}/{pod.name}", op="rmdir"))
        message = _refusal(facts, slots, want.claim.holds, _where_without(state, pod, targets))
        out.errors[uid] = _pod_error(pod, "", message, REASON_CLOSID)
    return out


def _asked(facts: ResctrlFacts, pod: PodMeta, max_mbps: int | None) -> tuple[dict[int, int] | None,
                                                                            dict[int, int] | None]:
    """The L3 and MB the pod's decoded annotation asks for; AnnotationError when it cannot be applied."""
    if not _SAFE_NAME.fullmatch(pod.uid):
        raise AnnotationError("", f"pod uid {pod.uid!r} cannot name a resctrl group")
    request = facts.requests[pod.uid]
    if request.error is not None:
        raise request.error
    return pod_schemata(request.config or ResctrlConfig(), facts, max_mbps=max_mbps)


def _same_as_without(state: QoSState, facts: ResctrlFacts, pod: PodMeta,
                     targets: Mapping[str, tuple[dict[int, int] | None, dict[int, int] | None]],
                     l3: dict[int, int] | None, mb: dict[int, int] | None) -> bool:
    """Whether the group the annotation asks for holds what the pod's threads have without one: what the
    annotation leaves out is unrestricted in a group of its own, as in the root group."""
    full_l3 = {i: facts.cbm_mask for i in facts.cache_ids}
    full_mb = {i: _mb_default(facts) for i in facts.cache_ids} if facts.has_mb else None
    base_l3, base_mb = full_l3, full_mb
    target = _class_group(pod.koord_qos)
    if target is not None and target in targets and class_enabled(state, pod.koord_qos):
        cls_l3, cls_mb = targets[target]
        group = facts.groups.get(target)
        current = parse_schemata(group.schemata) if group else Schemata()  # a new group: the kernel's defaults
        base_l3 = cls_l3 or {i: current.l3.get(i, full) for i, full in full_l3.items()}
        if full_mb is not None:
            base_mb = cls_mb or {i: current.mb.get(i, full) for i, full in full_mb.items()}
    return (l3 or full_l3, mb or full_mb) == (base_l3, base_mb)


def _where_without(state: QoSState, pod: PodMeta,
                   targets: Mapping[str, tuple[dict[int, int] | None, dict[int, int] | None]]) -> str:
    target = _class_group(pod.koord_qos)
    if target is not None and target in targets and class_enabled(state, pod.koord_qos):
        return f"its class group {target}"
    return "the root group"


def _refusal(facts: ResctrlFacts, slots: int | None, held: bool, where: str) -> str:
    head = "its resctrl group is removed" if held else "no resctrl group of its own"
    return (f"{head}: the CPU has {facts.num_closids} CLOSIDs, of which the root group, the class groups LSR/LS/BE "
            f"and any other group keep all but {slots} for pod groups, and those went to pods ahead of it "
            f"(LSE/LSR/LS before BE, running before pending, then the oldest); its threads go to {where}")


def _pod_error(pod: PodMeta, path: str, message: str, reason: str) -> PlanError:
    where = f"annotations[{ANNOTATION_RESCTRL}]" + (f".{path}" if path else "")
    return PlanError("Pod", f"{pod.namespace}/{pod.name}", where, message, reason, uid=pod.uid)


def _pod_plan(state: QoSState, facts: ResctrlFacts, want: _Wanted, closids: _Closids) -> Plan:
    """The runtime hook `Resctrl` as a reconcile: group `koordlet-<uid>`, its schemata and the pod's new task ids.

    **[quirk]** upstream never rewrites an existing group's schemata when the annotation changes (the engine only
    updates its memory); here the schemata on disk is compared with the annotation on every pass, so a change is
    re-applied, and a resource the annotation no longer sets goes back to unrestricted. **[quirk]** upstream's
    tasks reconciler also tries an empty schemata write; nothing of the kind is emitted here."""
    out = Plan()
    pod = want.claim.pod
    name = POD_GROUP_PREFIX + pod.uid
    l3, mb = want.l3, want.mb
    group = facts.groups.get(name)
    if group is None:
        if not closids.take():  # not expected: the claims granted fit the CLOSIDs left (a safety net)
            out.errors.append(_pod_error(pod, "", closids.message(name), REASON_CLOSID))
            return out
        out.writes.append(Write(state.resctrl(name), "", f"resctrl/pod/{pod.namespace}/{pod.name}/group",
                                op="mkdir"))
    else:
        # an existing group is compared in full: what the annotation does not set must be unrestricted
        l3 = l3 or {i: facts.cbm_mask for i in facts.cache_ids}
        mb = mb or ({i: _mb_default(facts) for i in facts.cache_ids} if facts.has_mb else None)
    reason = f"resctrl/pod/{pod.namespace}/{pod.name}"
    # upstream's hook registers pod-level reconcilers for both (hooks/resctrl/resctrl.go)
    out.writes += _schemata_writes(state, group, name, l3, mb, reason, "pod")
    tids = facts.pod_tids.get(pod.uid, frozenset()) - (group.tasks if group else frozenset())
    out.writes += _tids_write(state, name, tids, reason, "pod")
    return out
