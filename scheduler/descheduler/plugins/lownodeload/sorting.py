"""The order of source nodes and of a source's pods (upstream pkg/descheduler/utils/sorter: pod.go, scorer.go;
loadaware sortNodesByUsage, sortPodsOnOneOverloadedNode).

Upstream sorts with Go's unstable sort; here the sorts are stable, so full ties keep their input order.
"""

from __future__ import annotations

from collections.abc import Mapping

from apis.core import podmeta
from apis.core.metatime import parse_time
from apis.core.objects import JSON
from apis.core.qos import K8S_BEST_EFFORT, K8S_BURSTABLE, K8S_GUARANTEED, k8s_qos_class
from apis.extension.descheduling import eviction_cost
from apis.extension.priority import (
    PRIORITY_BATCH,
    PRIORITY_FREE,
    PRIORITY_MID,
    PRIORITY_NONE,
    PRIORITY_PROD,
    priority_class_with_default,
)
from apis.extension.qos import QOS_BE, QOS_LS, QOS_LSE, QOS_LSR, QOS_NONE, QOS_SYSTEM, koord_qos_class_with_default
from scheduler.cluster import key
from scheduler.descheduler.plugins.lownodeload.usage import NodeUsage

_KOORD_PRIORITY_RANK = {PRIORITY_NONE: 5, PRIORITY_PROD: 4, PRIORITY_MID: 3, PRIORITY_BATCH: 2, PRIORITY_FREE: 1}
_KOORD_QOS_RANK = {QOS_NONE: 5, QOS_SYSTEM: 4, QOS_LSE: 4, QOS_LSR: 3, QOS_LS: 2, QOS_BE: 1}
_K8S_QOS_RANK = {K8S_GUARANTEED: 3, K8S_BURSTABLE: 2, K8S_BEST_EFFORT: 1}


def node_score(usage: Mapping[str, int], capacity: Mapping[str, int], weights: Mapping[str, int]) -> int:
    """ResourceUsageScorer: Σ w·min(used, cap)·1000/cap ÷ Σ w over the usage's resources (cap 0 scores 0; a
    resource without a weight weighs 0)."""
    score = weight_sum = 0
    for r, used in usage.items():
        w = weights.get(r, 0)
        cap = capacity.get(r, 0)
        score += (_go_div(min(used, cap) * 1000, cap) if cap else 0) * w
        weight_sum += w
    return _go_div(score, weight_sum) if weight_sum else 0


def _go_div(a: int, b: int) -> int:
    """Go's integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def pod_score(pod_usage: Mapping[str, int], excess: Mapping[str, int], weights: Mapping[str, int]) -> float:
    """ResourceUsageScorerPod, "segmented": per resource of the pod's metric r = usage/excess scores r below 1,
    1 + 1/r from 1 (a pod just covering the excess scores 2), 0 where there is no excess; weighted mean."""
    score = 0.0
    weight_sum = 0
    for r, used in pod_usage.items():
        w = weights.get(r, 0)
        cap = excess.get(r, 0)
        if cap:
            ratio = used / cap
            score += (1 / ratio + 1 if ratio >= 1 else ratio) * w
        weight_sum += w
    return score / weight_sum if weight_sum else 0.0


def sort_pods(pods: list[JSON], excess: Mapping[str, int], metrics: Mapping[str, Mapping[str, int]],
              weights: Mapping[str, int]) -> list[JSON]:
    """PodSorter ascending by koord priority class, spec.priority, kube QoS, koord QoS, deletion cost, eviction
    cost; then the usage score descending (pods without a metric after those with one); then newest first."""
    def sort_key(pod: JSON) -> tuple[object, ...]:
        metric = metrics.get(key(pod))
        usage_key = (0, -pod_score(metric, excess, weights)) if metric is not None else (1, 0.0)
        created = parse_time((pod.get("metadata") or {}).get("creationTimestamp"))
        return (_KOORD_PRIORITY_RANK.get(priority_class_with_default(pod), 0), podmeta.priority(pod) or 0,
                _K8S_QOS_RANK.get(k8s_qos_class(pod), 0), _KOORD_QOS_RANK.get(koord_qos_class_with_default(pod), 0),
                podmeta.deletion_cost(pod), eviction_cost(podmeta.pod_annotations(pod)), *usage_key,
                -created if created is not None else float("inf"))
    return sorted(pods, key=sort_key)


def excess_and_weights(usage: Mapping[str, int], high: Mapping[str, int], resource_weights: Mapping[str, int]
                       ) -> tuple[dict[str, int], dict[str, int]]:
    """Only the resources above their high threshold weigh (their resourceWeights, 0 if unlisted); the excess is
    usage − threshold."""
    over = {r: usage[r] for r, t in high.items() if r in usage and usage[r] > t}
    return {r: v - high[r] for r, v in over.items()}, {r: resource_weights.get(r, 0) for r in over}




def sort_nodes(nodes: list[NodeUsage], weights: Mapping[str, int], prod: bool) -> list[NodeUsage]:
    """sortNodesByUsage: by node_score of the usage (prod: prod usage) over the capacity, highest first."""
    return sorted(nodes, key=lambda n: -node_score(n.prod_usage if prod else n.usage, n.capacity, weights))
