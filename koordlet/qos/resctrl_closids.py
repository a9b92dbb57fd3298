"""Which annotated pods get a resctrl group of their own when CLOSIDs are scarce: by priority, holders kept.

A CPU has 8 to 16 CLOSIDs (info/L3/num_closids, and info/MB/num_closids when MBA is on: the kernel uses the
smaller). The root group holds one, the class groups koordlet keeps (LSR, LS, BE) one each whether or not they
exist yet, and every other control group on the mount one; what is left is for the `koordlet-<uid>` pod groups.
Upstream hands them out first come, first served (pkg/koordlet/runtimehooks/hooks/resctrl and
pkg/koordlet/util/resctrl: the engine's mkdir fails once the kernel has none left), so any pods with the annotation
can take them all and a latency-sensitive pod that comes later gets none. Here they go by priority:

1. the QoS class: LSE, LSR and LS first, then pods of no class (SYSTEM, none), then BE;
2. the phase: Running before Pending;
3. a pod that holds its group already before one that does not (no churn: a group is not taken from its pod
   for an equal claim);
4. the oldest pod first (metadata.creationTimestamp, unknown last), then the uid: a stable order.

A group younger than GROUP_EXPIRATION_SECONDS is never taken away (the runtime hook may have just created it for a
container that is starting); it keeps its CLOSID until it is old enough, so its pod is served first.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable
from dataclasses import dataclass

from koordlet.qos.resctrl_facts import CLASS_GROUPS, POD_GROUP_PREFIX, ResctrlFacts
from koordlet.states.model import PodMeta

LATENCY_SENSITIVE = ("LSE", "LSR", "LS")
BEST_EFFORT = "BE"


@dataclass(frozen=True)
class Claim:
    """An annotated pod whose annotation asks for a group of its own (it differs from what its class gives it)."""

    pod: PodMeta
    holds: bool = False  # its group is on disk
    young: bool = False  # ... and younger than GROUP_EXPIRATION_SECONDS: it cannot be taken away yet


def pod_group_slots(facts: ResctrlFacts) -> int | None:
    """How many `koordlet-<uid>` groups the CPU's CLOSIDs allow; None when num_closids is unknown (no limit)."""
    if facts.num_closids is None:
        return None
    others = {g for g in facts.ctrl_groups if not g.startswith(POD_GROUP_PREFIX)} | set(CLASS_GROUPS)
    return max(0, facts.num_closids - 1 - len(others))  # 1: the root group


def priority(claim: Claim) -> tuple[int, int, int, float, str]:
    """The claim's place in line (smaller first): class, phase, holding, age, uid."""
    pod = claim.pod
    tier = 0 if pod.koord_qos in LATENCY_SENSITIVE else 2 if pod.koord_qos == BEST_EFFORT else 1
    return (tier, 0 if pod.phase == "Running" else 1, 0 if claim.holds else 1, created(pod), pod.uid)


def granted(claims: Iterable[Claim], slots: int | None) -> set[str]:
    """The uids of the claims that get (or keep) a group: the young holders, then the others in priority order
    while `slots` (what the CPU leaves for pod groups, minus groups kept for pods that are not claims) lasts."""
    ordered = sorted(claims, key=priority)
    if slots is None:
        return {c.pod.uid for c in ordered}
    out = {c.pod.uid for c in ordered if c.holds and c.young}
    left = slots - len(out)
    for c in ordered:
        if left <= 0:
            break
        if c.pod.uid not in out:
            out.add(c.pod.uid)
            left -= 1
    return out


def created(pod: PodMeta) -> float:
    """metadata.creationTimestamp as a Unix time; +inf when absent or not RFC 3339 (such pods go last)."""
    meta = pod.raw.get("metadata") if isinstance(pod.raw, dict) else None
    text = meta.get("creationTimestamp") if isinstance(meta, dict) else None
    if not isinstance(text, str):
        return math.inf
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        return math.inf
    return (when if when.tzinfo else when.replace(tzinfo=dt.UTC)).timestamp()
