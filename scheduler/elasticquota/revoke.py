"""Over-use revoke: a quota whose used stays above its runtime gives back its least important pods.

(pkg/scheduler/plugins/elasticquota/quota_overuse_revoke.go, QuotaOverUsedRevokeController)
Runs only with `monitorAllQuotas` and `enableRuntimeQuota`. Every `revokePodInterval` each quota but the root and
the system quota is looked at; one whose used has exceeded its runtime for longer than `delayEvictTime` (without
falling back within it in between) has its pods chosen by `pods_to_revoke` and evicted.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from apis.core.metatime import parse_time
from apis.core.objects import JSON
from scheduler.cluster import Cluster, key, pod_requests
from scheduler.elasticquota.model import Resources, add, exceeded, mask, sub
from scheduler.gang.model import pod_priority


def _start(pod: JSON) -> float:
    """GetPodStartTime: status.startTime, a pod without one counting as started now."""
    when = parse_time((pod.get("status") or {}).get("startTime"))
    return when if when is not None else time.time()


def importance_order(pods: Iterable[JSON], cluster: Cluster) -> list[JSON]:
    """Least important first (!MoreImportantPod): lower priority, then, at equal priority, the later start."""
    return sorted(pods, key=lambda p: (pod_priority(p, cluster), -_start(p), key(p)))


def pods_to_revoke(used: Mapping[str, int], runtime: Mapping[str, int], pods: Iterable[JSON], cluster: Cluster,
                   non_preemptible: Callable[[JSON], bool]) -> list[JSON]:
    """getToRevokePodList: take the assigned pods, least important first and skipping non-preemptible ones, until
    used fits within runtime; when even all of them do not make it fit, all of them go. Otherwise the taken pods
    are offered back, most important first, and each one that still fits stays. As upstream, used is masked to
    the resources of the pod last taken or given back, so only those are compared from then on."""
    left: Resources = dict(used)
    taken: list[JSON] = []
    for p in importance_order(pods, cluster):
        if not exceeded(left, runtime):
            break
        if non_preemptible(p):
            continue
        req = pod_requests(p)
        left = mask(sub(left, req), req)
        taken.append(p)
    if exceeded(left, runtime):
        return taken
    revoked: list[JSON] = []
    for p in reversed(taken):
        req = pod_requests(p)
        left = mask(add(left, req), req)
        if exceeded(left, runtime):
            left = sub(left, req)
            revoked.append(p)
    return revoked


@dataclass
class _Watch:
    last_within: float  # when used was last seen within runtime


class OverUseMonitor:
    """QuotaOverUsedGroupMonitor for every quota: `due` answers the quotas over their runtime for longer than the
    delay, and starts each one's clock again (the next eviction waits another delay, as upstream)."""

    def __init__(self, delay: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.delay = delay
        self.clock = clock
        self._watches: dict[str, _Watch] = {}

    def due(self, states: Mapping[str, tuple[Resources, Resources]]) -> list[str]:
        """states: quota → (used, runtime); quotas no longer given are forgotten (syncQuota)."""
        now = self.clock()
        for gone in set(self._watches) - set(states):
            del self._watches[gone]
        out: list[str] = []
        for name in sorted(states):
            used, runtime = states[name]
            w = self._watches.setdefault(name, _Watch(now))
            if not exceeded(used, runtime):
                w.last_within = now
                continue
            if now - w.last_within > self.delay:
                w.last_within = now
                out.append(name)
        return out
