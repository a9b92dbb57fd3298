"""Runtime hook `Resctrl` (feature gate Resctrl, off by default): a resctrl group per annotated pod.

Upstream: pkg/koordlet/runtimehooks/hooks/resctrl/{resctrl.go,rule.go,updater.go}, pkg/koordlet/util/resctrl
(spec §1.8). The annotation `node.koordinator.sh/resctrl` is decoded by koordlet.qos.resctrl_facts
(`decode_resctrl`) and turned into schemata by koordlet.qos.resctrl (`pod_schemata`), the same code the pod-level
reconciler uses, so the §1.9 worked example gives `L3:0=8;1=1f8;` and `MB:0=80;1=40;` here too.

- RunPodSandbox: a Plan, in order: mkdir `<resctrl>/koordlet-<uid>` (when the facts do not list it; refused when
  no CLOSID is free), then the schemata, one write per resource line (the kernel keeps what a write does not name;
  the executor writes one line per write). Nothing for a pod without the annotation.
- CreateContainer: `rdt_class = koordlet-<uid>` when the pod has the annotation and its group exists. The facts
  know the groups present when they were read, plus those a plan created since (NodeFactsReader.observe); a group
  they do not know asks for one refresh, and if it is still missing the container gets no RDT class (the runtime
  would refuse to create a container whose class does not exist).
- RemovePodSandbox: rmdir `<resctrl>/koordlet-<uid>` (the kernel moves its tasks to the root group).

Facts come from NodeFactsReader: the CPU's flags and the mount's cache ids and cbm are read once, not per call.
Upstream's engine registry (its quirks 1-3 in §1.8) does not exist here: the reconciler in koordlet.qos.resctrl
compares the groups on disk with the annotations on every pass.
"""

from __future__ import annotations

from apis.extension.errors import AnnotationError
from apis.extension.resctrl import ANNOTATION_RESCTRL, decode_resctrl
from koordlet.nri.hooks.context import SAFE_NAME, FactMissing, HookCall, HookInputError, annotation_field
from koordlet.nri.hooks.model import FACT_RESCTRL, Adjustment, HookResult
from koordlet.qos.model import Plan, Write
from koordlet.qos.resctrl import l3_line, mb_line, pod_schemata
from koordlet.qos.resctrl_facts import POD_GROUP_PREFIX

HOOK_NAME = "Resctrl"
GATE = "Resctrl"


def group_name(uid: str) -> str:
    return POD_GROUP_PREFIX + uid


def _group(call: HookCall) -> str:
    if not SAFE_NAME.fullmatch(call.pod.uid):
        raise HookInputError("metadata.uid", f"{call.pod.uid!r} cannot name a resctrl group")
    return group_name(call.pod.uid)


def run_pod_sandbox(call: HookCall) -> HookResult:
    text = call.pod.annotations.get(ANNOTATION_RESCTRL)
    if text is None:
        return HookResult()
    facts, where = call.facts, annotation_field(ANNOTATION_RESCTRL)
    rf = facts.resctrl
    if not rf.supported:
        raise HookInputError(where, "this node has no resctrl: the CPU flags lack cat_l3 or mba")
    if not rf.mounted:
        raise FactMissing(FACT_RESCTRL, where, f"resctrl is not mounted at {facts.paths.resctrl()}")
    if rf.cbm_mask <= 0 or (rf.cbm_mask + 1) & rf.cbm_mask or not rf.cache_ids:
        raise HookInputError(where, "the resctrl root is unusable: no contiguous info/L3/cbm_mask or no L3 line in "
                                    "its schemata")
    name = _group(call)
    try:
        l3, mb = pod_schemata(decode_resctrl(text), rf)
    except AnnotationError as e:
        raise HookInputError(annotation_field(ANNOTATION_RESCTRL, e.path), e.message) from None
    reason = f"runtime hook {HOOK_NAME}: pod {call.pod.key}"
    writes: list[Write] = []
    if name not in facts.resctrl_groups:
        if rf.num_closids is not None and rf.num_closids - 1 - len(facts.resctrl_groups) <= 0:
            raise HookInputError(where, f"cannot create resctrl group {name}: the CPU has {rf.num_closids} CLOSIDs "
                                        "and all are in use (the root group counts as one)")
        writes.append(Write(facts.paths.resctrl(name), "", f"{reason} group", op="mkdir"))
    schemata = facts.paths.resctrl(name, "schemata")
    if l3:
        writes.append(Write(schemata, l3_line(l3), f"{reason} l3", compare="always"))
    if mb:
        writes.append(Write(schemata, mb_line(mb), f"{reason} mb", compare="always"))
    return HookResult(plan=Plan(writes=writes))


def create_container(call: HookCall) -> HookResult:
    if ANNOTATION_RESCTRL not in call.pod.annotations:
        return HookResult()
    name = _group(call)
    facts = call.facts
    if name in facts.resctrl_groups:
        return HookResult(adjustment=Adjustment(rdt_class=name))
    if not facts.resctrl_usable:
        return HookResult()  # reported at RunPodSandbox; no group can exist
    raise FactMissing(FACT_RESCTRL, annotation_field(ANNOTATION_RESCTRL),
                      f"resctrl group {name} does not exist, so the container gets no RDT class")


def remove_pod_sandbox(call: HookCall) -> HookResult:
    facts = call.facts
    if not facts.resctrl_usable:
        return HookResult()
    if ANNOTATION_RESCTRL not in call.pod.annotations and group_name(call.pod.uid) not in facts.resctrl_groups:
        return HookResult()
    name = _group(call)
    write = Write(facts.paths.resctrl(name), "", f"runtime hook {HOOK_NAME}: pod {call.pod.key} removed",
                  op="rmdir")
    return HookResult(plan=Plan(writes=[write]))
